//! Reads for the snapshot and detail views. Every query here goes through an index: the done
//! rows of a large ledger are never scanned.
use super::db::{args, DbResult, Optional, Tx};
use super::detail::{event_row, run_cols, run_row, EVENT_COLS};
use super::rows::{overlap_of, ApprovalView, JobRow, JobSettings, OpenEffect, Reading, Window};
use super::schedulers::read_schedulers;
use super::{int, text, text_or_empty, word, Store, RELEASED};
use crate::state::{ApprovalState, EventKind, FiringState};
use crate::time::{self, Ts};
use crate::Result;
use std::collections::BTreeMap;

use super::windows::{Kept, RUN_WINDOW_DAYS};
const EVENTS_SHOWN: usize = 300;
const OPEN_SHOWN: usize = 1000;

/// `claimed` rows whose claiming token's lease expired or was superseded, not waiting for a
/// person and not handed back by an operator: reserved, then abandoned.
const LEAKED: &str = "FROM effect_ledger e WHERE e.state IN ('claimed', 'submitted', 'unknown')
    AND e.state = 'claimed' AND e.resolved_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM exactly_approvals a WHERE a.effect_key = e.effect_key
                    AND a.state IN ('pending', 'approved'))
    AND NOT EXISTS (SELECT 1 FROM job_lease l WHERE l.job_key = e.job_key AND l.lease_until > ?1
                    AND (e.fencing_token IS NULL OR l.fencing_token = e.fencing_token))";

/// Open effects: `unknown`, and `submitted` whose holder's lease is gone (in-flight sends of a
/// live lease are not unknown yet).
const OPEN: &str = "FROM effect_ledger e WHERE e.state IN ('claimed', 'submitted', 'unknown')
    AND (e.state = 'unknown' OR (e.state = 'submitted'
    AND NOT EXISTS (SELECT 1 FROM job_lease l WHERE l.job_key = e.job_key AND l.lease_until > ?1
                    AND (e.fencing_token IS NULL OR l.fencing_token = e.fencing_token))))";

fn count(tx: &Tx<'_>, sql: &str, p: &[super::db::Arg<'_>]) -> DbResult<u64> {
    tx.one(sql, p, |r| r.get::<i64>(0)).map(|n| n.max(0) as u64)
}

fn counter(tx: &Tx<'_>, kind: EventKind) -> DbResult<u64> {
    count(
        tx,
        "SELECT CAST(coalesce(sum(n), 0) AS BIGINT) FROM exactly_counters WHERE kind = ?1",
        args![kind],
    )
}

/// Events of `kind` since `from`: only for the kinds `exactly_events_windowed` holds (another
/// kind would count nothing).
fn since(tx: &Tx<'_>, kind: EventKind, from: &str) -> DbResult<u64> {
    debug_assert!(matches!(
        kind,
        EventKind::DuplicateSuppressed | EventKind::FencedWrite
    ));
    count(
        tx,
        "SELECT count(*) FROM exactly_events
         WHERE kind IN ('duplicate_suppressed', 'fenced_write') AND kind = ?1 AND at >= ?2",
        args![kind, from],
    )
}

impl Store {
    /// Reads everything the dashboard and `status` show, in one short read transaction, as at
    /// `now` (the caller's clock). A scheduler silent for `dead_after` is not alive.
    pub(crate) fn reading(&mut self, now: Ts, dead_after: std::time::Duration) -> Result<Reading> {
        let caller_now = time::fmt(now);
        let db = self.path.clone();
        let mut kept = self.kept.take().unwrap_or_default();
        // On PostgreSQL rows are not numbered in commit order: see `windows::LATE_ROWS`.
        kept.polls += 1;
        if self.is_pg() && kept.polls > super::windows::FRESH_EVERY {
            kept = Kept::default();
        }
        let snap = self.read(|tx| {
            // Ages are measured on the database's clock (the server's, on PostgreSQL).
            let now_s = tx.now(&caller_now).to_string();
            let now = time::parse(&now_s).unwrap_or(now);
            let day_ago = time::fmt(now - chrono::Duration::hours(24));
            let unknown = tx.rows(
                &format!(
                    "SELECT e.effect_key, e.job_key, e.state, e.updated_at, e.terms_shown, \
                         e.verdict, e.fencing_token
                     {OPEN} ORDER BY e.updated_at, e.effect_key LIMIT {OPEN_SHOWN}"
                ),
                args![&now_s],
                |r| {
                    let since = text_or_empty(r, 3)?;
                    Ok(OpenEffect {
                        effect_key: text_or_empty(r, 0)?,
                        job_key: text_or_empty(r, 1)?,
                        state: word(r, 2)?,
                        age_s: time::parse(&since)
                            .map(|t| time::age_s(t, now))
                            .unwrap_or(0),
                        since,
                        terms_shown: text(r, 4)?,
                        verdict: text(r, 5)?,
                        fencing_token: int(r, 6)?,
                    })
                },
            )?;
            // The open list, when it is whole, already holds what the two counts would count.
            let whole = unknown.len() < OPEN_SHOWN;
            // Both leaked counts from one walk of the claimed rows.
            let (leaked, leaked_24h) = tx.one(
                &format!(
                    "SELECT count(*), CAST(coalesce(sum(CASE WHEN e.updated_at >= ?2 THEN 1 \
                          ELSE 0 END), 0) AS BIGINT) {LEAKED}"
                ),
                args![&now_s, &day_ago],
                |r| {
                    Ok((
                        r.get::<i64>(0)?.max(0) as u64,
                        r.get::<i64>(1)?.max(0) as u64,
                    ))
                },
            )?;
            let totals = Window {
                duplicates_suppressed: counter(tx, EventKind::DuplicateSuppressed)?,
                fenced_writes: counter(tx, EventKind::FencedWrite)?,
                claimed_never_submitted: leaked,
                unknown: if whole {
                    unknown.len() as u64
                } else {
                    count(tx, &format!("SELECT count(*) {OPEN}"), args![&now_s])?
                },
                pending_approvals: count(
                    tx,
                    "SELECT count(*) FROM exactly_approvals \
                                              WHERE state = 'pending'",
                    &[],
                )?,
                unused_approvals: count(
                    tx,
                    "SELECT count(*) FROM exactly_approvals \
                                             WHERE state = 'approved'",
                    &[],
                )?,
            };
            let last_24h = Window {
                duplicates_suppressed: since(tx, EventKind::DuplicateSuppressed, &day_ago)?,
                fenced_writes: since(tx, EventKind::FencedWrite, &day_ago)?,
                claimed_never_submitted: leaked_24h,
                unknown: if whole {
                    unknown.iter().filter(|u| u.since >= day_ago).count() as u64
                } else {
                    count(
                        tx,
                        &format!("SELECT count(*) {OPEN} AND e.updated_at >= ?2"),
                        args![&now_s, &day_ago],
                    )?
                },
                pending_approvals: count(
                    tx,
                    "SELECT count(*) FROM exactly_approvals WHERE state = \
                                              'pending' AND requested_at >= ?1",
                    args![&day_ago],
                )?,
                unused_approvals: count(
                    tx,
                    "SELECT count(*) FROM exactly_approvals WHERE state = \
                                             'approved' AND requested_at >= ?1",
                    args![&day_ago],
                )?,
            };
            let oldest_unknown_s = unknown.iter().map(|u| u.age_s).max();
            let approvals = |state: ApprovalState| -> DbResult<Vec<ApprovalView>> {
                let rows = tx.rows(
                    &format!(
                        "SELECT {} FROM exactly_approvals WHERE state = ?1 ORDER BY requested_at \
                         LIMIT {OPEN_SHOWN}",
                        super::approval::APPROVAL_COLS
                    ),
                    args![state],
                    super::approval::approval_row,
                )?;
                Ok(rows
                    .into_iter()
                    .map(|a| ApprovalView::from_row(a, now))
                    .collect())
            };
            let pending_approvals = approvals(ApprovalState::Pending)?;
            let unused_approvals = approvals(ApprovalState::Approved)?;
            let events = tx.rows(
                &format!(
                    "SELECT {EVENT_COLS} FROM exactly_events ORDER BY id DESC \
                          LIMIT {EVENTS_SHOWN}"
                ),
                &[],
                event_row,
            )?;
            let jobs = read_jobs(tx, now, &mut kept)?;
            let missed_recorded = counter(tx, EventKind::FiringMissed)?;
            let schema_version = super::prepare::version(tx)?;
            let schedulers = read_schedulers(tx, now, dead_after)?;
            let host_clashes_24h = count(
                tx,
                "SELECT count(*) FROM exactly_events WHERE kind = 'host_clash' AND at >= ?1",
                args![&day_ago],
            )?;
            Ok(Reading {
                taken_at: now_s.clone(),
                db: db.clone(),
                schema_version,
                schedulers,
                totals,
                last_24h,
                oldest_unknown_s,
                missed_recorded,
                jobs,
                unknown,
                pending_approvals,
                unused_approvals,
                events,
                host_clashes_24h,
            })
        });
        // A failed read may have left the cache half-synced: start it afresh next time.
        if snap.is_ok() {
            self.kept = Some(kept);
        }
        snap
    }

    /// SQLite's `PRAGMA data_version`: changes when another connection commits to the
    /// database, so a reader can tell that nothing changed without reading anything. PostgreSQL
    /// has no such number: there it changes every time, and a reader always reads.
    pub(crate) fn data_version(&mut self) -> Result<i64> {
        if self.is_pg() {
            static ASKED: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
            return Ok(ASKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        // Cached: a dashboard asks every second, and preparing costs more than the answer.
        let v = self
            .lite()
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut st| st.query_row([], |r| r.get(0)));
        v.map_err(|e| self.err(e.into()))
    }
}

/// The ledger and event queries whose cost must not grow with history: each must be an index
/// search (the plan tests check it, on SQLite and on a million rows on PostgreSQL). Each takes
/// one text parameter, `?1`.
fn indexed_queries() -> Vec<String> {
    vec![
        format!("SELECT count(*) {LEAKED}"),
        format!("SELECT count(*) {OPEN}"),
        format!(
            "SELECT e.effect_key {OPEN} ORDER BY e.updated_at, e.effect_key LIMIT {OPEN_SHOWN}"
        ),
        "SELECT count(*) FROM exactly_events
         WHERE kind IN ('duplicate_suppressed', 'fenced_write') AND kind = ?1 AND at >= ?1"
            .to_string(),
        format!(
            "SELECT state FROM effect_ledger WHERE job_key = ?1 AND {}",
            super::detail::JOB_OPEN
        ),
    ]
}

impl Store {
    /// Each of `indexed_queries` with its plan, as the database explains it (SQLite's
    /// `EXPLAIN QUERY PLAN` details; PostgreSQL's `EXPLAIN` lines).
    pub fn plans(&mut self) -> Result<Vec<(String, Vec<String>)>> {
        let pg = self.is_pg();
        let mut out = Vec::new();
        for q in indexed_queries() {
            let plan = self.read(|tx| {
                let p = args!["x"];
                if pg {
                    tx.rows(&format!("EXPLAIN {q}"), p, |r| r.get::<String>(0))
                } else {
                    tx.rows(&format!("EXPLAIN QUERY PLAN {q}"), p, |r| {
                        r.get::<String>(3)
                    })
                }
            })?;
            out.push((q, plan));
        }
        Ok(out)
    }
}

/// `(job_key, kind) → n` for the counters of the kinds in `[from, to)`.
fn counters_by_job(
    tx: &Tx<'_>,
    from: &str,
    to: &str,
) -> DbResult<BTreeMap<String, Vec<(String, i64)>>> {
    let mut out: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    tx.each(
        "SELECT job_key, kind, n FROM exactly_counters WHERE kind >= ?1 AND kind < ?2",
        args![from, to],
        |r| {
            let (job, k, n) = (
                text_or_empty(r, 0)?,
                text_or_empty(r, 1)?,
                int(r, 2)?.unwrap_or(0),
            );
            out.entry(job).or_default().push((k, n));
            Ok(())
        },
    )?;
    Ok(out)
}

/// `job_key → n` for the counter of one kind.
fn counter_by_job(tx: &Tx<'_>, kind: EventKind) -> DbResult<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    tx.each(
        "SELECT job_key, n FROM exactly_counters WHERE kind = ?1",
        args![kind],
        |r| {
            out.insert(text_or_empty(r, 0)?, int(r, 1)?.unwrap_or(0).max(0) as u64);
            Ok(())
        },
    )?;
    Ok(out)
}

/// A job's `run_duration:` counters as counts per bucket of [`RUN_BUCKETS_MS`] (then one for
/// longer runs) and the sum of durations. A bucket word this build does not know counts as
/// longer, so the count stays whole.
fn duration_counts(counters: &[(String, i64)]) -> (Vec<u64>, u64) {
    use super::rows::RUN_BUCKETS_MS;
    let mut counts = vec![0u64; RUN_BUCKETS_MS.len() + 1];
    let mut sum_ms = 0;
    for (kind, n) in counters {
        let n = (*n).max(0) as u64;
        let word = kind.trim_start_matches(super::schema::RUN_DURATION);
        if word == "sum_ms" {
            sum_ms = n;
        } else if let Some(le) = word.strip_prefix("le:") {
            let i = le
                .parse::<i64>()
                .ok()
                .and_then(|ms| RUN_BUCKETS_MS.iter().position(|b| *b == ms))
                .unwrap_or(RUN_BUCKETS_MS.len());
            counts[i] += n;
        }
    }
    (counts, sum_ms)
}

/// One job's firings as the dashboard shows them.
#[derive(Debug, Clone, Default)]
struct FiringFigures {
    queued: u64,
    gave_up: u64,
    retry: u64,
    /// A waiting retry's own reason (its firing's detail).
    retry_detail: Option<String>,
}

fn read_jobs(tx: &Tx<'_>, now: Ts, kept: &mut Kept) -> DbResult<Vec<JobRow>> {
    let Kept {
        runs: windows,
        slots,
        ..
    } = kept;
    let mut jobs: BTreeMap<String, JobRow> = BTreeMap::new();
    let rows = tx.rows(
        "SELECT job_key, schedule, interval_s, lease_s, overlap, queue_cap, paused, \
             pause_note, retired,
            lease_ms, timezone, catchup_s, dst_repeated, dst_skipped, conflict_owner, \
                conflict_source, owner, source, updated_at
         FROM exactly_jobs",
        &[],
        |r| {
            Ok((
                JobRow {
                    job_key: text_or_empty(r, 0)?,
                    settings: JobSettings {
                        schedule: text(r, 1)?,
                        timezone: text(r, 10)?,
                        interval_s: int(r, 2)?,
                        lease_s: int(r, 3)?,
                        lease_ms: int(r, 9)?.or(int(r, 3)?.map(|s| s.saturating_mul(1000))),
                        overlap: overlap_of(text(r, 4)?, int(r, 5)?),
                        queue_cap: int(r, 5)?,
                    },
                    // A job a scheduler registered (from a jobs file: it has a schedule or
                    // an interval) runs under the scheduler's heartbeat; a row made by a
                    // pause alone is no registration.
                    lease_renewed: text(r, 1)?.is_some() || int(r, 2)?.is_some(),
                    paused: int(r, 6)?.unwrap_or(0) != 0,
                    pause_note: text(r, 7)?,
                    retired: int(r, 8)?.unwrap_or(0) != 0,
                    dst_policy: (text(r, 12)?, text(r, 13)?),
                    replaced: match text(r, 14)? {
                        Some(owner) => Some(super::rows::Replaced {
                            owner,
                            source: text(r, 15)?,
                            by: text(r, 16)?,
                            by_source: text(r, 17)?,
                            at: text(r, 18)?,
                        }),
                        None => None,
                    },
                    ..Default::default()
                },
                int(r, 11)?.unwrap_or(0),
            ))
        },
    )?;
    for (mut j, c) in rows {
        j.catchup_s = c;
        jobs.insert(j.job_key.clone(), j);
    }
    // Jobs known only from the seed's lease table (CLI wrappers, other programs) show too.
    let leases = tx.rows(
        "SELECT job_key, owner, fencing_token, lease_until FROM job_lease",
        &[],
        |r| {
            Ok((
                text_or_empty(r, 0)?,
                text_or_empty(r, 1)?,
                int(r, 2)?,
                text_or_empty(r, 3)?,
            ))
        },
    )?;
    for (job, owner, token, until) in leases {
        let j = jobs.entry(job.clone()).or_insert_with(|| JobRow {
            job_key: job,
            ..Default::default()
        });
        j.fencing_token = token;
        if until != RELEASED {
            j.lease_left_s = time::parse(&until).map(|t| (t - now).num_seconds());
            j.lease_owner = Some(owner);
            j.lease_until = Some(until);
        }
    }
    let oldest = time::fmt(now - chrono::Duration::days(RUN_WINDOW_DAYS));
    windows.sync(tx, &oldest)?;
    // Per-job counters, each kind read once for all jobs (not once per job).
    let prefix = super::schema::RUN_ENDED;
    let ended = counters_by_job(tx, prefix, &format!("{};", prefix.trim_end_matches(':')))?;
    let durations = super::schema::RUN_DURATION;
    let durations = counters_by_job(
        tx,
        durations,
        &format!("{};", durations.trim_end_matches(':')),
    )?;
    let missed = counter_by_job(tx, EventKind::FiringMissed)?;
    let dups = counter_by_job(tx, EventKind::DuplicateSuppressed)?;
    let fenced = counter_by_job(tx, EventKind::FencedWrite)?;
    let sum = |m: &BTreeMap<String, u64>, job: &str| m.get(job).copied().unwrap_or(0);
    // Asked only when the kept window (every run started since `oldest`) holds no success: so
    // only the runs before it can, and a job that never succeeded costs one index seek, not a
    // walk over all its recent runs.
    let success_sql = "SELECT ended_at FROM exactly_runs WHERE job_key = ?1 AND started_at < ?2 \
                           AND outcome = 'ok'
         ORDER BY started_at DESC LIMIT 1";
    // A job's failed runs since its newest `ok` run, from the table.
    let failed_sql = "SELECT count(*) FROM exactly_runs WHERE job_key = ?1 \
                          AND outcome IN ('failed', 'timeout') AND started_at > coalesce(
           (SELECT max(started_at) FROM exactly_runs WHERE job_key = ?1 AND outcome = 'ok'), '')";
    let run_cols = run_cols(tx)?;
    let last_sql = format!(
        "SELECT {run_cols} FROM exactly_runs WHERE job_key = ?1 ORDER BY started_at DESC LIMIT 1"
    );
    // Each job's latest slot, kept between polls (a seek into the firings' key for a job not
    // seen before), and the few firings waiting or stuck across all jobs (one range of the
    // state index).
    slots.sync(tx)?;
    let mut firings: BTreeMap<String, FiringFigures> = BTreeMap::new();
    tx.each(
        "SELECT job_key, state, count(*), max(detail) FROM exactly_firings
         WHERE state IN ('queued', 'gave_up', 'retry') GROUP BY state, job_key",
        &[],
        |r| {
            let (job, state, n) = (
                text_or_empty(r, 0)?,
                word::<FiringState>(r, 1)?,
                int(r, 2)?.unwrap_or(0).max(0) as u64,
            );
            let f = firings.entry(job).or_default();
            match state {
                FiringState::Queued => f.queued = n,
                FiringState::GaveUp => f.gave_up = n,
                _ => (f.retry, f.retry_detail) = (n, text(r, 3)?),
            }
            Ok(())
        },
    )?;
    let holds = super::holds::unrenewed_holds(tx, &oldest)?;
    for j in jobs.values_mut() {
        if let Some((held, lease)) = holds.get(&j.job_key).filter(|_| !j.lease_renewed) {
            j.hold_p99_ms = time::percentiles(held).1;
            j.hold_lease_ms = Some((*lease).max(0) as u64);
        }
        (j.runs, j.runs_failed, j.p50_ms, j.p99_ms, j.durations_ms) = windows.figures(&j.job_key);
        let lags = windows.lags(&j.job_key);
        (j.start_lag_p50_ms, j.start_lag_p99_ms, j.renewal_gap_max_ms) = (
            lags.start_lag_p50_ms,
            lags.start_lag_p99_ms,
            lags.renewal_gap_max_ms,
        );
        j.consecutive_failures = windows.failing_streak(&j.job_key);
        j.paused_reason = j.pause_note.clone().filter(|_| j.paused);
        // The kept window answers for jobs that ran this week; the others ask the table.
        j.last_run = match windows.last_run(&j.job_key, tx)? {
            Some(r) => Some(r),
            None => tx.one(&last_sql, args![&j.job_key], run_row).optional()?,
        };
        let failed_since_ok = windows.failed_since_ok(&j.job_key);
        j.last_success_at = match windows.last_success(&j.job_key) {
            Some(at) => at,
            None => tx
                .one(success_sql, args![&j.job_key, &oldest], |r| text(r, 0))
                .optional()?
                .flatten(),
        };
        j.failed_since_ok = match failed_since_ok {
            Some(n) => n,
            // Asked only of a job with no run this week that failed or succeeded (a weekly job
            // whose run is under way): its runs before the window.
            None => tx
                .one(failed_sql, args![&j.job_key], |r| int(r, 0))?
                .unwrap_or(0)
                .max(0) as u64,
        };
        // 'run_ended:' .. 'run_ended;' is every kind with that prefix (';' follows ':').
        for (k, n) in ended.get(&j.job_key).into_iter().flatten() {
            let outcome = k.trim_start_matches(prefix).to_string();
            j.runs_by_outcome.insert(outcome, (*n).max(0) as u64);
        }
        (j.run_duration_counts, j.run_duration_sum_ms) =
            duration_counts(durations.get(&j.job_key).map(Vec::as_slice).unwrap_or(&[]));
        j.missed_recorded = sum(&missed, &j.job_key);
        // The latest slot any scheduler fired (or the last run's): where the schedule goes on
        // from. What that means (the next firing, slots passed unfired) is the domain's
        // (`snapshot::plan`). A job known only by its lease has no schedule.
        if j.settings.schedule.is_some() && !j.retired {
            j.last_slot = slots
                .latest(&j.job_key, tx)?
                .or_else(|| j.last_run.as_ref().map(|r| r.scheduled_at.clone()));
        }
        j.duplicates_suppressed = sum(&dups, &j.job_key);
        j.fenced_writes = sum(&fenced, &j.job_key);
        // A job known only by its lease has no firings.
        let f = firings.get(&j.job_key).cloned().unwrap_or_default();
        j.queue_depth = f.queued;
        (j.firings_gave_up, j.firings_need_retry) = (f.gave_up, f.retry);
        j.retry_detail = f.retry_detail;
    }
    Ok(jobs.into_values().collect())
}

#[cfg(test)]
pub(super) mod tests {
    /// A snapshot as the dashboard takes one, now.
    pub(in crate::store) fn snap(store: &mut super::Store) -> crate::snapshot::Snapshot {
        let reading = store
            .reading(crate::time::now(), crate::jobs::SCHEDULER_DEAD_AFTER)
            .unwrap();
        crate::snapshot::Snapshot::from_reading(reading, "test", crate::jobs::SCHEDULER_DEAD_AFTER)
    }

    /// A job's failing episode, as every reader sees it: a run under way, a killed run or one
    /// waiting for approval never ends it, only an `ok` run does; a weekly job whose only run
    /// this week is under way keeps the episode its older runs opened; the key names the last
    /// success before the failures.
    #[test]
    fn a_failing_episode_ends_only_with_a_success() {
        use crate::snapshot::JobState;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.db");
        let path = path.to_str().unwrap();
        drop(super::Store::open(path).unwrap());
        let raw = rusqlite::Connection::open(path).unwrap();
        let now = crate::time::now();
        let at = |h: i64| crate::time::fmt(now - chrono::Duration::hours(h));
        raw.execute(
            "INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, overlap, \
             updated_at) VALUES ('d', 'every 1h', 3600, 60, 'coalesce', ?1), \
             ('w', 'every 7d', 604800, 60, 'coalesce', ?1)",
            [at(0)],
        )
        .unwrap();
        let run = |job: &str, id: &str, h: i64, outcome: Option<&str>| {
            let ended = outcome.map(|_| at(h));
            let ms = outcome.map(|_| 1000);
            raw.execute(
                "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
                 started_at, ended_at, outcome, duration_ms) VALUES (?1, ?2, ?3, 's', 1, ?3, ?4, \
                 ?5, ?6)",
                rusqlite::params![id, job, at(h), ended, outcome, ms],
            )
            .unwrap();
        };
        let job = |store: &mut super::Store, key: &str| {
            snap(store)
                .jobs
                .into_iter()
                .find(|j| j.job_key == key)
                .unwrap()
        };
        run("d", "d1", 10, Some("ok"));
        run("d", "d2", 9, Some("failed"));
        run("d", "d3", 8, Some("killed"));
        run("d", "d4", 7, Some("awaiting_approval"));
        run("d", "d5", 6, Some("timeout"));
        run("d", "d6", 5, None);
        // A weekly job: it failed 8 and 15 days ago; this week's only run is under way.
        run("w", "w1", 24 * 22, Some("ok"));
        run("w", "w2", 24 * 15, Some("failed"));
        run("w", "w3", 24 * 8, Some("failed"));
        run("w", "w4", 1, None);
        let mut store = super::Store::open(path).unwrap();
        let d = job(&mut store, "d");
        assert_eq!(d.state(), JobState::Running);
        let ok_at = d.last_success_at.clone().unwrap();
        assert_eq!(
            d.failing_episode(),
            Some((format!("d@after-ok:{ok_at}"), 2))
        );
        let w = job(&mut store, "w");
        assert_eq!(w.state(), JobState::Running);
        assert_eq!(w.failing_episode().map(|e| e.1), Some(2));
        raw.execute(
            "UPDATE exactly_runs SET ended_at = ?1, outcome = 'awaiting_approval', \
             duration_ms = 5 WHERE run_id = 'd6'",
            [at(0)],
        )
        .unwrap();
        let d = job(&mut store, "d");
        assert_eq!(d.state(), JobState::AwaitingApproval);
        assert_eq!(d.state().label(), "waiting for approval");
        assert!(d.failing_episode().is_some());
        run("d", "d7", 0, Some("ok"));
        let d = job(&mut store, "d");
        assert_eq!((d.state(), d.failing_episode()), (JobState::Ok, None));
    }

    /// Duplicates suppressed and fenced writes: all time from the counters, last 24 h from the
    /// events (through the partial index that holds only those two kinds).
    #[test]
    fn windowed_counts_count_their_kind_in_the_last_day() {
        use super::super::{record_event, NewEvent};
        use crate::state::EventKind;
        let dir = tempfile::tempdir().unwrap();
        let mut store = super::Store::open(dir.path().join("c.db").to_str().unwrap()).unwrap();
        let now = crate::time::now();
        let at = |h: i64| crate::time::fmt(now - chrono::Duration::hours(h));
        let (today, old) = (at(1), at(48));
        store
            .write(|tx| {
                for (kind, when) in [
                    (EventKind::DuplicateSuppressed, &today),
                    (EventKind::DuplicateSuppressed, &today),
                    (EventKind::DuplicateSuppressed, &old),
                    (EventKind::FencedWrite, &today),
                    (EventKind::FencedWrite, &old),
                    (EventKind::EffectDone, &today),
                ] {
                    record_event(tx, &NewEvent::new(kind, when).job("j"))?;
                }
                Ok(())
            })
            .unwrap();
        let snap = store
            .reading(now, crate::jobs::SCHEDULER_DEAD_AFTER)
            .map(|r| {
                crate::snapshot::Snapshot::from_reading(
                    r,
                    "test",
                    crate::jobs::SCHEDULER_DEAD_AFTER,
                )
            })
            .unwrap();
        let t = &snap.totals;
        let d = &snap.last_24h;
        assert_eq!((t.duplicates_suppressed, t.fenced_writes), (3, 2));
        assert_eq!((d.duplicates_suppressed, d.fenced_writes), (2, 1));
    }

    /// The leaked counts agree with the ledger; the unknown counts (all time and last 24h) agree
    /// with the ledger whether the open list holds every open effect (the counts come from it) or
    /// only the first [`super::OPEN_SHOWN`].
    #[test]
    fn unknown_counts_agree_with_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.db");
        let path = path.to_str().unwrap();
        drop(super::Store::open(path).unwrap());
        let mut raw = rusqlite::Connection::open(path).unwrap();
        let now = crate::time::now();
        let at = |h: i64| crate::time::fmt(now - chrono::Duration::hours(h));
        let mut add = |n: usize, state: &str, hours_ago: i64| {
            let tx = raw.transaction().unwrap();
            for i in 0..n {
                tx.execute(
                    "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
                       created_at, updated_at) VALUES (?1, 'j', 'r', 1, ?2, ?3, ?3)",
                    rusqlite::params![format!("{state}-{hours_ago}-{i}"), state, at(hours_ago)],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        };
        // Open: 3 unknown today, 2 unknown two days ago, 1 submitted with no live lease.
        add(3, "unknown", 1);
        add(2, "unknown", 48);
        add(1, "submitted", 2);
        add(4, "done", 1);
        // Leaked (claimed, no live lease): 2 today, 1 two days ago.
        add(2, "claimed", 1);
        add(1, "claimed", 48);
        let check = |expect: (u64, u64), listed: usize| {
            let snap = super::Store::open_read_only(path)
                .unwrap()
                .reading(now, crate::jobs::SCHEDULER_DEAD_AFTER)
                .map(|r| {
                    crate::snapshot::Snapshot::from_reading(
                        r,
                        "test",
                        crate::jobs::SCHEDULER_DEAD_AFTER,
                    )
                })
                .unwrap();
            assert_eq!((snap.totals.unknown, snap.last_24h.unknown), expect);
            assert_eq!(snap.unknown.len(), listed);
            let leaked = (
                snap.totals.claimed_never_submitted,
                snap.last_24h.claimed_never_submitted,
            );
            assert_eq!(leaked, (3, 2));
        };
        check((6, 4), 6);
        // More open effects than the list shows: the counts still count all of them.
        add(super::OPEN_SHOWN, "unknown", 30);
        check((6 + super::OPEN_SHOWN as u64, 4), super::OPEN_SHOWN);
    }

    /// The snapshot's ledger queries must stay index searches: a scan of the done rows would
    /// make the dashboard's poll cost grow with the ledger's whole history.
    #[test]
    fn snapshot_queries_never_scan_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = super::Store::open(dir.path().join("q.db").to_str().unwrap()).unwrap();
        for (q, plan) in store.plans().unwrap() {
            assert!(plan.iter().all(|p| !p.starts_with("SCAN")), "{q}: {plan:?}");
            // The ledger's rows are found through the open-effects index alone (a query that
            // does not repeat its term would fall back to a scan, or to the primary key).
            if q.contains("FROM exactly_events") {
                assert!(
                    plan.iter()
                        .any(|p| p.contains("INDEX exactly_events_windowed")),
                    "{q}: {plan:?}"
                );
            }
            if q.contains("FROM effect_ledger") {
                assert!(
                    plan.iter()
                        .any(|p| p.contains("USING INDEX effect_ledger_open")
                            || p.contains("USING COVERING INDEX effect_ledger_open")),
                    "{q}: {plan:?}"
                );
            }
        }
    }
}

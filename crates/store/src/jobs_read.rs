//! Each job's row of the snapshot: its settings, lease, newest run, window figures, firings
//! waiting or stuck, counters and failing episode (`read.rs` reads the rest of the snapshot).
use super::db::{args, DbResult, Optional, Tx};
use super::detail::{run_cols, run_row};
use super::rows::{overlap_of, time_in, JobFacts, JobSettings};
use super::windows::{Kept, Schedules, RUN_WINDOW_DAYS};
use super::{int, text, text_or_empty, word, RELEASED};
use exactly_words::state::{EventKind, FiringState, RunOutcome};
use exactly_words::time::{self, Ts};
use std::collections::BTreeMap;

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

/// A job's newest success before the kept window. Asked only when the window (every run
/// started since `?2`) holds no success: so only the runs before it can, and a job that never
/// succeeded costs one index seek, not a walk over all its recent runs.
const LAST_SUCCESS_SQL: &str = "SELECT ended_at FROM exactly_runs WHERE job_key = ?1 \
     AND started_at < ?2 AND outcome = 'ok' ORDER BY started_at DESC LIMIT 1";

/// A job's failed runs since its newest `ok` run, from the table.
const FAILED_SINCE_OK_SQL: &str = "SELECT count(*) FROM exactly_runs WHERE job_key = ?1 \
     AND outcome IN ('failed', 'timeout') AND started_at > coalesce(
       (SELECT max(started_at) FROM exactly_runs WHERE job_key = ?1 AND outcome = 'ok'), '')";

pub(super) fn read_jobs(tx: &Tx<'_>, now: Ts, kept: &mut Kept) -> DbResult<Vec<JobFacts>> {
    let Kept {
        runs: windows,
        slots,
        schedules,
        ..
    } = kept;
    let mut jobs = registered(tx, schedules)?;
    add_leases(tx, now, &mut jobs)?;
    let oldest_ts = now - chrono::Duration::days(RUN_WINDOW_DAYS);
    let oldest = time::fmt(oldest_ts);
    windows.sync(tx, oldest_ts)?;
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
    let run_cols = run_cols(tx)?;
    let last_sql = format!(
        "SELECT {run_cols} FROM exactly_runs WHERE job_key = ?1 AND started_at <= ?2 \
         ORDER BY started_at DESC LIMIT 1"
    );
    let now_text = time::fmt(now);
    // Each job's latest slot, kept between polls (a seek into the firings' key for a job not
    // seen before), and the few firings waiting or stuck across all jobs (one range of the
    // state index).
    slots.sync(tx)?;
    let firings = firing_figures(tx)?;
    let holds = super::holds::unrenewed_holds(tx, &oldest)?;
    for j in jobs.values_mut() {
        let key = j.job_key.to_string();
        if let Some((held, lease)) = holds.get(&key).filter(|_| !j.lease_renewed) {
            j.hold_p99_ms = time::percentiles(held).1;
            j.hold_lease_ms = Some((*lease).max(0) as u64);
        }
        (j.runs, j.runs_failed, j.p50_ms, j.p99_ms, j.durations_ms) = windows.figures(&key);
        let lags = windows.lags(&key);
        (j.start_lag_p50_ms, j.start_lag_p99_ms, j.renewal_gap_max_ms) = (
            lags.start_lag_p50_ms,
            lags.start_lag_p99_ms,
            lags.renewal_gap_max_ms,
        );
        j.consecutive_failures = windows.failing_streak(&key);
        j.paused_reason = j.pause_note.clone().filter(|_| j.paused);
        // The kept window answers for jobs that ran this week; the others ask the table.
        // Its newest run whose recorded start has come (one decided ahead of its slot waits).
        j.run_pending = windows.run_pending(&key, now);
        j.last_run = match windows.last_run(&key, now, tx)? {
            Some(r) => Some(r),
            None => tx
                .one(&last_sql, args![&key, &now_text], run_row)
                .optional()?,
        };
        let failed_since_ok = windows.failed_since_ok(&key);
        j.last_success_at = last_success(tx, windows, &key, &oldest)?;
        j.failed_since_ok = match failed_since_ok {
            Some(n) => n,
            // Asked only of a job with no run this week that failed or succeeded (a weekly job
            // whose run is under way): its runs before the window.
            None => tx
                .one(FAILED_SINCE_OK_SQL, args![&key], |r| int(r, 0))?
                .unwrap_or(0)
                .max(0) as u64,
        };
        // 'run_ended:' .. 'run_ended;' is every kind with that prefix (';' follows ':').
        j.runs_by_outcome = outcomes(ended.get(&key).map(Vec::as_slice).unwrap_or(&[]));
        (j.run_duration_counts, j.run_duration_sum_ms) =
            duration_counts(durations.get(&key).map(Vec::as_slice).unwrap_or(&[]));
        j.missed_recorded = sum(&missed, &key);
        // The latest slot any scheduler fired (or the last run's): where the schedule goes on
        // from. What that means (the next firing, slots passed unfired) is the domain's
        // (`snapshot::plan`). A job known only by its lease has no schedule.
        if j.settings.schedule.is_some() && !j.retired {
            j.last_slot = slots
                .latest(&key, tx)?
                .or_else(|| j.last_run.as_ref().map(|r| r.scheduled_at));
        }
        j.duplicates_suppressed = sum(&dups, &key);
        j.fenced_writes = sum(&fenced, &key);
        // A job known only by its lease has no firings.
        let f = firings.get(&key).cloned().unwrap_or_default();
        j.queue_depth = f.queued;
        (j.firings_gave_up, j.firings_need_retry) = (f.gave_up, f.retry);
        j.retry_detail = f.retry_detail;
    }
    Ok(jobs.into_values().collect())
}

/// When a job's newest `ok` run ended: the kept window answers for a job that succeeded this
/// week, the table (runs started before `oldest`) for the others.
fn last_success(
    tx: &Tx<'_>,
    windows: &super::windows::RunWindows,
    job: &str,
    oldest: &str,
) -> DbResult<Option<Ts>> {
    Ok(match windows.last_success(job) {
        Some(at) => at,
        None => tx
            .one(LAST_SUCCESS_SQL, args![job, oldest], |r| {
                super::rows::ts(r, 0, "exactly_runs.ended_at")
            })
            .optional()?
            .flatten(),
    })
}

/// A job's `run_ended:` counters as counts by outcome, in the order of their words (as the
/// JSON has always listed them); a word this build does not know kept as `Other`.
fn outcomes(counters: &[(String, i64)]) -> BTreeMap<RunOutcome, u64> {
    counters
        .iter()
        .map(|(kind, n)| {
            let word = kind.trim_start_matches(super::schema::RUN_ENDED);
            (RunOutcome::parse(word), (*n).max(0) as u64)
        })
        .collect()
}

/// The registry's jobs, by key, with their settings as their jobs file wrote them and their
/// schedules parsed (kept in `schedules` between polls).
fn registered(tx: &Tx<'_>, schedules: &mut Schedules) -> DbResult<BTreeMap<String, JobFacts>> {
    let mut jobs: BTreeMap<String, JobFacts> = BTreeMap::new();
    let rows = tx.rows(
        "SELECT job_key, schedule, interval_s, lease_s, overlap, queue_cap, paused, \
             pause_note, retired,
            lease_ms, timezone, catchup_s, dst_repeated, dst_skipped, conflict_owner, \
                conflict_source, owner, source, updated_at
         FROM exactly_jobs",
        &[],
        |r| {
            Ok((
                JobFacts {
                    job_key: text_or_empty(r, 0)?.into(),
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
                    dst: exactly_words::schedule::dst_shown(
                        text(r, 1)?.as_deref(),
                        text(r, 10)?.as_deref(),
                        text(r, 12)?,
                        text(r, 13)?,
                    ),
                    replaced: match text(r, 14)? {
                        Some(owner) => Some(super::rows::Replaced {
                            owner,
                            source: text(r, 15)?,
                            by: text(r, 16)?,
                            by_source: text(r, 17)?,
                            at: super::rows::ts(r, 18, "exactly_jobs.updated_at")?,
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
        j.schedule = j
            .settings
            .schedule
            .as_deref()
            .map(|s| schedules.parsed(s, j.settings.timezone.as_deref(), j.dst.as_ref()));
        jobs.insert(j.job_key.to_string(), j);
    }
    Ok(jobs)
}

/// Each lease on the job, with its holder and time left; jobs known only from the seed's
/// lease table (CLI wrappers, other programs) show too.
fn add_leases(tx: &Tx<'_>, now: Ts, jobs: &mut BTreeMap<String, JobFacts>) -> DbResult<()> {
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
        let j = jobs.entry(job.clone()).or_insert_with(|| JobFacts {
            job_key: job.into(),
            ..Default::default()
        });
        j.fencing_token = token;
        if until != RELEASED {
            let until = time_in("job_lease.lease_until", &until)?;
            j.lease_left_s = Some((until - now).num_seconds());
            j.lease_owner = Some(owner);
            j.lease_until = Some(until);
        }
    }
    Ok(())
}

/// The few firings waiting or stuck, across all jobs (one range of the state index).
fn firing_figures(tx: &Tx<'_>) -> DbResult<BTreeMap<String, FiringFigures>> {
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
    Ok(firings)
}

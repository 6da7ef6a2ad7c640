//! Reads for the snapshot and detail views. Every query here goes through an index: the done
//! rows of a large ledger are never scanned.
use super::db::{args, DbResult, Optional, Tx};
use super::detail::{event_row, EVENT_COLS};
use super::rows::{ApprovalView, OpenEffect, Reading, Window};
use super::schedulers::read_schedulers;
use super::{int, text, text_or_empty, word, Store};
use exactly_words::state::{ApprovalState, EventKind};
use exactly_words::time::{self, Ts};
use exactly_words::Result;

use super::jobs_read::read_jobs;
use super::windows::Kept;
const EVENTS_SHOWN: usize = 300;
const OPEN_SHOWN: usize = 1000;

/// `claimed` rows whose claiming token's lease expired or was superseded, not waiting for a
/// person and not handed back by an operator: reserved, then abandoned.
pub(super) const LEAKED: &str =
    "FROM effect_ledger e WHERE e.state IN ('claimed', 'submitted', 'unknown')
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
        let snap = self.read(|tx| reading_in(tx, &caller_now, dead_after, &db, &mut kept));
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

/// The snapshot's rows in the transaction `tx`, as at `caller_now` (the database's clock on
/// PostgreSQL), notification counts included: what [`Store::reading`] reads, and `exactly
/// doctor`'s read reads with its own rows.
pub(super) fn reading_in(
    tx: &Tx<'_>,
    caller_now: &str,
    dead_after: std::time::Duration,
    db: &str,
    kept: &mut Kept,
) -> DbResult<Reading> {
    // Ages are measured on the database's clock (the server's, on PostgreSQL).
    let now_s = tx.now(caller_now).to_string();
    let now = super::rows::time_in("the database's clock", &now_s)?;
    let day_ago = time::fmt(now - chrono::Duration::hours(24));
    let unknown = open_effects(tx, &now_s, now)?;
    let (totals, last_24h) = windows(tx, &now_s, &day_ago, &unknown)?;
    let oldest_unknown_s = unknown.iter().map(|u| u.age_s).max();
    let events = tx.rows(
        &format!(
            "SELECT {EVENT_COLS} FROM exactly_events ORDER BY id DESC \
                  LIMIT {EVENTS_SHOWN}"
        ),
        &[],
        event_row,
    )?;
    let failovers = counter(tx, EventKind::Failover)?;
    Ok(Reading {
        taken_at: now,
        db: db.to_string(),
        schema_version: super::prepare::version(tx)?,
        schedulers: read_schedulers(tx, now, dead_after)?,
        totals,
        last_24h,
        oldest_unknown_s,
        missed_recorded: counter(tx, EventKind::FiringMissed)?,
        jobs: read_jobs(tx, now, kept)?,
        unknown,
        pending_approvals: approvals(tx, ApprovalState::Pending, now)?,
        unused_approvals: approvals(tx, ApprovalState::Approved, now)?,
        events,
        host_clashes_24h: count(
            tx,
            "SELECT count(*) FROM exactly_events WHERE kind = 'host_clash' AND at >= ?1",
            args![&day_ago],
        )?,
        failovers,
        last_failover: last_failover(tx, failovers)?,
        notifications: super::notify::notification_counts(tx)?,
    })
}

/// The open effects, oldest first (at most [`OPEN_SHOWN`]), their ages at `now`.
fn open_effects(tx: &Tx<'_>, now_s: &str, now: Ts) -> DbResult<Vec<OpenEffect>> {
    tx.rows(
        &format!(
            "SELECT e.effect_key, e.job_key, e.state, e.updated_at, e.terms_shown, \
                 e.verdict, e.fencing_token
             {OPEN} ORDER BY e.updated_at, e.effect_key LIMIT {OPEN_SHOWN}"
        ),
        args![now_s],
        |r| {
            let since = super::rows::ts_req(r, 3, "effect_ledger.updated_at")?;
            Ok(OpenEffect {
                effect_key: text_or_empty(r, 0)?,
                job_key: text_or_empty(r, 1)?,
                state: word(r, 2)?,
                age_s: time::age_s(since, now),
                since,
                terms_shown: text(r, 4)?,
                verdict: text(r, 5)?,
                fencing_token: int(r, 6)?,
            })
        },
    )
}

/// The counters over all time and over the last 24 hours (since `day_ago`); `unknown` is the
/// open list [`open_effects`] read, which already holds what its counts count when it is whole.
fn windows(
    tx: &Tx<'_>,
    now_s: &str,
    day_ago: &str,
    unknown: &[OpenEffect],
) -> DbResult<(Window, Window)> {
    let whole = unknown.len() < OPEN_SHOWN;
    // Both leaked counts from one walk of the claimed rows.
    let (leaked, leaked_24h) = tx.one(
        &format!(
            "SELECT count(*), CAST(coalesce(sum(CASE WHEN e.updated_at >= ?2 THEN 1 \
                  ELSE 0 END), 0) AS BIGINT) {LEAKED}"
        ),
        args![now_s, day_ago],
        |r| {
            Ok((
                r.get::<i64>(0)?.max(0) as u64,
                r.get::<i64>(1)?.max(0) as u64,
            ))
        },
    )?;
    let approvals = |state: &str, since: Option<&str>| match since {
        None => count(
            tx,
            "SELECT count(*) FROM exactly_approvals WHERE state = ?1",
            args![state],
        ),
        Some(since) => count(
            tx,
            "SELECT count(*) FROM exactly_approvals WHERE state = ?1 AND requested_at >= ?2",
            args![state, since],
        ),
    };
    let totals = Window {
        duplicates_suppressed: counter(tx, EventKind::DuplicateSuppressed)?,
        fenced_writes: counter(tx, EventKind::FencedWrite)?,
        claimed_never_submitted: leaked,
        unknown: if whole {
            unknown.len() as u64
        } else {
            count(tx, &format!("SELECT count(*) {OPEN}"), args![now_s])?
        },
        pending_approvals: approvals("pending", None)?,
        unused_approvals: approvals("approved", None)?,
    };
    let last_24h = Window {
        duplicates_suppressed: since(tx, EventKind::DuplicateSuppressed, day_ago)?,
        fenced_writes: since(tx, EventKind::FencedWrite, day_ago)?,
        claimed_never_submitted: leaked_24h,
        unknown: if whole {
            unknown
                .iter()
                .filter(|u| time::fmt(u.since).as_str() >= day_ago)
                .count() as u64
        } else {
            count(
                tx,
                &format!("SELECT count(*) {OPEN} AND e.updated_at >= ?2"),
                args![now_s, day_ago],
            )?
        },
        pending_approvals: approvals("pending", Some(day_ago))?,
        unused_approvals: approvals("approved", Some(day_ago))?,
    };
    Ok((totals, last_24h))
}

/// The approvals in `state`, oldest first (at most [`OPEN_SHOWN`]), their ages at `now`.
fn approvals(tx: &Tx<'_>, state: ApprovalState, now: Ts) -> DbResult<Vec<ApprovalView>> {
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
}

/// The newest `failover` event, asked only when there was one (`failovers`): the newest of a
/// kind is a walk back through the events.
fn last_failover(tx: &Tx<'_>, failovers: u64) -> DbResult<Option<(Ts, String)>> {
    if failovers == 0 {
        return Ok(None);
    }
    tx.one(
        "SELECT at, detail FROM exactly_events WHERE kind = 'failover' \
         ORDER BY id DESC LIMIT 1",
        &[],
        |r| {
            Ok((
                super::rows::ts_req(r, 0, "exactly_events.at")?,
                text_or_empty(r, 1)?,
            ))
        },
    )
    .optional()
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

#[cfg(test)]
pub(super) mod tests {
    /// A snapshot as the dashboard takes one, now.
    pub(in crate::store) fn snap(store: &mut super::Store) -> crate::snapshot::Snapshot {
        let reading = store
            .reading(
                exactly_words::time::now(),
                crate::jobs::SCHEDULER_DEAD_AFTER,
            )
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
        let now = exactly_words::time::now();
        let at = |h: i64| exactly_words::time::fmt(now - chrono::Duration::hours(h));
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
        let ok_at = exactly_words::time::fmt(d.last_success_at.unwrap());
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

    /// A time in a row that is not a time is the database's corruption, said with the column
    /// and the value: never read as "no lease", never replaced by the wall clock.
    #[test]
    fn a_bad_time_in_a_row_is_corrupt_not_guessed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.db");
        let path = path.to_str().unwrap();
        drop(super::Store::open(path).unwrap());
        let raw = rusqlite::Connection::open(path).unwrap();
        raw.execute(
            "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at) \
             VALUES ('j', 'me', 1, 'next tuesday', '2026-01-01T00:00:00.000Z')",
            [],
        )
        .unwrap();
        let mut store = super::Store::open_read_only(path).unwrap();
        match store.reading(
            exactly_words::time::now(),
            crate::jobs::SCHEDULER_DEAD_AFTER,
        ) {
            Err(exactly_words::Error::Corrupt { message, .. }) => {
                assert!(
                    message.ends_with("job_lease.lease_until holds \"next tuesday\", not a time"),
                    "{message}"
                );
                assert!(!message.contains('\n'), "{message}");
            }
            other => panic!("a bad lease_until read as {other:?}"),
        }
    }

    /// Duplicates suppressed and fenced writes: all time from the counters, last 24 h from the
    /// events (through the partial index that holds only those two kinds).
    #[test]
    fn windowed_counts_count_their_kind_in_the_last_day() {
        use super::super::{record_event, NewEvent};
        use exactly_words::state::EventKind;
        let dir = tempfile::tempdir().unwrap();
        let mut store = super::Store::open(dir.path().join("c.db").to_str().unwrap()).unwrap();
        let now = exactly_words::time::now();
        let at = |h: i64| exactly_words::time::fmt(now - chrono::Duration::hours(h));
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
        let now = exactly_words::time::now();
        let at = |h: i64| exactly_words::time::fmt(now - chrono::Duration::hours(h));
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

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
/// The open effects a reading lists at most (its counts are whole).
pub const OPEN_SHOWN: usize = 1000;

/// `claimed` rows whose claiming token's lease expired or was superseded, not waiting for a
/// person and not handed back by an operator: reserved, then abandoned.
pub(super) const LEAKED: &str = concat!(
    "FROM effect_ledger e WHERE ",
    open_term!("e"),
    " AND e.state = 'claimed' AND e.resolved_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM exactly_approvals a WHERE a.effect_key = e.effect_key
                    AND a.state IN ('pending', 'approved'))
    AND NOT EXISTS (SELECT 1 FROM job_lease l WHERE l.job_key = e.job_key AND l.lease_until > ?1
                    AND (e.fencing_token IS NULL OR l.fencing_token = e.fencing_token))"
);

/// Open effects: `unknown`, and `submitted` whose holder's lease is gone (in-flight sends of a
/// live lease are not unknown yet).
const OPEN: &str = concat!(
    "FROM effect_ledger e WHERE ",
    open_term!("e"),
    " AND (e.state = 'unknown' OR (e.state = 'submitted'
    AND NOT EXISTS (SELECT 1 FROM job_lease l WHERE l.job_key = e.job_key AND l.lease_until > ?1
                    AND (e.fencing_token IS NULL OR l.fencing_token = e.fencing_token))))"
);

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
    /// What the last reading kept, for the next one to bring up to date.
    pub(super) fn take_kept(&mut self) -> Kept {
        let mut kept = self.kept.take().unwrap_or_default();
        // On PostgreSQL rows are not numbered in commit order: see `windows::LATE_ROWS`.
        kept.polls += 1;
        if self.is_pg() && kept.polls > super::windows::FRESH_EVERY {
            kept = Kept::default();
        }
        kept
    }

    /// Reads everything the dashboard and `status` show, in one short read transaction, as at
    /// `now` (the caller's clock). A scheduler silent for `dead_after` is not alive.
    pub fn reading(&mut self, now: Ts, dead_after: std::time::Duration) -> Result<Reading> {
        let caller_now = time::fmt(now);
        let db = self.path.clone();
        let mut kept = self.take_kept();
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
    pub fn data_version(&mut self) -> Result<i64> {
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
                effect_key: exactly_words::EffectKey::from(text_or_empty(r, 0)?),
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

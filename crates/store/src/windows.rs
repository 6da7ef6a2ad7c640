//! What a reading connection keeps between a dashboard's polls, so a poll reads only what
//! changed: each job's recent runs (at most `RUN_WINDOW`, within `RUN_WINDOW_DAYS`) with the
//! run-time figures (count, failures, p50/p99) computed from them, and each job's latest firing.
use super::db::{args, DbResult, Optional, Row, Tx};
use super::detail::{has_run_lags, run_cols, run_row};
use super::rows::{ParsedSchedule, RunRow, ScheduleKey};
use super::{int, text, text_or_empty};
use exactly_words::state::RunOutcome;
use exactly_words::time;
use std::collections::BTreeMap;

/// Most runs per job in its run window (the newest).
pub const RUN_WINDOW: usize = 500;
/// How far back a job's run window reaches, in days.
pub const RUN_WINDOW_DAYS: i64 = 7;

/// A job's (runs, failed, p50, p99, durations newest first) over its run window.
type Figures = (u64, u64, Option<u64>, Option<u64>, Vec<i64>);

/// One run as the run-time window needs it. A dashboard keeps one per run of the last days
/// (100,000 on the bench's million-row ledger), so it is packed: each optional number as a
/// value and a flag, the flags in a byte (64 bytes instead of 88).
#[derive(Debug, Clone)]
struct RunBit {
    rowid: i64,
    started_at: time::Ts,
    ended_at: Option<time::Ts>,
    /// Meaningful when [`HAS_DURATION`] is set.
    duration_ms: i64,
    /// From its recorded start to its command's start (ms), once it ended (schema 8).
    start_lag_ms: i64,
    /// The longest its lease went without a renewal (ms), once it ended (schema 8).
    renewal_gap_ms: i64,
    flags: u8,
}

const FAILED: u8 = 1;
const OK: u8 = 1 << 1;
/// Its command ran, so its duration says how long the job takes (a `not_started` run's says
/// how long it waited for a start that never came: kept out of p50/p99).
const RAN: u8 = 1 << 2;
const HAS_DURATION: u8 = 1 << 3;
const HAS_START_LAG: u8 = 1 << 4;
const HAS_RENEWAL_GAP: u8 = 1 << 5;

impl RunBit {
    fn flag(&self, f: u8) -> bool {
        self.flags & f != 0
    }
    fn failed(&self) -> bool {
        self.flag(FAILED)
    }
    fn ok(&self) -> bool {
        self.flag(OK)
    }
    fn ran(&self) -> bool {
        self.flag(RAN)
    }
    fn duration_ms(&self) -> Option<i64> {
        self.flag(HAS_DURATION).then_some(self.duration_ms)
    }
    fn start_lag_ms(&self) -> Option<i64> {
        self.flag(HAS_START_LAG).then_some(self.start_lag_ms)
    }
    fn renewal_gap_ms(&self) -> Option<i64> {
        self.flag(HAS_RENEWAL_GAP).then_some(self.renewal_gap_ms)
    }
}

/// A job's start lag (p50, p99) and the longest any of its runs' leases went without a
/// renewal, over the same runs as its [`Figures`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Lags {
    pub(crate) start_lag_p50_ms: Option<u64>,
    pub(crate) start_lag_p99_ms: Option<u64>,
    pub(crate) renewal_gap_max_ms: Option<u64>,
}

/// A job's recent runs (started within [`RUN_WINDOW_DAYS`], oldest first) and the figures
/// computed from them, recomputed only when they change.
#[derive(Debug, Default)]
struct JobWindow {
    runs: Vec<RunBit>,
    /// What [`RunWindows::figures`] answers, or None when `runs` changed since.
    figures: Option<Figures>,
    /// What [`RunWindows::lags`] answers, or None when `runs` changed since.
    lags: Option<Lags>,
    /// The newest run's whole row, as read when its rowid was the newest.
    last: Option<(i64, RunRow)>,
}

/// Everything kept between polls.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    pub(crate) runs: RunWindows,
    pub(crate) slots: LatestSlots,
    pub(crate) schedules: Schedules,
    /// Polls served since this was read afresh (see [`LATE_ROWS`]).
    pub(crate) polls: u32,
}

/// The registry's schedules as parsed, by the words they were parsed from: a dashboard
/// polling 1,000 jobs parses each once, not once a poll.
#[derive(Debug, Default)]
pub(crate) struct Schedules(std::collections::HashMap<ScheduleKey, ParsedSchedule>);

/// Most schedules kept: registries change rarely; the bound keeps a dashboard left open for
/// months small.
const SCHEDULES_KEPT: usize = 10_000;

impl Schedules {
    /// A registry schedule parsed, kept or parsed now (see [`ParsedSchedule::parse`]).
    pub(super) fn parsed(
        &mut self,
        schedule: &str,
        tz: Option<&str>,
        dst: Option<&exactly_words::schedule::DstShown>,
    ) -> ParsedSchedule {
        let key = ParsedSchedule::key(schedule, tz, dst);
        if let Some(p) = self.0.get(&key) {
            return p.clone();
        }
        if self.0.len() >= SCHEDULES_KEPT {
            self.0.clear();
        }
        let p = ParsedSchedule::parse(schedule, tz, dst);
        self.0.insert(key, p.clone());
        p
    }
}

/// On PostgreSQL a rowid comes from a sequence when the row is inserted, not when it commits:
/// a row may become visible after rows with higher rowids. So there each poll reads the last
/// `LATE_ROWS` rowids again (keeping a row already kept changes nothing), and every
/// [`FRESH_EVERY`]-th poll reads everything afresh, so no late row is missed for long.
pub(super) const LATE_ROWS: i64 = 1000;
pub(super) const FRESH_EVERY: u32 = 60;

/// The rowid from which a poll reads the rows added since the last one.
fn added_from(tx: &Tx<'_>, max_rowid: i64) -> i64 {
    if tx.is_pg() {
        max_rowid.saturating_sub(LATE_ROWS)
    } else {
        max_rowid
    }
}

/// What tells a kept copy of a table that rows went away since it last looked: the deletions
/// its `<table>_deleted` trigger counted, or, on a database from before the triggers (schema
/// version 4) opened read-only, how many rows it holds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Removals {
    Deleted(i64),
    Rows(i64),
}

impl Removals {
    fn read(tx: &Tx<'_>, table: &str) -> DbResult<Removals> {
        if !super::prepare::has_trigger_tx(tx, &format!("{table}_deleted"))? {
            let n = tx.one(&format!("SELECT count(*) FROM {table}"), &[], |r| int(r, 0))?;
            return Ok(Removals::Rows(n.unwrap_or(0)));
        }
        let n = tx
            .one(
                "SELECT n FROM exactly_counters WHERE kind = ?1 AND job_key = ''",
                args![format!("deleted:{table}")],
                |r| int(r, 0),
            )
            .optional()?
            .flatten();
        Ok(Removals::Deleted(n.unwrap_or(0)))
    }

    /// Whether rows went away between `before` and `self`, `added` rows having come since.
    fn since(self, before: Option<Removals>, added: usize) -> bool {
        match (before, self) {
            (Some(Removals::Deleted(a)), Removals::Deleted(b)) => a != b,
            (Some(Removals::Rows(a)), Removals::Rows(b)) => a + added as i64 != b,
            _ => true,
        }
    }
}

/// The recent runs of every job, kept by a reading connection between polls. A poll reads only
/// the runs added since the last (rowid above the last seen) and those that were still running;
/// if rows were deleted meanwhile (gc), it reads the window again. So a dashboard's poll costs
/// what changed, not the size of the run history.
#[derive(Debug, Default)]
pub(crate) struct RunWindows {
    synced: bool,
    max_rowid: i64,
    removals: Option<Removals>,
    jobs: BTreeMap<String, JobWindow>,
    /// Runs without a duration yet (still running when read): read again each poll.
    open: Vec<(i64, String)>,
    /// No kept run started before this (it may be lower than the oldest kept): while it is
    /// inside the window no run left it, and the poll skips a walk over every job's runs.
    earliest: Option<time::Ts>,
}

const BIT_COLS: &str =
    "rowid, job_key, started_at, duration_ms, outcome, ended_at, start_lag_ms, renewal_gap_ms";
/// [`BIT_COLS`] on a database from before schema version 8, read as it is.
const BIT_COLS_V7: &str = "rowid, job_key, started_at, duration_ms, outcome, ended_at, \
     CAST(NULL AS BIGINT), CAST(NULL AS BIGINT)";

fn run_bit(r: &Row<'_>) -> DbResult<(String, RunBit)> {
    let outcome = text(r, 4)?;
    let outcome = outcome.as_deref();
    let (duration, start_lag, renewal_gap) = (int(r, 3)?, int(r, 6)?, int(r, 7)?);
    let flags = [
        (
            outcome.is_some_and(exactly_words::state::is_failure),
            FAILED,
        ),
        (outcome == Some("ok"), OK),
        (outcome != Some(RunOutcome::NotStarted.as_str()), RAN),
        (duration.is_some(), HAS_DURATION),
        (start_lag.is_some(), HAS_START_LAG),
        (renewal_gap.is_some(), HAS_RENEWAL_GAP),
    ]
    .into_iter()
    .fold(0, |acc, (set, f)| if set { acc | f } else { acc });
    Ok((
        text_or_empty(r, 1)?,
        RunBit {
            rowid: int(r, 0)?.unwrap_or(0),
            started_at: super::rows::ts_req(r, 2, "exactly_runs.started_at")?,
            ended_at: super::rows::ts(r, 5, "exactly_runs.ended_at")?,
            duration_ms: duration.unwrap_or(0),
            start_lag_ms: start_lag.unwrap_or(0),
            renewal_gap_ms: renewal_gap.unwrap_or(0),
            flags,
        },
    ))
}

impl RunWindows {
    /// Brings the cache up to the database as `tx` sees it, for the window starting at `oldest`.
    pub(super) fn sync(&mut self, tx: &Tx<'_>, oldest: time::Ts) -> DbResult<()> {
        // Asked each poll: a writer may upgrade the database under a dashboard left open.
        let cols = if has_run_lags(tx)? {
            BIT_COLS
        } else {
            BIT_COLS_V7
        };
        // Two statements: each alone is an index lookup and an index count; together they
        // would scan the table.
        let max_rowid = tx
            .one("SELECT max(rowid) FROM exactly_runs", &[], |r| int(r, 0))?
            .unwrap_or(0);
        let removals = Removals::read(tx, "exactly_runs")?;
        if self.synced {
            let new = tx.rows(
                &format!("SELECT {cols} FROM exactly_runs WHERE rowid > ?1"),
                args![added_from(tx, self.max_rowid)],
                run_bit,
            )?;
            // Rows went away (gc) or rowids were reused: read the window afresh.
            if removals.since(self.removals, new.len()) {
                *self = RunWindows::default();
            } else {
                let reread = format!("SELECT {cols} FROM exactly_runs WHERE rowid = ?1");
                let mut fresh = Vec::new();
                for (rowid, _) in std::mem::take(&mut self.open) {
                    match tx.one(&reread, args![rowid], run_bit).optional()? {
                        Some(bit) => fresh.push(bit),
                        None => {
                            *self = RunWindows::default();
                            break;
                        }
                    }
                }
                if self.synced {
                    for (job, bit) in fresh {
                        self.put(job, bit, oldest);
                    }
                    for (job, bit) in new {
                        self.put(job, bit, oldest);
                    }
                }
            }
        }
        if !self.synced {
            let rows = tx.rows(
                &format!(
                    "SELECT {cols} FROM exactly_runs WHERE started_at >= ?1 \
                          ORDER BY started_at"
                ),
                args![time::fmt(oldest)],
                run_bit,
            )?;
            for (job, bit) in rows {
                self.put(job, bit, oldest);
            }
            for w in self.jobs.values_mut() {
                w.runs.shrink_to_fit();
            }
            self.synced = true;
        }
        self.max_rowid = max_rowid;
        self.removals = Some(removals);
        // Runs that left the window.
        if self.earliest.is_some_and(|e| e < oldest) {
            for w in self.jobs.values_mut() {
                let gone = w.runs.partition_point(|b| b.started_at < oldest);
                if gone > 0 {
                    w.runs.drain(..gone);
                    w.figures = None;
                    w.lags = None;
                }
            }
            self.jobs.retain(|_, w| !w.runs.is_empty());
            self.earliest = self
                .jobs
                .values()
                .filter_map(|w| w.runs.first())
                .map(|b| b.started_at)
                .min();
        }
        Ok(())
    }

    /// Adds or replaces one run, keeping each job's runs in start order.
    fn put(&mut self, job: String, bit: RunBit, oldest: time::Ts) {
        // Once: a row may be read twice in one poll (re-read as open, and again as added).
        if bit.duration_ms().is_none() && !self.open.iter().any(|(r, _)| *r == bit.rowid) {
            self.open.push((bit.rowid, job.clone()));
        }
        if bit.started_at < oldest {
            return;
        }
        if self.earliest.is_none_or(|e| bit.started_at < e) {
            self.earliest = Some(bit.started_at);
        }
        let w = self.jobs.entry(job).or_default();
        w.figures = None;
        w.lags = None;
        if let Some(i) = w.runs.iter().rposition(|b| b.rowid == bit.rowid) {
            w.runs.remove(i);
        }
        // Grown by a quarter, not doubled: kept for as long as the dashboard is open, a window
        // of 100 runs would otherwise hold room for 128.
        if w.runs.len() == w.runs.capacity() {
            w.runs.reserve_exact(w.runs.len() / 4 + 4);
        }
        let at = w.runs.partition_point(|b| b.started_at <= bit.started_at);
        w.runs.insert(at, bit);
    }

    /// Whether the job's newest run waits for its slot at `now` (decided ahead of it, not
    /// ended). False for a job with no run this week.
    pub(super) fn run_pending(&self, job: &str, now: time::Ts) -> bool {
        self.jobs.get(job).is_some_and(|w| {
            w.runs
                .last()
                .is_some_and(|b| b.started_at > now && b.ended_at.is_none())
        })
    }

    /// A job's newest run (None: it has no run in the window; ask the table).
    pub(super) fn last_run(
        &mut self,
        job: &str,
        now: time::Ts,
        tx: &Tx<'_>,
    ) -> DbResult<Option<RunRow>> {
        let Some(w) = self.jobs.get_mut(job) else {
            return Ok(None);
        };
        // A run decided ahead of its slot has not started yet: not the last run until then.
        let Some(newest) = w.runs.iter().rev().find(|b| b.started_at <= now) else {
            return Ok(None);
        };
        let fresh = w
            .last
            .as_ref()
            .is_some_and(|(rowid, row)| *rowid == newest.rowid && row.duration_ms.is_some());
        if !fresh {
            let cols = run_cols(tx)?;
            let row = tx
                .one(
                    &format!("SELECT {cols} FROM exactly_runs WHERE rowid = ?1"),
                    args![newest.rowid],
                    run_row,
                )
                .optional()?;
            w.last = row.map(|r| (newest.rowid, r));
        }
        Ok(w.last.as_ref().map(|(_, r)| r.clone()))
    }

    /// When a job's newest successful run in the window ended (None: none in the window).
    pub(super) fn last_success(&self, job: &str) -> Option<Option<time::Ts>> {
        let w = self.jobs.get(job)?;
        w.runs.iter().rev().find(|b| b.ok()).map(|b| b.ended_at)
    }

    /// How many of a job's newest finished runs failed, in a row (within the window).
    pub(super) fn failing_streak(&self, job: &str) -> u64 {
        self.jobs.get(job).map_or(0, |w| {
            let ended = w.runs.iter().rev().filter(|b| b.duration_ms().is_some());
            ended.take_while(|b| b.failed()).count() as u64
        })
    }

    /// How many of a job's finished runs failed since its newest `ok` run (within the
    /// window): runs that say nothing of the job (killed by a deploy, fenced, not started,
    /// waiting for approval) and a run still under way neither count nor end the count. None
    /// when the window holds no finished run that failed or succeeded.
    pub(super) fn failed_since_ok(&self, job: &str) -> Option<u64> {
        let w = self.jobs.get(job)?;
        let mut verdicts = w
            .runs
            .iter()
            .rev()
            .filter(|b| b.duration_ms().is_some() && (b.ok() || b.failed()))
            .peekable();
        verdicts.peek()?;
        Some(verdicts.take_while(|b| b.failed()).count() as u64)
    }

    /// (runs, failed, p50, p99, durations newest first) over a job's last [`RUN_WINDOW`]
    /// finished runs in the window.
    pub(super) fn figures(&mut self, job: &str) -> Figures {
        let Some(w) = self.jobs.get_mut(job) else {
            return (0, 0, None, None, Vec::new());
        };
        w.figures
            .get_or_insert_with(|| {
                let last: Vec<&RunBit> = w
                    .runs
                    .iter()
                    .rev()
                    .filter(|b| b.duration_ms().is_some())
                    .take(RUN_WINDOW)
                    .collect();
                let failed = last.iter().filter(|b| b.failed()).count() as u64;
                let durations: Vec<i64> = last
                    .iter()
                    .filter(|b| b.ran())
                    .filter_map(|b| b.duration_ms())
                    .collect();
                let (p50, p99) = time::percentiles(&durations);
                (last.len() as u64, failed, p50, p99, durations)
            })
            .clone()
    }
}

impl RunWindows {
    /// A job's start lag (p50, p99) and longest renewal gap over the same runs as
    /// [`RunWindows::figures`] (the runs that measured them: from schema 8 on).
    pub(super) fn lags(&mut self, job: &str) -> Lags {
        let Some(w) = self.jobs.get_mut(job) else {
            return Lags::default();
        };
        *w.lags.get_or_insert_with(|| {
            let last = || {
                w.runs
                    .iter()
                    .rev()
                    .filter(|b| b.duration_ms().is_some())
                    .take(RUN_WINDOW)
            };
            let lags: Vec<i64> = last().filter_map(|b| b.start_lag_ms()).collect();
            let (p50, p99) = time::percentiles(&lags);
            Lags {
                start_lag_p50_ms: p50,
                start_lag_p99_ms: p99,
                renewal_gap_max_ms: last()
                    .filter_map(|b| b.renewal_gap_ms())
                    .max()
                    .map(|g| g.max(0) as u64),
            }
        })
    }
}

/// Each job's latest fired slot (the newest `scheduled_at` in `exactly_firings`), kept between
/// polls: a poll reads only the firings added since (rowid above the last seen), and seeks a
/// job's latest once, the first time it is asked. Firings gone (see [`Removals`]) or a lower
/// rowid than seen start it afresh.
#[derive(Debug, Default)]
pub(crate) struct LatestSlots {
    max_rowid: i64,
    removals: Option<Removals>,
    /// job → its latest slot (None: it has no firing), for the jobs asked about.
    slots: BTreeMap<String, Option<time::Ts>>,
}

impl LatestSlots {
    /// Brings the kept slots up to the database as `tx` sees it.
    pub(super) fn sync(&mut self, tx: &Tx<'_>) -> DbResult<()> {
        let removals = Removals::read(tx, "exactly_firings")?;
        let max_rowid = tx
            .one("SELECT max(rowid) FROM exactly_firings", &[], |r| int(r, 0))?
            .unwrap_or(0);
        // Nothing kept yet (or rowids went back): nothing to bring up to date.
        let kept = self.removals.is_some() && max_rowid >= self.max_rowid;
        let mut new = Vec::new();
        if kept {
            new = tx.rows(
                "SELECT job_key, scheduled_at FROM exactly_firings WHERE rowid > ?1",
                args![added_from(tx, self.max_rowid)],
                |r| {
                    Ok((
                        text_or_empty(r, 0)?,
                        super::rows::ts_req(r, 1, "exactly_firings.scheduled_at")?,
                    ))
                },
            )?;
        }
        if !kept || removals.since(self.removals, new.len()) {
            self.slots.clear();
        } else {
            for (job, slot) in new {
                // Only a job already sought: for another, these rows are not all it has, and its
                // first ask seeks the whole of it.
                if let Some(kept) = self.slots.get_mut(&job) {
                    if kept.is_none_or(|k| k < slot) {
                        *kept = Some(slot);
                    }
                }
            }
        }
        self.max_rowid = max_rowid;
        self.removals = Some(removals);
        Ok(())
    }

    /// A job's latest slot: kept, or sought once (one seek into the firings' key).
    pub(super) fn latest(&mut self, job: &str, tx: &Tx<'_>) -> DbResult<Option<time::Ts>> {
        if let Some(kept) = self.slots.get(job) {
            return Ok(*kept);
        }
        // Not a time is the row's corruption: read as no slot, the slots since the real last
        // one were neither caught up nor called missed.
        let slot = tx.one(
            "SELECT max(scheduled_at) FROM exactly_firings WHERE job_key = ?1",
            args![job],
            |r| super::rows::ts(r, 0, "exactly_firings.scheduled_at"),
        )?;
        self.slots.insert(job.to_string(), slot);
        Ok(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dashboard keeps one per run of the last days: 100,000 on the bench's ledger.
    #[test]
    fn a_kept_run_takes_64_bytes() {
        assert!(size_of::<RunBit>() <= 64, "{}", size_of::<RunBit>());
    }
}

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

/// One run as the run-time window needs it.
#[derive(Debug, Clone)]
struct RunBit {
    rowid: i64,
    started_at: String,
    ended_at: Option<String>,
    duration_ms: Option<i64>,
    failed: bool,
    ok: bool,
    /// Its command ran, so its duration says how long the job takes (a `not_started` run's
    /// says how long it waited for a start that never came: kept out of p50/p99).
    ran: bool,
    /// From its recorded start to its command's start (ms), once it ended (schema 8).
    start_lag_ms: Option<i64>,
    /// The longest its lease went without a renewal (ms), once it ended (schema 8).
    renewal_gap_ms: Option<i64>,
}

/// A job's start lag (p50, p99) and the longest any of its runs' leases went without a
/// renewal, over the same runs as its [`Figures`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Lags {
    pub start_lag_p50_ms: Option<u64>,
    pub start_lag_p99_ms: Option<u64>,
    pub renewal_gap_max_ms: Option<u64>,
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
pub struct Kept {
    pub runs: RunWindows,
    pub slots: LatestSlots,
    pub schedules: Schedules,
    /// Polls served since this was read afresh (see [`LATE_ROWS`]).
    pub polls: u32,
}

/// The registry's schedules as parsed, by the words they were parsed from: a dashboard
/// polling 1,000 jobs parses each once, not once a poll.
#[derive(Debug, Default)]
pub struct Schedules(std::collections::HashMap<ScheduleKey, ParsedSchedule>);

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
pub struct RunWindows {
    synced: bool,
    max_rowid: i64,
    removals: Option<Removals>,
    jobs: BTreeMap<String, JobWindow>,
    /// Runs without a duration yet (still running when read): read again each poll.
    open: Vec<(i64, String)>,
    /// No kept run started before this (it may be lower than the oldest kept): while it is
    /// inside the window no run left it, and the poll skips a walk over every job's runs.
    earliest: Option<String>,
}

const BIT_COLS: &str =
    "rowid, job_key, started_at, duration_ms, outcome, ended_at, start_lag_ms, renewal_gap_ms";
/// [`BIT_COLS`] on a database from before schema version 8, read as it is.
const BIT_COLS_V7: &str = "rowid, job_key, started_at, duration_ms, outcome, ended_at, \
     CAST(NULL AS BIGINT), CAST(NULL AS BIGINT)";

fn run_bit(r: &Row<'_>) -> DbResult<(String, RunBit)> {
    let outcome = text(r, 4)?;
    Ok((
        text_or_empty(r, 1)?,
        RunBit {
            rowid: int(r, 0)?.unwrap_or(0),
            started_at: text_or_empty(r, 2)?,
            ended_at: text(r, 5)?,
            duration_ms: int(r, 3)?,
            failed: outcome
                .as_deref()
                .is_some_and(exactly_words::state::is_failure),
            ok: outcome.as_deref() == Some("ok"),
            ran: outcome.as_deref() != Some(RunOutcome::NotStarted.as_str()),
            start_lag_ms: int(r, 6)?,
            renewal_gap_ms: int(r, 7)?,
        },
    ))
}

impl RunWindows {
    /// Brings the cache up to the database as `tx` sees it, for the window starting at `oldest`.
    pub(super) fn sync(&mut self, tx: &Tx<'_>, oldest: &str) -> DbResult<()> {
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
                args![oldest],
                run_bit,
            )?;
            for (job, bit) in rows {
                self.put(job, bit, oldest);
            }
            self.synced = true;
        }
        self.max_rowid = max_rowid;
        self.removals = Some(removals);
        // Runs that left the window.
        if self.earliest.as_deref().is_some_and(|e| e < oldest) {
            for w in self.jobs.values_mut() {
                let gone = w.runs.partition_point(|b| b.started_at.as_str() < oldest);
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
                .map(|b| b.started_at.clone())
                .min();
        }
        Ok(())
    }

    /// Adds or replaces one run, keeping each job's runs in start order.
    fn put(&mut self, job: String, bit: RunBit, oldest: &str) {
        // Once: a row may be read twice in one poll (re-read as open, and again as added).
        if bit.duration_ms.is_none() && !self.open.iter().any(|(r, _)| *r == bit.rowid) {
            self.open.push((bit.rowid, job.clone()));
        }
        if bit.started_at.as_str() < oldest {
            return;
        }
        if self.earliest.as_ref().is_none_or(|e| bit.started_at < *e) {
            self.earliest = Some(bit.started_at.clone());
        }
        let w = self.jobs.entry(job).or_default();
        w.figures = None;
        w.lags = None;
        if let Some(i) = w.runs.iter().rposition(|b| b.rowid == bit.rowid) {
            w.runs.remove(i);
        }
        let at = w.runs.partition_point(|b| b.started_at <= bit.started_at);
        w.runs.insert(at, bit);
    }

    /// A job's newest run (None: it has no run in the window; ask the table).
    pub(super) fn last_run(&mut self, job: &str, tx: &Tx<'_>) -> DbResult<Option<RunRow>> {
        let Some(w) = self.jobs.get_mut(job) else {
            return Ok(None);
        };
        let Some(newest) = w.runs.last() else {
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
    pub(super) fn last_success(&self, job: &str) -> Option<Option<String>> {
        let w = self.jobs.get(job)?;
        w.runs
            .iter()
            .rev()
            .find(|b| b.ok)
            .map(|b| b.ended_at.clone())
    }

    /// How many of a job's newest finished runs failed, in a row (within the window).
    pub(super) fn failing_streak(&self, job: &str) -> u64 {
        self.jobs.get(job).map_or(0, |w| {
            let ended = w.runs.iter().rev().filter(|b| b.duration_ms.is_some());
            ended.take_while(|b| b.failed).count() as u64
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
            .filter(|b| b.duration_ms.is_some() && (b.ok || b.failed))
            .peekable();
        verdicts.peek()?;
        Some(verdicts.take_while(|b| b.failed).count() as u64)
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
                    .filter(|b| b.duration_ms.is_some())
                    .take(RUN_WINDOW)
                    .collect();
                let failed = last.iter().filter(|b| b.failed).count() as u64;
                let durations: Vec<i64> = last
                    .iter()
                    .filter(|b| b.ran)
                    .filter_map(|b| b.duration_ms)
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
                    .filter(|b| b.duration_ms.is_some())
                    .take(RUN_WINDOW)
            };
            let lags: Vec<i64> = last().filter_map(|b| b.start_lag_ms).collect();
            let (p50, p99) = time::percentiles(&lags);
            Lags {
                start_lag_p50_ms: p50,
                start_lag_p99_ms: p99,
                renewal_gap_max_ms: last()
                    .filter_map(|b| b.renewal_gap_ms)
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
pub struct LatestSlots {
    max_rowid: i64,
    removals: Option<Removals>,
    /// job → its latest slot (None: it has no firing), for the jobs asked about.
    slots: BTreeMap<String, Option<String>>,
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
                |r| Ok((text_or_empty(r, 0)?, text_or_empty(r, 1)?)),
            )?;
        }
        if !kept || removals.since(self.removals, new.len()) {
            self.slots.clear();
        } else {
            for (job, slot) in new {
                // Only a job already sought: for another, these rows are not all it has, and its
                // first ask seeks the whole of it.
                if let Some(kept) = self.slots.get_mut(&job) {
                    if kept.as_ref().is_none_or(|k| *k < slot) {
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
    pub(super) fn latest(&mut self, job: &str, tx: &Tx<'_>) -> DbResult<Option<String>> {
        if let Some(kept) = self.slots.get(job) {
            return Ok(kept.clone());
        }
        let slot = tx.one(
            "SELECT max(scheduled_at) FROM exactly_firings WHERE job_key = ?1",
            args![job],
            |r| text(r, 0),
        )?;
        self.slots.insert(job.to_string(), slot.clone());
        Ok(slot)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::read::tests::snap;
    /// (job, runs, failed, p50, p99, last run, last success) per job.
    type Figures = Vec<(
        String,
        u64,
        u64,
        Option<u64>,
        Option<u64>,
        Option<crate::snapshot::RunRow>,
        Option<exactly_words::time::Ts>,
    )>;

    fn figures(store: &mut crate::store::Store) -> Figures {
        snap(store)
            .jobs
            .into_iter()
            .map(|j| {
                let (p50, p99) = (j.p50_ms, j.p99_ms);
                (
                    j.job_key,
                    j.runs,
                    j.runs_failed,
                    p50,
                    p99,
                    j.last_run,
                    j.last_success_at,
                )
            })
            .collect()
    }

    /// The run windows a dashboard keeps between polls always agree with a fresh read: after
    /// new runs, after a running run ends, after runs are deleted (gc), and as runs age out.
    #[test]
    fn kept_run_windows_agree_with_a_fresh_read() {
        for with_triggers in [true, false] {
            run_windows_agree(with_triggers);
        }
    }

    /// A fresh database (path, and a plain connection to write it as another program would),
    /// with the deletion triggers or, as an older schema has it, without them.
    fn site(with_triggers: bool) -> (tempfile::TempDir, String, rusqlite::Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.db").to_str().unwrap().to_string();
        drop(crate::store::Store::open(&path).unwrap());
        let raw = rusqlite::Connection::open(&path).unwrap();
        if !with_triggers {
            raw.execute_batch(
                "DROP TRIGGER exactly_runs_deleted; DROP TRIGGER exactly_firings_deleted;",
            )
            .unwrap();
        }
        (dir, path, raw)
    }

    /// With the deletion triggers, or without them (an older schema, read-only: the windows
    /// count rows instead).
    fn run_windows_agree(with_triggers: bool) {
        let (_dir, path, raw) = site(with_triggers);
        let path = path.as_str();
        let now = exactly_words::time::now();
        let at = |s: i64| exactly_words::time::fmt(now - chrono::Duration::seconds(s));
        let run = |id: &str, job: &str, ago: i64, dur: Option<i64>, outcome: &str| {
            raw.execute(
                "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token,
                   started_at, ended_at, outcome, duration_ms) VALUES (?1, ?2, ?3, 'o', 1, \
                       ?3, ?3, ?4, ?5)",
                rusqlite::params![id, job, at(ago), dur.map(|_| outcome), dur],
            )
            .unwrap();
        };
        for job in ["a", "b", "c", "d", "e"] {
            raw.execute(
                "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
                 VALUES (?1, 'o', 1, ?2, ?2)",
                rusqlite::params![job, crate::store::RELEASED],
            )
            .unwrap();
        }
        // One run started 8 days ago: outside the window from the start.
        run("old", "a", 8 * 86400, Some(999), "ok");
        run("edge", "c", 7 * 86400 - 1, Some(7), "ok");
        for i in 0..20 {
            run(&format!("a{i}"), "a", 3600 - i, Some(100 + i), "ok");
        }
        run("b-running", "b", 10, None, "");
        // d's only success is older than the window, e: never succeeded; both failed this week.
        run("d-old", "d", 9 * 86400, Some(3), "ok");
        run("d-new", "d", 60, Some(4), "failed");
        run("e-new", "e", 60, Some(4), "failed");
        let mut kept = crate::store::Store::open_read_only(path).unwrap();
        let fresh = |_: ()| figures(&mut crate::store::Store::open_read_only(path).unwrap());
        assert_eq!(figures(&mut kept), fresh(()));
        let success = |f: &Figures, job: &str| f.iter().find(|f| f.0 == job).unwrap().6;
        let first = figures(&mut kept);
        assert_eq!(
            success(&first, "d"),
            exactly_words::time::parse(&at(9 * 86400))
        );
        assert_eq!(success(&first, "e"), None);
        // New runs, one failed.
        run("a-new", "a", 5, Some(5000), "failed");
        run("c1", "c", 5, Some(70), "ok");
        assert_eq!(figures(&mut kept), fresh(()));
        // The running run ends.
        raw.execute(
            "UPDATE exactly_runs SET duration_ms = 42, outcome = 'ok' WHERE run_id = 'b-running'",
            rusqlite::params![],
        )
        .unwrap();
        assert_eq!(figures(&mut kept), fresh(()));
        let b = figures(&mut kept).into_iter().find(|f| f.0 == "b").unwrap();
        assert_eq!((b.1, b.3), (1, Some(42)), "{b:?}");
        assert_eq!(b.5.as_ref().and_then(|r| r.duration_ms), Some(42), "{b:?}");
        // Runs deleted (as gc does), including ones inside the window.
        raw.execute(
            "DELETE FROM exactly_runs WHERE run_id IN ('a3', 'a4', 'c1')",
            rusqlite::params![],
        )
        .unwrap();
        assert_eq!(figures(&mut kept), fresh(()));
        // A run leaves the window as time passes.
        let before = figures(&mut kept);
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let after = figures(&mut kept);
        assert_eq!(after, fresh(()));
        assert_ne!(before, after, "the run at the window's edge left it");
        run("a-last", "a", 1, Some(1), "ok");
        assert_eq!(figures(&mut kept), fresh(()));
    }

    /// The latest slots a dashboard keeps between polls agree with a fresh read: after new
    /// firings (of a known job and of a job first seen), after a job's latest firing is deleted,
    /// and on a database without the deletion triggers (an older schema, read-only).
    #[test]
    fn kept_latest_slots_agree_with_a_fresh_read() {
        for with_triggers in [true, false] {
            let (_dir, path, raw) = site(with_triggers);
            let path = path.as_str();
            let register = |job: &str| {
                raw.execute(
                    "INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, \
                         overlap, updated_at)
                     VALUES (?1, 'every 1m', 60, 60, 'skip', '2026-01-01T00:00:00.000Z')",
                    rusqlite::params![job],
                )
                .unwrap();
            };
            for job in ["a", "b", "c"] {
                register(job);
            }
            let fire = |job: &str, slot: &str| {
                raw.execute(
                    "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, \
                         created_at, updated_at)
                     VALUES (?1, ?2, 'schedule', 'done', ?2, ?2)",
                    rusqlite::params![job, slot],
                )
                .unwrap();
            };
            let slots =
                |store: &mut crate::store::Store| -> Vec<(String, Option<exactly_words::time::Ts>)> {
                    snap(store)
                        .jobs
                        .into_iter()
                        .map(|j| (j.job_key, j.last_slot))
                        .collect()
                };
            let fresh = || slots(&mut crate::store::Store::open_read_only(path).unwrap());
            fire("a", "2026-01-01T00:01:00.000Z");
            fire("a", "2026-01-01T00:02:00.000Z");
            // d is not registered yet: the dashboard does not ask for its slot.
            fire("d", "2026-01-05T00:00:00.000Z");
            let mut kept = crate::store::Store::open_read_only(path).unwrap();
            assert_eq!(slots(&mut kept), fresh());
            // New firings: a's next, b's first (b was asked about with none), a backfilled one.
            fire("a", "2026-01-01T00:03:00.000Z");
            fire("b", "2026-01-01T00:03:00.000Z");
            fire("a", "2025-12-31T00:00:00.000Z");
            let now = slots(&mut kept);
            assert_eq!(now, fresh());
            assert_eq!(
                now[0].1.map(exactly_words::time::fmt).as_deref(),
                Some("2026-01-01T00:03:00.000Z")
            );
            assert_eq!(
                now[1].1.map(exactly_words::time::fmt).as_deref(),
                Some("2026-01-01T00:03:00.000Z")
            );
            assert_eq!(now[2].1, None);
            // a's latest firing deleted (not what gc does, but another program may).
            raw.execute(
                "DELETE FROM exactly_firings WHERE job_key = 'a' \
                 AND scheduled_at = '2026-01-01T00:03:00.000Z'",
                rusqlite::params![],
            )
            .unwrap();
            let now = slots(&mut kept);
            assert_eq!(now, fresh(), "triggers {with_triggers}");
            assert_eq!(
                now[0].1.map(exactly_words::time::fmt).as_deref(),
                Some("2026-01-01T00:02:00.000Z")
            );
            // d, not shown yet, gets an older slot backfilled while the dashboard polls; once
            // registered, its latest is still its newest slot (fired before the dashboard began).
            fire("d", "2025-06-01T00:00:00.000Z");
            slots(&mut kept);
            register("d");
            let now = slots(&mut kept);
            assert_eq!(now, fresh(), "triggers {with_triggers}");
            assert_eq!(
                now[3].1.map(exactly_words::time::fmt).as_deref(),
                Some("2026-01-05T00:00:00.000Z")
            );
        }
    }
}

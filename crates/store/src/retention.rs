//! Retention (`exactly gc`, and `retain` in a jobs file): history older than a horizon is
//! deleted in small transactions, so a scheduler waits at most one batch for the write lock.
//!
//! What is never deleted: leases; counters (all-time totals stay equal: run outcomes, duplicates
//! suppressed, fenced writes and missed firings are counted in `exactly_counters`); each job's
//! latest run and latest firing (so `last_run` and where a restarted scheduler picks up stay);
//! runs not ended and firings still waiting (queued, running, retry); events about an effect that
//! is still open or awaiting a person. Effect rows are the dedupe memory: only `--effects`
//! deletes them, and only `done` ones (with their consumed approvals); a denial, a person's
//! "never retry" and a pending approval are never forgotten.
use super::db::{args, Optional};
use super::Store;
use exactly_words::Result;
use serde::Serialize;

/// Rows deleted per transaction.
const BATCH: i64 = 500;
/// Events are walked by id, this many rows per transaction: no index on their time (it would
/// cost every event's insert a page), so each step reads a short run of rows and deletes the
/// old ones in it. Events arrive roughly in time order, but a writer with a skewed clock may leave
/// an old one among new ones; walking every range finds it too.
const EVENT_IDS: i64 = 5_000;

/// Old finished runs, but never a job's latest, nor one of a firing still to be retried (its
/// runs count toward its attempts).
const RUNS: &str = "FROM exactly_runs r WHERE r.started_at < ?1 AND r.ended_at IS NOT NULL
    AND r.started_at < (SELECT max(r2.started_at) FROM exactly_runs r2 \
        WHERE r2.job_key = r.job_key)
    AND NOT EXISTS (SELECT 1 FROM exactly_firings f WHERE f.job_key = r.job_key \
        AND f.scheduled_at = r.scheduled_at AND f.state IN ('retry', 'running'))";
/// Old decided firings, but never a job's latest nor one still waiting.
const FIRINGS: &str = "FROM exactly_firings f WHERE f.created_at < ?1
    AND f.state NOT IN ('queued', 'running', 'retry', 'awaiting_approval')
    AND f.scheduled_at < (SELECT max(f2.scheduled_at) FROM exactly_firings f2 \
        WHERE f2.job_key = f.job_key)";
/// Old events, except those about an effect still open or awaiting a person.
const EVENTS: &str = "FROM exactly_events ev WHERE ev.at < ?1 AND (ev.effect_key IS NULL OR (
      NOT EXISTS (SELECT 1 FROM effect_ledger e WHERE e.effect_key = ev.effect_key
                  AND e.state NOT IN ('done', 'cancelled'))
      AND NOT EXISTS (SELECT 1 FROM exactly_approvals a WHERE a.effect_key = ev.effect_key
                  AND a.state IN ('pending', 'approved'))))";
/// On SQLite the newest event stays too, however old: a new event takes the highest id + 1, so
/// with it gone an id already seen would be handed out again (the table has no AUTOINCREMENT).
/// PostgreSQL's identity never hands one out twice.
const NEWEST_EVENT_STAYS: &str = " AND ev.id < (SELECT max(id) FROM exactly_events)";
/// Schedulers not heard from since the horizon (each `exactly run` is a row).
const SCHEDULERS: &str = "FROM exactly_schedulers s WHERE s.heartbeat_at < ?1";
/// With `--effects`: `done` effects last touched before the horizon. A `cancelled` row is a
/// person's "never send this" (a denial, a "never retry"); forgetting it would let any caller
/// send the key, so it is kept as long as the ledger is.
const EFFECTS: &str = "FROM effect_ledger e WHERE e.state = 'done' AND e.updated_at < ?1";
/// With `--effects`: consumed approvals older than the horizon whose effect is gone or `done`.
/// A pending, approved or denied one still decides whether its key may be sent: kept.
const APPROVALS: &str = "FROM exactly_approvals a WHERE a.state = 'consumed'
    AND a.requested_at < ?1 AND NOT EXISTS (SELECT 1 FROM effect_ledger e
      WHERE e.effect_key = a.effect_key AND e.state <> 'done')";

/// The column that names a row to delete: SQLite's `rowid`; on PostgreSQL (no rowid) the
/// table's key, or the `rowid` column its schema gives runs and firings.
fn row_key(pg: bool, table: &str) -> &'static str {
    match (pg, table) {
        (false, _) => "rowid",
        (true, "exactly_events") => "id",
        (true, "exactly_schedulers") => "owner",
        (true, "effect_ledger") | (true, "exactly_approvals") => "effect_key",
        (true, _) => "rowid",
    }
}

/// What a prune deleted (or, dry, would delete).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pruned {
    /// What is older than this instant was deleted.
    pub horizon: String,
    /// Ended runs deleted (never a job's latest).
    pub runs: u64,
    /// Decided firings deleted (never a job's latest, nor one still waiting).
    pub firings: u64,
    /// Events deleted (none about an effect still open or awaiting a person).
    pub events: u64,
    /// Scheduler rows deleted: those silent since before the horizon.
    pub schedulers: u64,
    /// `done` effects deleted (only with `--effects`): their effect keys are forgotten.
    pub effects: u64,
    /// Consumed approvals deleted with their effects.
    pub approvals: u64,
    /// Nothing was deleted: the counts say what would be.
    pub dry_run: bool,
}

impl Store {
    /// Deletes history older than `horizon` (fixed-width UTC), batch by batch.
    pub fn prune(&mut self, horizon: &str, effects: bool, dry_run: bool) -> Result<Pruned> {
        // The caller's "now - keep", moved onto the database's clock (the server's, on
        // PostgreSQL), which wrote every instant it is compared with.
        let horizon = &self.read(|tx| Ok(tx.later(horizon)))?;
        let mut out = Pruned {
            horizon: horizon.to_string(),
            dry_run,
            ..Default::default()
        };
        out.events = self.prune_events(horizon, dry_run)?;
        let mut parts: Vec<(&str, &str, &mut u64)> = vec![
            ("exactly_runs", RUNS, &mut out.runs),
            ("exactly_firings", FIRINGS, &mut out.firings),
            ("exactly_schedulers", SCHEDULERS, &mut out.schedulers),
        ];
        let mut e = 0u64;
        let mut a = 0u64;
        if effects {
            // Approvals first: their predicate looks at the effects still there.
            parts.push(("exactly_approvals", APPROVALS, &mut a));
            parts.push(("effect_ledger", EFFECTS, &mut e));
        }
        for (table, pred, n) in parts {
            // The alias in each predicate is its table's; rowid names the row to delete.
            let alias = pred.split_whitespace().nth(2).unwrap_or(table).to_string();
            let id = row_key(self.is_pg(), table);
            if dry_run {
                *n = self
                    .read(|tx| {
                        tx.one(&format!("SELECT count(*) {pred}"), args![horizon], |r| {
                            r.get::<i64>(0)
                        })
                    })?
                    .max(0) as u64;
                continue;
            }
            loop {
                let deleted = self.write(|tx| {
                    tx.exec(
                        &format!(
                            "DELETE FROM {table} WHERE {id} IN \
                             (SELECT {alias}.{id} {pred} LIMIT {BATCH})"
                        ),
                        args![horizon],
                    )
                })? as u64;
                *n += deleted;
                if deleted < BATCH as u64 {
                    break;
                }
                // Let a waiting scheduler take the write lock between batches.
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        out.effects = e;
        out.approvals = a;
        Ok(out)
    }

    /// Each registered job's runs beyond its `keep_runs` newest (only ended ones: a running
    /// one stays, and so do the runs of a firing waiting for a retry), then its firings older than the oldest run kept that have no run left and
    /// are settled (never one queued, running or waiting for a retry, never its latest, so a
    /// restarted scheduler still picks up where it was). The counters keep the all-time totals.
    /// `job`: that job alone (a run of it just ended), else every job.
    pub fn keep_newest_runs(&mut self, job: Option<&str>) -> Result<(u64, u64)> {
        let keep: Vec<(String, i64)> = self.read(|tx| {
            let sql = "SELECT job_key, keep_runs FROM exactly_jobs WHERE keep_runs IS NOT NULL \
                       AND retired = 0";
            let row = |r: &super::db::Row<'_>| Ok((r.get::<String>(0)?, r.get::<i64>(1)?));
            match job {
                Some(j) => tx.rows(&format!("{sql} AND job_key = ?1"), args![j], row),
                None => tx.rows(sql, &[], row),
            }
        })?;
        let (mut runs, mut firings) = (0u64, 0u64);
        for (job, n) in keep {
            let (r, f) = self.trim_runs(&job, n)?;
            runs += r;
            firings += f;
        }
        Ok((runs, firings))
    }

    /// Trims one job to its newest `n` runs (see [`Store::keep_newest_runs`]): (runs, firings)
    /// deleted.
    pub fn trim_runs(&mut self, job: &str, n: i64) -> Result<(u64, u64)> {
        self.write(|tx| {
            // The oldest run kept: the n-th newest.
            let cut: Option<(String, String)> = tx
                .one(
                    "SELECT started_at, scheduled_at FROM exactly_runs WHERE job_key = ?1
                         ORDER BY started_at DESC LIMIT 1 OFFSET ?2",
                    args![job, n.max(1) - 1],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let Some((started, slot)) = cut else {
                return Ok((0, 0));
            };
            // A firing still to be retried keeps its runs: they count toward its attempts.
            let r = tx.exec(
                "DELETE FROM exactly_runs WHERE job_key = ?1 AND started_at < ?2 \
                     AND ended_at IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM exactly_firings f WHERE f.job_key = ?1
                         AND f.scheduled_at = exactly_runs.scheduled_at
                         AND f.state IN ('retry', 'running'))",
                args![job, started],
            )?;
            let f = tx.exec(
                "DELETE FROM exactly_firings WHERE job_key = ?1 AND scheduled_at < ?2
                       AND state NOT IN ('queued', 'running', 'retry', 'awaiting_approval')
                       AND scheduled_at < (SELECT max(f2.scheduled_at) FROM exactly_firings f2 \
                           WHERE f2.job_key = ?1)
                       AND NOT EXISTS (SELECT 1 FROM exactly_runs r WHERE r.job_key = ?1
                                       AND r.scheduled_at = exactly_firings.scheduled_at)",
                args![job, slot],
            )?;
            Ok((r as u64, f as u64))
        })
    }

    /// Old events, id range by id range (see [`EVENT_IDS`]).
    fn prune_events(&mut self, horizon: &str, dry_run: bool) -> Result<u64> {
        let mut n = 0u64;
        let keep = if self.is_pg() { "" } else { NEWEST_EVENT_STAYS };
        // From the lowest id, each step the next EVENT_IDS rows by id: the walk follows the
        // rows, not the id space, so a foreign writer's ids far apart (or at i64's ends) cost
        // no more steps than rows.
        let mut from: Option<i64> =
            self.read(|tx| tx.one("SELECT min(id) FROM exactly_events", &[], |r| r.get(0)))?;
        while let Some(start) = from {
            let next: Option<i64> = self.read(|tx| {
                tx.one(
                    "SELECT id FROM exactly_events WHERE id >= ?1 ORDER BY id LIMIT 1 OFFSET ?2",
                    args![start, EVENT_IDS],
                    |r| r.get(0),
                )
                .optional()
            })?;
            // Without a next step the range runs to the last row.
            let to = next.unwrap_or(i64::MAX);
            let upper = if next.is_some() { "<" } else { "<=" };
            let range = format!("{EVENTS}{keep} AND ev.id >= ?2 AND ev.id {upper} ?3");
            let p = args![horizon, start, to];
            n += if dry_run {
                self.read(|tx| tx.one(&format!("SELECT count(*) {range}"), p, |r| r.get::<i64>(0)))?
                    .max(0) as u64
            } else {
                let deleted = self.write(|tx| {
                    tx.exec(
                        &format!("DELETE FROM exactly_events WHERE id IN (SELECT ev.id {range})"),
                        p,
                    )
                })? as u64;
                if deleted > 0 {
                    // Let a waiting scheduler take the write lock between steps.
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                deleted
            };
            from = next;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::db::args;
    use super::super::{record_event, NewEvent, Store};
    use exactly_words::state::EventKind;

    /// Old events are found without an index on their time: across many id ranges, and also
    /// an old one written after newer ones (a writer whose clock is behind).
    #[test]
    fn old_events_are_pruned_range_by_range_even_out_of_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("r.db").to_str().unwrap()).unwrap();
        let n = 2 * super::EVENT_IDS + 123;
        store
            .write(|tx| {
                for i in 0..n {
                    let at = if i % 2 == 0 {
                        "2026-01-01T00:00:00.000Z"
                    } else {
                        "2026-06-01T00:00:00.000Z"
                    };
                    record_event(tx, &NewEvent::new(EventKind::JobPaused, at).job("j"))?;
                }
                // The skewed writer: an old event with the highest id.
                record_event(
                    tx,
                    &NewEvent::new(EventKind::JobPaused, "2025-12-31T00:00:00.000Z").job("j"),
                )
            })
            .unwrap();
        // A foreign writer's ids at i64's ends: the walk follows rows, not the id space.
        store
            .write(|tx| {
                tx.exec(
                    "INSERT INTO exactly_events (id, at, kind) VALUES
                       (-9223372036854775808, '2025-01-01T00:00:00.000Z', 'x'),
                       (9223372036854775807, '2025-01-01T00:00:00.000Z', 'x')",
                    &[],
                )
            })
            .unwrap();
        let horizon = "2026-03-01T00:00:00.000Z";
        // Every old one but the newest id (the foreign one at i64's end), which stays.
        let old = (n + 1) / 2 + 1 + 1;
        let dry = store.prune(horizon, false, true).unwrap();
        assert_eq!(dry.events, old as u64);
        let done = store.prune(horizon, false, false).unwrap();
        assert_eq!(done.events, old as u64);
        let (left, newest): (i64, i64) = store
            .read(|tx| {
                tx.one(
                    "SELECT count(*), max(id) FROM exactly_events WHERE at < ?1",
                    args![horizon],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
            })
            .unwrap();
        assert_eq!(
            (left, newest),
            (1, i64::MAX),
            "only the newest old event stays"
        );
        let left: i64 = store
            .read(|tx| tx.one("SELECT count(*) FROM exactly_events", &[], |r| r.get(0)))
            .unwrap();
        assert_eq!(left, n - (n + 1) / 2 + 1, "the newer events stay");
    }

    /// An event id is never handed out twice, though the table has no AUTOINCREMENT: a prune
    /// of every old event keeps the newest, so the next event's id is still above all before.
    #[test]
    fn an_event_id_is_not_handed_out_again_after_a_prune() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("r.db").to_str().unwrap()).unwrap();
        let old = NewEvent::new(EventKind::JobPaused, "2026-01-01T00:00:00.000Z").job("j");
        store
            .write(|tx| (0..5).try_for_each(|_| record_event(tx, &old)))
            .unwrap();
        let max_id = |store: &mut Store| -> i64 {
            store
                .read(|tx| tx.one("SELECT max(id) FROM exactly_events", &[], |r| r.get(0)))
                .unwrap()
        };
        let seen = max_id(&mut store);
        let pruned = store
            .prune("2026-03-01T00:00:00.000Z", false, false)
            .unwrap();
        assert_eq!(pruned.events, 4, "every old event but the newest");
        let new = NewEvent::new(EventKind::JobPaused, "2026-06-01T00:00:00.000Z").job("j");
        store.write(|tx| record_event(tx, &new)).unwrap();
        assert!(
            max_id(&mut store) > seen,
            "a new event's id {} is above the {seen} already handed out",
            max_id(&mut store)
        );
    }
}

//! Scheduler liveness: each `exactly run` records itself and beats, so a reader can tell a
//! scheduler that is idle from one that is dead (a killed process never says goodbye; it only
//! falls silent).
use super::db::{args, DbResult, Tx};
use super::{int, text, text_or_empty, Store};
use crate::snapshot::SchedulerRow;
use crate::time::{self, Ts};
use crate::Result;

/// One scheduler as it records itself.
#[derive(Debug, Clone)]
pub struct SchedulerReg<'a> {
    pub owner: &'a str,
    pub host: &'a str,
    pub pid: u32,
    pub source: &'a str,
}

impl Store {
    /// Records a scheduler's start (a restart under the same owner starts its row afresh).
    pub(crate) fn scheduler_started(&mut self, s: &SchedulerReg<'_>, now: &str) -> Result<()> {
        self.write(|tx| {
            let now = tx.now(now);
            tx.exec(
                "INSERT INTO exactly_schedulers (owner, host, pid, started_at, heartbeat_at, ended_at, source)
                 VALUES (?1, ?2, ?3, ?4, ?4, NULL, ?5)
                 ON CONFLICT(owner) DO UPDATE SET host = excluded.host, pid = excluded.pid,
                   started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
                   ended_at = NULL, source = excluded.source",
                args![s.owner, s.host, s.pid, now, s.source],
            )?;
            Ok(())
        })
    }

    /// One heartbeat. Returns false when the row is gone or ended (pruned, or a newer start
    /// under the same owner took it over with another pid).
    pub(crate) fn scheduler_beat(&mut self, owner: &str, pid: u32, now: &str) -> Result<bool> {
        self.write(|tx| {
            let now = tx.now(now);
            Ok(tx.exec(
                "UPDATE exactly_schedulers SET heartbeat_at = ?3
                 WHERE owner = ?1 AND pid = ?2 AND ended_at IS NULL",
                args![owner, pid, now],
            )? > 0)
        })
    }

    /// Records a clean shutdown.
    pub(crate) fn scheduler_ended(&mut self, owner: &str, pid: u32, now: &str) -> Result<()> {
        self.write(|tx| {
            let now = tx.now(now);
            tx.exec(
                "UPDATE exactly_schedulers SET heartbeat_at = ?3, ended_at = ?3
                 WHERE owner = ?1 AND pid = ?2",
                args![owner, pid, now],
            )?;
            Ok(())
        })
    }
}

/// Schedulers listed: those heard from within this many days.
const SCHEDULERS_SHOWN_DAYS: i64 = 7;

pub(super) fn read_schedulers(
    tx: &Tx<'_>,
    now: Ts,
    dead_after: std::time::Duration,
) -> DbResult<Vec<SchedulerRow>> {
    // A database not yet opened by a writer of schema 2 has no table: no scheduler ever beat.
    if !super::has_table(tx, "exactly_schedulers")? {
        return Ok(Vec::new());
    }
    let oldest = time::fmt(now - chrono::Duration::days(SCHEDULERS_SHOWN_DAYS));
    let alive_after =
        time::fmt(now - chrono::Duration::milliseconds(dead_after.as_millis() as i64));
    let rows = tx.rows(
        "SELECT owner, host, pid, started_at, heartbeat_at, ended_at FROM exactly_schedulers
         WHERE heartbeat_at >= ?1 ORDER BY heartbeat_at DESC LIMIT 100",
        args![&oldest],
        |r| {
            let heartbeat_at = text_or_empty(r, 4)?;
            let ended_at = text(r, 5)?;
            Ok(SchedulerRow {
                owner: text_or_empty(r, 0)?,
                host: text_or_empty(r, 1)?,
                pid: int(r, 2)?.unwrap_or(0),
                started_at: text_or_empty(r, 3)?,
                alive: ended_at.is_none() && heartbeat_at >= alive_after,
                heartbeat_at,
                ended_at,
            })
        },
    )?;
    Ok(rows)
}

//! Scheduler liveness: each `exactly run` records itself and beats, so a reader can tell a
//! scheduler that is idle from one that is dead (a killed process never says goodbye; it only
//! falls silent).
use super::Store;
use crate::Result;
use rusqlite::params;

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
            tx.execute(
                "INSERT INTO exactly_schedulers (owner, host, pid, started_at, heartbeat_at, ended_at, source)
                 VALUES (?1, ?2, ?3, ?4, ?4, NULL, ?5)
                 ON CONFLICT(owner) DO UPDATE SET host = excluded.host, pid = excluded.pid,
                   started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
                   ended_at = NULL, source = excluded.source",
                params![s.owner, s.host, s.pid, now, s.source],
            )?;
            Ok(())
        })
    }

    /// One heartbeat. Returns false when the row is gone or ended (pruned, or a newer start
    /// under the same owner took it over with another pid).
    pub(crate) fn scheduler_beat(&mut self, owner: &str, pid: u32, now: &str) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.execute(
                "UPDATE exactly_schedulers SET heartbeat_at = ?3
                 WHERE owner = ?1 AND pid = ?2 AND ended_at IS NULL",
                params![owner, pid, now],
            )? > 0)
        })
    }

    /// Records a clean shutdown.
    pub(crate) fn scheduler_ended(&mut self, owner: &str, pid: u32, now: &str) -> Result<()> {
        self.write(|tx| {
            tx.execute(
                "UPDATE exactly_schedulers SET heartbeat_at = ?3, ended_at = ?3
                 WHERE owner = ?1 AND pid = ?2",
                params![owner, pid, now],
            )?;
            Ok(())
        })
    }
}

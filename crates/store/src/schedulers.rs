//! Scheduler liveness: each `exactly run` records itself and beats, so a reader can tell a
//! scheduler that is idle from one that is dead (a killed process never says goodbye; it only
//! falls silent).
use super::db::{args, DbResult, Tx};
use super::rows::{ts, ts_req, SchedulerRow};
use super::{int, text, text_or_empty, Store};
use exactly_words::time::{self, Ts};
use exactly_words::Result;

/// One scheduler as it records itself.
#[derive(Debug, Clone)]
pub struct SchedulerReg<'a> {
    /// Its name as lease owner (by default `user@host:pid`).
    pub owner: &'a str,
    /// The host name it runs on.
    pub host: &'a str,
    /// Its process id.
    pub pid: u32,
    /// The jobs file it runs.
    pub source: &'a str,
    /// The machine behind `host` ([`exactly_words::sender::host_id`]).
    pub host_id: &'a str,
}

/// How recently another machine's scheduler must have beaten for a shared host name to count
/// as a clash (a long-dead row of a renamed machine is not one).
const CLASH_WITHIN: chrono::Duration = chrono::Duration::minutes(5);

/// A time no scheduler of a jobs file was alive, found by the next one to start.
#[derive(Debug, Clone, PartialEq)]
pub struct Outage {
    /// The last moment one was heard from (its last heartbeat, or its recorded end).
    pub from: Ts,
    /// When the next one started.
    pub to: Ts,
}

/// A gap shorter than this between one scheduler and the next (a restart) is not an outage.
const OUTAGE_MIN: chrono::Duration = chrono::Duration::seconds(1);

impl Store {
    /// Records a scheduler's start (a restart under the same owner starts its row afresh).
    /// With `dead_after` (a first start, not a re-registration): when no scheduler of its jobs
    /// file is alive by that staleness and one was before, the time since the last one was
    /// heard from is an outage, recorded as one `scheduler_outage` event and returned.
    pub fn scheduler_started(
        &mut self,
        s: &SchedulerReg<'_>,
        now: &str,
        dead_after: Option<std::time::Duration>,
    ) -> Result<Option<Outage>> {
        self.write(|tx| {
            let now = tx.now(now);
            let outage = match dead_after {
                Some(d) => outage_tx(tx, s, now, d)?,
                None => None,
            };
            tx.exec(
                "INSERT INTO exactly_schedulers (owner, host, pid, started_at, heartbeat_at, \
                     ended_at, source, host_id)
                 VALUES (?1, ?2, ?3, ?4, ?4, NULL, ?5, ?6)
                 ON CONFLICT(owner) DO UPDATE SET host = excluded.host, pid = excluded.pid,
                   started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
                   ended_at = NULL, source = excluded.source, host_id = excluded.host_id",
                args![s.owner, s.host, s.pid, now, s.source, s.host_id],
            )?;
            let recent = time::parse(now)
                .map(|t| time::fmt(t - CLASH_WITHIN))
                .unwrap_or_else(|| now.to_string());
            let others: Vec<String> = tx.rows(
                "SELECT owner FROM exactly_schedulers
                 WHERE host = ?1 AND owner <> ?2 AND host_id IS NOT NULL AND host_id <> ?3
                   AND ended_at IS NULL AND heartbeat_at >= ?4",
                args![s.host, s.owner, s.host_id, recent],
                |r| text_or_empty(r, 0),
            )?;
            if !others.is_empty() {
                let detail = exactly_words::sanitize::inert_trunc(
                    &format!(
                        "host name {:?} is used by two machines: scheduler {} started on {}, while \
                         {} runs on another; their pids mean nothing to each other, so their \
                         effects are judged by deadline (give each machine its own EXACTLY_HOST)",
                        s.host, s.owner, s.host_id, others.join(", ")
                    ),
                    300,
                );
                super::record_event(
                    tx,
                    &super::NewEvent::new(exactly_words::state::EventKind::HostClash, now)
                        .actor(s.owner)
                        .detail(&detail),
                )?;
            }
            Ok(outage)
        })
    }

    /// One heartbeat. Returns false when the row is gone or ended (pruned, or a newer start
    /// under the same owner took it over with another pid).
    pub fn scheduler_beat(&mut self, owner: &str, pid: u32, now: &str) -> Result<bool> {
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
    pub fn scheduler_ended(&mut self, owner: &str, pid: u32, now: &str) -> Result<()> {
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
    let alive_after = now - chrono::Duration::milliseconds(dead_after.as_millis() as i64);
    let rows = tx.rows(
        "SELECT owner, host, pid, started_at, heartbeat_at, ended_at, host_id \
             FROM exactly_schedulers
         WHERE heartbeat_at >= ?1 ORDER BY heartbeat_at DESC LIMIT 100",
        args![&oldest],
        |r| {
            let heartbeat_at = ts_req(r, 4, "exactly_schedulers.heartbeat_at")?;
            let ended_at = ts(r, 5, "exactly_schedulers.ended_at")?;
            Ok(SchedulerRow {
                owner: text_or_empty(r, 0)?,
                host: text_or_empty(r, 1)?,
                pid: int(r, 2)?.unwrap_or(0),
                started_at: ts_req(r, 3, "exactly_schedulers.started_at")?,
                alive: ended_at.is_none() && heartbeat_at >= alive_after,
                heartbeat_at,
                ended_at,
                host_id: text(r, 6)?,
            })
        },
    )?;
    Ok(rows)
}

impl Store {
    /// When the latest outage of the jobs file `source` before `before` ended (its
    /// `scheduler_outage` event's time): the scheduler that ended it handled every slot up to
    /// then (fired, or left as the outage's), so a later one never calls them missed.
    pub fn last_outage_end(&mut self, source: &str, before: &str) -> Result<Option<Ts>> {
        let prefix = format!("no scheduler of {source} was alive for ");
        self.read(|tx| {
            tx.one(
                "SELECT max(at) FROM exactly_events WHERE kind = 'scheduler_outage' \
                 AND at < ?1 AND substr(detail, 1, length(?2)) = ?2",
                args![before, prefix],
                |r| ts(r, 0, "exactly_events.at"),
            )
        })
    }
}

/// The outage a scheduler starting at `now` ends, if any (see [`Store::scheduler_started`]),
/// recorded as its event: none while another scheduler of the file is alive, none for a file
/// no scheduler ran before, none for a gap under [`OUTAGE_MIN`] (a restart).
fn outage_tx(
    tx: &Tx<'_>,
    s: &SchedulerReg<'_>,
    now: &str,
    dead_after: std::time::Duration,
) -> DbResult<Option<Outage>> {
    let at = time::parse(now).ok_or_else(|| {
        super::db::DbError::Other(format!("the clock's time {now:?} is unreadable"))
    })?;
    let dead = chrono::Duration::from_std(dead_after).unwrap_or(chrono::Duration::seconds(10));
    let alive_since = time::fmt(at - dead);
    let (last, alive): (Option<Ts>, i64) = tx.one(
        "SELECT max(coalesce(ended_at, heartbeat_at)),
                coalesce(sum(CASE WHEN ended_at IS NULL AND heartbeat_at >= ?2 \
                    AND owner <> ?3 THEN 1 ELSE 0 END), 0)
         FROM exactly_schedulers WHERE source = ?1",
        args![s.source, alive_since, s.owner],
        |r| {
            Ok((
                ts(r, 0, "exactly_schedulers.ended_at or heartbeat_at")?,
                r.get::<i64>(1)?,
            ))
        },
    )?;
    // No scheduler of the file ran before: no outage to end.
    let Some(from) = last else {
        return Ok(None);
    };
    if alive > 0 || at - from < OUTAGE_MIN {
        return Ok(None);
    }
    let len = (at - from).num_milliseconds().max(0) as u64;
    let detail = format!(
        "no scheduler of {} was alive for {} (from {} to {}): the firings that fell due \
         meanwhile are caught up within each job's catch-up window, the others not run \
         (an outage, not missed firings)",
        s.source,
        time::human_ms(len),
        time::fmt(from),
        now
    );
    super::record_event(
        tx,
        &super::NewEvent::new(exactly_words::state::EventKind::SchedulerOutage, now)
            .actor(s.owner)
            .detail(&detail),
    )?;
    Ok(Some(Outage { from, to: at }))
}

//! The scheduler under a failing database. Its loop's database work (missed slots, waiting
//! firings, due firings) reports each failure here instead of logging it: the first failure
//! logs one line and the loop backs off (100 ms doubling to 5 s between ticks), a minute of
//! failures logs one reminder, and the first tick that succeeds again logs how long it lasted.
//! A database still failing after `--give-up-after` stops the scheduler with a non-zero exit,
//! for a service manager to restart it: a fresh process opens the database anew.
//!
//! A SQLite database is also watched: its file's identity (device, inode) is noted at start and
//! checked every second. A deleted or replaced file, a deleted folder, or a `-wal` that vanished
//! or changed while the scheduler holds the database open (SQLite itself removes the `-wal` only
//! when the last connection closes) stops the scheduler: it would otherwise write to a ghost, or
//! its runs to a fresh empty database. The scheduler's process then opens databases without
//! creating them, so a run can never make a new file where the old one was.
use crate::time::{self, Ts};
use crate::{Error, Result};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The first pause between ticks once the database fails; doubled on each failing tick.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// While the database keeps failing, one reminder line this often.
const REMIND_EVERY: Duration = Duration::from_secs(60);
/// How often the database file's identity is checked (a stat or two).
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// `--give-up-after`'s default: longer than a PostgreSQL failover or a long write lock, short
/// enough that a restart comes soon when only a new process can recover (a replaced mount).
pub(crate) const GIVE_UP_AFTER_DEFAULT: &str = "5m";

/// Why slots that fell due while the database failed were missed (their firings' detail).
pub(super) const DB_UNAVAILABLE: &str = "database unavailable";
/// Why other slots were missed (the scheduler was not running, or stalled).
pub(super) const NOT_RUN: &str = "no scheduler ran it in time";

pub(super) struct Health {
    db: String,
    give_up_after: Duration,
    /// The end of the last tick whose database work all succeeded.
    last_ok: (Instant, Ts),
    down: Option<Down>,
    /// The latest outage once over (from the last good moment to the first good one after).
    last_outage: Option<(Ts, Ts)>,
    failed_this_tick: bool,
    watch: Option<Watch>,
    /// When the loop's database work last failed.
    last_failure: Option<Instant>,
}

struct Down {
    since: Instant,
    since_ts: Ts,
    failures: u64,
    backoff: Duration,
    reminded: Instant,
    last_error: String,
}

impl Health {
    /// Starts watching the database `db` (a SQLite file); from here on this process opens
    /// databases without creating them.
    pub(super) fn new(db: &str, give_up_after: Duration) -> Health {
        let watch = if crate::is_server_db(db) {
            None
        } else {
            crate::refuse_new_databases();
            Watch::start(db)
        };
        Health {
            db: db.to_string(),
            give_up_after,
            last_ok: (Instant::now(), time::now()),
            down: None,
            last_outage: None,
            failed_this_tick: false,
            watch,
            last_failure: None,
        }
    }

    /// A failure of the loop's database work (for `job`, or "-"): logged only when it starts
    /// an outage, counted otherwise.
    pub(super) fn failed(&mut self, job: &str, e: &Error) {
        self.failed_this_tick = true;
        self.last_failure = Some(Instant::now());
        let text = e.to_string();
        match &mut self.down {
            Some(d) => {
                d.failures += 1;
                d.last_error = text;
                if d.reminded.elapsed() >= REMIND_EVERY {
                    d.reminded = Instant::now();
                    tracing::warn!(
                        job = %job,
                        "database still unavailable after {}, {} failure(s): {}",
                        human(d.since.elapsed()),
                        d.failures,
                        d.last_error,
                    );
                }
            }
            None => {
                tracing::error!(
                    job = %job,
                    "database unavailable: {text}; backing off (up to {} between tries, \
                         giving up after {})",
                    human(BACKOFF_MAX),
                    human(self.give_up_after),
                );
                self.down = Some(Down {
                    since: self.last_ok.0,
                    since_ts: self.last_ok.1,
                    failures: 1,
                    backoff: BACKOFF_FIRST / 2,
                    reminded: Instant::now(),
                    last_error: text,
                });
            }
        }
    }

    /// Whether the database has worked for `d` (or since the start): until then every other
    /// scheduler's heartbeat looks old, the live ones' too, so none may be taken for gone.
    pub(super) fn working_for(&self, d: Duration) -> bool {
        self.last_failure.is_none_or(|t| t.elapsed() >= d)
    }

    /// Why a slot that was not fired in time was missed: it fell due while the database failed,
    /// or not.
    pub(super) fn why_missed(&self, slot: Ts) -> &'static str {
        let in_outage = match (&self.down, &self.last_outage) {
            (Some(d), _) => slot >= d.since_ts,
            (None, Some((from, to))) => slot >= *from && slot <= *to,
            (None, None) => false,
        };
        if in_outage {
            DB_UNAVAILABLE
        } else {
            NOT_RUN
        }
    }

    /// The end of a tick: checks the database file, and says when an outage began or ended.
    /// An error stops the scheduler (its file is gone, or it failed for `give_up_after`).
    pub(super) fn end_tick(&mut self) -> Result<()> {
        if let Some(w) = &mut self.watch {
            w.check()?;
        }
        let failed = std::mem::take(&mut self.failed_this_tick);
        if failed {
            if let Some(d) = &mut self.down {
                d.backoff = (d.backoff * 2).min(BACKOFF_MAX);
                if d.since.elapsed() >= self.give_up_after {
                    return Err(Error::Store(format!(
                        "giving up: database {} unavailable for {} ({} failure(s), \
                         --give-up-after {}); last error: {}",
                        crate::shown_db(&self.db),
                        human(d.since.elapsed()),
                        d.failures,
                        human(self.give_up_after),
                        d.last_error
                    )));
                }
            }
            return Ok(());
        }
        let now = time::now();
        if let Some(d) = self.down.take() {
            tracing::info!(
                "database back after {}, {} failure(s)",
                human(d.since.elapsed()),
                d.failures,
            );
            self.last_outage = Some((d.since_ts, now));
        }
        self.last_ok = (Instant::now(), now);
        Ok(())
    }

    /// Sleeps `rest` — at least the back-off while the database fails — waking early on `stop`.
    pub(super) fn sleep(&self, rest: Duration, stop: &AtomicBool) {
        let rest = match &self.down {
            Some(d) => rest.max(d.backoff),
            None => rest,
        };
        let until = Instant::now() + rest;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}

fn human(d: Duration) -> String {
    time::human_ms(d.as_millis() as u64)
}

/// A SQLite database file's identity, and its `-wal`'s when it had one.
struct Watch {
    path: PathBuf,
    id: (u64, u64),
    wal: Option<(PathBuf, (u64, u64))>,
    next: Instant,
}

fn identity(path: &PathBuf) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl Watch {
    fn start(db: &str) -> Option<Watch> {
        let path = PathBuf::from(db);
        let id = identity(&path)?;
        let wal_path = PathBuf::from(format!("{db}-wal"));
        let wal = identity(&wal_path).map(|w| (wal_path, w));
        Some(Watch {
            path,
            id,
            wal,
            next: Instant::now() + WATCH_EVERY,
        })
    }

    fn check(&mut self) -> Result<()> {
        if Instant::now() < self.next {
            return Ok(());
        }
        self.next = Instant::now() + WATCH_EVERY;
        let db = self.path.display();
        let what = match identity(&self.path) {
            None if self.path.parent().is_some_and(|d| !d.exists()) => {
                format!("database {db} is gone: its folder was deleted")
            }
            None => format!("database {db} was deleted"),
            Some(id) if id != self.id => {
                format!("database {db} was replaced by another file")
            }
            Some(_) => match &self.wal {
                Some((wal, id)) if identity(wal) != Some(*id) => format!(
                    "the write-ahead log {} of database {db} was deleted or replaced \
                     (its last commits may be lost)",
                    wal.display()
                ),
                _ => return Ok(()),
            },
        };
        Err(Error::Store(format!(
            "{what} while the scheduler ran: stopping; \
             restore the database and start the scheduler again"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_back_off_doubling_to_a_cap_and_give_up_after_the_bound() {
        // A server URL: no file to watch, and the process-wide "create nothing" stays off for
        // the other tests of this binary.
        let mut h = Health::new(
            "postgres://nobody@127.0.0.1:1/none",
            Duration::from_secs(60),
        );
        let e = Error::Store("down".into());
        let mut pauses = Vec::new();
        for _ in 0..8 {
            h.failed("-", &e);
            assert!(h.end_tick().is_ok());
            pauses.push(h.down.as_ref().map(|d| d.backoff.as_millis()));
        }
        assert_eq!(
            pauses,
            [100, 200, 400, 800, 1600, 3200, 5000, 5000].map(Some)
        );
        assert_eq!(h.down.as_ref().map(|d| d.failures), Some(8));
        // A tick with no failure ends the outage; its slots keep their reason.
        let during = time::now();
        assert!(h.end_tick().is_ok());
        assert!(h.down.is_none());
        assert_eq!(h.why_missed(during), DB_UNAVAILABLE);
        assert_eq!(h.why_missed(during - chrono::Duration::hours(1)), NOT_RUN);

        let mut h = Health::new("postgres://nobody@127.0.0.1:1/none", Duration::ZERO);
        h.failed("-", &e);
        let err = h.end_tick().expect_err("gives up");
        assert!(err.to_string().starts_with("giving up: database"), "{err}");
    }
}

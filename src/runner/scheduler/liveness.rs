//! A scheduler's own upkeep, beside its loop: it records itself and beats every
//! [`BEAT`] so `status`, `metrics` and `top` can tell it is alive (a killed scheduler just falls
//! silent), records its end on a clean shutdown, trims each job with `keep_runs` to its newest
//! runs every beat (each run's end trims its own job too, `jobs::finish_run`), and — with
//! `retain` in the jobs file — prunes old history now and then. Each thread has its own database
//! connection.
use crate::jobs::{self, SchedulerReg};
use crate::Access;
use crate::{time, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a scheduler beats; a reader calls it dead after 10 s of silence by default.
pub(crate) const BEAT: Duration = crate::lease::SCHEDULER_BEAT;
/// How often `retain` prunes (and once, shortly after start).
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
const PRUNE_FIRST: Duration = Duration::from_secs(2);

/// Running upkeep; dropping it stops the threads and records the scheduler's end.
pub(crate) struct Upkeep {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// The outage this start ended (no scheduler of the file alive before it), if any.
    pub outage: Option<jobs::Outage>,
}

/// Records the scheduler (an error here is the database's, and stops `exactly run`) and starts
/// its heartbeat and, when `retain` is set, its pruning.
pub(crate) fn start(
    db: &str,
    owner: &str,
    source: &str,
    retain: Option<Duration>,
) -> Result<Upkeep> {
    let mut store = crate::open(Some(db), Access::Write)?;
    // `EXACTLY_HOST` when set (containers sharing a database), as in attempt ids.
    let host = crate::host();
    let pid = std::process::id();
    let reg = SchedulerReg {
        owner,
        host: &host,
        pid,
        source,
        host_id: crate::sender::host_id(),
    };
    let outage = jobs::scheduler_started_after(&mut store, &reg)?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    {
        let (stop, owner, host, source) = (
            stop.clone(),
            owner.to_string(),
            host.clone(),
            source.to_string(),
        );
        threads.push(std::thread::spawn(move || {
            let mut next = Instant::now() + BEAT;
            // A beat failing every 2 s (a full disk) is said once, then once a minute.
            let mut beat = crate::runner::log::Repeating::new("heartbeat");
            let mut keep = crate::runner::log::Repeating::new("keep_runs");
            while wait_until(&stop, next) {
                next = Instant::now() + BEAT;
                match jobs::scheduler_beat(&mut store, &owner, pid) {
                    Ok(true) => beat.ok(),
                    // The row was pruned or taken by a namesake: record ourselves again.
                    Ok(false) => {
                        let reg = SchedulerReg {
                            owner: &owner,
                            host: &host,
                            pid,
                            source: &source,
                            host_id: crate::sender::host_id(),
                        };
                        match jobs::scheduler_started(&mut store, &reg) {
                            Ok(()) => beat.ok(),
                            Err(e) => beat.failed(&e),
                        }
                    }
                    // A busy database is not death: beat again next time.
                    Err(e) => beat.failed(&e),
                }
                // Each beat, jobs with `keep_runs` lose their runs beyond the newest N.
                match jobs::keep_newest_runs(&mut store) {
                    Ok(_) => keep.ok(),
                    Err(e) => keep.failed(&e),
                }
            }
            if let Err(e) = jobs::scheduler_ended(&mut store, &owner, pid) {
                tracing::warn!("cannot record the scheduler's end: {e}");
            }
        }));
    }
    if let Some(keep) = retain {
        let (stop, db) = (stop.clone(), db.to_string());
        threads.push(std::thread::spawn(move || {
            let mut next = Instant::now() + PRUNE_FIRST;
            while wait_until(&stop, next) {
                next = Instant::now() + PRUNE_EVERY;
                let horizon =
                    time::now() - chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::MAX);
                let done = crate::open(Some(&db), Access::Write)
                    .and_then(|mut s| jobs::prune(&mut s, horizon, false, false));
                match done {
                    Ok(p) if p.runs + p.firings + p.events > 0 => tracing::info!(
                        "retain {}: pruned {} run(s), {} firing(s), {} event(s) \
                         older than {horizon}",
                        humantime::format_duration(keep),
                        p.runs,
                        p.firings,
                        p.events,
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::warn!("retain: {e}"),
                }
            }
        }));
    }
    Ok(Upkeep {
        stop,
        threads,
        outage,
    })
}

/// Sleeps until `at` in small steps; false once `stop` is set.
fn wait_until(stop: &AtomicBool, at: Instant) -> bool {
    while Instant::now() < at {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !stop.load(Ordering::SeqCst)
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

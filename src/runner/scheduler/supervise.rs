//! The scheduler's watch over its helper processes, the spawners (`spawn/spawner/`) and the
//! watchdog (`spawn/watchdog.rs`): each is a process of its own that a signal can kill or freeze
//! while the scheduler goes on. Looked at every [`EVERY`], well within the stop margin
//! (`policy::stop_margin`):
//!
//! - a dead or stopped watchdog keeps no deadline: the scheduler SIGKILLs every run's group
//!   past its deadline itself, and replaces the watchdog (a stopped one after [`STOPPED_FOR`]:
//!   it may be a debugger's pause) with a new one given every live run's group and deadline;
//!   the replacement is recorded as a `watchdog_restarted` event;
//! - a stopped spawner (its state `T`) neither starts nor reaps commands: runs read their
//!   commands' ends from the kernel (`Spawned::wait_for`), new requests go to the pool's other
//!   spawners (with none running, they wait a bounded time and are recorded `not_started`,
//!   `run/execute.rs`), and deadlines are enforced here too. A spawner's death is said by its
//!   reader (`spawn/spawner/`), at once.
use crate::runner::run::lend::lend;
use crate::runner::spawn::spawner;
use crate::runner::spawn::watchdog::{self, State};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the helpers are looked at.
const EVERY: Duration = Duration::from_millis(100);
/// A watchdog stopped this long is replaced.
const STOPPED_FOR: Duration = crate::policy::STOP_GRACE;
/// After a failed restart, how long before the next try (deadlines are kept meanwhile).
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The running watch; dropping it stops it.
pub(super) struct Supervisor {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts watching the helpers of the scheduler `owner` on database `db` (its events).
pub(super) fn start(db: &str, owner: &str) -> Supervisor {
    let stop = Arc::new(AtomicBool::new(false));
    let (flag, db, owner) = (stop.clone(), db.to_string(), owner.to_string());
    let thread = std::thread::Builder::new()
        .name("supervise".into())
        .spawn(move || watch(&flag, &db, &owner))
        .map_err(|e| tracing::warn!("cannot watch the spawner and the watchdog: {e}"))
        .ok();
    Supervisor { stop, thread }
}

fn watch(stop: &AtomicBool, db: &str, owner: &str) {
    let mut wd_stopped: Option<Instant> = None;
    // Each stopped spawner, and since when.
    let mut spawner_stopped: HashMap<i32, Instant> = HashMap::new();
    // After a failed restart (no fork), when to try again.
    let mut retry_at: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        let wd = watchdog::state();
        match wd {
            State::Fine => {
                if wd_stopped.take().is_some() {
                    tracing::info!("the watchdog process runs again");
                }
            }
            State::Stopped(pid) => {
                let since = *wd_stopped.get_or_insert_with(|| {
                    tracing::warn!(
                        "the watchdog process {pid} is stopped: the scheduler keeps run \
                         deadlines itself, and replaces it unless it resumes"
                    );
                    Instant::now()
                });
                if since.elapsed() >= STOPPED_FOR && retry_at.is_none_or(|t| Instant::now() >= t) {
                    retry_at = (!replace(db, owner, &format!("watchdog {pid} was stopped")))
                        .then(|| Instant::now() + RETRY_AFTER);
                    wd_stopped = None;
                }
            }
            State::Dead(pid) => {
                // Its reader said so as it died; the runs' deadlines first, then a new one.
                enforce();
                if retry_at.is_none_or(|t| Instant::now() >= t) {
                    retry_at = (!replace(db, owner, &format!("watchdog {pid} died")))
                        .then(|| Instant::now() + RETRY_AFTER);
                }
                wd_stopped = None;
            }
        }
        let serving = spawner::pids();
        for &pid in &serving {
            let stopped = spawner::proc_stat(pid).is_some_and(|s| matches!(s.state, 'T' | 't'));
            spawner::set_stopped(pid, stopped);
            match (stopped, spawner_stopped.get(&pid).copied()) {
                (true, None) => {
                    tracing::warn!(
                        "the spawner process {pid} is stopped: commands' ends are read from the \
                         kernel, new commands go to the pool's other spawners (with none \
                         running, they wait at most a few seconds, then not_started), and the \
                         scheduler keeps run deadlines itself"
                    );
                    spawner_stopped.insert(pid, Instant::now());
                }
                (false, Some(since)) => {
                    tracing::info!(
                        "the spawner process {pid} runs again (stopped for {})",
                        crate::time::human_ms(since.elapsed().as_millis() as u64)
                    );
                    spawner_stopped.remove(&pid);
                }
                _ => {}
            }
        }
        // Gone instead (its reader said so).
        spawner_stopped.retain(|pid, _| serving.contains(pid));
        if wd != State::Fine || !spawner_stopped.is_empty() {
            enforce();
        }
        std::thread::sleep(EVERY);
    }
}

/// Kills, from the scheduler, every run's group past its deadline.
fn enforce() {
    let n = watchdog::enforce_deadlines();
    if n > 0 {
        tracing::warn!(
            "{n} run(s) past their lease deadline killed by the scheduler (its watchdog could \
             not)"
        );
    }
}

/// Starts a new watchdog in place of the old, re-armed with every live run, and records it.
/// False when none could be started.
fn replace(db: &str, owner: &str, why: &str) -> bool {
    match watchdog::restart() {
        Ok((pid, runs)) => {
            // Commands the spawner starts from now on are held from their first instant.
            let handed = watchdog::pipe_fd().is_some_and(spawner::hand_watchdog);
            let spawner = if handed {
                "its pipe handed to the spawner"
            } else {
                "runs arm it themselves"
            };
            let detail =
                format!("{why}: watchdog {pid} started, {runs} run(s) re-armed, {spawner}");
            tracing::warn!("{detail}");
            let recorded =
                lend(db).and_then(|mut s| crate::jobs::watchdog_restarted(&mut s, owner, &detail));
            if let Err(e) = recorded {
                tracing::warn!("cannot record the watchdog's restart: {e}");
            }
            true
        }
        Err(e) => {
            tracing::error!(
                "{why}, and no new watchdog could be started ({e}): the scheduler keeps run \
                 deadlines itself"
            );
            false
        }
    }
}

//! The loop behind `exactly run`: turns due slots into firings, starts the runs it wins,
//! starts queued firings when their lease frees up, resumes interrupted firings (never its own,
//! at most 3 runs a firing), and on SIGTERM/SIGINT/SIGHUP stops firing, gives running commands
//! a grace period, and exits.
use super::config::Job;
use super::execute::{execute, log_line, RunSpec};
use crate::firing::{self, FireRequest, Fired, Started, Waiting};
use crate::time::{self, Ts};
use crate::Result;
use crate::Store;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(100);
/// A firing this late is still on time (scheduling jitter, a quick restart); later than this
/// plus the job's catch-up window, it is a miss.
pub const LATE_OK: Duration = Duration::from_secs(2);
/// Most missed slots recorded row by row in one go; beyond that they are only counted.
const MISSED_ROWS: usize = 1000;
/// Most late slots fired in one tick (a long catch-up window on a fast job).
const CATCHUP_MAX: usize = 10_000;
/// How far back a firing whose run died is fired again (a firing marked for retry by an
/// observer is retried however old, bounded by its attempt limit).
const RESUME_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// A scheduler's fixed facts.
pub struct Config {
    pub db: String,
    pub owner: String,
    pub cwd: Option<PathBuf>,
    pub grace: Duration,
}

struct JobState {
    job: Job,
    /// Every slot up to here has been handled.
    cursor: Ts,
}

struct Running {
    job: String,
    run_id: String,
    handle: JoinHandle<()>,
}

/// Runs until SIGTERM or SIGINT; returns the exit code (0).
pub fn run(
    mut store: Store,
    cfg: Config,
    jobs: Vec<Job>,
    fresh: &[String],
    stop: Arc<AtomicBool>,
) -> Result<i32> {
    let now = time::now();
    let mut states = Vec::new();
    for job in jobs {
        // A job new to the registry has no past to have missed; otherwise pick up after the
        // last slot any scheduler fired.
        let last = if fresh.contains(&job.name) {
            None
        } else {
            firing::last_slot(&mut store, &job.name)?.and_then(|s| time::parse(&s))
        };
        states.push(JobState {
            cursor: last.unwrap_or(now).min(now),
            job,
        });
    }
    let kill = Arc::new(AtomicBool::new(false));
    let mut runs: Vec<Running> = Vec::new();
    log_line(
        "INFO",
        "-",
        &format!(
            "scheduler {} started with {} job(s)",
            cfg.owner,
            states.len()
        ),
    );
    while !stop.load(Ordering::SeqCst) {
        let tick = Instant::now();
        for st in states.iter_mut() {
            if let Err(e) = advance(&mut store, &cfg, st, &kill, &mut runs) {
                log_line("ERROR", &st.job.name, &format!("{e}"));
            }
        }
        runs.retain(|r| !r.handle.is_finished());
        if let Some(rest) = TICK.checked_sub(tick.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    shutdown(&cfg, runs, &kill);
    Ok(0)
}

fn shutdown(cfg: &Config, mut runs: Vec<Running>, kill: &Arc<AtomicBool>) {
    runs.retain(|r| !r.handle.is_finished());
    log_line(
        "INFO",
        "-",
        &format!(
            "stopping: no new firings; {} running command(s) get up to {} to finish",
            runs.len(),
            time::human_ms(cfg.grace.as_millis() as u64)
        ),
    );
    let deadline = Instant::now() + cfg.grace;
    while runs.iter().any(|r| !r.handle.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for r in runs.iter().filter(|r| !r.handle.is_finished()) {
        log_line(
            "WARN",
            &r.job,
            &format!("run {} outlived the grace period: killing it", r.run_id),
        );
    }
    kill.store(true, Ordering::SeqCst);
    for r in runs {
        let _ = r.handle.join();
    }
    log_line("INFO", "-", &format!("scheduler {} stopped", cfg.owner));
}

/// Handles one job's due slots and its queue.
fn advance(
    store: &mut Store,
    cfg: &Config,
    st: &mut JobState,
    kill: &Arc<AtomicBool>,
    runs: &mut Vec<Running>,
) -> Result<()> {
    let now = time::now();
    let job = &st.job;
    let horizon = now - chrono::Duration::milliseconds((job.catchup + LATE_OK).as_millis() as i64);
    if st.cursor < horizon {
        let (slots, total) = job.schedule.slots(st.cursor, horizon, MISSED_ROWS);
        if total > 0 {
            let slots: Vec<String> = slots.into_iter().map(time::fmt).collect();
            let n = firing::record_missed(store, &job.name, &slots, total, &cfg.owner)?;
            if n > 0 {
                log_line(
                    "ERROR",
                    &job.name,
                    &format!(
                        "{n} firing(s) up to {} missed: no scheduler ran them within the catch-up window",
                        slots.last().map(String::as_str).unwrap_or("?")
                    ),
                );
            }
        }
        st.cursor = horizon;
    }
    // Waiting firings go first, so a new one finds the run live and queues behind them. A job
    // this scheduler is itself running has nothing waiting for it: its own run may be slow (an
    // observer, a locked database) but it is alive, and resuming it would run it twice.
    let mine = runs
        .iter()
        .any(|r| r.job == job.name && !r.handle.is_finished());
    let now_text = time::now_text();
    let waiting = if mine {
        Waiting::default()
    } else {
        firing::waiting(store, &job.name, &now_text)?
    };
    let until = time::fmt(time::add(time::now(), job.lease));
    let mut started = None;
    if waiting.queued {
        started = firing::start_queued(store, &job.name, &cfg.owner, &until, &now_text)?
            .map(|s| ("INFO", "a queued firing", s));
    }
    // A firing whose run died (with its scheduler, or killed at a deploy) or whose effect never
    // happened goes again, for the same slot, up to its attempt limit.
    if started.is_none() && waiting.resumable {
        let window = chrono::Duration::from_std(job.catchup.max(RESUME_WINDOW))
            .unwrap_or(chrono::Duration::days(1));
        let oldest = time::fmt(now - window);
        let resumed = firing::resume(store, &job.name, &cfg.owner, &until, &now_text, &oldest)?;
        for (slot, n) in &resumed.gave_up {
            log_line(
                "ERROR",
                &job.name,
                &format!("firing at {slot} GAVE UP after {n} runs: not run again; check its effects by hand"),
            );
        }
        started = resumed.started.map(|s| {
            (
                "WARN",
                "an interrupted firing (or one whose effect never happened)",
                s,
            )
        });
    }
    if let Some((level, what, s)) = started {
        log_line(
            level,
            &job.name,
            &format!(
                "{what} at {} started run {} (token {})",
                s.slot, s.run_id, s.token
            ),
        );
        runs.push(spawn(cfg, job, s, kill));
    }
    let (due, _) = job.schedule.slots(st.cursor, now, CATCHUP_MAX);
    for slot in due {
        let late = (now - slot).num_milliseconds() > LATE_OK.as_millis() as i64;
        let kind = if late { "catchup" } else { "scheduled" };
        let slot_text = time::fmt(slot);
        let until = time::fmt(time::add(time::now(), job.lease));
        let fired = firing::fire(
            store,
            &FireRequest {
                job: &job.name,
                slot: &slot_text,
                kind,
                owner: &cfg.owner,
                lease_until: &until,
                now: &time::now_text(),
                overlap: job.overlap,
                backfill: false,
                live_here: runs
                    .iter()
                    .any(|r| r.job == job.name && !r.handle.is_finished()),
            },
        )?;
        st.cursor = slot;
        report(&job.name, kind, &slot_text, &fired);
        if let Fired::Started(started) = fired {
            runs.push(spawn(cfg, job, started, kill));
        }
    }
    Ok(())
}

fn spawn(cfg: &Config, job: &Job, started: Started, kill: &Arc<AtomicBool>) -> Running {
    let spec = RunSpec {
        db: cfg.db.clone(),
        job: job.name.clone(),
        started: started.clone(),
        lease: job.lease,
        timeout: job.timeout,
        observe_timeout: job.observe_timeout,
        command: job.command.clone(),
        cwd: cfg.cwd.clone(),
        kill: kill.clone(),
    };
    let name = job.name.clone();
    let handle = std::thread::spawn(move || {
        if let Err(e) = execute(&spec) {
            log_line(
                "ERROR",
                &spec.job,
                &format!("run {}: {e}", spec.started.run_id),
            );
        }
    });
    Running {
        job: name,
        run_id: started.run_id,
        handle,
    }
}

/// One log line saying what became of a firing (worded by [`Fired::describe`]).
pub fn report(job: &str, kind: &str, slot: &str, fired: &Fired) {
    log_line(fired.level(), job, &fired.describe(kind, slot));
}

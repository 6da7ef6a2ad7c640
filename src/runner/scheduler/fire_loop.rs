//! The loop behind `exactly run`: turns due slots into firings, starts the runs it wins,
//! starts queued firings when their lease frees up, resumes interrupted firings (never its own,
//! at most 3 runs a firing, more with `retries`), reloads the jobs file on SIGHUP, and on
//! SIGTERM/SIGINT stops firing, gives running commands a grace period, and exits.
use super::batches;
use super::clock_steps::{self, Clock};
use super::db_health::Health;
use super::missed::{self, Passed};
use super::reload::{FileJobs, Reloaded};
use super::share::Share;
use super::supervise;
use super::tick::{start_waiting, Config, JobState, Running, Tick};
use crate::firing::{self, Waiting};
use crate::runner::config::definitions::Watch;
use crate::runner::config::job::Job;
use crate::runner::spawn::{spawner, watchdog};
use crate::time::{self, Ts};
use crate::{Result, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(100);

/// The flags the signals raise: stop (SIGTERM, SIGINT), reload the jobs file (SIGHUP).
pub(crate) struct Signals {
    pub stop: Arc<AtomicBool>,
    pub reload: Arc<AtomicBool>,
}

/// A job's state as this scheduler starts firing it: a job new to the registry has no past to
/// have missed; otherwise it picks up after the last slot any scheduler fired, or the end of
/// the file's last outage before this start (`handled`), whichever is later: the scheduler that
/// ended that outage handled its slots (fired, or left as the outage's, never missed).
fn start_state(
    store: &mut Store,
    job: Job,
    fresh: &[String],
    handled: Option<Ts>,
) -> Result<JobState> {
    let last = if fresh.iter().any(|f| *f == job.name) {
        None
    } else {
        firing::last_slot(store, &job.name)?.max(handled)
    };
    Ok(state_after(job, last))
}

/// [`start_state`] of every job, their last slots read in one transaction.
fn start_states(
    store: &mut Store,
    jobs: Vec<Job>,
    fresh: &[String],
    handled: Option<Ts>,
) -> Result<Vec<JobState>> {
    let asked: Vec<&crate::JobName> = jobs
        .iter()
        .filter(|j| !fresh.iter().any(|f| *f == j.name))
        .map(|j| &j.name)
        .collect();
    let mut lasts = firing::last_slots(store, &asked)?.into_iter();
    let mut states = Vec::with_capacity(jobs.len());
    for job in jobs {
        let last = if fresh.iter().any(|f| *f == job.name) {
            None
        } else {
            lasts.next().flatten().max(handled)
        };
        states.push(state_after(job, last));
    }
    Ok(states)
}

/// A job's state from the last slot handled (see [`start_state`]).
fn state_after(job: Job, last: Option<Ts>) -> JobState {
    let now = time::now();
    JobState::new(job, last.unwrap_or(now).min(now))
}

/// Runs until SIGTERM or SIGINT; returns the exit code (0). A database gone or failing past
/// `give_up_after` stops it the same way, with that error. SIGHUP reloads the jobs file.
pub(crate) fn fire_until_stopped(
    mut store: Store,
    cfg: Config,
    jobs: Vec<Job>,
    fresh: &[String],
    signals: Signals,
) -> Result<i32> {
    let Signals { stop, reload } = signals;
    let mut watch = Watch::new(&jobs, cfg.cwd.as_deref());
    let mut file = FileJobs::new(&jobs, cfg.cwd.as_deref());
    let handled =
        crate::jobs::last_outage_end(&mut store, &cfg.source, cfg.outage.as_ref().map(|o| o.to))?;
    let mut states = start_states(&mut store, jobs, fresh, handled)?;
    // The runs' watchdog is forked now, while this process is small.
    if !watchdog::ready() {
        tracing::warn!(
            "no watchdog process: each run's thread alone stops its command at its deadline",
        );
    }
    // Commands start through one small process forked once (see `spawn/spawner/`).
    spawner::ready();
    crate::runner::run::execute::know_db_identity(&cfg.db);
    // Both helpers can die or be frozen while we go on: watched, and stood in for.
    let _supervisor = supervise::start(&cfg.db, &cfg.owner);
    // Firings go before the runs' own writes (ends, renewals) in this process.
    firing::writes_first(&mut store);
    let kill = Arc::new(AtomicBool::new(false));
    let mut runs: Vec<Running> = Vec::new();
    let mut clock = Clock::new(time::now());
    let mut health = Health::new(&cfg.db, cfg.give_up_after);
    let mut share = Share::new(&cfg.owner, &cfg.source);
    tracing::info!(
        "scheduler {} started with {} job(s)",
        cfg.owner,
        states.len(),
    );
    while !stop.load(Ordering::SeqCst) {
        let tick = Instant::now();
        if reload.swap(false, Ordering::SeqCst) {
            if let Some(r) = file.reload(&mut store, &cfg) {
                // A removed job's run decided ahead of its slot would start after the
                // reload: it does not, as a slot decided when due would not have fired.
                withdraw(&runs, |job| !r.jobs.iter().any(|j| *j.name == *job));
                watch = Watch::new(&r.jobs, cfg.cwd.as_deref());
                states = reloaded(&mut store, states, r, handled, &mut health);
                for st in states.iter_mut() {
                    st.mine = share.mine(&st.job.name);
                }
            }
        }
        // A job whose registered definition is no longer this scheduler's: newest wins.
        let stopped = watch.stopped(&mut store);
        // A job retired by a newer registration of its file is removed, as by a reload; a
        // superseded one's waiting run is its slot, decided under the older definition.
        withdraw(&runs, |job| {
            stopped.iter().any(|(n, retired)| *retired && n == job)
        });
        states.retain(|s| !stopped.iter().any(|(n, _)| *n == s.job.name));
        if share.refresh(&mut store) {
            for st in states.iter_mut() {
                st.mine = share.mine(&st.job.name);
            }
        }
        share.say(states.iter().filter(|s| s.mine).count(), states.len());
        let now = time::now();
        if let (Some(step), last_tick) = clock.observe(now) {
            tracing::warn!("{}", step.describe());
            for st in states.iter_mut() {
                st.handled(clock_steps::cursor_after(step, st.cursor, last_tick));
            }
        }
        let net = share.net_after();
        record_missed(&mut store, &cfg, &mut states, now, &mut health, net);
        let silent_for = crate::jobs::scheduler_dead_after();
        let rules = firing::ResumeRules {
            me: cfg.owner.clone(),
            silent_for,
            trust_silence: health.working_for(silent_for),
        };
        let mut t = Tick {
            store: &mut store,
            cfg: &cfg,
            kill: &kill,
            runs: &mut runs,
            health: &mut health,
            rules: &rules,
        };
        let pending = start_all_waiting(&mut t, &mut states, &mut share, now);
        batches::fire_due(&mut t, &mut states, pending, &mut share);
        runs.retain(|r| !r.handle.is_finished());
        let rest = rest_after(tick, &states, &share);
        if let Err(e) = health.end_tick() {
            tracing::error!("{}", e);
            shutdown(&cfg, runs, &kill);
            return Err(e);
        }
        health.sleep(rest, &stop);
    }
    shutdown(&cfg, runs, &kill);
    Ok(0)
}

/// Stops the commands of the runs of `gone` jobs that wait for their slot (decided ahead)
/// from starting: they end `not_started`, their firings missed.
fn withdraw(runs: &[Running], gone: impl Fn(&str) -> bool) {
    for run in runs.iter().filter(|r| gone(&r.job)) {
        run.withdrawn.store(true, Ordering::SeqCst);
    }
}

/// The states after a reload: runs in progress go on (their threads hold their own settings);
/// a removed job's state goes, a changed one's next firing takes the new settings, a new one
/// starts as at the scheduler's start.
fn reloaded(
    store: &mut Store,
    mut old: Vec<JobState>,
    r: Reloaded,
    handled: Option<Ts>,
    health: &mut Health,
) -> Vec<JobState> {
    let mut states = Vec::new();
    for job in r.jobs {
        let st = match old.iter().position(|s| s.job.name == job.name) {
            Some(k) => {
                let mut st = old.swap_remove(k);
                st.replace(job);
                st
            }
            None => match start_state(store, job.clone(), &r.fresh, handled) {
                Ok(st) => st,
                Err(e) => {
                    health.failed(&job.name, &e);
                    JobState::new(job, time::now())
                }
            },
        };
        states.push(st);
    }
    states
}

/// Records each job's missed slots up to `now` (see `missed`); a job whose write failed is
/// `behind` and fires nothing this tick.
fn record_missed(
    store: &mut Store,
    cfg: &Config,
    states: &mut [JobState],
    now: Ts,
    health: &mut Health,
    net: Duration,
) {
    let mut passed = Passed::default();
    for st in states.iter_mut() {
        let recorded = missed::record_behind(store, cfg, st, now, health, net);
        st.behind = recorded.is_err();
        match recorded {
            Ok(n) => passed.add(n),
            Err(e) => health.failed(&st.job.name, &e),
        }
    }
    passed.say(cfg.outage.as_ref());
}

/// Starts every job's queued and interrupted firings it may, read in one go instead of one
/// read per job. Returns those that could not start yet (a dead run's lease not yet past the
/// skew margin): tried again just before the same job's new firing, which must not pass them.
fn start_all_waiting(
    t: &mut Tick<'_>,
    states: &mut [JobState],
    share: &mut Share,
    now: Ts,
) -> Vec<(usize, Waiting)> {
    let mut pending = Vec::new();
    match firing::waiting_jobs(t.store, now) {
        Ok(waiting) => {
            share.waiting(&waiting.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>());
            for (name, w) in waiting {
                let Some(i) = states.iter().position(|s| s.job.name == name) else {
                    continue;
                };
                // Another's job waits for its owner, unless left waiting (see `share`).
                if !share.may_start_waiting(&name, states[i].mine) {
                    continue;
                }
                let now = time::now();
                let st = &mut states[i];
                match start_waiting(t, st, w, now) {
                    Ok(true) => {}
                    Ok(false) => pending.push((i, w)),
                    Err(e) => t.health.failed(&states[i].job.name, &e),
                }
            }
        }
        Err(e) => t.health.failed("-", &e),
    }
    pending
}

/// How long to sleep after a tick begun at `tick`: until the next tick, or earlier for the
/// next due slot, never past one.
fn rest_after(tick: Instant, states: &[JobState], share: &Share) -> Duration {
    let mut rest = TICK.saturating_sub(tick.elapsed());
    let net = share.net_after();
    if let Some(next) = states.iter().filter_map(|s| s.wake_at(net)).min() {
        let until = (next - time::now()).to_std().unwrap_or(Duration::ZERO);
        rest = rest.min(until);
    }
    rest
}

fn shutdown(cfg: &Config, mut runs: Vec<Running>, kill: &Arc<AtomicBool>) {
    runs.retain(|r| !r.handle.is_finished());
    tracing::info!(
        "stopping: no new firings; {} running command(s) get up to {} to finish",
        runs.len(),
        time::human_ms(cfg.grace.as_millis() as u64),
    );
    let deadline = Instant::now() + cfg.grace;
    while runs.iter().any(|r| !r.handle.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for r in runs.iter().filter(|r| !r.handle.is_finished()) {
        tracing::warn!(job = %r.job, "run {} outlived the grace period: killing it", r.run_id);
    }
    // Runs SIGTERM their commands' groups (and stop waiting for a spawner to start one)...
    kill.store(true, Ordering::SeqCst);
    let killed_at = Instant::now();
    let mut sigkilled = false;
    while runs.iter().any(|r| !r.handle.is_finished()) {
        let waited = killed_at.elapsed();
        // ...and after a short grace the scheduler SIGKILLs them itself, whatever its spawner
        // or watchdog do (frozen, dead): each run hears its command's end from the kernel.
        if !sigkilled && waited >= SHUTDOWN_TERM {
            watchdog::kill_all();
            sigkilled = true;
        }
        if waited >= SHUTDOWN_AFTER_GRACE {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for r in runs {
        if r.handle.is_finished() {
            let _ = r.handle.join();
        } else {
            // The next scheduler resumes what it could not record (as a dead scheduler's).
            tracing::error!(
                job = %r.job,
                "run {} did not end within a second of the grace period: exiting without it",
                r.run_id
            );
        }
    }
    tracing::info!("scheduler {} stopped", cfg.owner);
}

/// At shutdown, after the grace period: how long commands have between SIGTERM and SIGKILL...
const SHUTDOWN_TERM: Duration = crate::policy::STOP_GRACE;
/// ...and how long the scheduler waits for its runs to record their ends before it exits.
const SHUTDOWN_AFTER_GRACE: Duration = Duration::from_millis(900);

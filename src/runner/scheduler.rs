//! The loop behind `exactly run`: turns due slots into firings, starts the runs it wins,
//! starts queued firings when their lease frees up, resumes interrupted firings (never its own,
//! at most 3 runs a firing, more with `retries`), reloads the jobs file on SIGHUP, and on
//! SIGTERM/SIGINT stops firing, gives running commands a grace period, and exits.
use super::config::Job;
use super::execute::{execute, RunSpec};
use super::health::Health;
use super::log;
use super::share::Share;
use crate::firing::{self, Started, Waiting};
use crate::time::{self, Ts};
use crate::{Result, Store};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::Level;

mod batches;

const TICK: Duration = Duration::from_millis(100);
/// Most firings decided in one transaction: a burst of 500 due at one instant is decided in one
/// commit of about 10 ms (it was 32 to a transaction, so that runs' writes got the lock between
/// batches; the write lanes, see `store/gate.rs`, now put firings before runs' ends).
const FIRE_BATCH: usize = 512;
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
    /// The jobs file (canonical path): its schedulers share its jobs (see `share`).
    pub source: String,
    /// The jobs file as given on the command line (read again at a reload).
    pub jobs_path: String,
    pub grace: Duration,
    /// A database failing this long stops the scheduler (see `health`).
    pub give_up_after: Duration,
    /// The outage this scheduler's start ended: the slots that fell due in it are the outage's
    /// (caught up within each job's catch-up window), never missed.
    pub outage: Option<crate::jobs::Outage>,
}

pub(super) struct JobState {
    pub(super) job: Job,
    /// Every slot up to here has been handled.
    pub(super) cursor: Ts,
    /// The first slot after the cursor (kept, so a tick does not ask a cron schedule again).
    next: Option<Ts>,
    /// When that slot is due: the slot plus its jitter (kept, so a tick hashes nothing).
    next_due: Option<Ts>,
    /// Its missed slots could not be recorded this tick: its later ones wait for them.
    behind: bool,
    /// Up to here, the firings its `dst_skipped = "skip"` left out are recorded missed.
    pub(super) dst_seen: Ts,
    /// This scheduler's to fire on time; another's, fired here only if left unrecorded.
    pub(super) mine: bool,
    /// Its failed firing (this slot) waits for its backoff until then, on the monotonic clock
    /// (a wall clock stepped back or forward neither silences nor hurries it): not asked again
    /// before, and the job's queued later slots wait behind it.
    retry_after: Option<(String, Instant)>,
    /// Its firings skipped while paused since the last one logged (the first one is logged,
    /// the others counted), and the latest: said in one line once it fires again.
    skipped: (u64, String),
}

impl JobState {
    fn new(job: Job, cursor: Ts) -> JobState {
        let next = job.schedule.next_after(cursor);
        JobState {
            next_due: next.map(|n| job.due_at(n)),
            job,
            cursor,
            next,
            behind: false,
            dst_seen: cursor,
            mine: true,
            retry_after: None,
            skipped: (0, String::new()),
        }
    }
    pub(super) fn handled(&mut self, upto: Ts) {
        self.cursor = upto;
        self.next = self.job.schedule.next_after(upto);
        self.next_due = self.next.map(|n| self.job.due_at(n));
    }
    /// When its next slot is acted on here: when due, or — another's — once left unrecorded.
    fn wake_at(&self, net: Duration) -> Option<Ts> {
        let net = chrono::Duration::from_std(net).unwrap_or(chrono::Duration::zero());
        self.next_due.map(|n| if self.mine { n } else { n + net })
    }
    /// Its slots due by `upto` (each at its slot plus its jitter), oldest first.
    fn due_by(&self, upto: Ts) -> Vec<Ts> {
        let (slots, _) = self.job.schedule.slots(self.cursor, upto, CATCHUP_MAX);
        let due = slots
            .iter()
            .take_while(|s| self.job.due_at(**s) <= upto)
            .count();
        slots[..due].to_vec()
    }
    /// A reloaded definition: its new settings apply from its next firing.
    fn replace(&mut self, job: Job) {
        self.job = job;
        self.handled(self.cursor);
        self.retry_after = None;
    }
}

/// The flags the signals raise: stop (SIGTERM, SIGINT), reload the jobs file (SIGHUP).
pub struct Signals {
    pub stop: Arc<AtomicBool>,
    pub reload: Arc<AtomicBool>,
}

/// What firing and starting runs work with on a tick: the database, the scheduler's settings,
/// the shutdown flag runs watch, the runs started, its health, and the rules of resuming.
struct Tick<'a> {
    store: &'a mut Store,
    cfg: &'a Config,
    kill: &'a Arc<AtomicBool>,
    runs: &'a mut Vec<Running>,
    health: &'a mut Health,
    rules: &'a firing::ResumeRules,
}

struct Running {
    job: String,
    run_id: String,
    handle: JoinHandle<()>,
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
    let now = time::now();
    let last = if fresh.iter().any(|f| *f == job.name) {
        None
    } else {
        firing::last_slot(store, &job.name)?
            .and_then(|s| time::parse(&s))
            .max(handled)
    };
    Ok(JobState::new(job, last.unwrap_or(now).min(now)))
}

/// Runs until SIGTERM or SIGINT; returns the exit code (0). A database gone or failing past
/// `give_up_after` stops it the same way, with that error. SIGHUP reloads the jobs file.
pub fn run(
    mut store: Store,
    cfg: Config,
    jobs: Vec<Job>,
    fresh: &[String],
    signals: Signals,
) -> Result<i32> {
    let Signals { stop, reload } = signals;
    let mut watch = super::definitions::Watch::new(&jobs, cfg.cwd.as_deref());
    let mut file = super::reload::FileJobs::new(&jobs, cfg.cwd.as_deref());
    let mut states = Vec::new();
    let handled =
        crate::jobs::last_outage_end(&mut store, &cfg.source, cfg.outage.as_ref().map(|o| o.to))?;
    for job in jobs {
        states.push(start_state(&mut store, job, fresh, handled)?);
    }
    // The runs' watchdog is forked now, while this process is small.
    if !super::watchdog::ready() {
        tracing::warn!(
            "no watchdog process: each run's thread alone stops its command at its deadline",
        );
    }
    // Commands start through one small process forked once (see `spawner.rs`).
    super::spawner::ready();
    // Both helpers can die or be frozen while we go on: watched, and stood in for.
    let _supervisor = super::supervise::start(&cfg.db, &cfg.owner);
    // Firings go before the runs' own writes (ends, renewals) in this process.
    firing::writes_first(&mut store);
    let kill = Arc::new(AtomicBool::new(false));
    let mut runs: Vec<Running> = Vec::new();
    let mut clock = super::clock::Clock::new(time::now());
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
                watch = super::definitions::Watch::new(&r.jobs, cfg.cwd.as_deref());
                states = reloaded(&mut store, states, r, handled, &mut health);
                for st in states.iter_mut() {
                    st.mine = share.mine(&st.job.name);
                }
            }
        }
        // A job whose registered definition is no longer this scheduler's: newest wins.
        let stopped = watch.stopped(&mut store);
        states.retain(|s| !stopped.iter().any(|n| *n == s.job.name));
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
                st.handled(super::clock::cursor_after(step, st.cursor, last_tick));
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

/// The states after a reload: runs in progress go on (their threads hold their own settings);
/// a removed job's state goes, a changed one's next firing takes the new settings, a new one
/// starts as at the scheduler's start.
fn reloaded(
    store: &mut Store,
    mut old: Vec<JobState>,
    r: super::reload::Reloaded,
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
    let mut passed = super::missed::Passed::default();
    for st in states.iter_mut() {
        let recorded = super::missed::record_behind(store, cfg, st, now, health, net);
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
            super::watchdog::kill_all();
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

/// Starts a job's queued firing, or resumes an interrupted one, when its lease is free. Goes
/// before the job's new firings, so a new one finds the run live and queues behind them.
fn start_waiting(t: &mut Tick<'_>, st: &mut JobState, waiting: Waiting, now: Ts) -> Result<bool> {
    let (store, cfg, kill, rules) = (&mut *t.store, t.cfg, t.kill, t.rules);
    let runs = &mut *t.runs;
    // A failed firing waiting for its backoff is not asked again before it ends, and goes
    // before the job's later slots: those queued wait behind it.
    let held = st.retry_after.as_ref().map(|(_, at)| Instant::now() >= *at);
    if waiting.resumable && held == Some(false) {
        return Ok(false);
    }
    // Its own copy: the state keeps what the resume says of the next retry.
    let job = &st.job.clone();
    // A job this scheduler is itself running has nothing waiting for it: its own run may be
    // slow (an observer, a locked database) but it is alive, and resuming it would run it twice.
    if live_here(runs, &job.name) {
        return Ok(true);
    }
    let until = time::add(now, job.lease);
    // The run's local deadline counts from before the write that grants its lease.
    let asked = Instant::now();
    let mut started = None;
    // A firing whose run died (with its scheduler, or killed at a deploy), whose run failed with
    // retries left, or whose effect never happened goes again, for the same slot, up to its
    // attempt limit: before the job's queued later slots.
    let mut backing_off = false;
    if waiting.resumable {
        let window = chrono::Duration::from_std(job.catchup.max(RESUME_WINDOW))
            .unwrap_or(chrono::Duration::days(1));
        let oldest = now - window;
        let policy = job.policy;
        let name = job.name.clone();
        let backoff = move |slot: &str, runs: i64| policy.backoff(&name, slot, runs);
        let served = st.retry_after.take().filter(|_| held == Some(true));
        let retry = crate::policy::RetryRules {
            attempts: policy.attempts(),
            backoff: &backoff,
            held: served.as_ref().map(|(slot, _)| slot.as_str()),
        };
        let resumed = firing::resume(store, &job.name, until, now, oldest, rules, &retry)?;
        st.retry_after = resumed
            .backoff_left
            .map(|(slot, left)| (slot, Instant::now() + left));
        backing_off = st.retry_after.is_some();
        for (slot, n) in &resumed.gave_up {
            tracing::error!(
                job = %job.name,
                "firing at {slot} GAVE UP after {n} runs: not run again; \
                 check its effects by hand"
            );
        }
        started = resumed.started.map(|s| {
            (
                Level::WARN,
                "a firing run again (interrupted, failed with retries left, \
                 or its effect never happened)",
                s,
                true,
            )
        });
    }
    if started.is_none() && waiting.queued && !backing_off {
        started = firing::start_queued(store, &job.name, &cfg.owner, until, now)?
            .map(|s| (Level::INFO, "a queued firing", s, false));
    }
    if let Some((level, what, s, resumed)) = started {
        log::line(
            level,
            &job.name,
            &format!(
                "{what} at {} started run {} (token {})",
                s.slot, s.run_id, s.token
            ),
        );
        let how = How {
            resumed,
            settle: true,
        };
        runs.push(spawn(cfg, job, s, how, kill, asked));
        return Ok(true);
    }
    Ok(false)
}

fn live_here(runs: &[Running], job: &str) -> bool {
    runs.iter().any(|r| r.job == job && !r.handle.is_finished())
}

/// What a run must do before its command (see [`RunSpec`]).
struct How {
    resumed: bool,
    settle: bool,
}

fn spawn(
    cfg: &Config,
    job: &Job,
    started: Started,
    how: How,
    kill: &Arc<AtomicBool>,
    granted: Instant,
) -> Running {
    let spec = RunSpec {
        db: cfg.db.clone(),
        job: job.name.clone(),
        started: started.clone(),
        resumed: how.resumed,
        settle: how.settle,
        lease: job.lease,
        timeout: job.timeout,
        observe_timeout: job.observe_timeout,
        command: job.command.clone(),
        cwd: cfg.cwd.clone(),
        kill: kill.clone(),
        granted,
        failure: super::policy::failure_rules(&job.policy, &cfg.owner),
        ping: job.ping.clone(),
    };
    let name = job.name.clone();
    let policy = job.policy;
    let handle = std::thread::spawn(move || match execute(&spec) {
        Ok(r) => super::policy::report(&spec.job, &policy, &spec.started, &r.after),
        Err(e) => tracing::error!(job = %spec.job, "run {}: {e}", spec.started.run_id),
    });
    Running {
        job: name.to_string(),
        run_id: started.run_id,
        handle,
    }
}

//! The loop behind `exactly run`: turns due slots into firings, starts the runs it wins,
//! starts queued firings when their lease frees up, resumes interrupted firings (never its own,
//! at most 3 runs a firing, more with `retries`), reloads the jobs file on SIGHUP, and on
//! SIGTERM/SIGINT stops firing, gives running commands a grace period, and exits.
use super::config::Job;
use super::execute::{execute, report, RunSpec};
use super::health::Health;
use super::log;
use super::share::Share;
use crate::firing::{self, DueFate, DueRequest, FireRequest, Fired, Started, Waiting};
use crate::state::FiringKind;
use crate::time::{self, Ts};
use crate::{Error, Result, Store};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::Level;

const TICK: Duration = Duration::from_millis(100);
/// Most firings decided in one transaction: a burst of 500 due at one instant is decided in one
/// commit of about 10 ms (it was 32 to a transaction, so that runs' writes got the lock between
/// batches; the write lanes, see `store/gate.rs`, now put firings before runs' ends).
const FIRE_BATCH: usize = 512;
use crate::schedule::LATE_OK;
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
                // Runs in progress go on (their threads hold their own settings); a removed
                // job's state goes, a changed one's next firing takes the new settings.
                watch = super::definitions::Watch::new(&r.jobs, cfg.cwd.as_deref());
                let mut old: Vec<JobState> = std::mem::take(&mut states);
                for job in r.jobs {
                    let st = match old.iter().position(|s| s.job.name == job.name) {
                        Some(k) => {
                            let mut st = old.swap_remove(k);
                            st.replace(job);
                            st
                        }
                        None => match start_state(&mut store, job.clone(), &r.fresh, handled) {
                            Ok(st) => st,
                            Err(e) => {
                                health.failed(&job.name, &e);
                                JobState::new(job, time::now())
                            }
                        },
                    };
                    states.push(st);
                }
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
        let mut passed = super::missed::Passed::default();
        for st in states.iter_mut() {
            let recorded = super::missed::record_behind(&mut store, &cfg, st, now, &health, net);
            st.behind = recorded.is_err();
            match recorded {
                Ok(n) => passed.add(n),
                Err(e) => health.failed(&st.job.name, &e),
            }
        }
        passed.say(cfg.outage.as_ref());
        let silent_for = crate::jobs::scheduler_dead_after();
        let rules = firing::ResumeRules {
            me: cfg.owner.clone(),
            silent_for,
            trust_silence: health.working_for(silent_for),
        };
        // One read for every job's queue and interrupted firings, instead of one per job.
        // Those that could not start yet (a dead run's lease not yet past the skew margin) are
        // tried again just before the same job's new firing, which must not pass them.
        let mut pending = Vec::new();
        let mut t = Tick {
            store: &mut store,
            cfg: &cfg,
            kill: &kill,
            runs: &mut runs,
            health: &mut health,
            rules: &rules,
        };
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
                    match start_waiting(&mut t, st, w, now) {
                        Ok(true) => {}
                        Ok(false) => pending.push((i, w)),
                        Err(e) => t.health.failed(&states[i].job.name, &e),
                    }
                }
            }
            Err(e) => t.health.failed("-", &e),
        }
        fire_due(&mut t, &mut states, pending, &mut share);
        runs.retain(|r| !r.handle.is_finished());
        // Wake for the next tick, or earlier for the next due slot: never sleep past one.
        let mut rest = TICK.saturating_sub(tick.elapsed());
        let net = share.net_after();
        if let Some(next) = states.iter().filter_map(|s| s.wake_at(net)).min() {
            let until = (next - time::now()).to_std().unwrap_or(Duration::ZERO);
            rest = rest.min(until);
        }
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

/// Fires every job's due slots, oldest first, [`FIRE_BATCH`] firings to a transaction (each
/// job once per batch, so a job's second slot sees the run its first one started), and starts
/// each batch's runs as soon as it commits.
fn fire_due(
    t: &mut Tick<'_>,
    states: &mut [JobState],
    pending: Vec<(usize, Waiting)>,
    share: &mut Share,
) {
    let now = time::now();
    let mut due: Vec<(Ts, usize)> = Vec::new();
    for (i, st) in states.iter().enumerate() {
        // A job whose missed slots are not recorded yet fires none (they go first, next tick,
        // in one write), so an outage's slots are not decided one transaction each.
        if st.mine && !st.behind && st.next_due.is_some_and(|n| n <= now) {
            due.extend(st.due_by(now).into_iter().map(|s| (s, i)));
        }
    }
    // How late its own burst is decided tells how late the others' are (see `share`); slots
    // already late (a catch-up) say nothing about it.
    let on_time = now - chrono::Duration::from_std(LATE_OK).unwrap_or(chrono::Duration::zero());
    let oldest = due.iter().map(|d| d.0).filter(|s| *s >= on_time).min();
    if let Err(e) = unrecorded(t.store, states, now, share.net_after(), &mut due) {
        t.health.failed("-", &e);
    }
    // Stable: a job's slots keep their order.
    due.sort_by_key(|&(slot, _)| slot);
    if due.is_empty() {
        return;
    }
    fire_batches(t, states, &due, pending);
    if let Some(lag) = oldest.and_then(|s| (time::now() - s).to_std().ok()) {
        share.own_lag(lag);
    }
}

/// Other schedulers' slots still unrecorded `net` after they fell due join `due` (their owner
/// died or does not count itself their owner yet); those recorded are handled. One read.
fn unrecorded(
    store: &mut Store,
    states: &mut [JobState],
    now: Ts,
    net: Duration,
    due: &mut Vec<(Ts, usize)>,
) -> Result<()> {
    let upto = now - chrono::Duration::from_std(net).unwrap_or(chrono::Duration::zero());
    let mut watched: Vec<(usize, Vec<Ts>)> = Vec::new();
    for (i, st) in states.iter().enumerate() {
        if !st.mine && !st.behind && st.next_due.is_some_and(|n| n <= upto) {
            watched.push((i, st.due_by(upto)));
        }
    }
    if watched.is_empty() {
        return Ok(());
    }
    let texts: Vec<(usize, Vec<String>)> = watched
        .iter()
        .map(|(i, slots)| (*i, slots.iter().copied().map(time::fmt).collect()))
        .collect();
    let probe: Vec<(&str, &str)> = texts
        .iter()
        .flat_map(|(i, slots)| {
            let name = states[*i].job.name.as_str();
            slots.iter().map(move |s| (name, s.as_str()))
        })
        .collect();
    let recorded = firing::recorded(store, &probe)?;
    drop(probe);
    let mut fired = 0;
    for ((i, slots), (_, texts)) in watched.into_iter().zip(&texts) {
        let st = &mut states[i];
        let mut left = false;
        for (slot, text) in slots.into_iter().zip(texts) {
            if !recorded.contains(&(st.job.name.to_string(), text.clone())) {
                due.push((slot, i));
                left = true;
                fired += 1;
            } else if !left {
                // Recorded by its owner, in order: done here. One after a slot left
                // unrecorded is passed when that one fires.
                st.handled(slot);
            }
        }
    }
    if fired > 0 {
        tracing::warn!(
            "share: {fired} firing(s) \
             of other schedulers' jobs unrecorded {} after they fell due: fired here",
            time::human_ms(net.as_millis() as u64),
        );
    }
    Ok(())
}

/// Fires `due` in batches (see [`fire_due`]), each batch's waiting firings first.
fn fire_batches(
    t: &mut Tick<'_>,
    states: &mut [JobState],
    due: &[(Ts, usize)],
    mut pending: Vec<(usize, Waiting)>,
) {
    // A job whose firing failed is left for the next tick: its later slots must not pass it.
    let mut failed = std::collections::HashSet::new();
    let mut pos = 0;
    while pos < due.len() {
        let mut seen = std::collections::HashSet::new();
        let mut batch = Vec::new();
        while let Some(&(slot, i)) = due.get(pos) {
            if failed.contains(&i) {
                pos += 1;
                continue;
            }
            if batch.len() == FIRE_BATCH || !seen.insert(i) {
                break;
            }
            batch.push((slot, i));
            pos += 1;
        }
        if batch.is_empty() {
            break;
        }
        let asked = Instant::now();
        // A job's waiting firing goes before its new one (see `run`): tried again at the very
        // instant the new one is decided at, so a lease the one cannot take the other cannot
        // either (the new one is then coalesced or queued behind it, as if the tick came later).
        let now = time::now();
        for &(_, i) in &batch {
            if let Some(k) = pending.iter().position(|(p, _)| *p == i) {
                let (_, w) = pending.swap_remove(k);
                let st = &mut states[i];
                if let Err(e) = start_waiting(t, st, w, now) {
                    t.health.failed(&states[i].job.name, &e);
                }
            }
        }
        let now_text = time::fmt(now);
        let parts: Vec<(usize, Ts, String, String, FiringKind)> = batch
            .iter()
            .map(|&(slot, i)| {
                let due_at = states[i].job.due_at(slot);
                let late = (now - due_at).num_milliseconds() > LATE_OK.as_millis() as i64;
                let kind = if late {
                    FiringKind::Catchup
                } else {
                    FiringKind::Scheduled
                };
                let until = time::fmt(time::add(now, states[i].job.lease));
                (i, slot, time::fmt(slot), until, kind)
            })
            .collect();
        // Each slot's lateness is judged when its transaction holds the database: one that
        // waited past its catch-up window for a lock or a server is missed, not run late.
        let requests: Vec<DueRequest<'_>> = parts
            .iter()
            .map(|(i, slot_ts, slot, until, kind)| DueRequest {
                fire: FireRequest {
                    job: &states[*i].job.name,
                    slot,
                    kind: *kind,
                    owner: &t.cfg.owner,
                    lease_until: until,
                    now: &now_text,
                    overlap: states[*i].job.overlap,
                    live_here: live_here(t.runs, &states[*i].job.name),
                },
                // Counted from its slot: its jitter, then its start window.
                window: states[*i].job.start_window()
                    + (states[*i].job.due_at(*slot_ts) - *slot_ts)
                        .to_std()
                        .unwrap_or(Duration::ZERO),
                reason: t.health.why_missed(*slot_ts),
            })
            .collect();
        let decided = match firing::fire_due(t.store, &requests) {
            Ok(fired) => fired.into_iter().map(Ok).collect(),
            // A locked database: the whole batch goes again next tick.
            Err(e @ Error::Busy { .. }) => {
                t.health.failed("-", &e);
                return;
            }
            // Anything else may be one job's row: decide each alone, so it holds up no other.
            Err(_) => requests
                .iter()
                .map(|r| {
                    firing::fire_due(t.store, std::slice::from_ref(r)).map(|mut d| d.remove(0))
                })
                .collect::<Vec<_>>(),
        };
        drop(requests);
        // The jobs with open effects, asked once for the batch once its leases are granted
        // (no effect can be begun under an older token after that): only their runs wait for
        // observers before the command. Unknown (a failed read): every run asks for itself.
        let started = decided
            .iter()
            .any(|d| matches!(d, Ok(DueFate::Fired(Fired::Started(_)))));
        let open = if started {
            crate::effect::jobs_with_open(t.store).ok()
        } else {
            None
        };
        for ((i, slot, slot_text, _, kind), fired) in parts.into_iter().zip(decided) {
            let st = &mut states[i];
            match fired {
                Ok(DueFate::Fired(fired)) => {
                    st.handled(slot);
                    // A paused job's skipped firings: the first logged, the rest counted.
                    if matches!(fired, Fired::Skipped { .. }) {
                        if st.skipped.0 == 0 {
                            report(&st.job.name, kind, &slot_text, &fired);
                        }
                        st.skipped = (st.skipped.0 + 1, slot_text);
                        continue;
                    }
                    if st.skipped.0 > 0 {
                        let (n, last) = std::mem::take(&mut st.skipped);
                        log::line(
                            Level::INFO,
                            &st.job.name,
                            &format!("{n} firing(s) skipped while paused, the last at {last}"),
                        );
                    }
                    report(&st.job.name, kind, &slot_text, &fired);
                    if let Fired::Started(started) = fired {
                        let settle = open
                            .as_ref()
                            .is_none_or(|o| o.contains(st.job.name.as_str()));
                        let how = How {
                            resumed: false,
                            settle,
                        };
                        t.runs
                            .push(spawn(t.cfg, &st.job, started, how, t.kill, asked));
                    }
                }
                Ok(DueFate::Late { late_ms, skipped }) => {
                    st.handled(slot);
                    // Its other late slots go next tick, in one write, with record_behind.
                    failed.insert(i);
                    let (level, what) = match skipped {
                        true => (Level::INFO, "skipped (paused)"),
                        false => (Level::ERROR, "MISSED"),
                    };
                    let late = time::human_ms(late_ms.max(0) as u64);
                    let reason = t.health.why_missed(slot);
                    log::line(
                        level,
                        &st.job.name,
                        &format!(
                            "firing at {slot_text} {what}: {late} late when decided, \
                             past its {} ({reason})",
                            if st.job.policy.starting_deadline.is_some() {
                                "starting_deadline"
                            } else {
                                "catch-up window"
                            }
                        ),
                    );
                }
                Err(e) => {
                    failed.insert(i);
                    t.health.failed(&st.job.name, &e);
                }
            }
        }
    }
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

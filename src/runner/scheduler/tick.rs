//! One tick's working set: the scheduler's fixed facts ([`Config`]), each job's state
//! ([`JobState`]), the runs it started, and starting a run, for a waiting firing here or for a
//! due one in `batches.rs`.
use super::db_health::Health;
use crate::firing::{self, Started, Waiting};
use crate::runner::config::job::Job;
use crate::runner::config::retry;
use crate::runner::log;
use crate::runner::run::execute::execute;
use crate::runner::run::spec::RunSpec;
use crate::time::{self, Ts};
use crate::{Result, Store};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::Level;

/// Most late slots fired in one tick (a long catch-up window on a fast job).
const CATCHUP_MAX: usize = 10_000;
/// How far back a firing whose run died is fired again (a firing marked for retry by an
/// observer is retried however old, bounded by its attempt limit).
const RESUME_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// A scheduler's fixed facts.
pub(crate) struct Config {
    pub db: String,
    pub owner: String,
    pub cwd: Option<PathBuf>,
    /// The jobs file (canonical path): its schedulers share its jobs (see `share.rs`).
    pub source: String,
    /// The jobs file as given on the command line (read again at a reload).
    pub jobs_path: String,
    pub grace: Duration,
    /// A database failing this long stops the scheduler (see `db_health.rs`).
    pub give_up_after: Duration,
    /// The outage this scheduler's start ended: the slots that fell due in it are the outage's
    /// (caught up within each job's catch-up window), never missed.
    pub outage: Option<crate::jobs::Outage>,
    /// When this scheduler began firing: a slot due since then and decided late (this
    /// scheduler starved or frozen) still runs before its next slot (see `missed::runs_late`).
    pub alive_since: Ts,
}

pub(super) struct JobState {
    pub(super) job: Job,
    /// Every slot up to here has been handled.
    pub(super) cursor: Ts,
    /// The first slot after the cursor (kept, so a tick does not ask a cron schedule again).
    pub(super) next: Option<Ts>,
    /// When that slot is due: the slot plus its jitter (kept, so a tick hashes nothing).
    pub(super) next_due: Option<Ts>,
    /// Its missed slots could not be recorded this tick: its later ones wait for them.
    pub(super) behind: bool,
    /// Up to here, the firings its `dst_skipped = "skip"` left out are recorded missed.
    pub(super) dst_seen: Ts,
    /// This scheduler's to fire on time; another's, fired here only if left unrecorded.
    pub(super) mine: bool,
    /// Its failed firing (this slot) waits for its backoff until then, on the monotonic clock
    /// (a wall clock stepped back or forward neither silences nor hurries it): not asked again
    /// before, and the job's queued later slots wait behind it.
    pub(super) retry_after: Option<(String, Instant)>,
    /// Its firings skipped while paused since the last one logged (the first one is logged,
    /// the others counted), and the latest: said in one line once it fires again.
    pub(super) skipped: (u64, String),
    /// Its next slot was asked ahead (see `batches.rs`) and something stood in its way: it is
    /// decided when due, not asked ahead again each tick.
    pub(super) ahead_tried: Option<Ts>,
}

impl JobState {
    pub(super) fn new(job: Job, cursor: Ts) -> JobState {
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
            ahead_tried: None,
        }
    }
    pub(super) fn handled(&mut self, upto: Ts) {
        self.cursor = upto;
        self.next = self.job.schedule.next_after(upto);
        self.next_due = self.next.map(|n| self.job.due_at(n));
    }
    /// When its next slot is acted on here: when due, or — another's — once left unrecorded.
    pub(super) fn wake_at(&self, net: Duration) -> Option<Ts> {
        let net = chrono::Duration::from_std(net).unwrap_or(chrono::Duration::zero());
        self.next_due.map(|n| if self.mine { n } else { n + net })
    }
    /// Its slots due by `upto` (each at its slot plus its jitter), oldest first.
    pub(super) fn due_by(&self, upto: Ts) -> Vec<Ts> {
        let (slots, _) = self.job.schedule.slots(self.cursor, upto, CATCHUP_MAX);
        let due = slots
            .iter()
            .take_while(|s| self.job.due_at(**s) <= upto)
            .count();
        slots[..due].to_vec()
    }
    /// A reloaded definition: its new settings apply from its next firing.
    pub(super) fn replace(&mut self, job: Job) {
        self.job = job;
        self.handled(self.cursor);
        self.retry_after = None;
        self.ahead_tried = None;
    }
}

/// What firing and starting runs work with on a tick: the database, the scheduler's settings,
/// the shutdown flag runs watch, the runs started, its health, and the rules of resuming.
pub(super) struct Tick<'a> {
    pub(super) store: &'a mut Store,
    pub(super) cfg: &'a Config,
    pub(super) kill: &'a Arc<AtomicBool>,
    pub(super) runs: &'a mut Vec<Running>,
    pub(super) health: &'a mut Health,
    pub(super) rules: &'a firing::ResumeRules,
}

pub(super) struct Running {
    pub(super) job: String,
    pub(super) run_id: String,
    pub(super) handle: JoinHandle<()>,
    /// Stops its command from starting while it waits for its slot (see `RunSpec`).
    pub(super) withdrawn: Arc<AtomicBool>,
}

/// Starts a job's queued firing, or resumes an interrupted one, when its lease is free. Goes
/// before the job's new firings, so a new one finds the run live and queues behind them.
pub(super) fn start_waiting(
    t: &mut Tick<'_>,
    st: &mut JobState,
    waiting: Waiting,
    now: Ts,
) -> Result<bool> {
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
            .map(|(slot, left)| (time::fmt(slot), Instant::now() + left));
        backing_off = st.retry_after.is_some();
        for (slot, n) in &resumed.gave_up {
            let slot = time::fmt(*slot);
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
                time::fmt(s.slot),
                s.run_id,
                s.token
            ),
        );
        let how = How {
            resumed,
            settle: true,
        };
        runs.push(spawn(cfg, job, s, how, kill, (asked, None)));
        return Ok(true);
    }
    Ok(false)
}

pub(super) fn live_here(runs: &[Running], job: &str) -> bool {
    runs.iter().any(|r| r.job == job && !r.handle.is_finished())
}

/// The slots due within this of now whose jobs have no run live are decided ahead of them
/// (see `batches.rs`): `EXACTLY_DECIDE_AHEAD_MS` (0: at their slot, as before).
pub(super) fn decide_ahead() -> Duration {
    static AHEAD: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *AHEAD.get_or_init(|| {
        let ms = match std::env::var(DECIDE_AHEAD_VAR) {
            Err(_) => DECIDE_AHEAD_MS,
            Ok(v) => v.trim().parse::<u64>().unwrap_or_else(|_| {
                tracing::warn!(
                    "{DECIDE_AHEAD_VAR}={:?} is not a number of milliseconds: \
                     {DECIDE_AHEAD_MS} used",
                    crate::sanitize::inert_trunc(&v, 40)
                );
                DECIDE_AHEAD_MS
            }),
        };
        Duration::from_millis(ms.min(MAX_DECIDE_AHEAD_MS))
    })
}

/// How the decision ahead of a slot is set (ms).
pub(crate) const DECIDE_AHEAD_VAR: &str = "EXACTLY_DECIDE_AHEAD_MS";
/// By default a second ahead: a burst of 2,000 is decided, its runs' threads and cages made,
/// within it on a small machine.
const DECIDE_AHEAD_MS: u64 = 1000;
/// At most a minute ahead: a pause, an edit or a manual run in between would be missed for long.
const MAX_DECIDE_AHEAD_MS: u64 = 60_000;

/// What a run must do before its command (see [`RunSpec`]).
pub(super) struct How {
    pub(super) resumed: bool,
    pub(super) settle: bool,
}

pub(super) fn spawn(
    cfg: &Config,
    job: &Job,
    started: Started,
    how: How,
    kill: &Arc<AtomicBool>,
    (granted, start_at): (Instant, Option<Instant>),
) -> Running {
    crate::fault::point(crate::fault::Point::HandOff);
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
        start_at,
        withdrawn: Arc::new(AtomicBool::new(false)),
        failure: retry::failure_rules(&job.policy, &cfg.owner),
        ping: job.ping.clone(),
    };
    let name = job.name.clone();
    let withdrawn = spec.withdrawn.clone();
    let policy = job.policy;
    let handle = std::thread::spawn(move || match execute(&spec) {
        Ok(r) => retry::report(&spec.job, &policy, &spec.started, &r.after),
        Err(e) => tracing::error!(job = %spec.job, "run {}: {e}", spec.started.run_id),
    });
    Running {
        job: name.to_string(),
        run_id: started.run_id,
        handle,
        withdrawn,
    }
}

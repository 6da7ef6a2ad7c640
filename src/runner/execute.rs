//! One run of one firing: end what an earlier run of the same firing left behind, settle the
//! job's open effects (observers bounded by `observe_timeout`), check the token is still
//! current, start the command with the firing in its environment, renew the lease by heartbeat
//! from the first observer to the recorded end, stop the command at its `timeout`, capture a
//! bounded log, record the outcome (retrying through a locked database) and release the lease.
use super::output::{flush_output, pump, LogBuf, OUTPUT_FLUSH};
use super::spawn::command_for;
use crate::firing::{self, Started};
use crate::jobs::{self, RunEnd};
use crate::state::RunOutcome;
use crate::{effect, lease, time, Error, Result};
use crate::{Access, Store};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// After SIGTERM to a command stopped (shutdown, timeout), how long before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long the end of a run is retried through a locked database before it is left to the
/// next scheduler (the lease is renewed meanwhile, so nobody resumes a finished run).
const FINISH_RETRY: Duration = Duration::from_secs(600);
/// At shutdown (kill set), how long recording the end may still be retried.
const FINISH_RETRY_AT_SHUTDOWN: Duration = Duration::from_secs(5);
/// How long an earlier run's leftover processes get to be gone after SIGKILL.
const LEFTOVER_WAIT: Duration = Duration::from_secs(2);
/// How long to wait for output pipes after the command exits (a background grandchild may
/// keep them open forever).
const PIPE_WAIT: Duration = Duration::from_millis(500);

/// Everything a run needs; it opens its own database connection.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub db: String,
    pub job: String,
    pub started: Started,
    /// The firing ran before (a resumed firing): an earlier run may have left processes.
    pub resumed: bool,
    pub lease: Duration,
    /// A command running longer is stopped (outcome `timeout`).
    pub timeout: Option<Duration>,
    /// An observer running longer is "can't tell".
    pub observe_timeout: Duration,
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// Set at shutdown once the grace period is over: kill the command.
    pub kill: Arc<AtomicBool>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub outcome: RunOutcome,
    pub exit_code: Option<i32>,
    pub duration_ms: i64,
}

/// Sends `sig` to the command's process group (it leads its own, so the scheduler's terminal
/// signals do not reach it and our kill reaches its children too).
fn signal_group(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; a negative pid names a process group.
    unsafe {
        libc::kill(-(pid as i32), sig);
    }
}

/// The lease's heartbeat: renewed every third of the lease from the run's first step to its
/// recorded end. Once renewal is refused the run is fenced and stops renewing.
struct Heartbeat {
    every: Duration,
    next: Instant,
    fenced: bool,
}

impl Heartbeat {
    fn new(lease: Duration) -> Heartbeat {
        let every = (lease / 3).max(Duration::from_millis(50));
        Heartbeat {
            every,
            next: Instant::now() + every,
            fenced: false,
        }
    }

    fn tick(&mut self, store: &mut Store, spec: &RunSpec) {
        if self.fenced || Instant::now() < self.next {
            return;
        }
        // A heartbeat held up (a stalled thread, a locked database) lets the lease lapse.
        crate::fault::point("heartbeat");
        self.renew(store, spec);
    }

    /// Renews now: true while the token still holds the lease. A busy database is not a fence
    /// (false, but not fenced): the next beat tries again.
    fn renew(&mut self, store: &mut Store, spec: &RunSpec) -> bool {
        self.next = Instant::now() + self.every;
        let run_id = &spec.started.run_id;
        match lease::renew(store, &spec.job, spec.started.token, spec.lease) {
            Ok(true) => true,
            Ok(false) => {
                // Stop renewing; the token now refuses the command's later writes.
                self.fenced = true;
                log_line(
                    "WARN",
                    &spec.job,
                    &format!("run {run_id} fenced: a newer token holds the lease; its writes will be refused"),
                );
                if let Err(e) = jobs::run_fenced(store, &spec.job, run_id, spec.started.token) {
                    log_line(
                        "WARN",
                        &spec.job,
                        &format!("cannot record the fenced run: {e}"),
                    );
                }
                false
            }
            Err(e) => {
                log_line("WARN", &spec.job, &format!("lease renewal failed: {e}"));
                false
            }
        }
    }
}

/// Runs the job's observers on a thread of their own while this one keeps the lease. Returns
/// the verdicts, or None when the run was stopped or fenced meanwhile.
fn observe(
    spec: &RunSpec,
    store: &mut Store,
    beat: &mut Heartbeat,
) -> Option<Vec<effect::Settled>> {
    // Most runs find nothing open: no observer thread and no second connection for them.
    match effect::open_of(store, &spec.job) {
        Ok(open) if open.is_empty() => return Some(Vec::new()),
        _ => {}
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (db, job, cwd, limit, flag) = (
        spec.db.clone(),
        spec.job.clone(),
        spec.cwd.clone(),
        spec.observe_timeout,
        stop.clone(),
    );
    let observers = std::thread::spawn(move || -> Result<Vec<effect::Settled>> {
        let mut store = crate::open(Some(&db), Access::Write)?;
        effect::settle_open_with(&mut store, &job, |cmd, key, env| {
            effect::observe_within(cmd, key, env, cwd.as_deref(), limit, &flag)
        })
    });
    while !observers.is_finished() {
        beat.tick(store, spec);
        if beat.fenced || spec.kill.load(Ordering::SeqCst) {
            stop.store(true, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let settled = match observers.join() {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            log_line("WARN", &spec.job, &format!("observers could not run: {e}"));
            Vec::new()
        }
        Err(_) => {
            log_line(
                "WARN",
                &spec.job,
                "observers could not run: their thread panicked",
            );
            Vec::new()
        }
    };
    if stop.load(Ordering::SeqCst) {
        return None;
    }
    Some(settled)
}

/// Whether this process's scheduler is deciding a burst of due firings (see
/// [`super::scheduler`]): a run just started waits for the end of the burst before it opens its
/// connection and starts its command, so hundreds of runs starting at once do not starve the
/// decisions of the firings still due in the same instant (each decision takes the job's lease,
/// records the run and fixes its fencing token; the command follows). Bounded by [`BURST_WAIT`].
static DECIDING: parking_lot::Mutex<bool> = parking_lot::const_mutex(false);
static DECIDED: parking_lot::Condvar = parking_lot::Condvar::new();
/// Longest a run waits for a burst of firings to be decided.
const BURST_WAIT: Duration = Duration::from_secs(1);

/// Marks the start (true) or the end (false) of a burst of decisions; the end wakes the runs.
pub fn deciding(on: bool) {
    *DECIDING.lock() = on;
    if !on {
        DECIDED.notify_all();
    }
}

/// Runs one firing to its end. Errors are the database's; the command's failures are outcomes.
pub fn execute(spec: &RunSpec) -> Result<RunResult> {
    {
        let deadline = Instant::now() + BURST_WAIT;
        let mut on = DECIDING.lock();
        while *on && !DECIDED.wait_until(&mut on, deadline).timed_out() {}
    }
    let mut store = crate::open(Some(&spec.db), Access::Write)?;
    let job = spec.job.as_str();
    let token = spec.started.token;
    let run_id = spec.started.run_id.as_str();
    let slot = spec.started.slot.as_str();
    let began = Instant::now();
    let mut beat = Heartbeat::new(spec.lease);
    // A resumed firing never overlaps what an earlier run of it left alive on this machine (a
    // first run has no earlier one, and is spared the scan of every process).
    let ended = if spec.resumed {
        super::procs::end_leftovers(&spec.db, job, slot, run_id, LEFTOVER_WAIT)
    } else {
        0
    };
    if ended > 0 {
        log_line(
            "WARN",
            job,
            &format!("ended {ended} leftover process(es) of an earlier run of the firing at {slot} before run {run_id}"),
        );
    }
    // Unknown before retry: the job's open effects get their observers' verdicts first, under
    // the lease's heartbeat so a slow observer never lets the lease lapse.
    let Some(settled) = observe(spec, &mut store, &mut beat) else {
        let outcome = if beat.fenced {
            RunOutcome::Fenced
        } else {
            RunOutcome::Killed
        };
        let why = "stopped while its observers ran, before its command started";
        return finish(&mut store, spec, &mut beat, outcome, None, began, why);
    };
    for s in &settled {
        if let effect::Observation::CantTell(w) = &s.verdict {
            log_line(
                "WARN",
                job,
                &format!("observer of effect {} can't tell: {w}", s.effect_key),
            );
        }
    }
    if !settled.is_empty() {
        log_line(
            "INFO",
            job,
            &format!(
                "observers settled {} open effect(s) before run {run_id}",
                settled.len()
            ),
        );
    }
    // An effect that never happened goes out with a re-run of the firing that meant it (its key
    // is of the facts, so that firing's done effects are suppressed).
    for s in settled
        .iter()
        .filter(|s| s.verdict == effect::Observation::NotHappened)
    {
        if let Err(e) = firing::retry_of_run(&mut store, job, &s.run_id) {
            log_line(
                "WARN",
                job,
                &format!("cannot mark run {} for retry: {e}", s.run_id),
            );
        }
    }
    // The token must still hold the lease before the command starts: observers may have taken
    // long, and a newer token means another run owns the job now.
    let confirm_by = Instant::now() + spec.lease / 2;
    loop {
        if lease_fresh(&mut store, spec) || beat.renew(&mut store, spec) {
            break;
        }
        if beat.fenced {
            let why = "its token lost the lease before its command started";
            return finish(
                &mut store,
                spec,
                &mut beat,
                RunOutcome::Fenced,
                None,
                began,
                why,
            );
        }
        if Instant::now() >= confirm_by || spec.kill.load(Ordering::SeqCst) {
            let why = "could not confirm its lease before starting the command";
            return finish(
                &mut store,
                spec,
                &mut beat,
                RunOutcome::Failed,
                None,
                began,
                why,
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = Arc::new(Mutex::new(LogBuf::default()));
    let (prog, args) = match spec.command.split_first() {
        Some(x) => x,
        None => {
            return finish(
                &mut store,
                spec,
                &mut beat,
                RunOutcome::Failed,
                None,
                began,
                "no command",
            )
        }
    };
    let exe = std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "exactly".into());
    let mut cmd = command_for(prog, args);
    cmd.env("EXACTLY_DB", &spec.db)
        .env("EXACTLY_JOB", job)
        .env("EXACTLY_FENCING_TOKEN", token.to_string())
        .env("EXACTLY_RUN_ID", run_id)
        .env("EXACTLY_SCHEDULED_AT", slot)
        .env("EXACTLY_BIN", exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let why = format!("cannot start {prog:?}: {e}");
            log_line("ERROR", job, &format!("run {run_id}: {why}"));
            return finish(
                &mut store,
                spec,
                &mut beat,
                RunOutcome::Failed,
                None,
                began,
                &why,
            );
        }
    };
    let started_cmd = Instant::now();
    let pid = child.id();
    let mut pumps = Vec::new();
    if let Some(out) = child.stdout.take() {
        pumps.push(pump(out, log.clone()));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(pump(err, log.clone()));
    }
    let (mut next_flush, mut flushed) = (Instant::now() + OUTPUT_FLUSH, 0u64);
    // Why and since when the command is being stopped: shutdown (`killed`) or `timeout`.
    let mut stopping: Option<(RunOutcome, Instant)> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) => {}
            Err(e) => {
                log_line("WARN", job, &format!("run {run_id}: lost the command: {e}"));
                break None;
            }
        }
        if stopping.is_none() {
            let over = spec.timeout.filter(|t| started_cmd.elapsed() >= *t);
            if spec.kill.load(Ordering::SeqCst) {
                stopping = Some((RunOutcome::Killed, Instant::now()));
            } else if let Some(t) = over {
                log_line(
                    "WARN",
                    job,
                    &format!(
                        "run {run_id} ran past its timeout {}: stopping it",
                        time::human_ms(t.as_millis() as u64)
                    ),
                );
                stopping = Some((RunOutcome::Timeout, Instant::now()));
            }
            if stopping.is_some() {
                signal_group(pid, libc::SIGTERM);
            }
        }
        if Instant::now() >= next_flush {
            next_flush = Instant::now() + OUTPUT_FLUSH;
            flush_output(&mut store, run_id, &log, &mut flushed);
        }
        if let Some((_, since)) = &stopping {
            if since.elapsed() > KILL_GRACE {
                signal_group(pid, libc::SIGKILL);
            }
        }
        beat.tick(&mut store, spec);
        std::thread::sleep(Duration::from_millis(20));
    };
    // A stopped command's whole group goes: what ignored SIGTERM gets SIGKILL after the grace.
    if let Some((_, since)) = &stopping {
        while group_alive(pid) && since.elapsed() <= KILL_GRACE {
            beat.tick(&mut store, spec);
            std::thread::sleep(Duration::from_millis(20));
        }
        signal_group(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + PIPE_WAIT;
    while pumps.iter().any(|p| !p.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = log.lock().map(|l| l.render()).unwrap_or_default();
    let code = status.and_then(|s| s.code());
    let outcome = if beat.fenced {
        RunOutcome::Fenced
    } else if let Some((why, _)) = stopping {
        why
    } else if code == Some(0) {
        RunOutcome::Ok
    } else {
        RunOutcome::Failed
    };
    if let (Some(s), RunOutcome::Failed) = (status, &outcome) {
        if let Some(sig) = s.signal() {
            log_line("WARN", job, &format!("run {run_id} ended by signal {sig}"));
        }
    }
    finish(&mut store, spec, &mut beat, outcome, code, began, &text)
}

/// Whether the lease row still names this run's token with most of a lease left (the claim
/// that started the run, or the heartbeat while observers ran, just set it): then the command
/// may start on a read, sparing a write that would queue behind every other run's.
fn lease_fresh(store: &mut Store, spec: &RunSpec) -> bool {
    let Ok(Some((row, left))) = crate::lease::get_with_left(store, &spec.job) else {
        return false;
    };
    let Ok(margin) = chrono::Duration::from_std(spec.lease * 2 / 3) else {
        return false;
    };
    row.fencing_token == spec.started.token && left >= margin
}

/// True while any process of the group led by `pid` exists.
fn group_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the group exists.
    unsafe { libc::kill(-(pid as i32), 0) == 0 }
}

/// Records the end of the run. A database locked past its busy timeout is retried, the lease
/// renewed meanwhile, so a run that ended (exit 0 included) is never taken for a dead one.
fn finish(
    store: &mut Store,
    spec: &RunSpec,
    beat: &mut Heartbeat,
    outcome: RunOutcome,
    exit_code: Option<i32>,
    began: Instant,
    log: &str,
) -> Result<RunResult> {
    let duration_ms = began.elapsed().as_millis() as i64;
    let end = RunEnd {
        job: &spec.job,
        run_id: &spec.started.run_id,
        slot: &spec.started.slot,
        token: spec.started.token,
        outcome,
        exit_code,
        duration_ms,
        log,
    };
    let since = Instant::now();
    let mut warned = false;
    let outcome = loop {
        match jobs::finish_run(store, &end) {
            Ok(o) => break o,
            Err(Error::Busy(why)) => {
                let limit = if spec.kill.load(Ordering::SeqCst) {
                    FINISH_RETRY_AT_SHUTDOWN
                } else {
                    FINISH_RETRY
                };
                if since.elapsed() > limit {
                    return Err(Error::Busy(why));
                }
                if !warned {
                    warned = true;
                    log_line(
                        "WARN",
                        &spec.job,
                        &format!(
                            "run {} ended {} but its end cannot be recorded yet ({why}); retrying, lease kept",
                            spec.started.run_id, end.outcome
                        ),
                    );
                }
                beat.tick(store, spec);
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    };
    let level = if outcome == RunOutcome::Ok {
        "INFO"
    } else {
        "WARN"
    };
    log_line(
        level,
        &spec.job,
        &format!(
            "run {} {outcome} in {}{}",
            spec.started.run_id,
            time::human_ms(duration_ms as u64),
            exit_code
                .map(|c| format!(" (exit {c})"))
                .unwrap_or_default()
        ),
    );
    Ok(RunResult {
        outcome,
        exit_code,
        duration_ms,
    })
}

/// One log line on stderr: `LEVEL job=NAME message`, with what came from outside made inert.
pub fn log_line(level: &str, job: &str, msg: &str) {
    eprintln!(
        "{} {level} job={} {}",
        time::now_text(),
        crate::sanitize::inert(job),
        crate::sanitize::inert(msg)
    );
}

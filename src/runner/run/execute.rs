//! One run of one firing: end what an earlier run of the same firing left behind, settle the
//! job's open effects (observers bounded by `observe_timeout`), check the token is still
//! current, start the command in a process group led by its watchdog with the firing in its
//! environment, renew the lease by heartbeat from the first observer to the recorded end, stop
//! the command at its `timeout`, when fenced, or at the lease's local deadline (see `hold.rs`),
//! end whatever it left in its group, capture a bounded log, and record the outcome durably.
pub(crate) use super::hold::RunResult;
use super::hold::{finish, Heartbeat};
use super::lend::lend;
use super::output::{flush_output, LogBuf, OutputPipe, OUTPUT_FLUSH};
use super::ping::Pinger;
use super::spec::RunSpec;
use crate::firing;
use crate::runner::log;
use crate::runner::spawn::spawner::Launch;
use crate::runner::spawn::start::{start_command, Running};
use crate::runner::spawn::watchdog;
use crate::state::{FiringKind, RunOutcome};
use crate::{time, Result};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing::Level;

/// After SIGTERM to a command stopped (shutdown, timeout), how long before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// After SIGTERM to a command stopped because its lease is lost, how long before SIGKILL (its
/// watchdog's own stop is as quick, see `policy::STOP_GRACE`).
const FENCE_GRACE: Duration = crate::policy::STOP_GRACE;
/// How long an earlier run's leftover processes get to be gone after SIGKILL.
pub(super) const LEFTOVER_WAIT: Duration = Duration::from_secs(2);
/// How long a run waits for the spawner to start its command: a healthy one answers in
/// milliseconds; a frozen one (SIGSTOP) must not hold the run, nor start it much later.
const START_WAIT: Duration = Duration::from_secs(5);
/// How long to wait for output pipes after the command exits (a background grandchild may
/// keep them open forever).
const PIPE_WAIT: Duration = Duration::from_millis(500);

/// Sends `sig` to the command's process group (not the scheduler's, so its terminal signals do
/// not reach it and our kill reaches its children too).
fn signal_group(pgid: i32, sig: i32) {
    if pgid > 1 {
        // SAFETY: kill has no memory-safety preconditions; a negative pid names a process group.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// How often a running command's run looks up from waiting for it (its stop conditions, its
/// output so far, its lease's renewals): the command's end wakes it at once.
const STEP: Duration = Duration::from_millis(50);

/// Asks the database's identity before the first burst: its runs would each ask it at once,
/// before the first answer is known (hundreds of reads at a scheduler's start).
pub(crate) fn know_db_identity(db: &str) {
    db_identity(db);
}

/// The database's identity (see [`crate::database_identity`]), asked once per process and
/// database.
fn db_identity(db: &str) -> String {
    static KNOWN: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    if let Some(id) = KNOWN
        .lock()
        .ok()
        .and_then(|k| k.iter().find(|(d, _)| d == db).map(|(_, id)| id.clone()))
    {
        return id;
    }
    match lend(db).and_then(|mut s| crate::database_identity(&mut s)) {
        Ok(id) => {
            if let Ok(mut k) = KNOWN.lock() {
                k.push((db.to_string(), id.clone()));
            }
            id
        }
        // Leftovers are then found by the path as given (and asked again next run).
        Err(_) => format!("path:{db}"),
    }
}

/// Runs one firing to its end. Errors are the database's; the command's failures are outcomes.
/// The job's `ping` hears of its start and end from a thread of its own.
pub(crate) fn execute(spec: &RunSpec) -> Result<RunResult> {
    let url = spec.ping.as_deref();
    let pinger = Pinger::start(&spec.job, url, &spec.started.run_id, spec.start_at);
    let result = execute_run(spec);
    match &result {
        Ok(r) => pinger.ended(url, &r.outcome, r.exit_code),
        Err(_) => pinger.ended(url, &RunOutcome::Failed, None),
    }
    result
}

fn execute_run(spec: &RunSpec) -> Result<RunResult> {
    let mut run = Run::new(spec);
    // A token not above every one this scheduler was handed for the job (each run's is a claim
    // of its own): the database went back (`lease::saw_new_token` says so on stderr); the run
    // acts on nothing.
    let token = spec.started.token.get();
    if let Err(prev) = crate::lease::saw_new_token(&spec.db, &spec.job, token) {
        let why = if prev == token {
            format!("fencing token {token} was handed out before")
        } else {
            format!("fencing token {token} is lower than {prev}, handed out before")
        };
        log_line(
            Level::ERROR,
            &spec.job,
            &format!("run {}: {why}", spec.started.run_id),
        );
        return run.end(RunOutcome::Fenced, &why);
    }
    // Most runs have nothing to do before their command: a first run of its firing (nothing
    // left of an earlier one), no open effect of the job (asked once for the scheduler's whole
    // batch), a lease just granted. Those start it at once, without the database.
    if spec.resumed || spec.settle || run.beat.left() < spec.lease / 2 {
        let mut store = lend(&spec.db)?;
        if let Some(ended) = run.before_command(&mut store)? {
            return Ok(ended);
        }
    }
    // The run's cage: nothing the command starts can leave it, and it ends with the run. Made
    // before the wait for the slot, so a burst decided ahead has only its starts left then.
    let cage = crate::contain::Cage::new("run");
    if let Some(why) = run.wait_for_slot() {
        cage.close();
        return run.end(RunOutcome::NotStarted, why);
    }
    let mut child = match run.spawn(cage) {
        Ok(c) => c,
        Err((outcome, why)) => return run.end(outcome, &why),
    };
    let (status, stopping) = run.wait(&mut child);
    run.code = status.and_then(|s| s.code());
    let expired = run.expired(&stopping);
    run.clear_group(child.pgid, &stopping);
    // What left the group (`setsid`, `timeout`) is still in the cage: it goes too, and no run
    // of this firing can find it later.
    if !child.cage.close() {
        log_line(
            Level::WARN,
            &spec.job,
            &format!(
                "run {}: something its command started could not be ended",
                spec.started.run_id
            ),
        );
    }
    watchdog::uncage(child.pgid);
    let text = child.drain();
    let outcome = run.outcome(stopping, expired, status.is_none());
    if let (Some(s), RunOutcome::Failed) = (status, &outcome) {
        if let Some(sig) = s.signal() {
            let run_id = &spec.started.run_id;
            log_line(
                Level::WARN,
                &spec.job,
                &format!("run {run_id} ended by signal {sig}"),
            );
        }
    }
    run.end(outcome, &text)
}

/// Why and since when the command is being stopped, and its grace before SIGKILL.
type Stopping = Option<(RunOutcome, Instant, Duration)>;

/// One run as it goes: its spec, its hold on the lease, and what it has learned so far.
pub(super) struct Run<'a> {
    pub(super) spec: &'a RunSpec,
    pub(super) beat: Heartbeat,
    began: Instant,
    /// When its command started (None until it has).
    command_started: Option<Instant>,
    /// The database's identity: leftovers are found by it, whatever path or URL spelled it.
    pub(super) db_id: String,
    /// The command's exit code, once it has ended with one.
    code: Option<i32>,
}

/// A started command: its process (leader of its group), when it started, its output.
struct Child {
    running: Running,
    pgid: i32,
    /// What holds everything the command starts (see `crate::contain`).
    cage: crate::contain::Cage,
    started: Instant,
    output: OutputPipe,
    log: Mutex<LogBuf>,
}

impl Child {
    /// The output still coming once the command has ended (a background grandchild may keep
    /// the pipe open forever: [`PIPE_WAIT`] at most), then the whole log as stored.
    fn drain(mut self) -> String {
        let deadline = Instant::now() + PIPE_WAIT;
        while !self.output.ended() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.output.read(&self.log, left) {
                break;
            }
        }
        self.log.lock().map(|l| l.render()).unwrap_or_default()
    }
}

impl<'a> Run<'a> {
    fn new(spec: &'a RunSpec) -> Run<'a> {
        let began = Instant::now();
        let beat = Heartbeat::new(spec);
        Run {
            spec,
            beat,
            began,
            command_started: None,
            db_id: db_identity(&spec.db),
            code: None,
        }
    }

    /// Records the run's end (see [`finish`]) with its exit code, if it has one.
    pub(super) fn end(&mut self, outcome: RunOutcome, why: &str) -> Result<RunResult> {
        finish(
            self.spec,
            &mut self.beat,
            outcome,
            self.code,
            self.began,
            self.command_started,
            why,
        )
    }

    /// A run decided ahead of its slot waits for it. Some(why) when its command must not
    /// start: shutdown's kill came first, or its job left the jobs file meanwhile.
    fn wait_for_slot(&self) -> Option<&'static str> {
        let at = self.spec.start_at?;
        loop {
            if self.spec.kill.load(Ordering::SeqCst) {
                return Some("stopped before its slot came; its command never started");
            }
            if self.spec.withdrawn.load(Ordering::SeqCst) {
                return Some(
                    "its job was removed from the jobs file before its slot came; \
                     its command never started",
                );
            }
            let left = at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            std::thread::sleep(left.min(STEP));
        }
    }

    /// Starts the command in `cage`, its process group handed to its watchdog.
    /// Err((outcome, why)) when it did not start: `failed` when it could not, `not_started`
    /// when the spawner did not start it in time (frozen, or shutdown came first).
    fn spawn(
        &mut self,
        cage: crate::contain::Cage,
    ) -> std::result::Result<Child, (RunOutcome, String)> {
        let (job, run_id) = (&self.spec.job, &self.spec.started.run_id);
        let Some((prog, args)) = self.spec.command.split_first() else {
            cage.close();
            return Err((RunOutcome::Failed, "no command".into()));
        };
        let kill = &self.spec.kill;
        let give_up = || kill.load(Ordering::SeqCst);
        crate::fault::point(crate::fault::Point::BeforeSpawn);
        let mut running = match start_command(&self.launch(prog, args, &cage), &cage, &give_up) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                cage.close();
                let why = format!("its command never started: {e}");
                log_line(Level::WARN, job, &format!("run {run_id}: {why}"));
                return Err((RunOutcome::NotStarted, why));
            }
            Err(e) => {
                cage.close();
                let why = format!("cannot start {prog:?}: {e}");
                log_line(Level::ERROR, job, &format!("run {run_id}: {why}"));
                return Err((RunOutcome::Failed, why));
            }
        };
        // Its own start (the spawner's reading), not when we heard of it: a duration is the
        // command's, and the start lag ends where the command began.
        let started = running.started_at();
        self.command_started = Some(started);
        let pgid = running.pid();
        watchdog::cage(pgid, &cage);
        if !self.beat.guard(pgid) {
            log_line(
                Level::WARN,
                job,
                &format!("run {run_id}: no watchdog; its deadline is kept by this thread only"),
            );
        }
        let output = OutputPipe::new(running.take_output());
        Ok(Child {
            running,
            pgid,
            cage,
            started,
            output,
            log: Mutex::new(LogBuf::default()),
        })
    }

    /// What starts the command: it, with the firing in its environment and its deadline.
    fn launch(&self, prog: &str, args: &[String], cage: &crate::contain::Cage) -> Launch {
        static EXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let exe = EXE.get_or_init(|| {
            std::env::current_exe()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "exactly".into())
        });
        let (spec, started) = (self.spec, &self.spec.started);
        let deadline_ns = watchdog::mono_deadline(self.beat.deadline());
        Launch {
            prog: prog.to_string(),
            args: args.to_vec(),
            env: [
                ("EXACTLY_DB", spec.db.as_str()),
                ("EXACTLY_DB_ID", &self.db_id),
                ("EXACTLY_JOB", &spec.job),
                ("EXACTLY_FENCING_TOKEN", &started.token.to_string()),
                ("EXACTLY_RUN_ID", &started.run_id),
                ("EXACTLY_SCHEDULED_AT", &time::fmt(started.slot)),
                ("EXACTLY_BIN", exe),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain(std::iter::once(cage.cookie_var()))
            .collect(),
            cgroup: cage.dir().map(|d| d.to_path_buf()),
            cwd: spec.cwd.clone(),
            deadline_ns,
            // A command started later would have little or none of its lease left.
            start_by_ns: deadline_ns
                .min(crate::wrapped::mono_ns().saturating_add(START_WAIT.as_nanos() as u64)),
        }
    }

    /// Holds the run while its command runs: its output as it comes, stored every
    /// [`OUTPUT_FLUSH`], the lease's renewals heard, the command stopped when it must be.
    /// Its status (None when it was lost), and why it was being stopped.
    fn wait(&mut self, child: &mut Child) -> (Option<ExitStatus>, Stopping) {
        let spec = self.spec;
        let (mut next_flush, mut flushed) = (Instant::now() + OUTPUT_FLUSH, 0u64);
        let mut stopping: Stopping = None;
        let status = loop {
            // Output as it comes; the command's end closes it (unless something it started
            // keeps it open), and its end is then heard at once.
            let wait = if child.output.ended() || !child.output.read(&child.log, STEP) {
                STEP
            } else {
                Duration::ZERO
            };
            match child.running.wait_for(wait) {
                Ok(Some(s)) => break Some(s),
                Ok(None) => {}
                Err(e) => {
                    let run_id = &spec.started.run_id;
                    log_line(
                        Level::WARN,
                        &spec.job,
                        &format!("run {run_id}: lost the command: {e}; its firing goes again"),
                    );
                    break None;
                }
            }
            if stopping.is_none() {
                stopping = stop_reason(spec, &self.beat, child.started);
                if stopping.is_some() {
                    signal_group(child.pgid, libc::SIGTERM);
                }
            }
            if Instant::now() >= next_flush {
                next_flush = Instant::now() + OUTPUT_FLUSH;
                if has_new_output(&child.log, flushed) {
                    if let Ok(mut store) = lend(&spec.db) {
                        flush_output(&mut store, &spec.started.run_id, &child.log, &mut flushed);
                    }
                }
            }
            if let Some((_, since, grace)) = &stopping {
                if since.elapsed() > *grace {
                    signal_group(child.pgid, libc::SIGKILL);
                    child.cage.kill_once();
                }
            }
            self.beat.tick(spec);
        };
        (status, stopping)
    }

    /// Whether the watchdog stopped the command at the deadline while this thread was held up.
    fn expired(&mut self, stopping: &Stopping) -> bool {
        let expired = stopping.is_none()
            && self.code != Some(0)
            && (self.beat.watchdog_fired() || Instant::now() >= self.beat.deadline());
        if expired {
            log_line(
                Level::WARN,
                &self.spec.job,
                &format!(
                    "run {}: its lease was not renewed by its local deadline: \
                          its watchdog stopped the command",
                    self.spec.started.run_id
                ),
            );
        }
        expired
    }

    /// Nothing the command started goes on once it has ended. A stopped command's whole group
    /// goes: what ignored SIGTERM gets SIGKILL after the grace.
    fn clear_group(&mut self, pgid: i32, stopping: &Stopping) {
        if let Some((_, since, grace)) = stopping {
            while left_in_group(pgid) && since.elapsed() <= *grace {
                self.beat.tick(self.spec);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        signal_group(pgid, libc::SIGKILL);
        self.beat.end_group();
    }

    /// The outcome of a command that ran. One that exited 0 did its work, even when it was
    /// being stopped (its deadline or a shutdown came as it finished): a run recorded killed
    /// would go again. Degraded (a command that answers SIGTERM with exit 0 counts as done),
    /// never doubled.
    ///
    /// A command `lost` with its spawner (SIGKILLed: the command died with it) is `killed`:
    /// its firing goes again, as a dead scheduler's run does.
    fn outcome(&self, stopping: Stopping, expired: bool, lost: bool) -> RunOutcome {
        let code = self.code;
        if self.beat.fenced {
            RunOutcome::Fenced
        } else if let Some((why, _, _)) =
            stopping.filter(|s| s.0 != RunOutcome::Killed || code != Some(0))
        {
            why
        } else if lost {
            RunOutcome::Killed
        } else if code == Some(0) {
            RunOutcome::Ok
        } else if expired {
            RunOutcome::Killed
        } else {
            RunOutcome::Failed
        }
    }
}

/// Whether output arrived since `flushed` bytes were stored.
fn has_new_output(log: &Mutex<LogBuf>, flushed: u64) -> bool {
    log.lock().is_ok_and(|l| l.seen() != flushed)
}

/// Whether the command must be stopped now, why (its outcome), since when and with what grace:
/// shutdown (`killed`), its `timeout`, a newer token (`fenced`), or its lease's local deadline
/// passed without a renewal (`killed`: the firing goes again, unless another run took it).
fn stop_reason(
    spec: &RunSpec,
    beat: &Heartbeat,
    started: Instant,
) -> Option<(RunOutcome, Instant, Duration)> {
    let (job, run_id, now) = (&spec.job, &spec.started.run_id, Instant::now());
    if spec.kill.load(Ordering::SeqCst) {
        return Some((RunOutcome::Killed, now, KILL_GRACE));
    }
    if let Some(t) = spec.timeout.filter(|t| started.elapsed() >= *t) {
        let t = time::human_ms(t.as_millis() as u64);
        log_line(
            Level::WARN,
            job,
            &format!("run {run_id} ran past its timeout {t}: stopping it"),
        );
        return Some((RunOutcome::Timeout, now, KILL_GRACE));
    }
    if beat.fenced {
        return Some((RunOutcome::Fenced, now, FENCE_GRACE));
    }
    if now >= beat.deadline() {
        log_line(
            Level::WARN,
            job,
            &format!(
                "run {run_id}: its lease was not renewed by its local deadline: \
                      stopping its command before another run may take the job"
            ),
        );
        return Some((RunOutcome::Killed, now, FENCE_GRACE));
    }
    None
}

/// Whether anything of the command's group is left (its watchdog, our child, aside).
fn left_in_group(pgid: i32) -> bool {
    let group = crate::sender::Group {
        pgid,
        leader_start: 0,
    };
    !crate::sender::members(group, None).is_empty()
}

/// One log line of `job` at `level` (see [`log`]): the job and the message made inert.
pub(crate) fn log_line(level: Level, job: &str, msg: &str) {
    log::line(level, job, msg);
}

/// One log line saying what became of a firing (worded by [`crate::firing::Fired::describe`]).
pub(crate) fn report(job: &str, kind: FiringKind, slot: &str, fired: &firing::Fired) {
    let level = log::level(fired.level());
    log_line(level, job, &fired.describe(kind, slot));
}

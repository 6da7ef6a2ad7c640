//! An effect that is a command, and observers that are commands: processes we start, stream,
//! bound and kill with their process group.
use super::{Attempt, Effect, Failure, Observation};
use crate::wrapped::{self, LeaseWatch, NotStarted, Output, SentRow, Watchdog};
use std::process::{Command, Stdio};

/// An effect that is a command: exit 0 is done (stdout is the response), exit 75 promises
/// nothing was sent, anything else (or a signal) leaves it unknown. See [`crate::wrapped`] for
/// how it runs: streamed, in its own process group, signals forwarded, held to its lease.
pub struct CommandEffect {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// A shell command that asks the far side whether the effect happened.
    pub observe_cmd: Option<String>,
    /// Extra environment for both the command and the observer.
    pub env: Vec<(String, String)>,
    /// The database holding the lease the command runs under ([`crate::Store::opener`]): it
    /// is stopped once that lease has expired. The job and token come from the attempt.
    pub lease: Option<crate::store::StoreOpener>,
    /// What the last `perform` wrote on stdout.
    pub output: Option<Output>,
    /// The process that leads the command's group and stops it at the deadline.
    watchdog: Option<Watchdog>,
    /// The attempt the next send is for ([`Effect::acting_for`]): job, token, run and key,
    /// and the lease the send was granted under.
    acting: Option<Attempt>,
    /// How long the observer may take before its verdict is "can't tell".
    pub observe_timeout: std::time::Duration,
}

/// How long an observer may take when nobody says (`--observe-timeout`, a jobs file's
/// `observe_timeout`): past it, its verdict is "can't tell".
pub const OBSERVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl CommandEffect {
    /// The command `argv`, with no observer, no lease and the default observe timeout.
    pub fn new(argv: Vec<String>) -> CommandEffect {
        CommandEffect {
            argv,
            observe_cmd: None,
            env: Vec::new(),
            lease: None,
            output: None,
            watchdog: None,
            acting: None,
            observe_timeout: OBSERVE_TIMEOUT,
        }
    }
}

impl Effect for CommandEffect {
    fn perform(&mut self, effect_key: &str) -> Result<String, Failure> {
        self.output = None;
        let Some((prog, args)) = self.argv.split_first() else {
            return Err(Failure::NotSent("no command given".into()));
        };
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("EXACTLY_EFFECT_KEY", effect_key);
        // What a far side needs to dedupe (the key) and to fence (the token): see
        // docs/concepts.md, "What exactly-once covers here". All of it is the attempt's.
        let mut watch = None;
        if let Some(att) = &self.acting {
            let ctx = att.ctx();
            cmd.env("EXACTLY_JOB", &ctx.job)
                .env("EXACTLY_FENCING_TOKEN", ctx.token.to_string())
                .env("EXACTLY_RUN_ID", &ctx.run_id);
            let granted = att.granted().map(|g| {
                // Counted from when the write was asked for; only a machine that never set
                // it (a driver of its own) counts from now.
                let ends = g.ends.unwrap_or_else(|| {
                    crate::lease::ends_at(chrono::Duration::from_std(g.left).unwrap_or_default())
                });
                (g.until, ends)
            });
            if let Some((until, _)) = &granted {
                cmd.env("EXACTLY_LEASE_UNTIL", exactly_words::time::fmt(*until));
            }
            watch = self.lease.clone().map(|db| LeaseWatch {
                db,
                job: ctx.job.clone(),
                token: ctx.token,
                effect: granted.is_some().then(|| SentRow {
                    key: effect_key.to_string(),
                    attempt: att.id().to_string(),
                }),
                granted,
            });
        }
        let ended = match wrapped::run(&mut cmd, watch, self.watchdog.as_mut()) {
            Ok(e) => e,
            // It never started, so nothing left this machine.
            Err(NotStarted::Spawn(e)) => {
                return Err(Failure::NotSent(format!("cannot start {prog:?}: {e}")))
            }
            Err(NotStarted::LeaseGone(why)) => {
                return Err(Failure::NotSent(format!(
                    "{} before it started",
                    why.words().replace(", so the command was stopped", "")
                )))
            }
        };
        let response = String::from_utf8_lossy(&ended.output.kept)
            .trim_end()
            .to_string();
        self.output = Some(ended.output);
        let status = match ended.status {
            Ok(s) => s,
            Err(e) => return Err(Failure::Lost(format!("lost the command: {e}"))),
        };
        let code = status.code();
        if let Some(why) = ended.stopped {
            // Stopped mid-send: only its own promise makes it "not sent".
            return Err(if code == Some(75) {
                Failure::NotSent(format!("{}; it exited 75: nothing sent", why.words()))
            } else {
                Failure::Lost(why.words())
            });
        }
        let signalled = ended
            .forwarded
            .map(|s| format!(" after we forwarded signal {s}"))
            .unwrap_or_default();
        match code {
            Some(0) => Ok(response),
            Some(75) => Err(Failure::NotSent(
                "the command exited 75: nothing sent".into(),
            )),
            Some(c) => Err(Failure::Lost(format!("the command exited {c}{signalled}"))),
            None => {
                use std::os::unix::process::ExitStatusExt;
                Err(Failure::Lost(format!(
                    "the command was killed by signal {}{signalled}",
                    status.signal().unwrap_or(0)
                )))
            }
        }
    }

    fn observe(&mut self, effect_key: &str) -> Observation {
        match &self.observe_cmd {
            Some(cmd) => {
                let never = std::sync::atomic::AtomicBool::new(false);
                observe_within(
                    cmd,
                    effect_key,
                    &self.env,
                    None,
                    self.observe_timeout,
                    &never,
                )
            }
            None => Observation::CantTell("no --observe command was given".into()),
        }
    }

    fn output(&self) -> Option<&Output> {
        self.output.as_ref()
    }

    fn sender_group(&mut self) -> Option<exactly_words::sender::Group> {
        if self.watchdog.is_none() {
            // Without it the command still gets a group of its own, named by no row: a retry
            // then judges by the process and the deadline alone.
            self.watchdog = Watchdog::start().ok();
        }
        self.watchdog.as_ref().map(|w| w.group())
    }

    fn sender_cage(&self) -> Option<exactly_words::contain::Cage> {
        self.watchdog.as_ref().map(|w| w.cage().clone())
    }

    fn acting_for(&mut self, attempt: &Attempt) {
        self.acting = Some(attempt.clone());
    }
}

/// A command we run dies with us: if we are killed mid-effect, an orphan must not go on to
/// send after a restart has already observed "not happened" and sent again.
fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// How long an observer's answer may take to arrive once it and its cage are ended.
const OBSERVER_PIPE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs an observer shell command: exit 0 happened, 1 did not happen, anything else can't tell;
/// [`observe_within`] bounded by [`OBSERVE_TIMEOUT`].
pub fn observe_with(
    cmd: &str,
    effect_key: &exactly_words::EffectKey,
    env: &[(String, String)],
) -> Observation {
    let never = std::sync::atomic::AtomicBool::new(false);
    observe_within(cmd, effect_key, env, None, OBSERVE_TIMEOUT, &never)
}

/// The one observer runner: an observer still running after `limit`, or when `stop` is set
/// (shutdown, a lost lease), is killed with its process group and the verdict is "can't tell";
/// of its stdout (its answer) the first [`wrapped::RESPONSE_MAX`] bytes are kept.
/// It runs in `cwd` when given: a scheduler runs it where the job's command (which recorded it)
/// runs, so a relative path in it means what it meant there.
pub fn observe_within(
    cmd: &str,
    effect_key: &str,
    env: &[(String, String)],
    cwd: Option<&std::path::Path>,
    limit: std::time::Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> Observation {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    let mut observer = Command::new("sh");
    observer.arg("-c").arg(cmd);
    if let Some(dir) = cwd {
        observer.current_dir(dir);
    }
    // Contained like a sender: what it leaves behind (a `setsid` child holding its stdout) is
    // in its cage, and ended with it.
    let cage = exactly_words::contain::Cage::new("observer");
    cage.hold(&mut observer);
    let child = die_with_parent(&mut observer)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("EXACTLY_EFFECT_KEY", effect_key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Observation::CantTell(format!("cannot start observer: {e}")),
    };
    let pgid = child.id() as i32;
    let (answer_tx, answer) = std::sync::mpsc::channel::<Vec<u8>>();
    if let Some(mut out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = std::io::Read::read_to_end(
                &mut std::io::Read::take(&mut out, wrapped::RESPONSE_MAX as u64),
                &mut buf,
            );
            let _ = std::io::copy(&mut out, &mut std::io::sink());
            let _ = answer_tx.send(buf);
        });
    }
    // A limit too far to represent is no limit.
    let deadline = Instant::now().checked_add(limit);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) => {}
            Err(e) => break Err(format!("lost the observer: {e}")),
        }
        let stopped = stop.load(std::sync::atomic::Ordering::SeqCst);
        if stopped || deadline.is_some_and(|d| Instant::now() >= d) {
            // SAFETY: a negative pid names the observer's own process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            cage.end();
            let _ = child.wait();
            break Err(if stopped {
                "observer stopped: its run is ending".to_string()
            } else {
                format!(
                    "observer timed out after {}",
                    exactly_words::time::human_ms(limit.as_millis() as u64)
                )
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever it left behind holding our pipe goes with it: its group, and its cage (what
    // left the group).
    // SAFETY: as above; the group may already be empty.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    cage.close();
    // A leftover that escaped even the cage (a cleared environment, no cgroup) may hold the
    // pipe open: its answer is what arrived within a moment, never a wait without end.
    let out = answer.recv_timeout(OBSERVER_PIPE_WAIT).unwrap_or_default();
    match status {
        Ok(s) => match s.code() {
            Some(0) => {
                let s = String::from_utf8_lossy(&out).trim_end().to_string();
                Observation::Happened((!s.is_empty()).then_some(s))
            }
            Some(1) => Observation::NotHappened,
            Some(c) => Observation::CantTell(format!("observer exited {c}")),
            None => Observation::CantTell("observer was killed".into()),
        },
        Err(why) => Observation::CantTell(why),
    }
}

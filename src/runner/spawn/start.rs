//! How a run's command is started so that it dies with its scheduler.
use super::spawner::{self, SELF_EXEC};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::Ordering;

/// The hidden first argument under which the `exactly` binary starts a run's command for a
/// scheduler (see [`exec_command`]).
pub(crate) const EXEC_ARG: &str = "__exactly-exec";

/// A command we start dies with the thread that started it (PR_SET_PDEATHSIG), so a SIGKILLed
/// scheduler leaves no command running; what the command itself starts in the background is
/// ended by the next run of the firing (see `run/procs.rs`).
///
/// Setting it in the child needs code between fork and exec, and forking a scheduler of
/// hundreds of threads copies its page tables and stalls every thread on copy-on-write faults:
/// at a hundred runs a second that was most of the machine. So the `exactly` binary starts
/// itself without a fork (posix_spawn), sets the signal in that fresh single-threaded process
/// and replaces itself with the command ([`exec_command`]). A program that embeds the library
/// forks as before.
pub(crate) fn command_for(prog: &str, args: &[String]) -> Command {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    if SELF_EXEC.load(Ordering::Relaxed) {
        // The running binary, even if its file was replaced meanwhile.
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg(EXEC_ARG)
            .arg(parent.to_string())
            .arg(prog)
            .args(args);
        return cmd;
    }
    let mut cmd = Command::new(prog);
    cmd.args(args);
    die_with_us(&mut cmd, parent);
    cmd
}

/// `exactly __exactly-exec PARENT PROG ARGS…`: dies with the thread that started it, then
/// becomes PROG. Returns only when PROG cannot be started (exit code 127, as a shell would).
pub(crate) fn exec_command(args: &[std::ffi::OsString]) -> i32 {
    let (Some(parent), Some(prog)) = (args.first(), args.get(1)) else {
        eprintln!("exactly: {EXEC_ARG} needs a parent pid and a command");
        return 2;
    };
    let parent: i32 = parent.to_str().and_then(|p| p.parse().ok()).unwrap_or(-1);
    // SAFETY: prctl and getppid have no memory-safety preconditions.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // The scheduler died before prctl took effect: nobody would stop us.
        if libc::getppid() != parent {
            return 1;
        }
    }
    let e = Command::new(prog).args(&args[2..]).exec();
    eprintln!(
        "cannot start {:?}: {e}",
        crate::sanitize::inert(&prog.to_string_lossy())
    );
    127
}

fn die_with_us(cmd: &mut Command, parent: i32) -> &mut Command {
    // SAFETY: prctl, getppid and _exit are async-signal-safe and touch no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // The parent died before prctl took effect: nobody would stop us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd
}

/// A running command, started by the spawner or by this process.
pub(crate) enum Running {
    Spawned(spawner::Spawned, Option<std::fs::File>),
    Child(std::process::Child, Option<std::fs::File>),
}

/// Starts `l` with one pipe for its stdout and stderr (their lines interleave as written), in a
/// process group of its own that dies with us: through the spawner when there is one (see
/// `spawner/`), else by starting it from this process. `give_up` ends a wait for a frozen
/// spawner (an error of kind `TimedOut`: the command never started).
pub(crate) fn start_command(
    l: &spawner::Launch,
    cage: &crate::contain::Cage,
    give_up: &dyn Fn() -> bool,
) -> std::io::Result<Running> {
    let (r, w) = crate::wrapped::pipe()?;
    // SAFETY: both descriptors were just created and are ours alone.
    let (r, w) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(r),
            std::os::fd::OwnedFd::from_raw_fd(w),
        )
    };
    let out = Some(std::fs::File::from(r));
    if let Some(spawned) = spawner::launch(l, &w, give_up) {
        return Ok(Running::Spawned(spawned?, out));
    }
    let mut cmd = command_for(&l.prog, &l.args);
    crate::wrapped::in_group(&mut cmd, None);
    cage.hold(&mut cmd);
    cmd.envs(l.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(w.try_clone()?))
        .stderr(std::process::Stdio::from(w));
    if let Some(dir) = &l.cwd {
        cmd.current_dir(dir);
    }
    Ok(Running::Child(cmd.spawn()?, out))
}

impl Running {
    /// When the command started: the spawner's own reading, else now (a command we started
    /// ourselves has just been spawned).
    pub(crate) fn started_at(&self) -> std::time::Instant {
        match self {
            Running::Spawned(s, _) => s.started_at(),
            Running::Child(..) => None,
        }
        .unwrap_or_else(std::time::Instant::now)
    }

    /// The command's pid, which is its process group's id.
    pub(crate) fn pid(&self) -> i32 {
        match self {
            Running::Spawned(s, _) => s.pid,
            Running::Child(c, _) => c.id() as i32,
        }
    }

    /// The read end of its output, once.
    pub(crate) fn take_output(&mut self) -> Option<std::fs::File> {
        match self {
            Running::Spawned(_, o) | Running::Child(_, o) => o.take(),
        }
    }

    /// Waits up to `d` for the command to end: its status, None while it runs.
    pub(crate) fn wait_for(
        &mut self,
        d: std::time::Duration,
    ) -> std::io::Result<Option<std::process::ExitStatus>> {
        match self {
            Running::Spawned(s, _) => s.wait_for(d),
            Running::Child(c, _) => {
                if let Some(s) = c.try_wait()? {
                    return Ok(Some(s));
                }
                std::thread::sleep(d);
                c.try_wait()
            }
        }
    }
}

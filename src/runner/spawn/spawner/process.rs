//! The spawner process itself (`exactly __exactly-spawner`): it reads each command from its
//! socket, starts it with `clone(CLONE_VM | CLONE_VFORK)` in a group of its own (and the run's
//! cgroup), answers with the pid, and later with its wait status. See the parent module.
use super::*;

/// Written by the SIGCHLD handler: wakes the loop to reap.
static CHLD_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_sigchld(_: libc::c_int) {
    let fd = CHLD_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write is async-signal-safe; a full pipe already holds a wake-up.
        unsafe { libc::write(fd, [1u8].as_ptr().cast(), 1) };
    }
}

/// `exactly __exactly-spawner [3]`, its socket on stdin (and the watchdog's pipe on 3 when
/// named): serves until the scheduler is gone.
pub(crate) fn spawner_main(args: &[std::ffi::OsString]) -> i32 {
    let mut watchdog = watchdog_pipe(args);
    // SAFETY: prctl with a static name; signal dispositions for this process.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"exactly-spawner".as_ptr());
        crate::wrapped::ignore_parents_signals();
    }
    let wake_r = match wake_on_sigchld() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("exactly spawner: {e}");
            return 1;
        }
    };
    let sock = 0;
    // SAFETY: getppid has no preconditions.
    let me = unsafe { libc::getpid() };
    // pid → request id, of the commands alive.
    let mut live: HashMap<i32, u64> = HashMap::new();
    let mut buf = vec![0u8; MAX_MESSAGE];
    while let Some(asked) = wait(sock, wake_r) {
        reap(&mut live, sock);
        if !asked {
            continue;
        }
        let (len, fd) = match recv_with_fd(sock, &mut buf) {
            Ok((0, _)) | Err(_) => break,
            Ok(x) => x,
        };
        let Ok(req) = serde_json::from_slice::<Received>(&buf[..len]) else {
            continue;
        };
        if req.watchdog {
            // A restarted watchdog's pipe (received close-on-exec): the dead one's goes.
            if let Some(pipe) = fd {
                if let Some(old) = watchdog.replace(pipe.into_raw_fd()) {
                    // SAFETY: closing our own copy of the old pipe, used nowhere else.
                    unsafe { libc::close(old) };
                }
            }
            continue;
        }
        let Some(launch) = req.launch else { continue };
        let said = start(&launch, req.id, fd, me, watchdog, &mut live);
        if reply(sock, &said).is_err() {
            break;
        }
    }
    // The scheduler is gone: nothing of its runs may outlive it.
    for pid in live.keys() {
        // SAFETY: each command leads its own group.
        unsafe { libc::kill(-*pid, libc::SIGKILL) };
    }
    0
}

/// The watchdog's pipe named on the command line, made close-on-exec.
fn watchdog_pipe(args: &[std::ffi::OsString]) -> Option<RawFd> {
    let watchdog = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse::<RawFd>().ok());
    if let Some(wd) = watchdog {
        // Ours alone: a command holding it would keep the watchdog from hearing the end.
        // SAFETY: fcntl on the descriptor we were given.
        unsafe { libc::fcntl(wd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    watchdog
}

/// A pipe SIGCHLD writes to (see [`on_sigchld`]); returns its read end.
fn wake_on_sigchld() -> io::Result<RawFd> {
    let (wake_r, wake_w) = crate::wrapped::pipe()?;
    // SAFETY: both ends are ours; non-blocking so the handler never blocks and the loop drains.
    unsafe {
        libc::fcntl(wake_r, libc::F_SETFL, libc::O_NONBLOCK);
        libc::fcntl(wake_w, libc::F_SETFL, libc::O_NONBLOCK);
    }
    CHLD_PIPE.store(wake_w, Ordering::Relaxed);
    // SAFETY: installing a handler that only writes to a pipe.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigchld as *const () as usize;
        sa.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut());
    }
    Ok(wake_r)
}

/// Waits up to a second for a request or a child's end (its wake-ups drained): whether the
/// socket has something to read, or `None` when polling failed.
fn wait(sock: RawFd, wake_r: RawFd) -> Option<bool> {
    let mut fds = [
        libc::pollfd {
            fd: sock,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: wake_r,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: fds is valid for two entries.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
    if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
        return None;
    }
    if fds[1].revents != 0 {
        let mut sink = [0u8; 64];
        // SAFETY: draining our non-blocking pipe into a stack buffer.
        while unsafe { libc::read(wake_r, sink.as_mut_ptr().cast(), sink.len()) } > 0 {}
    }
    Some(fds[0].revents != 0)
}

/// Starts one command (its output pipe `fd`), tells the watchdog its deadline, and says what
/// became of it.
fn start(
    launch: &Launch,
    id: u64,
    fd: Option<OwnedFd>,
    me: i32,
    watchdog: Option<RawFd>,
    live: &mut HashMap<i32, u64>,
) -> Said {
    let start_by = launch.start_by_ns;
    match (fd, fork_exec(launch, me)) {
        // Read after the scheduler stopped waiting (we were frozen): never started.
        _ if start_by > 0 && crate::wrapped::mono_ns() >= start_by => Said::Refused {
            id,
            why: format!("{TOO_LATE}: the spawner read the request past its start-by time"),
        },
        (None, _) => Said::Refused {
            id,
            why: "no output pipe came with the command".into(),
        },
        (Some(out), Ok(prepared)) => match prepared.start(&out) {
            Ok(pid) => {
                let at_ns = crate::wrapped::mono_ns();
                crate::fault::point(crate::fault::Point::SpawnerReply);
                if let (Some(wd), ns) = (watchdog, launch.deadline_ns) {
                    if ns > 0 {
                        let msg = crate::runner::spawn::watchdog::message(pid, ns);
                        // SAFETY: a 12-byte write to our pipe (atomic: under PIPE_BUF).
                        unsafe { libc::write(wd, msg.as_ptr().cast(), msg.len()) };
                    }
                }
                live.insert(pid, id);
                Said::Started { id, pid, at_ns }
            }
            Err(e) => Said::Refused {
                id,
                why: format!("cannot start {:?}: {e}", launch.prog),
            },
        },
        (Some(_), Err(e)) => Said::Refused {
            id,
            why: format!("cannot start {:?}: {e}", launch.prog),
        },
    }
}

fn reply(sock: RawFd, said: &Said) -> io::Result<()> {
    let msg = serde_json::to_vec(said).map_err(io::Error::other)?;
    send_with_fd(sock, &msg, None)
}

/// Reaps every ended command and says so.
fn reap(live: &mut HashMap<i32, u64>, sock: RawFd) {
    loop {
        let mut status = 0;
        // SAFETY: status is a valid int.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if let Some(id) = live.remove(&pid) {
            let _ = reply(sock, &Said::Exited { id, status });
        }
    }
}

/// A command made ready to fork: every allocation done before the fork.
struct Prepared {
    prog: std::ffi::CString,
    argv: Vec<std::ffi::CString>,
    envp: Vec<std::ffi::CString>,
    cwd: Option<std::ffi::CString>,
    parent: i32,
    /// The run's cgroup's `cgroup.procs`, opened for writing (the child writes `0` to join).
    join: Option<OwnedFd>,
}

fn cstring(s: &str) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(s).map_err(|_| io::Error::other("a NUL byte in the command"))
}

/// The scheduler's environment as the spawner was started with it, each `NAME=value` ready
/// for `execve` (bytes as they are: a name or value need not be UTF-8). Read once.
fn base_env() -> &'static [(Vec<u8>, std::ffi::CString)] {
    use std::os::unix::ffi::OsStrExt;
    static BASE: OnceLock<Vec<(Vec<u8>, std::ffi::CString)>> = OnceLock::new();
    BASE.get_or_init(|| {
        std::env::vars_os()
            .filter_map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                Some((k.as_bytes().to_vec(), std::ffi::CString::new(kv).ok()?))
            })
            .collect()
    })
}

fn fork_exec(l: &Launch, parent: i32) -> io::Result<Prepared> {
    let mut envp: Vec<std::ffi::CString> = base_env()
        .iter()
        .filter(|(k, _)| !l.env.iter().any(|(n, _)| n.as_bytes() == k.as_slice()))
        .map(|(_, kv)| kv.clone())
        .collect();
    for (k, v) in &l.env {
        envp.push(cstring(&format!("{k}={v}"))?);
    }
    let mut argv = vec![cstring(&l.prog)?];
    for a in &l.args {
        argv.push(cstring(a)?);
    }
    Ok(Prepared {
        prog: cstring(&l.prog)?,
        argv,
        envp,
        cwd: match &l.cwd {
            Some(d) => Some(cstring(&d.to_string_lossy())?),
            None => None,
        },
        parent,
        join: l.cgroup.as_ref().and_then(|d| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(d.join("cgroup.procs"))
                .ok()
                .map(OwnedFd::from)
        }),
    })
}

/// What the child of a `clone` needs, prepared by the spawner: pointers into memory it keeps
/// alive until the child has exec'd (the spawner is suspended until then, `CLONE_VFORK`).
struct ChildArgs {
    prog: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    out: RawFd,
    parent: i32,
    /// The run's `cgroup.procs` (-1: none).
    join: RawFd,
    /// `cannot start "PROG": ` for a failed exec.
    failed: *const u8,
    failed_len: usize,
}

impl Prepared {
    /// Starts the command in a child that shares our memory until it execs (`CLONE_VM |
    /// CLONE_VFORK`: no page tables copied, none torn down, which a `fork` per command costs);
    /// returns its pid. A failed exec is reported on the command's output, exit 127.
    fn start(&self, out: &OwnedFd) -> io::Result<i32> {
        let mut argv: Vec<*const libc::c_char> = self.argv.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = self.envp.iter().map(|a| a.as_ptr()).collect();
        envp.push(std::ptr::null());
        let failed = format!("cannot start {:?}: ", self.prog);
        let args = ChildArgs {
            prog: self.prog.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: self.cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            out: out.as_raw_fd(),
            parent: self.parent,
            join: self.join.as_ref().map_or(-1, |f| f.as_raw_fd()),
            failed: failed.as_ptr(),
            failed_len: failed.len(),
        };
        // The child's stack, in our memory; x86-64 and aarch64 stacks grow down.
        let mut stack = vec![0u128; CHILD_STACK / 16];
        // SAFETY: the child runs `child_main` on `stack` (alive until it exec's or exits, since
        // CLONE_VFORK suspends us until then) with `args`, making only system calls.
        let pid = unsafe {
            let top = stack.as_mut_ptr().add(stack.len()).cast::<libc::c_void>();
            libc::clone(
                child_main,
                top,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                (&args as *const ChildArgs).cast_mut().cast(),
            )
        };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(pid)
    }
}

/// Bytes of the clone child's stack: system calls only.
const CHILD_STACK: usize = 64 * 1024;

/// Writes `s` to the child's stderr (async-signal-safe).
fn say(s: &[u8]) {
    // SAFETY: `s` is a live slice of `s.len()` bytes; write(2) reads only those.
    unsafe {
        libc::write(2, s.as_ptr().cast(), s.len());
    }
}

/// The clone child: its own process group, dies with the spawner, the default signals back, the
/// run's pipe as stdout and stderr, the jobs file's folder, then the command.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the spawner's ChildArgs, alive while we run (see Prepared::start); only
    // system calls follow, on data prepared before the clone.
    unsafe {
        let a = &*(arg as *const ChildArgs);
        libc::setpgid(0, 0);
        // Into the run's cage before anything of the command runs: what it starts stays there.
        if a.join >= 0 {
            libc::write(a.join, b"0".as_ptr().cast(), 1);
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // The spawner died before prctl took effect: nobody would stop us.
        if libc::getppid() != a.parent {
            libc::_exit(1);
        }
        // What the spawner ignores, and its SIGCHLD handler.
        for sig in crate::wrapped::PARENTS_SIGNALS {
            libc::signal(sig, libc::SIG_DFL);
        }
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::close(null);
        }
        libc::dup2(a.out, 1);
        libc::dup2(a.out, 2);
        if !a.cwd.is_null() && libc::chdir(a.cwd) != 0 {
            say(b"exactly: cannot change to the jobs file's folder\n");
            libc::_exit(127);
        }
        libc::execvpe(a.prog, a.argv, a.envp);
        let e = *libc::__errno_location();
        say(std::slice::from_raw_parts(a.failed, a.failed_len));
        let why: &[u8] = match e {
            libc::ENOENT => b"No such file or directory",
            libc::EACCES => b"Permission denied",
            libc::ENOEXEC => b"Exec format error",
            libc::ENOTDIR => b"Not a directory",
            libc::ELOOP => b"Too many levels of symbolic links",
            libc::E2BIG => b"Argument list too long",
            libc::ENOMEM => b"Cannot allocate memory",
            _ => b"the exec failed",
        };
        say(why);
        // "(os error N)", as Rust says it, without allocating.
        let mut num = [0u8; 12];
        let (mut n, mut i) = (e.unsigned_abs(), num.len());
        loop {
            i -= 1;
            num[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 || i == 0 {
                break;
            }
        }
        say(b" (os error ");
        say(&num[i..]);
        say(b")\n");
        libc::_exit(127)
    }
}

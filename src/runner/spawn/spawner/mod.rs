//! The spawners: a pool of small processes per scheduler, one per core, that start the runs'
//! commands the moment they are decided, and reap them.
//!
//! Forking the scheduler itself for each command copies the page tables of a process with
//! hundreds of threads and stalls them all on copy-on-write faults; starting the `exactly`
//! binary again for each (to set `PR_SET_PDEATHSIG` in a fresh process) loads 14 MB per run.
//! Instead the scheduler starts this binary once, as `exactly __exactly-spawner` (a fresh,
//! single-threaded process), and sends it each command over a `SOCK_SEQPACKET` socket with the
//! run's output pipe attached (`SCM_RIGHTS`). It forks (cheap: it is small), and the child leads
//! a process group of its own, dies with the spawner (`PR_SET_PDEATHSIG`) and execs the command.
//! The spawner answers with the pid at once (a command that cannot be started exits 127 with
//! why on its output, as a shell's would) and later with its wait status.
//!
//! One spawner starts commands one after another (each `clone` waits for its child's exec), and
//! a burst of 500 due at once queued behind it for most of its lag (docs/performance.md): so
//! there is one per core (`EXACTLY_SPAWNERS` sets how many), each with its own socket, and a
//! request goes to the spawner with the fewest requests unanswered (a busy or frozen one's
//! grow), never to one the supervisor found stopped while another runs. Each holds what the
//! one did: everything below is per spawner.
//!
//! What a command dies with is unchanged: the scheduler's death closes the socket and the
//! spawner SIGKILLs every group it started, then exits (and the watchdog, see `watchdog.rs`,
//! stops the groups too); the spawner's death SIGKILLs each command (`PR_SET_PDEATHSIG`), and
//! the scheduler hears of it as a lost command (its run `killed`, its firing going again), and
//! the pool's other spawners go on starting commands (once none is left, the scheduler starts
//! them itself).
//!
//! The spawner is a process a signal can freeze (SIGSTOP): the scheduler does not depend on
//! its word alone. A command's end also comes from the kernel (a pidfd opened at `Started`,
//! and the status an unreaped zombie keeps in `/proc/PID/stat`), and a command the spawner
//! does not start by its request's `start_by_ns` never starts (`not_started`). The scheduler's
//! supervisor (`supervise.rs`) watches the spawner's state.
//!
//! The spawner ignores the signals a terminal or a service manager sends the scheduler (those
//! are the scheduler's to act on, with its grace period), and gives its commands the default
//! dispositions back.
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub(crate) mod process;
mod socket;

use socket::{recv_with_fd, send_with_fd, send_with_flags, socketpair, MAX_MESSAGE};

/// Set by the `exactly` binary (see [`crate::cli::main`]): this process's own executable
/// understands the hidden argument of `start.rs` (`EXEC_ARG`), so commands are started through
/// it (and through the spawner, once it serves).
pub(crate) static SELF_EXEC: AtomicBool = AtomicBool::new(false);

/// The hidden first argument under which the `exactly` binary is a scheduler's spawner.
pub(crate) const SPAWNER_ARG: &str = "__exactly-spawner";
/// How many spawners a scheduler starts (default: one per core).
pub(crate) const SPAWNERS_VAR: &str = "EXACTLY_SPAWNERS";
/// Most spawners in a pool.
const MAX_SPAWNERS: usize = 64;
/// The spawner's copy of the watchdog's pipe, when it has one.
const WATCHDOG_FD: RawFd = 3;

/// A command to start.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Launch {
    pub prog: String,
    pub args: Vec<String>,
    /// Added to (or replacing) the scheduler's environment.
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// The run's lease deadline on the monotonic clock (0: none): the spawner hands the new
    /// group to the watchdog with it before it answers, so a command started just as the
    /// scheduler is frozen (SIGSTOP) is stopped at its deadline all the same.
    pub deadline_ns: u64,
    /// On the monotonic clock (0: none): a request read after this is refused, not started.
    /// The scheduler stops waiting for the spawner's answer then (a frozen spawner), records
    /// the run `not_started`, and must not find its command running later.
    #[serde(default)]
    pub start_by_ns: u64,
    /// The run's cgroup (its cage, see `crate::contain`): the child joins it before it execs,
    /// so nothing the command starts can leave it.
    #[serde(default)]
    pub cgroup: Option<PathBuf>,
}

/// How a refusal for a request read past its `start_by_ns` begins (the run is `not_started`).
pub(crate) const TOO_LATE: &str = "too late to start";

#[derive(Serialize)]
struct Request<'a> {
    id: u64,
    launch: &'a Launch,
}

/// The watchdog's new pipe, attached (after a restart, see `scheduler/supervise.rs`).
#[derive(Serialize)]
struct PipeRequest {
    id: u64,
    watchdog: bool,
}

#[derive(Deserialize)]
struct Received {
    id: u64,
    #[serde(default)]
    launch: Option<Launch>,
    /// The descriptor attached is the watchdog's new pipe: it replaces ours.
    #[serde(default)]
    watchdog: bool,
}

/// What the spawner says of a request.
#[derive(Debug, Serialize, Deserialize)]
enum Said {
    /// `at_ns`: the spawner's CLOCK_MONOTONIC when the command was started (0 from an older
    /// spawner), so the run counts from the command's own start, not from when it heard.
    Started {
        id: u64,
        pid: i32,
        #[serde(default)]
        at_ns: u64,
    },
    Refused {
        id: u64,
        why: String,
    },
    Exited {
        id: u64,
        status: i32,
    },
}

/// What a run hears of its command.
enum Heard {
    /// The command's pid, and when it started (CLOCK_MONOTONIC ns; 0 unknown).
    Started(i32, u64),
    Refused(String),
    Exited(i32),
    /// The spawner is gone: the command died with it.
    Lost,
}

/// One spawner process of the pool, as the scheduler talks to it.
struct Client {
    /// The spawner process's pid.
    pid: i32,
    sock: Mutex<OwnedFd>,
    waiting: Mutex<HashMap<u64, Sender<Heard>>>,
    /// Requests sent and not answered yet (started or refused): a busy or frozen spawner's
    /// grow, so new ones go to another.
    unanswered: AtomicUsize,
    /// Found stopped (SIGSTOP) by the supervisor: no request goes to it while another runs.
    stopped: AtomicBool,
    gone: AtomicBool,
}

impl Client {
    fn serves(&self) -> bool {
        !self.gone.load(Ordering::SeqCst)
    }
}

/// The spawners of this process.
struct Pool {
    members: Vec<Arc<Client>>,
    /// Request ids, unique across the pool.
    next: AtomicU64,
}

impl Pool {
    /// The spawner a new request goes to: of those serving and not stopped (of those serving
    /// when all are stopped), the one with the fewest requests unanswered; ties go round.
    fn pick(&self, id: u64) -> Option<&Arc<Client>> {
        let n = self.members.len();
        let serving = || {
            (0..n)
                .map(move |k| &self.members[(id as usize + k) % n])
                .filter(|c| c.serves())
        };
        let least = |c: &&Arc<Client>| c.unanswered.load(Ordering::Relaxed);
        serving()
            .filter(|c| !c.stopped.load(Ordering::Relaxed))
            .min_by_key(least)
            .or_else(|| serving().min_by_key(least))
    }

    fn serving(&self) -> impl Iterator<Item = &Arc<Client>> {
        self.members.iter().filter(|c| c.serves())
    }
}

/// The pool, started on first use: None when no spawner could be started, or none serves.
fn pool() -> Option<&'static Pool> {
    pool_cell()
        .get_or_init(start_pool)
        .as_ref()
        .filter(|p| p.serving().next().is_some())
}

/// The pool once started, without starting it.
fn pool_now() -> Option<&'static Pool> {
    pool_cell().get().and_then(Option::as_ref)
}

/// How many spawners: `EXACTLY_SPAWNERS`, else one per core.
fn pool_size() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::env::var(SPAWNERS_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(cores)
        .min(MAX_SPAWNERS)
}

fn start_pool() -> Option<Pool> {
    let mut members = Vec::new();
    for _ in 0..pool_size() {
        match start() {
            Ok(c) => members.push(c),
            Err(e) => {
                tracing::warn!("cannot start a spawner process ({e})");
                break;
            }
        }
    }
    if members.is_empty() {
        tracing::warn!("no spawner process: each command is started by forking the scheduler");
        return None;
    }
    let pids: Vec<String> = members.iter().map(|c| c.pid.to_string()).collect();
    tracing::info!("spawner processes {} started", pids.join(", "));
    Some(Pool {
        members,
        next: AtomicU64::new(1),
    })
}

/// Starts the spawners if this is the `exactly` binary and they are not running yet; true when
/// commands go through them. (A program embedding the library starts its commands itself.)
pub(crate) fn ready() -> bool {
    SELF_EXEC.load(Ordering::Relaxed) && pool().is_some()
}

/// A command started by the spawner.
pub(crate) struct Spawned {
    pub pid: i32,
    /// When the spawner started it (CLOCK_MONOTONIC ns; 0 unknown).
    at_ns: u64,
    rx: Receiver<Heard>,
    /// The kernel's word of the command's end (readable once it exited), so a frozen spawner
    /// that has not reaped it yet cannot hold the run's end back.
    pidfd: Option<OwnedFd>,
    /// Its start time (`/proc/PID/stat` field 22), telling our zombie from a later process
    /// given the same pid.
    start_time: Option<u64>,
}

impl Spawned {
    fn new(pid: i32, at_ns: u64, rx: Receiver<Heard>) -> Spawned {
        Spawned {
            pid,
            at_ns,
            rx,
            pidfd: pidfd_open(pid),
            start_time: proc_stat(pid).map(|s| s.start),
        }
    }

    /// When the command started, on our clock: the spawner's reading, moved onto an
    /// [`Instant`] (both are CLOCK_MONOTONIC). None when the spawner did not say.
    pub(crate) fn started_at(&self) -> Option<std::time::Instant> {
        if self.at_ns == 0 {
            return None;
        }
        let ago = crate::wrapped::mono_ns().saturating_sub(self.at_ns);
        std::time::Instant::now().checked_sub(Duration::from_nanos(ago))
    }

    /// Waits up to `d` for the command to end: its status, None while it runs. An error when
    /// the spawner is gone (the command died with it).
    pub(crate) fn wait_for(&self, d: Duration) -> io::Result<Option<ExitStatus>> {
        match self.rx.recv_timeout(d) {
            Ok(Heard::Exited(s)) => Ok(Some(ExitStatus::from_raw(s))),
            // A command that exited before its spawner died keeps its status; one SIGKILLed
            // by the spawner's death (PR_SET_PDEATHSIG) is lost with it.
            Ok(_) | Err(RecvTimeoutError::Disconnected) => {
                match self.zombie_status().filter(|s| s.code().is_some()) {
                    Some(s) => Ok(Some(s)),
                    None => Err(io::Error::other(
                        "the spawner process is gone, and the command with it",
                    )),
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                if !self.exited() {
                    return Ok(None);
                }
                // Ended, and the spawner has not said so: frozen (SIGSTOP), or its word is on
                // the way. An unreaped command's status is in its zombie's stat.
                if let Some(s) = self.zombie_status() {
                    return Ok(Some(s));
                }
                // Reaped already: the spawner's word follows at once.
                match self.rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(Heard::Exited(s)) => Ok(Some(ExitStatus::from_raw(s))),
                    Ok(_) | Err(RecvTimeoutError::Disconnected) => Err(io::Error::other(
                        "the spawner process is gone, and the command with it",
                    )),
                    Err(RecvTimeoutError::Timeout) => Ok(None),
                }
            }
        }
    }

    /// Whether the kernel says the command has exited (its pidfd is readable).
    fn exited(&self) -> bool {
        let Some(fd) = &self.pidfd else { return false };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents != 0 }
    }

    /// The wait status of the command while it is a zombie not yet reaped (and still ours).
    fn zombie_status(&self) -> Option<ExitStatus> {
        let st = proc_stat(self.pid)?;
        (st.state == 'Z' && Some(st.start) == self.start_time)
            .then(|| ExitStatus::from_raw(st.exit_code))
    }
}

/// A pidfd of `pid` (Linux 5.3+); None where the kernel has none.
pub(crate) fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a descriptor just created and ours alone.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What `/proc/PID/stat` says of a process (the library's reading, see `crate::sender::stat`).
pub(crate) fn proc_stat(pid: i32) -> Option<crate::sender::Stat> {
    crate::sender::stat(pid)
}

/// The spawner processes that serve: their pids (none before they started, or once gone).
pub(crate) fn pids() -> Vec<i32> {
    pool_now()
        .map(|p| p.serving().map(|c| c.pid).collect())
        .unwrap_or_default()
}

/// The supervisor found spawner `pid` stopped (SIGSTOP), or running again: while stopped, no
/// request goes to it unless every spawner is.
pub(crate) fn set_stopped(pid: i32, stopped: bool) {
    if let Some(c) = pool_now().and_then(|p| p.members.iter().find(|c| c.pid == pid)) {
        c.stopped.store(stopped, Ordering::Relaxed);
    }
}

/// Hands every spawner the pipe of a restarted watchdog, so the commands they start are held
/// from their first instant again (until then each run arms its group itself once started).
/// Never blocks: a frozen spawner with a full socket is not waited for. False when not handed
/// to each.
pub(crate) fn hand_watchdog(pipe: RawFd) -> bool {
    let Some(p) = pool_now() else {
        return false;
    };
    let Ok(msg) = serde_json::to_vec(&PipeRequest {
        id: 0,
        watchdog: true,
    }) else {
        return false;
    };
    let mut all = true;
    for c in p.serving() {
        all &= c.sock.lock().is_ok_and(|s| {
            send_with_flags(s.as_raw_fd(), &msg, Some(pipe), libc::MSG_DONTWAIT).is_ok()
        });
    }
    all
}

/// Starts `launch` through the spawner with `output` as its stdout and stderr. None when
/// there is no spawner (the caller starts the command itself).
/// A command the spawner did not start in time fails with `ErrorKind::TimedOut`: it never
/// started.
pub(crate) fn launch(
    launch: &Launch,
    output: &OwnedFd,
    give_up: &dyn Fn() -> bool,
) -> Option<io::Result<Spawned>> {
    // Only a scheduler that started one (see [`ready`]): a single run in the foreground
    // (`exactly trigger`) starts its one command itself.
    let p = pool_now()?;
    let id = p.next.fetch_add(1, Ordering::Relaxed);
    let c = p.pick(id)?;
    let msg = match serde_json::to_vec(&Request { id, launch }) {
        Ok(m) => m,
        Err(e) => return Some(Err(io::Error::other(e))),
    };
    let (tx, rx) = mpsc::channel();
    if let Ok(mut w) = c.waiting.lock() {
        w.insert(id, tx);
    }
    c.unanswered.fetch_add(1, Ordering::Relaxed);
    let sent = c
        .sock
        .lock()
        .map_err(|_| io::Error::other("spawner socket poisoned"))
        .and_then(|s| send_with_fd(s.as_raw_fd(), &msg, Some(output.as_raw_fd())));
    if let Err(e) = sent {
        answered(c);
        if let Ok(mut w) = c.waiting.lock() {
            w.remove(&id);
        }
        return Some(Err(e));
    }
    // A frozen spawner answers late or never: wait until the request's `start_by_ns` (which
    // the spawner honours) or until `give_up` says so (shutdown), then the run never started.
    let heard = loop {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(h) => break Ok(h),
            Err(RecvTimeoutError::Disconnected) => break Err(()),
            Err(RecvTimeoutError::Timeout) => {}
        }
        let late = launch.start_by_ns > 0
            && crate::wrapped::mono_ns() >= launch.start_by_ns.saturating_add(START_SLACK_NS);
        if late || give_up() {
            if let Ok(mut w) = c.waiting.lock() {
                w.remove(&id);
            }
            // Its answer may have come just now: a started command is run as any other.
            match rx.try_recv() {
                Ok(h) => break Ok(h),
                Err(_) => {
                    return Some(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the spawner did not start the command in time (stopped or hung); \
                         it never started",
                    )))
                }
            }
        }
    };
    Some(match heard {
        Ok(Heard::Started(pid, at_ns)) => Ok(Spawned::new(pid, at_ns, rx)),
        Ok(Heard::Refused(why)) if why.starts_with(TOO_LATE) => {
            Err(io::Error::new(io::ErrorKind::TimedOut, why))
        }
        Ok(Heard::Refused(why)) => Err(io::Error::other(why)),
        Ok(Heard::Exited(_)) | Ok(Heard::Lost) | Err(_) => {
            Err(io::Error::other("the spawner process is gone"))
        }
    })
}

/// How long past a request's `start_by_ns` the scheduler still waits for the answer of a
/// spawner that read it in time.
const START_SLACK_NS: u64 = 200_000_000;

/// One request of `c`'s answered (or never sent).
fn answered(c: &Client) {
    let _ = c
        .unanswered
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
}

/// Starts one spawner process, and the thread that reads its words.
fn start() -> io::Result<Arc<Client>> {
    let (ours, theirs) = socketpair()?;
    // The spawner's socket is its stdin, and the watchdog's pipe its descriptor 3: nothing else
    // of ours reaches it.
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg(SPAWNER_ARG)
        .stdin(std::process::Stdio::from(theirs))
        .stdout(std::process::Stdio::null())
        .process_group(0);
    use std::os::unix::process::CommandExt;
    if let Some(wd) = super::watchdog::pipe_fd() {
        cmd.arg(WATCHDOG_FD.to_string());
        // SAFETY: dup2 is async-signal-safe; the new descriptor has no close-on-exec flag.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(wd, WATCHDOG_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = cmd.spawn()?;
    // It is reaped by the reader thread's end, or lives as long as we do.
    let pid = child.id();
    let read_fd = ours.try_clone()?;
    let client = Arc::new(Client {
        pid: pid as i32,
        sock: Mutex::new(ours),
        waiting: Mutex::new(HashMap::new()),
        unanswered: AtomicUsize::new(0),
        stopped: AtomicBool::new(false),
        gone: AtomicBool::new(false),
    });
    let c = client.clone();
    std::thread::Builder::new()
        .name("spawner-reader".into())
        .spawn(move || read_replies(read_fd, child, &c))?;
    Ok(client)
}

/// Routes a spawner's words to the runs waiting for them; when it is gone, every run still
/// waiting on it hears so.
fn read_replies(sock: OwnedFd, mut child: std::process::Child, c: &Client) {
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        // SAFETY: buf is valid for its length; the socket is ours.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            break;
        }
        let Ok(said) = serde_json::from_slice::<Said>(&buf[..n as usize]) else {
            continue;
        };
        if !matches!(said, Said::Exited { .. }) {
            answered(c);
        }
        let Ok(mut w) = c.waiting.lock() else {
            continue;
        };
        let (id, heard, done) = match said {
            Said::Started { id, pid, at_ns } => (id, Heard::Started(pid, at_ns), false),
            Said::Refused { id, why } => (id, Heard::Refused(why), true),
            Said::Exited { id, status } => (id, Heard::Exited(status), true),
        };
        match w.get(&id) {
            Some(tx) => {
                let _ = tx.send(heard);
            }
            // Its run gave up waiting (see `launch`) and was recorded `not_started`: the
            // command must not run after all.
            None => {
                if let Heard::Started(pid, _) = heard {
                    tracing::warn!("command {pid} started after its run gave up on it: killed");
                    // SAFETY: the command leads its own group.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                }
            }
        }
        if done {
            w.remove(&id);
        }
    }
    c.gone.store(true, Ordering::SeqCst);
    let left = pool_now().map_or(0, |p| p.serving().count());
    let then = match left {
        0 => "new ones are started by forking the scheduler".to_string(),
        n => format!("new ones go to the {n} other(s) of the pool"),
    };
    tracing::error!(
        "the spawner process is gone (pid {}): its running commands died with it; {then}",
        c.pid
    );
    if let Ok(mut w) = c.waiting.lock() {
        for (_, tx) in w.drain() {
            let _ = tx.send(Heard::Lost);
        }
    }
    let _ = child.wait();
}

/// The spawners of this process (set up by the first [`pool`] call).
fn pool_cell() -> &'static OnceLock<Option<Pool>> {
    static CELL: OnceLock<Option<Pool>> = OnceLock::new();
    &CELL
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `Spawned::wait_for` reads when the spawner is frozen: the kernel's word that the
    /// process exited (its pidfd readable) and the status its unreaped zombie keeps.
    #[test]
    fn an_unreaped_zombie_tells_its_status_and_its_pidfd_its_end() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0.2; exit 3"])
            .spawn()
            .expect("start sh");
        let pid = child.id() as i32;
        let (_tx, rx) = mpsc::channel();
        let s = Spawned::new(pid, 0, rx);
        assert!(s.pidfd.is_some(), "no pidfd on this kernel");
        assert!(!s.exited(), "exited at once");
        assert_eq!(s.wait_for(Duration::from_millis(10)).expect("wait"), None);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !s.exited() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Not reaped yet (we are its parent and have not waited): a zombie with its status.
        let st = proc_stat(pid).expect("its stat");
        assert_eq!(st.state, 'Z');
        let status = s
            .wait_for(Duration::from_millis(10))
            .expect("wait")
            .expect("its end, heard from the kernel");
        assert_eq!(status.code(), Some(3));
        assert_eq!(child.wait().expect("reap").code(), Some(3));
    }
}

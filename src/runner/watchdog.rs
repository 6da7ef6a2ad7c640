//! One watchdog process for all of a process's runs: forked once, before the first run (while
//! the process is small: forking a scheduler with hundreds of threads for each run costs more
//! than the runs), it holds each running command's process group and its lease deadline, and
//! stops a group at its deadline — SIGTERM, then SIGKILL after [`GRACE`] — even while the
//! scheduler is frozen (SIGSTOP), hung or starved. When the scheduler dies (its end of the pipe
//! closes) it SIGKILLs every group it holds: nothing of a run outlives its scheduler.
//!
//! Runs tell it `arm(group, deadline)` (again as renewals move the deadline) and `disarm(group)`
//! once the command has ended and been reaped; it tells back which groups it stopped.
use crate::wrapped::{mono_ns, pipe};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Between SIGTERM and SIGKILL of a group stopped at its deadline.
pub const GRACE: Duration = crate::policy::STOP_GRACE;
/// Most groups held at once; beyond it, a run has only its own thread to stop its command.
const SLOTS: usize = 4096;

struct Shared {
    tx: Mutex<std::fs::File>,
    fired: Mutex<HashSet<i32>>,
}

fn shared() -> Option<&'static Shared> {
    static ONE: OnceLock<Option<Shared>> = OnceLock::new();
    ONE.get_or_init(|| start().ok()).as_ref()
}

/// Starts the watchdog if it is not running yet (a scheduler calls this early, while small).
pub fn ready() -> bool {
    shared().is_some()
}

/// Stop `group` at `deadline` (its whole process group).
pub fn arm(group: i32, deadline: Instant) -> bool {
    send(group, mono_deadline(deadline))
}

/// The descriptor runs write `arm` and `disarm` messages to (the spawner is given a copy, so a
/// command is held from the instant it starts, see `spawner.rs`). None without a watchdog.
pub fn pipe_fd() -> Option<i32> {
    use std::os::fd::AsRawFd;
    let s = shared()?;
    s.tx.lock().ok().map(|f| f.as_raw_fd())
}

/// The message that arms `group` until `ns` on the monotonic clock (0: disarm).
pub fn message(group: i32, ns: u64) -> [u8; 12] {
    let mut msg = [0u8; 12];
    msg[..4].copy_from_slice(&group.to_le_bytes());
    msg[4..].copy_from_slice(&ns.to_le_bytes());
    msg
}

/// `deadline` on the monotonic clock as the watchdog counts it.
pub fn mono_deadline(deadline: Instant) -> u64 {
    mono_ns().saturating_add(
        deadline
            .saturating_duration_since(Instant::now())
            .as_nanos() as u64,
    )
}

/// The group's command ended (and was reaped): forget it.
pub fn disarm(group: i32) {
    send(group, 0);
}

/// Whether the watchdog stopped `group` at its deadline (asked once the command has ended).
pub fn fired(group: i32) -> bool {
    let Some(s) = shared() else { return false };
    // Its word travels on a pipe: give it a moment to arrive.
    let until = Instant::now() + Duration::from_millis(50);
    loop {
        if let Ok(mut f) = s.fired.lock() {
            if f.remove(&group) {
                return true;
            }
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn send(group: i32, ns: u64) -> bool {
    let Some(s) = shared() else { return false };
    let msg = message(group, ns);
    s.tx.lock().is_ok_and(|mut tx| tx.write_all(&msg).is_ok())
}

fn start() -> std::io::Result<Shared> {
    let (to_r, to_w) = pipe()?;
    let (back_r, back_w) = pipe()?;
    let grace = GRACE.as_nanos() as u64;
    // SAFETY: the child runs only async-signal-safe libc calls on its stack (no allocation, no
    // locks) and never returns: `main` ends in `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the forked child; see above.
        unsafe { main(to_r, back_w, grace) }
    }
    // SAFETY: the child has its copies; these ends are its.
    unsafe {
        libc::close(to_r);
        libc::close(back_w);
    }
    // SAFETY: to_w and back_r are open descriptors we own from here on.
    let (tx, mut rx) = unsafe {
        (
            std::fs::File::from_raw_fd(to_w),
            std::fs::File::from_raw_fd(back_r),
        )
    };
    let shared = Shared {
        tx: Mutex::new(tx),
        fired: Mutex::new(HashSet::new()),
    };
    // The groups it stopped, as it says them (read on a thread of our own).
    std::thread::spawn(move || {
        let mut buf = [0u8; 4];
        while rx.read_exact(&mut buf).is_ok() {
            if let Some(s) = shared_fired() {
                if let Ok(mut f) = s.lock() {
                    f.insert(i32::from_le_bytes(buf));
                }
            }
        }
    });
    Ok(shared)
}

/// The fired set, once the watchdog is set up (the reader thread starts before `shared` is).
fn shared_fired() -> Option<&'static Mutex<HashSet<i32>>> {
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        if let Some(s) = shared() {
            return Some(&s.fired);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One held group: its id, its deadline, and when it was sent SIGTERM (0: not yet).
#[derive(Clone, Copy)]
struct Slot {
    group: i32,
    deadline: u64,
    termed: u64,
}

/// The watchdog's life, in the forked child: async-signal-safe calls only, state on the stack.
unsafe fn main(r: i32, w: i32, grace: u64) -> ! {
    // SAFETY: called only in the forked watchdog child: it owns its process, `r` and
    // `w` are its pipe ends, and every call here is async-signal-safe on stack data.
    unsafe {
        libc::setpgid(0, 0);
        // The scheduler's signals are for the scheduler; it tells us what to do by the pipe.
        crate::wrapped::ignore_parents_signals();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::dup2(null, 2);
        }
        // Keep only our two pipe ends: no database, no other run's pipes.
        for fd in 3..1024 {
            if fd != r && fd != w {
                libc::close(fd);
            }
        }
        libc::syscall(libc::SYS_close_range, 1024u32, u32::MAX, 0u32);
        let mut slots = [Slot {
            group: 0,
            deadline: 0,
            termed: 0,
        }; SLOTS];
        // Slots in use are below `hi`: the scan stays as short as the runs.
        let mut hi = 0usize;
        let mut buf = [0u8; 12 * 64];
        let mut have = 0usize;
        loop {
            let now = mono_ns();
            let mut wait = u64::MAX;
            for s in slots[..hi].iter_mut().filter(|s| s.group > 0) {
                if s.termed == 0 && now >= s.deadline {
                    libc::kill(-s.group, libc::SIGTERM);
                    s.termed = now;
                    let g = s.group.to_le_bytes();
                    libc::write(w, g.as_ptr() as *const libc::c_void, 4);
                }
                if s.termed == u64::MAX {
                    continue;
                }
                if s.termed > 0 {
                    if now >= s.termed.saturating_add(grace) {
                        libc::kill(-s.group, libc::SIGKILL);
                        // Held until disarmed: its run reaps the command and says so.
                        s.termed = u64::MAX;
                    } else {
                        wait = wait.min(s.termed + grace - now);
                    }
                } else {
                    wait = wait.min(s.deadline - now);
                }
            }
            let ms = if wait == u64::MAX {
                -1
            } else {
                ((wait / 1_000_000) + 1).min(i32::MAX as u64) as i32
            };
            let mut pfd = libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            };
            if libc::poll(&mut pfd, 1, ms) <= 0 {
                continue;
            }
            let got = libc::read(
                r,
                buf.as_mut_ptr().add(have) as *mut libc::c_void,
                buf.len() - have,
            );
            if got == 0 || (got < 0 && *libc::__errno_location() != libc::EINTR) {
                // Our scheduler is gone: nothing of its runs may outlive it.
                for s in slots[..hi].iter().filter(|s| s.group > 0) {
                    libc::kill(-s.group, libc::SIGKILL);
                }
                libc::_exit(0);
            }
            if got < 0 {
                continue;
            }
            have += got as usize;
            let whole = have / 12 * 12;
            let mut at = 0;
            while at < whole {
                let m = &buf[at..at + 12];
                at += 12;
                let group = i32::from_le_bytes([m[0], m[1], m[2], m[3]]);
                let deadline =
                    u64::from_le_bytes([m[4], m[5], m[6], m[7], m[8], m[9], m[10], m[11]]);
                if group <= 1 {
                    continue;
                }
                let found = slots[..hi].iter().position(|s| s.group == group);
                if deadline == 0 {
                    if let Some(i) = found {
                        slots[i].group = 0;
                        while hi > 0 && slots[hi - 1].group == 0 {
                            hi -= 1;
                        }
                    }
                    continue;
                }
                let free = found.or_else(|| slots[..hi].iter().position(|s| s.group == 0));
                let free = free.or_else(|| (hi < SLOTS).then_some(hi));
                if let Some(i) = free {
                    // A group already being stopped stays stopped.
                    if slots[i].group != group || slots[i].termed == 0 {
                        slots[i] = Slot {
                            group,
                            deadline,
                            termed: 0,
                        };
                    }
                    hi = hi.max(i + 1);
                }
            }
            buf.copy_within(whole..have, 0);
            have -= whole;
        }
    }
}

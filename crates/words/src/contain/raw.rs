//! Ending a cage and finding its processes with system calls only, on the stack and on
//! descriptors opened beforehand: what a forked watchdog calls between `fork` and `_exit`.
use super::COOKIE_PREFIX;
use std::os::fd::RawFd;

/// [`Killer::kill_all`](super::Killer::kill_all) on raw descriptors: `fds` are `cgroup.kill`,
/// the freezer file and `cgroup.procs` (-1 where missing). System calls only, on the stack: a
/// forked watchdog calls it. True when some process refused (EPERM).
pub fn kill_raw(fds: [RawFd; 3], v1: bool, needle: &[u8]) -> bool {
    let [kill, freeze, procs] = fds;
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let mut refused = false;
    // SAFETY: a one-byte write to a descriptor the caller holds open.
    let killed_at_once = kill >= 0 && unsafe { libc::write(kill, b"1".as_ptr().cast(), 1) } == 1;
    if !killed_at_once && procs >= 0 {
        let (frozen, thawed): (&[u8], &[u8]) = if v1 {
            (b"FROZEN", b"THAWED")
        } else {
            (b"1", b"0")
        };
        if freeze >= 0 {
            // SAFETY: a short write to a descriptor the caller holds open.
            unsafe { libc::write(freeze, frozen.as_ptr().cast(), frozen.len()) };
        }
        each_pid_in(procs, &mut |pid| {
            if pid != me && !kill9(pid) {
                refused = true;
            }
        });
        if freeze >= 0 {
            // SAFETY: as above.
            unsafe { libc::write(freeze, thawed.as_ptr().cast(), thawed.len()) };
        }
    }
    each_with_cookie(needle, me, &mut |pid| {
        if !kill9(pid) {
            refused = true;
        }
    });
    refused
}

/// Ends the cage named `<subtree_dir>/<what>-<id as 16 hex digits>` and its cookie, opening its
/// files by path: what a watchdog forked long before the cage was made calls, told only the id.
/// System calls only, on the stack. True when some process refused (EPERM).
pub fn kill_cage_raw(subtree_dir: &[u8], v1: bool, what: &[u8], id: u64) -> bool {
    let mut hex = [0u8; 16];
    for (i, h) in hex.iter_mut().enumerate() {
        let nib = ((id >> (60 - 4 * i)) & 0xf) as u8;
        *h = if nib < 10 {
            b'0' + nib
        } else {
            b'a' + nib - 10
        };
    }
    let mut needle = [0u8; 64];
    let prefix = COOKIE_PREFIX.as_bytes();
    let n = prefix.len() + hex.len() + 1;
    if n > needle.len() {
        return false;
    }
    needle[..prefix.len()].copy_from_slice(prefix);
    needle[prefix.len()..prefix.len() + 16].copy_from_slice(&hex);
    needle[n - 1] = b'=';
    // `<dir>/<what>-<hex>/` then a file name, NUL-terminated.
    let mut path = [0u8; 1024];
    let base = subtree_dir.len() + 1 + what.len() + 1 + hex.len() + 1;
    let mut fds = [-1i32; 3];
    if !subtree_dir.is_empty() && base + 16 < path.len() {
        let mut at = 0;
        for part in [subtree_dir, b"/", what, b"-", &hex, b"/"] {
            path[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        let names: [&[u8]; 3] = if v1 {
            [b"", b"freezer.state\0", b"cgroup.procs\0"]
        } else {
            [b"cgroup.kill\0", b"cgroup.freeze\0", b"cgroup.procs\0"]
        };
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() {
                continue;
            }
            path[base..base + name.len()].copy_from_slice(name);
            let flags = if i == 2 {
                libc::O_RDONLY
            } else {
                libc::O_WRONLY
            };
            // SAFETY: path is NUL-terminated within its bounds.
            fds[i] = unsafe { libc::open(path.as_ptr().cast(), flags | libc::O_CLOEXEC) };
        }
    }
    let refused = kill_raw(fds, v1, &needle[..n]);
    for fd in fds.into_iter().filter(|fd| *fd >= 0) {
        // SAFETY: each was opened above.
        unsafe { libc::close(fd) };
    }
    refused
}

/// SIGKILL; false only when refused (EPERM). System calls only.
fn kill9(pid: i32) -> bool {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGKILL) == 0 || *libc::__errno_location() != libc::EPERM }
}

/// Calls `f` with each pid listed in an open `cgroup.procs` (read from its start). System calls
/// only, on the stack.
fn each_pid_in(fd: RawFd, f: &mut dyn FnMut(i32)) {
    let mut buf = [0u8; 4096];
    let mut off: libc::off_t = 0;
    let mut cur: i64 = -1;
    loop {
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off) };
        if n <= 0 {
            break;
        }
        off += n as libc::off_t;
        for &b in &buf[..n as usize] {
            if b.is_ascii_digit() {
                cur = cur.max(0) * 10 + i64::from(b - b'0');
            } else {
                if cur > 0 && cur <= i64::from(i32::MAX) {
                    f(cur as i32);
                }
                cur = -1;
            }
        }
    }
    if cur > 0 && cur <= i64::from(i32::MAX) {
        f(cur as i32);
    }
}

/// Calls `f` with the pid of every process (other than `me`) whose environment holds `needle`
/// (`EXACTLY_COOKIE_<id>=`), read from `/proc/PID/environ`. System calls only, on the stack:
/// a forked watchdog sweeps with it. Processes `/proc` hides from us (another user's, under
/// `hidepid`) are not found.
pub fn each_with_cookie(needle: &[u8], me: i32, f: &mut dyn FnMut(i32)) {
    if needle.is_empty() || needle.len() > 256 {
        return;
    }
    each_process(&mut |dir, pid, digits| {
        if pid != me && environ_holds(dir, digits, needle) {
            f(pid);
        }
    });
}

/// Calls `f` with `/proc` (an open directory), and the pid and name (its digits) of each
/// process in it. System calls only, on the stack: a forked watchdog walks `/proc` with it.
pub fn each_process(f: &mut dyn FnMut(RawFd, i32, &[u8])) {
    // SAFETY: a static C string; the descriptor is closed below.
    let dir = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return;
    }
    let mut ents = [0u8; 8192];
    loop {
        // SAFETY: ents is valid for its length; getdents64 fills it with records.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir,
                ents.as_mut_ptr(),
                ents.len() as libc::c_uint,
            )
        };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            // linux_dirent64: ino u64, off i64, reclen u16, type u8, name NUL-terminated.
            let reclen = u16::from_ne_bytes([ents[at + 16], ents[at + 17]]) as usize;
            if reclen == 0 {
                break;
            }
            let name = &ents[at + 19..(at + reclen).min(n as usize)];
            let mut pid: i64 = 0;
            let mut digits = 0;
            for &b in name {
                if b == 0 {
                    break;
                }
                if !b.is_ascii_digit() {
                    digits = 0;
                    break;
                }
                pid = pid * 10 + i64::from(b - b'0');
                digits += 1;
            }
            if digits > 0 && pid > 0 && pid <= i64::from(i32::MAX) {
                f(dir, pid as i32, &name[..digits]);
            }
            at += reclen;
        }
    }
    // SAFETY: dir is ours.
    unsafe { libc::close(dir) };
}

/// Whether `/proc/<digits>/environ` holds `needle`, read in chunks with an overlap.
fn environ_holds(proc_dir: RawFd, digits: &[u8], needle: &[u8]) -> bool {
    let mut path = [0u8; 40];
    let tail = b"/environ\0";
    if digits.len() + tail.len() > path.len() {
        return false;
    }
    path[..digits.len()].copy_from_slice(digits);
    path[digits.len()..digits.len() + tail.len()].copy_from_slice(tail);
    // SAFETY: path is NUL-terminated; the descriptor is closed below.
    let fd = unsafe {
        libc::openat(
            proc_dir,
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 4096 + 256];
    let mut kept = 0usize;
    let mut found = false;
    loop {
        // SAFETY: the read stays inside buf after the kept overlap.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().add(kept).cast(), 4096) };
        if n <= 0 {
            break;
        }
        let have = kept + n as usize;
        if buf[..have].windows(needle.len()).any(|w| w == needle) {
            found = true;
            break;
        }
        kept = (needle.len() - 1).min(have);
        buf.copy_within(have - kept..have, 0);
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    found
}

//! Where no cgroup can be made, the watchdog is the command's parent and child subreaper: it
//! starts the command itself, so a SIGKILLed `exactly effect` leaves every descendant — even one
//! that left the process group and cleared its environment (the cookie with it) — re-parented
//! to a living watchdog that ends them all. The watchdog is a forked child of a process that may
//! have threads, so everything here that runs in it makes system calls only, on memory prepared
//! before the fork ([`Server`]).
//!
//! The command travels to the watchdog as one message: `S`, its length (u32), then the folder
//! (empty: ours), NUL, the argument count (u32) and the arguments each NUL-terminated, the
//! environment count (u32) and `NAME=value` each NUL-terminated. The watchdog answers `P` and the
//! pid, or `E` and the errno of a failed start; later `X` and the wait status; `K` once it has
//! ended every descendant on request.
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

/// Most bytes of a command's arguments and environment (the kernel's own default limit).
pub const MAX_PAYLOAD: usize = 2 * 1024 * 1024;
/// Most arguments plus environment entries.
const MAX_ITEMS: usize = 64 * 1024;

/// The command as one message to the watchdog (see the module's comment), its environment
/// ours with `cmd`'s changes applied.
pub fn encode(cmd: &Command) -> Vec<u8> {
    let mut m = Vec::new();
    if let Some(d) = cmd.get_current_dir() {
        m.extend_from_slice(d.as_os_str().as_bytes());
    }
    m.push(0);
    let args: Vec<&OsStr> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .collect();
    m.extend_from_slice(&(args.len() as u32).to_le_bytes());
    for a in args {
        m.extend_from_slice(a.as_bytes());
        m.push(0);
    }
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
    for (k, v) in cmd.get_envs() {
        env.retain(|(n, _)| n != k);
        if let Some(v) = v {
            env.push((k.to_os_string(), v.to_os_string()));
        }
    }
    m.extend_from_slice(&(env.len() as u32).to_le_bytes());
    for (k, v) in env {
        m.extend_from_slice(k.as_bytes());
        m.push(b'=');
        m.extend_from_slice(v.as_bytes());
        m.push(0);
    }
    m
}

/// The watchdog's side, prepared before the fork: buffers it fills in place, the pipes the
/// command writes its stdout to and the watchdog answers on, and the command it runs.
pub struct Server {
    buf: Vec<u8>,
    ptrs: Vec<*const libc::c_char>,
    /// The command's stdout (write end), renumbered by the watchdog.
    pub out_w: i32,
    /// The answers (write end), renumbered by the watchdog.
    pub back_w: i32,
    /// The command running (0: none).
    pub cmd: i32,
}

impl Server {
    /// Buffers for the largest command (touched only in the watchdog's copy).
    pub fn new(out_w: i32, back_w: i32) -> Server {
        Server {
            buf: vec![0u8; MAX_PAYLOAD + 1],
            ptrs: vec![std::ptr::null(); MAX_ITEMS + 2],
            out_w,
            back_w,
            cmd: 0,
        }
    }

    /// Reads a start message's body (`len` bytes) from `r` and starts the command in `group`:
    /// answers `P` pid or `E` errno. System calls only.
    ///
    /// # Safety
    /// Only in the forked watchdog: it forks and execs.
    pub unsafe fn start(&mut self, r: i32, len: usize, group: i32) {
        // SAFETY: the buffer is ours (the watchdog's copy) and at least len bytes long.
        let ok = len <= MAX_PAYLOAD && unsafe { read_exact(r, self.buf.as_mut_ptr(), len) };
        if !ok {
            self.answer(b'E', libc::E2BIG);
            return;
        }
        self.buf[len] = 0;
        let Some((cwd, argc)) = self.decode(len) else {
            self.answer(b'E', libc::EINVAL);
            return;
        };
        let mut err = [0i32; 2];
        // SAFETY: err has room for two descriptors.
        if unsafe { libc::pipe2(err.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            self.answer(b'E', errno());
            return;
        }
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        let argv = self.ptrs.as_ptr();
        // SAFETY: argc + 1 <= ptrs.len() (decode checked it).
        let envp = unsafe { argv.add(argc + 1) };
        // SAFETY: fork in a process that makes system calls only (the watchdog).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: in the command's child: system calls on the prepared memory, then exec.
            unsafe { exec_child(group, me, self.out_w, err[1], cwd, argv, envp) }
        }
        // SAFETY: the write end is the child's; reading the read end tells whether it exec'd.
        unsafe { libc::close(err[1]) };
        if pid < 0 {
            self.answer(b'E', errno());
            // SAFETY: ours.
            unsafe { libc::close(err[0]) };
            return;
        }
        let mut code = [0u8; 4];
        // SAFETY: a read into a local buffer; EOF (exec succeeded) reads 0 bytes.
        let failed = unsafe { read_exact(err[0], code.as_mut_ptr(), 4) };
        // SAFETY: ours.
        unsafe { libc::close(err[0]) };
        if failed {
            // SAFETY: our child, which exited 127.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            self.answer(b'E', i32::from_le_bytes(code));
        } else {
            self.cmd = pid;
            self.answer(b'P', pid);
        }
    }

    /// Points `ptrs` at the arguments and environment in `buf[..len]`: (the folder, NULL for
    /// ours; the argument count). None when the message is not well formed.
    fn decode(&mut self, len: usize) -> Option<(*const libc::c_char, usize)> {
        let buf = &self.buf[..len + 1];
        let mut at = buf.iter().position(|b| *b == 0)?;
        let cwd = if at == 0 {
            std::ptr::null()
        } else {
            buf.as_ptr().cast()
        };
        at += 1;
        // The arguments, a NULL, the environment, a NULL: one array, two lists.
        let (mut n, mut argc) = (0usize, 0usize);
        for part in 0..2 {
            let count = u32::from_le_bytes(buf.get(at..at + 4)?.try_into().ok()?) as usize;
            at += 4;
            if count > MAX_ITEMS - n || (part == 0 && count == 0) {
                return None;
            }
            for _ in 0..count {
                let end = at + buf.get(at..len)?.iter().position(|b| *b == 0)?;
                *self.ptrs.get_mut(n)? = buf[at..].as_ptr().cast();
                n += 1;
                at = end + 1;
            }
            *self.ptrs.get_mut(n)? = std::ptr::null();
            n += 1;
            if part == 0 {
                argc = count;
            }
        }
        Some((cwd, argc))
    }

    /// Reaps the command (answering `X` and its wait status) and any orphan re-parented to us.
    ///
    /// # Safety
    /// Only in the forked watchdog.
    pub unsafe fn reap(&mut self) {
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own children, into a local.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if pid == self.cmd {
                self.cmd = 0;
                self.answer(b'X', status);
            }
        }
    }

    /// Answers on the back pipe: a tag and four bytes.
    pub fn answer(&self, tag: u8, v: i32) {
        let mut m = [0u8; 5];
        m[0] = tag;
        m[1..].copy_from_slice(&v.to_le_bytes());
        // SAFETY: a five-byte write (atomic: under PIPE_BUF) to our pipe.
        unsafe { libc::write(self.back_w, m.as_ptr().cast(), m.len()) };
    }
}

/// The command's child: its group, dies with the watchdog, the default signals back, stdin
/// from /dev/null, stdout the capture pipe, stderr ours, its folder, then the command. A start
/// that fails writes its errno to `err` and exits 127.
unsafe fn exec_child(
    group: i32,
    watchdog: i32,
    out_w: i32,
    err: i32,
    cwd: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> ! {
    // SAFETY: in a freshly forked child; every pointer was prepared before the watchdog's fork
    // and points into its memory, which this child shares as a copy.
    unsafe {
        libc::setpgid(0, group);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != watchdog {
            libc::_exit(1);
        }
        for sig in super::PARENTS_SIGNALS {
            libc::signal(sig, libc::SIG_DFL);
        }
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::close(null);
        }
        libc::dup2(out_w, 1);
        if (cwd.is_null() || libc::chdir(cwd) == 0) && !argv.is_null() {
            libc::execvpe(*argv, argv, envp);
        }
        let e = errno().to_le_bytes();
        libc::write(err, e.as_ptr().cast(), 4);
        libc::_exit(127)
    }
}

fn errno() -> i32 {
    // SAFETY: errno is thread-local and always readable.
    unsafe { *libc::__errno_location() }
}

/// Reads exactly `n` bytes into `p` (through EINTR and short reads): false at EOF or an error
/// before that. System calls only.
///
/// # Safety
/// `p` must be valid for `n` bytes.
pub unsafe fn read_exact(fd: i32, p: *mut u8, n: usize) -> bool {
    let mut got = 0;
    while got < n {
        // SAFETY: within the caller's buffer.
        let k = unsafe { libc::read(fd, p.add(got).cast(), n - got) };
        if k > 0 {
            got += k as usize;
        } else if k < 0 && errno() == libc::EINTR {
            continue;
        } else {
            return false;
        }
    }
    true
}

/// SIGKILLs every child of ours (a subreaper's: what the command left, re-parented to us) until
/// none is left, reaping them; the command too. System calls only, on the stack.
pub fn end_children() {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    for _ in 0..200 {
        let mut any = false;
        each_child(me, &mut |pid| {
            any = true;
            // SAFETY: a child of ours.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        });
        // SAFETY: reaping our own children, without blocking.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        if !any {
            return;
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 5_000_000,
        };
        // SAFETY: a plain sleep.
        unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
    }
}

/// Calls `f` with each live (not zombie) child of `parent`, from `/proc/*/stat`. System calls
/// only, on the stack.
fn each_child(parent: i32, f: &mut dyn FnMut(i32)) {
    exactly_words::contain::each_process(&mut |dir, pid, digits| {
        if let Some((state, ppid)) = stat_of(dir, digits) {
            if ppid == parent && state != b'Z' && state != b'X' {
                f(pid);
            }
        }
    });
}

/// (state, ppid) from `/proc/<digits>/stat`. System calls only.
fn stat_of(dir: i32, digits: &[u8]) -> Option<(u8, i32)> {
    let mut path = [0u8; 32];
    let tail = b"/stat\0";
    if digits.len() + tail.len() > path.len() {
        return None;
    }
    path[..digits.len()].copy_from_slice(digits);
    path[digits.len()..digits.len() + tail.len()].copy_from_slice(tail);
    // SAFETY: NUL-terminated path; closed below.
    let fd = unsafe { libc::openat(dir, path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 1024];
    // SAFETY: a read into a local buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: ours.
    unsafe { libc::close(fd) };
    if n <= 0 {
        return None;
    }
    let s = &buf[..n as usize];
    let close = s.iter().rposition(|b| *b == b')')?;
    let mut fields = s[close + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?;
    let ppid = fields.next()?;
    let num = |d: &[u8]| -> Option<i32> {
        let mut v: i32 = 0;
        for b in d {
            if !b.is_ascii_digit() {
                return None;
            }
            v = v.checked_mul(10)?.checked_add(i32::from(b - b'0'))?;
        }
        Some(v)
    };
    Some((state, num(ppid)?))
}

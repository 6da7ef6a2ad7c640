//! Containment: the processes a sender, an observer or a run starts are held in a set that none
//! of them can leave, so that "gone" means gone and a stop stops all of them. A process group,
//! a parent or `/proc` visibility are conventions that `timeout`, `setsid`, a stuck helper or a
//! hardened `/proc` break; a control group is the kernel's own record of who belongs.
//!
//! A [`Cage`] is, in order of preference:
//! - a cgroup v2 directory of its own (`cgroup.procs` to join, `cgroup.events` "populated" to
//!   tell it empty, `cgroup.kill` to end it, with `cgroup.freeze` where `cgroup.kill` is
//!   missing);
//! - a cgroup v1 `freezer` directory (freeze, kill every member, thaw) where only v1 is
//!   writable;
//! - else a cookie: an environment variable every descendant inherits, found again in
//!   `/proc/PID/environ`, as Jenkins' process-tree killer finds a build's leftovers. A process
//!   that clears its environment leaves a cookie behind; that is the fallback's known gap.
//!
//! Every cage carries the cookie too, so a leftover is found even by a caller that may not
//! write the cgroup. Cages are made under the cgroup this process is in (delegated to it by
//! systemd's `Delegate=yes`, see `assets/systemd/`), or under `EXACTLY_CGROUP` (`none` turns
//! cgroups off).
//!
//! [`each_with_cookie`] and [`Killer`] make only system calls on memory prepared beforehand:
//! a forked watchdog uses them between `fork` and `_exit`.
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod raw;

pub use raw::{each_process, each_with_cookie, kill_cage_raw, kill_raw};

/// The environment variable that names where cages are made: a cgroup directory this process
/// may write, or `none` for no cgroups (the cookie alone).
pub const CGROUP_VAR: &str = "EXACTLY_CGROUP";
/// The prefix of a cage's cookie variable: `EXACTLY_COOKIE_<id>=1`. One variable per cage, so a
/// sender's cage inside a run's cage keeps the run's cookie too.
pub const COOKIE_PREFIX: &str = "EXACTLY_COOKIE_";
/// How long ending a cage may take before what is left counts as still alive.
pub const END_WAIT: Duration = Duration::from_secs(3);

/// How a set of processes is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// A cgroup v2 directory of its own.
    CgroupV2,
    /// A cgroup v1 freezer directory of its own.
    CgroupV1,
    /// Only the environment cookie (no writable cgroup here).
    Cookie,
}

impl Containment {
    /// The word `status` and the row use.
    pub fn word(self) -> &'static str {
        match self {
            Containment::CgroupV2 => "cgroup-v2",
            Containment::CgroupV1 => "cgroup-v1",
            Containment::Cookie => "cookie",
        }
    }
}

/// Where this process makes cages: a cgroup directory it may write, and its version.
#[derive(Debug, Clone)]
pub struct Subtree {
    /// The cgroup version of the directory.
    pub kind: Containment,
    /// The directory cages are made in.
    pub dir: PathBuf,
}

/// The subtree this process makes cages in (found once), None when no cgroup is writable.
pub fn subtree() -> Option<&'static Subtree> {
    static ONE: OnceLock<Option<Subtree>> = OnceLock::new();
    ONE.get_or_init(find_subtree).as_ref()
}

/// What cages this process makes: its [`Containment`] and, for a cgroup, where.
pub fn describe() -> String {
    match subtree() {
        Some(s) => format!("{} under {}", s.kind.word(), s.dir.display()),
        None => "cookie (no writable cgroup: the watchdog and an environment cookie)".into(),
    }
}

fn find_subtree() -> Option<Subtree> {
    let named = std::env::var(CGROUP_VAR).ok().filter(|v| !v.is_empty());
    let found = match named.as_deref() {
        Some("none") | Some("off") => return None,
        Some(dir) => {
            let dir = PathBuf::from(dir);
            kind_of(&dir).map(|kind| Subtree { kind, dir })
        }
        None => discover(),
    }?;
    // Cages of all runs and senders of this process go in one folder of their own.
    let dir = found.dir.join("exactly");
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(_) => return None,
    }
    writable(&dir).then_some(Subtree {
        kind: found.kind,
        dir,
    })
}

fn writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid C string; access reads it only.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The cgroup version of a directory, by its filesystem's magic number.
fn kind_of(dir: &Path) -> Option<Containment> {
    let c = CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statfs fills a plain struct; c is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    match st.f_type as i64 {
        0x6367_7270 => Some(Containment::CgroupV2),
        0x0027_e0eb if dir.join("freezer.state").exists() || dir.join("cgroup.procs").exists() => {
            // A v1 hierarchy: only the freezer one can stop what it holds.
            let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            let freezer = mounts(&mountinfo).into_iter().any(|m| {
                m.fstype == "cgroup" && m.opts.split(',').any(|o| o == "freezer") && {
                    dir.starts_with(&m.point)
                }
            });
            freezer.then_some(Containment::CgroupV1)
        }
        _ => None,
    }
}

struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    opts: String,
}

/// The mounts of `/proc/self/mountinfo` (root, mount point, type, super options).
fn mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            Some(Mount {
                root: unescape(f.get(3)?),
                point: PathBuf::from(unescape(f.get(4)?)),
                fstype: r.first()?.to_string(),
                opts: r.get(2).copied().unwrap_or_default().to_string(),
            })
        })
        .collect()
}

/// mountinfo writes a space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).and_then(|o| {
            std::str::from_utf8(o)
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok())
        });
        match (b[i], oct) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's cgroup directory: v2 first, then the v1 freezer hierarchy.
fn discover() -> Option<Subtree> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let ms = mounts(&mountinfo);
    let path_of = |pred: &dyn Fn(&str) -> bool| -> Option<String> {
        own.lines().find_map(|l| {
            let mut p = l.splitn(3, ':');
            let (_, ctl, path) = (p.next()?, p.next()?, p.next()?);
            pred(ctl).then(|| path.to_string())
        })
    };
    let under = |m: &Mount, path: &str| -> Option<PathBuf> {
        let rel = if m.root == "/" {
            path
        } else {
            path.strip_prefix(m.root.as_str())?
        };
        Some(m.point.join(rel.trim_start_matches('/')))
    };
    let mut found = Vec::new();
    if let Some(path) = path_of(&|c| c.is_empty()) {
        for m in ms.iter().filter(|m| m.fstype == "cgroup2") {
            if let Some(d) = under(m, &path) {
                found.push(Subtree {
                    kind: Containment::CgroupV2,
                    dir: d,
                });
            }
        }
    }
    if let Some(path) = path_of(&|c| c.split(',').any(|c| c == "freezer")) {
        for m in ms
            .iter()
            .filter(|m| m.fstype == "cgroup" && m.opts.split(',').any(|o| o == "freezer"))
        {
            if let Some(d) = under(m, &path) {
                found.push(Subtree {
                    kind: Containment::CgroupV1,
                    dir: d,
                });
            }
        }
    }
    found
        .into_iter()
        .find(|s| s.dir.is_dir() && writable(&s.dir))
}

/// A fresh random id (16 hex digits) for a cage's cookie and cgroup name.
fn fresh_id() -> String {
    let mut b = [0u8; 8];
    // The system call, not glibc's getrandom(3): that wrapper is glibc 2.25's, and the wheels
    // are built for glibc 2.17 (manylinux2014), where a call to it cannot be linked or loaded.
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::syscall(libc::SYS_getrandom, b.as_mut_ptr(), b.len(), 0) };
    if n != b.len() as libc::c_long {
        // No kernel randomness: the pid and the clock still tell two cages apart here.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        b = (t ^ (u64::from(std::process::id()) << 40)).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A set of processes held together: a cgroup of its own when one can be made, and always an
/// environment cookie. See the module's comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cage {
    kind: Containment,
    dir: Option<PathBuf>,
    cookie: String,
}

impl Cage {
    /// A new cage (`what` names it: `sender`, `observer`, `run`): a cgroup under [`subtree`] when
    /// one can be made, else the cookie alone.
    pub fn new(what: &str) -> Cage {
        let cookie = fresh_id();
        if let Some(s) = subtree() {
            static SWEPT: std::sync::Once = std::sync::Once::new();
            SWEPT.call_once(|| sweep_stale(&s.dir));
            let dir = s.dir.join(format!("{what}-{cookie}"));
            if std::fs::create_dir(&dir).is_ok() {
                return Cage {
                    kind: s.kind,
                    dir: Some(dir),
                    cookie,
                };
            }
        }
        Cage {
            kind: Containment::Cookie,
            dir: None,
            cookie,
        }
    }

    /// How it holds its processes.
    pub fn containment(&self) -> Containment {
        self.kind
    }

    /// Its cgroup directory, if it has one.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The variable every process in it carries: (`EXACTLY_COOKIE_<id>`, `1`).
    pub fn cookie_var(&self) -> (String, String) {
        (format!("{COOKIE_PREFIX}{}", self.cookie), "1".into())
    }

    /// The cookie as found in `/proc/PID/environ`: `EXACTLY_COOKIE_<id>=`.
    pub fn needle(&self) -> Vec<u8> {
        format!("{COOKIE_PREFIX}{}=", self.cookie).into_bytes()
    }

    /// `cgroup.procs` opened for writing (a process that writes `0` to it joins the cgroup). A
    /// directory swept away as stale meanwhile (see `sweep_stale`) is made again.
    pub fn join_fd(&self) -> Option<OwnedFd> {
        let dir = self.dir.as_ref()?;
        if !dir.exists() {
            let _ = std::fs::create_dir(dir);
        }
        open_w(&dir.join("cgroup.procs"))
    }

    /// Makes `cmd` start inside the cage: the cookie in its environment and, before it execs,
    /// the cgroup joined. A cgroup that cannot be joined fails the start (nothing has run).
    pub fn hold(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let (k, v) = self.cookie_var();
        cmd.env(k, v);
        if let Some(fd) = self.join_fd() {
            let raw = fd.as_raw_fd();
            // The descriptor lives as long as the Command (moved into the closure).
            // SAFETY: write is async-signal-safe; the descriptor is open until the closure drops.
            unsafe {
                cmd.pre_exec(move || {
                    let _keep = &fd;
                    if libc::write(raw, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
    }

    /// The processes in it (other than this process), by pid.
    pub fn members(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        if let Some(dir) = &self.dir {
            cgroup_procs(dir, &mut pids);
        }
        let me = std::process::id() as i32;
        each_with_cookie(&self.needle(), me, &mut |pid| {
            if !pids.contains(&pid) {
                pids.push(pid)
            }
        });
        pids.retain(|p| *p != me);
        pids
    }

    /// Whether nothing is left in it. A cgroup v2 says so itself ("populated 0").
    pub fn is_empty(&self) -> bool {
        if let (Containment::CgroupV2, Some(dir)) = (self.kind, &self.dir) {
            if let Ok(ev) = std::fs::read_to_string(dir.join("cgroup.events")) {
                let populated = ev.lines().any(|l| l == "populated 1");
                if populated {
                    return false;
                }
                // The cookie may name a process that left before it was joined (none can: it is
                // joined before exec), or one in another cgroup: look anyway.
                let me = std::process::id() as i32;
                let mut any = false;
                each_with_cookie(&self.needle(), me, &mut |_| any = true);
                return !any;
            }
        }
        self.members().is_empty()
    }

    /// Ends everything in it (SIGKILL, the cgroup frozen meanwhile where it can be) and waits
    /// until it is empty: true then. False when something is left after [`END_WAIT`] (another
    /// user's process we may not signal, a cgroup we may not write): it may still be sending.
    pub fn end(&self) -> bool {
        let until = Instant::now() + END_WAIT;
        let killer = Killer::new(self);
        loop {
            if self.is_empty() {
                return true;
            }
            let refused = killer.kill_all();
            if self.is_empty() {
                return true;
            }
            if refused || Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILLs everything in it once, without waiting (a stop's last step); true when some
    /// process refused.
    pub fn kill_once(&self) -> bool {
        Killer::new(self).kill_all()
    }

    /// Its id as a number (the cookie's 16 hex digits): how a forked watchdog, told it in a
    /// fixed-size message, finds the cage's cgroup (`<subtree>/<what>-<id>`) and cookie.
    pub fn id(&self) -> Option<u64> {
        u64::from_str_radix(&self.cookie, 16).ok()
    }

    /// Ends it ([`Cage::end`]) and removes its cgroup: true when nothing is left.
    pub fn close(&self) -> bool {
        let empty = self.end();
        if empty {
            if let Some(dir) = &self.dir {
                remove_tree(dir);
            }
        }
        empty
    }

    /// `KIND:HEXDIR:COOKIE` (KIND `2`, `1` or `c`; the directory in hex, so no byte of it can
    /// be read as a separator of the row's identity).
    pub fn encode(&self) -> String {
        let kind = match self.kind {
            Containment::CgroupV2 => "2",
            Containment::CgroupV1 => "1",
            Containment::Cookie => "c",
        };
        let dir: String = self
            .dir
            .as_ref()
            .map(|d| {
                d.as_os_str()
                    .as_encoded_bytes()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect()
            })
            .unwrap_or_default();
        format!("{kind}:{dir}:{}", self.cookie)
    }

    /// Reads back what [`Cage::encode`] wrote.
    pub fn parse(s: &str) -> Option<Cage> {
        let mut p = s.splitn(3, ':');
        let (kind, dir, cookie) = (p.next()?, p.next()?, p.next()?);
        let kind = match kind {
            "2" => Containment::CgroupV2,
            "1" => Containment::CgroupV1,
            "c" => Containment::Cookie,
            _ => return None,
        };
        if cookie.is_empty() || !cookie.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let dir = if dir.is_empty() {
            None
        } else {
            let bytes: Option<Vec<u8>> = (0..dir.len())
                .step_by(2)
                .map(|i| {
                    dir.get(i..i + 2)
                        .and_then(|b| u8::from_str_radix(b, 16).ok())
                })
                .collect();
            Some(PathBuf::from(String::from_utf8(bytes?).ok()?))
        };
        // A directory that is not a cage of ours is never written to: a hostile row cannot
        // make us kill some other cgroup.
        if let Some(d) = &dir {
            let name = d.file_name()?.to_str()?;
            if !name.ends_with(&format!("-{cookie}")) || d.components().count() < 3 {
                return None;
            }
        }
        Some(Cage {
            kind: if dir.is_none() {
                Containment::Cookie
            } else {
                kind
            },
            dir,
            cookie: cookie.to_string(),
        })
    }
}

/// How old an empty cage must be before another process removes it: one whose owner died
/// (SIGKILL leaves no one to remove it) is empty for good, one just made is about to be joined.
const STALE_AFTER: Duration = Duration::from_secs(600);

/// Removes the empty cages under `dir` older than [`STALE_AFTER`] (made by processes that died
/// before removing them), once per process: a killed sender must not leave cgroups piling up.
fn sweep_stale(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let path = e.path();
        let is_cage = e.file_name().to_str().is_some_and(|n| {
            n.rsplit_once('-')
                .is_some_and(|(_, id)| id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        });
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= STALE_AFTER);
        if is_cage && old {
            let mut pids = Vec::new();
            cgroup_procs(&path, &mut pids);
            if pids.is_empty() {
                remove_tree(&path);
            }
        }
    }
}

/// Every pid in a cgroup directory and its children (v1 lists only a directory's own).
fn cgroup_procs(dir: &Path, pids: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                cgroup_procs(&e.path(), pids);
            }
        }
    }
}

/// Removes an empty cgroup and its (empty) children, deepest first.
fn remove_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

fn open_w(path: &Path) -> Option<OwnedFd> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: c is a valid C string; the descriptor returned is ours.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    // SAFETY: fd was just opened and is ours alone.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

fn open_rw(path: &Path) -> Option<OwnedFd> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: as in open_w.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    // SAFETY: as in open_w.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Ends a cage with system calls only, on descriptors and bytes prepared when it was made: what
/// a forked watchdog calls at a deadline. Made with [`Killer::new`] before the fork.
#[derive(Debug)]
pub struct Killer {
    /// cgroup v2 `cgroup.kill`.
    kill: Option<OwnedFd>,
    /// cgroup v2 `cgroup.freeze`, or v1 `freezer.state`.
    freeze: Option<OwnedFd>,
    /// `cgroup.procs` (read).
    procs: Option<OwnedFd>,
    v1: bool,
    needle: Vec<u8>,
}

impl Killer {
    /// The descriptors and cookie that end `cage`.
    pub fn new(cage: &Cage) -> Killer {
        let (kill, freeze, procs) = match &cage.dir {
            Some(d) if cage.kind == Containment::CgroupV2 => (
                open_w(&d.join("cgroup.kill")),
                open_w(&d.join("cgroup.freeze")),
                open_rw(&d.join("cgroup.procs")),
            ),
            Some(d) => (
                None,
                open_w(&d.join("freezer.state")),
                open_rw(&d.join("cgroup.procs")),
            ),
            None => (None, None, None),
        };
        Killer {
            kill,
            freeze,
            procs,
            v1: cage.kind == Containment::CgroupV1,
            needle: cage.needle(),
        }
    }

    /// SIGKILLs everything in the cage once (system calls only: safe in a forked child). True
    /// when some process refused (EPERM: another user's).
    pub fn kill_all(&self) -> bool {
        let raw = |fd: &Option<OwnedFd>| fd.as_ref().map_or(-1, |f| f.as_raw_fd());
        kill_raw(
            [raw(&self.kill), raw(&self.freeze), raw(&self.procs)],
            self.v1,
            &self.needle,
        )
    }

    /// Its descriptors (`cgroup.kill`, the freezer, `cgroup.procs`; -1 where missing), whether
    /// it is v1, and its cookie: what [`kill_raw`] takes in a forked child that renumbered them.
    pub fn raw_parts(&self) -> ([RawFd; 3], bool, &[u8]) {
        let raw = |fd: &Option<OwnedFd>| fd.as_ref().map_or(-1, |f| f.as_raw_fd());
        (
            [raw(&self.kill), raw(&self.freeze), raw(&self.procs)],
            self.v1,
            &self.needle,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cage_round_trips_and_refuses_a_foreign_directory() {
        let c = Cage {
            kind: Containment::CgroupV2,
            dir: Some("/sys/fs/cgroup/exactly/sender-00ff00ff00ff00ff".into()),
            cookie: "00ff00ff00ff00ff".into(),
        };
        assert_eq!(Cage::parse(&c.encode()), Some(c.clone()));
        let cookie = Cage {
            kind: Containment::Cookie,
            dir: None,
            cookie: "abc123".into(),
        };
        assert_eq!(Cage::parse(&cookie.encode()), Some(cookie));
        // A row naming some other cgroup is not a cage: nothing would be killed by it.
        let hostile = Cage {
            dir: Some("/sys/fs/cgroup/system.slice".into()),
            ..c
        };
        assert_eq!(Cage::parse(&hostile.encode()), None);
        assert_eq!(Cage::parse("2:zz:x"), None);
    }

    #[test]
    fn mountinfo_escapes_are_read() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        let m = mounts("30 1 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate");
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].fstype, "cgroup2");
    }

    #[test]
    fn the_cookie_finds_a_child_that_left_its_group_and_ends_it() {
        let cage = Cage::new("test");
        let mut cmd = std::process::Command::new("setsid");
        cmd.args(["sleep", "30"]);
        cage.hold(&mut cmd);
        let mut child = cmd.spawn().expect("spawn");
        let pid = child.id() as i32;
        let until = Instant::now() + Duration::from_secs(5);
        while !cage.members().contains(&pid) {
            assert!(Instant::now() < until, "the child never showed in its cage");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!cage.is_empty());
        assert!(cage.close());
        let _ = child.wait();
        assert!(cage.is_empty());
    }
}

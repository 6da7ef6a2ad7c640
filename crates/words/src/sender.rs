//! The sender of an effect is a set of processes with an identity, not a pid: the host identity
//! (the host name's machine as its boot id and pid namespace, so two machines or containers
//! that share a name never pass for one), the sending process with its start time (so a reused
//! pid is not taken for it), and the process group its command runs in (so a child that
//! outlives its parent is still counted, and ended, before anyone sends again).
//!
//! Linux `/proc` is read for start times and group members; where it cannot be read, `kill(pid,
//! 0)` answers, and EPERM (another user's process) counts as alive.
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What can be known about the process set that moved a row to `submitted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// On this host identity it, or something left in its group, lives (other than us): it may
    /// be sending right now.
    Alive,
    /// This host identity, its process is gone and nothing is left of its group (ended before
    /// this answer): nothing more will leave on its behalf.
    Gone,
    /// Another host, ourselves, or no attempt recorded: only the row's deadline can tell.
    Unknown,
    /// Another machine calling itself by our host name: only the row's deadline can tell.
    Clash,
}

/// How long a dead sender's watchdog is given to end its command and exit by itself.
const LEADER_WAIT: Duration = Duration::from_secs(1);

/// How long ending a dead sender's leftover group may take before it counts as still alive.
const END_WAIT: Duration = Duration::from_secs(3);

/// This machine as a sender's row names it: boot id and pid namespace. Two hosts configured
/// with one `EXACTLY_HOST` differ here, so their pids are never compared.
pub fn host_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let ns = std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|p| {
                let s = p.to_string_lossy().into_owned();
                s.strip_prefix("pid:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .map(str::to_string)
            })
            .unwrap_or_default();
        if boot.is_empty() {
            // No boot id (not Linux): the name is all there is.
            format!("{}/{ns}", crate::hostname())
        } else {
            format!("{boot}/{ns}")
        }
    })
}

/// A process group a sender's command runs in, by its leader's pid and start time (a group id
/// is its leader's pid; the kernel never reuses it while any member lives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// The group id: its leader's pid.
    pub pgid: i32,
    /// The leader's start time in clock ticks since boot.
    pub leader_start: u64,
}

/// Who moved a row to `submitted`, as recorded on the row (`effect_ledger.sender`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The machine it runs on ([`host_id`]).
    pub host_id: String,
    /// The process's pid.
    pub pid: i32,
    /// The process's start time in clock ticks since boot (0: unknown).
    pub start: u64,
    /// The process group its command sends from, if it runs in one.
    pub group: Option<Group>,
    /// The cage (cgroup, or cookie) its command sends from, if it has one: "gone" on this host
    /// means the cage is empty.
    pub cage: Option<crate::contain::Cage>,
    /// The process's name (`comm`), which its group's leader shares: a start time has only
    /// clock-tick resolution, and a pid taken again within one tick must still not pass for it.
    pub comm: Option<String>,
}

impl Identity {
    /// This process, sending through `group` when its command runs in one.
    pub fn this_process(group: Option<Group>) -> Identity {
        let pid = std::process::id() as i32;
        let (start, comm) = match (own_start(pid), main_thread_name(pid)) {
            (Some(start), Some(comm)) => (start, Some(comm)),
            // Another thread's name is not the process's: read what `process_alive` will.
            _ => {
                // /proc/self is this process in any pid namespace; /proc/PID may be another's.
                let me = read_proc("/proc/self/stat").and_then(|s| parse_stat(&s));
                (
                    me.as_ref().map(|s| s.start).unwrap_or(0),
                    me.map(|s| s.comm),
                )
            }
        };
        Identity {
            host_id: host_id().to_string(),
            pid,
            start,
            group,
            comm,
            cage: None,
        }
    }

    /// The same, sending from `cage`.
    pub fn in_cage(self, cage: Option<crate::contain::Cage>) -> Identity {
        Identity { cage, ..self }
    }

    /// `HOST_ID;PID@START;PGID@START;COMM;CAGE` (the group part empty without a group; the name
    /// in hex, so no byte of it can be read as a separator; the cage as [`crate::contain::Cage`]
    /// writes it, empty without one).
    pub fn encode(&self) -> String {
        let group = self
            .group
            .map(|g| format!("{}@{}", g.pgid, g.leader_start))
            .unwrap_or_default();
        // By table, as `key::hex`: a `format!` per byte was a visible share of an effect's CPU.
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let name = self.comm.as_deref().unwrap_or_default();
        let mut comm = String::with_capacity(name.len() * 2);
        for b in name.bytes() {
            comm.push(DIGITS[usize::from(b >> 4)] as char);
            comm.push(DIGITS[usize::from(b & 0xf)] as char);
        }
        let cage = self.cage.as_ref().map(|c| c.encode()).unwrap_or_default();
        format!(
            "{};{}@{};{group};{comm};{cage}",
            self.host_id, self.pid, self.start
        )
    }

    /// Reads back what [`Identity::encode`] wrote (None: not in that form).
    pub fn parse(s: &str) -> Option<Identity> {
        let mut parts = s.split(';');
        let host_id = parts.next()?.to_string();
        let at = |p: &str| -> Option<(i32, u64)> {
            let (a, b) = p.split_once('@')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        };
        let (pid, start) = at(parts.next()?)?;
        let group = match parts.next() {
            Some("") | None => None,
            Some(g) => {
                let (pgid, leader_start) = at(g)?;
                Some(Group { pgid, leader_start })
            }
        };
        let comm = match parts.next() {
            Some("") | None => None,
            Some(hex) => {
                let bytes: Option<Vec<u8>> = (0..hex.len())
                    .step_by(2)
                    .map(|i| {
                        hex.get(i..i + 2)
                            .and_then(|b| u8::from_str_radix(b, 16).ok())
                    })
                    .collect();
                Some(String::from_utf8_lossy(&bytes?).into_owned())
            }
        };
        // A cage that does not read back (a hostile or older row) is no cage: judged as before.
        let cage = parts.next().and_then(crate::contain::Cage::parse);
        Some(Identity {
            host_id,
            pid,
            start,
            group,
            comm,
            cage,
        })
    }
}

/// How the sender recorded as `identity` ([`Identity::encode`]) held its command: `cgroup-v2`,
/// `cgroup-v1`, `cookie` (no writable cgroup: the watchdog and an environment cookie),
/// `process-group` (a row written before cages), `process` (no group). None: not an identity.
pub fn containment_of(identity: &str) -> Option<&'static str> {
    let id = Identity::parse(identity)?;
    Some(match (&id.cage, id.group) {
        (Some(c), _) => c.containment().word(),
        (None, Some(_)) => "process-group",
        (None, None) => "process",
    })
}

/// What `/proc/PID/stat` says of a process.
#[derive(Debug, Clone)]
pub struct Stat {
    /// Its state letter (`R`, `S`, `T` stopped, `Z` zombie, …).
    pub state: char,
    /// It has exited and waits to be reaped.
    pub zombie: bool,
    /// Its parent's pid.
    pub ppid: i32,
    /// Its process group id.
    pub pgid: i32,
    /// Its start time in clock ticks since boot.
    pub start: u64,
    /// Its name (`comm`).
    pub comm: String,
    /// A zombie's wait status as `waitpid` reports it (field 52; 0 while it runs): the kernel's
    /// word on how it ended, readable until its parent reaps it.
    pub exit_code: i32,
}

/// How much of the process table `/proc` shows us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcView {
    /// Every process of our pid namespace.
    Full,
    /// Mounted `hidepid`: other users' processes have no entry.
    Hidden,
    /// Another pid namespace's `/proc` (a `unshare --pid` without its own mount): its pids are
    /// not ours, so none of its entries may be read as one of ours.
    Foreign,
    /// No `/proc` at all.
    Missing,
}

/// How `/proc` looks from this process (read once).
pub fn proc_view() -> ProcView {
    static VIEW: OnceLock<ProcView> = OnceLock::new();
    *VIEW.get_or_init(|| {
        let Ok(link) = std::fs::read_link("/proc/self") else {
            return ProcView::Missing;
        };
        if link.to_str().and_then(|l| l.parse::<u32>().ok()) != Some(std::process::id()) {
            return ProcView::Foreign;
        }
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let hidden = info.lines().any(|l| {
            let mut halves = l.splitn(2, " - ");
            let left = halves.next().unwrap_or_default();
            let right = halves.next().unwrap_or_default();
            left.split(' ').nth(4) == Some("/proc")
                && right.starts_with("proc ")
                && right.split([' ', ',']).any(|o| {
                    matches!(
                        o,
                        "hidepid=1" | "hidepid=2" | "hidepid=invisible" | "hidepid=noaccess"
                    )
                })
        });
        if hidden {
            ProcView::Hidden
        } else {
            ProcView::Full
        }
    })
}

/// Reads `/proc/PID/stat` (None: no such process, no `/proc`, or a `/proc` of another pid
/// namespace, where PID would name somebody else).
pub fn stat(pid: i32) -> Option<Stat> {
    if pid == std::process::id() as i32 {
        return parse_stat(&read_proc("/proc/self/stat")?);
    }
    if proc_view() == ProcView::Foreign {
        return foreign_entries()
            .into_iter()
            .find(|e| e.0 == pid)
            .map(|e| e.1);
    }
    parse_stat(&read_proc(&format!("/proc/{pid}/stat"))?)
}

/// In a `/proc` of another pid namespace, every process our namespace can see, by the pid it
/// has here (`NSpid` at our depth), with its stat in our numbers (`NSpgid`; the parent unknown,
/// 0). Read whole: a pid alone names somebody else there.
fn foreign_entries() -> Vec<(i32, Stat)> {
    let ns_field = |status: &str, name: &str| -> Vec<i32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let Some(mine) = read_proc("/proc/self/status") else {
        return Vec::new();
    };
    let Some(depth) = ns_field(&mine, "NSpid:").len().checked_sub(1) else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|entry| {
            let status = read_proc(&format!("/proc/{entry}/status"))?;
            let pid = *ns_field(&status, "NSpid:").get(depth)?;
            let pgid = *ns_field(&status, "NSpgid:").get(depth)?;
            let mut st = parse_stat(&read_proc(&format!("/proc/{entry}/stat"))?)?;
            st.pgid = pgid;
            st.ppid = 0;
            Some((pid, st))
        })
        .collect()
}

fn parse_stat(s: &str) -> Option<Stat> {
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let close = s.rfind(')')?;
    let comm = s.get(s.find('(')? + 1..close)?.to_string();
    // ASCII fields (numbers and a state letter): the Unicode-aware split cost ~10k
    // instructions per read, and every effect reads its own process's.
    let f: Vec<&str> = s[close + 1..].split_ascii_whitespace().collect();
    Some(Stat {
        state: f.first().and_then(|s| s.chars().next()).unwrap_or('?'),
        zombie: matches!(f.first(), Some(&"Z") | Some(&"X")),
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
        comm,
        exit_code: f.get(49).and_then(|c| c.parse().ok()).unwrap_or(0),
    })
}

/// This process's start time, read from /proc once per pid: it never changes, and a forked
/// child (another pid) reads its own. Reading `/proc/self/stat` for every effect cost 7–9 µs of
/// kernel time, a tenth of a lifecycle on a fast disk (docs/performance.md).
fn own_start(pid: i32) -> Option<u64> {
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
    static PID: AtomicI32 = AtomicI32::new(0);
    static START: AtomicU64 = AtomicU64::new(0);
    // START is stored before PID (release), so a PID read here (acquire) names its START.
    if PID.load(Ordering::Acquire) == pid {
        return Some(START.load(Ordering::Relaxed));
    }
    let start = parse_stat(&read_proc("/proc/self/stat")?)?.start;
    START.store(start, Ordering::Relaxed);
    PID.store(pid, Ordering::Release);
    Some(start)
}

/// The process's name (`comm`) as `/proc/PID/stat` shows it, which is its main thread's, asked
/// of the kernel without a file when the main thread asks (`PR_GET_NAME` answers for the calling
/// thread). Read every time: a process may rename itself (`prctl`, `setproctitle`), and a name
/// recorded stale would make `process_alive` take a live sender for gone.
fn main_thread_name(pid: i32) -> Option<String> {
    // SAFETY: gettid takes no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    if tid != i64::from(pid) {
        return None;
    }
    let mut buf = [0u8; 17];
    // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included, into the buffer it is given.
    if unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr()) } != 0 {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0)?;
    String::from_utf8(buf.get(..len)?.to_vec()).ok()
}

/// A /proc file's text, read into a buffer of its usual size at once: `read_to_string` asks
/// for its size (0 for /proc) and then reads in growing steps, six reads for one `stat`, and
/// every effect reads its own.
fn read_proc(path: &str) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(chunk.get(..n)?),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    String::from_utf8(buf).ok()
}

/// Whether `s` is the process that started at `start` (0: unknown) under the name `comm`.
fn same_process(s: &Stat, start: u64, comm: Option<&str>) -> bool {
    (start == 0 || s.start == start) && comm.is_none_or(|c| s.comm == c)
}

/// Whether the process `pid` that started at `start` (0: unknown) as `comm` still lives. A pid
/// now held by a process started at another time, or under another name, is not it; one we
/// may not signal is alive.
pub fn process_alive(pid: i32, start: u64, comm: Option<&str>) -> bool {
    if pid <= 0 {
        return false;
    }
    match stat(pid) {
        Some(s) => !s.zombie && same_process(&s, start, comm),
        None if proc_view() == ProcView::Full => false,
        // No entry we can trust (hidepid hides another user's, a foreign /proc names others):
        // only the kernel's answer is left, and EPERM is a live process.
        None => signal0(pid),
    }
}

/// Whether `kill(pid, 0)` finds a process (EPERM: one we may not signal, alive). A negative
/// pid asks for a process group.
fn signal0(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe {
        libc::kill(pid, 0) == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
}

/// The live (not zombie) members of `group` (its leader named `comm`), none when the group is
/// known gone: its leader's pid now belongs to another process, which the kernel allows only
/// once every member of the old group has ended. This process and its children are never a
/// dead sender's leftovers (a retry's own watchdog may hold a reused group id).
pub fn members(group: Group, comm: Option<&str>) -> Vec<i32> {
    if let Some(l) = stat(group.pgid) {
        if !l.zombie && !same_process(&l, group.leader_start, comm) {
            return Vec::new();
        }
    }
    let me = std::process::id() as i32;
    if proc_view() == ProcView::Foreign {
        return foreign_entries()
            .into_iter()
            .filter(|(pid, s)| *pid != me && s.pgid == group.pgid && !s.zombie)
            .map(|(pid, _)| pid)
            .collect();
    }
    let seen = match std::fs::read_dir("/proc") {
        Ok(dir) => dir
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
            .filter(|pid| *pid != me)
            .filter(|pid| {
                stat(*pid).is_some_and(|s| s.pgid == group.pgid && !s.zombie && s.ppid != me)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    if !seen.is_empty() || proc_view() == ProcView::Full {
        return seen;
    }
    // A /proc that does not show everything: the kernel tells whether the group has a member.
    if signal0(-group.pgid) {
        vec![group.pgid]
    } else {
        Vec::new()
    }
}

/// Ends what is left of a dead sender's group (SIGKILL) and waits until it is empty. False when
/// something of it still lives: it is another user's (EPERM), or did not end within a few
/// seconds; then it may still be sending.
pub fn end_group(group: Group, comm: Option<&str>) -> bool {
    let until = Instant::now() + END_WAIT;
    // The group's leader is the dead sender's watchdog, which ends everything of the command
    // (as its parent and subreaper: even what left the group and the cage) and then exits by
    // itself: let it finish first, for it alone may know some of what is left. A stopped one
    // never will: after a moment it is ended with the rest.
    let lets_go = Instant::now() + LEADER_WAIT;
    while Instant::now() < lets_go
        && stat(group.pgid)
            .is_some_and(|l| !l.zombie && l.state != 'T' && l.start == group.leader_start)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    loop {
        let left = members(group, comm);
        if left.is_empty() {
            return true;
        }
        // Each one by pid: the group id may name another group by now (see `members`).
        for pid in left {
            // SAFETY: kill has no memory-safety preconditions.
            let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
            if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
                return false;
            }
        }
        if members(group, comm).is_empty() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What is known of the process set that moved a row to `submitted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// On this host identity, it (or something left in its group) still lives.
    Alive,
    /// On this host identity, it is gone and nothing of its group is left.
    Gone,
    /// Another host, ourselves, or nothing recorded: only the row's deadline can tell.
    Elsewhere,
    /// Another machine that calls itself by our host name (its boot id or pid namespace
    /// differs): only the row's deadline can tell, and the clash is worth saying.
    Clash,
}

/// Judges a row's sender: `attempt` is its `host:pid`, `identity` what the row recorded of it
/// (None: a row written before identities, or by another program). A dead sender's leftover
/// group is ended here, before anyone may settle or re-send its row.
pub fn judge(attempt: Option<&str>, identity: Option<&str>) -> Judged {
    let Some((host, pid)) = attempt.and_then(|a| a.rsplit_once(':')) else {
        return Judged::Elsewhere;
    };
    if host != crate::host() {
        return Judged::Elsewhere;
    }
    let me = std::process::id() as i32;
    match identity.and_then(Identity::parse) {
        Some(id) if id.host_id != host_id() => Judged::Clash,
        Some(id) => {
            let comm = id.comm.as_deref();
            if id.pid == me && stat(me).is_none_or(|s| same_process(&s, id.start, comm)) {
                return Judged::Elsewhere;
            }
            if process_alive(id.pid, id.start, comm) {
                return Judged::Alive;
            }
            if let Some(g) = id.group {
                if !end_group(g, comm) {
                    return Judged::Alive;
                }
            }
            // Whatever left the group (`timeout`, `setsid`) is still in the cage: gone means
            // the cage is empty, and what is left is ended first.
            match &id.cage {
                Some(c) if !c.close() => Judged::Alive,
                _ => Judged::Gone,
            }
        }
        None => {
            let Ok(pid) = pid.parse::<i32>() else {
                return Judged::Elsewhere;
            };
            if pid == me || pid <= 0 {
                return Judged::Elsewhere;
            }
            if process_alive(pid, 0, None) {
                Judged::Alive
            } else {
                Judged::Gone
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips() {
        let id = Identity {
            host_id: "b00t/4026531836".into(),
            pid: 42,
            start: 7,
            group: Some(Group {
                pgid: 43,
                leader_start: 8,
            }),
            comm: Some("exa;ctly@".into()),
            cage: crate::contain::Cage::parse("c::0123abcd"),
        };
        assert_eq!(Identity::parse(&id.encode()), Some(id.clone()));
        let lone = Identity {
            group: None,
            comm: None,
            cage: None,
            ..id
        };
        assert_eq!(Identity::parse(&lone.encode()), Some(lone));
        assert_eq!(Identity::parse("x;y"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let me = Identity::this_process(None);
        assert!(me.start > 0);
        assert!(process_alive(me.pid, me.start, me.comm.as_deref()));
        assert!(!process_alive(me.pid, me.start + 1, me.comm.as_deref()));
        assert!(!process_alive(me.pid, me.start, Some("not-us")));
    }
}

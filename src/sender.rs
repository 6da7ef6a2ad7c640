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
    /// The process's name (`comm`), which its group's leader shares: a start time has only
    /// clock-tick resolution, and a pid taken again within one tick must still not pass for it.
    pub comm: Option<String>,
}

impl Identity {
    /// This process, sending through `group` when its command runs in one.
    pub fn this_process(group: Option<Group>) -> Identity {
        let pid = std::process::id() as i32;
        let me = stat(pid);
        Identity {
            host_id: host_id().to_string(),
            pid,
            start: me.as_ref().map(|s| s.start).unwrap_or(0),
            group,
            comm: me.map(|s| s.comm),
        }
    }

    /// `HOST_ID;PID@START;PGID@START;COMM` (the group part empty without a group; the name in
    /// hex, so no byte of it can be read as a separator).
    pub fn encode(&self) -> String {
        let group = self
            .group
            .map(|g| format!("{}@{}", g.pgid, g.leader_start))
            .unwrap_or_default();
        let comm: String = self
            .comm
            .as_deref()
            .unwrap_or_default()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!(
            "{};{}@{};{group};{comm}",
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
        Some(Identity {
            host_id,
            pid,
            start,
            group,
            comm,
        })
    }
}

/// What `/proc/PID/stat` says of a process.
#[derive(Debug, Clone)]
pub struct Stat {
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
}

/// Reads `/proc/PID/stat` (None: no such process, or no `/proc`).
pub fn stat(pid: i32) -> Option<Stat> {
    let s = read_proc(&format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces and parentheses: the fields start after the last ')'.
    let close = s.rfind(')')?;
    let comm = s.get(s.find('(')? + 1..close)?.to_string();
    let f: Vec<&str> = s[close + 1..].split_whitespace().collect();
    Some(Stat {
        zombie: matches!(f.first(), Some(&"Z") | Some(&"X")),
        ppid: f.get(1)?.parse().ok()?,
        pgid: f.get(2)?.parse().ok()?,
        start: f.get(19)?.parse().ok()?,
        comm,
    })
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
        None if std::path::Path::new("/proc/self/stat").exists() => false,
        // No /proc to read: only the kernel's answer is left.
        // SAFETY: signal 0 only checks that the process exists.
        None => unsafe {
            libc::kill(pid, 0) == 0
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        },
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
    let Ok(dir) = std::fs::read_dir("/proc") else {
        // SAFETY: signal 0 to a group only checks that it has a member.
        let any = unsafe {
            libc::kill(-group.pgid, 0) == 0
                || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        };
        return if any { vec![group.pgid] } else { Vec::new() };
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| *pid != me)
        .filter(|pid| stat(*pid).is_some_and(|s| s.pgid == group.pgid && !s.zombie && s.ppid != me))
        .collect()
}

/// Ends what is left of a dead sender's group (SIGKILL) and waits until it is empty. False when
/// something of it still lives: it is another user's (EPERM), or did not end within a few
/// seconds; then it may still be sending.
pub fn end_group(group: Group, comm: Option<&str>) -> bool {
    let until = Instant::now() + END_WAIT;
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
            match id.group {
                Some(g) if !end_group(g, comm) => Judged::Alive,
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
        };
        assert_eq!(Identity::parse(&id.encode()), Some(id.clone()));
        let lone = Identity {
            group: None,
            comm: None,
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

//! A sender as processes on a real machine, for the sender-fault scenarios (`senders.rs`): how
//! an attempt and its retry are started and announce themselves, and what the scenarios do to
//! them — run them as another user, start them in a pid namespace of their own, signal a
//! process or its group, stop the PostgreSQL server processes serving them, hand a dead
//! sender's pid to another process. Each check says why a scenario that needs root or a
//! capability cannot run here.
use super::proc::{self, Running};
use super::{sh_quote, skew_clock, Client, Eff, Harness, How, Tally};
use crate::{Error, Result};
use std::process::{Command, Stdio};

/// The line each sender script prints first: `chaos-sender: <shell pid> <its parent's pid>`.
pub(super) const MARK: &str = "chaos-sender:";

/// What a sender attempt is: its script's body after the announcement, the host it names, its
/// clock, the far-side client it sends with.
pub(super) struct Sender<'a> {
    pub(super) body: &'a str,
    pub(super) host: &'a str,
    pub(super) skew_ms: i64,
    pub(super) max_skew: &'a str,
    pub(super) client: Client,
}

/// `exactly effect … -- sh -c 'announce; BODY'`, `$CLIENT` in BODY the far-side client. Unguarded
/// (the self-check) the bare script, told its key, job and token as `exactly effect` would.
pub(super) fn sender_cmd(h: &Harness, e: &Eff, s: &Sender) -> Command {
    let tag = format!("{}:{}", e.job, e.token);
    let client: Vec<String> = h
        .client_argv(&tag, &s.client)
        .iter()
        .map(|a| sh_quote(a))
        .collect();
    let script = format!(
        "CLIENT={}; echo \"{MARK} $$ $PPID\" >&2; {}",
        sh_quote(&client.join(" ")),
        s.body
    );
    let mut cmd;
    if h.guarded {
        cmd = h.skewed(s.skew_ms);
        cmd.args(h.effect_args(e, h.observe_cmd()))
            .args(["--", "sh", "-c", &script]);
    } else {
        cmd = proc::command(std::path::Path::new("sh"));
        if s.skew_ms != 0 {
            let _ = skew_clock(&mut cmd, &format!("{:+.3}s", s.skew_ms as f64 / 1000.0));
        }
        cmd.args(["-c", &script])
            .env("EXACTLY_EFFECT_KEY", h.key(e))
            .env("EXACTLY_JOB", &e.job)
            .env("EXACTLY_FENCING_TOKEN", e.token.to_string());
    }
    cmd.env("EXACTLY_HOST", s.host)
        .env("EXACTLY_MAX_SKEW", s.max_skew);
    cmd
}

/// A retry as the next run on `host` makes it: the observer first, then the same send.
pub(super) fn retry_cmd(
    h: &Harness,
    e: &Eff,
    host: &str,
    skew_ms: i64,
    max_skew: &str,
    c: &Client,
) -> Command {
    let mut cmd = if h.guarded {
        let how = How {
            host: Some(host.into()),
            skew_ms,
            ..How::default()
        };
        h.attempt_with(e, c, &how)
    } else {
        h.attempt(e, c, None)
    };
    cmd.env("EXACTLY_HOST", host)
        .env("EXACTLY_MAX_SKEW", max_skew);
    cmd
}

/// Waits for the script's announcement: (shell pid, `exactly effect`'s pid).
pub(super) fn announced(r: &mut Running, t: &mut Tally, label: &str) -> Result<Option<(i32, i32)>> {
    let line = r.wait_line(MARK)?;
    let pids = line.as_deref().and_then(|l| {
        let rest = l.split(MARK).nth(1)?;
        let mut w = rest.split_whitespace().map(|p| p.parse::<i32>().ok());
        let (sh, parent) = (w.next()??, w.next()??);
        Some((sh, effect_of(sh, parent)))
    });
    if pids.is_none() {
        t.anomaly(format!("{label}: the sender never started its command"));
    }
    Ok(pids)
}

/// `exactly effect`'s pid from the script's: its parent, unless that parent leads the script's
/// group: where no cgroup can be made the watchdog starts the command itself, and `exactly
/// effect` is the watchdog's parent.
fn effect_of(sh: i32, parent: i32) -> i32 {
    // Unguarded, the script is our own child: there is no `exactly effect` to find.
    if parent == std::process::id() as i32 {
        return parent;
    }
    match crate::sender::stat(sh) {
        Some(s) if s.pgid == parent && s.ppid == parent => {
            crate::sender::stat(parent).map_or(parent, |w| w.ppid)
        }
        _ => parent,
    }
}

pub(super) fn root_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() } != 0).then(|| "needs root".to_string())
}

pub(super) fn unshare_missing() -> Option<String> {
    let ok = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "--mount-proc", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    (!ok).then(|| "unshare --pid --fork --mount-proc does not work here".to_string())
}

pub(super) fn signal(pid: i32, sig: i32) -> bool {
    // SAFETY: signalling a process (or, negative, a group) the scenario started and checked.
    pid != 0 && unsafe { libc::kill(pid, sig) } == 0
}

/// The process group of `pid`, unless it is ours (never signal the harness's own group).
pub(super) fn group_of(pid: i32) -> Option<i32> {
    let g = crate::sender::stat(pid)?.pgid;
    // SAFETY: getpgrp has no preconditions.
    (g > 1 && g != unsafe { libc::getpgrp() }).then_some(g)
}

/// Whether `runuser` can run the binary as both users, and the files they share.
pub(super) fn users_missing(h: &Harness) -> Option<String> {
    for user in ["nobody", "daemon"] {
        let ok = Command::new("runuser")
            .args(["-u", user, "--"])
            .arg(h.exe())
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Some(format!(
                "runuser -u {user} cannot run {}",
                h.exe().display()
            ));
        }
    }
    None
}

/// Lets both users read and write the work directory, the SQLite files and the far side.
pub(super) fn share(h: &Harness) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &std::path::Path, mode: u32| -> Result<()> {
        if p.exists() {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(())
    };
    set(&h.dir, 0o777)?;
    set(&h.far.socket, 0o777)?;
    if !h.db().contains("://") {
        for suffix in ["", "-wal", "-shm"] {
            set(std::path::Path::new(&format!("{}{suffix}", h.db())), 0o666)?;
        }
    }
    Ok(())
}

/// `cmd` run as `user` through runuser, with a umask that lets the other user write what it
/// creates.
pub(super) fn as_user(user: &str, cmd: &Command) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", user, "--", "sh", "-c", "umask 0; exec \"$@\"", "sh"])
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// The PostgreSQL server processes serving `pid`'s connections: its sockets' local ports, as
/// the server sees them in `pg_stat_activity.client_port`.
pub(super) fn backends_of(db: &str, pid: i32) -> Result<Vec<i32>> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))?
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_string)
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && inodes.iter().any(|i| i == f[9]) {
                if let Some(p) = f[1].rsplit(':').next() {
                    if let Ok(p) = i32::from_str_radix(p, 16) {
                        ports.push(p);
                    }
                }
            }
        }
    }
    if ports.is_empty() {
        return Ok(Vec::new());
    }
    let mut c = postgres::Client::connect(db, postgres::NoTls).map_err(|e| Error::Postgres {
        message: format!("cannot ask the server for its backends: {e}"),
        source: e,
    })?;
    let rows = c
        .query(
            "SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1)",
            &[&ports],
        )
        .map_err(|e| Error::Postgres {
            message: format!("pg_stat_activity: {e}"),
            source: e,
        })?;
    Ok(rows.iter().map(|r| r.get::<_, i32>(0)).collect())
}

/// Starts processes until one gets `pid` (writing `pid - 1` to `ns_last_pid` first); None when
/// another process on the machine kept taking it.
pub(super) fn squat(pid: i32) -> Result<Option<std::process::Child>> {
    for _ in 0..2000 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())?;
        let mut c = Command::new("sleep")
            .arg("60")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        if c.id() as i32 == pid {
            return Ok(Some(c));
        }
        let _ = c.kill();
        let _ = c.wait();
    }
    Ok(None)
}

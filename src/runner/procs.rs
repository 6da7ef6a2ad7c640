//! The processes of a firing, found by the environment every run's command inherits
//! (`EXACTLY_DB_ID`, `EXACTLY_JOB`, `EXACTLY_SCHEDULED_AT`, `EXACTLY_RUN_ID`). A run's command
//! lives in a process group its watchdog ends when the scheduler dies, but a process that left
//! the group (setsid) is beyond it: the next run of the same firing on this machine ends those
//! leftovers before it starts, so two copies of one firing never run at once. The database is
//! matched by its identity ([`crate::Store::identity`]), never by the spelling of its path or
//! URL. Linux `/proc` only; elsewhere nothing is found.
use std::time::{Duration, Instant};

/// One process of a firing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FiringProc {
    pub pid: i32,
    pub pgid: i32,
    pub slot: String,
    pub run_id: String,
}

/// Live (not zombie) processes whose environment names this database (by its identity), job
/// and slot.
pub fn of_firing(db_id: &str, job: &str, slot: &str) -> Vec<FiringProc> {
    scan(db_id, job, Some(slot))
}

/// Live (not zombie) processes of every firing of a job (a harness watches for two runs of one
/// slot alive at once).
pub fn of_job(db_id: &str, job: &str) -> Vec<FiringProc> {
    scan(db_id, job, None)
}

fn scan(db_id: &str, job: &str, slot: Option<&str>) -> Vec<FiringProc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut want = vec![
        format!("EXACTLY_DB_ID={db_id}"),
        format!("EXACTLY_JOB={job}"),
    ];
    if let Some(s) = slot {
        want.push(format!("EXACTLY_SCHEDULED_AT={s}"));
    }
    let mut out = Vec::new();
    for pid in dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
    {
        // Another user's process (or one that just ended) cannot be read: not ours.
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
        if !want.iter().all(|w| vars.contains(&w.as_bytes())) {
            continue;
        }
        let Some((state, pgid)) = stat(pid) else {
            continue;
        };
        if state == "Z" {
            continue;
        }
        let var = |name: &[u8]| {
            vars.iter()
                .find_map(|v| v.strip_prefix(name))
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        out.push(FiringProc {
            pid,
            pgid,
            slot: var(b"EXACTLY_SCHEDULED_AT="),
            run_id: var(b"EXACTLY_RUN_ID="),
        });
    }
    out
}

/// A process's state letter and process group, from `/proc/PID/stat`.
fn stat(pid: i32) -> Option<(String, i32)> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may itself hold spaces and ')'.
    let mut rest = st[st.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.to_string();
    let pgid = rest.nth(1)?.parse().ok()?;
    Some((state, pgid))
}

/// SIGKILLs every process of the firing that is not of run `keep` (and their process groups),
/// and waits up to `within` for them to be gone. Returns how many were found.
pub fn end_leftovers(db_id: &str, job: &str, slot: &str, keep: &str, within: Duration) -> usize {
    // SAFETY: getpgrp has no preconditions.
    let own_group = unsafe { libc::getpgrp() };
    let found: Vec<FiringProc> = of_firing(db_id, job, slot)
        .into_iter()
        .filter(|p| p.run_id != keep && p.pid != std::process::id() as i32)
        .collect();
    for p in &found {
        // SAFETY: kill has no memory-safety preconditions; our own group is never a target.
        unsafe {
            if p.pgid > 1 && p.pgid != own_group {
                libc::kill(-p.pgid, libc::SIGKILL);
            }
            libc::kill(p.pid, libc::SIGKILL);
        }
    }
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && of_firing(db_id, job, slot).iter().any(|p| p.run_id != keep)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    found.len()
}

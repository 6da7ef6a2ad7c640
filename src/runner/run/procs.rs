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
pub(crate) struct FiringProc {
    pub pid: i32,
    pub pgid: i32,
    pub slot: String,
    pub run_id: String,
}

/// Live (not zombie) processes whose environment names this database (by its identity), job
/// and slot.
pub(crate) fn of_firing(db_id: &str, job: &str, slot: &str) -> Vec<FiringProc> {
    scan(db_id, job, Some(slot))
}

/// Live (not zombie) processes of every firing of a job (a harness watches for two runs of one
/// slot alive at once).
pub(crate) fn of_job(db_id: &str, job: &str) -> Vec<FiringProc> {
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
        let Some((slot, run_id)) = firing_of(&env, &want) else {
            continue;
        };
        let Some((state, pgid)) = stat(pid) else {
            continue;
        };
        if state == "Z" {
            continue;
        }
        out.push(FiringProc {
            pid,
            pgid,
            slot,
            run_id,
        });
    }
    out
}

/// The (slot, run id) of an environment that holds every `want` entry and names its run.
/// Reading `/proc/PID/environ` takes several reads, and one that comes after the process exited
/// or replaced itself (exec) finds nothing: the text stops short anywhere. So only entries ended
/// by their NUL are whole, and an environment cut before its run id is not judged (its process
/// is ending or becoming another), rather than taken for a second run with an empty id.
fn firing_of(env: &[u8], want: &[String]) -> Option<(String, String)> {
    let whole = &env[..env.iter().rposition(|b| *b == 0)?];
    let vars: Vec<&[u8]> = whole.split(|b| *b == 0).collect();
    if !want.iter().all(|w| vars.contains(&w.as_bytes())) {
        return None;
    }
    let var = |name: &[u8]| {
        vars.iter()
            .find_map(|v| v.strip_prefix(name))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let run_id = var(b"EXACTLY_RUN_ID=").filter(|r| !r.is_empty())?;
    Some((var(b"EXACTLY_SCHEDULED_AT=").unwrap_or_default(), run_id))
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
pub(crate) fn end_leftovers(
    db_id: &str,
    job: &str,
    slot: &str,
    keep: &str,
    within: Duration,
) -> usize {
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

#[cfg(test)]
mod tests {
    use super::firing_of;

    fn want() -> Vec<String> {
        vec!["EXACTLY_DB_ID=d".into(), "EXACTLY_JOB=j".into()]
    }

    #[test]
    fn a_whole_environment_names_its_firing() {
        let env = b"EXACTLY_DB_ID=d\0EXACTLY_JOB=j\0EXACTLY_SCHEDULED_AT=s\0EXACTLY_RUN_ID=j-t5\0";
        assert_eq!(firing_of(env, &want()), Some(("s".into(), "j-t5".into())));
    }

    #[test]
    fn an_environment_cut_short_is_not_another_run() {
        // A process that exits or execs while its environment is read leaves the text cut:
        // mid-value, or just before the run id. Neither is a second run of the slot.
        let mid = b"EXACTLY_DB_ID=d\0EXACTLY_JOB=j\0EXACTLY_SCHEDULED_AT=s\0EXACTLY_RUN_ID=j-";
        assert_eq!(firing_of(mid, &want()), None);
        let bare = b"EXACTLY_DB_ID=d\0EXACTLY_JOB=j\0EXACTLY_SCHEDULED_AT=s\0EXACTLY_RUN_ID=";
        assert_eq!(firing_of(bare, &want()), None);
        let before = b"EXACTLY_DB_ID=d\0EXACTLY_JOB=j\0EXACTLY_SCHEDULED_AT=s\0";
        assert_eq!(firing_of(before, &want()), None);
    }
}

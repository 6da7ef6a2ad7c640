//! `spawner-freeze`: the scheduler's `exactly-spawner`s (one per core) frozen (SIGSTOP) while
//! a run's command starts and ends. Its command must run once per slot, and a command that exited 0 must not be
//! recorded `timeout`: the run hears its end from the kernel, not from the frozen spawner.
use super::machine::signal;
use super::proc::{until, Running};
use super::senders::SKEW;
use super::{sh_quote, Harness, Tally};
use crate::{Error, Result};
use indicatif::ProgressBar;
use std::path::Path;
use std::time::{Duration, Instant};

/// `exactly run` with a job whose command takes 2 s under `timeout = "3s"` and `retries`: the
/// scheduler's `exactly-spawner` is SIGSTOPped as the command starts, for longer than the
/// command and its timeout, so the command ends (exit 0) while nobody reaps it. The slot's
/// command must run once (its own side file counts), and a run whose command exited 0 must not
/// be recorded `timeout` (which its retries would run again).
pub(super) fn spawner_freeze(
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
) -> Result<()> {
    let dir = h.dir.join("spawner-freeze");
    std::fs::create_dir_all(&dir)?;
    let side = dir.join("side.txt");
    std::fs::write(&side, "")?;
    let job = format!("freeze-{}", h.nonce());
    let book = sh_quote(&side.to_string_lossy());
    let me = "$EXACTLY_SCHEDULED_AT $EXACTLY_RUN_ID";
    let cmd = format!("echo start {me} >> {book}; sleep 2; echo end {me} $(date +%s.%N) >> {book}");
    let jobs = dir.join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[[job]]\nname = {}\nevery = \"5s\"\nlease = \"2s\"\ntimeout = \"3s\"\n\
             retries = 2\nretry_backoff = \"200ms\"\noverlap = \"coalesce\"\n\
             command = [\"sh\", \"-c\", {}]\n",
            toml_str(&job),
            toml_str(&cmd)
        ),
    )?;
    let mut c = h.exe_command();
    c.env("EXACTLY_MAX_SKEW", SKEW)
        .arg("--db")
        .arg(h.db())
        .arg("run")
        .arg(&jobs)
        .args(["--owner", "chaos-spawner-freeze", "--grace", "10s"]);
    let mut sched = Running::spawn(c)?;
    let mut result = Ok(());
    let mut slots = Vec::new();
    for i in 0..u64::from(n) {
        let label = format!("spawner-freeze #{i}");
        let Some((slot, run_id)) = next_start(&side, &slots, Duration::from_secs(15)) else {
            result = Err(Error::Store(format!("{label}: no run started within 15 s")));
            break;
        };
        slots.push(slot);
        let started = Instant::now();
        // All of them: the command's own is one of the pool.
        let spawners = spawners_of(sched.pid() as i32);
        if spawners.is_empty() {
            result = Err(Error::Store(format!(
                "{label}: the scheduler has no exactly-spawner process"
            )));
            break;
        }
        let stopped = spawners
            .iter()
            .filter(|p| signal(**p, libc::SIGSTOP))
            .count();
        if stopped > 0 {
            t.stop("spawner_sigstop");
        }
        // Past the command's end (2 s) and its timeout (3 s).
        until(started, 3800);
        for p in &spawners {
            signal(*p, libc::SIGCONT);
        }
        match recorded(h, &job, &run_id, Duration::from_secs(10))? {
            Some(outcome) => {
                let ended = std::fs::read_to_string(&side)
                    .unwrap_or_default()
                    .lines()
                    .any(|l| l.starts_with("end ") && l.split(' ').nth(2) == Some(&run_id));
                if ended && outcome == crate::state::RunOutcome::Timeout {
                    t.anomaly(format!(
                        "{label}: run {run_id} exited 0 and was recorded timeout"
                    ));
                }
            }
            None => t.anomaly(format!("{label}: run {run_id} was never recorded")),
        }
        t.iterations += 1;
        bar.inc(1);
    }
    // Time for a retry of the last slot, had its run been recorded failed.
    std::thread::sleep(Duration::from_millis(1500));
    sched.term();
    if !sched.wait_for(Duration::from_secs(20)) {
        sched.kill();
    }
    let said = sched.finish()?;
    let _ = std::fs::write(dir.join("scheduler.log"), &said.stderr);
    // Each slot's command ran once, by its own count.
    let text = std::fs::read_to_string(&side).unwrap_or_default();
    let mut per_slot = std::collections::BTreeMap::<&str, u64>::new();
    for l in text.lines().filter(|l| l.starts_with("start ")) {
        t.job_runs += 1;
        if let Some(slot) = l.split(' ').nth(1) {
            *per_slot.entry(slot).or_default() += 1;
        }
    }
    for (slot, runs) in per_slot.iter().filter(|(_, r)| **r > 1) {
        t.double_runs += runs - 1;
        t.fail(format!(
            "{job}: the slot {slot} ran its command {runs} times"
        ));
    }
    result
}

/// The slot and run id of the first `start` line of a slot not in `seen` (a retry of a seen
/// slot is not a new iteration), waiting up to `within` for one.
fn next_start(side: &Path, seen: &[String], within: Duration) -> Option<(String, String)> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        let text = std::fs::read_to_string(side).unwrap_or_default();
        let fresh = text.lines().find_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            match f[..] {
                ["start", slot, run_id] if !seen.iter().any(|s| s == slot) => {
                    Some((slot.to_string(), run_id.to_string()))
                }
                _ => None,
            }
        });
        if fresh.is_some() {
            return fresh;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The scheduler's `exactly-spawner`: its child of that name.
fn spawners_of(sched: i32) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let found: Vec<i32> = std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                    .filter(|p| {
                        crate::sender::stat(*p)
                            .is_some_and(|s| s.ppid == sched && s.comm == "exactly-spawner")
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !found.is_empty() {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Vec::new()
}

/// The outcome recorded for `run_id`, waiting up to `within` for one.
fn recorded(
    h: &mut Harness,
    job: &str,
    run_id: &str,
    within: Duration,
) -> Result<Option<crate::state::RunOutcome>> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        let runs = crate::jobs::recent_runs(&mut h.store, &crate::JobName::from(job), 20)?;
        if let Some(o) = runs
            .into_iter()
            .find(|r| r.run_id == run_id)
            .and_then(|r| r.outcome)
        {
            return Ok(Some(o));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(None)
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

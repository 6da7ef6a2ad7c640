//! `decide-ahead`: a real `exactly run` SIGKILLed in the second between deciding a slot and the
//! slot itself (see `runner/scheduler/batches.rs`): its lease is claimed, its firing and run
//! recorded, its thread waits for the slot. Each iteration waits for the scheduler to log such
//! a decision, SIGKILLs it at a random moment before the slot, checks that nothing starts at
//! the slot with it dead, and starts the next scheduler, which must run the firing once its
//! lease has expired. The job's command notes its slot and its own start; a watcher scans the
//! process table for two copies of one firing alive at once. At the end every slot ran at most
//! once, none before its slot, and every slot struck ran exactly once.
use super::proc::Running;
use super::sched::Watcher;
use super::{Harness, Tally};
use crate::time::{self, Ts};
use crate::{Error, Result};
use indicatif::ProgressBar;
use rand::Rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

const JOB: &str = "chaos-decide-ahead";
/// How far ahead the schedulers decide (`EXACTLY_DECIDE_AHEAD_MS`): wide, so the strike lands
/// in the window, not at its edge.
const AHEAD_MS: i64 = 1500;
/// How long the end waits for the struck slots to run.
const SETTLE_WAIT: Duration = Duration::from_secs(30);
/// The phrase of the scheduler's log line for a run it won (`scheduler/tick.rs`).
const STARTED: &str = "started run";
const FIRING_AT: &str = "firing at ";

pub(super) fn run(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let base = h.dir.join("decide-ahead");
    std::fs::create_dir_all(&base)?;
    let runs_file = base.join("runs.txt");
    std::fs::write(&runs_file, "")?;
    let jobs_file = base.join("jobs.toml");
    let note = format!(
        "echo \"$EXACTLY_SCHEDULED_AT $(date +%s%N)\" >> {}",
        super::sh_quote(&runs_file.display().to_string())
    );
    std::fs::write(
        &jobs_file,
        format!(
            "[[job]]\nname = \"{JOB}\"\nevery = \"2s\"\nlease = \"1s\"\ntimeout = \"800ms\"\n\
             overlap = \"coalesce\"\ncommand = [\"sh\", \"-c\", {}]\n",
            serde_json::to_string(&note).map_err(|e| Error::Store(e.to_string()))?
        ),
    )?;
    let start = |i: u32| -> Result<Running> {
        let mut cmd = h.exe_command();
        cmd.env("EXACTLY_DECIDE_AHEAD_MS", AHEAD_MS.to_string())
            .env_remove("EXACTLY_FAULT")
            .arg("--db")
            .arg(h.db())
            .arg("run")
            .arg(&jobs_file)
            .args(["--owner", &format!("chaos-ahead-{i}"), "--grace", "5s"]);
        Running::spawn(cmd)
    };
    let watch = Watcher::start(h.db(), JOB);
    let mut struck: Vec<Ts> = Vec::new();
    let mut sched = start(0)?;
    let mut result = Ok(());
    for i in 1..=n {
        match strike(&mut sched, &runs_file, t) {
            Ok(slot) => struck.push(slot),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
        let _ = sched.finish()?;
        sched = start(i)?;
        t.iterations += 1;
        bar.inc(1);
    }
    // The last scheduler runs the struck slots left to it, then stops.
    let deadline = Instant::now() + SETTLE_WAIT;
    while Instant::now() < deadline {
        let noted = notes(&runs_file)?;
        if struck.iter().all(|s| noted.iter().any(|(n, _)| n == s)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    sched.term();
    if !sched.wait_for(Duration::from_secs(20)) {
        t.anomaly("decide-ahead: the scheduler ignored SIGTERM".into());
        sched.kill();
    }
    let ended = sched.finish()?;
    let seen = watch.stop();
    t.overlapping_copies += seen.len() as u64;
    for o in seen.iter().take(5) {
        t.fail(format!(
            "decide-ahead: two runs of one firing alive at once: {o}"
        ));
    }
    if let Err(e) = &result {
        t.fail(format!(
            "decide-ahead: scheduler's last words: {}",
            ended.last_words()
        ));
        t.anomaly(format!("decide-ahead: {e}"));
    }
    count(t, &runs_file, &struck)
}

/// Waits for the scheduler to decide a slot ahead of it, SIGKILLs it at a random moment before
/// that slot, and checks that the slot passes with nothing started. Returns the slot.
fn strike(sched: &mut Running, runs_file: &Path, t: &mut Tally) -> Result<Ts> {
    let slot = loop {
        let Some(line) = sched.wait_line(STARTED)? else {
            return Err(Error::Store(
                "the scheduler ended before deciding a slot ahead".into(),
            ));
        };
        // A slot still ahead: decided early. One already due was decided at its slot.
        if let Some(slot) = slot_of(&line).filter(|s| *s > time::now()) {
            break slot;
        }
    };
    let left = (slot - time::now()).num_milliseconds() - 50;
    if left > 0 {
        let wait = rand::thread_rng().gen_range(0..left as u64);
        std::thread::sleep(Duration::from_millis(wait));
    }
    if time::now() >= slot {
        // Too late to strike in the window (a slow machine): the run may have started.
        return Err(Error::Store(format!(
            "the strike missed the window before {}",
            time::fmt(slot)
        )));
    }
    sched.kill();
    t.kill("scheduler_sigkill_before_slot");
    // The slot passes with its scheduler dead: nothing may start it.
    let past = (slot - time::now()).num_milliseconds() + 300;
    std::thread::sleep(Duration::from_millis(past.max(0) as u64));
    if notes(runs_file)?.iter().any(|(s, _)| *s == slot) {
        t.anomaly(format!(
            "decide-ahead: the slot {} started with its scheduler dead",
            time::fmt(slot)
        ));
    }
    Ok(slot)
}

/// The slot of a scheduler's "… firing at SLOT started run …" line.
fn slot_of(line: &str) -> Option<Ts> {
    let at = line.find(FIRING_AT)? + FIRING_AT.len();
    time::parse(line[at..].split_whitespace().next()?)
}

/// The command's notes: each run's slot and its own start, in ms since the epoch.
fn notes(runs_file: &Path) -> Result<Vec<(Ts, i64)>> {
    Ok(std::fs::read_to_string(runs_file)?
        .lines()
        .filter_map(|l| {
            let (slot, ns) = l.trim().split_once(' ')?;
            Some((time::parse(slot)?, ns.parse::<i64>().ok()? / 1_000_000))
        })
        .collect())
}

/// No slot ran twice or before its time; every struck slot ran once.
fn count(t: &mut Tally, runs_file: &Path, struck: &[Ts]) -> Result<()> {
    let all = notes(runs_file)?;
    t.job_runs += all.len() as u64;
    let mut per_slot: BTreeMap<Ts, u64> = BTreeMap::new();
    for (slot, at) in &all {
        *per_slot.entry(*slot).or_default() += 1;
        let early = slot.timestamp_millis() - at;
        if early > 0 {
            t.started_before_slot += 1;
            t.anomaly(format!(
                "decide-ahead: the slot {} started {early} ms before it",
                time::fmt(*slot)
            ));
        }
    }
    for (slot, runs) in per_slot.iter().filter(|(_, r)| **r > 1) {
        t.double_runs += 1;
        t.anomaly(format!(
            "decide-ahead: the slot {} ran {runs} times",
            time::fmt(*slot)
        ));
    }
    for slot in struck {
        match per_slot.get(slot) {
            Some(1) => t.ahead_resumed += 1,
            Some(_) => {}
            None => t.anomaly(format!(
                "decide-ahead: the struck slot {} never ran",
                time::fmt(*slot)
            )),
        }
    }
    Ok(())
}

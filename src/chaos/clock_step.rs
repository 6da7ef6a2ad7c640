//! `clock-step`: one real `exactly run` whose wall clock is stepped back and forward while it
//! runs, as NTP steps a clock that was fast or slow. libfaketime reads the clock's offset from
//! a file on every call (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE`) and leaves the
//! monotonic clock alone (`FAKETIME_DONT_FAKE_MONOTONIC`), as a real step does.
//!
//! Each iteration steps the clock back (by a further hour each time, so the clock lands where
//! no firing was recorded yet) and checks the job runs again at slots on the new time, then
//! steps it forward to the true time and checks the job runs there too. Throughout, the job's
//! command notes each run's slot, and a watcher scans the process table for two copies of one
//! firing alive at once; at the end no slot may have run twice.
use super::proc::Running;
use super::sched::Watcher;
use super::{Harness, Tally};
use crate::time::{self, Ts};
use crate::{Error, Result};
use indicatif::ProgressBar;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const JOB: &str = "chaos-clock-step";
/// How long a job may stay silent after a step before the scenario calls it silenced.
const SILENCE: Duration = Duration::from_secs(10);

pub(super) fn run(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let base = h.dir.join("clock-step");
    std::fs::create_dir_all(&base)?;
    let offset_file = base.join("offset");
    set_offset(&offset_file, 0)?;
    let runs_file = base.join("runs.txt");
    std::fs::write(&runs_file, "")?;
    let jobs_file = base.join("jobs.toml");
    let note = format!(
        "echo \"$EXACTLY_SCHEDULED_AT\" >> {}",
        super::sh_quote(&runs_file.display().to_string())
    );
    std::fs::write(
        &jobs_file,
        format!(
            "[[job]]\nname = \"{JOB}\"\nevery = \"1s\"\nlease = \"900ms\"\n\
             overlap = \"coalesce\"\ncommand = [\"sh\", \"-c\", {}]\n",
            serde_json::to_string(&note).map_err(|e| Error::Store(e.to_string()))?
        ),
    )?;
    let mut cmd = h.exe_command();
    cmd.env("LD_PRELOAD", super::harness::libfaketime()?)
        .env("FAKETIME_TIMESTAMP_FILE", &offset_file)
        .env("FAKETIME_NO_CACHE", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .arg("--db")
        .arg(h.db())
        .arg("run")
        .arg(&jobs_file)
        .args(["--owner", "chaos-clock-step", "--grace", "10s"]);
    let watch = Watcher::start(h.db(), JOB);
    let mut sched = Running::spawn(cmd)?;
    let result = steps(&mut sched, &offset_file, &runs_file, t, n, bar);
    // Whatever happened: back to the true time, stop the scheduler, count.
    let reset = set_offset(&offset_file, 0);
    sched.term();
    if !sched.wait_for(Duration::from_secs(20)) {
        t.anomaly("clock-step: the scheduler ignored SIGTERM".into());
    }
    let ended = sched.finish()?;
    let seen = watch.stop();
    t.overlapping_copies += seen.len() as u64;
    for o in seen.iter().take(5) {
        t.fail(format!(
            "clock-step: two runs of one firing alive at once: {o}"
        ));
    }
    if let Err(e) = &result {
        t.fail(format!(
            "clock-step: scheduler's last words: {}",
            ended.last_words()
        ));
        t.anomaly(format!("clock-step: {e}"));
    }
    count(h, t, &runs_file)?;
    reset
}

/// The iterations: back, then forward, each followed by runs at slots on the new time.
fn steps(
    sched: &mut Running,
    offset_file: &Path,
    runs_file: &Path,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
) -> Result<()> {
    // The scheduler runs the job on the true time first.
    ran_after(runs_file, time::now() - chrono::Duration::seconds(5), 0, 0)?;
    for i in 1..=i64::from(n) {
        let back = i * 3600;
        let before = slots(runs_file)?.len();
        set_offset(offset_file, -back)?;
        t.clock_step("back");
        if !sched.wait_marker("wall clock stepped back")? {
            return Err(Error::Store(format!(
                "iteration {i}: the scheduler ended after the step back"
            )));
        }
        // A run at a slot on the new time (an hour or more before the true time).
        let new_time = time::now() - chrono::Duration::seconds(back);
        ran_after(
            runs_file,
            new_time - chrono::Duration::seconds(2),
            back,
            before,
        )?;
        let before = slots(runs_file)?.len();
        set_offset(offset_file, 0)?;
        t.clock_step("forward");
        if !sched.wait_marker("wall clock stepped forward")? {
            return Err(Error::Store(format!(
                "iteration {i}: the scheduler ended after the step forward"
            )));
        }
        ran_after(
            runs_file,
            time::now() - chrono::Duration::seconds(2),
            0,
            before,
        )?;
        t.iterations += 1;
        bar.inc(1);
    }
    Ok(())
}

/// Waits for the job to run at a slot after `from` (and no later than `back` seconds before
/// the true time, plus a margin), a run noted after the first `seen` ones: one that ran after
/// the step, not one from before it whose slot happens to fit. Silence past [`SILENCE`] is an
/// error.
fn ran_after(runs_file: &Path, from: Ts, back: i64, seen: usize) -> Result<()> {
    let deadline = Instant::now() + SILENCE;
    loop {
        let slots = slots(runs_file)?;
        let upto = time::now() - chrono::Duration::seconds(back) + chrono::Duration::seconds(5);
        let fresh = slots.get(seen..).unwrap_or_default();
        if fresh.iter().any(|s| *s > from && *s <= upto) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Store(format!(
                "the job ran at no slot after {} within {SILENCE:?} of the clock's step",
                time::fmt(from)
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn slots(runs_file: &Path) -> Result<Vec<Ts>> {
    Ok(std::fs::read_to_string(runs_file)?
        .lines()
        .filter_map(|l| time::parse(l.trim()))
        .collect())
}

/// Writes libfaketime's offset (seconds from the true time) in one rename, so the scheduler
/// never reads half a file.
fn set_offset(file: &Path, secs: i64) -> Result<()> {
    let tmp: PathBuf = file.with_extension("tmp");
    std::fs::write(&tmp, format!("{secs:+}\n"))?;
    std::fs::rename(&tmp, file)?;
    Ok(())
}

/// Runs per slot, from the command's own notes and from the ledger: none may run twice.
fn count(h: &mut Harness, t: &mut Tally, runs_file: &Path) -> Result<()> {
    let mut per_slot: BTreeMap<Ts, u64> = BTreeMap::new();
    let all = slots(runs_file)?;
    t.job_runs += all.len() as u64;
    for s in all {
        *per_slot.entry(s).or_default() += 1;
    }
    for (slot, runs) in per_slot.iter().filter(|(_, r)| **r > 1) {
        t.anomaly(format!(
            "clock-step: the slot {} ran {runs} times",
            time::fmt(*slot)
        ));
    }
    for (runs, firings) in crate::firing::runs_per_firing(&mut h.store, &crate::JobName::from(JOB))?
    {
        let runs = runs.max(0) as u64;
        *t.runs_per_firing.entry(runs).or_default() += firings.max(0) as u64;
        t.max_runs_per_firing = t.max_runs_per_firing.max(runs);
    }
    if t.max_runs_per_firing > 1 {
        t.anomaly(format!(
            "clock-step: a firing ran {} times (its command cannot fail: once)",
            t.max_runs_per_firing
        ));
    }
    Ok(())
}

//! Firings decided ahead of their slot (`scheduler/batches.rs`): claimed and recorded up to
//! `EXACTLY_DECIDE_AHEAD_MS` (a second) before it, so at the slot only the commands' starts
//! remain; never started before it, judged at the slot wherever deciding early could differ,
//! and resumed once by the next scheduler when the one that decided them dies in between.
use crate::support;
use std::collections::HashMap;
use std::time::Duration;
use support::runner::*;

/// Each stamp: (job, slot as the database writes it, the command's own start in ms since the
/// epoch).
fn stamps(site: &Site) -> Vec<(String, String, i64)> {
    site.lines("stamps")
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "a torn stamp line: {l:?}");
            let ns: i64 = f[2].parse().expect("date +%s%N");
            (f[0].to_string(), f[1].to_string(), ns / 1_000_000)
        })
        .collect()
}

/// The slot's instant in ms since the epoch.
fn slot_ms(slot: &str) -> i64 {
    exactly::time::parse(slot)
        .expect("a slot the scheduler wrote")
        .timestamp_millis()
}

/// A job command that stamps its job, its slot and its own start (`tag` keeps jobs' commands
/// apart: one command under two names is linted).
fn stamp_cmd(tag: &str) -> String {
    sh(&format!(
        "echo $EXACTLY_JOB $EXACTLY_SCHEDULED_AT $(date +%s%N) >> stamps # {tag}"
    ))
}

/// A burst due together is claimed and recorded before its slot, and no command starts
/// before it: the firing's row is older than its slot, the run's recorded start is the slot,
/// and each command's own start is at or after it.
#[test]
fn a_burst_is_decided_ahead_and_its_commands_start_at_the_slot_not_before() {
    const JOBS: usize = 20;
    let site = Site::new();
    let mut toml = String::new();
    for j in 0..JOBS {
        let cmd = stamp_cmd(&j.to_string());
        toml.push_str(&format!(
            "[[job]]\nname = \"a{j:02}\"\nevery = \"3s\"\nlease = \"2s\"\ntimeout = \"1s\"\n\
             overlap = \"coalesce\"\ncommand = {cmd}\n\n"
        ));
    }
    site.write_jobs(&toml);
    let mut s = site.start("s", "5s");
    // Two whole bursts after the scheduler's first tick.
    let two = wait_until(Duration::from_secs(30), || {
        let mut by_slot: HashMap<String, usize> = HashMap::new();
        for (_, slot, _) in stamps(&site) {
            *by_slot.entry(slot).or_default() += 1;
        }
        by_slot.values().filter(|n| **n == JOBS).count() >= 2
    });
    assert_eq!(
        s.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("s")
    );
    assert!(two, "no two whole bursts ran: {}", site.log("s"));
    for (job, slot, at) in stamps(&site) {
        assert!(
            at >= slot_ms(&slot),
            "{job}'s command for {slot} started {} ms before its slot",
            slot_ms(&slot) - at
        );
    }
    // Each slot after the first is decided ahead (the first may have come within the
    // scheduler's start).
    let ahead = site.count(
        "SELECT count(*) FROM exactly_firings f JOIN exactly_runs r \
           ON r.job_key = f.job_key AND r.scheduled_at = f.scheduled_at \
         WHERE f.created_at < f.scheduled_at AND r.started_at = f.scheduled_at \
           AND r.outcome = 'ok'",
    );
    assert!(
        ahead >= JOBS as i64,
        "only {ahead} firings were decided ahead of their slot: {}",
        site.log("s")
    );
    assert_eq!(
        site.count("SELECT count(*) FROM exactly_runs WHERE started_at < scheduled_at"),
        0,
        "a run's recorded start is before its slot"
    );
}

/// A run still live a second before its job's next slot, ending before it: the next slot is
/// not decided ahead (the overlap policy would have coalesced it against a run that is gone at
/// the slot), so every slot runs.
#[test]
fn a_run_live_just_before_the_next_slot_does_not_coalesce_it() {
    let site = Site::new();
    let cmd = sh("echo $EXACTLY_JOB $EXACTLY_SCHEDULED_AT $(date +%s%N) >> stamps; sleep 1.4");
    site.write_jobs(&format!(
        "[[job]]\nname = \"slow\"\nevery = \"2s\"\nlease = \"1900ms\"\ntimeout = \"1700ms\"\n\
         overlap = \"coalesce\"\ncommand = {cmd}\n"
    ));
    let mut s = site.start("s", "5s");
    let four = wait_until(Duration::from_secs(30), || stamps(&site).len() >= 4);
    assert_eq!(
        s.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("s")
    );
    assert!(four, "fewer than 4 runs: {}", site.log("s"));
    assert_eq!(
        site.count("SELECT count(*) FROM exactly_firings WHERE state = 'coalesced'"),
        0,
        "a slot was coalesced against a run that ended before it: {}",
        site.log("s")
    );
    // Slots in a row, none left out between the first and the last stamped.
    let mut slots: Vec<i64> = stamps(&site).iter().map(|(_, s, _)| slot_ms(s)).collect();
    slots.sort();
    for w in slots.windows(2) {
        assert_eq!(w[1] - w[0], 2000, "a slot was left out: {slots:?}");
    }
}

/// A scheduler SIGKILLed once it has decided a firing ahead of its slot, before the slot
/// (`EXACTLY_FAULT=hand_off:kill`, in the real code path: right after the decision's commit):
/// nothing starts at the slot with it dead, and the next scheduler runs the firing once.
#[test]
fn a_firing_decided_ahead_by_a_scheduler_killed_before_its_slot_runs_once() {
    let site = Site::new();
    let cmd = stamp_cmd("");
    site.write_jobs(&format!(
        "[[job]]\nname = \"once\"\nevery = \"4s\"\nlease = \"1s\"\ntimeout = \"800ms\"\n\
         overlap = \"coalesce\"\ncommand = {cmd}\n"
    ));
    let mut a = site.start_with_env("a", "5s", &[("EXACTLY_FAULT", "hand_off:kill")]);
    let status = a.wait_status(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| {
            use std::os::unix::process::ExitStatusExt;
            s.signal() == Some(libc::SIGKILL)
        }),
        "the scheduler did not die at its hand-off: {status:?} {}",
        site.log("a")
    );
    let decided = site.strings(
        "SELECT scheduled_at FROM exactly_firings \
         WHERE created_at < scheduled_at AND state = 'running'",
    );
    assert_eq!(decided.len(), 1, "{}", site.log("a"));
    let slot = decided[0].clone();
    // The slot passes with nobody alive to start it.
    let past = slot_ms(&slot) + 300 - epoch_ms() as i64;
    std::thread::sleep(Duration::from_millis(past.max(0) as u64));
    assert!(
        stamps(&site).is_empty(),
        "a command started with its scheduler dead"
    );
    let mut b = site.start("b", "5s");
    let ran = wait_until(Duration::from_secs(30), || {
        stamps(&site).iter().any(|(_, s, _)| *s == slot)
    });
    // Time for a second start of the slot, if there were one.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        b.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("b")
    );
    assert!(ran, "the firing at {slot} never ran: {}", site.log("b"));
    let of_slot = stamps(&site).iter().filter(|(_, s, _)| *s == slot).count();
    assert_eq!(of_slot, 1, "the firing at {slot} ran {of_slot} times");
    assert_eq!(
        site.count(&format!(
            "SELECT count(*) FROM exactly_firings WHERE scheduled_at = '{slot}' AND state = 'ran'"
        )),
        1,
        "{}",
        site.log("b")
    );
}

/// `EXACTLY_DECIDE_AHEAD_MS=0` decides every slot when it falls due, as before.
#[test]
fn deciding_ahead_can_be_switched_off() {
    let site = Site::new();
    let cmd = stamp_cmd("");
    site.write_jobs(&format!(
        "[[job]]\nname = \"due\"\nevery = \"1s\"\nlease = \"800ms\"\ntimeout = \"500ms\"\n\
         overlap = \"coalesce\"\ncommand = {cmd}\n"
    ));
    let mut s = site.start_with_env("s", "5s", &[("EXACTLY_DECIDE_AHEAD_MS", "0")]);
    let three = wait_until(Duration::from_secs(20), || stamps(&site).len() >= 3);
    assert_eq!(
        s.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("s")
    );
    assert!(three, "fewer than 3 runs: {}", site.log("s"));
    assert_eq!(
        site.count("SELECT count(*) FROM exactly_firings WHERE created_at < scheduled_at"),
        0,
        "a firing was decided ahead with deciding ahead off"
    );
}

/// While a run decided ahead of its slot waits for it, the job's last run — in `status` and in
/// `exactly logs` — is still the one that ran, not the one that has not started.
#[test]
fn the_last_run_shown_is_one_that_started_not_one_decided_ahead() {
    let site = Site::new();
    let cmd = sh("echo ran $EXACTLY_SCHEDULED_AT");
    site.write_jobs(&format!(
        "[[job]]\nname = \"shown\"\nevery = \"4s\"\nlease = \"3s\"\ntimeout = \"2s\"\n\
         overlap = \"coalesce\"\ncommand = {cmd}\n"
    ));
    // Three seconds ahead: a run waits for its slot most of the time.
    let mut s = site.start_with_env("s", "5s", &[("EXACTLY_DECIDE_AHEAD_MS", "3000")]);
    let waiting = "SELECT count(*) FROM exactly_runs WHERE ended_at IS NULL \
                   AND started_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+0.5 seconds')";
    let ended = "SELECT count(*) FROM exactly_runs WHERE outcome = 'ok'";
    let both = wait_until(Duration::from_secs(20), || {
        site.count(ended) >= 1 && site.count(waiting) == 1
    });
    let (code, out, err) = site.exactly(&["logs", "shown"]);
    let (_, status, _) = site.exactly(&["status", "--json"]);
    assert_eq!(
        s.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("s")
    );
    assert!(both, "no run ended with another waiting: {}", site.log("s"));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("ran "),
        "logs showed a run that has not started: {out:?} {err}"
    );
    let v: serde_json::Value = serde_json::from_str(&status).expect("status --json");
    let job = v["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|j| j["job_key"] == "shown"))
        .expect("the job in status");
    assert_eq!(job["last_run"]["outcome"], "ok", "{job}");
}

/// A job whose command notes each slot in `NAME.out`, firing `every`.
fn noting_job(name: &str, every: &str) -> String {
    let cmd = sh(&format!("echo $EXACTLY_SCHEDULED_AT >> {name}.out"));
    format!(
        "[[job]]\nname = \"{name}\"\nevery = \"{every}\"\nlease = \"3s\"\ntimeout = \"2s\"\n\
         overlap = \"coalesce\"\ncommand = {cmd}\n\n"
    )
}

/// Waits until `gone` has run and its next run, decided ahead, waits for a slot at least
/// `secs` seconds off; then how many times it ran.
fn gone_waits(site: &Site, secs: u32, log_of: &str) -> usize {
    let waiting = format!(
        "SELECT count(*) FROM exactly_runs WHERE job_key = 'gone' AND ended_at IS NULL \
         AND started_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+{secs} seconds')"
    );
    assert!(
        wait_until(Duration::from_secs(30), || site.exists("gone.out")
            && site.count(&waiting) == 1),
        "gone never ran, then waited for its next slot: {}",
        site.log(log_of)
    );
    site.lines("gone.out").len()
}

/// `gone`'s runs not ended yet.
const GONE_LIVE: &str =
    "SELECT count(*) FROM exactly_runs WHERE job_key = 'gone' AND ended_at IS NULL";

/// `gone`'s waiting run ended while its scheduler ran (`settled`) without its command: still
/// `ran_before` notes, and one run `not_started` whose firing is missed saying the job was
/// removed.
fn gone_withdrawn(site: &Site, ran_before: usize, settled: bool, log_of: &str) {
    let log = site.log(log_of);
    assert!(settled, "gone's waiting run never ended: {log}");
    assert_eq!(
        site.lines("gone.out").len(),
        ran_before,
        "gone's command ran after it was removed: {log}"
    );
    let withdrawn = site.count(
        "SELECT count(*) FROM exactly_runs r JOIN exactly_firings f \
         ON f.job_key = r.job_key AND f.scheduled_at = r.scheduled_at \
         WHERE r.job_key = 'gone' AND r.outcome = 'not_started' AND f.state = 'missed' \
         AND f.detail LIKE '%removed from the jobs file%'",
    );
    assert_eq!(withdrawn, 1, "{log}");
}

/// A job removed from the jobs file (SIGHUP) while its run, decided ahead, waits for its slot:
/// its command never starts, as a slot decided when due would not have fired; the firing is
/// missed and says why, and the jobs that stay go on.
#[test]
fn a_job_removed_while_its_run_waits_for_its_slot_never_starts_it() {
    let site = Site::new();
    site.write_jobs(&format!(
        "{}{}",
        noting_job("gone", "4s"),
        noting_job("stays", "4s")
    ));
    // Three seconds ahead: a run waits for its slot most of the time.
    let mut s = site.start_with_env("s", "5s", &[("EXACTLY_DECIDE_AHEAD_MS", "3000")]);
    let ran_before = gone_waits(&site, 1, "s");
    site.write_jobs(&noting_job("stays", "4s"));
    s.signal(libc::SIGHUP);
    let settled = wait_until(Duration::from_secs(8), || site.count(GONE_LIVE) == 0);
    let stays_before = site.lines("stays.out").len();
    let stays_on = wait_until(Duration::from_secs(10), || {
        site.lines("stays.out").len() > stays_before
    });
    assert_eq!(
        s.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("s")
    );
    assert!(
        site.log("s").contains("removed gone"),
        "no reload: {}",
        site.log("s")
    );
    gone_withdrawn(&site, ran_before, settled, "s");
    assert!(
        stays_on,
        "the job that stayed stopped firing: {}",
        site.log("s")
    );
}

/// The same when a newer scheduler's registration of the file retires the job (a deploy that
/// dropped it): the older scheduler notices within its registry check and its waiting run
/// never starts the command.
#[test]
fn a_job_a_newer_registration_retired_while_its_run_waits_never_starts_it() {
    let site = Site::new();
    site.write_jobs(&format!(
        "{}{}",
        noting_job("gone", "8s"),
        noting_job("stays", "8s")
    ));
    // Six seconds ahead: the registry check (every 2 s) comes while the run waits.
    let ahead = [("EXACTLY_DECIDE_AHEAD_MS", "6000")];
    let mut old = site.start_with_env("old", "5s", &ahead);
    let ran_before = gone_waits(&site, 4, "old");
    site.write_jobs(&noting_job("stays", "8s"));
    let mut new = site.start_with_env("new", "5s", &ahead);
    let settled = wait_until(Duration::from_secs(12), || site.count(GONE_LIVE) == 0);
    assert_eq!(
        new.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("new")
    );
    assert_eq!(
        old.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("old")
    );
    let log = site.log("old");
    assert!(log.contains("retired by the newest registration"), "{log}");
    gone_withdrawn(&site, ran_before, settled, "old");
}

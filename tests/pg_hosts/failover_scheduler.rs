//! The scheduler across a real asynchronous failover, on two real servers (`support::pair`): a
//! job runs every second under `exactly run`, its command writing down the fencing token it was
//! given; the standby is caught up, then held back (the primary's WAL sender SIGSTOPped) while a
//! few more runs commit on the primary alone, then the primary is SIGKILLed and the standby
//! promoted. The scheduler reconnects by itself through the multi-host URL; every token its
//! command was given is above every one given before. (`failover_shown.rs` shows the scheduler's
//! own check with the failover made by hand.)
//!
//! `EXACTLY_TEST_FAILOVER_UNGUARDED=1` runs every process with `EXACTLY_FAILOVER_GUARD=off`: the
//! promoted server hands out again the tokens it lost, the scheduler fences those runs (its own
//! check), and the test fails.
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::pair::Pair;

use crate::support;

/// `exactly --db DB ARGS` to its end, with the guard as the test runs it.
fn ok(db: &str, guard: &str, args: &[&str]) -> String {
    let out = Command::new(support::bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("EXACTLY_DB")
        .env_remove("EXACTLY_FAILOVER_WINDOW")
        .env("EXACTLY_FAILOVER_GUARD", guard)
        .stdin(Stdio::null())
        .output()
        .expect("run exactly");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "exactly {args:?}: {text}");
    text
}

/// The tokens the job's command wrote down, in the order its runs wrote them.
fn tokens(file: &Path) -> Vec<i64> {
    support::read_or_empty(file)
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|e| panic!("{l:?} in {}: {e}", file.display()))
        })
        .collect()
}

/// Waits until the command has written at least `n` tokens, or `within` passes (then the
/// assertions after say what is missing).
fn wait_runs(file: &Path, n: usize, within: Duration) {
    support::poll(Duration::from_millis(100), within, || {
        (tokens(file).len() >= n).then_some(())
    });
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn across_a_real_failover_the_scheduler_runs_under_no_token_at_or_below_one_it_ran_under() {
    let started = Instant::now();
    let guard = if std::env::var_os("EXACTLY_TEST_FAILOVER_UNGUARDED").is_some() {
        "off"
    } else {
        "on"
    };
    let pair = Pair::start().unwrap_or_else(|e| panic!("{e}"));
    let db = pair.url();
    let dir = tempfile::tempdir().expect("tempdir");
    let seen = dir.path().join("tokens");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"3s\"\noverlap = \"coalesce\"\n\
             command = [\"sh\", \"-c\", \"echo $EXACTLY_FENCING_TOKEN >> '{}'\"]\n",
            seen.display()
        ),
    )
    .expect("jobs file");
    ok(&db, guard, &["init"]);
    let log_path = dir.path().join("scheduler.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut sched = Command::new(support::bin())
        .args(["--db", &db, "run"])
        .arg(&jobs)
        .args(["--owner", "sched", "--grace", "2s"])
        .env_remove("EXACTLY_DB")
        .env_remove("EXACTLY_FAILOVER_WINDOW")
        .env("EXACTLY_FAILOVER_GUARD", guard)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("start exactly run");
    // Runs the promoted server will know of.
    wait_runs(&seen, 3, Duration::from_secs(30));
    let replicated = tokens(&seen).len();
    assert!(replicated >= 3, "the job did not run: {:?}", tokens(&seen));
    pair.wait_caught_up().unwrap_or_else(|e| panic!("{e}"));
    pair.hold_stream().unwrap_or_else(|e| panic!("{e}"));
    // Runs acknowledged by the primary alone: lost with it.
    let held = tokens(&seen).len();
    wait_runs(&seen, held + 3, Duration::from_secs(30));
    let lost = tokens(&seen).len();
    assert!(lost >= held + 3, "no run while held: {:?}", tokens(&seen));
    let failover_at = Instant::now();
    pair.fail_over().unwrap_or_else(|e| panic!("{e}"));
    let promoted = tokens(&seen).len();
    // The scheduler finds the promoted server by itself and runs on. Unguarded, the runs under
    // tokens below the highest it saw are stopped by its own check, so this waits for them too.
    wait_runs(&seen, promoted + 4, Duration::from_secs(40));
    let reconnected = failover_at.elapsed();
    // SAFETY: kill(2) on the scheduler this test started.
    unsafe { libc::kill(sched.id() as i32, libc::SIGTERM) };
    let stopped = support::poll(Duration::from_millis(100), Duration::from_secs(15), || {
        sched.try_wait().expect("wait for the scheduler")
    });
    if stopped.is_none() {
        // SAFETY: kill(2) on the process group this test started.
        unsafe { libc::kill(-(sched.id() as i32), libc::SIGKILL) };
        sched.wait().expect("wait for the scheduler");
    }
    let all = tokens(&seen);
    let log = support::read_or_empty(&log_path);
    eprintln!(
        "guard {guard}: tokens {:?} | held back {:?} | after the failover {:?}",
        &all[..held.min(all.len())],
        &all[held.min(all.len())..promoted.min(all.len())],
        &all[promoted.min(all.len())..]
    );
    let back: Vec<_> = all.windows(2).filter(|w| w[1] <= w[0]).collect();
    assert!(
        back.is_empty(),
        "a run under a token not above every earlier one ({back:?}): {all:?}\n{log}"
    );
    assert!(
        all.len() >= promoted + 2,
        "fewer than 2 runs after the failover: {all:?}\n{log}"
    );
    assert!(
        log.contains("the database failed over"),
        "the scheduler did not notice the failover:\n{log}"
    );
    // The guard raised the tokens before any claim: the scheduler was never handed one it had
    // seen (unguarded, its own check fences those runs, and says so).
    assert!(
        !log.contains("the database went back"),
        "handed a token handed out before: {all:?}\n{log}"
    );
    eprintln!(
        "{} runs, {} after the failover ({:.1?} to the fourth); in {:.1?}",
        all.len(),
        all.len() - promoted,
        reconnected,
        started.elapsed()
    );
}

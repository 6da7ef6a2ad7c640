//! Each run's command lives in a cage of its own (a cgroup, or where none can be made an
//! environment cookie): what it starts cannot leave it by `setsid` or `timeout`, so nothing of a
//! run outlives its run, and a frozen scheduler's watchdog ends all of it at the deadline.
use crate::on_both_backends;
use crate::support;
use std::time::{Duration, Instant};
use support::runner::*;

/// A run whose command leaves a `setsid` request behind: it is ended with the run, and never
/// delivers after it.
fn a_leftover_is_ended_with_its_run(site: Site) {
    site.write_jobs(&format!(
        "[[job]]\nname = \"bg\"\nevery = \"2s\"\nlease = \"1m\"\noverlap = \"coalesce\"\n\
         command = {}\n",
        sh("setsid sh -c 'sleep 2; echo late >> far' & echo $EXACTLY_RUN_ID >> ran")
    ));
    let mut s = site.start("s", "1s");
    support::wait_for("the run to end", Duration::from_secs(10), || {
        site.count("SELECT count(*) FROM exactly_runs WHERE ended_at IS NOT NULL") >= 1
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    assert!(
        !site.lines("ran").is_empty(),
        "the run never ran: {}",
        site.log("s")
    );
    assert!(
        site.lines("far").is_empty(),
        "what the run left behind delivered after it ended: {}",
        site.log("s")
    );
}

/// A command that runs its request under `timeout` (a process group of its own) while the
/// scheduler is frozen: the watchdog ends the whole cage at the lease's deadline.
fn a_frozen_scheduler_s_escaped_request_ends_at_the_deadline(site: Site) {
    site.write_jobs(&format!(
        "[[job]]\nname = \"esc\"\nevery = \"2s\"\nlease = \"3s\"\noverlap = \"coalesce\"\n\
         command = {}\n",
        sh("timeout 30 sh -c 'echo $$ > req.pid; sleep 6; echo sent >> far'")
    ));
    let mut s = site.start("s", "1s");
    let req = support::wait_for_some("the request's pid", Duration::from_secs(10), || {
        std::fs::read_to_string(site.path("req.pid"))
            .ok()?
            .trim()
            .parse::<i32>()
            .ok()
    });
    let sched = s.child.id() as i32;
    // SAFETY: freezing the scheduler this test started.
    unsafe { libc::kill(sched, libc::SIGSTOP) };
    let at = Instant::now();
    let stopped = wait_until(Duration::from_secs(8), || !alive(req));
    let took = at.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(sched, libc::SIGCONT) };
    std::thread::sleep(Duration::from_secs(7).saturating_sub(at.elapsed()));
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    eprintln!("request stopped {took:?} after the scheduler froze (lease 3s)");
    assert!(
        stopped && took < Duration::from_millis(3700),
        "the escaped request ran {took:?} past its frozen scheduler: {}",
        site.log("s")
    );
    assert!(
        site.lines("far").is_empty(),
        "the escaped request delivered"
    );
}

on_both_backends! {
    #[test]
    fn a_run_s_setsid_leftover_is_ended_with_the_run() {
        a_leftover_is_ended_with_its_run(Site::new());
    }

    #[test]
    fn a_frozen_scheduler_s_request_under_timeout_is_ended_at_its_deadline() {
        a_frozen_scheduler_s_escaped_request_ends_at_the_deadline(Site::new());
    }
}

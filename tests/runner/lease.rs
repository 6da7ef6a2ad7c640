//! Leases under stress: a run that overruns its lease is stolen, its copy ended and fenced; SIGTERM
//! gives a running command its grace period and a restart does not re-run its firing.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::runner::*;

on_both_backends! {
    #[test]
    fn overrun_is_stolen_and_its_writes_are_fenced() {
        let site = Site::new();
        // Token 1's run overruns: it stalls before its effect. Every run sends the same effect
        // (no slot in its key), so the far side must see it exactly once.
        let cmd = sh(
            "if [ \"$EXACTLY_FENCING_TOKEN\" = 1 ]; then touch started; sleep 3; fi; \
             $X effect --action send --target far -- sh -c 'echo $EXACTLY_FENCING_TOKEN >> \
             far.txt'",
        );
        site.write_jobs(&format!(
            "[[job]]\nname = \"send\"\nevery = \"1s\"\nlease = \"800ms\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut a = site.start("a", "10s");
        assert!(wait_until(Duration::from_secs(5), || site.exists("started")));
        // Freeze a: its lease runs out while its command would keep running.
        a.signal(libc::SIGSTOP);
        let mut b = site.start("b", "10s");
        // b waits until a has been silent for its staleness window before resuming a's firing.
        assert!(
            wait_until(Duration::from_secs(15), || !site.lines("far.txt").is_empty()),
            "b ran the effect after taking the lease over: {}",
            site.log("b")
        );
        a.signal(libc::SIGCONT);
        assert!(
            wait_until(Duration::from_secs(6), || site.count(
                "SELECT count(*) FROM exactly_runs WHERE fencing_token = 1 AND outcome IS NOT NULL"
            ) == 1),
            "the overrun run ended"
        );
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(a.term(Duration::from_secs(10)), Some(0));
        assert_eq!(b.term(Duration::from_secs(10)), Some(0));

        let far = site.lines("far.txt");
        assert_eq!(far.len(), 1, "far side: {far:?}");
        assert_ne!(far[0], "1", "the stale run must not have sent");
        let outcome = site.strings("SELECT outcome FROM exactly_runs WHERE fencing_token = 1");
        assert_eq!(outcome, ["fenced"]);
        assert!(site.counter("lease_stolen") >= 1);
        assert!(site.counter("run_fenced") >= 1);
        // a's command was stopped by its watchdog at the lease's deadline while a was frozen,
        // before b could take the job: never two copies of one firing at once. The stale run's
        // writes (its lease renewal) were refused and counted.
        assert!(
            site.log("a").contains("its watchdog stopped the command"),
            "a's command outlived its lease: {}",
            site.log("a")
        );
        let refused = site.count(
            "SELECT count(*) FROM exactly_events WHERE kind = 'run_fenced' AND fencing_token = 1",
        );
        assert!(refused >= 1, "the stale run was fenced");
        assert!(
            site.counter("duplicate_suppressed") >= 1,
            "later runs found it done"
        );
        eprintln!(
            "overrun: far side {far:?}, {} fenced writes, {} duplicates suppressed",
            site.counter("fenced_write"),
            site.counter("duplicate_suppressed")
        );
    }

    #[test]
    fn sigterm_waits_for_the_run_and_restart_does_not_rerun_it() {
        let site = Site::new();
        let cmd = sh("touch started.$EXACTLY_FENCING_TOKEN; sleep 1.5; \
             $X effect --action append --target far --input slot=$EXACTLY_SCHEDULED_AT \
             -- sh -c 'echo $EXACTLY_SCHEDULED_AT >> far.txt'");
        site.write_jobs(&format!(
            "[[job]]\nname = \"slow\"\nevery = \"2s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut s = site.start("s1", "10s");
        assert!(wait_until(Duration::from_secs(5), || site.exists("started.1")));
        let t = std::time::Instant::now();
        assert_eq!(
            s.term(Duration::from_secs(10)),
            Some(0),
            "exit 0 after the grace wait"
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(
            site.strings("SELECT outcome FROM exactly_runs WHERE fencing_token = 1"),
            ["ok"]
        );
        assert_eq!(
            site.lines("far.txt").len(),
            1,
            "the run finished its effect"
        );
        assert_eq!(
            site.strings("SELECT lease_until FROM job_lease"),
            ["1970-01-01T00:00:00.000Z"],
            "the lease was released"
        );
        let first = site.strings("SELECT scheduled_at FROM exactly_runs WHERE fencing_token = 1");

        let mut s = site.start("s2", "10s");
        assert!(wait_until(Duration::from_secs(6), || site.exists("started.2")));
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        let far = site.lines("far.txt");
        // Sorted first: `dedup` only drops neighbours, so "a, b, a" would pass unsorted.
        let mut distinct = far.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), far.len(), "an effect landed twice: {far:?}");
        assert_eq!(
            site.count(&format!(
                "SELECT count(*) FROM exactly_runs WHERE scheduled_at = '{}'",
                first[0]
            )),
            1,
            "the finished firing was not re-run"
        );
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE outcome <> 'ok'"),
            0
        );
    }

    #[test]
    fn grace_expired_kills_the_command_and_still_exits_0() {
        let site = Site::new();
        site.write_jobs(&format!(
            "[[job]]\nname = \"stuck\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh("touch started; sleep 30")
        ));
        let mut s = site.start("s", "300ms");
        assert!(wait_until(Duration::from_secs(5), || site.exists("started")));
        assert_eq!(s.term(Duration::from_secs(8)), Some(0));
        assert_eq!(site.strings("SELECT outcome FROM exactly_runs"), ["killed"]);
        assert_eq!(site.counter("run_killed"), 1);
        assert_eq!(
            site.strings("SELECT lease_until FROM job_lease"),
            ["1970-01-01T00:00:00.000Z"]
        );
    }
}

//! The scheduler under real faults (issue 10): a hang-up (a reload) and a stop, a slow or hung
//! observer, a command that kills its own scheduler, a database held locked while a run ends, a
//! retried effect of an old firing. A firing runs once at a time and at most three times, whatever
//! dies or hangs.
use crate::on_both_backends;
use crate::support;
use std::time::{Duration, Instant};
use support::runner::*;
use support::{effect_args, strs};

const RELEASED: &str = "1970-01-01T00:00:00.000Z";

/// The most runs any one firing of the database got.
fn max_runs_per_firing(site: &Site) -> i64 {
    site.count(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM exactly_runs
           GROUP BY job_key, scheduled_at) AS per_firing",
    )
}

on_both_backends! {
    #[test]
    fn sighup_reloads_and_sigterm_stops_the_scheduler_gracefully_and_its_command_with_it() {
        let site = Site::new();
        // The command's own child shares its process group: both must go.
        let cmd = sh("echo $$ > pid; sleep 30 & echo $! > child; wait");
        site.write_jobs(&format!(
            "[[job]]\nname = \"hup\"\nevery = \"2s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut s = site.start("s", "300ms");
        assert!(
            wait_until(Duration::from_secs(8), || site.exists("child")),
            "{}",
            site.log("s")
        );
        let (pid, child) = (pid_in(&site, "pid"), pid_in(&site, "child"));
        // A hang-up reloads the jobs file (as daemons do): the scheduler and its run go on.
        s.signal(libc::SIGHUP);
        assert!(
            wait_until(Duration::from_secs(5), || site.log("s").contains("reloaded")),
            "{}",
            site.log("s")
        );
        assert!(s.child.try_wait().expect("try_wait").is_none(), "SIGHUP stopped it");
        assert!(alive(pid) && alive(child), "SIGHUP disturbed the run in progress");
        s.signal(libc::SIGTERM);
        assert_eq!(
            s.wait(Duration::from_secs(10)),
            Some(0),
            "SIGTERM is a graceful stop: {}",
            site.log("s")
        );
        assert!(
            wait_until(Duration::from_secs(3), || !alive(pid) && !alive(child)),
            "the command outlived its scheduler (pids {pid}, {child})"
        );
        assert_eq!(site.strings("SELECT outcome FROM exactly_runs"), ["killed"]);
        assert_eq!(
            site.strings("SELECT lease_until FROM job_lease"),
            [RELEASED],
            "the lease was released"
        );
    }

    #[test]
    fn a_resumed_firing_never_overlaps_a_copy_left_by_a_killed_scheduler() {
        let site = Site::new();
        // Each copy notes its long-lived child; a copy that finds an earlier one alive (running,
        // not a zombie waiting to be reaped) records an overlap.
        let cmd = sh(
            "for p in $(cat pids.$EXACTLY_SCHEDULED_AT 2>/dev/null); do \
               kill -0 $p 2>/dev/null && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null \
               && echo \"$p\" >> overlaps; done; \
             echo $EXACTLY_RUN_ID > run; sleep 30 & echo $! >> pids.$EXACTLY_SCHEDULED_AT; wait",
        );
        site.write_jobs(&format!(
            "[[job]]\nname = \"long\"\nevery = \"3s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut a = site.start("a", "5s");
        assert!(
            wait_until(Duration::from_secs(8), || site.exists("run")),
            "{}",
            site.log("a")
        );
        let old_run = std::fs::read_to_string(site.path("run"))
            .expect("run file")
            .trim()
            .to_string();
        let slot = site.strings(&format!(
            "SELECT scheduled_at FROM exactly_runs WHERE run_id = '{old_run}'"
        ))[0]
            .clone();
        // The scheduler dies at once; nothing else of its machine does.
        a.kill9();
        let mut b = site.start("b", "300ms");
        assert!(
            wait_until(Duration::from_secs(10), || site.count(&format!(
                "SELECT count(*) FROM exactly_runs WHERE scheduled_at = '{slot}'"
            )) >= 2),
            "the interrupted firing was not resumed: {}",
            site.log("b")
        );
        // The interrupted firing goes before any later slot of the job: a later slot that took
        // the free lease first would leave it waiting behind every slot after (coalesce).
        let log = site.log("b");
        let first = log.lines().find(|l| l.contains(" started run "));
        assert!(
            first.is_some_and(|l| l.contains(&format!("at {slot} started run"))),
            "a later slot started before the interrupted firing was resumed: {log}"
        );
        // The resumed run's row is written before it ends the old copies; its command starts only
        // after. Once that command has started (it rewrote `run`), no old copy may be alive.
        assert!(
            wait_until(Duration::from_secs(10), || std::fs::read_to_string(
                site.path("run")
            )
            .is_ok_and(|r| !r.trim().is_empty() && r.trim() != old_run)),
            "the resumed run's command did not start: {}",
            site.log("b")
        );
        assert!(
            site.procs_with_env("EXACTLY_RUN_ID", &old_run).is_empty(),
            "a copy of run {old_run} is still alive while its firing runs again: {}",
            site.log("b")
        );
        assert_eq!(
            b.term(Duration::from_secs(10)),
            Some(0),
            "{}",
            site.log("b")
        );
        assert!(
            !site.exists("overlaps"),
            "two copies of one firing ran at once: {:?}",
            site.lines("overlaps")
        );
    }

    #[test]
    fn a_command_that_kills_its_scheduler_runs_at_most_three_times() {
        let site = Site::new();
        // Its scheduler is its parent, or its spawner's (src/runner/spawn/spawner/).
        let cmd = sh(
            "echo $EXACTLY_SCHEDULED_AT >> runs.txt; p=$PPID; \
             [ \"$(cat /proc/$p/comm)\" = exactly-spawner ] && p=$(cut -d' ' -f4 /proc/$p/stat); \
             kill -9 $p; sleep 1",
        );
        site.write_jobs(&format!(
            "[[job]]\nname = \"killer\"\nevery = \"50y\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        // Register the job, then fire it by hand: the command kills `exactly trigger`.
        let mut s = site.start("reg", "1s");
        assert!(wait_until(Duration::from_secs(5), || site
            .log("reg")
            .contains("started with")));
        assert_eq!(s.term(Duration::from_secs(5)), Some(0));
        let (code, _, err) = site.exactly(&["trigger", "killer"]);
        assert_eq!(code, -1, "the command killed its trigger: {err}");
        // Six schedulers in a row, each killed by the resumed command (or left idle).
        for i in 0..6 {
            let owner = format!("s{i}");
            let mut s = site.start(&owner, "1s");
            if s.wait_status(Duration::from_secs(4)).is_none() {
                assert_eq!(
                    s.term(Duration::from_secs(5)),
                    Some(0),
                    "{}",
                    site.log(&owner)
                );
            }
        }
        let runs = site.lines("runs.txt");
        assert!(!runs.is_empty());
        assert!(
            runs.iter().filter(|r| *r == &runs[0]).count() <= 3,
            "one firing ran {} times: {runs:?}",
            runs.len()
        );
        assert!(max_runs_per_firing(&site) <= 3);
        assert_eq!(
            site.strings("SELECT state FROM exactly_firings"),
            ["gave_up"],
            "the firing ends gave_up"
        );
        assert_eq!(site.counter("firing_gave_up"), 1, "a loud event");
        let (_, status, _) = site.exactly(&["status", "--json"]);
        assert!(status.contains("gave up"), "status warns: {status}");
    }

    #[test]
    fn a_slow_observer_keeps_its_lease_and_its_firing_runs_once() {
        let site = Site::new();
        // An earlier attempt left an effect unknown; its observer takes 3 s to say "can't tell".
        let token = site.claim("pay", "1s");
        let effect = effect_args("pay", token, "pay", "far").observe("sleep 3; exit 2");
        let (code, _, err) = site.exactly(&strs(&effect.sh("exit 9")));
        assert_eq!(code, 6, "{err}");
        let key = site.strings("SELECT effect_key FROM effect_ledger")[0].clone();
        site.write_jobs(&format!(
            "[[job]]\nname = \"pay\"\nevery = \"5s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh("echo $EXACTLY_SCHEDULED_AT >> ran.txt")
        ));
        let mut s = site.start("s", "1s");
        // Watch for 12 s: never two observers of the effect at once.
        let mut most = 0;
        let until = Instant::now() + Duration::from_secs(12);
        while Instant::now() < until {
            most = most.max(roots(&site.procs_with_env("EXACTLY_EFFECT_KEY", &key)).len());
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(
            s.term(Duration::from_secs(10)),
            Some(0),
            "{}",
            site.log("s")
        );
        assert!(most <= 1, "{most} observers of one effect alive at once");
        assert!(
            !site.lines("ran.txt").is_empty(),
            "the command never ran: {}",
            site.log("s")
        );
        assert_eq!(
            max_runs_per_firing(&site),
            1,
            "a live firing was resumed by its own scheduler: {}",
            site.log("s")
        );
        let ran = site.lines("ran.txt");
        let mut uniq = ran.clone();
        uniq.dedup();
        assert_eq!(uniq, ran, "one firing's command ran twice");
    }

    #[test]
    fn a_hung_observer_is_cut_off_by_observe_timeout_and_by_shutdown() {
        let site = Site::new();
        let token = site.claim("pay", "1s");
        let effect = effect_args("pay", token, "pay", "far").observe("sleep 60");
        let (code, _, err) = site.exactly(&strs(&effect.sh("exit 9")));
        assert_eq!(code, 6, "{err}");
        let key = site.strings("SELECT effect_key FROM effect_ledger")[0].clone();
        // No observe_timeout (the default is long): SIGTERM with a short grace still stops at once.
        site.write_jobs(&format!(
            "[[job]]\nname = \"pay\"\nevery = \"2s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh("touch ran")
        ));
        let mut s = site.start("s", "1s");
        assert!(
            wait_until(Duration::from_secs(6), || !site.procs_with_env(
                "EXACTLY_EFFECT_KEY",
                &key
            )
            .is_empty()),
            "{}",
            site.log("s")
        );
        let t = Instant::now();
        assert_eq!(
            s.term(Duration::from_secs(20)),
            Some(0),
            "{}",
            site.log("s")
        );
        assert!(
            t.elapsed() < Duration::from_secs(6),
            "shutdown waited {:?} for a hung observer",
            t.elapsed()
        );
        assert!(
            wait_until(Duration::from_secs(2), || site.procs_with_env(
                "EXACTLY_EFFECT_KEY",
                &key
            )
            .is_empty()),
            "the observer outlived its scheduler"
        );
        // With observe_timeout = "1s" the observer is "can't tell" after a second and the run goes
        // on to its command.
        site.write_jobs(&format!(
            "[[job]]\nname = \"pay\"\nevery = \"2s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             observe_timeout = \"1s\"\ncommand = {}\n",
            sh("touch ran")
        ));
        let mut s = site.start("s2", "1s");
        assert!(
            wait_until(Duration::from_secs(8), || site.exists("ran")),
            "the command never ran after a timed-out observer: {}",
            site.log("s2")
        );
        assert_eq!(
            s.term(Duration::from_secs(10)),
            Some(0),
            "{}",
            site.log("s2")
        );
        assert_eq!(
            site.strings("SELECT state FROM effect_ledger"),
            ["unknown"],
            "a timed-out observer settles nothing"
        );
        assert!(
            site.log("s2").contains("observer timed out"),
            "{}",
            site.log("s2")
        );
    }

    #[test]
    fn a_retry_of_a_firing_older_than_a_day_still_goes_out() {
        let site = Site::new();
        let far = site.path("far.txt").to_string_lossy().into_owned();
        std::fs::write(&far, "").expect("far file");
        let send = format!("echo \"$EXACTLY_EFFECT_KEY $EXACTLY_SCHEDULED_AT\" >> {far}");
        // The first attempt ever loses its request: the effect is unknown until an observer finds
        // it never arrived.
        let cmd = losing_first(&receipt_observer(&far), "exit 9", &send);
        site.write_jobs(&format!(
            "[[job]]\nname = \"daily\"\nevery = \"24h\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut s = site.start("reg", "1s");
        assert!(wait_until(Duration::from_secs(5), || site
            .log("reg")
            .contains("started with")));
        assert_eq!(s.term(Duration::from_secs(5)), Some(0));
        let day = (chrono::Utc::now() - chrono::Duration::days(2))
            .format("%Y-%m-%dT00:00:00Z")
            .to_string();
        let slot = format!("{}.000Z", &day[..19]);
        let (code, out, err) = site.exactly(&["backfill", "daily", "--from", &day, "--to", &day]);
        assert_eq!(code, 1, "the lost effect fails the run: {out}{err}");
        // A manual run observes the lost effect: "did not happen", its firing is marked for retry.
        let (code, out, err) = site.exactly(&["trigger", "daily"]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(
            site.strings(&format!(
                "SELECT state FROM exactly_firings WHERE scheduled_at = '{slot}'"
            )),
            ["retry"]
        );
        let (_, status, _) = site.exactly(&["status", "--json"]);
        assert!(status.contains("to run again"), "status shows it: {status}");
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || site
                .lines("far.txt")
                .iter()
                .any(|l| l.ends_with(&slot))),
            "the retried effect of a two-day-old firing never went out: {}",
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        assert_eq!(
            site.lines("far.txt")
                .iter()
                .filter(|l| l.ends_with(&slot))
                .count(),
            1
        );
        assert_eq!(
            site.count("SELECT count(*) FROM effect_ledger WHERE state <> 'done'"),
            0
        );
    }

    /// A scheduler's own run is live whatever the lease row says: when its heartbeat is held up
    /// past the lease and the skew margin (`EXACTLY_FAULT=heartbeat:pause=3s`, a fault point in the
    /// real renewal path), the next due firing of the job still meets the overlap policy
    /// (coalesced) instead of starting a second copy beside the live run.
    #[test]
    fn a_lapsed_lease_stops_its_command_before_a_second_copy_starts() {
        let site = Site::new();
        // Each copy says when it starts and when it is stopped (SIGTERM to its group).
        let cmd = sh("trap 'echo stop $EXACTLY_FENCING_TOKEN >> ran.txt; exit 143' TERM; \
             echo start $EXACTLY_FENCING_TOKEN >> ran.txt; sleep 5 & wait; echo end >> ran.txt");
        site.write_jobs(&format!(
            "[[job]]\nname = \"slow\"\nevery = \"1s\"\nlease = \"500ms\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        assert_eq!(site.exactly(&["init"]).0, 0);
        // The heartbeat stalls for 3 s: the lease lapses under the live command.
        let mut s = site.start_with_env("s", "5s", &[("EXACTLY_FAULT", "heartbeat:pause=3s")]);
        assert!(
            wait_until(Duration::from_secs(8), || site
                .lines("ran.txt")
                .iter()
                .any(|l| l.starts_with("stop"))),
            "the command outlived its lease: {}",
            site.log("s")
        );
        std::thread::sleep(Duration::from_millis(2000));
        assert_eq!(
            s.term(Duration::from_secs(15)),
            Some(0),
            "{}",
            site.log("s")
        );
        // Never two copies at once: every start follows the stop (or end) of the one before.
        let lines = site.lines("ran.txt");
        let mut open = 0;
        for l in &lines {
            if l.starts_with("start") {
                open += 1;
                assert_eq!(open, 1, "two copies alive at once: {lines:?}");
            } else {
                open -= 1;
            }
        }
        assert!(
            site.log("s").contains("not renewed by its local deadline"),
            "{}",
            site.log("s")
        );
        assert_eq!(
            site.strings("SELECT outcome FROM exactly_runs WHERE fencing_token = 1"),
            ["killed"]
        );
    }
}

// SQLite only: a SQLite write lock (BEGIN IMMEDIATE) held across a run's end, and the busy
// timeout.

#[test]
fn a_run_whose_end_meets_a_locked_database_is_recorded_ok_and_not_rerun() {
    let site = Site::new();
    let cmd = sh(
        "echo $EXACTLY_SCHEDULED_AT >> ran.txt; touch finishing.$EXACTLY_FENCING_TOKEN; sleep 0.3",
    );
    site.write_jobs(&format!(
        "[[job]]\nname = \"end\"\nevery = \"5s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
         command = {cmd}\n"
    ));
    assert_eq!(site.exactly(&["init"]).0, 0);
    let mut s = site.start_with_env("s", "5s", &[("EXACTLY_BUSY_TIMEOUT_MS", "200")]);
    assert!(
        wait_until(Duration::from_secs(8), || site.exists("finishing.1")),
        "{}",
        site.log("s")
    );
    // Another process holds the write lock for 3 s, across the run's end and its lease.
    let c = site.conn();
    c.execute_batch("BEGIN IMMEDIATE").expect("lock");
    std::thread::sleep(Duration::from_secs(3));
    c.execute_batch("COMMIT").expect("unlock");
    drop(c);
    assert!(
        wait_until(Duration::from_secs(8), || site.count(
            "SELECT count(*) FROM exactly_runs WHERE fencing_token = 1 AND ended_at IS NOT NULL"
        ) == 1),
        "{}",
        site.log("s")
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    assert_eq!(
        site.strings("SELECT outcome FROM exactly_runs WHERE fencing_token = 1"),
        ["ok"],
        "{}",
        site.log("s")
    );
    let ran = site.lines("ran.txt");
    let mut uniq = ran.clone();
    uniq.dedup();
    assert_eq!(
        uniq,
        ran,
        "a run that exited 0 ran again: {}",
        site.log("s")
    );
    assert_eq!(max_runs_per_firing(&site), 1);
}

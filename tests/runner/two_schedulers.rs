//! Two `exactly run` processes on one jobs file and one database, a 1-second job, one of them
//! SIGKILLed mid-run and restarted: each firing runs once, each effect lands once.
use crate::on_both_backends;
use crate::support;
use std::collections::BTreeMap;
use std::time::Duration;
use support::runner::*;

on_both_backends! {
    #[test]
    fn two_schedulers_one_killed_each_firing_runs_once() {
        let site = Site::new();
        // The effect is keyed by the slot (a fact), and appends the slot to the far side.
        let cmd = sh(
            "sleep 0.3; $X effect --action append --target far --input slot=$EXACTLY_SCHEDULED_AT \
             -- sh -c 'echo $EXACTLY_SCHEDULED_AT >> far.txt'",
        );
        site.write_jobs(&format!(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"800ms\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        // The database exists before the deploy, as it does after any first start.
        assert_eq!(site.exactly(&["init"]).0, 0);
        let mut a = site.start("a", "5s");
        let mut b = site.start("b", "5s");
        std::thread::sleep(Duration::from_millis(3500));
        // Kill `a` while it holds a live run, if it gets one soon; otherwise at once.
        let killed_mid_run = wait_until(Duration::from_secs(3), || {
            site.count("SELECT count(*) FROM exactly_runs WHERE owner = 'a' AND ended_at IS NULL")
                > 0
        });
        a.kill9();
        // Past the dead scheduler's lease (800 ms) and the clock-skew margin (2 s): `b` alone takes
        // over before `a2` starts.
        std::thread::sleep(Duration::from_millis(3500));
        let mut a2 = site.start("a2", "5s");
        std::thread::sleep(Duration::from_millis(7000));
        assert_eq!(
            b.term(Duration::from_secs(10)),
            Some(0),
            "b exits 0 on SIGTERM: {}",
            site.log("b")
        );
        assert_eq!(
            a2.term(Duration::from_secs(10)),
            Some(0),
            "a2 exits 0 on SIGTERM: {}",
            site.log("a2")
        );
        // The killed scheduler's orphaned command may still be finishing.
        std::thread::sleep(Duration::from_millis(800));

        if std::env::var("SHOW_LOGS").is_ok() {
            for o in ["a", "b", "a2"] {
                eprintln!("--- {o}\n{}", site.log(o));
            }
        }
        let far = site.lines("far.txt");
        let mut per_slot: BTreeMap<&str, usize> = BTreeMap::new();
        for l in &far {
            *per_slot.entry(l.as_str()).or_default() += 1;
        }
        let doubled: Vec<_> = per_slot.iter().filter(|(_, n)| **n > 1).collect();
        assert!(doubled.is_empty(), "effects landed twice: {doubled:?}");
        assert!(far.len() >= 6, "too few firings ran: {far:?}");
        // A firing runs once; only one whose run died with its scheduler is resumed, and then
        // its effect still lands once (checked above).
        let runs_twice = site.count(
            "SELECT count(*) FROM (SELECT scheduled_at FROM exactly_runs
               WHERE outcome IS DISTINCT FROM 'killed' GROUP BY scheduled_at HAVING count(*) > 1) \
               AS twice",
        );
        assert_eq!(runs_twice, 0, "a firing ran twice");
        let resumed = site.count(
            "SELECT count(*) FROM (SELECT scheduled_at FROM exactly_runs GROUP BY scheduled_at \
             HAVING count(*) > 1) AS twice",
        );
        assert!(
            resumed <= site.counter("firing_resumed"),
            "a second run of a slot that was not a resumption"
        );
        let done = site.count("SELECT count(*) FROM effect_ledger WHERE state = 'done'");
        assert_eq!(done as usize, far.len(), "ledger and far side disagree");
        // The schedulers of one file share its jobs (`runner::scheduler::share`), so they no
        // longer fire every slot twice: duplicates come only while `a` is dead but not yet called
        // dead, when `b` and `a2` both fire its job's slots (the safety net) and the loser
        // records one.
        if killed_mid_run {
            // Its lease outlived it; the survivors took it over with a higher token.
            assert!(
                site.counter("lease_stolen") >= 1,
                "the dead scheduler's lease was taken over"
            );
        }
        let owners = site.strings("SELECT DISTINCT owner FROM exactly_runs ORDER BY owner");
        assert!(owners.contains(&"b".to_string()), "{owners:?}");
        eprintln!(
            "two schedulers: {} effects, {} runs, {} duplicate firings, {} leases stolen, owners \
             {owners:?}",
            far.len(),
            site.count("SELECT count(*) FROM exactly_runs"),
            site.counter("firing_duplicate"),
            site.counter("lease_stolen")
        );
    }
}

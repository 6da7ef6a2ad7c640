//! A firing whose run died with its machine, or whose effect an observer found never happened,
//! is fired again for the same slot, so an effect keyed by the slot goes out exactly once.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::runner::*;

fn effect(far: &str, body: &str) -> String {
    slot_effect(&receipt_observer(far), body)
}

on_both_backends! {
    #[test]
    fn a_run_killed_with_its_machine_is_resumed_and_its_effect_lands_once() {
        let site = Site::new();
        let far = site.path("far.txt").to_string_lossy().into_owned();
        let send = format!("echo \"$EXACTLY_EFFECT_KEY $EXACTLY_SCHEDULED_AT\" >> {far}");
        let cmd = sh(&format!("echo $$ > pid; sleep 1; {}", effect(&far, &send)));
        site.write_jobs(&format!(
            "[[job]]\nname = \"pay\"\nevery = \"3s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        assert_eq!(site.exactly(&["init"]).0, 0);
        let mut a = site.start("a", "5s");
        assert!(
            wait_until(Duration::from_secs(8), || site.exists("pid")
                && site.count(
                    "SELECT count(*) FROM exactly_runs WHERE ended_at IS NULL"
                ) > 0),
            "no run started: {}",
            site.log("a")
        );
        let slot =
            site.strings("SELECT scheduled_at FROM exactly_runs WHERE ended_at IS NULL")[0].clone();
        // The machine dies: the scheduler and its run's whole process group, before the send.
        a.kill9();
        let pid: i32 = std::fs::read_to_string(site.path("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // SAFETY: signalling the process group of our own test's job.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let mut b = site.start("b", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || site
                .lines("far.txt")
                .iter()
                .any(|l| l.ends_with(&slot))),
            "the interrupted firing's effect never went out: {}",
            site.log("b")
        );
        assert_eq!(
            b.term(Duration::from_secs(10)),
            Some(0),
            "{}",
            site.log("b")
        );
        let far_lines = site.lines("far.txt");
        assert_eq!(
            far_lines.iter().filter(|l| l.ends_with(&slot)).count(),
            1,
            "{far_lines:?}"
        );
        assert!(site.counter("firing_resumed") >= 1);
        assert_eq!(
            site.count("SELECT count(*) FROM effect_ledger WHERE state <> 'done'"),
            0
        );
        let mut seen = std::collections::HashSet::new();
        assert!(
            far_lines.iter().all(|l| seen.insert(l.clone())),
            "an effect landed twice: {far_lines:?}"
        );
    }

    #[test]
    fn an_effect_that_never_happened_goes_out_with_a_rerun_of_its_firing() {
        let site = Site::new();
        let far = site.path("far.txt").to_string_lossy().into_owned();
        std::fs::write(&far, "").unwrap();
        let send = format!("echo \"$EXACTLY_EFFECT_KEY $EXACTLY_SCHEDULED_AT\" >> {far}");
        // The first attempt loses its request (exit 9 without sending): the effect is unknown
        // until the next run's observer finds it never arrived.
        let cmd = losing_first(&receipt_observer(&far), "exit 9", &send);
        site.write_jobs(&format!(
            "[[job]]\nname = \"pay\"\nevery = \"1s\"\nlease = \"800ms\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut a = site.start("a", "5s");
        assert!(
            wait_until(Duration::from_secs(6), || site.exists("lost")),
            "{}",
            site.log("a")
        );
        let lost = std::fs::read_to_string(site.path("lost"))
            .unwrap()
            .trim()
            .to_string();
        assert!(
            wait_until(Duration::from_secs(10), || site
                .lines("far.txt")
                .iter()
                .any(|l| l.ends_with(&lost))),
            "the lost effect was never re-sent: {}",
            site.log("a")
        );
        assert_eq!(a.term(Duration::from_secs(10)), Some(0));
        let far_lines = site.lines("far.txt");
        assert_eq!(
            far_lines.iter().filter(|l| l.ends_with(&lost)).count(),
            1,
            "{far_lines:?}"
        );
        assert!(site.counter("firing_resumed") >= 1);
        assert!(site.counter("observer_verdict") >= 1);
        let mut seen = std::collections::HashSet::new();
        assert!(
            far_lines.iter().all(|l| seen.insert(l.clone())),
            "an effect landed twice: {far_lines:?}"
        );
    }

    #[test]
    fn a_run_killed_at_a_deploy_is_resumed_by_the_next_scheduler() {
        let site = Site::new();
        let far = site.path("far.txt").to_string_lossy().into_owned();
        let send = format!("echo \"$EXACTLY_EFFECT_KEY $EXACTLY_SCHEDULED_AT\" >> {far}");
        // The first run hangs before its effect and is killed when the deploy's grace runs out.
        let cmd = sh(&format!(
            "if [ ! -e started ]; then echo $EXACTLY_SCHEDULED_AT > started; sleep 30; fi; {}",
            effect(&far, &send)
        ));
        site.write_jobs(&format!(
            "[[job]]\nname = \"pay\"\nevery = \"2s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut old = site.start("old", "200ms");
        assert!(
            wait_until(Duration::from_secs(6), || site.exists("started")),
            "{}",
            site.log("old")
        );
        assert_eq!(old.term(Duration::from_secs(8)), Some(0));
        let slot = std::fs::read_to_string(site.path("started"))
            .unwrap()
            .trim()
            .to_string();
        assert_eq!(site.strings("SELECT outcome FROM exactly_runs"), ["killed"]);
        let mut new = site.start("new", "5s");
        assert!(
            wait_until(Duration::from_secs(8), || site
                .lines("far.txt")
                .iter()
                .any(|l| l.ends_with(&slot))),
            "the killed firing never ran again: {}",
            site.log("new")
        );
        assert_eq!(new.term(Duration::from_secs(8)), Some(0));
        let far_lines = site.lines("far.txt");
        assert_eq!(
            far_lines.iter().filter(|l| l.ends_with(&slot)).count(),
            1,
            "{far_lines:?}"
        );
        assert!(site.counter("firing_resumed") >= 1);
    }

    #[test]
    fn an_observer_run_by_the_scheduler_looks_where_its_command_ran() {
        let site = Site::new();
        // A receipt per effect key, in a folder relative to the job's own: the observer asks
        // "is my receipt there?" where the command left it. The first attempt sends, then loses
        // the response (exit 9): unknown, until the next run's observer looks.
        let send = "mkdir -p receipts; touch receipts/$EXACTLY_EFFECT_KEY; \
                    echo $EXACTLY_EFFECT_KEY >> far.txt";
        let cmd = losing_first(
            "test -e receipts/$EXACTLY_EFFECT_KEY",
            &format!("{send}; echo $EXACTLY_EFFECT_KEY > lost.key; exit 9"),
            send,
        );
        site.write_jobs(&format!(
            "[[job]]\nname = \"pay\"\nevery = \"1s\"\nlease = \"800ms\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || site.exists("lost.key")),
            "{}",
            site.log("s")
        );
        let key = std::fs::read_to_string(site.path("lost.key"))
            .expect("the first attempt's key")
            .trim()
            .to_string();
        // Settled either way: found (done, sent once), or judged never sent and sent again.
        assert!(
            wait_until(Duration::from_secs(10), || site.strings(&format!(
                "SELECT state FROM effect_ledger WHERE effect_key = '{key}'"
            )) == ["done"]),
            "the lost effect was never settled: {}",
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(10)), Some(0), "{}", site.log("s"));
        let sent = site.lines("far.txt");
        assert_eq!(
            sent.iter().filter(|l| **l == key).count(),
            1,
            "the effect went out again after its observer looked in the wrong folder: {sent:?}"
        );
    }

    #[test]
    fn a_new_firing_waits_behind_an_interrupted_one() {
        let site = Site::new();
        let cmd = sh("echo $EXACTLY_SCHEDULED_AT >> slots; echo $$ > pid; sleep 30");
        site.write_jobs(&format!(
            "[[job]]\nname = \"long\"\nschedule = \"0 0 1 1 *\"\nlease = \"1s\"\n\
             overlap = \"coalesce\"\ncommand = {cmd}\n"
        ));
        let mut reg = site.start("reg", "1s");
        assert!(wait_until(Duration::from_secs(5), || site
            .log("reg")
            .contains("started with")));
        assert_eq!(reg.term(Duration::from_secs(5)), Some(0));
        // `exactly trigger` runs the firing itself; it dies with its command (a machine lost).
        let mut trigger = std::process::Command::new(bin())
            .args(["--db", &site.db(), "trigger", "long"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("trigger");
        assert!(wait_until(Duration::from_secs(5), || site.exists("pid")));
        let _ = trigger.kill();
        let _ = trigger.wait();
        // SAFETY: signalling the process group of our own test's command.
        unsafe { libc::kill(-pid_in(&site, "pid"), libc::SIGKILL) };
        let slot = site.lines("slots")[0].clone();
        // Once its lease is past the clock-skew margin the lease is free to take: the firing
        // that died goes first, and a new one (here a "run now") is coalesced behind it.
        std::thread::sleep(Duration::from_millis(3500));
        let (code, out, err) = site.exactly(&["trigger", "long", "--json"]);
        assert_eq!(code, 3, "{out}{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["result"], "coalesced", "{out}");
        assert!(
            v["waiting"]
                .as_str()
                .is_some_and(|w| w.contains(&format!("the firing at {slot}"))),
            "{out}"
        );
        assert_eq!(site.lines("slots").len(), 1, "a new firing ran first");
        // A scheduler then resumes the one that died.
        let mut b = site.start("b", "1s");
        assert!(
            wait_until(Duration::from_secs(8), || site.lines("slots").len() == 2),
            "{}",
            site.log("b")
        );
        assert_eq!(b.term(Duration::from_secs(5)), Some(0), "{}", site.log("b"));
        assert_eq!(site.lines("slots"), [slot.clone(), slot], "{}", site.log("b"));
    }

    #[test]
    fn an_observer_run_by_the_scheduler_sees_the_firing_its_effect_was_for() {
        let site = Site::new();
        // The receipts file names each slot it was sent for; the observer asks "is there a
        // receipt for my slot?" with the variable the command had. The first attempt loses its
        // request before sending (exit 9): unknown, until the next run's observer looks.
        std::fs::write(
            site.path("far.txt"),
            "slot=2026-11-30T00:00:00.000Z key=yesterday\n",
        )
        .expect("far");
        let send = "echo \"slot=$EXACTLY_SCHEDULED_AT key=$EXACTLY_EFFECT_KEY\" >> far.txt";
        let cmd = losing_first(
            "grep -q \"slot=$EXACTLY_SCHEDULED_AT\" far.txt",
            "exit 9",
            send,
        );
        site.write_jobs(&format!(
            "[[job]]\nname = \"pay\"\nevery = \"1s\"\nlease = \"800ms\"\noverlap = \"coalesce\"\n\
             command = {cmd}\n"
        ));
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || site.exists("lost")),
            "{}",
            site.log("s")
        );
        let lost = std::fs::read_to_string(site.path("lost"))
            .expect("lost")
            .trim()
            .to_string();
        let sent_for_lost = || {
            site.lines("far.txt")
                .iter()
                .filter(|l| l.starts_with(&format!("slot={lost} ")))
                .count()
        };
        assert!(
            wait_until(Duration::from_secs(10), || sent_for_lost() > 0),
            "the effect that never went out was never sent (its observer said it happened): {}\n\
             {:?}",
            site.log("s"),
            site.strings("SELECT state || ' ' || coalesce(response, '') FROM effect_ledger")
        );
        assert_eq!(s.term(Duration::from_secs(10)), Some(0), "{}", site.log("s"));
        assert_eq!(sent_for_lost(), 1, "{:?}", site.lines("far.txt"));
    }
}

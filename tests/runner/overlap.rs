//! A job that sleeps past its 1-second interval, under each overlap policy.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::runner::*;

fn slow_job(policy: &str) -> String {
    format!(
        "[[job]]\nname = \"slow\"\nevery = \"1s\"\nlease = \"900ms\"\n{policy}\n\
         command = [\"sleep\", \"2.5\"]\n"
    )
}

/// Runs never overlap: each starts after the previous one ended.
fn assert_no_overlap(site: &Site) {
    let runs: Vec<(String, String)> = site
        .strings(
            "SELECT started_at || ' ' || coalesce(ended_at, '9999') FROM exactly_runs \
             ORDER BY started_at",
        )
        .iter()
        .map(|r| {
            let (started, ended) = r.split_once(' ').expect("started_at ended_at");
            (started.to_string(), ended.to_string())
        })
        .collect();
    for w in runs.windows(2) {
        assert!(w[1].0 >= w[0].1, "runs overlap: {w:?}");
    }
}

on_both_backends! {
    #[test]
    fn coalesce_drops_and_counts() {
        let site = Site::new();
        site.write_jobs(&slow_job("overlap = \"coalesce\""));
        let mut s = site.start("s", "10s");
        std::thread::sleep(Duration::from_millis(5500));
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        let runs = site.count("SELECT count(*) FROM exactly_runs");
        let coalesced = site.counter("firing_coalesced");
        let rows = site.count("SELECT count(*) FROM exactly_firings WHERE state = 'coalesced'");
        eprintln!("coalesce: {runs} runs, {coalesced} firings coalesced");
        assert!(runs >= 2, "{runs} runs");
        assert!(coalesced >= 2, "{coalesced} coalesced");
        assert_eq!(
            coalesced, rows,
            "every coalesced firing is a row and a count"
        );
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE outcome <> 'ok'"),
            0
        );
        assert_no_overlap(&site);
    }

    #[test]
    fn queue_holds_at_most_its_cap_across_a_restart() {
        let site = Site::new();
        site.write_jobs(&slow_job("overlap = \"queue\"\nqueue_cap = 2"));
        let depth = || site.count("SELECT count(*) FROM exactly_firings WHERE state = 'queued'");
        let mut max_depth = 0;
        let mut s = site.start("s1", "10s");
        // At least 5 s, and until the queue has overflowed once (later on a loaded machine).
        let begun = std::time::Instant::now();
        while begun.elapsed() < Duration::from_secs(5)
            || (site.counter("queue_saturated") == 0 && begun.elapsed() < Duration::from_secs(15))
        {
            max_depth = max_depth.max(depth());
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(s.term(Duration::from_secs(10)), Some(0), "SIGTERM exits 0");
        let waiting = site.strings(
            "SELECT scheduled_at FROM exactly_firings WHERE state = 'queued' ORDER BY scheduled_at",
        );
        assert!(
            !waiting.is_empty() && waiting.len() <= 2,
            "queued across the stop: {waiting:?}"
        );
        assert!(
            site.counter("queue_saturated") >= 1,
            "saturation is recorded"
        );

        // A restart neither loses nor multiplies the waiting firings.
        let mut s = site.start("s2", "10s");
        let all_ran = wait_until(Duration::from_secs(12), || {
            max_depth = max_depth.max(depth());
            waiting.iter().all(|slot| {
                site.count(&format!(
                    "SELECT count(*) FROM exactly_firings WHERE scheduled_at = '{slot}' AND \
                     state = 'ran'"
                )) == 1
            })
        });
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        assert!(all_ran, "the queued firings ran after the restart");
        for slot in &waiting {
            let n = site.count(&format!(
                "SELECT count(*) FROM exactly_runs WHERE scheduled_at = '{slot}'"
            ));
            assert_eq!(n, 1, "queued firing {slot} ran {n} times");
        }
        assert!(max_depth <= 2, "queue depth reached {max_depth}");
        let runs_twice = site.count(
            "SELECT count(*) FROM (SELECT scheduled_at FROM exactly_runs GROUP BY scheduled_at \
             HAVING count(*) > 1) AS twice",
        );
        assert_eq!(runs_twice, 0);
        assert_no_overlap(&site);
        eprintln!(
            "queue: max depth {max_depth}, {} waiting across restart, {} saturated, {} runs",
            waiting.len(),
            site.counter("queue_saturated"),
            site.count("SELECT count(*) FROM exactly_runs")
        );
    }

    #[test]
    fn fail_records_a_loud_miss() {
        let site = Site::new();
        site.write_jobs(&slow_job("overlap = \"fail\""));
        let mut s = site.start("s", "10s");
        std::thread::sleep(Duration::from_millis(4500));
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        let missed = site.counter("firing_missed");
        assert!(missed >= 1, "{missed} missed");
        assert_eq!(
            missed,
            site.count("SELECT count(*) FROM exactly_firings WHERE state = 'missed'")
        );
        let log = site.log("s");
        assert!(
            log.contains("ERROR job=slow") && log.contains("MISSED"),
            "{log}"
        );
        let (code, out, _) = site.exactly(&["status", "--json"]);
        assert_eq!(code, 0);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert!(v["missed_firings"].as_u64().unwrap_or(0) >= 1, "{out}");
        assert_no_overlap(&site);
        eprintln!("fail: {missed} firings missed");
    }

    #[test]
    fn firings_missed_while_down_are_shown_or_caught_up() {
        let site = Site::new();
        let job = |catchup: &str| {
            format!(
                "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"900ms\"\n\
                 overlap = \"coalesce\"\n{catchup}command = [\"true\"]\n"
            )
        };
        site.write_jobs(&job(""));
        let mut s = site.start("s1", "5s");
        assert!(wait_until(Duration::from_secs(5), || site
            .count("SELECT count(*) FROM exactly_runs")
            >= 1));
        assert_eq!(s.term(Duration::from_secs(5)), Some(0));
        // Down for a few seconds, no catch-up window: the slots in the gap are not run, and
        // they are the outage's (one event with its length), not missed firings.
        std::thread::sleep(Duration::from_millis(4500));
        let mut s = site.start("s2", "5s");
        let outages = |site: &Site| {
            site.count("SELECT count(*) FROM exactly_events WHERE kind = 'scheduler_outage'")
        };
        assert!(wait_until(Duration::from_secs(5), || outages(&site) == 1));
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(s.term(Duration::from_secs(5)), Some(0));
        assert!(
            site.log("s2").contains("outage: no scheduler was alive for 4."),
            "{}",
            site.log("s2")
        );
        let missed = site.counter("firing_missed");
        assert_eq!(missed, 0, "{}", site.log("s2"));
        assert_eq!(
            missed,
            site.count("SELECT count(*) FROM exactly_firings WHERE state = 'missed'")
        );

        // With a catch-up window the gap's slots are fired late, under the overlap policy.
        site.write_jobs(&job("catchup = \"1m\"\n"));
        std::thread::sleep(Duration::from_millis(4000));
        let mut s = site.start("s3", "5s");
        assert!(wait_until(Duration::from_secs(5), || site.count(
            "SELECT count(*) FROM exactly_firings WHERE kind = 'catchup' AND state = 'ran'"
        ) >= 1));
        assert_eq!(s.term(Duration::from_secs(5)), Some(0));
        assert_eq!(site.counter("firing_missed"), missed, "no new misses");
        eprintln!(
            "catch-up: an outage without a window; with one, {} caught up ({} coalesced)",
            site.count("SELECT count(*) FROM exactly_firings WHERE kind = 'catchup'"),
            site.count(
                "SELECT count(*) FROM exactly_firings WHERE kind = 'catchup' AND state = \
                 'coalesced'"
            )
        );
    }

    /// A failed firing's retries go before the job's later slots under every overlap policy,
    /// with `keep_runs = 1` pruning the runs of the slots around them: its three runs (one
    /// and two retries) are the first three, and no fourth.
    #[test]
    fn a_retry_goes_before_later_slots_under_every_policy() {
        for policy in ["overlap = \"queue\"\nqueue_cap = 5", "overlap = \"coalesce\"",
                       "overlap = \"fail\""] {
            let site = Site::new();
            site.write_jobs(&first_slot_fails(policy, "1.5"));
            let mut s = site.start("s", "5s");
            let first = |site: &Site| site.lines("bad").first().cloned().unwrap_or_default();
            let retried = wait_until(Duration::from_secs(12), || {
                let f = first(&site);
                !f.is_empty() && site.lines("slots").iter().filter(|l| **l == f).count() >= 3
            });
            // A little longer: a fourth run of the slot would show.
            std::thread::sleep(Duration::from_millis(1500));
            assert_eq!(s.term(Duration::from_secs(10)), Some(0));
            let (f, slots) = (first(&site), site.lines("slots"));
            assert!(
                retried,
                "{policy}: the failed slot {f} was not run three times: {slots:?}\n{}",
                site.log("s")
            );
            assert_eq!(
                slots[..3],
                [f.clone(), f.clone(), f.clone()],
                "{policy}: later slots ran before the failed slot's retries: {slots:?}"
            );
            assert_eq!(
                slots.iter().filter(|l| **l == f).count(),
                3,
                "{policy}: retries = 2 is three runs: {slots:?}"
            );
            assert_eq!(
                site.count("SELECT count(*) FROM exactly_firings WHERE state = 'retry'"),
                0,
                "{policy}"
            );
            eprintln!("{policy}: {} runs, the first three the failed slot's", slots.len());
        }
    }
}

/// A job whose first slot always fails: every run notes its slot in `slots`, runs `secs`.
fn first_slot_fails(policy: &str, secs: &str) -> String {
    let cmd = sh(&format!(
        "echo $EXACTLY_SCHEDULED_AT >> slots; [ -f bad ] || echo $EXACTLY_SCHEDULED_AT > bad; \
         sleep {secs}; [ \"$(cat bad)\" != \"$EXACTLY_SCHEDULED_AT\" ]"
    ));
    format!(
        "[[job]]\nname = \"q\"\nevery = \"1s\"\nlease = \"5s\"\n{policy}\nretries = 2\n\
         retry_backoff = \"300ms\"\nkeep_runs = 1\ncommand = {cmd}\n"
    )
}

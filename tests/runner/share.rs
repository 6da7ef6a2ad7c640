//! Three `exactly run` processes on one jobs file and one database share its jobs instead of
//! contending for every firing: each slot runs once, each scheduler starts about a third of the
//! runs, few firings are recorded duplicates. One SIGKILLed, the survivors take its jobs over
//! within its dead-after time, and none of its slots is lost meanwhile.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::runner::*;

/// Jobs every 1 s (two of three) and every 2 s.
const JOBS: usize = 45;
/// Heartbeats come every 2 s; a scheduler silent this long is dead.
const DEAD_AFTER_S: u64 = 4;

/// The first multiple of 2 s at or after `ms`: a slot of every job.
fn boundary(ms: u64) -> u64 {
    ms.div_ceil(2000) * 2000
}

fn sleep_until(ms: u64) {
    let now = epoch_ms();
    if ms > now {
        std::thread::sleep(Duration::from_millis(ms - now));
    }
}

/// A slot as the database holds it (fixed-width UTC).
fn slot(ms: u64) -> String {
    let ts = chrono::DateTime::from_timestamp_millis(ms as i64).expect("a valid instant");
    exactly::time::fmt(ts)
}

/// How many (job, slot) pairs fall in [from, to) (both on 2 s boundaries).
fn expected(from: u64, to: u64, jobs: &[usize]) -> i64 {
    jobs.iter()
        .map(|j| ((to - from) / every_ms(*j)) as i64)
        .sum()
}

fn every_ms(j: usize) -> u64 {
    if j.is_multiple_of(3) {
        2000
    } else {
        1000
    }
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

on_both_backends! {
    #[test]
    fn three_schedulers_split_the_jobs_and_take_over_a_killed_ones() {
        // Three schedulers load the 2 cores: the two variants one after the other.
        let _alone = support::backend::one_at_a_time();
        let site = Site::new();
        let mut toml = String::new();
        for j in 0..JOBS {
            toml.push_str(&format!(
                "[[job]]\nname = \"share-{j:02}\"\nevery = \"{}ms\"\nlease = \"800ms\"\n\
                 overlap = \"coalesce\"\ncommand = [\"true\", \"{j}\"]\n\n",
                every_ms(j)
            ));
        }
        site.write_jobs(&toml);
        assert_eq!(site.exactly(&["init"]).0, 0);
        let dead_after = format!("{DEAD_AFTER_S}s");
        let env = [("EXACTLY_SCHEDULER_DEAD_AFTER", dead_after.as_str())];
        let mut a = site.start_with_env("a", "5s", &env);
        let mut b = site.start_with_env("b", "5s", &env);
        let mut c = site.start_with_env("c", "5s", &env);
        // Each sees the other two within a membership read or two (not asserted here: a build
        // without sharing must fail on what it does, below).
        wait_until(Duration::from_secs(8), || {
            ["a", "b", "c"].iter().all(|o| site.log(o).contains("3 live schedulers"))
        });

        // The split: every slot in [t1, t2) runs once, a third by each.
        let t1 = boundary(epoch_ms() + 500);
        let t2 = t1 + 6000;
        // Past t2, every slot before it is decided (the safety net's second included).
        sleep_until(t2 + 1500);
        let all: Vec<usize> = (0..JOBS).collect();
        let want = expected(t1, t2, &all);
        let (s1, s2) = (slot(t1), slot(t2));
        let window = format!("scheduled_at >= '{s1}' AND scheduled_at < '{s2}'");
        let runs = site.count(&format!("SELECT count(*) FROM exactly_runs WHERE {window}"));
        let slots_run = site.count(&format!(
            "SELECT count(*) FROM (SELECT DISTINCT job_key, scheduled_at FROM exactly_runs WHERE \
             {window}) AS s"
        ));
        let firings = site.count(&format!("SELECT count(*) FROM exactly_firings WHERE {window}"));
        let owners = site.strings(&format!(
            "SELECT owner || ' ' || count(*) FROM exactly_runs WHERE {window} GROUP BY owner \
             ORDER BY owner"
        ));
        let dups = site.count(&format!(
            "SELECT count(*) FROM exactly_events WHERE kind = 'firing_duplicate' AND at >= '{s1}' \
             AND at < '{}'",
            slot(t2 + 1500)
        ));
        eprintln!(
            "split: {want} slots, {firings} firings, {runs} runs of {slots_run} slots, {dups} \
             duplicates, by owner {owners:?}"
        );
        assert_eq!(firings, want, "every slot is fired, once");
        assert_eq!(slots_run, want, "every slot runs");
        assert_eq!(runs, want, "no slot runs twice");
        for o in ["a", "b", "c"] {
            let n = site.count(&format!(
                "SELECT count(*) FROM exactly_runs WHERE {window} AND owner = '{o}'"
            ));
            assert!(
                n * 100 >= want * 15,
                "{o} started {n} of {want} runs: the work is not split ({owners:?})"
            );
        }
        assert!(
            dups * 10 <= want,
            "{dups} duplicate firings for {want} slots: the schedulers contend instead of sharing"
        );
        for o in ["a", "b", "c"] {
            assert!(
                site.log(o).contains("3 live schedulers"),
                "{o} logs its share: {}",
                site.log(o)
            );
        }

        // `c` dies: its jobs go to `a` and `b`, and none of its slots is lost meanwhile.
        let theirs = site.strings(&format!(
            "SELECT DISTINCT job_key FROM exactly_runs WHERE {window} AND owner = 'c' ORDER BY \
             job_key"
        ));
        // What each survivor logged before the kill (it may have seen two schedulers at start).
        let before: Vec<usize> = ["a", "b"].iter().map(|o| site.log(o).len()).collect();
        c.kill9();
        let killed = epoch_ms();
        let took_over = wait_until(Duration::from_secs(DEAD_AFTER_S + 3), || {
            ["a", "b"].iter().zip(&before).all(|(o, n)| {
                site.log(o).get(*n..).is_some_and(|l| l.contains("2 live schedulers"))
            })
        });
        let after = epoch_ms() - killed;
        assert!(
            took_over,
            "the survivors did not call c dead within {DEAD_AFTER_S}s + 3s:\n{}\n{}",
            site.log("a"),
            site.log("b")
        );
        let t3 = boundary(killed);
        let t4 = boundary(killed + (DEAD_AFTER_S + 6) * 1000);
        sleep_until(t4 + 1500);
        let window = format!("scheduled_at >= '{}' AND scheduled_at < '{}'", slot(t3), slot(t4));
        let want = expected(t3, t4, &all);
        let firings = site.count(&format!("SELECT count(*) FROM exactly_firings WHERE {window}"));
        let missed = site.strings(&format!(
            "SELECT job_key || ' ' || scheduled_at || ' ' || state FROM exactly_firings
             WHERE {window} AND state NOT IN ('ran', 'running')"
        ));
        let twice = site.count(&format!(
            "SELECT count(*) FROM (SELECT job_key, scheduled_at FROM exactly_runs WHERE {window}
               AND outcome IS DISTINCT FROM 'killed' GROUP BY job_key, scheduled_at HAVING \
               count(*) > 1) AS t"
        ));
        let by_c = site.count(&format!(
            "SELECT count(*) FROM exactly_runs WHERE {window} AND owner = 'c'"
        ));
        let their_idx: Vec<usize> = theirs
            .iter()
            .filter_map(|n| n.strip_prefix("share-").and_then(|i| i.parse().ok()))
            .collect();
        let late = boundary(killed + (DEAD_AFTER_S + 3) * 1000);
        let their_window = format!(
            "scheduled_at >= '{}' AND scheduled_at < '{}' AND job_key IN ({})",
            slot(late),
            slot(t4),
            quoted(&theirs)
        );
        let their_runs = site.count(&format!(
            "SELECT count(*) FROM exactly_runs WHERE {their_window} AND owner IN ('a', 'b')"
        ));
        eprintln!(
            "takeover: called dead after {after} ms; {firings} of {want} slots fired, {} not run, \
             {by_c} by c; c's {} jobs ran {their_runs} of {} later slots",
            missed.len(),
            theirs.len(),
            expected(late, t4, &their_idx)
        );
        assert!(!theirs.is_empty(), "c ran nothing before it was killed");
        assert_eq!(firings, want, "a slot was lost while c was dying");
        // A run c left dead goes first when its lease ends (resumed), so the next slot of its
        // job may be coalesced behind it, as the overlap policy says. On a loaded machine
        // (the whole suite at once) a survivor's own run may also still be live at its job's
        // next slot: coalesced too, never lost. Nothing else is not run, and such slots of the
        // survivors' jobs stay few.
        let c_ran = site.strings("SELECT DISTINCT job_key FROM exactly_runs WHERE owner = 'c'");
        let state_of = |m: &String| {
            let mut w = m.split(' ');
            let job = w.next().unwrap_or("").to_string();
            (job, w.nth(1).unwrap_or("").to_string())
        };
        let lost: Vec<&String> = missed
            .iter()
            .filter(|m| state_of(m).1 != "coalesced")
            .collect();
        let survivors_coalesced = missed
            .iter()
            .filter(|m| !c_ran.contains(&state_of(m).0))
            .count() as i64;
        assert!(
            survivors_coalesced * 10 <= want,
            "{survivors_coalesced} of {want} slots of the survivors' own jobs coalesced: {missed:?}"
        );
        assert!(lost.is_empty(), "slots not run: {lost:?} (all not run: {missed:?})");
        assert_eq!(twice, 0, "a slot ran twice");
        assert_eq!(
            their_runs,
            expected(late, t4, &their_idx),
            "c's later slots run by the survivors"
        );
        for s in [&mut a, &mut b] {
            assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        }
    }

    #[test]
    fn a_killed_owners_queued_firings_are_started_by_the_others_and_none_is_lost() {
        let _alone = support::backend::one_at_a_time();
        let site = Site::new();
        // Runs outlast the interval, so firings queue behind the live run.
        let cmd = sh("echo $EXACTLY_SCHEDULED_AT >> q.txt; sleep 1.5");
        site.write_jobs(&format!(
            "[[job]]\nname = \"q\"\nevery = \"1s\"\nlease = \"2s\"\noverlap = \"queue\"\n\
             queue_cap = 2\ncommand = {cmd}\n"
        ));
        assert_eq!(site.exactly(&["init"]).0, 0);
        let dead_after = format!("{DEAD_AFTER_S}s");
        let env = [("EXACTLY_SCHEDULER_DEAD_AFTER", dead_after.as_str())];
        let mut scheds: Vec<(&str, Sched)> = ["a", "b", "c"]
            .into_iter()
            .map(|o| (o, site.start_with_env(o, "5s", &env)))
            .collect();
        let settled = wait_until(Duration::from_secs(8), || {
            ["a", "b", "c"].iter().all(|o| site.log(o).contains("3 live schedulers"))
        });
        assert!(settled, "the schedulers did not see each other");
        // Its owner runs it with firings queued behind the run.
        let busy = wait_until(Duration::from_secs(10), || {
            site.count("SELECT count(*) FROM exactly_firings WHERE state = 'queued'") > 0
                && site.count("SELECT count(*) FROM exactly_runs WHERE ended_at IS NULL") > 0
        });
        assert!(busy, "no firing queued behind a live run");
        let owner = site.strings("SELECT owner FROM exactly_runs ORDER BY started_at DESC LIMIT 1");
        let owner = owner.first().cloned().unwrap_or_default();
        let queued =
            site.strings("SELECT scheduled_at FROM exactly_firings WHERE state = 'queued'");
        let running =
            site.strings("SELECT scheduled_at FROM exactly_firings WHERE state = 'running'");
        let i = scheds.iter().position(|(o, _)| *o == owner).expect("the owner is one of ours");
        scheds[i].1.kill9();
        // Called dead or not, the others start what it left waiting once its lease is free.
        std::thread::sleep(Duration::from_secs(DEAD_AFTER_S + 4));
        // The queued ones: started by the survivors. (The interrupted one waits behind the
        // queue, which a job whose runs outlast its interval never empties: `start_waiting`
        // starts the queued first, with one scheduler as with three; it stays `running`, to
        // be resumed, and is checked below only for not being lost.)
        let left: Vec<String> = queued
            .iter()
            .filter(|slot| {
                site.count(&format!(
                    "SELECT count(*) FROM exactly_runs WHERE scheduled_at = '{slot}' AND owner <> \
                     '{owner}'"
                )) == 0
            })
            .cloned()
            .collect();
        let twice = site.strings(
            "SELECT scheduled_at FROM exactly_runs GROUP BY scheduled_at HAVING count(*) > 1",
        );
        let interrupted: Vec<String> = running
            .iter()
            .filter(|slot| {
                site.count(&format!(
                    "SELECT count(*) FROM exactly_firings WHERE scheduled_at = '{slot}'
                       AND state IN ('running', 'retry', 'ran')"
                )) == 1
            })
            .cloned()
            .collect();
        assert_eq!(interrupted, running, "the interrupted firing is kept, to be resumed");
        eprintln!(
            "queue: {owner} killed with {queued:?} queued and {running:?} running; not taken over: \
             {left:?}; run twice: {twice:?}"
        );
        assert!(left.is_empty(), "left waiting after {owner} died: {left:?}");
        // Only the run it was killed in is run again (resumed); nothing else twice.
        assert!(
            twice.iter().all(|s| running.contains(s)),
            "run twice: {twice:?}, running at the kill: {running:?}"
        );
        assert!(
            site.counter("firing_missed") == 0,
            "a firing was missed instead of queued"
        );
        for (o, s) in scheds.iter_mut() {
            if *o != owner {
                assert_eq!(s.term(Duration::from_secs(10)), Some(0));
            }
        }
    }
}

//! Operator controls: trigger (its own firing, under lease and overlap policy, answer says what
//! happened), pause/resume (firings skipped with the note), backfill (past slots; done effects
//! suppressed by their keys; a slot that ran is not run again).
use crate::on_both_backends;
use crate::support;
use std::process::Command;
use std::time::Duration;
use support::runner::*;

on_both_backends! {
    #[test]
    fn trigger_pause_resume_backfill() {
        let site = Site::new();
        // The effect's key has no slot in it: one report per month, whichever firing sends it.
        let cmd = sh("if [ -f slow ]; then sleep 2; fi; \
             $X effect --action report --target ops --input month=2026-01 \
             -- sh -c 'echo $EXACTLY_SCHEDULED_AT >> far.txt'");
        site.write_jobs(&format!(
            "[[job]]\nname = \"report\"\nschedule = \"0 0 * * *\"\nlease = \"5s\"\n\
             overlap = \"coalesce\"\ncommand = {cmd}\n"
        ));
        // A scheduler registers the job, then stops.
        let mut s = site.start("s", "1s");
        assert!(wait_until(Duration::from_secs(5), || site.count(
            "SELECT count(*) FROM exactly_jobs WHERE job_key = 'report'"
        ) == 1));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(s.term(Duration::from_secs(5)), Some(0));

        let (code, out, err) = site.exactly(&["trigger", "report"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(
            out.contains("manual firing at ")
                && out.contains(" started run ")
                && out.contains("ok: in"),
            "{out}"
        );
        assert!(out.contains("effects: 1 done"), "{out}");
        assert_eq!(site.lines("far.txt").len(), 1);

        // While a run is live, a trigger is coalesced, and says so.
        std::fs::write(site.path("slow"), "").unwrap();
        let bg = Command::new(bin())
            .args(["--db", &site.db(), "trigger", "report"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        assert!(wait_until(Duration::from_secs(5), || site.count(
            "SELECT count(*) FROM exactly_runs WHERE ended_at IS NULL"
        ) == 1));
        let (code, out, _) = site.exactly(&["trigger", "report"]);
        assert_eq!(code, 3, "{out}");
        assert!(
            out.contains("manual firing at ") && out.contains(" coalesced: a run is live"),
            "{out}"
        );
        let bg_out = bg.wait_with_output().unwrap();
        let bg_text = String::from_utf8_lossy(&bg_out.stdout);
        assert_eq!(bg_out.status.code(), Some(0), "{bg_text}");
        assert!(bg_text.contains("1 already done (suppressed)"), "{bg_text}");
        std::fs::remove_file(site.path("slow")).unwrap();

        let (code, out, _) = site.exactly(&["pause", "report", "--note", "vendor outage"]);
        assert_eq!(code, 0, "{out}");
        let (code, out, _) = site.exactly(&["trigger", "report"]);
        assert_eq!(code, 3, "{out}");
        assert!(
            out.contains("skipped") && out.contains("vendor outage"),
            "{out}"
        );
        assert_eq!(site.counter("firing_skipped_paused"), 1);
        let (code, _, _) = site.exactly(&["resume", "report"]);
        assert_eq!(code, 0);
        let (code, out, _) = site.exactly(&["trigger", "report"]);
        assert_eq!(code, 0, "{out}");

        // Backfill two past midnights: both run, their effect is already done, so suppressed.
        let now = chrono::Utc::now();
        let ts = |d: chrono::Duration| (now - d).format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let (from, to) = (
            ts(chrono::Duration::hours(72) - chrono::Duration::minutes(1)),
            ts(chrono::Duration::hours(24) + chrono::Duration::minutes(1)),
        );
        let (code, out, err) = site.exactly(&["backfill", "report", "--from", &from, "--to", &to]);
        assert_eq!(code, 0, "{out}{err}");
        let ran: Vec<&str> = out.lines().filter(|l| l.contains(": ran, ok")).collect();
        assert_eq!(ran.len(), 2, "{out}");
        assert!(
            ran.iter()
                .all(|l| l.contains("0 done, 1 already done (suppressed)")),
            "{out}"
        );
        assert_eq!(
            site.lines("far.txt").len(),
            1,
            "a backfill never repeats an effect"
        );
        // The same backfill again: those firings already ran.
        let (code, out, _) = site.exactly(&["backfill", "report", "--from", &from, "--to", &to]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(
            out.lines()
                .filter(|l| l.contains("is a duplicate (already "))
                .count(),
            2,
            "{out}"
        );

        // A job no longer in the file is retired, not deleted, and cannot be triggered.
        site.write_jobs(
            "[[job]]\nname = \"other\"\nschedule = \"0 0 * * *\"\nlease = \"5s\"\n\
             overlap = \"fail\"\ncommand = [\"true\"]\n",
        );
        let mut s = site.start("s2", "1s");
        assert!(wait_until(Duration::from_secs(5), || site.count(
            "SELECT count(*) FROM exactly_jobs WHERE job_key = 'report' AND retired = 1"
        ) == 1));
        assert_eq!(s.term(Duration::from_secs(5)), Some(0));
        let (code, _, err) = site.exactly(&["trigger", "report"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("retired"), "{err}");

        let (code, _, err) = site.exactly(&["trigger", "nope"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("no job named nope"), "{err}");
    }

    /// Two schedulers share four paused 1 s jobs: each pause's skipped slots are decided once
    /// (two rows, the counter equal to the slots, nothing missed); afterwards a backfill runs
    /// every one of them, those with no row of their own too, and the rolling row keeps its
    /// kind so a scheduler picks up where the pause left it.
    #[test]
    fn a_pause_s_slots_are_decided_once_by_two_schedulers_and_backfilled() {
        let site = Site::new();
        let mut toml = String::new();
        for j in 0..4 {
            toml.push_str(&format!(
                "[[job]]\nname = \"p{j}\"\nevery = \"1s\"\nlease = \"900ms\"\n\
                 overlap = \"coalesce\"\ncommand = [\"true\", \"{j}\"]\n\n"
            ));
        }
        site.write_jobs(&toml);
        assert_eq!(site.exactly(&["init"]).0, 0);
        let mut a = site.start("a", "2s");
        let mut b = site.start("b", "2s");
        let ran = |site: &Site, j: usize| {
            site.count(&format!(
                "SELECT count(*) FROM exactly_runs WHERE job_key = 'p{j}'"
            ))
        };
        assert!(
            wait_until(Duration::from_secs(15), || (0..4).all(|j| ran(&site, j) >= 2)),
            "{}{}",
            site.log("a"),
            site.log("b")
        );
        for j in 0..4 {
            let (code, _, err) = site.exactly(&["pause", &format!("p{j}")]);
            assert_eq!(code, 0, "{err}");
        }
        std::thread::sleep(Duration::from_secs(5));
        let before: Vec<i64> = (0..4).map(|j| ran(&site, j)).collect();
        for j in 0..4 {
            let (code, _, err) = site.exactly(&["resume", &format!("p{j}")]);
            assert_eq!(code, 0, "{err}");
        }
        assert!(
            wait_until(Duration::from_secs(5), || (0..4).all(|j| ran(&site, j) > before[j])),
            "{}{}",
            site.log("a"),
            site.log("b")
        );
        assert_eq!(a.term(Duration::from_secs(10)), Some(0), "{}", site.log("a"));
        assert_eq!(b.term(Duration::from_secs(10)), Some(0), "{}", site.log("b"));
        let at = |t: &str| {
            chrono::DateTime::parse_from_rfc3339(t)
                .unwrap_or_else(|e| panic!("{t}: {e}"))
                .with_timezone(&chrono::Utc)
        };
        for j in 0..4 {
            let job = format!("p{j}");
            let rows = site.strings(&format!(
                "SELECT state || ' ' || kind || ' ' || scheduled_at || ' ' || coalesce(detail, '') \
                 FROM exactly_firings WHERE job_key = '{job}' ORDER BY scheduled_at"
            ));
            let skipped: Vec<&String> =
                rows.iter().filter(|r| r.starts_with("skipped ")).collect();
            assert!((1..=2).contains(&skipped.len()), "{job}: {rows:#?}");
            let slot_of = |r: &str| at(r.split(' ').nth(2).unwrap_or_default());
            let first = slot_of(skipped[0]);
            let last = slot_of(skipped[skipped.len() - 1]);
            let ran_slots: Vec<_> = rows
                .iter()
                .filter(|r| r.starts_with("ran "))
                .map(|r| slot_of(r))
                .collect();
            let (Some(before), Some(after)) = (
                ran_slots.iter().filter(|t| **t < first).max(),
                ran_slots.iter().filter(|t| **t > last).min(),
            ) else {
                panic!("{job}: no run before and after the pause: {rows:#?}");
            };
            let slots = (*after - *before).num_seconds() - 1;
            let counted = site.count(&format!(
                "SELECT coalesce(sum(n), 0) FROM exactly_counters \
                 WHERE kind = 'firing_skipped_paused' AND job_key = '{job}'"
            ));
            assert_eq!(counted, slots, "{job}: each slot counted once: {rows:#?}");
            assert!(
                rows.iter().all(|r| r.starts_with("ran ") || r.starts_with("skipped ")),
                "{job}: {rows:#?}"
            );
        }
        assert_eq!(site.counter("firing_missed"), 0);

        // A backfill of p0's pause runs each of its slots, those with no row of their own too.
        let rows = site.strings(
            "SELECT scheduled_at FROM exactly_firings WHERE job_key = 'p0' \
             AND state = 'skipped' ORDER BY scheduled_at",
        );
        let (first, last) = (rows[0].clone(), rows[rows.len() - 1].clone());
        let slots = (at(&last) - at(&first)).num_seconds() + 1;
        let (code, out, err) = site.exactly(&["backfill", "p0", "--from", &first, "--to", &last]);
        assert_eq!(code, 0, "{out}{err}");
        let ran: Vec<&str> = out.lines().filter(|l| l.contains(": ran, ok")).collect();
        assert_eq!(ran.len() as i64, slots, "{out}");
        assert_eq!(
            site.strings(&format!(
                "SELECT kind FROM exactly_firings WHERE job_key = 'p0' AND scheduled_at = '{last}'"
            )),
            [if rows.len() == 2 { "scheduled" } else { "backfill" }],
            "the rolling row keeps its kind"
        );
        // A scheduler started now picks up after the pause: nothing missed, nothing caught up
        // from before it.
        let mut c = site.start("c", "2s");
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(c.term(Duration::from_secs(10)), Some(0), "{}", site.log("c"));
        assert_eq!(site.counter("firing_missed"), 0, "{}", site.log("c"));
        assert_eq!(
            site.count(&format!(
                "SELECT count(*) FROM exactly_firings WHERE scheduled_at <= '{last}' \
                 AND kind IN ('catchup') AND state <> 'skipped'"
            )),
            0
        );
    }

    /// A paused 1 s job's skipped slots are two firing rows for the pause (its first, and one
    /// rolling row at the latest that counts them), not one each; the counter counts every
    /// slot; a scheduler restarted mid-pause picks up after them; and after `resume` the next
    /// slot fires on time: no catch-up run, no missed firing.
    #[test]
    fn a_paused_job_keeps_two_firing_rows_for_its_pause() {
        let site = Site::new();
        site.write_jobs(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"900ms\"\n\
             overlap = \"coalesce\"\ncommand = [\"true\"]\n",
        );
        let mut s = site.start("s", "2s");
        let runs = |site: &Site| site.count("SELECT count(*) FROM exactly_runs");
        assert!(wait_until(Duration::from_secs(10), || runs(&site) >= 1), "{}", site.log("s"));
        let (code, _, err) = site.exactly(&["pause", "tick", "--note", "vendor outage"]);
        assert_eq!(code, 0, "{err}");
        std::thread::sleep(Duration::from_secs(3));
        // A scheduler restarted in the pause picks up after its rows.
        assert_eq!(s.term(Duration::from_secs(10)), Some(0), "{}", site.log("s"));
        let mut s = site.start("s2", "2s");
        std::thread::sleep(Duration::from_secs(3));
        let before = runs(&site);
        let (code, _, err) = site.exactly(&["resume", "tick"]);
        assert_eq!(code, 0, "{err}");
        let resumed = chrono::Utc::now();
        assert!(
            wait_until(Duration::from_secs(5), || runs(&site) > before),
            "{}",
            site.log("s2")
        );
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(s.term(Duration::from_secs(10)), Some(0), "{}", site.log("s2"));
        let rows = site.strings(
            "SELECT state || ' ' || scheduled_at || ' ' || coalesce(detail, '') \
             FROM exactly_firings ORDER BY scheduled_at",
        );
        let skipped: Vec<&String> = rows.iter().filter(|r| r.starts_with("skipped ")).collect();
        assert!(
            (1..=2).contains(&skipped.len()),
            "{} firing rows for one pause: {skipped:#?}",
            skipped.len()
        );
        // Every slot between the last run before the pause and the first after it was skipped.
        let slot = |r: &str| {
            let t = r.split(' ').nth(1).unwrap_or_default().to_string();
            chrono::DateTime::parse_from_rfc3339(&t)
                .unwrap_or_else(|e| panic!("{t}: {e}"))
                .with_timezone(&chrono::Utc)
        };
        let first_skipped = slot(skipped[0]);
        let last_skipped = slot(skipped[skipped.len() - 1]);
        let ran: Vec<&String> = rows.iter().filter(|r| r.starts_with("ran ")).collect();
        let before_pause = ran.iter().map(|r| slot(r)).filter(|t| *t < first_skipped).max();
        let after_pause = ran.iter().map(|r| slot(r)).filter(|t| *t > last_skipped).min();
        let (Some(before_pause), Some(after_pause)) = (before_pause, after_pause) else {
            panic!("no run before and after the pause: {rows:#?}");
        };
        let slots = (after_pause - before_pause).num_seconds() - 1;
        assert_eq!(
            site.counter("firing_skipped_paused"),
            slots,
            "each skipped slot counted: {rows:#?}"
        );
        if skipped.len() == 2 {
            assert!(
                skipped[1].contains(&format!("{slots} firing(s) skipped while paused since ")),
                "the rolling row counts them: {skipped:#?}"
            );
        }
        // After resume: the next slot on time, no catch-up, nothing missed.
        assert!(
            after_pause > resumed - chrono::Duration::milliseconds(1500),
            "the slot after the pause is {after_pause}, resumed at {resumed}: {rows:#?}"
        );
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_firings WHERE kind = 'catchup' AND state <> 'skipped'"),
            0,
            "{rows:#?}"
        );
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_firings WHERE state = 'missed'"),
            0,
            "{rows:#?}"
        );
        assert_eq!(site.counter("firing_missed"), 0);
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_firings WHERE state NOT IN ('ran', 'skipped')"),
            0,
            "{rows:#?}"
        );
    }
}

/// A paused job's firing waiting for a retry is told with its own reason (its firing's
/// detail) and as waiting for `resume`: a paused job re-runs nothing.
#[test]
fn a_paused_job_s_retry_warning_gives_its_own_reason() {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"flaky\"\nevery = \"2s\"\nlease = \"5s\"\noverlap = \"coalesce\"\n\
         retries = 1\nretry_backoff = \"1h\"\ncommand = {}\n",
        sh("exit 1")
    ));
    let mut s = site.start("s", "1s");
    let retry = || site.count("SELECT count(*) FROM exactly_firings WHERE state = 'retry'");
    assert!(
        wait_until(Duration::from_secs(10), || retry() >= 1),
        "{}",
        site.log("s")
    );
    let (code, out, err) = site.exactly(&["pause", "flaky", "--note", "maintenance"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(s.term(Duration::from_secs(5)), Some(0), "{}", site.log("s"));
    let (_, json, _) = site.exactly(&["jobs", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("jobs --json");
    let warnings: Vec<String> = v["jobs"][0]["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let retry = warnings
        .iter()
        .find(|w| w.contains("run again") || w.contains("need retry"))
        .unwrap_or_else(|| panic!("no retry warning: {warnings:?}"));
    assert!(
        retry.contains("its run failed") && retry.contains("exactly resume flaky"),
        "the firing's own reason, waiting for resume: {retry}"
    );
    assert!(!retry.contains("an effect never happened"), "{retry}");
}

/// A paused 1 s job's skipped firings are summarised: one `firing_skipped_paused` event for
/// the pause (its counter still counts every firing), one log line for it and one when it is
/// resumed with the count; not an event and a line per slot.
#[test]
fn a_paused_jobs_skipped_firings_are_summarised() {
    let site = Site::new();
    site.write_jobs(
        "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
         command = [\"true\"]\n",
    );
    let mut s = site.start("s", "2s");
    assert!(wait_until(Duration::from_secs(10), || site
        .count("SELECT count(*) FROM exactly_runs")
        >= 1));
    let (code, _, err) = site.exactly(&["pause", "tick", "--note", "vendor outage"]);
    assert_eq!(code, 0, "{err}");
    let skipped = |site: &Site| site.counter("firing_skipped_paused");
    assert!(wait_until(Duration::from_secs(10), || skipped(&site) >= 5));
    let (code, _, err) = site.exactly(&["resume", "tick"]);
    assert_eq!(code, 0, "{err}");
    let runs = site.count("SELECT count(*) FROM exactly_runs");
    assert!(wait_until(Duration::from_secs(5), || site
        .count("SELECT count(*) FROM exactly_runs")
        > runs));
    assert_eq!(s.term(Duration::from_secs(10)), Some(0));
    let log = site.log("s");
    let n = skipped(&site);
    let rows = site.count("SELECT count(*) FROM exactly_firings WHERE state = 'skipped'");
    assert!(rows <= 2, "{n} firings skipped, {rows} rows");
    let events =
        site.count("SELECT count(*) FROM exactly_events WHERE kind = 'firing_skipped_paused'");
    assert_eq!(events, 1, "{n} firings skipped, {events} events: {log}");
    let lines = log.lines().filter(|l| l.contains("skipped")).count();
    assert!(lines <= 2, "{n} firings skipped, {lines} log lines: {log}");
    assert!(
        log.contains(&format!("{n} firing(s) skipped while paused")),
        "the count when resumed: {log}"
    );
}

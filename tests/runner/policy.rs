//! A job's failure policy with a real `exactly run` on real jobs files: a failed firing runs
//! again for the same slot after a growing backoff (`retries`), a job failing N runs in a row
//! is paused with its reason shown (`pause_after_failures`), each firing waits its
//! deterministic `jitter`, and a firing that could not start within its `starting_deadline`
//! (the scheduler frozen with SIGSTOP) is recorded missed, not run; without one, a slot such a
//! frozen scheduler decides past its slack runs late, before its next slot.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::runner::*;

fn ts(text: &str) -> chrono::DateTime<chrono::Utc> {
    exactly::time::parse(text).unwrap_or_else(|| panic!("not a time: {text}"))
}

fn status_job(site: &Site, name: &str) -> serde_json::Value {
    let (code, out, err) = site.exactly(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("status --json is JSON");
    v["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["job_key"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no job {name} in {out}"))
}

on_both_backends! {
    #[test]
    fn a_failing_firing_is_retried_for_its_slot_with_a_growing_backoff() {
        let site = Site::new();
        // Fails on its first two runs, then succeeds; each run notes the slot it was given.
        let cmd = sh("n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; \
                      echo \"$EXACTLY_SCHEDULED_AT\" >> slots; [ $n -ge 3 ]");
        site.write_jobs(&format!(
            "[[job]]\nname = \"flaky\"\nevery = \"5s\"\nlease = \"3s\"\noverlap = \"coalesce\"\n\
             retries = 3\nretry_backoff = \"400ms\"\ncommand = {cmd}\n"
        ));
        let _s = site.start("s", "2s");
        assert!(
            wait_until(Duration::from_secs(15), || {
                site.count(
                    "SELECT count(*) FROM exactly_runs WHERE job_key = 'flaky' AND outcome = 'ok'",
                ) >= 1
            }),
            "flaky never succeeded: {}",
            site.log("s")
        );
        let runs = site.strings(
            "SELECT scheduled_at || ' ' || started_at || ' ' || ended_at || ' ' || outcome
             FROM exactly_runs WHERE job_key = 'flaky' ORDER BY started_at",
        );
        assert_eq!(runs.len(), 3, "three runs: {runs:?}\n{}", site.log("s"));
        let parts: Vec<Vec<&str>> = runs.iter().map(|r| r.split(' ').collect()).collect();
        let outcomes: Vec<&str> = parts.iter().map(|p| p[3]).collect();
        assert_eq!(outcomes, ["failed", "failed", "ok"]);
        // One firing: the same slot for every run, as the command saw it too.
        assert!(parts.iter().all(|p| p[0] == parts[0][0]), "{runs:?}");
        assert_eq!(site.lines("slots"), vec![parts[0][0].to_string(); 3]);
        // Each retry waits its backoff after the run before (up to a quarter off), and longer
        // each time: 300..400 ms, then 600..800 ms.
        let gap = |k: usize| (ts(parts[k + 1][1]) - ts(parts[k][2])).num_milliseconds();
        let (g1, g2) = (gap(0), gap(1));
        assert!((290..1000).contains(&g1), "first backoff {g1} ms");
        assert!((590..1500).contains(&g2), "second backoff {g2} ms");
        assert!(g2 > g1, "the backoff grows: {g1} ms then {g2} ms");
        assert_eq!(
            site.count(
                "SELECT count(*) FROM exactly_firings WHERE job_key = 'flaky' AND state = 'ran'"
            ),
            1
        );
    }

    #[test]
    fn a_job_failing_n_runs_in_a_row_is_paused_with_its_reason() {
        let site = Site::new();
        site.write_jobs(
            "[[job]]\nname = \"broken\"\nevery = \"1s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             pause_after_failures = 2\ncommand = [\"sh\", \"-c\", \"exit 1\"]\n",
        );
        let _s = site.start("s", "2s");
        assert!(
            wait_until(Duration::from_secs(15), || {
                site.count(
                    "SELECT count(*) FROM exactly_jobs WHERE job_key = 'broken' AND paused = 1",
                ) == 1
            }),
            "broken was never paused: {}",
            site.log("s")
        );
        // No more firings run: later ones are recorded skipped while it is paused.
        assert!(
            wait_until(Duration::from_secs(10), || {
                site.count(
                    "SELECT count(*) FROM exactly_firings WHERE job_key = 'broken' AND state = \
                     'skipped'",
                ) >= 2
            }),
            "no firing skipped while paused: {}",
            site.log("s")
        );
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE job_key = 'broken'"),
            2,
            "{}",
            site.log("s")
        );
        let j = status_job(&site, "broken");
        assert_eq!(j["paused"], true, "{j}");
        assert_eq!(j["consecutive_failures"], 2, "{j}");
        let reason = j["paused_reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("2 failed runs in a row") && reason.contains("pause_after_failures"),
            "{j}"
        );
        let (code, text, err) = site.exactly(&["status"]);
        assert_eq!(code, 0, "{err}");
        assert!(text.contains("failed runs in a row"), "{text}");
        assert!(site.log("s").contains("PAUSED after 2 failed runs"), "{}", site.log("s"));
        // Resumed, it gets its two runs again before it is paused again.
        let (code, _, err) = site.exactly(&["resume", "broken"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            wait_until(Duration::from_secs(15), || {
                site.count("SELECT count(*) FROM exactly_events WHERE kind = 'job_paused'") == 2
            }),
            "broken was not paused again: {}",
            site.log("s")
        );
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE job_key = 'broken'"),
            4,
            "{}",
            site.log("s")
        );
    }

    #[test]
    fn each_firing_waits_its_deterministic_jitter() {
        let site = Site::new();
        let jitter = Duration::from_millis(900);
        site.write_jobs(
            "[[job]]\nname = \"spread\"\nevery = \"1s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             jitter = \"900ms\"\ncommand = [\"true\"]\n",
        );
        let _s = site.start("s", "2s");
        // Until at least 4 runs, one of them with a delay of 300 ms or more to show.
        let delays = || -> Vec<(String, i64, i64)> {
            // `count` reads a table not there yet as 0; `strings` would fail on it.
            if site.count("SELECT count(*) FROM exactly_runs WHERE job_key = 'spread'") == 0 {
                return Vec::new();
            }
            site.strings(
                "SELECT scheduled_at || ' ' || started_at FROM exactly_runs WHERE job_key = \
                 'spread'",
            )
            .iter()
            .map(|r| {
                let (slot, started) = r.split_once(' ').expect("two times");
                let want = exactly::schedule::jitter_for("spread", slot, jitter);
                let got = (ts(started) - ts(slot)).num_milliseconds();
                (slot.to_string(), want.as_millis() as i64, got)
            })
            .collect()
        };
        assert!(
            wait_until(Duration::from_secs(20), || {
                let d = delays();
                d.len() >= 4 && d.iter().any(|(_, want, _)| *want >= 300)
            }),
            "{:?}\n{}",
            delays(),
            site.log("s")
        );
        // Each firing starts its own delay after its slot (the same in every scheduler: a
        // hash of job and slot), never before, and within the jitter plus a second (a loaded
        // machine).
        for (slot, want, got) in delays() {
            assert!(
                got >= want - 2 && got <= want + 1000,
                "{slot}: wanted {want} ms, started after {got} ms"
            );
            assert!(want < 900);
        }
    }

    #[test]
    fn status_does_not_count_a_firing_waiting_out_its_jitter_as_missed() {
        let site = Site::new();
        let jitter = Duration::from_millis(4900);
        site.write_jobs(
            "[[job]]\nname = \"late\"\nevery = \"5s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             jitter = \"4900ms\"\ncommand = [\"true\"]\n",
        );
        let _s = site.start("s", "2s");
        // The first slot at least a second ahead whose jitter holds it back 3.3 s or more:
        // past the 2 s a reader allows any firing, inside the job's jitter, and still before
        // the second ahead of its due time in which the scheduler decides it.
        let mut slot_ms = (chrono::Utc::now().timestamp_millis() / 5000 + 1) * 5000;
        let (slot, wait) = loop {
            let slot = chrono::DateTime::from_timestamp_millis(slot_ms).expect("a time");
            let wait = exactly::schedule::jitter_for("late", &exactly::time::fmt(slot), jitter);
            if slot > chrono::Utc::now() + chrono::Duration::seconds(1)
                && wait >= Duration::from_millis(3300)
            {
                break (slot, wait);
            }
            slot_ms += 5000;
        };
        let look = slot + chrono::Duration::milliseconds(2200);
        assert!(wait_until(Duration::from_secs(60), || chrono::Utc::now() >= look));
        let j = status_job(&site, "late");
        let text = exactly::time::fmt(slot);
        assert_eq!(
            site.count(&format!(
                "SELECT count(*) FROM exactly_firings WHERE scheduled_at = '{text}'"
            )),
            0,
            "the firing at {text} (jitter {wait:?}) was decided early"
        );
        assert_eq!(j["missed_firings"], 0, "{j}");
        assert!(
            wait_until(Duration::from_secs(5), || {
                site.count(&format!(
                    "SELECT count(*) FROM exactly_runs WHERE scheduled_at = '{text}'"
                )) == 1
            }),
            "{}",
            site.log("s")
        );
    }

    #[test]
    fn a_firing_that_cannot_start_by_its_starting_deadline_is_missed() {
        let site = Site::new();
        site.write_jobs(
            "[[job]]\nname = \"prompt\"\nevery = \"2s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             starting_deadline = \"300ms\"\ncommand = [\"sh\", \"-c\", \"echo \
             $EXACTLY_SCHEDULED_AT >> ran\"]\n",
        );
        let s = site.start("s", "2s");
        assert!(
            wait_until(Duration::from_secs(10), || !site.lines("ran").is_empty()),
            "prompt never ran: {}",
            site.log("s")
        );
        // Frozen just after a run, it wakes 1.2 s after the next slot: inside the scheduler's
        // usual 2 s of slack, past the job's 300 ms deadline.
        s.signal(libc::SIGSTOP);
        let now = chrono::Utc::now();
        let ms = now.timestamp_millis();
        let slot_ms = (ms / 2000 + 1) * 2000;
        let slot = chrono::DateTime::from_timestamp_millis(slot_ms).expect("a time");
        let wake = slot + chrono::Duration::milliseconds(1200);
        let frozen = wait_until(Duration::from_secs(5), || chrono::Utc::now() >= wake);
        s.signal(libc::SIGCONT);
        assert!(frozen);
        let slot = exactly::time::fmt(slot);
        let state = format!(
            "SELECT count(*) FROM exactly_firings WHERE job_key = 'prompt' AND scheduled_at = \
             '{slot}' AND state = 'missed'"
        );
        assert!(
            wait_until(Duration::from_secs(5), || site.count(&state) == 1),
            "the firing at {slot} is not recorded missed: {:?}\n{}",
            site.strings("SELECT scheduled_at || ' ' || state FROM exactly_firings"),
            site.log("s")
        );
        assert_eq!(
            site.count(&format!(
                "SELECT count(*) FROM exactly_runs WHERE job_key = 'prompt' AND scheduled_at = \
                 '{slot}'"
            )),
            0
        );
        // It goes on: the next slot runs on time.
        let n = site.lines("ran").len();
        assert!(
            wait_until(Duration::from_secs(6), || site.lines("ran").len() > n),
            "{}",
            site.log("s")
        );
        assert!(!site.lines("ran").contains(&slot), "the missed firing ran");
        assert!(site.log("s").contains("starting_deadline"), "{}", site.log("s"));
    }

    #[test]
    fn a_firing_decided_late_by_a_frozen_scheduler_runs_late_before_its_next_slot() {
        let site = Site::new();
        // No starting_deadline: its window is the scheduler's 2 s of slack (no catch-up).
        site.write_jobs(
            "[[job]]\nname = \"late\"\nevery = \"10s\"\nlease = \"5s\"\noverlap = \"coalesce\"\n\
             command = [\"sh\", \"-c\", \"echo $EXACTLY_SCHEDULED_AT >> ran\"]\n",
        );
        let s = site.start("s", "2s");
        assert!(
            wait_until(Duration::from_secs(5), || site.log("s").contains("started")),
            "the scheduler did not start: {}",
            site.log("s")
        );
        // Frozen across a slot it was alive for, it wakes 3.5 s after it: past the 2 s, well
        // before the next slot (10 s). Frozen 1.5 s before the slot, before the second ahead
        // of it in which the slot would be decided (`EXACTLY_DECIDE_AHEAD_MS`).
        let ms = chrono::Utc::now().timestamp_millis() + 2000;
        let slot_ms = (ms / 10_000 + 1) * 10_000;
        let slot = chrono::DateTime::from_timestamp_millis(slot_ms).expect("a time");
        let freeze = slot - chrono::Duration::milliseconds(1500);
        assert!(wait_until(Duration::from_secs(12), || chrono::Utc::now() >= freeze));
        s.signal(libc::SIGSTOP);
        let wake = slot + chrono::Duration::milliseconds(3500);
        let frozen = wait_until(Duration::from_secs(6), || chrono::Utc::now() >= wake);
        s.signal(libc::SIGCONT);
        assert!(frozen);
        let slot = exactly::time::fmt(slot);
        assert!(
            wait_until(Duration::from_secs(5), || site.lines("ran").contains(&slot)),
            "the firing at {slot} did not run late: {:?}\n{}",
            site.strings("SELECT scheduled_at || ' ' || kind || ' ' || state FROM exactly_firings"),
            site.log("s")
        );
        // Recorded as a catch-up that ran (its end is recorded just after its command's).
        let fate = format!(
            "SELECT kind || ' ' || state FROM exactly_firings WHERE job_key = 'late' AND \
             scheduled_at = '{slot}'"
        );
        assert!(
            wait_until(Duration::from_secs(5), || {
                site.strings(&fate) == vec!["catchup ran".to_string()]
            }),
            "{:?}\n{}",
            site.strings(&fate),
            site.log("s")
        );
        // Its lag is its run's: started 3.5 s after its slot, no sooner.
        let started = site.strings(&format!(
            "SELECT started_at FROM exactly_runs WHERE job_key = 'late' AND scheduled_at = '{slot}'"
        ));
        assert_eq!(started.len(), 1, "{started:?}");
        let lag = ts(&started[0]) - ts(&slot);
        assert!(lag >= chrono::Duration::milliseconds(3400), "lag {lag}");
        assert!(lag < chrono::Duration::seconds(10), "lag {lag}");
        assert!(site.log("s").contains("run late"), "{}", site.log("s"));
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_firings WHERE state = 'missed'"),
            0,
            "{}",
            site.log("s")
        );
    }
}

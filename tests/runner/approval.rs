//! A run whose effect waits for a person's approval (`exactly effect --needs-approval` exits 4)
//! is recorded `awaiting_approval`, not `failed`: no failure counted, no pause, no failing
//! notification; `exactly approve` wakes its firing within a scheduler tick and the effect goes
//! out in seconds; `exactly deny` ends the firing `denied`.
use crate::on_both_backends;
use crate::support;
use chrono::Timelike;
use std::time::{Duration, Instant};
use support::http::Recorder;
use support::runner::*;

/// An hourly job whose effect needs approval, appending to `far.txt` when sent; it pauses
/// after one failure and a notifier tells of one failed run. Its minute is half an hour from
/// now: an `every = "1h"` job falls due at the top of each hour, and a test run then saw its
/// on-time firing beside the one under test.
fn hourly(far: &Recorder) -> String {
    let minute = (chrono::Utc::now().minute() + 30) % 60;
    format!(
        "[[job]]\nname = \"pay\"\nschedule = \"{minute} * * * *\"\nlease = \"30s\"\n\
         overlap = \"coalesce\"\n\
         pause_after_failures = 1\ncommand = {}\n\n[[notify]]\nname = \"ops\"\n\
         webhook = \"{}/hook\"\nfailing_runs = 1\n",
        sh("$X effect --needs-approval --action pay --target acme \
            --input slot=$EXACTLY_SCHEDULED_AT --terms 'Pay 120 EUR to ACME' \
            -- sh -c 'echo sent >> far.txt'"),
        far.url
    )
}

/// The pending approval's effect key, from `status --json`.
fn pending_key(site: &Site) -> String {
    let (_, json, _) = site.exactly(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("status --json");
    v["pending_approvals"][0]["effect_key"]
        .as_str()
        .unwrap_or_else(|| panic!("no pending approval: {json}"))
        .to_string()
}

fn job_json(site: &Site) -> serde_json::Value {
    let (_, json, _) = site.exactly(&["jobs", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).expect("jobs --json");
    v["jobs"]
        .as_array()
        .and_then(|j| j.iter().find(|j| j["job_key"] == "pay").cloned())
        .unwrap_or_else(|| panic!("no job pay: {json}"))
}

on_both_backends! {
    #[test]
    fn an_approval_round_trip_on_an_hourly_job_takes_seconds() {
        let site = Site::new();
        let far = Recorder::start();
        site.write_jobs(&hourly(&far));
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || site
                .count("SELECT count(*) FROM exactly_jobs WHERE job_key = 'pay'")
                == 1),
            "{}",
            site.log("s")
        );
        let (code, out, err) = site.exactly(&["trigger", "pay"]);
        // Waiting for approval is its own outcome, recorded as such: not a failure.
        assert_eq!(
            site.strings("SELECT outcome FROM exactly_runs"),
            ["awaiting_approval"],
            "trigger exit {code}: {out}{err}\n{}",
            site.log("s")
        );
        assert_eq!(
            site.strings("SELECT state FROM exactly_firings"),
            ["awaiting_approval"]
        );
        let j = job_json(&site);
        assert_eq!(j["state"], "awaiting_approval", "{j}");
        assert_eq!(
            (j["runs_failed"].as_u64(), j["paused"].as_bool()),
            (Some(0), Some(false)),
            "{j}"
        );
        let (_, text, _) = site.exactly(&["jobs"]);
        assert!(text.contains("waiting for approval"), "{text}");
        let (_, status, _) = site.exactly(&["status"]);
        assert!(status.contains("waiting for approval"), "{status}");
        let (_, check, _) = site.exactly(&["status", "--check"]);
        assert!(
            !check.contains("failing:") && check.contains("jobs_failing=0"),
            "{check}"
        );
        let (_, metrics, _) = site.exactly(&["metrics"]);
        assert!(
            metrics.contains("exactly_job_awaiting_approval{exactly_job=\"pay\"} 1")
                && metrics.contains("exactly_job_failing{exactly_job=\"pay\"} 0")
                && metrics.contains("exactly_job_runs_total{exactly_job=\"pay\",outcome=\"failed\"} 0"),
            "{metrics}"
        );
        // Two evaluations of the notifier: no failing_runs notification.
        std::thread::sleep(Duration::from_secs(5));
        let told: Vec<_> = far
            .requests()
            .into_iter()
            .filter(|r| r.body.contains("failing_runs"))
            .collect();
        assert!(told.is_empty(), "{told:?}");

        // Approved: the scheduler runs the firing again within a tick, and the effect goes out.
        let key = pending_key(&site);
        let asked = Instant::now();
        let (code, out, err) = site.exactly(&["approve", &key]);
        assert_eq!(code, 0, "{out}{err}");
        let delivered = wait_until(Duration::from_secs(20), || site.lines("far.txt").len() == 1);
        let took = asked.elapsed();
        println!(
            "approval round trip, hourly job: exactly approve to the far side's delivery {} ms",
            took.as_millis()
        );
        assert!(delivered, "never delivered:\n{}", site.log("s"));
        assert!(
            took < Duration::from_secs(5),
            "took {took:?}\n{}",
            site.log("s")
        );
        assert!(
            wait_until(Duration::from_secs(10), || site
                .strings("SELECT state FROM exactly_firings")
                == ["ran"]),
            "{:?}",
            site.strings("SELECT state || ' ' || coalesce(detail, '') FROM exactly_firings")
        );
        assert_eq!(
            site.strings("SELECT outcome FROM exactly_runs ORDER BY started_at"),
            ["awaiting_approval", "ok"]
        );
        assert_eq!(job_json(&site)["state"], "ok");
        assert_eq!(
            s.term(Duration::from_secs(15)),
            Some(0),
            "{}",
            site.log("s")
        );
        assert_eq!(site.lines("far.txt").len(), 1, "sent once");
    }

    #[test]
    fn a_denial_ends_the_waiting_firing_as_denied() {
        let site = Site::new();
        let far = Recorder::start();
        site.write_jobs(&hourly(&far));
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || site
                .count("SELECT count(*) FROM exactly_jobs WHERE job_key = 'pay'")
                == 1),
            "{}",
            site.log("s")
        );
        let (code, out, err) = site.exactly(&["trigger", "pay"]);
        assert_eq!(
            site.strings("SELECT state FROM exactly_firings"),
            ["awaiting_approval"],
            "trigger exit {code}: {out}{err}"
        );
        let key = pending_key(&site);
        let (code, out, err) = site.exactly(&["deny", &key]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(
            site.strings("SELECT state FROM exactly_firings"),
            ["denied"]
        );
        // Nothing runs it again.
        std::thread::sleep(Duration::from_secs(4));
        assert_eq!(
            s.term(Duration::from_secs(15)),
            Some(0),
            "{}",
            site.log("s")
        );
        assert_eq!(site.count("SELECT count(*) FROM exactly_runs"), 1);
        assert!(!site.exists("far.txt"));
    }

    /// With no scheduler running, a firing woken by its approval waits for one: a trigger then
    /// queues behind it, and says why in true words (its effect was approved, not "never
    /// happened").
    #[test]
    fn a_trigger_behind_an_approved_firing_says_it_was_approved() {
        let site = Site::new();
        let far = Recorder::start();
        site.write_jobs(&hourly(&far));
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || site
                .count("SELECT count(*) FROM exactly_jobs WHERE job_key = 'pay'")
                == 1),
            "{}",
            site.log("s")
        );
        let (code, out, err) = site.exactly(&["trigger", "pay"]);
        assert_eq!(
            site.strings("SELECT state FROM exactly_firings"),
            ["awaiting_approval"],
            "trigger exit {code}: {out}{err}"
        );
        assert_eq!(
            s.term(Duration::from_secs(15)),
            Some(0),
            "{}",
            site.log("s")
        );
        let key = pending_key(&site);
        let (code, out, err) = site.exactly(&["approve", &key]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(site.strings("SELECT state FROM exactly_firings"), ["retry"]);
        let (code, out, err) = site.exactly(&["trigger", "pay"]);
        let said = format!("{out}{err}");
        assert!(
            said.contains("whose effect was approved and waits for a scheduler to send it")
                && !said.contains("never happened"),
            "trigger exit {code}: {said}"
        );
        // Nothing was sent by the trigger: the approved effect waits for a scheduler.
        assert!(!site.exists("far.txt"));
    }
}

//! A job's `ping` (a dead man's switch, healthchecks.io's convention): `/start` as each run
//! starts, then the bare URL when it ends ok, or `/fail` with the exit code when it fails. A
//! ping that cannot be delivered never fails the run.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::http::Recorder;
use support::runner::*;

fn job(name: &str, ping: &str, cmd: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nevery = \"1s\"\nlease = \"5s\"\noverlap = \"coalesce\"\n\
         ping = \"{ping}\"\ncommand = {cmd}\n"
    )
}

on_both_backends! {
    #[test]
    fn a_run_pings_start_then_success_or_fail_with_its_exit_code() {
        let site = Site::new();
        let far = Recorder::start();
        site.write_jobs(&format!(
            "{}{}",
            job("good", &format!("{}/good", far.url), &sh("true")),
            job("bad", &format!("{}/bad/", far.url), &sh("exit 3")),
        ));
        let mut s = site.start("s", "5s");
        // The path without its query (`?rid=`, every_ping_carries_its_runs_rid).
        let path = |r: &support::http::Request| r.path.split('?').next().unwrap_or("").to_string();
        let has = |p: &str| far.requests().iter().any(|r| path(r) == p);
        assert!(
            wait_until(Duration::from_secs(10), || has("/good") && has("/bad/fail")),
            "pings seen: {:?}\n{}",
            far.requests(),
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        let seen = far.requests();
        for (job, end) in [("good", "/good"), ("bad", "/bad/fail")] {
            let paths: Vec<String> = seen
                .iter()
                .map(&path)
                .filter(|p| p.starts_with(&format!("/{job}")))
                .collect();
            assert_eq!(paths.first().map(String::as_str), Some(format!("/{job}/start").as_str()), "{paths:?}");
            assert_eq!(paths.get(1).map(String::as_str), Some(end), "{paths:?}");
        }
        let fail = seen.iter().find(|r| path(r) == "/bad/fail").expect("a /fail ping");
        assert_eq!(fail.method, "POST");
        assert!(fail.body.contains("exit_code=3"), "{:?}", fail.body);
        assert!(!seen.iter().any(|r| path(r) == "/good/fail"), "{seen:?}");
    }

    #[test]
    fn a_ping_nobody_answers_never_fails_the_run() {
        let site = Site::new();
        // Nothing listens on port 9 (discard) of 127.0.0.1 in a test machine: refused at once.
        site.write_jobs(&job(
            "good",
            "http://127.0.0.1:9/x",
            &sh("touch ran.$EXACTLY_FENCING_TOKEN"),
        ));
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || site.exists("ran.2")),
            "{}",
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE outcome <> 'ok'"),
            0,
            "{}",
            site.log("s")
        );
        assert!(
            site.log("s").lines().any(|l| l.contains("ping http://127.0.0.1:9/x/start?rid=") && l.contains("failed")),
            "{}",
            site.log("s")
        );
    }
}

#[test]
fn check_refuses_a_ping_that_is_not_an_http_url() {
    let site = Site::new();
    site.write_jobs(&job("good", "hc-ping.com/abc", &sh("true")));
    let (code, out, err) = site.exactly(&["check", &site.jobs()]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(format!("{out}{err}").contains("invalid ping"), "{out}{err}");
}

/// Each ping carries its run's id as healthchecks' `rid` (a UUID, the same on a run's `/start`
/// and its end, another for the next run), so the start and end of runs that overlap can be
/// paired. SQLite only: the database plays no part in a ping.
#[test]
fn every_ping_carries_its_runs_rid() {
    let _sqlite = support::backend::using(support::backend::Backend::Sqlite);
    let site = Site::new();
    let far = Recorder::start();
    site.write_jobs(&job("good", &format!("{}/good", far.url), &sh("true")));
    let mut s = site.start("s", "5s");
    let ends = || {
        far.requests()
            .iter()
            .filter(|r| r.path.split('?').next() == Some("/good"))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(15), || ends() >= 2),
        "pings seen: {:?}\n{}",
        far.requests(),
        site.log("s")
    );
    assert_eq!(
        s.term(Duration::from_secs(15)),
        Some(0),
        "{}",
        site.log("s")
    );
    let seen = far.requests();
    let rid = |r: &support::http::Request| -> String {
        let query = r.path.split_once('?').map(|(_, q)| q).unwrap_or("");
        let rid = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("rid="))
            .unwrap_or_else(|| panic!("no rid on {}", r.path));
        let shape: Vec<usize> = rid.split('-').map(str::len).collect();
        assert!(
            shape == [8, 4, 4, 4, 12] && rid.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
            "rid {rid} is not a UUID"
        );
        rid.to_string()
    };
    let starts: Vec<String> = seen
        .iter()
        .filter(|r| r.path.starts_with("/good/start"))
        .map(rid)
        .collect();
    let ended: Vec<String> = seen
        .iter()
        .filter(|r| r.path.split('?').next() == Some("/good"))
        .map(rid)
        .collect();
    assert!(ended.len() >= 2, "{seen:?}");
    for end in &ended {
        assert!(
            starts.contains(end),
            "an end ping {end} paired with no start: {seen:?}"
        );
    }
    assert_ne!(ended[0], ended[1], "two runs, one rid: {seen:?}");
}

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
        let has = |path: &str| far.requests().iter().any(|r| r.path == path);
        assert!(
            wait_until(Duration::from_secs(10), || has("/good") && has("/bad/fail")),
            "pings seen: {:?}\n{}",
            far.requests(),
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        let seen = far.requests();
        for (job, end) in [("good", "/good"), ("bad", "/bad/fail")] {
            let paths: Vec<&str> = seen
                .iter()
                .map(|r| r.path.as_str())
                .filter(|p| p.starts_with(&format!("/{job}")))
                .collect();
            assert_eq!(paths.first().copied(), Some(format!("/{job}/start").as_str()), "{paths:?}");
            assert_eq!(paths.get(1).copied(), Some(end), "{paths:?}");
        }
        let fail = seen.iter().find(|r| r.path == "/bad/fail").expect("a /fail ping");
        assert_eq!(fail.method, "POST");
        assert!(fail.body.contains("exit_code=3"), "{:?}", fail.body);
        assert!(!seen.iter().any(|r| r.path == "/good/fail"), "{seen:?}");
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
            site.log("s").contains("ping http://127.0.0.1:9/x/start failed"),
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

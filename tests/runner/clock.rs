//! A running `exactly run` whose wall clock is stepped (NTP correcting a clock that was fast):
//! libfaketime moves the process's wall clock through a timestamp file, read on every call,
//! while its monotonic clock is left alone, as a real step leaves it.
use crate::on_both_backends;
use crate::support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::runner::*;

/// The library behind `faketime` (Debian package `faketime`, installed by .ci/run).
fn libfaketime() -> PathBuf {
    let lib = ["x86_64-linux-gnu", "aarch64-linux-gnu", ""]
        .iter()
        .map(|d| {
            Path::new("/usr/lib")
                .join(d)
                .join("faketime/libfaketimeMT.so.1")
        })
        .find(|p| p.exists());
    lib.expect("libfaketimeMT.so.1 (Debian package faketime)")
}

/// The environment that puts a process on the clock the file `ts` holds (`+0`, `-3600`).
fn on_clock(ts: &Path) -> Vec<(String, String)> {
    [
        ("LD_PRELOAD", libfaketime().display().to_string()),
        ("FAKETIME_TIMESTAMP_FILE", ts.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn runs(site: &Site) -> i64 {
    site.lines("count").len() as i64
}

on_both_backends! {
    #[test]
    fn a_clock_stepped_back_an_hour_keeps_the_job_running() {
        let site = Site::new();
        let ts = site.path("clock");
        std::fs::write(&ts, "+0").expect("clock file");
        let count = site.path("count");
        site.write_jobs(&format!(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh(&format!("echo $EXACTLY_SCHEDULED_AT >> {}", count.display()))
        ));
        let env = on_clock(&ts);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut s = site.start_with_env("s", "5s", &env);
        assert!(
            wait_until(Duration::from_secs(15), || runs(&site) >= 2),
            "the job never ran: {}",
            site.log("s")
        );

        // NTP steps the clock back an hour.
        std::fs::write(&ts, "-3600").expect("clock file");
        let before = runs(&site);
        let kept_on = wait_until(Duration::from_secs(6), || runs(&site) >= before + 3);
        let after = runs(&site);
        eprintln!("runs before the step {before}, 6 s after it {after}");
        assert!(
            kept_on,
            "the job fell silent after the clock went back: {before} runs, then {after}\n{}",
            site.log("s")
        );
        assert!(
            site.log("s").contains("WARN job=- wall clock stepped back by 1h00m"),
            "the step is not logged: {}",
            site.log("s")
        );

        // status, on the same clock, does not promise the next firing an hour away.
        let out = Command::new(bin())
            .args(["--db", &site.db(), "status", "--json"])
            .envs(on_clock(&ts))
            .output()
            .expect("run exactly status");
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("status --json is JSON");
        let tick = v["jobs"]
            .as_array()
            .and_then(|a| a.iter().find(|j| j["job_key"] == "tick"))
            .expect("job tick in status");
        let next = tick["next_fire_at"].as_str().expect("next_fire_at");
        let last = site.lines("count").last().cloned().expect("a run");
        let (next, last) = (
            chrono::DateTime::parse_from_rfc3339(next).expect("next is a time"),
            chrono::DateTime::parse_from_rfc3339(&last).expect("slot is a time"),
        );
        assert!(
            (next - last).num_seconds() < 60,
            "status says the next firing is at {next}, the last run was at {last}"
        );

        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        // No slot ran twice, and no run overlapped another.
        assert_eq!(
            site.count(
                "SELECT count(*) FROM (SELECT scheduled_at FROM exactly_runs \
                 GROUP BY scheduled_at HAVING count(*) > 1) AS twice"
            ),
            0
        );
        let slots = site.lines("count");
        let mut unique = slots.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), slots.len(), "a slot ran twice: {slots:?}");
    }

    /// `exactly chaos --scenario clock-step`: the clock stepped back and forward under a
    /// running scheduler; the job runs after every step, no slot twice, no two copies at once.
    #[test]
    fn chaos_clock_step_keeps_firing_once_per_slot() {
        let site = Site::new();
        let out = Command::new(bin())
            .args(["--db", &site.db(), "chaos", "--scenario", "clock-step"])
            .args(["--iterations", "4", "--json", "--seed", "3"])
            .env_remove("EXACTLY_FAULT")
            .output()
            .expect("run exactly chaos");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr))
        });
        assert_eq!(out.status.code(), Some(0), "{v:#}");
        let s = &v["scenarios"]["clock-step"];
        assert_eq!(s["iterations"], 4, "{v:#}");
        assert_eq!(s["clock_steps"]["back"], 4, "{v:#}");
        assert_eq!(s["clock_steps"]["forward"], 4, "{v:#}");
        // A run after each step, on the new time.
        assert!(s["job_runs"].as_u64().is_some_and(|n| n >= 8), "{v:#}");
        assert_eq!(s["max_runs_per_firing"], 1, "{v:#}");
        for k in ["anomalies", "overlapping_copies"] {
            assert_eq!(s[k], 0, "{k}: {v:#}");
        }
    }

    /// A failed firing waits out its 3 s backoff when the clock steps back an hour meanwhile:
    /// its retry runs about 3 s after the failure (not an hour later), and the job keeps firing.
    #[test]
    fn a_retry_waiting_its_backoff_keeps_its_time_when_the_clock_steps_back() {
        retry_across_a_step("-3600");
    }

    /// ... and when it steps forward an hour: the retry still waits its backoff (a wall clock
    /// an hour ahead does not make it due at once).
    #[test]
    fn a_retry_waiting_its_backoff_keeps_its_time_when_the_clock_steps_forward() {
        retry_across_a_step("+3600");
    }
}

/// A 2 s job whose first run fails, with `retries = 1` and a 3 s backoff; the wall clock is
/// stepped by `step` seconds (libfaketime's `+3600`, `-3600`) while the retry waits. The retry
/// runs 1–8 s after the step (of the 3 s left, 400 ms were already waited), then the job
/// keeps firing.
fn retry_across_a_step(step: &str) {
    let site = Site::new();
    let ts = site.path("clock");
    std::fs::write(&ts, "+0").expect("clock file");
    // Its first run fails; every run notes its slot.
    let cmd = sh("echo $EXACTLY_SCHEDULED_AT >> count; [ -f failed ] || { touch failed; exit 1; }");
    site.write_jobs(&format!(
        "[[job]]\nname = \"tick\"\nevery = \"2s\"\nlease = \"1500ms\"\noverlap = \"coalesce\"\n\
         retries = 1\nretry_backoff = \"3s\"\ncommand = {cmd}\n"
    ));
    let env = on_clock(&ts);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut s = site.start_with_env("s", "5s", &env);
    assert!(
        wait_until(Duration::from_secs(15), || site.count(
            "SELECT count(*) FROM exactly_firings WHERE state = 'retry'"
        ) == 1),
        "the job never failed: {}",
        site.log("s")
    );
    // Let the scheduler see the retry wait begin, then NTP steps the clock while it waits.
    std::thread::sleep(Duration::from_millis(400));
    std::fs::write(&ts, step).expect("clock file");
    let stepped = std::time::Instant::now();
    let retried = wait_until(Duration::from_secs(8), || {
        let c = site.lines("count");
        c.len() >= 2 && c[1] == c[0]
    });
    let retry_after = stepped.elapsed();
    let kept_on = wait_until(Duration::from_secs(8), || runs(&site) >= 5);
    let slots = site.lines("count");
    assert_eq!(s.term(Duration::from_secs(10)), Some(0));
    eprintln!("step {step}: retry {retry_after:?} after it; runs {slots:?}");
    assert!(
        retried,
        "the retry did not run within 8 s of the step ({step}): runs {slots:?}\n{}",
        site.log("s")
    );
    assert!(
        retry_after >= Duration::from_millis(1000),
        "the retry hurried: {retry_after:?} after the step ({step})"
    );
    assert!(
        kept_on,
        "the job fell silent after the retry: runs {slots:?}\n{}",
        site.log("s")
    );
}

/// Berlin's spring night, on a real scheduler whose clock libfaketime starts just before it:
/// `0 2 * * *` with `dst_skipped = "skip"` does not run at the end of the skipped hour and is
/// recorded missed with the reason; the default policy runs it there (03:00 CEST, 01:00Z).
#[test]
fn a_firing_the_skip_policy_leaves_out_is_recorded_missed() {
    let site = Site::new();
    let ts = site.path("clock");
    std::fs::write(&ts, "@2026-03-29 00:59:57").expect("clock file");
    let mut jobs = String::new();
    for (name, policy) in [("skip", "dst_skipped = \"skip\"\n"), ("next", "")] {
        jobs.push_str(&format!(
            "[[job]]\nname = \"{name}\"\nschedule = \"0 2 * * *\"\ntimezone = \"Europe/Berlin\"\n\
             {policy}\
             lease = \"1m\"\ntimeout = \"10s\"\noverlap = \"coalesce\"\ncommand = {}\n\n",
            sh(&format!("echo {name} $EXACTLY_SCHEDULED_AT >> ran"))
        ));
    }
    site.write_jobs(&jobs);
    assert_eq!(site.exactly(&["init"]).0, 0);
    let mut env = on_clock(&ts);
    env.push(("TZ".into(), "UTC".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut s = site.start_with_env("s", "5s", &env);
    let firing = |job: &str| {
        site.strings(&format!(
            "SELECT scheduled_at || ' ' || state || ' ' || coalesce(detail, '') FROM \
             exactly_firings WHERE job_key = '{job}'"
        ))
    };
    assert!(
        wait_until(Duration::from_secs(15), || !firing("skip").is_empty()
            && site.lines("ran").iter().any(|l| l.starts_with("next"))),
        "skip: {:?}, ran: {:?}\n{}",
        firing("skip"),
        site.lines("ran"),
        site.log("s")
    );
    assert_eq!(
        s.term(Duration::from_secs(15)),
        Some(0),
        "{}",
        site.log("s")
    );
    assert_eq!(site.lines("ran"), ["next 2026-03-29T01:00:00.000Z"]);
    let skip = firing("skip");
    assert_eq!(skip.len(), 1, "{skip:?}");
    assert!(
        skip[0].starts_with("2026-03-29T01:00:00.000Z missed") && skip[0].contains("dst_skipped"),
        "{skip:?}"
    );
}

//! The scheduler's log through `tracing`: `RUST_LOG` filters it, `--log-format json` (or
//! `EXACTLY_LOG_FORMAT=json`) writes one JSON object per line.
use crate::support;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::runner::*;

/// A job that fails every second: a WARN line per run, among the scheduler's INFO lines.
const FAILING: &str = "[[job]]\nname = \"fails\"\nevery = \"1s\"\nlease = \"900ms\"\n\
                       timeout = \"800ms\"\noverlap = \"fail\"\ncommand = [\"false\"]\n";

/// Runs `exactly run` with `args` and `env` until its log holds a failed run; its stderr.
fn run_until_a_failure(site: &Site, args: &[&str], env: &[(&str, &str)]) -> String {
    let log = site.path("s.log");
    let mut child = Command::new(bin())
        .current_dir("/")
        .args(["--db", &site.db(), "run", &site.jobs(), "--owner", "s"])
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("EXACTLY_LOG_FORMAT")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start exactly run");
    let failed = wait_until(Duration::from_secs(20), || {
        site.log("s").contains("failed in")
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    let text = site.log("s");
    assert!(failed, "no failed run logged: {text}");
    text
}

#[test]
fn rust_log_warn_hides_the_info_lines() {
    let site = Site::new();
    site.write_jobs(FAILING);
    let log = run_until_a_failure(&site, &[], &[("RUST_LOG", "warn")]);
    assert!(
        log.lines()
            .any(|l| l.contains(" WARN job=fails run fails-")),
        "{log}"
    );
    assert!(
        !log.contains(" INFO "),
        "INFO lines under RUST_LOG=warn: {log}"
    );
}

#[test]
fn the_default_is_text_lines_from_info_up() {
    let site = Site::new();
    site.write_jobs(FAILING);
    let log = run_until_a_failure(&site, &[], &[]);
    assert!(log.contains(" INFO job=- scheduler s started"), "{log}");
    assert!(log.contains(" WARN job=fails run fails-"), "{log}");
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    for (args, env) in [
        (&["--log-format", "json"][..], &[][..]),
        (&[][..], &[("EXACTLY_LOG_FORMAT", "json")][..]),
    ] {
        let site = Site::new();
        site.write_jobs(FAILING);
        let log = run_until_a_failure(&site, args, env);
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
            .collect();
        let failed = lines
            .iter()
            .find(|v| {
                v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("failed in"))
            })
            .unwrap_or_else(|| panic!("{log}"));
        assert_eq!(failed["level"], "WARN", "{failed}");
        assert_eq!(failed["job"], "fails", "{failed}");
        assert!(
            failed["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{failed}"
        );
        let started = lines
            .iter()
            .find(|v| {
                v["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("scheduler s started"))
            })
            .unwrap_or_else(|| panic!("{log}"));
        assert_eq!(started["level"], "INFO");
        assert!(started.get("job").is_none(), "{started}");
    }
}

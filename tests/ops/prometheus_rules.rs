//! The shipped Prometheus alert rules (`assets/prometheus/alerts.yml`), checked by the real
//! `promtool`: their own unit tests pass, and on the series a real database gives through
//! `exactly metrics` (a job that failed every run, a healthy one, a stopped scheduler) the
//! failing-job and no-scheduler alerts fire for the right job. `.ci/run` installs promtool
//! (Debian's `prometheus` package); without it these tests fail, they never skip.
use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::runner::*;

fn assets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/prometheus")
}

/// `promtool ARGS`: (success, stdout and stderr).
fn promtool(args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "promtool could not be started ({e}): install Debian's prometheus package (.ci/run \
                 does)"
            )
        });
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_shipped_rules_pass_their_promtool_tests() {
    let (ok, out) = promtool(&["check", "rules", "alerts.yml"], &assets());
    assert!(ok, "promtool check rules: {out}");
    let (ok, out) = promtool(&["test", "rules", "alerts_test.yml"], &assets());
    assert!(ok, "promtool test rules: {out}");
}

/// `exactly metrics` as `series → value` (the series as printed: name and labels).
fn scrape(site: &Site) -> BTreeMap<String, String> {
    let (code, out, err) = site.exactly(&["metrics"]);
    assert_eq!(code, 0, "metrics: {err}");
    samples(&out)
}

/// [`scrape`] while the scheduler may not have made the schema yet: empty until it has.
fn scrape_early(site: &Site) -> BTreeMap<String, String> {
    match site.exactly(&["metrics"]) {
        (0, out, _) => samples(&out),
        _ => BTreeMap::new(),
    }
}

fn samples(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample is `series value`");
            (series.to_string(), value.to_string())
        })
        .collect()
}

/// The broken job's failed runs, whatever the label naming the job is called.
fn failed_runs(m: &BTreeMap<String, String>) -> f64 {
    m.iter()
        .find(|(s, _)| {
            s.starts_with("exactly_job_runs_total{")
                && s.contains(r#"="broken""#)
                && s.contains(r#"outcome="failed""#)
        })
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

/// A series as Prometheus stores it after scraping `exactly metrics --listen`: its own `job`
/// and `instance` labels added.
fn scraped(series: &str) -> String {
    const ADDED: &str = r#"job="exactly",instance="127.0.0.1:9464""#;
    match series.split_once('{') {
        Some((name, labels)) => format!("{name}{{{ADDED},{labels}"),
        None => format!("{series}{{{ADDED}}}"),
    }
}

/// At minute 60: the job that failed every run is failing (and only it), and no scheduler is
/// alive.
const EXPECTED: &str = r#"  alert_rule_test:
  - eval_time: 60m
    alertname: ExactlyJobFailing
    exp_alerts:
    - exp_labels: {severity: warning, instance: "127.0.0.1:9464", exactly_job: broken}
      exp_annotations: {summary: "job broken failed in the last hour and did not succeed"}
  - eval_time: 60m
    alertname: ExactlyNoSchedulerAlive
    exp_alerts:
    - exp_labels: {severity: critical, job: exactly, instance: "127.0.0.1:9464"}
      exp_annotations: {summary: "no exactly scheduler is alive on 127.0.0.1:9464: registered jobs are not firing"}
"#;

/// What the alerts read, from two real scrapes half an hour apart (the first while the
/// scheduler ran, the second after it stopped), judged by promtool at minute 60.
#[test]
fn the_failing_and_no_scheduler_alerts_fire_on_a_real_databases_series() {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"broken\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
         command = {}\n\n\
         [[job]]\nname = \"fine\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
         command = {}\n",
        sh("exit 3"),
        sh("true")
    ));
    let mut sched = site.start("s", "5s");
    let mut first = BTreeMap::new();
    assert!(
        wait_until(Duration::from_secs(20), || {
            first = scrape_early(&site);
            failed_runs(&first) >= 2.0
        }),
        "the broken job never failed twice: {}",
        site.log("s")
    );
    let before = failed_runs(&first);
    assert!(
        wait_until(Duration::from_secs(20), || failed_runs(&scrape(&site))
            > before),
        "no further failure: {}",
        site.log("s")
    );
    assert_eq!(
        sched.term(Duration::from_secs(15)),
        Some(0),
        "{}",
        site.log("s")
    );
    let second = scrape(&site);

    let wanted = [
        "exactly_job_runs_total",
        "exactly_schedulers_alive",
        "exactly_jobs_registered",
    ];
    let mut series = String::new();
    for (s, a) in &first {
        let name = s.split('{').next().unwrap_or(s);
        if !wanted.contains(&name) {
            continue;
        }
        let b = second
            .get(s)
            .unwrap_or_else(|| panic!("{s} gone from the second scrape"));
        series.push_str(&format!(
            "  - series: '{}'\n    values: '{a}x30 {b}x30'\n",
            scraped(s)
        ));
    }
    let test = format!(
        "rule_files: ['{}']\nevaluation_interval: 1m\ntests:\n- interval: 1m\n  input_series:\n\
         {series}{EXPECTED}",
        assets().join("alerts.yml").display()
    );
    let file = site.path("real_test.yml");
    std::fs::write(&file, &test).expect("write the test file");
    let (ok, out) = promtool(&["test", "rules", &file.to_string_lossy()], site.dir.path());
    assert!(ok, "promtool test rules on real series:\n{out}\n{test}");
}

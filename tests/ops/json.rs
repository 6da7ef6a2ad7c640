//! JSON for scripts from the control commands (`check`, `trigger`, `backfill`), and `check`'s
//! exit codes: errors exit 1, warnings are printed and exit 0 unless `--strict`; `run` refuses
//! what `check` calls an error.
use crate::support;
use serde_json::Value;
use std::time::Duration;
use support::runner::*;

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not one JSON object ({e}): {out}"))
}

#[test]
fn check_errors_exit_1_warnings_exit_0_unless_strict_and_json_lists_both() {
    let site = Site::new();
    // History says the job's runs take 3 s: over its 2 s interval, a risk a person may accept
    // (the fix may be on its way), so a warning. Over its 1 s lease too, which `exactly run`
    // renews: no risk. The lease is under three heartbeats, but the interval leaves no room
    // for a longer one: not said either.
    assert_eq!(site.exactly(&["init"]).0, 0);
    let c = site.conn();
    let now = chrono::Utc::now();
    for i in 0..20 {
        let at = (now - chrono::Duration::minutes(i + 1))
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        c.execute(
            "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
             started_at, ended_at, outcome, duration_ms) \
             VALUES (?1, 'slow', ?2, 'o', ?3, ?2, ?2, 'ok', 3000)",
            rusqlite::params![format!("slow-t{i}"), at, i],
        )
        .expect("a run");
    }
    drop(c);
    site.write_jobs(
        "[[job]]\nname = \"slow\"\nevery = \"2s\"\nlease = \"1s\"\ntimeout = \"1500ms\"\n\
         overlap = \"coalesce\"\ncommand = [\"true\"]\n",
    );
    let (code, out, err) = site.exactly(&["check", &site.jobs()]);
    assert_eq!(code, 0, "warnings alone pass: {out}{err}");
    assert!(
        out.contains(": slow: warning: observed p99 3.0s > interval 2.0s"),
        "{out}"
    );
    assert!(out.contains("ok with 1 warning(s)"), "{out}");
    let (code, _, _) = site.exactly(&["check", "--strict", &site.jobs()]);
    assert_eq!(code, 1, "--strict fails on warnings");
    let (code, out, _) = site.exactly(&["check", "--json", &site.jobs()]);
    assert_eq!(code, 0);
    let v = json(&out);
    assert_eq!(
        (v["errors"].as_u64(), v["warnings"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    assert_eq!(v["ok"], true);
    assert_eq!(v["problems"][0]["severity"], "warning");
    assert_eq!(v["problems"][0]["job"], "slow");

    site.write_jobs(
        "[[job]]\nname = \"poll\"\nevery = \"5m\"\nlease = \"1m\"\ncommand = [\"true\"]\n",
    );
    let (code, out, _) = site.exactly(&["check", "--json", &site.jobs()]);
    assert_eq!(code, 1, "{out}");
    let v = json(&out);
    assert_eq!(v["errors"], 1);
    assert_eq!(v["ok"], false);
    assert_eq!(v["problems"][0]["severity"], "error");
    assert!(
        v["problems"][0]["what"]
            .as_str()
            .is_some_and(|w| w.contains("missing overlap policy")),
        "{v}"
    );
    // And `run` refuses it.
    let (code, _, err) = site.exactly(&["run", &site.jobs()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("refusing to run"), "{err}");
}

#[test]
fn trigger_and_backfill_json() {
    let site = Site::new();
    let cmd = sh(
        "$X effect --action report --target ops --input month=2026-01 \
         -- sh -c 'echo $EXACTLY_SCHEDULED_AT >> far.txt'",
    );
    site.write_jobs(&format!(
        "[[job]]\nname = \"report\"\nschedule = \"0 0 * * *\"\nlease = \"5s\"\n\
         overlap = \"coalesce\"\ncommand = {cmd}\n"
    ));
    let mut s = site.start("s", "1s");
    assert!(wait_until(Duration::from_secs(5), || site.count(
        "SELECT count(*) FROM exactly_jobs WHERE job_key = 'report'"
    ) == 1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(s.term(Duration::from_secs(5)), Some(0));

    let (code, out, err) = site.exactly(&["trigger", "--json", "report"]);
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["result"], "started");
    assert_eq!(v["job"], "report");
    assert_eq!(v["exit"], 0);
    assert_eq!(v["run"]["outcome"], "ok");
    assert_eq!(v["run"]["effects"]["done"], 1);
    assert!(v["run"]["run_id"].as_str().is_some_and(|r| !r.is_empty()));
    let (code, out, _) = site.exactly(&["trigger", "--json", "report"]);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["run"]["effects"]["suppressed"], 1);
    assert_eq!(site.lines("far.txt").len(), 1);
    // The two runs are in the run-duration histogram, and in the all-time counter.
    let (code, m, _) = site.exactly(&["metrics"]);
    assert_eq!(code, 0);
    assert!(
        m.contains("# TYPE exactly_job_run_duration_seconds histogram"),
        "{m}"
    );
    assert!(
        m.contains("exactly_job_run_duration_seconds_count{exactly_job=\"report\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("exactly_job_run_duration_seconds_bucket{le=\"+Inf\",exactly_job=\"report\"} 2")
            || m.contains(
                "exactly_job_run_duration_seconds_bucket{exactly_job=\"report\",le=\"+Inf\"} 2"
            ),
        "{m}"
    );
    assert!(
        m.contains("exactly_job_runs_total{exactly_job=\"report\",outcome=\"ok\"} 2"),
        "{m}"
    );

    let now = chrono::Utc::now();
    let ts = |d: chrono::Duration| (now - d).format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let (from, to) = (
        ts(chrono::Duration::hours(72) - chrono::Duration::minutes(1)),
        ts(chrono::Duration::hours(24) + chrono::Duration::minutes(1)),
    );
    let args = ["backfill", "--json", "report", "--from", &from, "--to", &to];
    let (code, out, err) = site.exactly(&args);
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    let slots = v["slots"].as_array().expect("slots");
    assert_eq!(slots.len(), 2, "{v}");
    assert!(
        slots
            .iter()
            .all(|s| s["result"] == "ran" && s["run"]["effects"]["suppressed"] == 1),
        "{v}"
    );
    let (code, out, _) = site.exactly(&args);
    assert_eq!(code, 0);
    let v = json(&out);
    assert!(
        v["slots"]
            .as_array()
            .expect("slots")
            .iter()
            .all(|s| s["result"] == "duplicate"),
        "{v}"
    );
    assert_eq!(site.lines("far.txt").len(), 1);
}

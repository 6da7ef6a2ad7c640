//! `exactly demo --no-ui` drives every counter the dashboard shows.
use crate::support;
use support::cli::Env;

#[test]
fn the_demo_moves_every_counter_within_twenty_seconds() {
    let env = Env::new();
    let (code, _, err) = env.run(&["demo", "--no-ui", "--for", "20s"]);
    assert_eq!(code, 0, "{err}");
    let (code, json, err) = env.run(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let t = &v["totals"];
    for counter in [
        "duplicates_suppressed",
        "fenced_writes",
        "unknown",
        "pending_approvals",
        "claimed_never_submitted",
    ] {
        assert!(
            t[counter].as_u64().unwrap_or(0) > 0,
            "{counter} did not move: {t}"
        );
    }
    let with_percentiles = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["p50_ms"].is_u64() && j["p99_ms"].is_u64())
        .count();
    assert!(
        with_percentiles >= 8,
        "{with_percentiles} jobs with p50/p99: {}",
        v["jobs"]
    );
    let over = v["jobs"].as_array().unwrap().iter().any(|j| {
        j["warnings"].as_array().is_some_and(|w| {
            w.iter()
                .any(|s| s.as_str().unwrap_or("").contains("> interval"))
        })
    });
    assert!(over, "no job shows p99 > interval");
    // The checklist does its work in the first minute: a run-keyed action, an action with no
    // observer, a lease its holder outlives are each a failed rule (exit 1).
    let (code, json, err) = env.run(&["doctor", "--json"]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let verdict = |job: &str, rule: &str| -> String {
        let j = v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job_key"] == job);
        let r = j.and_then(|j| {
            j["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["rule"] == rule)
        });
        r.map_or("missing".into(), |r| {
            r["verdict"].as_str().unwrap_or("").to_string()
        })
    };
    for (job, rule) in [
        ("welcome-email", "key-from-facts"),
        ("slow-report", "far-side"),
        ("legacy-export", "lease-bounds"),
    ] {
        assert_eq!(verdict(job, rule), "fail", "{job} {rule}: {v:#}");
    }
    assert_eq!(verdict("daily-digest", "key-from-facts"), "ok", "{v:#}");
}

#[test]
fn the_sample_jobs_file_passes_check() {
    let env = Env::new();
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/jobs.toml");
    let (code, out, err) = env.run(&["check", sample]);
    assert_eq!(code, 0, "{out}{err}");
}

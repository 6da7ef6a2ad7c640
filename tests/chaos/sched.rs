//! `deploy-restart` and `blue-green` on the real scheduler: SIGTERM of `exactly run` mid-run
//! then a new one; two schedulers on one jobs file, one SIGKILLed (alone, or with its runs) and
//! replaced; observers slower than the lease with the scheduler SIGKILLed at random. Zero
//! duplicates, zero losses, zero leaks, at most 3 runs a firing, never two runs of one firing
//! alive at once.
use serde_json::Value;
use std::process::Command;

fn scenario(name: &str, iterations: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_exactly"))
        .args([
            "chaos",
            "--json",
            "--seed",
            "11",
            "--iterations",
            iterations,
        ])
        .args(["--scenario", name])
        .env_remove("EXACTLY_DB")
        .output()
        .expect("run exactly chaos");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(out.status.code(), Some(0), "{name}: {v:#}");
    for k in [
        "duplicate_effects",
        "lost_effects",
        "claimed_leaked",
        "unknown_unresolved",
        "unexplained_unknowns",
        "anomalies",
        "overlapping_copies",
    ] {
        assert_eq!(v[k].as_u64(), Some(0), "{name}: {k}: {v:#}");
    }
    assert_eq!(v["intended_effects"], v["far_side_requests"], "{v:#}");
    let most = v["max_runs_per_firing"]
        .as_u64()
        .expect("max_runs_per_firing");
    assert!((1..=3).contains(&most), "{name}: {v:#}");
    v
}

#[test]
fn deploy_restart_and_blue_green_on_the_real_scheduler() {
    let v = scenario("deploy-restart", "10");
    assert_eq!(v["kills"]["scheduler_sigterm"].as_u64(), Some(10), "{v:#}");
    let v = scenario("blue-green", "8");
    let k = &v["kills"];
    let kills =
        k["scheduler_sigkill"].as_u64().unwrap_or(0) + k["host_sigkill"].as_u64().unwrap_or(0);
    assert_eq!(kills, 8, "{v:#}");
}

#[test]
fn slow_observers_and_random_scheduler_kills_run_each_firing_once_at_a_time() {
    let v = scenario("slow-observer", "12");
    assert_eq!(v["kills"]["scheduler_sigkill"].as_u64(), Some(12), "{v:#}");
    let per = v["runs_per_firing"].as_object().expect("runs_per_firing");
    assert!(
        per.keys()
            .all(|k| k.parse::<u64>().is_ok_and(|n| (1..=3).contains(&n))),
        "{v:#}"
    );
}

//! `exactly chaos --scenario failover`: a primary and its standby (two local PostgreSQL servers
//! the scenario starts), asynchronous and then synchronous, the primary SIGKILLed after a range
//! (asynchronous: one it acknowledged and never streamed), the standby promoted, the range run
//! again. A write sent to the standby alone must say it is a standby. With the failover guard, no
//! fencing token is handed out twice and no effect reaches the far side twice; with the guard
//! off (`--unguarded`), both happen, so the test can see them. A missing server binary fails
//! the scenario (and the test): it is never skipped.
use serde_json::Value;
use std::process::Command;

fn failover(unguarded: bool) -> (i32, Value, String) {
    let mut cmd = Command::new(crate::support::bin());
    cmd.args([
        "chaos",
        "--scenario",
        "failover",
        "--iterations",
        "20",
        "--json",
    ]);
    if unguarded {
        cmd.arg("--unguarded");
    }
    let out = cmd
        .env_remove("EXACTLY_FAILOVER_GUARD")
        .env_remove("EXACTLY_DB")
        .output()
        .expect("run exactly chaos");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    (out.status.code().unwrap_or(-1), v, stderr)
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing or not a count in {v:#}"))
}

#[test]
fn an_asynchronous_failover_hands_out_no_token_twice_and_sends_no_effect_twice() {
    let (code, v, stderr) = failover(false);
    assert_eq!(v["failures"], serde_json::json!([]), "{v:#}\n{stderr}");
    assert_eq!(n(&v, "iterations"), 40, "{v:#}");
    assert_eq!(n(&v, "failovers_seen"), 2, "{v:#}");
    assert_eq!(n(&v, "tokens_reissued"), 0, "{v:#}");
    assert_eq!(n(&v, "duplicate_effects"), 0, "{v:#}");
    // The keys the asynchronous round's promoted ledger lost: those with an observer were found
    // sent and settled, those without one wait for a person. The synchronous round lost none
    // and holds none.
    assert_eq!(n(&v, "held_for_person"), 10, "{v:#}");
    assert_eq!(n(&v, "far_side_requests"), 80, "one request per key: {v:#}");
    assert_eq!(n(&v, "intended_effects"), 80, "{v:#}");
    assert!(
        v["not_run"].as_object().is_none_or(|m| m.is_empty()),
        "{v:#}"
    );
    assert_eq!(code, 0, "{v:#}\n{stderr}");
}

#[test]
fn with_the_failover_guard_off_the_duplicates_show() {
    let (code, v, stderr) = failover(true);
    assert_eq!(v["failures"], serde_json::json!([]), "{v:#}\n{stderr}");
    assert_eq!(n(&v, "failovers_seen"), 2, "{v:#}");
    // All from the asynchronous round: the synchronous one loses nothing, guarded or not.
    assert_eq!(n(&v, "tokens_reissued"), 20, "{v:#}");
    assert_eq!(n(&v, "duplicate_effects"), 20, "{v:#}");
    assert_eq!(n(&v, "held_for_person"), 0, "{v:#}");
    assert_eq!(code, 1, "an unguarded run never passes: {v:#}");
}

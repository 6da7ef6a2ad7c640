//! The harness must be able to fail: the same workload without the ledger's guard (the bare
//! client, retried naively) must report duplicates and exit 1.
use serde_json::Value;
use std::process::Command;

#[test]
fn unguarded_workload_reports_duplicates() {
    let out = Command::new(env!("CARGO_BIN_EXE_exactly"))
        .args([
            "chaos",
            "--unguarded",
            "--json",
            "--seed",
            "7",
            "--iterations",
            "14",
            "--scenario",
            "kill-mid-effect",
            "--scenario",
            "lost-response",
            "--scenario",
            "duplicate-registration",
        ])
        .env_remove("EXACTLY_FAULT")
        .output()
        .expect("run exactly chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(out.status.code(), Some(1), "{v:#}");
    assert_eq!(v["guarded"], false);
    let dups = v["duplicate_effects"].as_u64().expect("count");
    assert!(dups > 0, "the unguarded run must see duplicates: {v:#}");
    for s in ["kill-mid-effect", "lost-response", "duplicate-registration"] {
        let d = v["scenarios"][s]["duplicate_effects"]
            .as_u64()
            .expect("count");
        assert!(d > 0, "{s}: no duplicates seen without the guard");
    }
    // Numbers, not `Option`s: `Some(n) > None` holds, so a missing field would pass.
    let requests = v["far_side_requests"].as_u64().expect("far_side_requests");
    let intended = v["intended_effects"].as_u64().expect("intended_effects");
    assert!(requests > intended, "{v:#}");
}

#[test]
fn far_side_records_every_request_without_deduplicating() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("far.sock");
    let exe = env!("CARGO_BIN_EXE_exactly");
    let mut serve = Command::new(exe)
        .args(["far-side", "serve", "--socket"])
        .arg(&sock)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("serve");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(serve.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("ready");
    assert_eq!(line.trim(), "ready");
    let run = |sub: &str| {
        Command::new(exe)
            .args(["far-side", sub, "--socket"])
            .arg(&sock)
            .env("EXACTLY_EFFECT_KEY", "k1")
            .output()
            .expect("client")
            .status
            .code()
    };
    assert_eq!(run("seen"), Some(1), "nothing arrived yet");
    assert_eq!(run("send"), Some(0));
    assert_eq!(run("send"), Some(0));
    assert_eq!(run("seen"), Some(0));
    let out = Command::new(exe)
        .args(["far-side", "send", "--socket"])
        .arg(&sock)
        .env("EXACTLY_EFFECT_KEY", "k1")
        .output()
        .expect("client");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "far-side receipt 3",
        "every arrival is counted"
    );
    let _ = serve.kill();
    let _ = serve.wait();
    // Nobody listening: the client promises nothing was sent.
    assert_eq!(run("send"), Some(75));
    assert_eq!(run("seen"), Some(2));
}

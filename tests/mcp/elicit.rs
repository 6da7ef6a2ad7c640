//! Elicitation: a held call's approval asked of the person at the agent's client as well as
//! by `exactly approve`; one approval, consumed once, whichever answers first.
use crate::{lines, outcome, World};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn booking() -> Value {
    json!([["book_table", {"restaurant": "Luigi", "guests": 2}]])
}

fn key() -> String {
    let mut inputs = serde_json::Map::new();
    inputs.insert("guests".into(), json!(2));
    exactly::key::effect_key("book_table", "Luigi", &exactly::key::input_digest(&inputs))
        .to_string()
}

/// The client answering elicitations with `answer`, run to its end: its answers, and the
/// messages it was asked.
fn run(w: &World, answer: &str) -> (Vec<Value>, String, String) {
    let log = w.env.path("asked");
    let out = w
        .client_spec(
            booking(),
            json!({"elicit": {"answer": answer, "log": log}}),
            &[],
        )
        .wait_with_output()
        .expect("MCP client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{:?}\n{err}", answers.last());
    (
        answers,
        err,
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

/// `exactly approve KEY` once more: it finds the approval decided, and says by whom.
fn decided_by(w: &World) -> String {
    let (_, out, err) = w.env.run(&["approve", &key()]);
    format!("{out}{err}")
}

#[test]
fn the_client_accepting_approves_the_held_call() {
    let w = World::guarded();
    let (answers, err, asked) = run(&w, "accept");
    assert_eq!(
        outcome(&answers[1]),
        "done",
        "{}\n{err}",
        answers[1]["result"]
    );
    assert!(asked.contains(&key()), "{asked}");
    assert_eq!(asked.lines().count(), 1, "{asked}");
    assert_eq!(w.sent(), ["booked|Luigi|2"]);
    let by = decided_by(&w);
    assert!(by.contains("by mcp-client"), "{by}");
}

#[test]
fn the_client_declining_denies_the_held_call() {
    let w = World::guarded();
    let (answers, err, asked) = run(&w, "decline");
    assert_eq!(
        outcome(&answers[1]),
        "cancelled",
        "{}\n{err}",
        answers[1]["result"]
    );
    assert!(asked.contains(&key()), "{asked}");
    assert!(w.sent().is_empty(), "{:?}", w.sent());
    let by = decided_by(&w);
    assert!(by.contains("by mcp-client"), "{by}");
}

/// `exactly approve` answers first: the call goes once, on that approval; the client's
/// accept, later, decides nothing.
#[test]
fn exactly_approve_first_wins_over_the_client() {
    let w = World::guarded();
    let log = w.env.path("asked");
    let c = w.client_spec(
        booking(),
        json!({"elicit": {"answer": "accept_once_sent", "log": log}}),
        &[],
    );
    let until = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log).is_ok_and(|s| s.contains(&key())) {
        assert!(Instant::now() < until, "the client was never asked");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, _, e) = w.env.run(&["approve", &key()]);
    assert_eq!(code, 0, "{e}");
    let out = c.wait_with_output().expect("client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        outcome(&answers[1]),
        "done",
        "{}\n{err}",
        answers[1]["result"]
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(w.sent(), ["booked|Luigi|2"]);
    let by = decided_by(&w);
    assert!(
        by.contains("already consumed by") && !by.contains("mcp-client"),
        "{by}"
    );
}

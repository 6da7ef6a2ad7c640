//! `exactly doctor` over a ledger the gateway wrote: rule 4 (`far-side`) sees the observer
//! tool mcp.toml names, and fails where it names none.
use crate::{mail, outcome, World};
use serde_json::{json, Value};

/// The verdict and evidence of rule `far-side` for the gateway's job, `mail`.
fn far_side(w: &World) -> (String, String) {
    let (_, out, err) = w.env.run(&["doctor", "--json", "--job", "mail"]);
    let v: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("doctor --json ({e}): {out} {err}"));
    let rule = v["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["job_key"] == "mail"))
        .and_then(|j| j["rules"].as_array())
        .and_then(|rules| rules.iter().find(|r| r["rule"] == "far-side"))
        .unwrap_or_else(|| panic!("no far-side rule for mail in {v}"));
    let s = |k: &str| rule[k].as_str().unwrap_or_default().to_string();
    (s("verdict"), s("evidence"))
}

#[test]
fn doctor_sees_the_observer_tool_of_mcp_toml() {
    let w = World::guarded();
    let (answers, err) = w.answers(json!([mail("hal@example.com", "seen")]));
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    let (verdict, evidence) = far_side(&w);
    assert_ne!(verdict, "fail", "{evidence}");
    assert!(
        evidence.contains("1 effect recorded an observer"),
        "{evidence}"
    );
}

#[test]
fn doctor_fails_a_gateway_tool_without_an_observer() {
    let w = World::guarded();
    w.write_config_text("lease = \"3s\"\n\n[[tool]]\nname = \"send_email\"\ntarget = \"to\"\n");
    let (answers, err) = w.answers(json!([mail("ida@example.com", "blind")]));
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    let (verdict, evidence) = far_side(&w);
    assert_eq!(verdict, "fail", "{evidence}");
    assert!(evidence.contains("send_email"), "{evidence}");
}

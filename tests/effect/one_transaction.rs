//! The one-transaction path (reserve and mark `submitted` together) is taken only when nothing
//! stands in its way: an approval once asked for binds every later caller, whatever its flags.
use crate::support;
use support::cli::{far_count, Env};

/// Paying carol 10 under `token` (with `flags`): the far side appends the key to `far`, then
/// the command exits `exit`.
fn effect_args(token: &str, far: &str, exit: &str, flags: &[&str]) -> Vec<String> {
    flags
        .iter()
        .fold(
            support::effect_args("pay", token, "pay", "carol").input("amount=10"),
            |a, f| a.arg(f),
        )
        .sh(&format!(
            "echo \"$EXACTLY_EFFECT_KEY\" >> {far}; exit {exit}"
        ))
}

/// An approved effect whose command promised "nothing sent" (exit 75) loses its ledger row and
/// gets its approval back. A later caller without `--needs-approval` finds no row — but the
/// approval binds it: it must go the full way and consume the approval as it sends, so the
/// approval is not left looking unused (and usable again).
#[test]
fn an_approval_with_no_ledger_row_still_binds_a_caller_without_the_flag() {
    let env = Env::new();
    let token = env.claim("pay", "10m").to_string();
    let far = env.path("far.txt");
    std::fs::write(&far, "").expect("far side");
    let f = far.to_str().expect("utf8");
    let key = env
        .run(&[
            "key",
            "--action",
            "pay",
            "--target",
            "carol",
            "--input",
            "amount=10",
        ])
        .1
        .trim()
        .to_string();
    let first = effect_args(&token, f, "0", &["--needs-approval"]);
    let (code, _, err) = env.run(&support::strs(&first));
    assert_eq!(code, 4, "awaiting approval: {err}");
    assert_eq!(env.run(&["approve", &key]).0, 0);
    // Approved; the command sends nothing and says so: the row goes, the approval comes back.
    let not_sent = effect_args(&token, "/dev/null", "75", &["--needs-approval"]);
    let (code, _, err) = env.run(&support::strs(&not_sent));
    assert_eq!(code, 75, "{err}");
    assert_eq!(env.state_of(&key), None, "the reservation was released");
    assert_eq!(
        env.sql_count("SELECT count(*) FROM exactly_approvals WHERE state = 'approved'"),
        1
    );
    // A caller without the flag: sends once, and the approval is used up with it.
    let plain = effect_args(&token, f, "0", &[]);
    let (code, _, err) = env.run(&support::strs(&plain));
    assert_eq!(code, 0, "{err}");
    assert_eq!(far_count(&far, &key), 1);
    assert_eq!(env.state_of(&key).as_deref(), Some("done"));
    assert_eq!(
        env.sql_count("SELECT count(*) FROM exactly_approvals WHERE state = 'consumed'"),
        1,
        "the approval must be consumed by the send it allowed"
    );
}

/// The common case takes one transaction: after `exactly effect` needing no approval, the row
/// went from nothing to `submitted` in one commit (version 1) and then to `done` (version 2).
#[test]
fn an_effect_needing_no_approval_commits_submitted_with_its_reservation() {
    let env = Env::new();
    let token = env.claim("pay", "10m").to_string();
    let far = env.path("far.txt");
    std::fs::write(&far, "").expect("far side");
    let args = effect_args(&token, far.to_str().expect("utf8"), "0", &[]);
    let args = support::strs(&args);
    let (code, _, err) = env.run(&args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        env.sql_count("SELECT count(*) FROM effect_ledger WHERE state = 'done' AND version = 2"),
        1
    );
    // A second run of the same effect sends nothing.
    let (code, _, err) = env.run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("duplicate suppressed"), "{err}");
    let key = env
        .run(&[
            "key",
            "--action",
            "pay",
            "--target",
            "carol",
            "--input",
            "amount=10",
        ])
        .1
        .trim()
        .to_string();
    assert_eq!(far_count(&far, &key), 1);
}

//! The window after an asynchronous failover, by default: it lasts until every effect of the old
//! timeline's last leases is accounted for, not a fixed time. (The failover as
//! `fake_failover.rs` makes it: the recorded timeline rewritten, the real guard.)
use crate::fake_failover::{exactly, Site};
use support::backend::with_client;

use crate::support;

fn effect(db: &str, token: &str, target: &str) -> (i32, String) {
    both(exactly(
        db,
        &[
            "effect", "--job", "j", "--token", token, "--action", "send", "--target", target, "--",
            "true",
        ],
    ))
}

/// An exit code and the output (stdout, then stderr).
fn both((code, out, err): (i32, String, String)) -> (i32, String) {
    (code, format!("{out}{err}"))
}

fn state(db: &str, target: &str) -> String {
    with_client(db, |c| {
        c.query_one(
            "SELECT state FROM effect_ledger WHERE target_id = $1",
            &[&target],
        )
        .map(|r| r.get(0))
    })
    .unwrap_or_else(|e| panic!("the row of {target}: {e}"))
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn the_default_window_closes_when_the_old_timelines_last_effects_are_settled() {
    let site = Site::new(2);
    let db = site.db();
    // Under the job's last lease of the old timeline (token 2), an effect left `submitted`: the
    // old primary may have sent it. Under an earlier lease (token 1), one long `unknown`: not of
    // the last lease period, it does not hold the window.
    site.fail_over(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
           target_id, created_at, updated_at) VALUES
           ('last-lease', 'j', 'r2', 2, 'submitted', 'last-lease',
            '2026-01-02T00:00:00.000Z', '2026-01-02T00:00:00.000Z'),
           ('earlier-lease', 'j', 'r1', 1, 'unknown', 'earlier-lease',
            '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
    );
    let (code, token) = both(exactly(
        db,
        &["lease", "claim", "--job", "j", "--for", "1m"],
    ));
    assert_eq!(code, 0, "{token}");
    let said = token.clone();
    let token = token
        .lines()
        .find(|l| l.trim().parse::<i64>().is_ok())
        .expect("the token")
        .trim()
        .to_string();
    // The hour kept for keys the promoted server lost entirely (only time bounds them) is
    // made to have passed: what is left is what the ledger accounts for.
    with_client(db, |c| {
        c.batch_execute("UPDATE exactly_meta SET value = 0 WHERE name = 'failover_floor_until_ms'")
    })
    .expect("the hour passed");
    // While the old lease's effect is open, a key without a row is held for its check.
    let (code, out) = effect(db, &token, "k1");
    assert_eq!(
        code, 5,
        "not held while the old lease's effect is open: {out}"
    );
    assert_eq!(state(db, "k1"), "unknown");
    // Settled: every effect of the old timeline's last lease is accounted for.
    let (code, out) = both(exactly(
        db,
        &["resolve", "last-lease", "--happened", "--force"],
    ));
    assert_eq!(code, 0, "{out}");
    let (code, out) = effect(db, &token, "k2");
    assert_eq!(
        code, 0,
        "the window stayed open once all was accounted for: {out}"
    );
    assert_eq!(state(db, "k2"), "done");
    let until = site.meta("failover_window_until_ms");
    assert_eq!(until, 0, "the window is recorded closed");
    assert!(said.contains("accounted for"), "{said}");
}

/// The window waits for the newest lease of the old timeline, compared as times: a lease row
/// holding no time (which SQL's max() over the text would pick, hiding every real lease) is
/// named, not waited for, and hides nothing.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn a_lease_holding_no_time_hides_no_real_lease_from_the_window() {
    let site = Site::new(1);
    let db = site.db();
    let held = exactly::time::now() + chrono::Duration::hours(2);
    let held_s = exactly::time::fmt(held);
    site.fail_over(&format!(
        "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at) VALUES
           ('held', 'old', 7, '{held_s}', '{held_s}'),
           ('garbled', 'old', 8, '9999-99-99T99:99:99.999Z', '{held_s}');"
    ));
    let (code, said) = both(exactly(
        db,
        &["lease", "claim", "--job", "j", "--for", "1m"],
    ));
    assert_eq!(code, 0, "{said}");
    assert_eq!(
        site.meta("failover_leases_until_ms"),
        held.timestamp_millis(),
        "{said}"
    );
    assert!(
        said.contains("the lease of job(s) garbled holds no time"),
        "{said}"
    );
    assert!(
        said.contains("1 lease(s) holding no time not waited for"),
        "{said}"
    );
}

//! A failover as every reader shows it, and the tokens it raises, the failover made as
//! `fake_failover.rs` makes it: the recorded timeline rewritten.
use crate::fake_failover::{exactly, ok, Site};
use crate::support;
use serde_json::Value;
use std::process::Command;
use support::backend::with_client;

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn a_failover_raises_every_token_and_shows_in_status_metrics_and_doctor() {
    let site = Site::new(3);
    let db = site.db();
    // A row left `claimed` (the seed's SQL): the old primary may have sent it since.
    site.fail_over(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
           created_at, updated_at) VALUES ('left-claimed', 'j', 'r', 3, 'claimed',
           '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z');",
    );
    // A read command meets the failover first: it changes nothing (the next writer records it).
    let status: Value = serde_json::from_str(&ok(db, &["status", "--json"])).expect("JSON");
    assert_eq!(status["failovers"], 0, "{status:#}");
    let recorded = site.meta("timeline");
    assert!(
        recorded > 100,
        "a read command wrote the timeline: {recorded}"
    );
    let (code, token, err) = exactly(db, &["lease", "claim", "--job", "j", "--for", "1m"]);
    assert_eq!(code, 0, "{token}{err}");
    // Above every token the old timeline could have handed out: the next multiple of 2^32.
    assert_eq!(token.trim(), "4294967297", "{err}");
    assert!(err.contains("failed over"), "{err}");
    // A job the promoted server never heard of starts above the raise too.
    let fresh = ok(db, &["lease", "claim", "--job", "new", "--for", "1m"]);
    assert_eq!(fresh.trim(), "4294967297");
    let status: Value = serde_json::from_str(&ok(db, &["status", "--json"])).expect("JSON");
    assert_eq!(status["failovers"], 1, "{status:#}");
    assert!(status["last_failover_at"].is_string(), "{status:#}");
    let said = status["warnings"].to_string();
    assert!(
        said.contains("failed over") && said.contains("raised to 4294967296"),
        "{said}"
    );
    // Checked before it is sent: an observer or a person settles it.
    let state: String = with_client(db, |c| {
        c.query_one(
            "SELECT state FROM effect_ledger WHERE effect_key = 'left-claimed'",
            &[],
        )
        .map(|r| r.get(0))
    })
    .expect("the claimed row");
    assert_eq!(state, "unknown");
    assert!(
        said.contains("1 claimed effect(s) held as unknown"),
        "{said}"
    );
    let metrics = ok(db, &["metrics"]);
    assert!(
        metrics.contains("\nexactly_failovers_total 1\n"),
        "{metrics}"
    );
    let (_, doctor, err) = exactly(db, &["doctor", "--job", "j", "--json"]);
    let doctor: Value = serde_json::from_str(&doctor).unwrap_or_else(|e| panic!("{e}: {err}"));
    let rule = &doctor["jobs"][0]["rules"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["rule"] == "lease-token").cloned())
        .expect("lease-token rule");
    assert_eq!(rule["verdict"], "ok", "{rule:#}");
    assert!(
        rule["evidence"]
            .to_string()
            .contains("raised at the last failover"),
        "{rule:#}"
    );
    // The connection after it finds the timeline recorded: no second event.
    ok(db, &["lease", "claim", "--job", "other", "--for", "1m"]);
    let status: Value = serde_json::from_str(&ok(db, &["status", "--json"])).expect("JSON");
    assert_eq!(status["failovers"], 1, "{status:#}");
}

/// A scheduler handed a token lower than one it ran under before for the job (the database went
/// back: a failover that lost commits, here the lease's token and the later runs undone by hand,
/// as with the guard off) runs nothing under it: every token its command ever saw only goes up.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn a_scheduler_never_runs_under_a_token_lower_than_one_it_ran_under() {
    let site = Site::new(0);
    let db = site.db();
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs.toml");
    let seen = dir.path().join("tokens");
    std::fs::write(
        &jobs,
        format!(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"5s\"\noverlap = \"coalesce\"\n\
             command = [\"sh\", \"-c\", \"echo $EXACTLY_FENCING_TOKEN >> {}\"]\n",
            seen.display()
        ),
    )
    .expect("jobs file");
    let mut sched = Command::new(support::bin())
        .args(["--db", db, "run"])
        .arg(&jobs)
        .env_remove("EXACTLY_FAILOVER_GUARD")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start exactly run");
    let lines = || {
        std::fs::read_to_string(&seen)
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().parse::<i64>().expect("a token"))
            .collect::<Vec<i64>>()
    };
    let start = std::time::Instant::now();
    while lines().len() < 4 && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let before = lines();
    assert!(before.len() >= 4, "the job did not run: {before:?}");
    with_client(db, |c| {
        // What the promoted server lacks: the claims after the first, and their runs.
        c.batch_execute(
            "UPDATE job_lease SET fencing_token = 1 WHERE job_key = 'tick';
             DELETE FROM exactly_firings WHERE run_id IN
               (SELECT run_id FROM exactly_runs WHERE job_key = 'tick' AND fencing_token > 1);
             DELETE FROM exactly_runs WHERE job_key = 'tick' AND fencing_token > 1;",
        )
    })
    .expect("set the token back");
    std::thread::sleep(std::time::Duration::from_secs(4));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(sched.id() as i32, libc::SIGTERM) };
    sched.wait().expect("wait for the scheduler");
    let all = lines();
    let back: Vec<_> = all.windows(2).filter(|w| w[1] <= w[0]).collect();
    assert!(
        back.is_empty(),
        "ran under a token not above the last: {all:?}"
    );
    let fenced: i64 = with_client(db, |c| {
        c.query_one(
            "SELECT count(*) FROM exactly_runs WHERE job_key = 'tick' AND outcome = 'fenced'",
            &[],
        )
        .map(|r| r.get(0))
    })
    .expect("count fenced runs");
    assert!(fenced >= 1, "no run was stopped: {all:?}");
}

//! `exactly probe JOB`: the job's latest done effect attempted again on purpose. On a healthy
//! ledger the duplicate is suppressed and the counter `status` shows moves; on a ledger whose
//! dedupe is broken the probe says so (exit 1). Either way nothing is sent and nothing of the
//! probe's is left in the ledger.
use crate::on_both_backends;
use crate::support::cli::*;
use crate::support::{effect_args, read_or_empty, strs};
use serde_json::Value;

/// `status --json`, parsed.
fn status(env: &Env) -> Value {
    let (code, out, err) = env.run(&["status", "--json"]);
    assert_eq!(code, 0, "status: {err}");
    serde_json::from_str(&out).expect("status JSON")
}

/// The job's suppressed duplicates as `status --json` shows them: all of them, and the job's.
fn suppressed(env: &Env, job: &str) -> (u64, u64) {
    let s = status(env);
    let total = s["totals"]["duplicates_suppressed"]
        .as_u64()
        .expect("totals.duplicates_suppressed");
    let of_job = s["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job_key"] == job)
        .map(|j| j["duplicates_suppressed"].as_u64().expect("a count"))
        .expect("the job in status");
    (total, of_job)
}

/// Runs one effect of `job` whose far side is the file `far`: the command appends its effect key.
fn send(env: &Env, job: &str, token: i64, far: &std::path::Path) -> String {
    let args = effect_args(job, token, "send-invoice", "acme")
        .input("month=2026-11")
        .sh(&format!(
            "echo \"$EXACTLY_EFFECT_KEY\" >> '{}'",
            far.display()
        ));
    let (code, _, err) = env.run(&strs(&args));
    assert_eq!(code, 0, "effect: {err}");
    let (code, key, err) = env.run(&[
        "key",
        "--action",
        "send-invoice",
        "--target",
        "acme",
        "--input",
        "month=2026-11",
    ]);
    assert_eq!(code, 0, "key: {err}");
    key.trim().to_string()
}

on_both_backends! {
    #[test]
    fn a_probe_of_a_healthy_job_is_suppressed_counted_and_sends_nothing() {
        let env = Env::new();
        let token = env.claim("invoices", "1h");
        let far = env.path("far-side.txt");
        let key = send(&env, "invoices", token, &far);
        let far_before = read_or_empty(&far);
        assert_eq!(far_before.lines().count(), 1, "{far_before}");
        assert_eq!(suppressed(&env, "invoices"), (0, 0));

        let (code, out, err) = env.run(&["probe", "invoices"]);
        assert_eq!(code, 0, "probe: {out}{err}");
        assert!(out.contains("duplicate suppressed, nothing sent"), "{out}");
        assert!(out.contains(&key) && out.contains("suppressed 0 → 1"), "{out}");
        assert_eq!(suppressed(&env, "invoices"), (1, 1), "the counter status shows moved");
        assert_eq!(read_or_empty(&far), far_before, "the far side got nothing");
        assert_eq!(env.state_of(&key).as_deref(), Some("done"));
        assert_eq!(env.sql_count("SELECT count(*) FROM effect_ledger"), 1);
        assert_eq!(
            env.sql_count(&format!(
                "SELECT count(*) FROM exactly_events WHERE kind = 'probe' \
                 AND job_key = 'invoices' AND effect_key = '{key}' \
                 AND fencing_token = {token} AND detail LIKE 'suppressed%'"
            )),
            1,
            "the probe recorded as an event with its result"
        );

        // Again, as JSON: the same verdict, the counter one further.
        let (code, out, err) = env.run(&["probe", "invoices", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).expect("probe JSON");
        assert_eq!(v["verdict"], "suppressed", "{v}");
        assert_eq!(v["effect_key"], key.as_str());
        assert_eq!(v["fencing_token"], token);
        assert_eq!((v["suppressed_before"].as_u64(), v["suppressed_after"].as_u64()),
            (Some(1), Some(2)));
        assert_eq!(v["sent"], false);
        assert!(v["schema_version"].as_i64().is_some(), "{v}");
        assert_eq!(read_or_empty(&far), far_before);
    }

    #[test]
    fn a_job_without_a_done_effect_has_nothing_to_probe() {
        let env = Env::new();
        env.claim("idle", "1h");
        let (code, out, err) = env.run(&["probe", "idle"]);
        assert_eq!(code, 1, "{out}{err}");
        assert_eq!(err, "exactly: nothing to probe: job idle has no done effect\n");
        assert!(out.is_empty(), "{out}");
        let (code, out, _) = env.run(&["probe", "idle", "--json"]);
        assert_eq!(code, 1);
        let v: Value = serde_json::from_str(&out).expect("probe JSON");
        assert_eq!(v["verdict"], "nothing_to_probe", "{v}");
        assert_eq!(env.sql_count("SELECT count(*) FROM effect_ledger"), 0);
    }

    /// A ledger another program created with the seed's SQL but without the PRIMARY KEY on
    /// `effect_key` is not left so: opening it adds the unique index (its rows hold no key
    /// twice), so the probe finds the duplicate suppressed. (On PostgreSQL adoption added none
    /// before, and every effect failed on its `ON CONFLICT (effect_key)`.)
    #[test]
    fn a_ledger_adopted_without_a_unique_key_gets_one_and_the_probe_is_suppressed() {
        let env = Env::new();
        env.sql_execute(
            "CREATE TABLE job_lease (job_key TEXT PRIMARY KEY, owner TEXT NOT NULL,
               fencing_token INTEGER NOT NULL, lease_until TEXT NOT NULL,
               created_at TEXT NOT NULL)",
        );
        env.sql_execute(
            "CREATE TABLE effect_ledger (effect_key TEXT NOT NULL, job_key TEXT NOT NULL,
               run_id TEXT NOT NULL, fencing_token INTEGER, state TEXT NOT NULL,
               terms_shown TEXT, response TEXT, created_at TEXT NOT NULL,
               updated_at TEXT NOT NULL)",
        );
        env.sql_execute(
            "INSERT INTO job_lease VALUES ('legacy', 'cron@db-1', 7,
               '2099-01-01T08:00:00.000Z', '2026-11-01T07:00:00.000Z')",
        );
        env.sql_execute(
            "INSERT INTO effect_ledger VALUES ('0123456789abcdef0123456789abcdef', 'legacy',
               'r7', 7, 'done', NULL, 'ok', '2026-11-01T07:00:00.000Z',
               '2026-11-01T07:00:01.000Z')",
        );
        assert_eq!(unique_indexes(&env), 0);
        let (code, out, err) = env.run(&["probe", "legacy"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("duplicate suppressed"), "{out}");
        assert_eq!(unique_indexes(&env), 1, "adopted with a unique key");
        assert_eq!(env.sql_count("SELECT count(*) FROM effect_ledger"), 1);
        // exactly's own effects work on it, and a second attempt is suppressed.
        let far = env.path("far-side.txt");
        send(&env, "legacy", 7, &far);
        let args = effect_args("legacy", 7, "send-invoice", "acme")
            .input("month=2026-11")
            .sh(&format!("echo again >> '{}'", far.display()));
        let (code, _, err) = env.run(&strs(&args));
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("duplicate suppressed"), "{err}");
        assert_eq!(read_or_empty(&far).lines().count(), 1);
    }
}

/// A program in another language writes the seed's table directly and binds the effect key as
/// bytes (Python's `sqlite3` with a `bytes` value, Go's `[]byte`): SQLite stores a BLOB, which
/// is never equal to the same characters as TEXT, so the unique key does not stop a second row
/// and exactly's next attempt at that effect would send it again. The probe finds that out
/// without sending, says "dedupe broken", and leaves nothing of its own behind — under a live
/// lease and under a released one.
#[test]
fn a_done_effect_keyed_as_bytes_by_another_program_is_dedupe_broken() {
    for release in [false, true] {
        let env = Env::new();
        let token = env.claim("py-invoices", "1h");
        let (code, key, err) = env.run(&["key", "--action", "send-invoice", "--target", "acme"]);
        assert_eq!(code, 0, "{err}");
        let key = key.trim().to_string();
        let c = rusqlite::Connection::open(&env.db).expect("open");
        c.execute(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
                 response, created_at, updated_at)
             VALUES (?1, 'py-invoices', 'py-run-1', ?2, 'done', 'sent', \
                 '2026-11-01T07:00:00.000Z', '2026-11-01T07:00:01.000Z')",
            rusqlite::params![key.as_bytes().to_vec(), token],
        )
        .expect("the other program's insert");
        drop(c);
        if release {
            let t = token.to_string();
            let (code, _, err) =
                env.run(&["lease", "release", "--job", "py-invoices", "--token", &t]);
            assert_eq!(code, 0, "{err}");
        }

        let (code, out, err) = env.run(&["probe", "py-invoices"]);
        assert_eq!(code, 1, "release {release}: {out}{err}");
        assert!(err.contains("dedupe broken"), "{err}");
        assert!(err.contains(&key), "{err}");
        assert!(
            err.contains("nothing sent; nothing of the probe's is left in the ledger"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        // Nothing half-written: the other program's row alone, as it was.
        assert_eq!(env.sql_count("SELECT count(*) FROM effect_ledger"), 1);
        assert_eq!(
            env.sql_count(
                "SELECT count(*) FROM effect_ledger WHERE typeof(effect_key) = 'blob' \
                 AND state = 'done' AND coalesce(version, 0) = 0"
            ),
            1
        );
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'effect_released'"),
            1,
            "what the probe reserved was released"
        );
        assert_eq!(
            env.sql_count(
                "SELECT count(*) FROM exactly_events WHERE kind = 'probe' \
                 AND detail LIKE 'dedupe broken%'"
            ),
            1
        );
        assert_eq!(
            suppressed(&env, "py-invoices"),
            (0, 0),
            "nothing was suppressed"
        );
        let (code, out, _) = env.run(&["probe", "py-invoices", "--json"]);
        assert_eq!(code, 1);
        let v: Value = serde_json::from_str(&out).expect("probe JSON");
        assert_eq!(v["verdict"], "dedupe_broken", "{v}");
        assert_eq!(v["left_reserved"], Value::Null, "{v}");

        // The probe told the truth: exactly's own attempt at that effect sends it again.
        if !release {
            let far = env.path("far-side.txt");
            let args = effect_args("py-invoices", token, "send-invoice", "acme").sh(&format!(
                "echo \"$EXACTLY_EFFECT_KEY\" >> '{}'",
                far.display()
            ));
            let (code, _, err) = env.run(&strs(&args));
            assert_eq!(code, 0, "{err}");
            assert_eq!(read_or_empty(&far).trim(), key, "sent a second time");
        }
    }
}

/// Unique indexes on `effect_ledger` (either backend).
fn unique_indexes(env: &Env) -> i64 {
    if crate::support::pg_url_of(&env.db).is_some() {
        env.sql_count(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() \
             AND tablename = 'effect_ledger' AND indexdef LIKE 'CREATE UNIQUE%'",
        )
    } else {
        env.sql_count(
            "SELECT count(*) FROM pragma_index_list('effect_ledger') WHERE \"unique\" = 1",
        )
    }
}

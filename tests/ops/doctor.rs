//! `exactly doctor`: each of the essay's ten rules seen `fail` (or `warn`, where the ledger
//! cannot show it broken) on a database built through the CLI and the library to break it, and
//! `ok` on one built to keep it; exit codes, `--strict`, `--json`, bad usage.
use crate::on_both_backends;
use crate::support;
use support::cli::Env;
use support::effect_args;
use support::strs;

/// `exactly doctor --json [ARGS…]`: its exit code and its JSON.
fn doctor(env: &Env, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["doctor", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = env.run(&all);
    let v: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("doctor --json is JSON ({e}): {out} / {err}"));
    (code, v)
}

/// The verdict, evidence and fix of `rule` for `job`.
fn judged(v: &serde_json::Value, job: &str, rule: &str) -> (String, String, String) {
    let jobs = v["jobs"].as_array().expect("jobs");
    let j = jobs
        .iter()
        .find(|j| j["job_key"] == job)
        .unwrap_or_else(|| panic!("no job {job} in {v}"));
    let r = j["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .find(|r| r["rule"] == rule)
        .unwrap_or_else(|| panic!("no rule {rule} for {job} in {v}"));
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    (s("verdict"), s("evidence"), s("fix"))
}

fn verdict(env: &Env, job: &str, rule: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["--job", job];
    args.extend_from_slice(extra);
    let (_, v) = doctor(env, &args);
    let (verdict, evidence, fix) = judged(&v, job, rule);
    eprintln!("{job} {rule}: {verdict}: {evidence} | {fix}");
    (verdict, evidence)
}

/// `exactly effect` under `token`, acting on `target` with `inputs`, running `sh -c script`.
fn effect(env: &Env, job: &str, token: i64, target: &str, inputs: &[&str], script: &str) -> i32 {
    let mut a = effect_args(job, token, "send", target);
    for i in inputs {
        a = a.input(i);
    }
    env.run(&strs(&a.sh(script))).0
}

fn release(env: &Env, job: &str, token: i64) {
    let (code, _, err) = env.run(&[
        "lease",
        "release",
        "--job",
        job,
        "--token",
        &token.to_string(),
    ]);
    assert_eq!(code, 0, "release: {err}");
}

fn now() -> String {
    exactly::time::fmt(exactly::time::now())
}

on_both_backends! {
    /// Rule 1: a lease row whose token is below what the ledger's rows carry (a lease row
    /// deleted and claimed afresh, as an adopted ledger has it) fails; a job claimed and
    /// written the ordinary way is ok.
    #[test]
    fn lease_token_fails_when_the_token_went_back() {
        let env = Env::new();
        for _ in 0..2 {
            let t = env.claim("back", "60s");
            release(&env, "back", t);
        }
        let t = env.claim("back", "60s");
        assert_eq!(t, 3);
        assert_eq!(effect(&env, "back", t, "x", &[], "true"), 0);
        env.sql_execute("DELETE FROM job_lease WHERE job_key = 'back'");
        // Claimed by a holder that never saw token 3 (this one's token memory would refuse 1).
        std::fs::remove_file(env.path("tokens")).expect("forget the tokens seen");
        assert_eq!(env.claim("back", "60s"), 1, "the token starts again");
        let (v, e) = verdict(&env, "back", "lease-token", &[]);
        assert_eq!(v, "fail", "{e}");
        assert!(e.contains("token 3") && e.contains("lease's 1"), "{e}");

        let t = env.claim("fine", "60s");
        assert_eq!(effect(&env, "fine", t, "x", &[], "true"), 0);
        assert_eq!(verdict(&env, "fine", "lease-token", &[]).0, "ok");
    }

    /// Rule 2: holders that keep a lease nobody renews longer than it fail, with the lease to
    /// set; holders well inside it are ok.
    #[test]
    fn lease_bounds_fail_when_holders_outlast_the_lease() {
        let env = Env::new();
        let t = env.claim("slow", "1s");
        std::thread::sleep(std::time::Duration::from_millis(1600));
        release(&env, "slow", t);
        let (v, e) = verdict(&env, "slow", "lease-bounds", &[]);
        assert_eq!(v, "fail", "{e}");
        assert!(e.contains("holds p99"), "{e}");

        let t = env.claim("quick", "30s");
        release(&env, "quick", t);
        assert_eq!(verdict(&env, "quick", "lease-bounds", &[]).0, "ok");
    }

    /// Rule 3: one target done twice in one run, the inputs differing only in a time taken at
    /// the attempt, is keyed by the run; two months' invoices to one customer are two facts.
    #[test]
    fn key_from_facts_fails_for_a_key_made_from_the_attempt() {
        let env = Env::new();
        let t = env.claim("stamped", "60s");
        for i in 0..2 {
            let at = format!("at={}", now());
            assert_eq!(effect(&env, "stamped", t, "c1", &[&at], "true"), 0, "attempt {i}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let (v, e) = verdict(&env, "stamped", "key-from-facts", &[]);
        assert_eq!(v, "fail", "{e}");
        assert!(e.contains("`at`"), "{e}");

        let t = env.claim("monthly", "60s");
        for month in ["month=2026-11", "month=2026-12"] {
            assert_eq!(effect(&env, "monthly", t, "c1", &[month], "true"), 0);
        }
        assert_eq!(verdict(&env, "monthly", "key-from-facts", &[]).0, "ok");
    }

    /// Rule 4: an effect with no observer and no far side declared fails; one that records an
    /// observer is ok, and so is one whose jobs file declares `far_side = "dedupes"`.
    #[test]
    fn far_side_fails_without_an_observer_or_a_declaration() {
        let env = Env::new();
        let t = env.claim("blind", "60s");
        assert_eq!(effect(&env, "blind", t, "x", &[], "true"), 0);
        assert_eq!(verdict(&env, "blind", "far-side", &[]).0, "fail");
        let jobs = env.path("jobs.toml");
        std::fs::write(
            &jobs,
            "[[job]]\nname = \"blind\"\nevery = \"1h\"\nlease = \"5m\"\noverlap = \"coalesce\"\n\
             far_side = \"dedupes\"\ncommand = [\"true\"]\n",
        )
        .expect("write jobs file");
        let file = jobs.to_str().expect("utf8");
        let (v, e) = verdict(&env, "blind", "far-side", &["--file", file]);
        assert_eq!(v, "ok", "{e}");
        assert!(e.contains("dedupes"), "{e}");

        let t = env.claim("seen", "60s");
        let a = effect_args("seen", t, "send", "x").observe("exit 1");
        assert_eq!(env.run(&strs(&a.sh("true"))).0, 0);
        assert_eq!(verdict(&env, "seen", "far-side", &[]).0, "ok");
    }

    /// Rule 5: a ledger row written without a token (the seed's INSERT by another program, as
    /// `exactly init` adopts it) fails; rows exactly wrote all carry one.
    #[test]
    fn token_on_writes_fails_for_a_row_without_a_token() {
        let env = Env::new();
        let t = env.claim("seed", "60s");
        assert_eq!(effect(&env, "seed", t, "x", &[], "true"), 0);
        assert_eq!(verdict(&env, "seed", "token-on-writes", &[]).0, "ok");
        let at = now();
        env.sql_execute(&format!(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, state, created_at, \
             updated_at) VALUES ('k-from-elsewhere', 'seed', 'r1', 'done', '{at}', '{at}')"
        ));
        let (v, e) = verdict(&env, "seed", "token-on-writes", &[]);
        assert_eq!(v, "fail", "{e}");
        assert!(e.contains("without a fencing token"), "{e}");
    }

    /// Rule 6: an open unknown warns (a day later it fails: below); once resolved, ok.
    #[test]
    fn unknown_resolved_warns_while_an_unknown_is_open() {
        let env = Env::new();
        let t = env.claim("lost", "60s");
        assert_eq!(effect(&env, "lost", t, "x", &[], "exit 1"), 6, "the command failed");
        let (v, e) = verdict(&env, "lost", "unknown-resolved", &[]);
        assert_eq!(v, "warn", "{e}");
        let key = support::strings(
            &env.db,
            "SELECT effect_key FROM effect_ledger WHERE job_key = 'lost'",
        );
        let (code, _, err) = env.run(&["resolve", &key[0], "--happened"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(verdict(&env, "lost", "unknown-resolved", &[]).0, "ok");

        // A retry that meets a send still in flight sends nothing (exit 5), and is counted.
        let t = env.claim("busy", "60s");
        let a = effect_args("busy", t, "send", "slow");
        let mut first = env
            .cmd()
            .args(strs(&a.clone().sh("sleep 2")))
            .spawn()
            .expect("start the first attempt");
        support::wait_for("the first attempt submitted", std::time::Duration::from_secs(10), || {
            env.sql_count(
                "SELECT count(*) FROM effect_ledger WHERE job_key = 'busy' AND state = 'submitted'",
            ) == 1
        });
        assert_eq!(env.run(&strs(&a.sh("true"))).0, 5, "in flight");
        assert!(first.wait().expect("wait").success());
        let (v, e) = verdict(&env, "busy", "unknown-resolved", &[]);
        assert_eq!(v, "warn", "{e}");
        assert!(e.contains("1 retry met a send in flight"), "{e}");
    }

    /// Rule 7: a job known only by its lease has no overlap policy written (a warning: the
    /// ledger cannot show harm); the jobs file's `overlap` makes it ok.
    #[test]
    fn overlap_policy_warns_when_never_written() {
        let env = Env::new();
        env.claim("cron", "60s");
        assert_eq!(verdict(&env, "cron", "overlap-policy", &[]).0, "warn");
        let jobs = env.path("jobs.toml");
        std::fs::write(
            &jobs,
            "[[job]]\nname = \"cron\"\nevery = \"1h\"\nlease = \"5m\"\noverlap = \"queue\"\n\
             queue_cap = 2\ncommand = [\"true\"]\n",
        )
        .expect("write jobs file");
        let (v, e) = verdict(&env, "cron", "overlap-policy", &["--file", jobs.to_str().expect("utf8")]);
        assert_eq!(v, "ok", "{e}");
        assert!(e.contains("queue"), "{e}");
    }

    /// Rule 8: never a kill test warns; a failed one (recorded through the library) fails; a
    /// passing `exactly chaos` run against the database makes it ok.
    #[test]
    fn kill_test_is_judged_by_the_recorded_chaos_runs() {
        let env = Env::new();
        env.claim("any", "60s");
        let (v, e) = verdict(&env, "any", "kill-test", &[]);
        assert_eq!(v, "warn", "{e}");
        assert!(e.contains("never"), "{e}");
        let (code, out, err) = env.run(&[
            "chaos", "--iterations", "1", "--scenario", "kill-mid-effect", "--json",
        ]);
        assert_eq!(code, 0, "chaos: {out} {err}");
        let (v, e) = verdict(&env, "any", "kill-test", &[]);
        assert_eq!(v, "ok", "{e}");
        assert!(e.contains("kill-mid-effect"), "{e}");
        let mut store = env.store();
        exactly::checklist::record_kill_test(
            &mut store,
            &exactly::checklist::KillTestRun {
                scenarios: vec!["kill-mid-effect".into()],
                iterations: 5,
                duplicates: 1,
                lost: 0,
                passed: false,
            },
        )
        .expect("record");
        assert_eq!(verdict(&env, "any", "kill-test", &[]).0, "fail");
    }

    /// Rule 9: an approval approved and still unused after the job's hold ended warns; a job
    /// whose approvals were all consumed is ok.
    #[test]
    fn approvals_once_warns_for_an_approval_unused_after_a_run() {
        let env = Env::new();
        let t = env.claim("gate", "60s");
        let a = effect_args("gate", t, "send", "x").arg("--needs-approval");
        assert_eq!(env.run(&strs(&a.clone().sh("true"))).0, 4, "awaits approval");
        let key = support::strings(&env.db, "SELECT effect_key FROM exactly_approvals");
        let (code, _, err) = env.run(&["approve", &key[0]]);
        assert_eq!(code, 0, "{err}");
        std::thread::sleep(std::time::Duration::from_millis(20));
        release(&env, "gate", t);
        let (v, e) = verdict(&env, "gate", "approvals-once", &[]);
        assert_eq!(v, "warn", "{e}");
        assert!(e.contains("unused after a run"), "{e}");
        let t = env.claim("gate", "60s");
        let a = effect_args("gate", t, "send", "x").arg("--needs-approval");
        assert_eq!(env.run(&strs(&a.sh("true"))).0, 0, "sent with its approval");
        assert_eq!(verdict(&env, "gate", "approvals-once", &[]).0, "ok");
    }

    /// Rule 10: a claim left `claimed` by a process that died before submitting fails ("a
    /// leak in the claim path"); 20 claims with no duplicate ever suppressed warn; a
    /// suppressed duplicate makes it ok.
    #[test]
    fn counters_are_read_as_the_essay_reads_them() {
        let env = Env::new();
        let t = env.claim("leaky", "60s");
        let a = effect_args("leaky", t, "send", "x");
        let out = env
            .cmd()
            .args(strs(&a.sh("true")))
            .env("EXACTLY_FAULT", "after_claim:kill")
            .output()
            .expect("run exactly");
        assert_ne!(out.status.code(), Some(0), "killed after the claim");
        release(&env, "leaky", t);
        let (v, e) = verdict(&env, "leaky", "counters", &[]);
        assert_eq!(v, "fail", "{e}");
        assert!(e.contains("claimed never submitted 1"), "{e}");

        for _ in 0..20 {
            let t = env.claim("untested", "60s");
            release(&env, "untested", t);
        }
        let (v, _) = verdict(&env, "untested", "counters", &[]);
        assert_eq!(v, "warn");
        let t = env.claim("untested", "60s");
        for _ in 0..2 {
            assert_eq!(effect(&env, "untested", t, "x", &[], "true"), 0);
        }
        assert_eq!(verdict(&env, "untested", "counters", &[]).0, "ok");
    }

    /// Effects whose job key holds no lease row and no registration (the seed's SQL from
    /// another program) are judged under their action: no lease, no token.
    #[test]
    fn effects_outside_any_job_are_grouped_by_action() {
        let env = Env::new();
        env.claim("known", "60s");
        let at = now();
        env.sql_execute(&format!(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, state, created_at, \
             updated_at, action_id, target_id) VALUES \
             ('k1', 'nightly.sh', 'r1', 'done', '{at}', '{at}', 'mail', 'ann'), \
             ('k2', 'weekly.sh', 'r2', 'done', '{at}', '{at}', 'mail', 'bob')"
        ));
        let (code, v) = doctor(&env, &[]);
        assert_eq!(code, 1, "{v}");
        let actions = v["actions"].as_array().expect("actions");
        assert_eq!(actions.len(), 1, "{v}");
        assert_eq!(actions[0]["action"], "mail");
        let lease = &actions[0]["rules"][0];
        assert_eq!(lease["rule"], "lease-token");
        assert_eq!(lease["verdict"], "fail", "{lease}");
        assert!(
            lease["evidence"].as_str().unwrap_or_default().contains("2 effects"),
            "{lease}"
        );
        let jobs: Vec<&str> = v["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| j["job_key"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(jobs, ["known"], "{v}");
        let (code, one) = doctor(&env, &["--job", "mail"]);
        assert_eq!(code, 1);
        assert_eq!(one["actions"].as_array().map(Vec::len), Some(1), "{one}");
    }

    /// Exit codes: 0 when nothing fails, 1 when a rule fails, 1 with --strict on a warning,
    /// 2 for a job that is not there or a jobs file with errors; the JSON has schema_version.
    #[test]
    fn exit_codes_and_json() {
        let env = Env::new();
        let t = env.claim("good", "60s");
        let a = effect_args("good", t, "send", "x").observe("exit 1");
        assert_eq!(env.run(&strs(&a.sh("true"))).0, 0);
        release(&env, "good", t);
        let (code, v) = doctor(&env, &["--job", "good"]);
        assert_eq!(v["schema_version"], exactly::SCHEMA_VERSION, "{v}");
        assert_eq!(v["verdict"], "warn", "{v}");
        assert_eq!(code, 0, "warnings alone pass: {v}");
        assert_eq!(doctor(&env, &["--job", "good", "--strict"]).0, 1);
        let rules: Vec<&str> = v["jobs"][0]["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .map(|r| r["rule"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(rules.len(), 10, "{rules:?}");
        // Effect keys are global: another target, or it would be good's effect again.
        let t = env.claim("bad", "60s");
        assert_eq!(effect(&env, "bad", t, "y", &[], "true"), 0);
        let (code, _, _) = env.run(&["doctor", "--job", "bad"]);
        assert_eq!(code, 1, "a failing rule exits 1");
        let (code, _, err) = env.run(&["doctor", "--job", "nope"]);
        assert_eq!(code, 2, "{err}");
        let jobs = env.path("bad.toml");
        std::fs::write(&jobs, "[[job]]\nname = \"x\"\nfar_side = \"maybe\"\n").expect("write");
        let (code, _, err) = env.run(&["doctor", "--file", jobs.to_str().expect("utf8")]);
        assert_eq!(code, 2, "{err}");
        let (code, _, _) = env.run(&["doctor", "--bogus"]);
        assert_eq!(code, 2);
    }
}

/// Text output: every line fits 80 columns and a hostile job name is made inert.
#[test]
fn text_fits_80_columns_and_is_inert() {
    let env = Env::new();
    // Job names are refused with such characters; an action is any text without `|`.
    let evil = "evil\u{1b}[31m\u{202e}action";
    let t = env.claim("plain", "60s");
    let a = effect_args("plain", t, evil, "x");
    let (code, _, err) = env.run(&strs(&a.sh("true")));
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = env.run(&["doctor"]);
    assert_eq!(code, 1, "{err}");
    for line in out.lines() {
        assert!(
            unicode_width::UnicodeWidthStr::width(line) <= 80,
            "too wide: {line:?}"
        );
    }
    assert!(
        !out.contains('\u{1b}') && !out.contains('\u{202e}'),
        "{out:?}"
    );
    eprintln!("{out}");
}

/// A database an older exactly wrote (schema 8: no per-field inputs, no far_side, no chaos
/// runs) is judged as it is, read-only: never upgraded. SQLite only: it drops columns to make
/// the old schema.
#[test]
fn a_schema_8_database_is_judged_read_only() {
    let env = Env::new();
    let t = env.claim("old", "60s");
    assert_eq!(effect(&env, "old", t, "x", &[], "true"), 0);
    env.sql_execute(
        "ALTER TABLE effect_ledger DROP COLUMN input_fields;
         ALTER TABLE exactly_jobs DROP COLUMN far_side;
         DROP TABLE exactly_chaos_runs;
         PRAGMA user_version = 8;",
    );
    let (v, e) = verdict(&env, "old", "key-from-facts", &[]);
    assert_eq!(v, "warn", "{e}");
    assert!(e.contains("cannot judge"), "{e}");
    assert_eq!(verdict(&env, "old", "kill-test", &[]).0, "warn");
    assert_eq!(env.sql_count("PRAGMA user_version"), 8, "not upgraded");
}

/// Rule 6 fails once an unknown has been open for a day: the same database judged by a doctor
/// whose clock is 25 hours ahead (libfaketime). SQLite only: on PostgreSQL the ages come from
/// the server's clock.
#[test]
fn unknown_resolved_fails_for_an_unknown_a_day_old() {
    let env = Env::new();
    let t = env.claim("lost", "60s");
    assert_eq!(
        effect(&env, "lost", t, "x", &[], "exit 1"),
        6,
        "the command failed"
    );
    assert_eq!(verdict(&env, "lost", "unknown-resolved", &[]).0, "warn");
    let mut later = env.cmd();
    later.args(["doctor", "--json", "--job", "lost"]);
    support::skew_clock(&mut later, "+25h");
    let out = later.output().expect("run exactly doctor");
    assert_eq!(out.status.code(), Some(1), "a failed rule: exit 1");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let (verdict, evidence, _) = judged(&v, "lost", "unknown-resolved");
    assert_eq!(verdict, "fail", "{evidence}");
}

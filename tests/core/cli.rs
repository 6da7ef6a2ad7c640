//! The core through the real binary: leases, fencing, the ledger's branches, approvals,
//! observers, and what happens to bad databases.
use crate::on_both_backends;
use crate::support;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::cli::{far_count, split, Env};

/// An effect that appends its key to a far-side file.
fn effect_args<'a>(job: &'a str, token: &'a str, far: &'a str, input: &'a str) -> Vec<String> {
    [
        "effect", "--job", job, "--token", token, "--action", "send", "--target", "bob", "--input",
        input, "--", "sh", "-c",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "echo $EXACTLY_EFFECT_KEY >> {far}; echo sent-$EXACTLY_EFFECT_KEY"
    )])
    .collect()
}

fn run_effect(env: &Env, job: &str, token: i64, input: &str) -> (i32, String, String) {
    let far = env.path("far.txt");
    let t = token.to_string();
    let args = effect_args(job, &t, far.to_str().unwrap(), input);
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    env.run(&args)
}

fn key_of(env: &Env, input: &str) -> String {
    let (code, out, _) = env.run(&[
        "key", "--action", "send", "--target", "bob", "--input", input,
    ]);
    assert_eq!(code, 0);
    out.trim().to_string()
}

/// An effect whose command fails after (maybe) acting, then an observer settles it.
fn unknown_then_observe(observer_exit: i32) -> (Env, String, i32, String) {
    let env = Env::new();
    let t = env.claim("pay", "1m").to_string();
    let far = env.path("far.txt");
    let f = far.to_str().unwrap().to_string();
    // First attempt: acts, then the answer is lost (exit 9) → unknown, exit 6.
    let (code, _, err) = env.run(&[
        "effect",
        "--job",
        "pay",
        "--token",
        &t,
        "--action",
        "pay",
        "--target",
        "acme",
        "--",
        "sh",
        "-c",
        &format!("echo $EXACTLY_EFFECT_KEY >> {f}; exit 9"),
    ]);
    assert_eq!(code, 6, "{err}");
    let key = env
        .run(&["key", "--action", "pay", "--target", "acme"])
        .1
        .trim()
        .to_string();
    assert_eq!(env.state_of(&key).as_deref(), Some("unknown"));
    let (code, _, err) = env.run(&[
        "effect",
        "--job",
        "pay",
        "--token",
        &t,
        "--action",
        "pay",
        "--target",
        "acme",
        "--observe",
        &format!("exit {observer_exit}"),
        "--",
        "sh",
        "-c",
        &format!("echo $EXACTLY_EFFECT_KEY >> {f}; echo again"),
    ]);
    (env, key, code, err)
}

on_both_backends! {
    #[test]
    fn racing_processes_claim_one_lease_and_tokens_only_go_up() {
        for n in [2usize, 8] {
            let env = Env::new();
            env.run(&["init"]);
            let children: Vec<_> = (0..n)
                .map(|i| {
                    env.cmd()
                        .args(["lease", "claim", "--job", "race", "--for", "30s", "--owner"])
                        .arg(format!("w{i}"))
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .expect("spawn")
                })
                .collect();
            let results: Vec<_> = children
                .into_iter()
                .map(|c| split(c.wait_with_output().expect("wait")))
                .collect();
            let winners: Vec<_> = results.iter().filter(|r| r.0 == 0).collect();
            assert_eq!(winners.len(), 1, "{n} racers: {results:?}");
            assert_eq!(winners[0].1.trim(), "1");
            assert!(results.iter().all(|r| r.0 == 0 || r.0 == 3), "{results:?}");
        }
        // Steals and releases: the token never goes backwards (no clock-skew margin here).
        let env = Env::new().with_skew("0ms");
        let mut last = 0;
        for i in 0..5 {
            let t = env.claim("steady", "150ms");
            assert!(t > last, "token {t} after {last}");
            last = t;
            if i % 2 == 0 {
                assert_eq!(
                    env.run(&[
                        "lease",
                        "release",
                        "--job",
                        "steady",
                        "--token",
                        &t.to_string()
                    ])
                    .0,
                    0
                );
            } else {
                // Past the lease on purpose: the next claim steals it.
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'lease_stolen'"),
            2
        );
    }

    #[test]
    fn a_stolen_lease_fences_every_write_of_the_old_holder() {
        // About fencing, not the clock-skew margin (tests/core/concurrency_cli.rs covers that).
        let env = Env::new().with_skew("0ms");
        let old = env.claim("job", "200ms");
        // Past the lease on purpose.
        std::thread::sleep(Duration::from_millis(300));
        let new = env.claim("job", "30s");
        assert_eq!(new, old + 1);
        let o = old.to_string();
        assert_eq!(
            env.run(&["lease", "renew", "--job", "job", "--token", &o, "--for", "1m"])
                .0,
            3
        );
        assert_eq!(
            env.run(&["lease", "release", "--job", "job", "--token", &o])
                .0,
            3
        );
        let (code, _, err) = run_effect(&env, "job", old, "n=1");
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("fenced"));
        assert_eq!(far_count(&env.path("far.txt"), &key_of(&env, "n=1")), 0);
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'fenced_write'"),
            3
        );
        let (_, json, _) = env.run(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["totals"]["fenced_writes"], 3);
        // The new holder writes fine.
        assert_eq!(run_effect(&env, "job", new, "n=1").0, 0);
    }

    #[test]
    fn a_done_effect_is_never_repeated_and_a_changed_fact_is_a_new_effect() {
        let env = Env::new();
        let t = env.claim("mail", "1m");
        let far = env.path("far.txt");
        let k1 = key_of(&env, "amount=5");
        let (code, out, _) = run_effect(&env, "mail", t, "amount=5");
        assert_eq!(code, 0);
        assert_eq!(out.trim(), format!("sent-{k1}"));
        let (code, out, err) = run_effect(&env, "mail", t, "amount=5");
        assert_eq!(code, 0);
        assert!(err.contains("duplicate suppressed"), "{err}");
        assert_eq!(
            out.trim(),
            format!("sent-{k1}"),
            "the recorded response is replayed"
        );
        assert_eq!(far_count(&far, &k1), 1);
        let (_, json, _) = env.run(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["totals"]["duplicates_suppressed"], 1);
        // A later run with a new token still cannot repeat it.
        env.run(&[
            "lease",
            "release",
            "--job",
            "mail",
            "--token",
            &t.to_string(),
        ]);
        let t2 = env.claim("mail", "1m");
        assert_eq!(run_effect(&env, "mail", t2, "amount=5").0, 0);
        assert_eq!(far_count(&far, &k1), 1);
        // The price moved: a new key, a second effect is correct.
        let k2 = key_of(&env, "amount=6");
        assert_ne!(k1, k2);
        assert_eq!(run_effect(&env, "mail", t2, "amount=6").0, 0);
        assert_eq!(far_count(&far, &k2), 1);
        assert_eq!(env.state_of(&k2).as_deref(), Some("done"));
    }

    #[test]
    fn the_key_is_the_contract() {
        let env = Env::new();
        // sha256 of RFC 8785 JSON {"a":"1","b":"x y"}, then of "act|tgt|<digest>", first 32 hex.
        let (code, out, _) = env.run(&[
            "key", "--action", "act", "--target", "tgt", "--input", "b=x y", "--input", "a=1",
        ]);
        assert_eq!(code, 0);
        let digest = {
            use sha2::{Digest, Sha256};
            let d = Sha256::digest(br#"{"a":"1","b":"x y"}"#);
            let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
            let k = Sha256::digest(format!("act|tgt|{hex}").as_bytes());
            k.iter().map(|b| format!("{b:02x}")).collect::<String>()[..32].to_string()
        };
        assert_eq!(out.trim(), digest);
        let json = env.path("in.json");
        std::fs::write(&json, r#"{"b": "x y", "a": "1"}"#).unwrap();
        let (_, out2, _) = env.run(&[
            "key",
            "--action",
            "act",
            "--target",
            "tgt",
            "--input-json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(out2.trim(), digest);
        let (code, _, err) = env.run(&[
            "key", "--action", "a", "--target", "t", "--input", "novalue",
        ]);
        assert_eq!(code, 2);
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    /// A flag's value refused by its parser is one line, exit 2, with the value made inert:
    /// clap alone prints three lines and echoes the value raw.
    #[test]
    fn a_refused_flag_value_is_one_inert_line() {
        let env = Env::new();
        let hostile = "a\u{1b}[31mb";
        let cases: [&[&str]; 5] = [
            &["gc", "--keep", "1h"],
            &["lease", "claim", "--job", hostile, "--for", "1m"],
            &["lease", "claim", "--job", "a\nb", "--for", "1m"],
            &[
                "effect", "--job", "j", "--token", "1", "--action", "a", "--target", "t",
                "--observe-timeout", "50ms", "--", "true",
            ],
            &[
                "effect", "--job", "j", "--token", "x", "--action", "a", "--target", "t", "--",
                "true",
            ],
        ];
        for args in cases {
            let (code, _, err) = env.run(args);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
            assert!(err.starts_with("exactly: invalid value"), "{args:?}: {err}");
            assert!(!err.contains('\u{1b}'), "{args:?}: {err:?}");
        }
    }

    #[test]
    fn an_observer_settles_unknown_before_any_retry() {
        // Happened: done without re-running.
        let (env, key, code, err) = unknown_then_observe(0);
        assert_eq!(code, 0, "{err}");
        assert_eq!(env.state_of(&key).as_deref(), Some("done"));
        assert_eq!(far_count(&env.path("far.txt"), &key), 1);
        // Did not happen: exactly one re-run.
        let (env, key, code, err) = unknown_then_observe(1);
        assert_eq!(code, 0, "{err}");
        assert_eq!(env.state_of(&key).as_deref(), Some("done"));
        assert_eq!(
            far_count(&env.path("far.txt"), &key),
            2,
            "the first send plus one retry"
        );
        // Can't tell: exit 5, nothing run.
        let (env, key, code, err) = unknown_then_observe(3);
        assert_eq!(code, 5, "{err}");
        assert_eq!(env.state_of(&key).as_deref(), Some("unknown"));
        assert_eq!(far_count(&env.path("far.txt"), &key), 1);
        // Without an observer it stays unresolved until an operator resolves it.
        let (code, out, _) = env.run(&[
            "resolve",
            &key,
            "--happened",
            "--note",
            "saw it",
            "--evidence",
            "order 77",
        ]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(env.state_of(&key).as_deref(), Some("done"));
        let (code, _, err) = env.run(&["resolve", &key, "--cancel"]);
        assert_eq!(code, 1);
        assert!(err.contains("done"), "{err}");
        assert_eq!(
            env.sql_count(
                "SELECT count(*) FROM effect_ledger WHERE evidence = 'order 77' AND resolved_by \
                 IS NOT NULL"
            ),
            1
        );
    }

    #[test]
    fn exit_75_releases_the_claim_and_sends_nothing() {
        let env = Env::new();
        let t = env.claim("j", "1m").to_string();
        let (code, _, _) = env.run(&[
            "effect", "--job", "j", "--token", &t, "--action", "a", "--target", "b", "--", "sh",
            "-c", "exit 75",
        ]);
        assert_eq!(code, 75);
        assert_eq!(env.sql_count("SELECT count(*) FROM effect_ledger"), 0);
        let (code, _, _) = env.run(&[
            "effect", "--job", "j", "--token", &t, "--action", "a", "--target", "b", "--", "true",
        ]);
        assert_eq!(code, 0);
    }

    #[test]
    fn approvals_gate_the_effect_and_are_consumed_once() {
        let env = Env::new();
        let t = env.claim("order", "1m").to_string();
        let far = env.path("far.txt");
        let f = far.to_str().unwrap().to_string();
        let attempt = |input: &str| {
            env.run(&[
                "effect",
                "--job",
                "order",
                "--token",
                &t,
                "--action",
                "buy",
                "--target",
                "shop",
                "--input",
                input,
                "--needs-approval",
                "--terms",
                "buy 3 widgets for 12 EUR",
                "--",
                "sh",
                "-c",
                &format!("echo $EXACTLY_EFFECT_KEY >> {f}"),
            ])
        };
        let key = env
            .run(&[
                "key", "--action", "buy", "--target", "shop", "--input", "n=3",
            ])
            .1
            .trim()
            .to_string();
        assert_eq!(attempt("n=3").0, 4);
        assert_eq!(attempt("n=3").0, 4, "still waiting, asked once");
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'approval_requested'"),
            1
        );
        let (_, json, _) = env.run(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["totals"]["pending_approvals"], 1);
        assert_eq!(v["pending_approvals"][0]["effect_key"], key.as_str());
        assert_eq!(
            v["pending_approvals"][0]["terms_shown"],
            "buy 3 widgets for 12 EUR"
        );
        assert_eq!(
            v["totals"]["claimed_never_submitted"], 0,
            "waiting for a person is not a leak"
        );

        // Two operators approve at once: one wins, the other is told who did.
        let racers: Vec<_> = ["alice", "bob"]
            .iter()
            .map(|who| {
                env.cmd()
                    .args(["approve", &key])
                    .env("EXACTLY_ACTOR", who)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outs: Vec<_> = racers
            .into_iter()
            .map(|c| split(c.wait_with_output().unwrap()))
            .collect();
        let told: Vec<_> = outs
            .iter()
            .filter(|o| o.2.contains("already approved by"))
            .collect();
        assert_eq!(told.len(), 1, "{outs:?}");
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'approval_granted'"),
            1
        );
        let (_, json, _) = env.run(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v["totals"]["unused_approvals"], 1,
            "approved, not yet used, is visible"
        );

        assert_eq!(attempt("n=3").0, 0);
        assert_eq!(attempt("n=3").0, 0, "duplicate suppressed");
        assert_eq!(far_count(&far, &key), 1);
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'approval_consumed'"),
            1
        );
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_approvals WHERE state = 'consumed'"),
            1
        );

        // Denied: cancelled, exit 7, never sent.
        let key2 = env
            .run(&[
                "key", "--action", "buy", "--target", "shop", "--input", "n=4",
            ])
            .1
            .trim()
            .to_string();
        assert_eq!(attempt("n=4").0, 4);
        assert_eq!(env.run(&["deny", &key2, "--note", "too expensive"]).0, 0);
        assert_eq!(env.state_of(&key2).as_deref(), Some("cancelled"));
        assert_eq!(attempt("n=4").0, 7);
        assert_eq!(far_count(&far, &key2), 0);
        let (code, _, err) = env.run(&["approve", &key2]);
        assert_eq!(code, 1);
        assert!(err.contains("already denied"), "{err}");
    }

    #[test]
    fn hostile_strings_never_reach_the_terminal_raw() {
        let env = Env::new();
        // The CLI refuses such a job name (exit 2); another program may still write one.
        let (code, _, err) =
            env.run(&["lease", "claim", "--job", "evil\u{1b}[2Jjob", "--for", "1m"]);
        assert_eq!(code, 2, "{err}");
        let t = env.claim("evil", "1m").to_string();
        // A foreign writer's row.
        env.sql_execute(
            "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at) \
             VALUES ('evil\u{1b}[2Jjob', 'py', 1, \
             '2000-01-01T00:00:00.000Z', '2000-01-01T00:00:00.000Z')",
        );
        let (code, _, _) = env.run(&[
            "effect",
            "--job",
            "evil",
            "--token",
            &t,
            "--action",
            "a",
            "--target",
            "b",
            "--needs-approval",
            "--terms",
            "pay \u{1b}]0;pwned\u{7} \u{202e}100\r",
            "--",
            "true",
        ]);
        assert_eq!(code, 4);
        let (code, out, _) = env.run(&["status"]);
        assert_eq!(code, 0);
        assert!(
            !out.chars()
                .any(|c| c == '\u{1b}' || c == '\r' || c == '\u{202e}' || c == '\u{7}'),
            "{out:?}"
        );
        let (code, out, _) = env.run(&["metrics"]);
        assert_eq!(code, 0);
        assert!(!out.contains('\u{1b}'));
        assert!(out.contains("exactly_pending_approvals 1"));
    }

    #[test]
    fn metrics_are_valid_prometheus_text() {
        let env = Env::new();
        let t = env.claim("nightly \"backup\"", "1m");
        let _ = run_effect(&env, "nightly \"backup\"", t, "n=1");
        let _ = run_effect(&env, "nightly \"backup\"", t, "n=1");
        let (code, out, _) = env.run(&["metrics"]);
        assert_eq!(code, 0);
        let mut typed = std::collections::HashSet::new();
        for line in out.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                typed.insert(rest.split(' ').next().unwrap().to_string());
                continue;
            }
            if line.starts_with('#') {
                continue;
            }
            let (name_labels, value) = line.rsplit_once(' ').expect("name value");
            let name = name_labels.split('{').next().unwrap();
            // A histogram's samples are its name with _bucket, _sum or _count.
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                .unwrap_or(name);
            assert!(typed.contains(family), "{name} has no TYPE line");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
        assert!(
            out.contains("exactly_duplicates_suppressed_total 1"),
            "{out}"
        );
        assert!(
            out.contains(r#"exactly_job_fencing_token{exactly_job="nightly \"backup\""} 1"#),
            "{out}"
        );
    }

    #[test]
    fn many_processes_opening_a_new_database_at_once_all_succeed() {
        for _ in 0..3 {
            let env = Env::new();
            let children: Vec<_> = (0..12)
                .map(|_| {
                    // A writing command: read commands never create the file.
                    env.cmd()
                        .arg("init")
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect();
            for c in children {
                let (code, _, err) = split(c.wait_with_output().unwrap());
                assert_eq!(code, 0, "{err}");
            }
        }
    }
}

// SQLite only: these tests are about SQLite files themselves.

// Writes a SQLite file with the seeds' SQL and reads its PRAGMAs.
#[test]
fn adopts_a_database_written_with_the_seeds_sql() {
    let env = Env::new();
    {
        let c = rusqlite::Connection::open(&env.db).unwrap();
        c.execute_batch(
            "CREATE TABLE job_lease ( job_key TEXT PRIMARY KEY, owner TEXT NOT NULL, fencing_token \
             INTEGER NOT NULL, lease_until TEXT NOT NULL, created_at TEXT NOT NULL );
             CREATE TABLE effect_ledger ( effect_key TEXT PRIMARY KEY, job_key TEXT NOT NULL, \
             run_id TEXT NOT NULL, state TEXT NOT NULL, terms_shown TEXT, response TEXT, \
             created_at TEXT NOT NULL, updated_at TEXT NOT NULL );",
        )
        .unwrap();
        c.execute(
            "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at) VALUES \
             (?1, ?2, (SELECT coalesce(max(fencing_token), 0) + 1 FROM job_lease WHERE job_key = \
             ?1), ?3, ?4) ON CONFLICT(job_key) DO UPDATE SET owner = excluded.owner, \
             fencing_token = excluded.fencing_token, lease_until = excluded.lease_until WHERE \
             job_lease.lease_until < excluded.created_at",
            ["py-job", "python", "2020-01-01T00:00:00.000Z", "2019-12-31T23:59:00.000Z"],
        )
        .unwrap();
        for (k, s) in [
            ("k-done", "done"),
            ("k-unknown", "unknown"),
            ("k-claimed", "claimed"),
        ] {
            c.execute(
                "INSERT INTO effect_ledger (effect_key, job_key, run_id, state, created_at, \
                 updated_at) VALUES (?1, 'py-job', 'r1', ?2, '2020-01-01T00:00:00.000Z', \
                 '2020-01-01T00:00:00.000Z')",
                [k, s],
            )
            .unwrap();
        }
    }
    let (code, _, err) = env.run(&["init"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        env.sql_count("SELECT count(*) FROM effect_ledger"),
        3,
        "no row lost"
    );
    assert_eq!(
        env.sql_count(
            "SELECT count(*) FROM pragma_table_info('effect_ledger') WHERE name = 'fencing_token'"
        ),
        1
    );
    assert_eq!(
        env.sql_count("PRAGMA user_version"),
        exactly::SCHEMA_VERSION
    );
    let (_, json, _) = env.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["totals"]["unknown"], 1);
    assert_eq!(v["totals"]["claimed_never_submitted"], 1);
    assert_eq!(v["unknown"][0]["effect_key"], "k-unknown");
    assert!(v["unknown"][0]["age_s"].as_i64().unwrap() > 86400);
    assert_eq!(v["jobs"][0]["job_key"], "py-job");
    // The token continues from the seed's.
    assert_eq!(env.claim("py-job", "1m"), 2);
}

// Makes its own SQLite files (newer, not SQLite, foreign, corrupt), not the Env's database.
#[test]
fn refuses_newer_foreign_and_corrupt_databases_without_writing() {
    /// `exactly --db PATH CMD` refuses the file: exit 1, one line saying `why`, no byte changed.
    fn assert_refused(path: &std::path::Path, cmd: &str, why: Option<&str>) {
        let before = std::fs::read(path).unwrap();
        let out = Command::new(support::bin())
            .arg("--db")
            .arg(path)
            .arg(cmd)
            .output()
            .unwrap();
        let (code, _, err) = split(out);
        assert_eq!(code, 1, "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!err.contains("panicked"), "{err}");
        if let Some(why) = why {
            assert!(err.contains(why), "{err}");
        }
        assert_eq!(
            std::fs::read(path).unwrap(),
            before,
            "nothing written to {path:?}"
        );
    }
    let env = Env::new();
    // Newer schema.
    let newer = env.path("newer.db");
    rusqlite::Connection::open(&newer)
        .unwrap()
        .execute_batch("PRAGMA user_version = 99; CREATE TABLE t (x);")
        .unwrap();
    assert_refused(&newer, "status", Some("newer"));
    // Not SQLite at all.
    let junk = env.path("junk.db");
    std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
    assert_refused(&junk, "init", Some("not a SQLite database"));
    // A table named like ours that is not ours.
    let foreign = env.path("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch(
            "CREATE TABLE effect_ledger (id INTEGER, body TEXT); INSERT INTO effect_ledger VALUES \
             (1, 'x');",
        )
        .unwrap();
    assert_refused(&foreign, "init", Some("not exactly's"));
    // Corrupt: a real database with its pages overwritten.
    let corrupt = env.path("corrupt.db");
    rusqlite::Connection::open(&corrupt)
        .unwrap()
        .execute_batch("CREATE TABLE a (x); INSERT INTO a VALUES (randomblob(20000));")
        .unwrap();
    let mut bytes = std::fs::read(&corrupt).unwrap();
    for b in bytes.iter_mut().skip(100).take(4000) {
        *b = 0xff;
    }
    std::fs::write(&corrupt, &bytes).unwrap();
    assert_refused(&corrupt, "status", None);
}

// A stored time that is not a time (month 13), in a real SQLite file: each command that
// reads it says so in one line (exit 1), where an approval was 0 s old and an effect changed
// 0 s ago.
#[test]
fn a_bad_time_in_a_row_is_one_line_of_corruption_not_age_zero() {
    let env = Env::new();
    env.run(&["init"]);
    let bad = "2026-13-01T00:00:00.000Z";
    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.execute(
        "INSERT INTO exactly_approvals (effect_key, job_key, state, requested_at) \
         VALUES ('k', 'j', 'pending', ?1)",
        [bad],
    )
    .unwrap();
    for args in [&["status"][..], &["status", "--json"]] {
        let (code, out, err) = env.run(args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.contains(&format!(
                "exactly_approvals.requested_at holds \"{bad}\", not a time"
            )),
            "{err}"
        );
    }
    c.execute(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
         created_at, updated_at) VALUES ('e', 'j', 'r', 1, 'unknown', \
         '2026-01-01T00:00:00.000Z', ?1)",
        [bad],
    )
    .unwrap();
    let (code, out, err) = env.run(&["effects", "--state", "unknown"]);
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "effect_ledger.updated_at holds \"{bad}\", not a time"
        )),
        "{err}"
    );
}

// The ledger row's own times (month 13), in a real SQLite file: `exactly effects` showed a
// bad creation time as found, and `exactly resolve` judged a bad send deadline as a sender in
// flight for ever (exit 5); each now says the row is corrupt, in one line (exit 1).
#[test]
fn a_bad_time_in_a_ledger_row_is_one_line_of_corruption_not_a_guess() {
    let env = Env::new();
    env.run(&["init"]);
    let bad = "2026-13-01T00:00:00.000Z";
    let good = "2026-01-01T00:00:00.000Z";
    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.execute(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
         created_at, updated_at) VALUES ('e', 'j', 'r', 1, 'unknown', ?1, ?2)",
        [bad, good],
    )
    .unwrap();
    c.execute(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
         created_at, updated_at, attempt, sender_until) \
         VALUES ('s', 'j', 'r', 1, 'submitted', ?2, ?2, 'elsewhere:1', ?1)",
        [bad, good],
    )
    .unwrap();
    let one_line = |args: &[&str], column: &str| {
        let (code, out, err) = env.run(args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.contains(&format!(
                "effect_ledger.{column} holds \"{bad}\", not a time"
            )),
            "{args:?}: {err}"
        );
    };
    one_line(&["effects", "--state", "unknown"], "created_at");
    one_line(&["effects", "--state", "unknown", "--json"], "created_at");
    one_line(
        &["effects", "--state", "submitted", "--json"],
        "sender_until",
    );
    one_line(&["resolve", "s", "--happened"], "sender_until");
}

// A SQLite write lock (BEGIN IMMEDIATE) and the busy timeout.
#[test]
fn a_locked_database_waits_for_the_busy_timeout_then_says_so() {
    let env = Env::new();
    env.run(&["init"]);
    let c = rusqlite::Connection::open(&env.db).unwrap();
    c.execute_batch("BEGIN IMMEDIATE; INSERT INTO exactly_counters VALUES ('x', '', 1);")
        .unwrap();
    let start = std::time::Instant::now();
    let out = env
        .cmd()
        .args(["lease", "claim", "--job", "j", "--for", "1m"])
        .env("EXACTLY_BUSY_TIMEOUT_MS", "700")
        .output()
        .unwrap();
    let waited = start.elapsed();
    let (code, _, err) = split(out);
    assert_eq!(code, 1);
    assert!(err.contains("locked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1);
    assert!(waited >= Duration::from_millis(600), "waited {waited:?}");
    // Once the writer commits, the same claim goes through.
    c.execute_batch("COMMIT").unwrap();
    assert_eq!(env.claim("j", "1m"), 1);
}

// A reader that meets a database another process is creating (a scheduler started on a new
// path) waits for the creating transaction instead of calling it a database without tables.
#[test]
fn a_read_during_the_databases_creation_waits_for_its_schema() {
    use std::io::BufRead;
    let env = Env::new();
    let mut init = env
        .cmd()
        .arg("init")
        .env("EXACTLY_FAULT", "schema_create:pause=700ms")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start init");
    let stderr = init.stderr.take().expect("init's stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let at_point = lines
        .next()
        .expect("a line from init")
        .expect("read init's stderr");
    assert_eq!(at_point, "exactly-fault: schema_create");
    // The file exists, its tables are written and not committed.
    assert!(env.db.exists());
    let (code, out, err) = env.run(&["status", "--json"]);
    assert_eq!(code, 0, "a reader during creation: {err}");
    assert!(out.contains("\"schema_version\""), "{out}");
    assert!(init.wait().expect("wait for init").success());
}

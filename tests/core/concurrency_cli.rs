//! Issue 9's reproductions, with real `exactly` processes, real databases (SQLite files, and
//! PostgreSQL schemas with `EXACTLY_TEST_PG`) and a far side that is a file of received effect
//! keys (it never deduplicates).
use crate::on_both_backends;
use crate::support;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::cli::{bin, far_count, split, Env};
use support::{effect_args, strs};

/// The wrapped command: waits `before` seconds, sends (appends the key to the far side), then
/// takes `after` seconds to answer.
fn sender(far: &str, before: f32, after: f32) -> String {
    format!("sleep {before}; echo \"$EXACTLY_EFFECT_KEY\" >> {far}; sleep {after}")
}

/// A slow observer: reads the far side first, answers 2 s later (a slow API).
fn slow_observer(far: &str) -> String {
    format!("if grep -qx \"$EXACTLY_EFFECT_KEY\" {far}; then r=0; else r=1; fi; sleep 2; exit $r")
}

struct Attempt<'a> {
    job: &'a str,
    token: i64,
    host: &'a str,
    command: String,
    observe: Option<String>,
}

fn spawn(env: &Env, a: &Attempt<'_>) -> Child {
    let t = a.token.to_string();
    let mut effect = pay(a.job, &t);
    if let Some(o) = &a.observe {
        effect = effect.observe(o);
    }
    let mut c = env.cmd();
    c.env("EXACTLY_HOST", a.host)
        .args(effect.sh(&a.command))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn exactly effect")
}

/// Paying 12.00 into acct-1 as `job` under `token`.
fn pay(job: &str, token: &str) -> support::EffectArgs {
    effect_args(job, token, "pay", "acct-1").input("amount=12.00")
}

fn key(env: &Env) -> String {
    let (code, out, err) = env.run(&[
        "key",
        "--action",
        "pay",
        "--target",
        "acct-1",
        "--input",
        "amount=12.00",
    ]);
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

/// Makes the effect `unknown` the way it happens: a first attempt's command fails without
/// sending (the far side got nothing).
fn make_unknown(env: &Env, job: &str, token: i64) {
    let t = token.to_string();
    let (code, _, err) = env.run(&strs(&pay(job, &t).sh("exit 1")));
    assert_eq!(code, 6, "{err}");
}

/// Two live attempts 0.5 s apart on one unknown effect, each with a 2 s slow observer: the
/// second one's observer looked before the first sent, so its "did not happen" is about a row
/// version that has moved on. It must be discarded, never applied to the first's in-flight send.
fn two_live_attempts(second_job: &str) {
    let env = Env::new();
    let far = env.path("far.txt");
    std::fs::write(&far, "").expect("far side");
    let far = far.to_str().expect("utf8");
    let t1 = env.claim("pay-run", "10m");
    let t2 = if second_job == "pay-run" {
        t1
    } else {
        env.claim(second_job, "10m")
    };
    make_unknown(&env, "pay-run", t1);
    let k = key(&env);
    let a = spawn(
        &env,
        &Attempt {
            job: "pay-run",
            token: t1,
            host: "web-1",
            command: sender(far, 0.0, 1.5),
            observe: Some(slow_observer(far)),
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    let b = spawn(
        &env,
        &Attempt {
            job: second_job,
            token: t2,
            host: "web-1",
            command: sender(far, 0.0, 1.5),
            observe: Some(slow_observer(far)),
        },
    );
    let (ca, _, ea) = split(a.wait_with_output().expect("wait a"));
    let (cb, _, eb) = split(b.wait_with_output().expect("wait b"));
    assert_eq!(
        far_count(std::path::Path::new(far), &k),
        1,
        "the far side got the effect more than once: a exit {ca} ({ea}), b exit {cb} ({eb})"
    );
    assert_eq!(ca, 0, "{ea}");
    assert!(cb == 0 || cb == 5, "b exit {cb}: {eb}");
    assert_eq!(env.state_of(&k).as_deref(), Some("done"));
    assert_eq!(
        env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'stale_verdict'"),
        1,
        "b's verdict was recorded as stale: {eb}"
    );
}

fn seed_db(env: &Env, rows: &[(&str, &str)]) {
    let c = rusqlite::Connection::open(&env.db).expect("open");
    c.execute_batch(
        "CREATE TABLE job_lease (job_key TEXT PRIMARY KEY, owner TEXT NOT NULL,
           fencing_token INTEGER NOT NULL, lease_until TEXT NOT NULL, created_at TEXT NOT NULL);
         CREATE TABLE effect_ledger (effect_key TEXT NOT NULL, job_key TEXT NOT NULL,
           run_id TEXT NOT NULL, fencing_token INTEGER, state TEXT NOT NULL,
           terms_shown TEXT, response TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);",
    )
    .expect("seed schema");
    for (k, st) in rows {
        c.execute(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, state, created_at, updated_at)
             VALUES (?1, 'py-job', 'r1', ?2, '2020-01-01T00:00:00.000Z', \
             '2020-01-01T00:00:00.000Z')",
            [k, st],
        )
        .expect("seed row");
    }
}

on_both_backends! {
    #[test]
    fn a_slow_observers_verdict_about_a_moved_row_is_discarded_same_job_and_token() {
        two_live_attempts("pay-run");
    }

    #[test]
    fn a_slow_observers_verdict_about_a_moved_row_is_discarded_two_jobs() {
        two_live_attempts("pay-run-2");
    }

    /// A fresh effect whose sender runs on another host (`EXACTLY_HOST`): its process cannot be
    /// checked from here, so its live lease says it may be sending. The second attempt exits 5,
    /// "in flight", naming who and since when, and sends nothing.
    #[test]
    fn a_send_in_flight_on_another_host_is_not_settled() {
        let env = Env::new();
        let far = env.path("far.txt");
        std::fs::write(&far, "").expect("far side");
        let far = far.to_str().expect("utf8");
        let t = env.claim("pay-run", "10m");
        let k = key(&env);
        let a = spawn(
            &env,
            &Attempt {
                job: "pay-run",
                token: t,
                host: "host-a",
                command: sender(far, 1.0, 0.5),
                observe: Some(slow_observer(far)),
            },
        );
        std::thread::sleep(Duration::from_millis(500));
        let b = spawn(
            &env,
            &Attempt {
                job: "pay-run",
                token: t,
                host: "host-b",
                command: sender(far, 0.0, 0.0),
                observe: Some(slow_observer(far)),
            },
        );
        let (cb, _, eb) = split(b.wait_with_output().expect("wait b"));
        let (ca, _, ea) = split(a.wait_with_output().expect("wait a"));
        assert_eq!(
            far_count(std::path::Path::new(far), &k),
            1,
            "a exit {ca} ({ea}), b exit {cb} ({eb})"
        );
        assert_eq!(ca, 0, "{ea}");
        assert_eq!(cb, 5, "{eb}");
        assert!(eb.contains("in flight"), "{eb}");
        assert!(eb.contains("host-a:"), "names the sender: {eb}");
        assert_eq!(eb.trim().lines().count(), 1, "{eb}");
    }

    /// Once the sender's lease has expired (and the clock-skew margin passed), a "did not happen"
    /// verdict may release its row for a retry: a sender on another host that died before sending.
    #[test]
    fn after_the_senders_lease_expires_the_effect_is_settled_and_sent_once() {
        let env = Env::new().with_skew("300ms");
        let far = env.path("far.txt");
        std::fs::write(&far, "").expect("far side");
        let farp = far.to_str().expect("utf8");
        let t = env.claim("pay-run", "1s");
        let k = key(&env);
        let mut a = spawn(
            &env,
            &Attempt {
                job: "pay-run",
                token: t,
                host: "host-a",
                command: sender(farp, 30.0, 0.0),
                observe: None,
            },
        );
        // a is now sending (its command holds the request); it dies before the request leaves.
        std::thread::sleep(Duration::from_millis(400));
        a.kill().expect("kill a");
        a.wait().expect("wait a");
        assert_eq!(env.state_of(&k).as_deref(), Some("submitted"));
        let observe = format!("grep -qx \"$EXACTLY_EFFECT_KEY\" {farp} && exit 0 || exit 1");
        let t2 = env.claim("pay-run-2", "10m");
        let b = Attempt {
            job: "pay-run-2",
            token: t2,
            host: "host-b",
            command: sender(farp, 0.0, 0.0),
            observe: Some(observe),
        };
        // Within the lease: in flight.
        let (cb, _, eb) = split(spawn(&env, &b).wait_with_output().expect("b"));
        assert_eq!(cb, 5, "{eb}");
        assert!(eb.contains("in flight"), "{eb}");
        // Past the lease, the skew margin and the time a wrapped command takes to be stopped
        // (0.7 s): settled "did not happen", then sent once.
        std::thread::sleep(Duration::from_millis(1700));
        let (cb, _, eb) = split(spawn(&env, &b).wait_with_output().expect("b"));
        assert_eq!(cb, 0, "{eb}");
        assert_eq!(far_count(&far, &k), 1);
        assert_eq!(env.state_of(&k).as_deref(), Some("done"));
    }

    /// The approval requirement belongs to the effect key: pay-a asks for approval, pay-b runs the
    /// same effect without the flag and must wait too; a denial of what is no longer pending fails.
    #[test]
    fn approval_belongs_to_the_effect_key() {
        let env = Env::new();
        let far = env.path("far.txt");
        std::fs::write(&far, "").expect("far side");
        let farp = far.to_str().expect("utf8");
        let ta = env.claim("pay-a", "10m");
        let tb = env.claim("pay-b", "10m");
        let k = key(&env);
        let run = |job: &str, token: i64, flag: bool| {
            let t = token.to_string();
            let mut args = pay(job, &t);
            if flag {
                args = args.arg("--needs-approval");
            }
            env.run(&strs(&args.sh(&sender(farp, 0.0, 0.0))))
        };
        assert_eq!(run("pay-a", ta, true).0, 4);
        let (code, _, err) = run("pay-b", tb, false);
        assert_eq!(code, 4, "sent without anyone approving it: {err}");
        assert!(err.contains("awaits approval"), "{err}");
        assert_eq!(far_count(&far, &k), 0);
        assert_eq!(env.run(&["approve", &k]).0, 0);
        assert_eq!(run("pay-b", tb, false).0, 0);
        assert_eq!(far_count(&far, &k), 1);
        // Denying an effect that is already done answers non-zero, saying what state it is in.
        let (code, _, err) = env.run(&["deny", &k]);
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("done"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert_eq!(env.state_of(&k).as_deref(), Some("done"));
    }

    /// The library's deny says the same.
    #[test]
    fn library_deny_of_a_done_effect_reports_its_state() {
        use exactly::effect::{self, Ctx, Effect, Failure, Observation, Spec};
        struct Pay;
        impl Effect for Pay {
            fn perform(&mut self, _: &str) -> Result<String, Failure> {
                Ok("paid".into())
            }
            fn observe(&mut self, _: &str) -> Observation {
                Observation::NotHappened
            }
        }
        let env = Env::new();
        let mut s = env.store();
        let t = match exactly::lease::claim(
            &mut s,
            &exactly::JobName::from("pay-a"),
            "w",
            Duration::from_secs(600),
        )
        .expect("claim")
        {
            exactly::lease::Claim::Won { token } => token,
            other => panic!("{other:?}"),
        };
        let spec = Spec::new("pay", "acct-1").needs_approval(true);
        let ctx = Ctx::new(&exactly::JobName::from("pay-a"), t);
        let out = effect::run(&mut s, &ctx, &spec, &mut Pay).expect("run");
        assert_eq!(out.exit_code(), 4);
        let k = spec.key();
        exactly::approval::approve(&mut s, &k, "bob", None).expect("approve");
        let plain = Spec::new("pay", "acct-1");
        assert_eq!(
            effect::run(&mut s, &ctx, &plain, &mut Pay)
                .expect("run")
                .exit_code(),
            0
        );
        match exactly::approval::deny(&mut s, &k, "bob", None).expect("deny") {
            exactly::approval::Decided::Already { state, .. } => assert_eq!(state.as_str(), "done"),
            other => panic!("deny of a done effect: {other:?}"),
        }
    }

    /// Inputs that cannot be told apart are refused with exit 2 and one line, by `key`, by
    /// `effect` (which then writes nothing and sends nothing) and by the library.
    #[test]
    fn ambiguous_inputs_are_refused() {
        let env = Env::new();
        let far = env.path("far.txt");
        let farp = far.to_str().expect("utf8");
        let t = env.claim("job", "10m");
        let ts = t.to_string();
        let cmd = format!("echo \"$EXACTLY_EFFECT_KEY\" >> {farp}");
        let bad: &[&[&str]] = &[
            &["--action", "pay|acct-1", "--target", "acct-2"],
            &["--action", "", "--target", "acct-2"],
            &["--action", "pay", "--target", ""],
            &["--action", "pay", "--target", "acct-2", "--input", "=5"],
            &[
                "--action", "pay", "--target", "acct-2", "--input", "a=1", "--input", "a=2",
            ],
        ];
        for args in bad {
            let mut k = vec!["key"];
            k.extend_from_slice(args);
            let (code, out, err) = env.run(&k);
            assert_eq!((code, out.as_str()), (2, ""), "key {args:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
            let mut e = vec!["effect", "--job", "job", "--token", &ts];
            e.extend_from_slice(args);
            e.extend(["--", "sh", "-c", &cmd]);
            let (code, _, err) = env.run(&e);
            assert_eq!(code, 2, "effect {args:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "{err}");
        }
        assert_eq!(env.sql_count("SELECT count(*) FROM effect_ledger"), 0);
        assert!(!far.exists(), "nothing was sent");
        // The other reading of the joined string is a real, distinct effect and is sent.
        let (code, _, err) = env.run(&strs(
            &effect_args("job", &ts, "pay", "acct-1|acct-2").sh(&cmd),
        ));
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            std::fs::read_to_string(&far).expect("far").lines().count(),
            1
        );
        // The library refuses the same.
        let spec = exactly::effect::Spec::new("pay|acct-1", "acct-2");
        assert!(matches!(spec.checked_key(), Err(exactly::Error::Usage(_))));
    }

    /// Durations stay bounded end to end (no 5-digit year, no panic); a lease below 100 ms and a
    /// throwaway database are refused.
    #[test]
    fn absurd_leases_and_throwaway_databases_are_refused() {
        let env = Env::new();
        for d in ["8000y", "300000y", "0s", "50ms"] {
            let (code, out, err) = env.run(&["lease", "claim", "--job", "j", "--for", d]);
            assert_eq!((code, out.as_str()), (2, ""), "--for {d}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "--for {d}: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
        let t = env.claim("j", "1m").to_string();
        for d in ["8000y", "0s"] {
            let (code, _, err) =
                env.run(&["lease", "renew", "--job", "j", "--token", &t, "--for", d]);
            assert_eq!(code, 2, "renew --for {d}: {err}");
        }
        assert_eq!(
            env.sql_count("SELECT count(*) FROM job_lease WHERE length(lease_until) <> 24"),
            0
        );
        for db in ["", ":memory:", "file::memory:?cache=shared"] {
            for args in [
                &["init"][..],
                &["lease", "claim", "--job", "j", "--for", "1m"][..],
                &["status"][..],
                &[
                    "effect", "--job", "j", "--token", "1", "--action", "a", "--target", "t", "--",
                    "true",
                ][..],
            ] {
                let out = Command::new(bin())
                    .arg("--db")
                    .arg(db)
                    .args(args)
                    .current_dir(env.dir.path())
                    .output()
                    .expect("run");
                let (code, out, err) = split(out);
                assert!(
                    code == 2 || code == 1,
                    "--db {db:?} {args:?}: {code} {out} {err}"
                );
                assert_eq!(err.trim().lines().count(), 1, "{err}");
            }
        }
    }

    /// The clock-skew margin: an expired lease is taken over only once the margin has passed too.
    #[test]
    fn an_expired_lease_is_taken_over_only_after_the_skew_margin() {
        let env = Env::new().with_skew("1s");
        let t = env.claim("j", "200ms");
        // Time passes on purpose: past the lease, within the margin; then past the margin.
        std::thread::sleep(Duration::from_millis(400));
        let (code, _, err) = env.run(&["lease", "claim", "--job", "j", "--for", "1m"]);
        assert_eq!(code, 3, "taken over within the skew margin: {err}");
        std::thread::sleep(Duration::from_millis(1000));
        assert_eq!(env.claim("j", "1m"), t + 1);
    }

    /// The lease is the permission to send: with less than the minimum of it left, nothing is sent.
    #[test]
    fn a_lease_about_to_end_does_not_send() {
        let env = Env::new();
        let far = env.path("far.txt");
        let farp = far.to_str().expect("utf8");
        let t = env.claim("j", "150ms").to_string();
        std::thread::sleep(Duration::from_millis(100));
        let cmd = format!("echo \"$EXACTLY_EFFECT_KEY\" >> {farp}");
        let (code, _, err) = env.run(&strs(&effect_args("j", &t, "pay", "acct-1").sh(&cmd)));
        assert_eq!(code, 3, "{err}");
        assert!(err.contains("lease"), "{err}");
        assert!(!far.exists(), "sent under a lease about to end");
    }

    /// A row written by another program with the seed's SQL has no version (NULL, read as 0): the
    /// compare-and-set still settles it, and every transition from then on counts up from there.
    #[test]
    fn a_row_written_with_the_seeds_sql_is_settled_by_compare_and_set() {
        let env = Env::new();
        assert_eq!(env.run(&["init"]).0, 0);
        let k = key(&env);
        // The key is hex: safe to write into the SQL.
        assert!(k.chars().all(|c| c.is_ascii_hexdigit()), "{k}");
        env.sql_execute(&format!(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, state, created_at, updated_at)
             VALUES ('{k}', 'py-job', 'r1', 'unknown', '2020-01-01T00:00:00.000Z', \
             '2020-01-01T00:00:00.000Z')"
        ));
        let far = env.path("far.txt");
        std::fs::write(&far, "").expect("far side");
        let farp = far.to_str().expect("utf8");
        let t = env.claim("pay-run", "10m");
        let observe = format!("grep -qx \"$EXACTLY_EFFECT_KEY\" {farp} && exit 0 || exit 1");
        let (code, _, err) = split(
            spawn(
                &env,
                &Attempt {
                    job: "pay-run",
                    token: t,
                    host: "web-1",
                    command: sender(farp, 0.0, 0.0),
                    observe: Some(observe),
                },
            )
            .wait_with_output()
            .expect("wait"),
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(far_count(&far, &k), 1);
        assert_eq!(env.state_of(&k).as_deref(), Some("done"));
        // not happened (1), submitted (2), done (3)
        assert_eq!(
            env.sql_count("SELECT version FROM effect_ledger WHERE state = 'done'"),
            3
        );
    }
}

// SQLite only: adoption of a SQLite file another program wrote.

// Seeds a SQLite file with rusqlite and compares the file's bytes before and after.
/// Adopting an `effect_ledger` without a unique key adds one, so the same effect cannot run
/// twice afterwards; with a duplicated key already stored, adoption is refused, changing nothing.
#[test]
fn adoption_keeps_the_unique_guard() {
    let env = Env::new();
    seed_db(&env, &[("k-done", "done")]);
    let (code, _, err) = env.run(&["init"]);
    assert_eq!(code, 0, "{err}");
    let far = env.path("far.txt");
    let farp = far.to_str().expect("utf8");
    let t = env.claim("job", "10m").to_string();
    let cmd = format!("echo \"$EXACTLY_EFFECT_KEY\" >> {farp}");
    let args = effect_args("job", &t, "pay", "acct-1").sh(&cmd);
    let args = strs(&args);
    assert_eq!(env.run(&args).0, 0);
    let (code, _, err) = env.run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("duplicate suppressed"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&far).expect("far").lines().count(),
        1
    );
    // A plain INSERT of the same key by another program is refused now, too.
    let c = rusqlite::Connection::open(&env.db).expect("open");
    let again = c.execute(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, state, created_at, updated_at)
         VALUES ('k-done', 'py-job', 'r2', 'claimed', 'x', 'x')",
        [],
    );
    assert!(again.is_err(), "the adopted table accepts a duplicate key");

    let env = Env::new();
    seed_db(
        &env,
        &[
            ("k-twice", "done"),
            ("k-twice", "claimed"),
            ("k-once", "done"),
        ],
    );
    let before = std::fs::read(&env.db).expect("read db");
    let (code, out, err) = env.run(&["init"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("k-twice"), "names the duplicated key: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(
        std::fs::read(&env.db).expect("read db"),
        before,
        "nothing changed"
    );
}

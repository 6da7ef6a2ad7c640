//! What `exactly effect` tells its caller, and what the ledger remembers, when the reply to a
//! committed write is lost, an observer never answers, history is pruned, and a duplicate
//! replays an answer. Real processes, a far side that is a file, a real database (a SQLite
//! file, and a PostgreSQL schema with `EXACTLY_TEST_PG`).
use crate::on_both_backends;
use crate::support;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::cli::{far_count, Env};
use support::effect_args;

/// The effect key of `send` to `t` with input `n=input`.
fn key(env: &Env, input: &str) -> String {
    let n = format!("n={input}");
    let (code, out, err) = env.run(&["key", "--action", "send", "--target", "t", "--input", &n]);
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

/// A command that records one delivery of its effect on the far side, then answers.
fn deliver(env: &Env, answer: &str) -> String {
    let far = env.path("far.txt");
    format!(
        "echo $EXACTLY_EFFECT_KEY >> '{}'; echo '{answer}'",
        far.display()
    )
}

/// Fenced writes counted, all time (the dashboard's counter) and as events.
fn fenced_writes(env: &Env) -> (i64, i64) {
    (
        env.sql_count(
            "SELECT coalesce(sum(n), 0) FROM exactly_counters WHERE kind = 'fenced_write'",
        ),
        env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'fenced_write'"),
    )
}

/// Runs `exactly ARGS…`, failing the test (after killing it) when it outlives `limit`; returns
/// (exit code, stdout, stderr, how long it took).
fn run_within(env: &Env, args: &[String], limit: Duration) -> (i32, String, String, Duration) {
    let started = Instant::now();
    // In a process group of its own: what it leaves running (an observer) is killed with it.
    let mut child = env
        .cmd()
        .args(args)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn exactly");
    // Both pipes drained as it writes: a full pipe would stall it.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                p.read_to_end(&mut buf).expect("read a pipe of exactly");
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let status = support::poll(
        Duration::from_millis(50),
        limit.saturating_sub(started.elapsed()),
        || child.try_wait().expect("try_wait"),
    );
    let status = status.unwrap_or_else(|| {
        // SAFETY: a negative pid names the group we made it lead.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
        panic!("exactly {args:?} still running after {limit:?}");
    });
    let took = started.elapsed();
    let out = out.join().expect("stdout reader");
    let err = err.join().expect("stderr reader");
    (status.code().unwrap_or(-1), out, err, took)
}

/// Leaves effect `n=input` `unknown`: its command exits 9 without saying anything.
fn unknown(env: &Env, token: i64, input: &str) -> String {
    let args = effect_args("pay", token, "send", "t")
        .input(&format!("n={input}"))
        .sh("exit 9");
    let (code, _, err) = env.run(&support::strs(&args));
    assert_eq!(code, 6, "{err}");
    let k = key(env, input);
    assert_eq!(env.state_of(&k).as_deref(), Some("unknown"));
    k
}

on_both_backends! {
    #[test]
    fn a_quiet_duplicate_prints_nothing_and_still_exits_0() {
        let env = Env::new();
        let token = env.claim("quiet", "1h");
        let args = |quiet: bool| {
            let mut a = effect_args("quiet", token, "send", "t").input("n=1");
            if quiet {
                a = a.arg("--quiet");
            }
            a.sh(&deliver(&env, "the answer"))
        };
        let first = env.run(&support::strs(&args(true)));
        assert_eq!((first.0, first.1.trim()), (0, "the answer"), "{}", first.2);
        let loud = env.run(&support::strs(&args(false)));
        assert_eq!((loud.0, loud.1.trim()), (0, "the answer"), "a duplicate replays the answer");
        assert!(loud.2.contains("duplicate suppressed"), "{}", loud.2);
        let quiet = env.run(&support::strs(&args(true)));
        assert_eq!(
            quiet,
            (0, String::new(), String::new()),
            "--quiet: nothing on stdout or stderr"
        );
        assert_eq!(far_count(&env.path("far.txt"), &key(&env, "1")), 1);
    }

    /// The reply to the COMMIT that recorded `done` is lost (on PostgreSQL the connection is cut
    /// after the commit; the fault point is in the real write path). The retried write finds
    /// its own row: success, not "fenced", and nothing counted as a fenced write.
    #[test]
    fn a_lost_commit_reply_on_done_is_success_not_fenced() {
        let env = Env::new();
        let token = env.claim("pay", "1h");
        let args = effect_args("pay", token, "send", "t")
            .input("n=1")
            .sh(&deliver(&env, "receipt-1"));
        let out = env
            .cmd()
            .args(&args)
            .env("EXACTLY_FAULT", "finish_reply_lost")
            .output()
            .expect("run exactly");
        let (code, stdout, stderr) = support::cli::split(out);
        assert!(
            stderr.contains("exactly-fault: finish_reply_lost"),
            "the fault point was not reached: {stderr}"
        );
        assert_eq!(code, 0, "stdout {stdout:?} stderr {stderr}");
        assert_eq!(stdout.trim(), "receipt-1");
        let k = key(&env, "1");
        assert_eq!(env.state_of(&k).as_deref(), Some("done"));
        assert_eq!(fenced_writes(&env), (0, 0), "no fenced write: the token is current");
        assert_eq!(far_count(&env.path("far.txt"), &k), 1, "delivered once");
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_events WHERE kind = 'effect_done'"),
            1,
            "its end recorded once"
        );

        // The same for a command that promised nothing was sent (exit 75): the retried release
        // finds the row gone, its own doing.
        let args = effect_args("pay", token, "send", "t").input("n=2").sh("exit 75");
        let out = env
            .cmd()
            .args(&args)
            .env("EXACTLY_FAULT", "finish_reply_lost")
            .output()
            .expect("run exactly");
        let (code, _, stderr) = support::cli::split(out);
        assert!(stderr.contains("exactly-fault: finish_reply_lost"), "{stderr}");
        assert_eq!(code, 75, "{stderr}");
        assert_eq!(env.state_of(&key(&env, "2")), None, "released");
        assert_eq!(fenced_writes(&env), (0, 0));
    }

    /// A duplicate replays what the far side answered, never our own words for a failure.
    #[test]
    fn a_duplicate_replays_only_the_far_sides_answer_never_a_failure_reason() {
        let env = Env::new();
        let token = env.claim("pay", "1h");
        let k = unknown(&env, token, "1");
        let (code, _, err) = env.run(&["resolve", &k, "--happened"]);
        assert_eq!(code, 0, "{err}");
        let again = effect_args("pay", token, "send", "t")
            .input("n=1")
            .sh(&deliver(&env, "SENT-AGAIN"));
        let (code, out, err) = env.run(&support::strs(&again));
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("duplicate suppressed"), "{err}");
        assert_eq!(out, "", "no answer was recorded, so none is replayed");
        assert_eq!(far_count(&env.path("far.txt"), &k), 0);

        // An observer's answer is the far side's: it is replayed, now and later.
        let k2 = unknown(&env, token, "2");
        let args = effect_args("pay", token, "send", "t")
            .input("n=2")
            .observe("echo receipt-2")
            .sh(&deliver(&env, "SENT-AGAIN"));
        for _ in 0..2 {
            let (code, out, err) = env.run(&support::strs(&args));
            assert_eq!(code, 0, "{err}");
            assert_eq!(out, "receipt-2\n", "{err}");
        }
        assert_eq!(far_count(&env.path("far.txt"), &k2), 0);
    }

    /// `gc --effects` keeps a denial, a person's "never retry" and a pending approval, however
    /// old: a caller without `--needs-approval` is still refused. Old `done` rows still go.
    #[test]
    fn gc_never_forgets_a_denial_a_cancel_or_a_pending_approval() {
        let env = Env::new();
        let token = env.claim("pay", "1h");
        let far = env.path("far.txt");
        let ask = |input: &str| {
            let args = effect_args("pay", token, "send", "t")
                .input(&format!("n={input}"))
                .arg("--needs-approval")
                .sh(&deliver(&env, "sent"));
            env.run(&support::strs(&args))
        };
        let send = |input: &str| {
            let args = effect_args("pay", token, "send", "t")
                .input(&format!("n={input}"))
                .sh(&deliver(&env, "sent"));
            env.run(&support::strs(&args))
        };
        // Denied by a person.
        assert_eq!(ask("1").0, 4);
        let denied = key(&env, "1");
        assert_eq!(env.run(&["deny", &denied, "--note", "no"]).0, 0);
        assert_eq!(env.state_of(&denied).as_deref(), Some("cancelled"));
        // Unknown, then "never retry" by a person.
        let cancelled = unknown(&env, token, "2");
        let (code, _, err) = env.run(&["resolve", &cancelled, "--cancel"]);
        assert_eq!(code, 0, "{err}");
        // Awaiting a person.
        assert_eq!(ask("3").0, 4);
        let pending = key(&env, "3");
        // Done: the dedupe memory `--effects` may prune.
        assert_eq!(send("4").0, 0);
        // All of it three days old and more.
        let old = "2020-01-01T00:00:00.000Z";
        env.sql_execute(&format!(
            "UPDATE effect_ledger SET created_at = '{old}', updated_at = '{old}';
             UPDATE exactly_approvals SET requested_at = '{old}',
                 decided_at = CASE WHEN decided_at IS NULL THEN NULL ELSE '{old}' END;"
        ));
        let (code, out, err) = env.run(&["gc", "--keep", "1d", "--effects"]);
        assert_eq!(code, 0, "{err}");
        // A caller who does not ask for approval is still refused, and nothing is sent.
        let (code, _, err) = send("1");
        assert_eq!(code, 7, "the denial stands: {err}");
        let (code, _, err) = send("2");
        assert_eq!(code, 7, "never retry stands: {err}");
        let (code, _, err) = send("3");
        assert_eq!(code, 4, "still awaits its approval: {err}");
        for k in [&denied, &cancelled, &pending] {
            assert_eq!(far_count(&far, k), 0, "{k} was sent");
        }
        assert_eq!(env.state_of(&denied).as_deref(), Some("cancelled"));
        assert_eq!(env.state_of(&cancelled).as_deref(), Some("cancelled"));
        assert_eq!(env.state_of(&pending).as_deref(), Some("claimed"));
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_approvals WHERE state = 'denied'"),
            1
        );
        assert_eq!(
            env.sql_count("SELECT count(*) FROM exactly_approvals WHERE state = 'pending'"),
            1
        );
        assert!(out.contains("1 done effect(s)"), "{out}");
        assert_eq!(env.state_of(&key(&env, "4")), None, "the old done row is pruned");
    }

    /// `--observe-timeout` bounds an observer that never answers: "can't tell" (exit 5), the
    /// row stays open. An observer's output is capped as a command's response is.
    #[test]
    fn an_observer_is_bounded_by_observe_timeout_and_its_output_capped() {
        let env = Env::new();
        let token = env.claim("pay", "1h");
        let k = unknown(&env, token, "1");
        let args = effect_args("pay", token, "send", "t")
            .input("n=1")
            .observe("sleep 1000")
            .arg("--observe-timeout")
            .arg("1s")
            .sh(&deliver(&env, "sent-again"));
        let (code, _, err, took) = run_within(&env, &args, Duration::from_secs(20));
        assert_eq!(code, 5, "{err}");
        assert!(err.contains("observer timed out after 1.0s"), "{err}");
        assert!(took < Duration::from_secs(10), "took {took:?}");
        assert_eq!(env.state_of(&k).as_deref(), Some("unknown"), "still open");
        assert_eq!(far_count(&env.path("far.txt"), &k), 0, "nothing sent");

        // An observer that says "happened" with 1 MiB of output: its answer is kept capped.
        let k2 = unknown(&env, token, "2");
        let args = effect_args("pay", token, "send", "t")
            .input("n=2")
            .observe("head -c 1048576 /dev/zero | tr '\\000' r")
            .sh(&deliver(&env, "sent-again"));
        let (code, out, err, _) = run_within(&env, &args, Duration::from_secs(20));
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("duplicate suppressed"), "{err}");
        assert_eq!(out.trim_end().len(), 65536, "the answer replayed is the capped one");
        assert_eq!(env.state_of(&k2).as_deref(), Some("done"));
        let kept = env.sql_count(&format!(
            "SELECT length(response) FROM effect_ledger WHERE effect_key = '{k2}'"
        ));
        assert_eq!(kept, 65536, "the observer's answer is capped in the ledger");
        assert_eq!(far_count(&env.path("far.txt"), &k2), 0);
    }

    /// Without the flag an observer gets the scheduler's default, 30 s.
    #[test]
    fn an_observer_that_never_answers_ends_after_the_default_30s() {
        let env = Env::new();
        let token = env.claim("pay", "1h");
        let k = unknown(&env, token, "1");
        let args = effect_args("pay", token, "send", "t")
            .input("n=1")
            .observe("sleep 1000")
            .sh(&deliver(&env, "sent-again"));
        let (code, _, err, took) = run_within(&env, &args, Duration::from_secs(60));
        assert_eq!(code, 5, "{err}");
        assert!(err.contains("observer timed out after 30.0s"), "{err}");
        assert!(took >= Duration::from_secs(30), "took {took:?}");
        assert_eq!(env.state_of(&k).as_deref(), Some("unknown"));
    }
}

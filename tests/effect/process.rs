//! `exactly effect` as a process: the wrapped command's output reaches the caller unaltered and
//! as it is written; signals to us reach the command and its outcome is recorded; the lease is
//! the permission to send; a locked database at the finish is retried within the lease, then
//! reported as "ran but not recorded" (exit 6). Real processes, real signals, a real database (a
//! SQLite file, and a PostgreSQL schema with `EXACTLY_TEST_PG`).
use crate::on_both_backends;
use crate::support;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::cli::Env;
use support::effect_args;
use support::runner::wait_until;

/// `exactly effect` for job `job`, token `token`, one input, wrapping `sh -c script`.
fn effect(env: &Env, job: &str, token: i64, input: &str, script: &str) -> Command {
    let mut c = env.cmd();
    c.args(
        effect_args(job, token, "send", "t")
            .input(&format!("n={input}"))
            .sh(script),
    );
    c.current_dir(env.dir.path());
    c
}

fn key(env: &Env, input: &str) -> String {
    let (code, out, err) = env.run(&[
        "key",
        "--action",
        "send",
        "--target",
        "t",
        "--input",
        &format!("n={input}"),
    ]);
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

fn alive(pid: i32) -> bool {
    // A zombie has exited; only a process that can still run counts.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn read_pid(env: &Env, name: &str) -> i32 {
    support::wait_for_some(
        &format!("the command to write its pid to {name}"),
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(env.path(name))
                .ok()?
                .trim()
                .parse()
                .ok()
        },
    )
}

/// Waits for the child at most `d`; kills it and fails the test if it is still running.
fn wait_within(child: &mut Child, d: Duration, what: &str) -> std::process::ExitStatus {
    let status = support::poll(Duration::from_millis(20), d, || {
        child.try_wait().expect("try_wait")
    });
    status.unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what}: still running after {d:?}");
    })
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut s).expect("stderr");
    }
    s
}

/// A command that starts a grandchild in its group, says so, and waits.
const WAITS: &str = "sleep 30 & echo $! > grandchild.pid; echo started; wait";

fn signal(pid: u32, sig: i32) {
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

fn wait_for_line(child: &mut Child, line: &str) {
    use std::io::BufRead;
    let out = child.stdout.as_mut().expect("stdout");
    let mut r = std::io::BufReader::new(out);
    let mut got = String::new();
    r.read_line(&mut got).expect("read");
    assert_eq!(got.trim(), line);
}

/// Holds a write lock on the database (another connection's `BEGIN IMMEDIATE`) for `hold`.
fn hold_write_lock(env: &Env, hold: Duration) -> std::thread::JoinHandle<()> {
    let db = env.db.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let c = rusqlite::Connection::open(&db).expect("open");
        c.execute_batch("BEGIN IMMEDIATE").expect("lock");
        tx.send(()).expect("locked");
        std::thread::sleep(hold);
        c.execute_batch("COMMIT").expect("unlock");
    });
    rx.recv().expect("lock taken");
    h
}

/// Runs an effect that pauses after its command ran, takes the write lock there for `hold`,
/// and returns (exit code, stdout, stderr).
fn finish_under_lock(env: &Env, job: &str, token: i64, hold: Duration) -> (i32, String, String) {
    use std::io::BufRead;
    let mut child = effect(env, job, token, "x", "echo the-answer")
        .env("EXACTLY_FAULT", "after_send:pause=300ms")
        .env("EXACTLY_BUSY_TIMEOUT_MS", "100")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    while !line.contains("exactly-fault: after_send") {
        line.clear();
        assert!(err.read_line(&mut line).expect("read") > 0, "no fault line");
    }
    let locker = hold_write_lock(env, hold);
    let status = wait_within(&mut child, Duration::from_secs(15), "under the lock");
    locker.join().expect("locker");
    let mut rest = String::new();
    err.read_to_string(&mut rest).expect("stderr");
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("stdout");
    (status.code().unwrap_or(-1), out, rest)
}

on_both_backends! {
    #[test]
    fn output_reaches_the_caller_unaltered_as_it_is_written_and_a_duplicate_replays_it() {
        let env = Env::new();
        let token = env.claim("stream", "1h");
        // Prints a line, sleeps, then bytes that are not UTF-8 and no final newline.
        let script = r"printf 'first line\n'; sleep 2; printf '\377\376 tail\r\n\000end'";
        let want: &[u8] = b"first line\n\xff\xfe tail\r\n\x00end";
        let mut child = effect(&env, "stream", token, "s1", script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut out = child.stdout.take().expect("stdout");
        let started = Instant::now();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while !got.ends_with(b"\n") {
            let n = out.read(&mut buf).expect("read");
            assert!(n > 0, "stdout ended before the first line: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        let first_after = started.elapsed();
        assert_eq!(got, b"first line\n");
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "the first line arrived only after the command ended ({first_after:?})"
        );
        out.read_to_end(&mut got).expect("read rest");
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut child));
        assert_eq!(got, want, "stdout must be the command's bytes, unaltered");
        let k = key(&env, "s1");
        assert_eq!(env.state_of(&k).as_deref(), Some("done"));

        // The duplicate sends nothing and replays the same bytes.
        let dup = effect(&env, "stream", token, "s1", "echo SENT-AGAIN")
            .output()
            .expect("dup");
        assert_eq!(dup.status.code(), Some(0));
        assert_eq!(dup.stdout, want, "the duplicate replays what was stored");
        let err = String::from_utf8_lossy(&dup.stderr);
        assert!(err.contains("duplicate suppressed"), "{err}");
        assert!(!err.contains("cut"), "{err}");
    }

    #[test]
    fn a_long_response_is_cut_in_the_ledger_never_on_stdout_and_the_replay_says_so() {
        let env = Env::new();
        let token = env.claim("long", "1h");
        let total = 100_000usize;
        let script = format!("head -c {total} /dev/zero | tr '\\000' x");
        let first = effect(&env, "long", token, "l1", &script)
            .output()
            .expect("run");
        assert_eq!(first.status.code(), Some(0));
        assert_eq!(first.stdout.len(), total, "every byte reaches the caller");
        let err = String::from_utf8_lossy(&first.stderr);
        assert!(
            err.contains("cut to its first 65536 of 100000 bytes"),
            "{err}"
        );
        let k = key(&env, "l1");
        let sql = |q: &str| env.sql_count(&q.replace("KEY", &k));
        assert_eq!(
            sql("SELECT length(response_raw) FROM effect_ledger WHERE effect_key = 'KEY'"),
            65536
        );
        assert_eq!(
            sql("SELECT response_total FROM effect_ledger WHERE effect_key = 'KEY'"),
            100_000
        );
        let dup = effect(&env, "long", token, "l1", "echo SENT-AGAIN")
            .output()
            .expect("dup");
        assert_eq!(dup.status.code(), Some(0));
        assert_eq!(dup.stdout, vec![b'x'; 65536]);
        let err = String::from_utf8_lossy(&dup.stderr);
        assert!(
            err.contains("the stored response was cut: 65536 of 100000 bytes are replayed"),
            "{err}"
        );
    }

    #[test]
    fn term_hup_and_int_reach_the_command_its_outcome_is_recorded_and_nothing_is_orphaned() {
        let env = Env::new();
        let token = env.claim("sig", "1h");
        for (i, sig) in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT]
            .into_iter()
            .enumerate()
        {
            let input = format!("dies-{i}");
            let _ = std::fs::remove_file(env.path("grandchild.pid"));
            let mut child = effect(&env, "sig", token, &input, WAITS)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            wait_for_line(&mut child, "started");
            let grandchild = read_pid(&env, "grandchild.pid");
            signal(child.id(), sig);
            let status = wait_within(&mut child, Duration::from_secs(10), "after the signal");
            let err = stderr_of(&mut child);
            assert_eq!(status.code(), Some(6), "signal {sig}: {err}");
            assert!(err.contains(&format!("signal {sig}")), "{err}");
            assert_eq!(
                env.state_of(&key(&env, &input)).as_deref(),
                Some("unknown"),
                "signal {sig}"
            );
            assert!(
                wait_until(Duration::from_millis(200), || !alive(grandchild)),
                "signal {sig}: the grandchild outlived us"
            );
        }

        // A command that handles the signal and finishes cleanly is done.
        let script = "trap 'echo finished; exit 0' TERM; echo started; sleep 30 & wait";
        let mut child = effect(&env, "sig", token, "handles", script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        wait_for_line(&mut child, "started");
        std::thread::sleep(Duration::from_millis(100));
        signal(child.id(), libc::SIGTERM);
        let status = wait_within(&mut child, Duration::from_secs(10), "after SIGTERM");
        let err = stderr_of(&mut child);
        assert_eq!(status.code(), Some(0), "{err}");
        wait_for_line(&mut child, "finished");
        assert_eq!(env.state_of(&key(&env, "handles")).as_deref(), Some("done"));
    }

    #[test]
    fn an_expired_lease_stops_the_command_group_and_leaves_the_effect_unknown() {
        let env = Env::new();
        let token = env.claim("short", "2s");
        let started = Instant::now();
        let mut child = effect(&env, "short", token, "x", WAITS)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let grandchild = read_pid(&env, "grandchild.pid");
        let status = wait_within(&mut child, Duration::from_secs(8), "past its lease");
        let took = started.elapsed();
        let err = stderr_of(&mut child);
        assert_eq!(status.code(), Some(6), "{err}");
        assert!(err.contains("lease expired"), "{err}");
        // 2s lease, polled every 200ms, TERM then KILL after 500ms at most.
        assert!(took < Duration::from_millis(4500), "stopped after {took:?}");
        assert!(
            took >= Duration::from_millis(1500),
            "stopped after {took:?}"
        );
        assert!(
            wait_until(Duration::from_millis(200), || !alive(grandchild)),
            "the command's group outlived the lease"
        );
        assert_eq!(env.state_of(&key(&env, "x")).as_deref(), Some("unknown"));
    }

    #[test]
    fn a_command_that_ignores_term_is_killed_after_the_grace() {
        let env = Env::new();
        let token = env.claim("stubborn", "1s");
        let script = "trap '' TERM; echo $$ > grandchild.pid; while :; do sleep 0.1; done";
        let started = Instant::now();
        let mut child = effect(&env, "stubborn", token, "x", script)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let shell = read_pid(&env, "grandchild.pid");
        let status = wait_within(&mut child, Duration::from_secs(8), "ignoring TERM");
        let err = stderr_of(&mut child);
        assert_eq!(status.code(), Some(6), "{err}");
        assert!(started.elapsed() < Duration::from_millis(3500));
        assert!(!alive(shell), "the command survived SIGKILL");
        assert_eq!(env.state_of(&key(&env, "x")).as_deref(), Some("unknown"));
    }

    #[test]
    fn a_lease_renewed_beside_the_command_lets_it_finish() {
        let env = Env::new();
        let token = env.claim("renewed", "2s");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let renewer = {
            let stop = stop.clone();
            let db = env.db.clone();
            std::thread::spawn(move || {
                let mut renewals = 0;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let out = Command::new(support::bin())
                        .arg("--db")
                        .arg(&db)
                        .args(["lease", "renew", "--job", "renewed", "--token"])
                        .arg(token.to_string())
                        .args(["--for", "2s"])
                        .output()
                        .expect("renew");
                    assert_eq!(out.status.code(), Some(0), "renew refused");
                    renewals += 1;
                    std::thread::sleep(Duration::from_millis(500));
                }
                renewals
            })
        };
        let out = effect(&env, "renewed", token, "x", "sleep 5; echo sent")
            .output()
            .expect("run");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let renewals = renewer.join().expect("renewer");
        assert!(renewals >= 5, "{renewals}");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, b"sent\n");
        assert_eq!(env.state_of(&key(&env, "x")).as_deref(), Some("done"));
    }

    #[test]
    fn a_newer_token_stops_the_command() {
        let env = Env::new();
        let token = env.claim("taken", "1h");
        let mut child = effect(&env, "taken", token, "x", WAITS)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let grandchild = read_pid(&env, "grandchild.pid");
        // Another program takes the job over with the seed's SQL (a newer token).
        env.sql_execute(
            "UPDATE job_lease SET fencing_token = fencing_token + 1, owner = 'other'
             WHERE job_key = 'taken'",
        );
        let status = wait_within(&mut child, Duration::from_secs(6), "after the takeover");
        let err = stderr_of(&mut child);
        // Its `unknown` is refused: the newer token holds the job.
        assert_eq!(status.code(), Some(3), "{err}");
        assert!(wait_until(Duration::from_millis(200), || !alive(grandchild)));
    }

    #[test]
    fn a_send_deadline_overwritten_with_no_time_stops_the_command_at_once() {
        let env = Env::new();
        let token = env.claim("odd", "1h");
        let mut child = effect(&env, "odd", token, "x", WAITS)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let grandchild = read_pid(&env, "grandchild.pid");
        // Another program overwrites the deadline those who wait out the send wait for.
        env.sql_execute("UPDATE effect_ledger SET sender_until = 'next tuesday'");
        let started = Instant::now();
        let status = wait_within(&mut child, Duration::from_secs(10), "a deadline of no time");
        let took = started.elapsed();
        let err = stderr_of(&mut child);
        // A 1h lease: only the deadline that is not a time stops it (a poll, then the grace).
        assert!(took < Duration::from_secs(3), "stopped after {took:?}: {err}");
        assert!(
            err.contains("the send's deadline of job odd is not a time")
                && err.contains("effect_ledger.sender_until holds \"next tuesday\""),
            "{err}"
        );
        assert_ne!(status.code(), Some(0), "{err}");
        assert!(
            wait_until(Duration::from_millis(200), || !alive(grandchild)),
            "the command's group outlived its unreadable deadline"
        );
    }

    #[test]
    fn a_command_never_starts_under_an_expired_lease() {
        let env = Env::new();
        let token = env.claim("late", "1s");
        // Past the lease on purpose: the subject is an expired lease.
        std::thread::sleep(Duration::from_millis(1300));
        let out = effect(&env, "late", token, "x", "echo sent > sent.txt")
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{err}");
        assert!(
            !env.path("sent.txt").exists(),
            "the command ran after its lease expired: {err}"
        );
        assert_ne!(env.state_of(&key(&env, "x")).as_deref(), Some("done"));
    }
}

// SQLite only: a SQLite write lock (another connection's BEGIN IMMEDIATE) held while the
// effect finishes, and the busy timeout.

#[test]
fn a_lock_shorter_than_the_lease_is_waited_out_and_the_effect_recorded() {
    let env = Env::new();
    let token = env.claim("locked", "10s");
    let (code, out, err) = finish_under_lock(&env, "locked", token, Duration::from_millis(1500));
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "the-answer\n");
    assert_eq!(env.state_of(&key(&env, "x")).as_deref(), Some("done"));
}

#[test]
fn a_lock_outlasting_the_lease_exits_6_saying_the_command_ran_unrecorded() {
    let env = Env::new();
    let token = env.claim("locked", "3s");
    let started = Instant::now();
    let (code, out, err) = finish_under_lock(&env, "locked", token, Duration::from_secs(6));
    assert_eq!(code, 6, "{err}");
    assert_eq!(out, "the-answer\n", "the output reaches the caller anyway");
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.contains("the command ran (it exited 0), but its result could not be recorded"),
        "{err}"
    );
    assert!(last.contains("locked"), "{err}");
    // It gave up when the lease ran out, not before.
    assert!(started.elapsed() >= Duration::from_millis(2500));
    let k = key(&env, "x");
    assert_eq!(env.state_of(&k).as_deref(), Some("submitted"));
}

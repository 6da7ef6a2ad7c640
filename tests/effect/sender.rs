//! The sender is a set of processes with an identity and a deadline, not a pid: each fault a
//! real machine has (a send script's child that outlives a SIGKILLed `exactly effect`, a sender
//! of another user, a paused or stalled watcher, a takeover inside the stop margin, two machines
//! with one host name, a reused pid) must leave exactly one delivery on the far side. Real
//! processes, real signals, a real database (a SQLite file, and a PostgreSQL schema with
//! `EXACTLY_TEST_PG`). The far side is a file each send appends one line to.
use crate::on_both_backends;
use crate::support;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::cli::{far_count, Env};
use support::effect_args;

/// `exactly effect` for `job` under `token`, input `n=INPUT`, wrapping `sh -c script`, run in the
/// test's folder.
pub(super) fn effect(env: &Env, job: &str, token: i64, input: &str, script: &str) -> Command {
    let mut c = env.cmd();
    c.args(
        effect_args(job, token, "send", "t")
            .input(&format!("n={input}"))
            .sh(script),
    );
    c.current_dir(env.dir.path());
    c
}

/// The same, with an observer that finds the delivery on the far side.
pub(super) fn retry(env: &Env, job: &str, token: i64, input: &str) -> Command {
    let far = env.path("far");
    // An empty far side: nothing delivered yet (the observer's grep then answers 1, not 2).
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&far)
        .expect("far side");
    let mut c = env.cmd();
    c.args(
        effect_args(job, token, "send", "t")
            .input(&format!("n={input}"))
            .observe(&format!("grep -q sent {}", far.display()))
            .sh(&format!("echo sent >> {}", far.display())),
    );
    c.current_dir(env.dir.path());
    c
}

pub(super) fn run(mut c: Command) -> (i32, String, String) {
    support::cli::split(c.output().expect("run exactly"))
}

/// Retries (as a scheduler would) while the answer is "in flight" (exit 5), for at most `within`.
pub(super) fn retry_until_settled(
    env: &Env,
    job: &str,
    token: i64,
    input: &str,
    within: Duration,
) -> (i32, String) {
    let until = Instant::now() + within;
    loop {
        let (code, _, err) = run(retry(env, job, token, input));
        if code != 5 || Instant::now() >= until {
            return (code, err);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(super) fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn exactly effect")
}

pub(super) fn read_pid(env: &Env, name: &str) -> i32 {
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

pub(super) fn sigkill(pid: i32) {
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// The process group of `pid`, from /proc.
pub(super) fn pgid_of(pid: i32) -> i32 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = &s[s.rfind(')').expect("stat format") + 1..];
    rest.split_whitespace()
        .nth(2)
        .expect("pgrp")
        .parse()
        .expect("pgrp number")
}

/// Claims `job`'s lease for another holder as soon as it is free; the new token.
pub(super) fn take_over(env: &Env, job: &str) -> i64 {
    support::wait_for_some(
        &format!("the lease of {job} to be free"),
        Duration::from_secs(15),
        || {
            let (code, out, _) = env.run(&["lease", "claim", "--job", job, "--for", "1h"]);
            (code == 0).then(|| out.trim().parse().expect("token"))
        },
    )
}

pub(super) fn deliveries(env: &Env) -> usize {
    far_count(&env.path("far"), "sent")
}

fn events(env: &Env, kind: &str) -> i64 {
    env.sql_count(&format!(
        "SELECT count(*) FROM exactly_events WHERE kind = '{kind}'"
    ))
}

/// A send script whose request runs as a child (as `curl` in a shell script does): the child
/// delivers after `after` seconds, the script waits for it.
fn child_sends(env: &Env, after: &str) -> String {
    format!(
        "echo $$ > sh.pid; (sleep {after}; echo sent >> {}) & wait",
        env.path("far").display()
    )
}

on_both_backends! {
    #[test]
    fn a_child_of_a_killed_sender_never_delivers_after_the_retry() {
        let env = Env::new();
        let token = env.claim("child", "1h");
        let mut a = spawn(effect(&env, "child", token, "1", &child_sends(&env, "2")));
        read_pid(&env, "sh.pid");
        sigkill(a.id() as i32);
        a.wait().expect("reap");
        let (code, err) = retry_until_settled(&env, "child", token, "1", Duration::from_secs(10));
        assert_eq!(code, 0, "{err}");
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(deliveries(&env), 1, "the killed sender's child delivered too");
    }

    #[test]
    fn a_child_left_when_the_sender_and_its_watchdog_die_is_ended_before_the_retry_sends() {
        let env = Env::new();
        let token = env.claim("orphan", "1h");
        let mut a = spawn(effect(&env, "orphan", token, "1", &child_sends(&env, "2")));
        let sh = read_pid(&env, "sh.pid");
        // The group's leader is the watchdog: killing both leaves the child with nobody to end it.
        let group = pgid_of(sh);
        sigkill(a.id() as i32);
        sigkill(group);
        a.wait().expect("reap");
        let (code, err) = retry_until_settled(&env, "orphan", token, "1", Duration::from_secs(10));
        assert_eq!(code, 0, "{err}");
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(deliveries(&env), 1, "the orphaned child delivered too");
    }

    #[test]
    fn a_paused_sender_is_stopped_at_its_deadline_and_another_host_sends_once() {
        let env = Env::new().with_skew("100ms");
        let token = env.claim("paused", "3s");
        let script = format!(
            "echo $$ > sh.pid; sleep 7; echo sent >> {}",
            env.path("far").display()
        );
        let mut a = spawn(effect(&env, "paused", token, "1", &script));
        read_pid(&env, "sh.pid");
        // SAFETY: pausing the process this test started.
        unsafe { libc::kill(a.id() as i32, libc::SIGSTOP) };
        // Another host takes the job over once the lease (and its margins) has passed.
        let started = Instant::now();
        let b_token = take_over(&env, "paused");
        let mut b = retry(&env, "paused", b_token, "1");
        b.env("EXACTLY_HOST", "other-host");
        let until = Instant::now() + Duration::from_secs(10);
        let code = loop {
            let (code, _, err) = run(b);
            if code != 5 || Instant::now() >= until {
                assert_eq!(code, 0, "{err}");
                break code;
            }
            std::thread::sleep(Duration::from_millis(100));
            b = retry(&env, "paused", b_token, "1");
            b.env("EXACTLY_HOST", "other-host");
        };
        assert_eq!(code, 0);
        // Past the paused sender's own command time: had it run on, it would have sent by now.
        std::thread::sleep(Duration::from_secs(8).saturating_sub(started.elapsed()));
        // SAFETY: resuming it.
        unsafe { libc::kill(a.id() as i32, libc::SIGCONT) };
        a.wait().expect("reap");
        assert_eq!(deliveries(&env), 1, "the paused sender's command ran past its lease and sent");
    }

    #[test]
    fn a_takeover_inside_the_stop_margin_waits_for_the_stopped_sender() {
        // One clock and a small skew margin: only the stop grace separates the two sends.
        let env = Env::new().with_skew("100ms");
        let token = env.claim("grace", "2s");
        // It sends during its TERM grace, as a request already under way would.
        let script = format!(
            "trap 'sleep 0.4; echo sent >> {}; exit 1' TERM; echo $$ > sh.pid; sleep 30 & wait",
            env.path("far").display()
        );
        let mut a = spawn(effect(&env, "grace", token, "1", &script));
        read_pid(&env, "sh.pid");
        let b_token = support::wait_for_some(
            "the lease of grace to be free",
            Duration::from_secs(10),
            || {
                let (code, out, _) = env.run(&["lease", "claim", "--job", "grace", "--for", "1h"]);
                (code == 0).then(|| out.trim().parse().expect("token"))
            },
        );
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let mut b = retry(&env, "grace", b_token, "1");
            b.env("EXACTLY_HOST", "other-host");
            let (code, _, err) = run(b);
            if code != 5 {
                assert_eq!(code, 0, "{err}");
                break;
            }
            assert!(Instant::now() < until, "still in flight: {err}");
            std::thread::sleep(Duration::from_millis(20));
        }
        a.wait().expect("reap");
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(deliveries(&env), 1, "the takeover sent while the stopped sender still could");
    }

    #[test]
    fn the_command_is_told_its_key_token_job_run_and_lease_deadline() {
        let env = Env::new();
        let token = env.claim("told", "1h");
        let script = "echo \"$EXACTLY_EFFECT_KEY|$EXACTLY_FENCING_TOKEN|$EXACTLY_JOB|\
                      $EXACTLY_RUN_ID|$EXACTLY_LEASE_UNTIL\" > told";
        let mut c2 = env.cmd();
        c2.args(
            effect_args("told", token, "send", "t")
                .input("n=1")
                .arg("--run-id")
                .arg("run-7")
                .sh(script),
        );
        c2.current_dir(env.dir.path());
        let (code, _, err) = run(c2);
        assert_eq!(code, 0, "{err}");
        let told = std::fs::read_to_string(env.path("told")).expect("told");
        let parts: Vec<&str> = told.trim().split('|').collect();
        let (kc, key, _) = env.run(&["key", "--action", "send", "--target", "t", "--input", "n=1"]);
        assert_eq!(kc, 0);
        assert_eq!(parts[0], key.trim());
        assert_eq!(parts[1], token.to_string());
        assert_eq!(parts[2], "told");
        assert_eq!(parts[3], "run-7");
        assert_eq!(parts[4].len(), "2026-01-01T00:00:00.000Z".len(), "{told}");
        assert!(parts[4].ends_with('Z'), "{told}");
    }

    #[test]
    fn a_live_sender_of_another_user_is_in_flight_not_gone() {
        let env = Env::new();
        let token = env.claim("users", "1h");
        std::fs::write(env.path("far"), "").expect("far side");
        share_with_everyone(&env);
        let script = format!("sleep 3; echo sent >> {}", env.path("far").display());
        let mut a = spawn(as_user(&env, "nobody", "users", token, Some(&script)));
        wait_submitted(&env);
        share_with_everyone(&env);
        let (code, _, err) = run(as_user(&env, "daemon", "users", token, None));
        assert_eq!(code, 5, "another user's live sender was taken for gone: {err}");
        let status = a.wait().expect("reap");
        assert_eq!(status.code(), Some(0));
        let (code, _, err) = run(as_user(&env, "daemon", "users", token, None));
        assert_eq!(code, 0, "{err}");
        assert_eq!(deliveries(&env), 1, "sent twice");
    }

    #[test]
    fn a_sender_on_another_machine_with_our_host_name_is_judged_by_its_deadline() {
        let env = Env::new().with_skew("100ms");
        let token = env.claim("clash", "2s");
        let script = format!(
            "echo $$ > sh.pid; sleep 30; echo sent >> {}",
            env.path("far").display()
        );
        // Another machine: its own pid namespace (its pids are small and mean nothing here).
        let inner = effect(&env, "clash", token, "1", &script);
        let mut c = Command::new("unshare");
        c.args(["--pid", "--fork", "--kill-child", "--mount-proc"])
            .arg(inner.get_program())
            .args(inner.get_args())
            .current_dir(env.dir.path())
            .env("EXACTLY_HOST", "web-1");
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                c.env(k, v);
            }
        }
        let mut a = spawn(c);
        read_pid(&env, "sh.pid");
        sigkill(a.id() as i32);
        a.wait().expect("reap");
        let b_token = take_over(&env, "clash");
        let until = Instant::now() + Duration::from_secs(10);
        let (code, err) = loop {
            let mut b = retry(&env, "clash", b_token, "1");
            b.env("EXACTLY_HOST", "web-1");
            let (code, _, err) = run(b);
            if code != 5 || Instant::now() >= until {
                break (code, err);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(code, 0, "{err}");
        assert_eq!(deliveries(&env), 1);
        assert!(events(&env, "host_clash") >= 1, "the clash was not recorded");
    }

    #[test]
    fn a_dead_senders_pid_taken_by_another_process_does_not_keep_it_in_flight() {
        let env = Env::new().with_skew("100ms");
        let token = env.claim("reuse", "1s");
        let script = format!(
            "echo $$ > sh.pid; sleep 30; echo sent >> {}",
            env.path("far").display()
        );
        let mut a = spawn(effect(&env, "reuse", token, "1", &script));
        read_pid(&env, "sh.pid");
        let pid = a.id() as i32;
        sigkill(pid);
        a.wait().expect("reap");
        // An unrelated process takes the dead sender's pid (the kernel hands out the pid after
        // ns_last_pid next).
        let mut squatter = None;
        for _ in 0..500 {
            std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
                .expect("write ns_last_pid (the test runs as root)");
            let c = Command::new("sleep").arg("60").spawn().expect("spawn sleep");
            if c.id() as i32 == pid {
                squatter = Some(c);
                break;
            }
            let mut c = c;
            let _ = c.kill();
            let _ = c.wait();
        }
        let mut squatter = squatter.expect("no process took the pid");
        let (code, err) = retry_until_settled(&env, "reuse", token, "1", Duration::from_secs(8));
        let _ = squatter.kill();
        let _ = squatter.wait();
        assert_eq!(code, 0, "{err}");
        assert_eq!(deliveries(&env), 1);
    }

    #[test]
    fn two_schedulers_on_two_machines_with_one_host_name_are_shown() {
        let env = Env::new();
        let mut store = env.store();
        for (owner, host_id) in [
            ("a@web-1:10", "boot-a/4026531836"),
            ("b@web-1:10", "boot-b/4026531836"),
        ] {
            let reg = exactly::jobs::SchedulerReg {
                owner,
                host: "web-1",
                pid: 10,
                source: "jobs.toml",
                host_id,
            };
            exactly::jobs::scheduler_started(&mut store, &reg).expect("register");
        }
        drop(store);
        assert_eq!(events(&env, "host_clash"), 1, "the second registration is the clash");
        let (code, out, err) = env.run(&["status"]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("host name \"web-1\" is used by live schedulers on two machines"),
            "{out}"
        );
        let (code, json, err) = env.run(&["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&json).expect("json");
        let warnings = v["warnings"].as_array().expect("warnings");
        assert!(
            warnings.iter().any(|w| w.as_str().is_some_and(|w| w.contains("host-name clash"))),
            "{json}"
        );
        assert!(
            v["schedulers"]
                .as_array()
                .expect("schedulers")
                .iter()
                .all(|s| s["host_id"].is_string()),
            "{json}"
        );
    }

    #[test]
    fn a_sender_paused_between_its_submit_and_its_send_does_not_send_past_its_lease() {
        let env = Env::new().with_skew("100ms");
        let token = env.claim("late", "2s");
        let script = format!("echo sent >> {}", env.path("far").display());
        let mut c = effect(&env, "late", token, "1", &script);
        // Paused right after `submitted` committed, past the whole lease.
        c.env("EXACTLY_FAULT", "after_submitted:pause=2500ms");
        let (code, _, err) = run(c);
        assert_ne!(code, 0, "{err}");
        assert_eq!(deliveries(&env), 0, "it sent after its lease had ended: {err}");
    }

    #[test]
    fn a_child_that_leaves_the_group_is_ended_with_the_command() {
        let env = Env::new();
        let token = env.claim("escape", "1h");
        // The child starts a session (and so a group) of its own, outside the command's group.
        let script = format!(
            "setsid sh -c 'sleep 2; echo sent >> {}' & echo started",
            env.path("far").display()
        );
        let (code, out, err) = run(effect(&env, "escape", token, "1", &script));
        assert_eq!((code, out.trim()), (0, "started"), "{err}");
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(
            deliveries(&env),
            0,
            "a child outside the group sent after the effect was recorded"
        );
    }
}

/// `exactly effect` (the retry's arguments, or `script` as the command) run as `user` through
/// runuser, with a umask that lets the other user write what it creates.
pub(super) fn as_user(
    env: &Env,
    user: &str,
    job: &str,
    token: i64,
    script: Option<&str>,
) -> Command {
    let inner = match script {
        Some(s) => effect(env, job, token, "1", s),
        None => retry(env, job, token, "1"),
    };
    let mut c = Command::new("runuser");
    c.args(["-u", user, "--", "sh", "-c", "umask 0; exec \"$@\"", "sh"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(env.dir.path());
    for (k, v) in inner.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Lets every user read and write the test's folder and database files.
pub(super) fn share_with_everyone(env: &Env) {
    use std::os::unix::fs::PermissionsExt;
    let all = |p: &std::path::Path, mode: u32| {
        if p.exists() {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
    };
    all(env.dir.path(), 0o777);
    for f in ["exactly.db", "exactly.db-wal", "exactly.db-shm", "far"] {
        all(&env.path(f), 0o666);
    }
}

pub(super) fn wait_submitted(env: &Env) {
    support::wait_for("the sender to submit", Duration::from_secs(10), || {
        env.sql_count("SELECT count(*) FROM effect_ledger WHERE state = 'submitted'") > 0
    });
}

/// The PostgreSQL backends serving process `pid`'s connections: its sockets' local ports, as
/// the server sees them in `pg_stat_activity.client_port`.
fn backends_of(url: &str, pid: u32) -> Vec<i32> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_string)
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(t) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in t.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && inodes.iter().any(|i| i == f[9]) {
                let port = f[1].rsplit(':').next().expect("port");
                ports.push(i32::from_str_radix(port, 16).expect("hex port"));
            }
        }
    }
    let mut c = support::backend::connect(url);
    let rows = c
        .query(
            "SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1)",
            &[&ports],
        )
        .expect("pg_stat_activity");
    rows.iter().map(|r| r.get::<_, i32>(0)).collect()
}

/// A read of the lease that hangs (a partition: the server processes serving the sender's
/// connections stop answering, here by SIGSTOP, while other hosts reach the server) must not
/// let the command outlive its lease: the deadline last heard stops it, and another host's send
/// after the lease is the one delivery.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn postgres_a_stalled_lease_read_does_not_let_the_command_outlive_its_lease() {
    let _pg = support::backend::enter_postgres();
    let env = Env::new().with_skew("100ms");
    let token = env.claim("stall", "3s");
    let script = format!(
        "echo $$ > sh.pid; sleep 7; echo sent >> {}",
        env.path("far").display()
    );
    let mut a = spawn(effect(&env, "stall", token, "1", &script));
    read_pid(&env, "sh.pid");
    std::thread::sleep(Duration::from_millis(500));
    let stalled = backends_of(env.db_str(), a.id());
    assert!(!stalled.is_empty(), "no server process serves the sender");
    for b in &stalled {
        // SAFETY: pausing a server process this test's cluster runs (as root).
        unsafe { libc::kill(*b, libc::SIGSTOP) };
    }
    let b_token = take_over(&env, "stall");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let mut b = retry(&env, "stall", b_token, "1");
        b.env("EXACTLY_HOST", "other-host");
        let (code, _, err) = run(b);
        if code != 5 {
            assert_eq!(code, 0, "{err}");
            break;
        }
        assert!(Instant::now() < until, "{err}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Past the sender's own command time: had it run on, it would have sent by now.
    std::thread::sleep(Duration::from_secs(6));
    for b in &stalled {
        // SAFETY: as above.
        unsafe { libc::kill(*b, libc::SIGCONT) };
    }
    a.wait().expect("reap");
    assert_eq!(
        deliveries(&env),
        1,
        "the command ran past its lease while the read hung"
    );
}

/// docs/concepts.md's far-side example, run: `exactly effect` wraps
/// `assets/scripts/pay-fenced.sh`, which passes the effect key and the fencing token to
/// `assets/scripts/fenced-far-side.py`. A second
/// sender with the same key (one that was paused past its lease) gets the stored answer and
/// nothing is done twice; a stale token is refused and the script says nothing was sent.
#[test]
fn the_far_side_example_dedupes_by_key_and_refuses_a_stale_token() {
    use std::io::BufRead;
    let _sqlite = support::backend::using(support::backend::Backend::Sqlite);
    let env = Env::new();
    let repo = |f: &str| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
    let log = env.path("transfers.log");
    /// The far side, killed however the test ends (a failed assertion must not leave it).
    struct Far(Child);
    impl Drop for Far {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut far = Far(Command::new("python3")
        .arg(repo("assets/scripts/fenced-far-side.py"))
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the far side"));
    let mut port = String::new();
    std::io::BufReader::new(far.0.stdout.take().expect("stdout"))
        .read_line(&mut port)
        .expect("the far side's port");
    let url = format!("http://127.0.0.1:{}/transfers", port.trim());
    std::fs::write(env.path("transfer.json"), "{\"amount\": \"1800.00\"}").expect("transfer");
    let transfers = || support::read_or_empty(&log).lines().count();

    let token = env.claim("invoices", "1h");
    let mut c = env.cmd();
    let script = repo("assets/scripts/pay-fenced.sh");
    c.args(
        effect_args("invoices", token, "pay", "acme")
            .input("month=2026-11")
            .sh(&format!("exec {}", script.display())),
    )
    .env("PAY_URL", &url)
    .current_dir(env.dir.path());
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "", "the answer goes to stderr in the example");
    assert_eq!(transfers(), 1);
    let (_, key, _) = env.run(&[
        "key",
        "--action",
        "pay",
        "--target",
        "acme",
        "--input",
        "month=2026-11",
    ]);
    assert_eq!(env.state_of(key.trim()).as_deref(), Some("done"));

    // The script as a sender the ledger could not stop would run it: same key, same token.
    let direct = |token: i64| {
        Command::new(repo("assets/scripts/pay-fenced.sh"))
            .env("PAY_URL", &url)
            .env("EXACTLY_EFFECT_KEY", key.trim())
            .env("EXACTLY_JOB", "invoices")
            .env("EXACTLY_FENCING_TOKEN", token.to_string())
            .current_dir(env.dir.path())
            .output()
            .expect("run the script")
    };
    let again = direct(token);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&again.stderr).trim(),
        "transfer 0",
        "the stored answer"
    );
    assert_eq!(transfers(), 1, "a repeated key is done once");
    // A newer holder of the job's lease has been seen: the older token is refused.
    let newer = direct(token + 1);
    assert_eq!(newer.status.code(), Some(0));
    let stale = direct(token);
    assert_eq!(
        stale.status.code(),
        Some(75),
        "a stale token: nothing was sent"
    );
    assert_eq!(transfers(), 1);
}

/// A sender whose command ran but whose result was fenced (the job's lease taken over meanwhile)
/// says the command ran: its row stays `submitted`, and only the far side's fencing kept a late
/// send out.
#[test]
fn a_fenced_sender_whose_command_ran_says_so() {
    let env = Env::new();
    let token = env.claim("ran", "1h");
    let script = format!(
        "echo $$ > sh.pid; sleep 1; echo sent >> {}",
        env.path("far").display()
    );
    let a = spawn(effect(&env, "ran", token, "1", &script));
    read_pid(&env, "sh.pid");
    let (code, _, err) = env.run(&[
        "lease",
        "release",
        "--job",
        "ran",
        "--token",
        &token.to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    take_over(&env, "ran");
    let out = a.wait_with_output().expect("reap");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("fenced after the command ran"), "{err}");
    assert_eq!(
        env.sql_count("SELECT count(*) FROM effect_ledger WHERE state = 'submitted'"),
        1,
        "{err}"
    );
}

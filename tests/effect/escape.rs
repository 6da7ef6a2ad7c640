//! Commands that leave their process group, supervisors that stop or die, a `/proc` that hides
//! processes: each as a real send script or a real machine does it, each leaving exactly one
//! delivery on the far side. What holds them is the sender's cage (a cgroup of its own, or where
//! none can be made, an environment cookie) and a watchdog that is watched in turn.
use super::sender::{
    as_user, deliveries, effect, pgid_of, read_pid, retry, retry_until_settled, run,
    share_with_everyone, sigkill, spawn, take_over, wait_submitted,
};
use crate::on_both_backends;
use crate::support::cli::Env;
use std::process::Command;
use std::time::{Duration, Instant};

/// The cgroup v1 freezer hierarchy (the project's machines mount v1 controllers beside v2).
const V1_FREEZER: &str = "/sys/fs/cgroup/freezer";

/// A send script whose request runs under `wrapper` (`timeout 30`, `setsid`): a process group
/// of its own, out of the watchdog's. It delivers after `after` seconds.
fn escaping(env: &Env, wrapper: &str, after: &str) -> String {
    format!(
        "echo $$ > sh.pid; {wrapper} sh -c 'sleep {after}; echo sent >> {}'",
        env.path("far").display()
    )
}

/// Retries from another host (after a takeover) until the answer is not "in flight".
fn retry_elsewhere(env: &Env, job: &str, token: i64) {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let mut b = retry(env, job, token, "1");
        b.env("EXACTLY_HOST", "other-host");
        let (code, _, err) = run(b);
        if code != 5 {
            assert_eq!(code, 0, "{err}");
            return;
        }
        assert!(Instant::now() < until, "still in flight: {err}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: signalling a process this test started (or its descendant).
    unsafe { libc::kill(pid, sig) };
}

/// One fault, not two: `exactly effect` SIGKILLed alone mid-send, its watchdog alive; the
/// escaped request must not deliver after the same-host retry sent.
/// With `and_watchdog`, the watchdog is SIGKILLed too: nothing on the host supervises the
/// escaped request any more, and the retry must end it through the cage.
fn killed_sender_with_escaped_request(env: Env, wrapper: &str, and_watchdog: bool) {
    let token = env.claim("escape", "1h");
    let mut a = spawn(effect(
        &env,
        "escape",
        token,
        "1",
        &escaping(&env, wrapper, "2"),
    ));
    let sh = read_pid(&env, "sh.pid");
    let watchdog = pgid_of(sh);
    sigkill(a.id() as i32);
    if and_watchdog {
        sigkill(watchdog);
    }
    a.wait().expect("reap");
    let (code, err) = retry_until_settled(&env, "escape", token, "1", Duration::from_secs(10));
    assert_eq!(code, 0, "{err}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        deliveries(&env),
        1,
        "the request that left the group ({wrapper}) delivered too"
    );
    // The cage this test meant: a machine without writable cgroups must fail it, not pass it on
    // the fallback.
    assert_eq!(
        held_by(&env),
        expected_cage(&env),
        "the sender's containment"
    );
}

/// How the sender that settled the effect was held, as `exactly effects --json` says.
fn held_by(env: &Env) -> String {
    let (code, out, err) = env.run(&["effects", "--state", "done", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("effects JSON");
    v["effects"][0]["containment"]
        .as_str()
        .expect("a containment")
        .to_string()
}

/// The containment `env` asks for: a cgroup v2 by default (the project's machines have one),
/// the cookie with `EXACTLY_CGROUP=none`, the v1 freezer when named.
fn expected_cage(env: &Env) -> &'static str {
    match env.cgroup.as_deref() {
        None => "cgroup-v2",
        Some("none") => "cookie",
        Some(_) => "cgroup-v1",
    }
}

/// `exactly effect` paused past its lease while `wrapper` runs the request: the watchdog stops
/// the whole cage at the deadline, another host sends once.
fn paused_sender_with_escaped_request(env: &Env, job: &str, before: impl FnOnce(i32, i32)) {
    let token = env.claim(job, "3s");
    let a = spawn(effect(
        env,
        job,
        token,
        "1",
        &escaping(env, "timeout 30", "7"),
    ));
    let sh = read_pid(env, "sh.pid");
    before(a.id() as i32, pgid_of(sh));
    signal(a.id() as i32, libc::SIGSTOP);
    let started = Instant::now();
    let b_token = take_over(env, job);
    retry_elsewhere(env, job, b_token);
    // Past the escaped request's own time: had it run on, it would have delivered by now.
    std::thread::sleep(Duration::from_secs(9).saturating_sub(started.elapsed()));
    signal(a.id() as i32, libc::SIGCONT);
    let out = a.wait_with_output().expect("reap");
    assert_eq!(
        deliveries(env),
        1,
        "the escaped request ran past the lease and delivered: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The observer answers at once but leaves a `setsid` child holding its stdout: the retry must
/// end within the observe timeout and a moment, not when the child lets go.
fn observer_with_a_leftover(env: Env) {
    let token = env.claim("observer", "1h");
    // A first attempt whose command fails: the effect is unknown.
    let (code, _, err) = run(effect(&env, "observer", token, "1", "exit 9"));
    assert_eq!(code, 6, "{err}");
    let mut c = env.cmd();
    c.args(
        crate::support::effect_args("observer", token, "send", "t")
            .input("n=1")
            .observe("setsid sleep 20 & echo found; exit 0")
            .arg("--observe-timeout")
            .arg("2s")
            .sh("echo sent"),
    );
    c.current_dir(env.dir.path());
    let t0 = Instant::now();
    let (code, _, err) = run(c);
    let took = t0.elapsed();
    assert_eq!(code, 0, "{err}");
    assert!(
        took < Duration::from_secs(6),
        "the observer's leftover held us {took:?}"
    );
}

/// The watchdog SIGSTOPped while the command runs under `timeout`: the sender enforces the
/// deadline alone (and says so), and another host sends once.
fn stopped_watchdog(env: Env) {
    let token = env.claim("watchdog-stop", "3s");
    let a = spawn(effect(
        &env,
        "watchdog-stop",
        token,
        "1",
        &escaping(&env, "timeout 30", "7"),
    ));
    let sh = read_pid(&env, "sh.pid");
    let watchdog = pgid_of(sh);
    signal(watchdog, libc::SIGSTOP);
    let b_token = take_over(&env, "watchdog-stop");
    retry_elsewhere(&env, "watchdog-stop", b_token);
    let out = a.wait_with_output().expect("reap");
    std::thread::sleep(Duration::from_secs(6));
    signal(watchdog, libc::SIGCONT);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("watchdog") && err.contains("stopped"), "{err}");
    assert_eq!(deliveries(&env), 1, "the command outlived its lease: {err}");
}

on_both_backends! {
    #[test]
    fn a_request_under_timeout_never_delivers_after_the_retry() {
        killed_sender_with_escaped_request(Env::new(), "timeout 30", false);
    }

    #[test]
    fn a_request_under_setsid_never_delivers_after_the_retry() {
        killed_sender_with_escaped_request(Env::new(), "setsid", false);
    }

    #[test]
    fn an_escaped_request_whose_sender_and_watchdog_were_killed_is_ended_by_the_retry() {
        killed_sender_with_escaped_request(Env::new(), "timeout 30", true);
    }

    #[test]
    fn in_a_v1_freezer_cgroup_a_request_under_timeout_never_delivers_after_the_retry() {
        let env = Env::new().with_cgroup(V1_FREEZER);
        killed_sender_with_escaped_request(env, "timeout 30", true);
    }

    #[test]
    fn in_a_v1_freezer_cgroup_a_paused_sender_s_request_is_stopped_at_the_deadline() {
        let env = Env::new().with_skew("100ms").with_cgroup(V1_FREEZER);
        paused_sender_with_escaped_request(&env, "paused-v1", |_, _| {});
    }

    #[test]
    fn without_cgroups_the_cookie_ends_a_request_that_left_the_group() {
        killed_sender_with_escaped_request(Env::new().without_cgroups(), "setsid", false);
    }

    #[test]
    fn without_cgroups_a_request_that_cleared_its_environment_is_ended_by_the_watchdog() {
        // No cgroup and no cookie: only the watchdog, its parent and subreaper, still has it.
        killed_sender_with_escaped_request(Env::new().without_cgroups(), "env -i setsid", false);
    }

    #[test]
    fn without_cgroups_the_retry_ends_an_escaped_request_of_a_dead_sender_and_watchdog() {
        killed_sender_with_escaped_request(Env::new().without_cgroups(), "timeout 30", true);
    }

    #[test]
    fn without_cgroups_a_paused_sender_s_escaped_request_is_stopped_at_the_deadline() {
        let env = Env::new().with_skew("100ms").without_cgroups();
        paused_sender_with_escaped_request(&env, "paused-escape", |_, _| {});
    }

    #[test]
    fn a_paused_sender_s_escaped_request_is_stopped_at_the_deadline() {
        let env = Env::new().with_skew("100ms");
        paused_sender_with_escaped_request(&env, "paused-escape", |_, _| {});
    }

    #[test]
    fn a_dead_watchdog_is_restarted_and_still_stops_the_command_at_its_deadline() {
        let env = Env::new().with_skew("100ms");
        paused_sender_with_escaped_request(&env, "watchdog-kill", |_, watchdog| {
            sigkill(watchdog);
            // The sender looks at its watchdog every 100 ms: give it the chance it needs.
            std::thread::sleep(Duration::from_millis(500));
        });
    }

    #[test]
    fn a_stopped_watchdog_leaves_the_deadline_to_the_sender() {
        stopped_watchdog(Env::new().with_skew("100ms"));
    }

    #[test]
    fn without_cgroups_a_stopped_watchdog_leaves_the_deadline_to_the_sender() {
        stopped_watchdog(Env::new().with_skew("100ms").without_cgroups());
    }

    #[test]
    fn without_cgroups_a_dead_watchdog_is_restarted_and_the_deadline_still_holds() {
        let env = Env::new().with_skew("100ms").without_cgroups();
        paused_sender_with_escaped_request(&env, "watchdog-kill", |_, watchdog| {
            sigkill(watchdog);
            std::thread::sleep(Duration::from_millis(500));
        });
    }


    #[test]
    fn an_observer_that_leaves_a_child_holding_its_output_is_bounded() {
        observer_with_a_leftover(Env::new());
    }

    #[test]
    fn without_cgroups_an_observer_that_leaves_a_child_is_bounded() {
        observer_with_a_leftover(Env::new().without_cgroups());
    }
}

/// As root: `/proc` mounted `hidepid=2` in a mount namespace of the retry's own, so another
/// user's live sender has no `/proc/PID`: it must be in flight, never gone.
#[test]
fn sqlite_a_sender_hidden_by_hidepid_is_in_flight_not_gone() {
    let env = Env::new();
    let token = env.claim("hidden", "1h");
    std::fs::write(env.path("far"), "").expect("far side");
    share_with_everyone(&env);
    let script = format!("sleep 4; echo sent >> {}", env.path("far").display());
    let mut a = spawn(as_user(&env, "nobody", "hidden", token, Some(&script)));
    wait_submitted(&env);
    share_with_everyone(&env);
    let hidden = |c: Command| {
        let mut h = Command::new("unshare");
        h.args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t proc -o hidepid=2 proc /proc && exec \"$@\"",
            "sh",
        ])
        .arg(c.get_program())
        .args(c.get_args())
        .current_dir(env.dir.path());
        for (k, v) in c.get_envs() {
            if let Some(v) = v {
                h.env(k, v);
            }
        }
        h
    };
    let (code, _, err) = run(hidden(as_user(&env, "daemon", "hidden", token, None)));
    assert_eq!(
        code, 5,
        "a sender hidden by hidepid was taken for gone: {err}"
    );
    let status = a.wait().expect("reap");
    assert_eq!(status.code(), Some(0));
    let (code, _, err) = run(hidden(as_user(&env, "daemon", "hidden", token, None)));
    assert_eq!(code, 0, "{err}");
    assert_eq!(deliveries(&env), 1, "sent twice");
}

/// A sender in a pid namespace of its own that has no `/proc` of its own (`unshare --pid
/// --fork`, no `--mount-proc`): `/proc/PID` there names a host process. Its identity must be its
/// own, and a retry in the same namespace must find it gone once it is killed, not take a host
/// process (a kernel thread) for it and answer "in flight" for ever.
#[test]
fn sqlite_a_sender_in_a_pid_namespace_without_its_own_proc_is_judged_by_the_kernel() {
    let env = Env::new();
    let token = env.claim("ns", "1h");
    std::fs::write(env.path("far"), "").expect("far side");
    // The namespace's first process keeps it alive; the sender and its retry join it.
    let mut holder = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "sleep", "300"])
        .spawn()
        .expect("unshare");
    let init = crate::support::wait_for_some(
        "the namespace's first process",
        Duration::from_secs(10),
        || first_child(holder.id() as i32),
    );
    let in_ns = |c: Command| {
        let mut n = Command::new("nsenter");
        n.args(["--target", &init.to_string(), "--pid", "--"])
            .arg(c.get_program())
            .args(c.get_args())
            .current_dir(env.dir.path());
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => n.env(k, v),
                None => n.env_remove(k),
            };
        }
        n
    };
    let script = format!(
        "echo $$ > sh.pid; sleep 30; echo sent >> {}",
        env.path("far").display()
    );
    let mut a = spawn(in_ns(effect(&env, "ns", token, "1", &script)));
    read_pid(&env, "sh.pid");
    let sender =
        crate::support::wait_for_some("the sender under nsenter", Duration::from_secs(10), || {
            first_child(a.id() as i32)
        });
    sigkill(sender);
    a.wait().expect("reap");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _, err) = run(in_ns(retry(&env, "ns", token, "1")));
        if code != 5 {
            assert_eq!(code, 0, "{err}");
            break;
        }
        assert!(
            Instant::now() < until,
            "a killed sender in a pid namespace is still in flight: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    sigkill(holder.id() as i32);
    let _ = holder.wait();
    assert_eq!(deliveries(&env), 1, "sent twice");
}

/// The first child of `pid`, from /proc (None while it has none).
fn first_child(pid: i32) -> Option<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

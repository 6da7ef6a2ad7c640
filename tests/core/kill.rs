//! The only test that matters: kill `exactly effect` mid-effect (SIGKILL, at named fault points
//! in the real code path and at random moments), restart it without clearing the ledger, and
//! count what the far side received.
use crate::on_both_backends;
use crate::support;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;
use support::cli::{far_count, Env};

#[derive(Debug, Clone, Copy)]
enum Kill {
    /// At a named fault point (the process pauses there and announces it).
    Point(&'static str),
    /// While the command runs, after it sent.
    CommandAfterSend,
    /// While the command runs, before it sent.
    CommandBeforeSend,
    /// At a random moment.
    Random(u64),
}

fn attempt_args(far: &str, input: &str, slow_before_send: bool) -> Vec<String> {
    let body = if slow_before_send {
        format!("echo started >&2; sleep 0.3; echo $EXACTLY_EFFECT_KEY >> {far}")
    } else {
        format!("echo $EXACTLY_EFFECT_KEY >> {far}; echo started >&2; sleep 0.3")
    };
    [
        "effect",
        "--job",
        "kill",
        "--action",
        "send",
        "--target",
        "carol",
        "--input",
        input,
        "--observe",
        &format!("grep -qx \"$EXACTLY_EFFECT_KEY\" {far}"),
        "--",
        "sh",
        "-c",
        &body,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

on_both_backends! {
    #[test]
    fn sigkill_mid_effect_then_restart_leaves_exactly_one_effect() {
        let env = Env::new();
        let token = env.claim("kill", "10m").to_string();
        let far = env.path("far.txt");
        std::fs::write(&far, "").unwrap();
        let f = far.to_str().unwrap();
        let points = ["after_claim", "after_submitted", "after_send", "after_done"];
        let mut seed: u64 = 0x9e3779b97f4a7c15;
        let mut kills = std::collections::BTreeMap::<String, u32>::new();
        let iterations = 60;
        for i in 0..iterations {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let kill = match i % 7 {
                0..=3 => Kill::Point(points[i % 4]),
                4 => Kill::CommandAfterSend,
                5 => Kill::CommandBeforeSend,
                _ => Kill::Random(seed % 40),
            };
            let input = format!("i={i}");
            let key = env
                .run(&[
                    "key", "--action", "send", "--target", "carol", "--input", &input,
                ])
                .1
                .trim()
                .to_string();
            let mut cmd = env.cmd();
            cmd.args(attempt_args(
                f,
                &input,
                matches!(kill, Kill::CommandBeforeSend),
            ))
            .env("EXACTLY_FENCING_TOKEN", &token)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
            if let Kill::Point(p) = kill {
                cmd.env("EXACTLY_FAULT", format!("{p}:pause=20s"));
            }
            let mut child = cmd.spawn().expect("spawn");
            let stderr = child.stderr.take().unwrap();
            match kill {
                Kill::Random(ms) => std::thread::sleep(Duration::from_millis(ms)),
                _ => {
                    let want = match kill {
                        Kill::Point(p) => format!("exactly-fault: {p}"),
                        _ => "started".to_string(),
                    };
                    let mut seen = false;
                    for line in BufReader::new(stderr).lines() {
                        if line.map(|l| l.contains(&want)).unwrap_or(false) {
                            seen = true;
                            break;
                        }
                    }
                    assert!(seen, "iteration {i}: never reached {want}");
                }
            }
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            child.wait().unwrap(); // reap, so the dead attempt is seen as dead
            *kills
                .entry(
                    format!("{kill:?}").split('(').next().unwrap().to_string()
                        + &match kill {
                            Kill::Point(p) => format!(":{p}"),
                            _ => String::new(),
                        },
                )
                .or_default() += 1;
            // Restart without clearing the ledger.
            let out = env
                .cmd()
                .args(attempt_args(f, &input, false))
                .env("EXACTLY_FENCING_TOKEN", &token)
                .output()
                .unwrap();
            let (code, _, err) = support::cli::split(out);
            assert_eq!(code, 0, "iteration {i} ({kill:?}): restart: {err}");
            assert_eq!(
                far_count(&far, &key),
                1,
                "iteration {i} ({kill:?}): duplicate or lost effect"
            );
            assert_eq!(
                env.state_of(&key).as_deref(),
                Some("done"),
                "iteration {i} ({kill:?})"
            );
        }
        assert_eq!(
            env.sql_count("SELECT count(*) FROM effect_ledger WHERE state <> 'done'"),
            0,
            "nothing left claimed"
        );
        assert_eq!(
            env.sql_count("SELECT count(*) FROM effect_ledger"),
            iterations as i64
        );
        eprintln!("kills: {kills:?}");
    }
}

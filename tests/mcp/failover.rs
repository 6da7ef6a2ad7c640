//! The gateway across a real PostgreSQL failover: two servers (`support::pair`), a primary and
//! its asynchronous standby, the gateways on the multi-host URL
//! (`…@h1:p1,h2:p2/db?target_session_attrs=read-write`); the WAL sender stopped, a gateway's call
//! made on the primary alone, the primary SIGKILLed and the standby promoted. Shown: a gateway
//! that held its lease before the failover acts on no stale token (its guarded call is refused
//! naming the failover, no mail); a gateway started after it holds no token handed out before
//! it; and the call whose row the promoted server lost is settled by the observer, not sent
//! again (one mail on the far side).
//!
//! `EXACTLY_TEST_FAILOVER_UNGUARDED=1` runs every process with `EXACTLY_FAILOVER_GUARD=off`: the
//! test then fails (a token handed out twice, a mail sent twice, a stale holder sending), which
//! is how it was first seen failing.
use crate::{lines, mail, outcome, support, text, World};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::Child;
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use support::pair::Pair;

/// A client running on: its answers as they come, its stderr (the gateway's too) kept.
struct Running {
    child: Child,
    answers: Receiver<Value>,
    stderr: std::thread::JoinHandle<String>,
}

impl Running {
    fn start(mut child: Child) -> Running {
        let out = child.stdout.take().expect("the client's stdout");
        let mut err = child.stderr.take().expect("the client's stderr");
        let (tx, answers) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                for v in lines(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Running {
            child,
            answers,
            stderr,
        }
    }

    /// The next answer, within 60 s.
    fn next(&mut self, what: &str) -> Value {
        match self.answers.recv_timeout(Duration::from_secs(60)) {
            Ok(v) => v,
            Err(e) => {
                let _ = self.child.kill();
                panic!("no answer for {what} ({e})");
            }
        }
    }

    /// Waits for the client's end: its stderr.
    fn end(mut self) -> String {
        let status = self.child.wait().expect("the client");
        let err = self.stderr.join().unwrap_or_default();
        assert!(status.success(), "the client failed: {status}\n{err}");
        err
    }
}

/// The fencing token the lease of gateway `name` holds, read on `c`'s server.
fn lease_token(c: &mut ::postgres::Client, name: &str) -> i64 {
    c.query_one(
        "SELECT fencing_token FROM job_lease WHERE job_key = $1",
        &[&name],
    )
    .map(|r| r.get(0))
    .unwrap_or_else(|e| panic!("the lease of {name}: {}", support::pg::describe(&e)))
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn across_a_real_failover_the_gateway_acts_on_no_stale_token_and_sends_no_mail_twice() {
    let started = Instant::now();
    let pair = Pair::start().unwrap_or_else(|e| panic!("{e}"));
    let mut w = World::guarded();
    w.env.db = PathBuf::from(pair.url());
    let unguarded = std::env::var_os("EXACTLY_TEST_FAILOVER_UNGUARDED").is_some();
    let guard: &[(&str, &str)] = if unguarded {
        &[("EXACTLY_FAILOVER_GUARD", "off")]
    } else {
        &[("EXACTLY_FAILOVER_GUARD", "on")]
    };
    // A lease longer than the failover takes: without the guard, the held gateway's token would
    // still be live on the promoted server (with the tests' 3 s it lapses first).
    w.write_config_text(&crate::CONFIG.replace("lease = \"3s\"", "lease = \"20s\""));
    let (code, _, err) = w.env.run(&["init"]);
    assert_eq!(code, 0, "{err}");
    // A gateway that holds its lease across the failover: one mail before it, then it waits
    // for the test to say the failover is done, then the next call.
    w.name = "held".into();
    let failed_over = w.env.path("failed-over");
    let mut held = Running::start(w.client(
        json!([
            mail("ann@example.com", "before"),
            ["wait_for_file", {"path": failed_over}],
            mail("ann@example.com", "after"),
        ]),
        guard,
    ));
    held.next("the tools list");
    let before = held.next("the mail before the failover");
    assert_eq!(outcome(&before), "done", "{before:?}");
    pair.wait_caught_up().unwrap_or_else(|e| panic!("{e}"));
    pair.hold_stream().unwrap_or_else(|e| panic!("{e}"));
    // A gateway on the primary alone: its claim and its mail's row never reach the standby.
    w.name = "mail".into();
    let out = w.client(json!([mail("bob@example.com", "lost")]), guard);
    let out = out.wait_with_output().expect("the client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    let mut primary = pair.primary.client().unwrap_or_else(|e| panic!("{e}"));
    let handed_out = lease_token(&mut primary, "mail");
    drop(primary);
    pair.fail_over().unwrap_or_else(|e| panic!("{e}"));
    // The gateway that held its lease before: its token is stale, it sends nothing.
    std::fs::write(&failed_over, "").expect("write the file the client waits for");
    let waited = held.next("the wait");
    assert_eq!(waited["waited"], json!(failed_over), "{waited:?}");
    let after = held.next("the mail after the failover");
    let held_err = held.end();
    // A gateway started after the failover: its token is above every one handed out before
    // (the old primary's lost claim too); the mail whose row was lost is found by the observer
    // (`list_sent`) and not sent again; a new mail goes once its observer says it was not sent.
    let out = w
        .client(
            json!([
                mail("bob@example.com", "lost"),
                mail("cat@example.com", "new")
            ]),
            guard,
        )
        .wait_with_output()
        .expect("the client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{answers:?}\n{err}");
    let mut promoted = pair.standby.client().unwrap_or_else(|e| panic!("{e}"));
    let token = lease_token(&mut promoted, "mail");
    let sent = w.sent();
    let count = |prefix: &str| sent.iter().filter(|l| l.starts_with(prefix)).count();
    // The three guarantees first, each said, so that a run without the guard shows them all.
    let mut broken = Vec::new();
    if count("sent|ann@example.com|after|") > 0 {
        broken.push(format!(
            "the gateway that held its lease before the failover sent under its stale token: \
             {after}"
        ));
    }
    if token <= handed_out {
        broken.push(format!(
            "the gateway started after the failover holds token {token}, not above {handed_out} \
             handed out before it on the old primary"
        ));
    }
    if count("sent|bob@example.com|lost|") != 1 {
        broken.push(format!(
            "the mail whose row the failover lost reached the far side {} times",
            count("sent|bob@example.com|lost|")
        ));
    }
    assert!(
        broken.is_empty(),
        "{}\nfar side: {sent:?}\n{answers:?}\n{held_err}\n{err}",
        broken.join("\n")
    );
    // How each was answered.
    assert_eq!(outcome(&after), "fenced", "{after:?}\n{held_err}");
    assert_eq!(after["result"]["isError"], true, "{after:?}");
    assert!(
        text(&after).contains("the database failed over"),
        "{after:?}"
    );
    assert_eq!(token, (1 << 32) + 1, "the token after the raise");
    assert_eq!(
        outcome(&answers[1]),
        "duplicate_suppressed",
        "{answers:?}\n{err}"
    );
    assert!(
        text(&answers[1]).contains("already happened"),
        "{answers:?}"
    );
    assert_eq!(outcome(&answers[2]), "done", "{answers:?}\n{err}");
    assert_eq!(count("sent|cat@example.com|new|"), 1, "{sent:?}");
    eprintln!(
        "two servers, three gateways and a failover in {:.1?}",
        started.elapsed()
    );
}

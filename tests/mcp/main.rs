//! `exactly mcp` end to end: a real MCP client and a real MCP server, both from the official
//! Python SDK (`mcp` on PyPI), with the gateway between them; real processes, a real SQLite
//! file, real SIGKILLs at named points of the real code path (`EXACTLY_FAULT`, and the test
//! server's `MAIL_PAUSE_AFTER_SEND`).
//!
//! Needs `python3` with `venv` and pip's access to PyPI: the venv is made once under the
//! target directory (`.ci/run` makes it first). A missing `mcp` fails the tests.
//!
//! `EXACTLY_TEST_MCP_UNGUARDED=1` writes `guard = false` for the tools the tests guard: each
//! guarantee test then fails (this is how they were first seen failing).

#[path = "../support/mod.rs"]
mod support;

mod dashboard;
mod doctor;
mod elicit;
mod failover;
mod http;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use support::cli::Env;

/// The venv's python with `mcp` (made once per test process).
pub(crate) fn python() -> Result<PathBuf, String> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(make_venv).clone()
}

fn make_venv() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv");
    let py = venv.join("bin").join("python");
    let has_mcp = |py: &Path| {
        Command::new(py)
            .args(["-c", "import mcp.server.mcpserver, mcp.client"])
            .current_dir("/")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if py.exists() && has_mcp(&py) {
        return Ok(py);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .map_err(|e| format!("python3 -m venv: {e} (see .ci/run)"))?;
    if !made.status.success() {
        return Err(format!(
            "python3 -m venv failed: {}",
            String::from_utf8_lossy(&made.stderr)
        ));
    }
    let pip = Command::new(&py)
        .args(["-m", "pip", "install", "-q", "mcp>=2.3,<3"])
        .output()
        .map_err(|e| format!("pip: {e}"))?;
    if !pip.status.success() || !has_mcp(&py) {
        return Err(format!(
            "pip install mcp failed (the MCP tests need the official Python SDK): {}",
            String::from_utf8_lossy(&pip.stderr)
        ));
    }
    Ok(py)
}

pub(crate) fn here(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("mcp")
        .join(name)
}

/// One test's world: a database, an outbox (the far side), a gateway file.
pub(crate) struct World {
    pub(crate) env: Env,
    /// A streamable-HTTP server's URL: the gateway is its client (`--url`), not a command's.
    pub(crate) url: Option<String>,
    pub(crate) py: PathBuf,
    pub(crate) outbox: PathBuf,
    config: PathBuf,
    /// The gateway's name (`--name`, its job): `mail` unless a test runs several.
    pub(crate) name: String,
}

/// The gateway file of the tests: `send_email` keyed by `to`, settled by `list_sent`.
const CONFIG: &str = r#"
lease = "3s"
wait_for_lease = "30s"

[[tool]]
name = "send_email"
target = "to"
observe = { tool = "list_sent", found = "sent|{to}|{subject}|{body}|" }

[[tool]]
name = "book_table"
target = "restaurant"
needs_approval = true
wait_for_approval = "30s"
"#;

impl World {
    /// A world whose gateway guards as [`CONFIG`] says (unguarded, with
    /// `EXACTLY_TEST_MCP_UNGUARDED`).
    pub(crate) fn new() -> World {
        let w = World::guarded();
        w.write_config(std::env::var_os("EXACTLY_TEST_MCP_UNGUARDED").is_some());
        w
    }

    /// A world whose gateway guards as [`CONFIG`] says, whatever the environment: a test of a
    /// crash needs the guarded gateway's fault point, and switches the guard off for the retry
    /// only ([`World::retry_config`]).
    fn guarded() -> World {
        let py = python().unwrap_or_else(|e| panic!("{e}"));
        let env = Env::new().with_skew("200ms");
        let outbox = env.path("outbox");
        let config = env.path("mcp.toml");
        let w = World {
            env,
            url: None,
            py,
            outbox,
            config,
            name: "mail".into(),
        };
        w.write_config(false);
        w
    }

    /// The file for the retry after a crash: unguarded with `EXACTLY_TEST_MCP_UNGUARDED`.
    fn retry_config(&self) {
        self.write_config(std::env::var_os("EXACTLY_TEST_MCP_UNGUARDED").is_some());
    }

    /// The gateway file, as `text` says.
    fn write_config_text(&self, text: &str) {
        std::fs::write(&self.config, text).expect("write mcp.toml");
    }

    fn write_config(&self, unguarded: bool) {
        let mut text = CONFIG.to_string();
        if unguarded {
            text = text.replace("\"\ntarget", "\"\nguard = false\ntarget")
                + "\n[[tool]]\nname = \"cancel_booking\"\nguard = false\n";
        }
        std::fs::write(&self.config, text).expect("write mcp.toml");
    }

    /// The client, started with `calls`; the gateway (and under it the server) is its server.
    pub(crate) fn client(&self, calls: Value, extra_env: &[(&str, &str)]) -> Child {
        self.client_with(calls, false, extra_env)
    }

    /// The client, making `calls` all at once when `parallel`.
    fn client_with(&self, calls: Value, parallel: bool, extra_env: &[(&str, &str)]) -> Child {
        self.client_spec(calls, json!({"parallel": parallel}), extra_env)
    }

    /// The client, with `more` merged into its spec.
    fn client_spec(&self, calls: Value, more: Value, extra_env: &[(&str, &str)]) -> Child {
        let mut gateway = vec![
            support::bin(),
            "--db".into(),
            self.env.db_str().into(),
            "mcp".into(),
            "--name".into(),
            self.name.clone(),
            "--config".into(),
            self.config.to_str().expect("utf8").into(),
        ];
        match &self.url {
            Some(u) => gateway.extend(["--url".to_string(), u.clone()]),
            None => gateway.extend([
                "--".to_string(),
                self.py.to_str().expect("utf8").into(),
                here("mail_server.py").to_str().expect("utf8").into(),
            ]),
        }
        let mut spec = json!({
            "gateway": gateway,
            "calls": calls,
            "list_tools": true,
        });
        if let (Some(s), Some(m)) = (spec.as_object_mut(), more.as_object()) {
            s.extend(m.clone());
        }
        let mut c = Command::new(&self.py);
        c.arg(here("client.py"))
            .arg(spec.to_string())
            .current_dir(self.env.dir.path())
            .env("MAIL_OUTBOX", &self.outbox)
            .env("EXACTLY_MAX_SKEW", "200ms")
            .env_remove("EXACTLY_FAULT")
            .env_remove("MAIL_PAUSE_AFTER_SEND")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in extra_env {
            c.env(k, v);
        }
        c.spawn().expect("start the MCP client")
    }

    /// Runs the client to its end: its answers (the tools list first), and its stderr.
    pub(crate) fn answers(&self, calls: Value) -> (Vec<Value>, String) {
        let out = self
            .client(calls, &[])
            .wait_with_output()
            .expect("MCP client");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let answers = lines(&String::from_utf8_lossy(&out.stdout));
        assert!(
            out.status.success(),
            "the client failed: {answers:?}\n{stderr}"
        );
        (answers, stderr)
    }

    /// The mails the far side got.
    pub(crate) fn sent(&self) -> Vec<String> {
        std::fs::read_to_string(&self.outbox)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `exactly key` for a mail: how the gateway keys it.
    pub(crate) fn mail_key(&self, to: &str, subject: &str, body: &str) -> String {
        let (code, out, err) = self.env.run(&[
            "key",
            "--action",
            "send_email",
            "--target",
            to,
            "--input",
            &format!("subject={subject}"),
            "--input",
            &format!("body={body}"),
        ]);
        assert_eq!(code, 0, "{err}");
        out.trim().to_string()
    }
}

pub(crate) fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

pub(crate) fn mail(to: &str, subject: &str) -> Value {
    json!(["send_email", {"to": to, "subject": subject, "body": "hello"}])
}

/// How the gateway answered a call: `_meta["exactly/outcome"]`.
pub(crate) fn outcome(answer: &Value) -> String {
    answer["result"]["_meta"]["exactly/outcome"]
        .as_str()
        .unwrap_or("(none: passed through)")
        .to_string()
}

pub(crate) fn text(answer: &Value) -> String {
    answer["result"]["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Reads `child`'s stderr until a line holds `needle` (or `within` passes); the rest of it is
/// drained on a thread, so the child never blocks on a full pipe.
fn await_stderr(child: &mut Child, needle: &str, within: Duration) -> Result<(), String> {
    let err = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let until = Instant::now() + within;
    let mut seen = String::new();
    while Instant::now() < until {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            if line.contains(needle) {
                std::thread::spawn(move || while rx.recv().is_ok() {});
                return Ok(());
            }
            seen.push_str(&line);
            seen.push('\n');
        }
    }
    Err(format!(
        "no {needle:?} on stderr within {within:?}:\n{seen}"
    ))
}

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn sigkill(pid: u32) {
    // SAFETY: kill(2) on a pid this test started; no memory is involved.
    let r = unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    assert_eq!(r, 0, "SIGKILL {pid}");
}

/// The same call three times is sent once, the other two answered from the ledger and marked
/// so; other facts are another effect. The server gets the effect key in `_meta`.
#[test]
fn same_call_three_times_is_sent_once() {
    let w = World::new();
    let (answers, err) = w.answers(json!([
        mail("bob@example.com", "invoice"),
        mail("bob@example.com", "invoice"),
        mail("bob@example.com", "invoice"),
        mail("carol@example.com", "invoice"),
    ]));
    let outcomes: Vec<String> = answers[1..].iter().map(outcome).collect();
    assert_eq!(
        outcomes,
        [
            "done",
            "duplicate_suppressed",
            "duplicate_suppressed",
            "done"
        ],
        "{answers:?}\n{err}"
    );
    assert!(
        text(&answers[2]).contains("sent to bob@example.com"),
        "{answers:?}"
    );
    let sent = w.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let key = w.mail_key("bob@example.com", "invoice", "hello");
    assert!(
        sent[0].ends_with(&format!("key={key}")),
        "{sent:?} vs {key}"
    );
    assert_eq!(answers[1]["result"]["_meta"]["exactly/effect_key"], key);
    assert_eq!(w.env.state_of(&key).as_deref(), Some("done"));
    // The tools list says how each tool is guarded; the read-only one passes through.
    let tools = answers[0]["tools"].as_array().expect("tools");
    let desc = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .and_then(|t| t["description"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert!(desc("send_email").contains("exactly-once"), "{tools:?}");
    assert!(desc("send_email").contains("acts on `to`"), "{tools:?}");
    assert!(!desc("list_sent").contains("exactly"), "{tools:?}");
    // The effects are the gateway's job's, as `exactly effects` shows any job's.
    let (code, out, e) = w
        .env
        .run(&["effects", "--state", "done", "--job", "mail", "--json"]);
    assert_eq!(code, 0, "{e}");
    assert!(out.contains(&key), "{out}");
}

/// The gateway is killed at `point` of a call; a new gateway (the client restarted) is asked
/// again: the mail went out once, whether the kill came before or after the send.
fn gateway_killed_at(point: &str) {
    let w = World::guarded();
    let fault = format!("{point}:pause=60s");
    let mut first = w.client(
        json!([mail("dave@example.com", "order 7")]),
        &[("EXACTLY_FAULT", &fault)],
    );
    let seen = await_stderr(
        &mut first,
        &format!("exactly-fault: {point}"),
        Duration::from_secs(60),
    );
    let gateway = children(first.id())
        .into_iter()
        .find(|p| comm(*p) == "exactly");
    let Some(gateway) = gateway else {
        let _ = first.kill();
        panic!("no gateway under the client ({seen:?})");
    };
    seen.unwrap_or_else(|e| panic!("{e}"));
    sigkill(gateway);
    let out = first.wait_with_output().expect("first client");
    assert!(
        !out.status.success(),
        "the first client saw its gateway die"
    );
    w.retry_config();
    let (answers, err) = w.answers(json!([mail("dave@example.com", "order 7")]));
    let sent = w.sent();
    assert_eq!(
        sent.iter()
            .filter(|l| l.contains("dave@example.com"))
            .count(),
        1,
        "{sent:?}\n{answers:?}\n{err}"
    );
    let want = if point == "after_send" {
        "duplicate_suppressed"
    } else {
        "done"
    };
    assert_eq!(outcome(&answers[1]), want, "{answers:?}\n{err}");
    let key = w.mail_key("dave@example.com", "order 7", "hello");
    assert_eq!(w.env.state_of(&key).as_deref(), Some("done"));
}

#[test]
fn gateway_killed_after_the_send_sends_once() {
    gateway_killed_at("after_send");
}

#[test]
fn gateway_killed_before_the_send_sends_once() {
    gateway_killed_at("after_submitted");
}

/// The server is killed after it sent and before it answered: the agent is told the call is
/// unknown; its retry (the client restarted) is settled by `list_sent` (it happened) and not
/// sent again.
#[test]
fn server_killed_mid_call_is_settled_by_the_observer() {
    let w = World::guarded();
    let pause = w.env.path("server-paused");
    let c = w.client(
        json!([mail("erin@example.com", "refund")]),
        &[("MAIL_PAUSE_AFTER_SEND", pause.to_str().expect("utf8"))],
    );
    let until = Instant::now() + Duration::from_secs(60);
    let mut c = c;
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&pause)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            break p;
        }
        if Instant::now() > until {
            let _ = c.kill();
            panic!("the server never paused after its send");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    sigkill(pid);
    let out = c.wait_with_output().expect("client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{answers:?}\n{err}");
    assert_eq!(outcome(&answers[1]), "unknown", "{answers:?}\n{err}");
    assert_eq!(answers[1]["result"]["isError"], true, "{answers:?}");
    let key = w.mail_key("erin@example.com", "refund", "hello");
    assert_eq!(w.env.state_of(&key).as_deref(), Some("unknown"));
    w.retry_config();
    let (answers, err) = w.answers(json!([mail("erin@example.com", "refund")]));
    assert_eq!(
        outcome(&answers[1]),
        "duplicate_suppressed",
        "{answers:?}\n{err}"
    );
    assert!(
        text(&answers[1]).contains("already happened"),
        "{answers:?}"
    );
    let sent = w.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(w.env.state_of(&key).as_deref(), Some("done"));
}

/// Everything but a guarded call passes through: resources, prompts, a read-only tool and the
/// progress it reports (re-addressed to the client's token), and its result untouched.
#[test]
fn resources_prompts_and_progress_pass_through() {
    let w = World::new();
    let out = w
        .client_spec(
            json!([["count_slowly", {"n": 3}], ["count_slowly", {"n": 3}]]),
            json!({"extras": true}),
            &[],
        )
        .wait_with_output()
        .expect("client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{answers:?}\n{err}");
    let extras = &answers[1];
    assert_eq!(
        extras["resources"]["resources"][0]["uri"], "mail://outbox",
        "{extras:?}"
    );
    assert_eq!(
        extras["prompts"]["prompts"][0]["name"], "reply",
        "{extras:?}"
    );
    let prompt = extras["prompt"].to_string();
    assert!(prompt.contains("Write a reply to bob."), "{prompt}");
    for a in &answers[2..] {
        assert_eq!(outcome(a), "(none: passed through)", "{a:?}");
        assert_eq!(text(a), "counted to 3", "{a:?}");
        assert_eq!(
            a["progress"],
            json!(["step 1", "step 2", "step 3"]),
            "{a:?}"
        );
    }
    assert!(w.sent().is_empty());
}

/// Two copies of one call at once: the second meets the first in flight and is answered with
/// a tool error that says so; the mail goes out once.
#[test]
fn a_call_in_flight_is_not_sent_again() {
    let w = World::new();
    let out = w
        .client_with(
            json!([
                mail("frank@example.com", "slow"),
                mail("frank@example.com", "slow")
            ]),
            true,
            &[("MAIL_SLOW_SECONDS", "2")],
        )
        .wait_with_output()
        .expect("client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{answers:?}\n{err}");
    let mut outcomes: Vec<String> = answers[1..].iter().map(outcome).collect();
    outcomes.sort();
    assert_eq!(outcomes, ["done", "in_flight"], "{answers:?}\n{err}");
    let busy = answers[1..]
        .iter()
        .find(|a| outcome(a) == "in_flight")
        .expect("in flight");
    assert_eq!(busy["result"]["isError"], true, "{busy:?}");
    assert!(text(busy).contains("in flight"), "{busy:?}");
    assert_eq!(w.sent().len(), 1, "{:?}", w.sent());
}

/// A tool that needs approval: the agent is told it awaits approval by key, nothing is sent;
/// `exactly approve` lets the next call go, once.
#[test]
fn approval_round_trip_with_exactly_approve() {
    let w = World::new();
    let cancel = json!(["cancel_booking", {"booking": "B-17"}]);
    let (answers, err) = w.answers(json!([cancel]));
    assert_eq!(
        outcome(&answers[1]),
        "awaiting_approval",
        "{answers:?}\n{err}"
    );
    let key = answers[1]["result"]["_meta"]["exactly/effect_key"]
        .as_str()
        .expect("key")
        .to_string();
    assert!(
        text(&answers[1]).contains(&format!("exactly approve {key}")),
        "{answers:?}"
    );
    assert!(w.sent().is_empty(), "{:?}", w.sent());
    let (code, _, e) = w.env.run(&["approve", &key]);
    assert_eq!(code, 0, "{e}");
    let (answers, err) = w.answers(json!([cancel, cancel]));
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    assert_eq!(
        outcome(&answers[2]),
        "duplicate_suppressed",
        "{answers:?}\n{err}"
    );
    assert_eq!(w.sent(), ["cancelled|B-17"]);
}

/// `wait_for_approval`: the call is held open, with progress notifications, until a person
/// approves; then it is sent, and its answer is the call's.
#[test]
fn a_held_call_goes_once_approved() {
    let w = World::new();
    let mut c = w.client(
        json!([["book_table", {"restaurant": "Chez Nous", "guests": 4}]]),
        &[],
    );
    let mut inputs = serde_json::Map::new();
    inputs.insert("guests".into(), json!(4));
    let key = exactly::key::effect_key(
        "book_table",
        "Chez Nous",
        &exactly::key::input_digest(&inputs),
    );
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, _, _) = w.env.run(&["approve", &key]);
        if code == 0 {
            break;
        }
        if Instant::now() > until {
            let _ = c.kill();
            panic!("the held call never asked for approval");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = c.wait_with_output().expect("client");
    let answers = lines(&String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{answers:?}\n{err}");
    let progress = answers[1]["progress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        progress
            .iter()
            .any(|p| p.as_str().is_some_and(|s| s.contains("exactly approve"))),
        "{answers:?}"
    );
    assert_eq!(outcome(&answers[1]), "done", "{answers:?}\n{err}");
    assert_eq!(w.sent(), ["booked|Chez Nous|4"]);
}

/// One lease per gateway name: a second gateway of the same name, while the first lives,
/// refuses (exit 3, saying who holds it); a bad file is one line and exit 2.
#[test]
fn a_second_gateway_of_the_same_name_refuses() {
    let w = World::new();
    let server = [
        w.py.to_str().expect("utf8").to_string(),
        here("mail_server.py").to_str().expect("utf8").to_string(),
    ];
    let mut first = w
        .env
        .cmd()
        .args(["mcp", "--name", "mail", "--"])
        .args(&server)
        .env("MAIL_OUTBOX", &w.outbox)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("first gateway");
    let until = Instant::now() + Duration::from_secs(30);
    // Read through the command line: a database still being created is not an error there.
    let held = || w.env.run(&["status"]).1.contains("held by");
    while !held() {
        assert!(
            Instant::now() < until,
            "the first gateway never claimed its lease"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = w
        .env
        .cmd()
        .args(["mcp", "--name", "mail", "--"])
        .args(&server)
        .stdin(Stdio::null())
        .output()
        .expect("second gateway");
    let err = String::from_utf8_lossy(&second.stderr);
    drop(first.stdin.take());
    let _ = first.wait();
    assert_eq!(second.status.code(), Some(3), "{err}");
    assert!(err.contains("holds the lease of mail"), "{err}");
    std::fs::write(
        w.env.path("bad.toml"),
        "[[tool]]\nname = \"x\"\nguard = \"no\"\n",
    )
    .expect("write");
    let bad = w.env.path("bad.toml");
    let (code, _, err) = w
        .env
        .run(&["mcp", "--config", bad.to_str().expect("utf8"), "--", "true"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

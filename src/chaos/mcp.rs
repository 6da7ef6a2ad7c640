//! `mcp`: an agent's tool calls through `exactly mcp`. Each iteration is one message: an MCP
//! client (the official SDK, rmcp) starts a gateway in front of the far side's MCP server
//! (`exactly far-side mcp`) and calls `send_message`; the gateway is SIGKILLed at a named point
//! of a guarded call, or the server (alone, or with its gateway) once its request left, or the
//! gateway at a random moment; then the client starts a new gateway and calls again, as an agent
//! would, until the call is answered. The gateway's observer is the server's `seen` tool.
use super::mcp_far::{HOLD_ENV, SENT_MARKER};
use super::{Eff, Harness, Tally};
use crate::{Error, Result};
use indicatif::ProgressBar;
use rand::Rng;
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// How the first attempt of an iteration dies.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// The gateway, paused at this point of the effect.
    Gateway(&'static str),
    /// The server, once its request left (its gateway then records `unknown`).
    ServerAfterRequestLeft,
    /// The server and its gateway, once the request left.
    BothAfterRequestLeft,
    /// The gateway, at a random moment of the call.
    Random,
}

const KILLS: &[Kill] = &[
    Kill::Gateway("after_submitted"),
    Kill::Gateway("after_send"),
    Kill::Gateway("after_done"),
    Kill::ServerAfterRequestLeft,
    Kill::BothAfterRequestLeft,
    Kill::Random,
];

/// Calls before the effect counts as stuck.
const SETTLE_TRIES: usize = 8;
/// How long a paused gateway or a held server waits: the harness always kills it first.
const HOLD_SECS: u64 = 60;
/// The longest one attempt may take (a restarted gateway waits out its predecessor's lease).
const ATTEMPT: Duration = Duration::from_secs(30);
const JOB: &str = "chaos-mcp";

/// What an attempt needs, apart from the harness (which stays on this thread).
struct Setup {
    exe: PathBuf,
    db: String,
    config: PathBuf,
    socket: PathBuf,
    nonce: String,
}

pub(super) fn run(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let s = Setup {
        exe: h.exe().to_path_buf(),
        db: h.db().to_string(),
        config: write_config(h)?,
        socket: h.far.socket.clone(),
        nonce: h.nonce().to_string(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the MCP client's runtime", e))?;
    for i in 0..u64::from(n) {
        iteration(h, t, &rt, &s, i);
        bar.inc(1);
    }
    Ok(())
}

/// The gateway's file: one guarded (or, unguarded, passed through) `send_message` tool whose
/// observer is the far side's `seen`.
fn write_config(h: &Harness) -> Result<PathBuf> {
    let config = h.dir.join("chaos-mcp.toml");
    let guard = if h.guarded { "" } else { "guard = false\n" };
    let text = [
        "lease = \"1s\"\nwait_for_lease = \"20s\"\n\n[[tool]]\nname = \"send_message\"\n",
        guard,
        "target = \"target\"\nignore = [\"k\"]\nlease = \"10s\"\n",
        "observe = { tool = \"seen\", arguments = { k = \"{key}\" }, found = \"YES\" }\n",
    ]
    .concat();
    std::fs::write(&config, text).map_err(|e| Error::io("cannot write the gateway's file", e))?;
    Ok(config)
}

/// One message: the first attempt killed as this iteration's kill says, then calls until one
/// is answered (or `SETTLE_TRIES` calls were not).
fn iteration(h: &mut Harness, t: &mut Tally, rt: &tokio::runtime::Runtime, s: &Setup, i: u64) {
    let e = Eff {
        job: JOB.into(),
        token: crate::Token::from(0),
        action: "send_message".into(),
        target: "dave".into(),
        i,
    };
    let key = h.key(&e).to_string();
    let kill = match KILLS[(i as usize) % KILLS.len()] {
        // Unguarded, the gateway has no effect to pause in: kill the server instead.
        Kill::Gateway(_) if !h.guarded => Kill::ServerAfterRequestLeft,
        k => k,
    };
    let label = format!("mcp #{i} ({kill:?})");
    let random = Duration::from_millis(h.rng.gen_range(50..400));
    let first = rt.block_on(attempt(s, i, &key, Some((kill, random))));
    match first {
        Ok(Some(point)) => t.kill(point),
        Ok(None) => t.anomaly(format!("{label}: the kill came too late or missed")),
        Err(why) => t.anomaly(format!("{label}: {why}")),
    }
    let mut ends = Vec::new();
    let mut settled = false;
    for _ in 0..SETTLE_TRIES {
        match rt.block_on(call_once(s, i, &key)) {
            Ok(o) if matches!(o.as_str(), "done" | "duplicate_suppressed" | "passed") => {
                settled = true;
                break;
            }
            Ok(o) => ends.push(o),
            Err(e) => ends.push(e),
        }
    }
    if !settled {
        t.anomaly(format!(
            "{label}: retries never settled it ({})",
            ends.join("; ")
        ));
    }
    t.intend(&key, label);
    t.iterations += 1;
}

/// A gateway for one client session, its stderr on a channel.
fn gateway(
    s: &Setup,
    env: &[(&str, String)],
) -> Result<(
    rmcp::transport::TokioChildProcess,
    tokio::sync::mpsc::UnboundedReceiver<String>,
)> {
    let mut cmd = tokio::process::Command::new(&s.exe);
    cmd.arg("--db")
        .arg(&s.db)
        .args(["mcp", "--name", JOB, "--config"])
        .arg(&s.config)
        .arg("--")
        .arg(&s.exe)
        .args(["far-side", "mcp", "--socket"])
        .arg(&s.socket)
        .env_remove("EXACTLY_FAULT")
        .env_remove(HOLD_ENV)
        .env_remove("EXACTLY_DB")
        .env("EXACTLY_MAX_SKEW", "100ms")
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (proc, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io("cannot start a gateway", e))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    if let Some(err) = stderr {
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(err).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let _ = tx.send(l);
            }
        });
    }
    Ok((proc, rx))
}

fn params(s: &Setup, i: u64, key: &str) -> CallToolRequestParams {
    let mut args = serde_json::Map::new();
    args.insert("target".into(), "dave".into());
    args.insert("run".into(), s.nonce.clone().into());
    args.insert("i".into(), i.to_string().into());
    args.insert("k".into(), key.into());
    CallToolRequestParams::new("send_message").with_arguments(args)
}

/// How a call was answered: the gateway's `_meta["exactly/outcome"]` (`passed` when passed
/// through unguarded and answered without error).
fn outcome_of(r: &rmcp::model::CallToolResult) -> String {
    match r
        .meta
        .as_ref()
        .and_then(|m| m.0.get("exactly/outcome"))
        .and_then(|v| v.as_str())
    {
        Some(o) => o.to_string(),
        None if r.is_error != Some(true) => "passed".into(),
        None => "error".into(),
    }
}

/// One client session, one call, nothing killed.
async fn call_once(s: &Setup, i: u64, key: &str) -> std::result::Result<String, String> {
    let (proc, _err) = gateway(s, &[]).map_err(|e| e.to_string())?;
    let client = tokio::time::timeout(ATTEMPT, ().serve(proc))
        .await
        .map_err(|_| "the gateway did not initialise in time".to_string())?
        .map_err(|e| format!("the gateway did not initialise: {e}"))?;
    let r = tokio::time::timeout(ATTEMPT, client.peer().call_tool(params(s, i, key)))
        .await
        .map_err(|_| "no answer in time".to_string())?
        .map_err(|e| format!("the call failed: {e}"))?;
    let _ = client.cancel().await;
    Ok(outcome_of(&r))
}

fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn sigkill(pid: u32) {
    // SAFETY: kill(2) on a process this harness started (the gateway, or the server under it,
    // both alive: their stderr just spoke); no memory is involved.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
}

/// The first attempt of an iteration, killed as `kill` says; the point it was killed at.
async fn attempt(
    s: &Setup,
    i: u64,
    key: &str,
    kill: Option<(Kill, Duration)>,
) -> std::result::Result<Option<&'static str>, String> {
    let env: Vec<(&str, String)> = match kill {
        Some((Kill::Gateway(p), _)) => vec![("EXACTLY_FAULT", format!("{p}:pause={HOLD_SECS}s"))],
        Some((Kill::ServerAfterRequestLeft | Kill::BothAfterRequestLeft, _)) => {
            vec![(HOLD_ENV, HOLD_SECS.to_string())]
        }
        _ => Vec::new(),
    };
    let (proc, mut err) = gateway(s, &env).map_err(|e| e.to_string())?;
    let pid = proc.id().ok_or("the gateway has no pid")?;
    let client = tokio::time::timeout(ATTEMPT, ().serve(proc))
        .await
        .map_err(|_| "the gateway did not initialise in time".to_string())?
        .map_err(|e| format!("the gateway did not initialise: {e}"))?;
    let peer = client.peer().clone();
    let p = params(s, i, key);
    let call = tokio::spawn(async move { peer.call_tool(p).await });
    let marker = |m: String| async move {
        let until = tokio::time::Instant::now() + ATTEMPT;
        while let Ok(Some(l)) = tokio::time::timeout_at(until, err.recv()).await {
            if l.contains(&m) {
                return true;
            }
        }
        false
    };
    let killed = match kill {
        Some((Kill::Gateway(p), _)) => {
            if marker(format!("exactly-fault: {p}")).await {
                sigkill(pid);
                Some(p)
            } else {
                None
            }
        }
        Some((k @ (Kill::ServerAfterRequestLeft | Kill::BothAfterRequestLeft), _)) => {
            if marker(SENT_MARKER.to_string()).await {
                for c in children(pid) {
                    sigkill(c);
                }
                if matches!(k, Kill::BothAfterRequestLeft) {
                    sigkill(pid);
                    Some("server_and_gateway_after_request_left")
                } else {
                    Some("server_after_request_left")
                }
            } else {
                None
            }
        }
        Some((Kill::Random, after)) => {
            tokio::time::sleep(after).await;
            sigkill(pid);
            Some("random")
        }
        None => None,
    };
    // The call ends one way or another: answered (`unknown` after the server died), or cut.
    let _ = tokio::time::timeout(ATTEMPT, call).await;
    let _ = client.cancel().await;
    Ok(killed)
}

//! The far side: a separate process that receives effects over a Unix socket and records every
//! request it gets. By default it never deduplicates (that would hide the duplicates the harness
//! counts), answers "did key K arrive?" for the observer, and can be told to act but drop its
//! answer. A far side a user owns can do better, and the `pause` scenario shows what that buys:
//! with `dedupe` it acts on an effect key once (a repeat is answered as if delivered), with
//! `fence` it refuses a fencing token lower than the highest it has seen for the job. Every
//! request is still counted, so what the sender side did without such a far side stays visible.
//!
//! Protocol, one line each way:
//! - `SEND <key> <tag> [dedupe] [fence=<job>:<token>]` → `OK <n>` (n: arrivals of key so far),
//!   `FENCED <highest>`, or no answer under a rule;
//! - `SEEN <key>` → `YES <n>` | `NO` | `ERR <why>`;
//! - `RULE <key> drop-answer|lose-request|flaky-seen [n]` → `OK` (each rule is used up once);
//! - `DUMP` → `<key> <arrivals> <requests> <refused>` lines, then `END`; `QUIT` → `OK`, and the
//!   server exits.
use super::far_client::request;
use crate::sanitize::inert;
use crate::{Error, Result};
use clap::{Args, Subcommand};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The test double the chaos harness sends effects to (hidden: not for users).
#[derive(Subcommand, Debug)]
pub(crate) enum FarSideCmd {
    /// Listen on a Unix socket and record every request.
    Serve {
        #[arg(long)]
        socket: PathBuf,
        /// Act on each effect key once; a repeat is answered as if delivered.
        #[arg(long)]
        dedupe: bool,
        /// Refuse a fencing token lower than the highest seen for its job.
        #[arg(long)]
        fence: bool,
    },
    /// Send the effect `$EXACTLY_EFFECT_KEY`: exit 0 answered, 1 no answer (it may have
    /// arrived), 75 the far side was unreachable (nothing sent).
    Send(SendArgs),
    /// Serve the far side as an MCP server on stdio (`send_message`, `seen`).
    Mcp {
        #[arg(long)]
        socket: PathBuf,
    },
    /// The observer: exit 0 if `$EXACTLY_EFFECT_KEY` arrived, 1 if not, 2 if it can't tell.
    Seen {
        #[arg(long)]
        socket: PathBuf,
        /// Ask at once, answer only after this long (a slow API: the answer describes the far
        /// side as it was when asked).
        #[arg(long, default_value = "0ms")]
        answer_after: String,
    },
}

#[derive(Args, Debug)]
pub(crate) struct SendArgs {
    #[arg(long)]
    pub socket: PathBuf,
    /// Who sent it (recorded, for reading the far side's log).
    #[arg(long, default_value = "-")]
    pub tag: String,
    /// How long to wait for the answer.
    #[arg(long, default_value = "2s")]
    pub timeout: String,
    /// Sleep before connecting (widens the window for kills at random moments).
    #[arg(long, default_value = "0ms")]
    pub hold_before: String,
    /// Sleep after the request left, before reading the answer.
    #[arg(long, default_value = "0ms")]
    pub hold_after: String,
    /// Ask the far side to act on this key only once (an Idempotency-Key).
    #[arg(long)]
    pub dedupe: bool,
    /// Send `$EXACTLY_JOB` and `$EXACTLY_FENCING_TOKEN`: the far side refuses a lower token.
    #[arg(long)]
    pub fence: bool,
}

/// Marker the send client prints on stderr once its request has left.
pub(crate) const SENT_MARKER: &str = "far-side: sent";
/// Marker the send client prints on stderr as it starts, before anything leaves.
pub(crate) const START_MARKER: &str = "far-side: start";

/// Fault points the unguarded self-check's client honours, so the same kill schedule applies
/// when no `exactly effect` wraps it (`EXACTLY_FAULT` is left to the real code path).
pub(crate) const CLIENT_FAULT_ENV: &str = "EXACTLY_CHAOS_FAULT";

pub(crate) fn far_side_main(cmd: FarSideCmd) -> Result<i32> {
    match cmd {
        FarSideCmd::Serve {
            socket,
            dedupe,
            fence,
        } => serve(&socket, Modes { dedupe, fence }),
        FarSideCmd::Send(a) => send(&a),
        FarSideCmd::Mcp { socket } => super::mcp_far::serve(socket),
        FarSideCmd::Seen {
            socket,
            answer_after,
        } => seen(&socket, crate::time::parse_duration(&answer_after)?),
    }
}

fn effect_key_env() -> Result<String> {
    std::env::var("EXACTLY_EFFECT_KEY")
        .ok()
        .filter(|k| !k.is_empty() && !k.contains(char::is_whitespace))
        .ok_or_else(|| Error::Usage("EXACTLY_EFFECT_KEY is not set to an effect key".into()))
}

/// `<job>:<token>` from the environment `exactly effect` gives its command.
fn fence_env() -> Result<String> {
    let job = std::env::var("EXACTLY_JOB").unwrap_or_default();
    let token = std::env::var("EXACTLY_FENCING_TOKEN").unwrap_or_default();
    if job.is_empty() || job.contains(char::is_whitespace) || token.parse::<i64>().is_err() {
        return Err(Error::Usage(
            "--fence needs EXACTLY_JOB and EXACTLY_FENCING_TOKEN (set by exactly effect)".into(),
        ));
    }
    Ok(format!("{job}:{token}"))
}

fn client_fault(name: &str) {
    crate::fault::point_of(CLIENT_FAULT_ENV, name);
}

fn send(a: &SendArgs) -> Result<i32> {
    let key = effect_key_env()?;
    let timeout = crate::time::parse_duration(&a.timeout)?;
    let before = crate::time::parse_duration(&a.hold_before)?;
    let after = crate::time::parse_duration(&a.hold_after)?;
    let tag: String = a.tag.chars().filter(|c| !c.is_whitespace()).collect();
    let mut extra = String::new();
    if a.dedupe {
        extra.push_str(" dedupe");
    }
    if a.fence {
        extra.push_str(&format!(" fence={}", fence_env()?));
    }
    eprintln!("{START_MARKER}");
    client_fault("after_claim");
    client_fault("after_submitted");
    std::thread::sleep(before);
    let mut conn = match UnixStream::connect(&a.socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("far-side: unreachable ({e}); nothing sent");
            return Ok(75);
        }
    };
    if let Err(e) = conn.write_all(format!("SEND {key} {tag}{extra}\n").as_bytes()) {
        // A partial write may still have reached the far side: we cannot promise nothing left.
        eprintln!("far-side: send failed ({e})");
        return Ok(1);
    }
    eprintln!("{SENT_MARKER}");
    std::thread::sleep(after);
    conn.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let mut line = String::new();
    match BufReader::new(&conn).read_line(&mut line) {
        Ok(n) if n > 0 && line.starts_with("OK") => {
            println!("far-side receipt {}", line.trim_start_matches("OK").trim());
            client_fault("after_send");
            client_fault("after_done");
            Ok(0)
        }
        Ok(n) if n > 0 && line.starts_with("FENCED") => {
            // Refused, not acted on: nothing was sent, as exit 75 promises.
            eprintln!(
                "far-side: refused, a newer token was seen ({})",
                line.trim()
            );
            Ok(75)
        }
        Ok(_) => {
            eprintln!("far-side: connection closed without an answer");
            Ok(1)
        }
        Err(e) => {
            eprintln!("far-side: no answer within {:?} ({e})", timeout);
            Ok(1)
        }
    }
}

fn seen(socket: &Path, answer_after: Duration) -> Result<i32> {
    let key = effect_key_env()?;
    let answer = request(socket, &format!("SEEN {key}"));
    std::thread::sleep(answer_after);
    match answer {
        Ok(r) if r.starts_with("YES") => {
            println!("far-side has it ({})", r.trim_start_matches("YES").trim());
            Ok(0)
        }
        Ok(r) if r == "NO" => Ok(1),
        Ok(r) => {
            eprintln!("far-side: cannot tell ({})", inert(&r));
            Ok(2)
        }
        Err(e) => {
            eprintln!("far-side: cannot tell ({e})");
            Ok(2)
        }
    }
}

/// What the far side does beyond recording: set for every request by `serve`'s flags, or per
/// request by the client's.
#[derive(Debug, Clone, Copy, Default)]
struct Modes {
    dedupe: bool,
    fence: bool,
}

#[derive(Default)]
struct State {
    /// Requests acted on, per key (a deduplicated or fenced request is not one).
    arrivals: BTreeMap<String, u64>,
    /// Every complete SEND, acted on or refused.
    requests: BTreeMap<String, u64>,
    /// Requests refused by dedupe or fencing.
    refused: BTreeMap<String, u64>,
    /// The highest fencing token seen per job.
    fence_high: HashMap<String, i64>,
    drop_answer: HashMap<String, u32>,
    lose_request: HashMap<String, u32>,
    flaky_seen: HashMap<String, u32>,
}

fn take(rules: &mut HashMap<String, u32>, key: &str) -> bool {
    match rules.get_mut(key) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}

/// Holds a connection open without answering until the client gives up, as a far side that
/// acted and then lost its answer would.
fn hold(conn: UnixStream) {
    std::thread::spawn(move || {
        let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
        let _ = (&conn).read_to_end(&mut Vec::new());
    });
}

/// Serves on one thread, one connection at a time, in the order clients connected: a request
/// written before its sender died is recorded before any later observer's question is answered,
/// as a far side with a durable inbox would.
fn serve(socket: &Path, modes: Modes) -> Result<i32> {
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket).map_err(|e| {
        let at = inert(&socket.display().to_string());
        Error::io(format!("cannot listen on {at}: {e}"), e)
    })?;
    println!("ready");
    std::io::stdout().flush()?;
    let mut st = State::default();
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        let mut line = String::new();
        let Ok(reader) = conn.try_clone() else {
            continue;
        };
        if BufReader::new(reader).read_line(&mut line).is_err() || !line.ends_with('\n') {
            continue; // the sender died before its request was complete: nothing arrived
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["SEND", key, rest @ ..] => match st.send(modes, key, rest) {
                Answer::Hold => {
                    hold(conn);
                    continue;
                }
                Answer::Say(reply) => reply,
            },
            ["SEEN", key] => {
                if take(&mut st.flaky_seen, key) {
                    "ERR the far side's lookup is unavailable".to_string()
                } else {
                    match st.arrivals.get(*key) {
                        Some(n) => format!("YES {n}"),
                        None => "NO".to_string(),
                    }
                }
            }
            ["RULE", key, kind, rest @ ..] => st.rule(key, kind, rest.first()),
            ["DUMP"] => st.dump(),
            ["QUIT"] => {
                let _ = conn.write_all(b"OK\n");
                let _ = std::fs::remove_file(socket);
                return Ok(0);
            }
            _ => "ERR bad request".to_string(),
        };
        let _ = conn.write_all(format!("{reply}\n").as_bytes());
    }
    Ok(0)
}

/// What the far side does with a request: answer it, or hold the connection open and never
/// answer (a request lost on the way, or an answer that never comes back).
enum Answer {
    Hold,
    Say(String),
}

impl State {
    /// `SEND KEY [dedupe] [fence=JOB:TOKEN]`: the effect arrives, unless a rule loses it, a
    /// fence refuses a lower token, or the far side dedupes a key it already has.
    fn send(&mut self, modes: Modes, key: &str, rest: &[&str]) -> Answer {
        if take(&mut self.lose_request, key) {
            return Answer::Hold;
        }
        *self.requests.entry(key.to_string()).or_default() += 1;
        let dedupe = modes.dedupe || rest.contains(&"dedupe");
        let fence = rest
            .iter()
            .find_map(|w| w.strip_prefix("fence="))
            .and_then(|f| f.rsplit_once(':'))
            .and_then(|(job, t)| Some((job.to_string(), t.parse::<i64>().ok()?)));
        if let Some((job, token)) = fence {
            let high = self.fence_high.entry(job).or_insert(token);
            if token < *high {
                let high = *high;
                *self.refused.entry(key.to_string()).or_default() += 1;
                return Answer::Say(format!("FENCED {high}"));
            }
            *high = token;
        } else if modes.fence {
            // A fencing far side takes no request without a token.
            *self.refused.entry(key.to_string()).or_default() += 1;
            return Answer::Say("FENCED none".to_string());
        }
        if dedupe {
            if let Some(n) = self.arrivals.get(key) {
                *self.refused.entry(key.to_string()).or_default() += 1;
                return Answer::Say(format!("OK {n}"));
            }
        }
        let n = self.arrivals.entry(key.to_string()).or_default();
        *n += 1;
        let n = *n;
        if take(&mut self.drop_answer, key) {
            return Answer::Hold;
        }
        Answer::Say(format!("OK {n}"))
    }

    /// `RULE KEY KIND [N]`: the next N requests of the key meet the fault KIND.
    fn rule(&mut self, key: &str, kind: &str, n: Option<&&str>) -> String {
        let n = n.and_then(|n| n.parse().ok()).unwrap_or(1u32);
        let rules = match kind {
            "drop-answer" => Some(&mut self.drop_answer),
            "lose-request" => Some(&mut self.lose_request),
            "flaky-seen" => Some(&mut self.flaky_seen),
            _ => None,
        };
        match rules {
            Some(r) => {
                *r.entry(key.to_string()).or_default() += n;
                "OK".to_string()
            }
            None => "ERR unknown rule".to_string(),
        }
    }

    /// `DUMP`: each key's arrivals, requests and refusals, then `END`.
    fn dump(&self) -> String {
        let mut s = String::new();
        for (k, r) in &self.requests {
            let n = self.arrivals.get(k).copied().unwrap_or(0);
            let refused = self.refused.get(k).copied().unwrap_or(0);
            s.push_str(&format!("{k} {n} {r} {refused}\n"));
        }
        s.push_str("END");
        s
    }
}

/// What the far side saw of one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Requests it acted on.
    pub arrivals: u64,
    /// Requests it got, acted on or refused.
    pub requests: u64,
    /// Requests refused by dedupe or fencing.
    pub refused: u64,
}

/// The harness's handle on a running far side.
pub(crate) struct FarSide {
    pub socket: PathBuf,
    child: std::process::Child,
}

impl FarSide {
    /// Starts `exactly far-side serve` and waits until it listens.
    pub(crate) fn start(exe: &Path, socket: &Path) -> Result<FarSide> {
        let mut child = std::process::Command::new(exe)
            .args(["far-side", "serve", "--socket"])
            .arg(socket)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(|e| Error::io(format!("cannot start the far side: {e}"), e))?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            BufReader::new(out).read_line(&mut line)?;
        }
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Store("the far side did not start listening".into()));
        }
        Ok(FarSide {
            socket: socket.to_path_buf(),
            child,
        })
    }

    pub(crate) fn rule(&self, key: &str, kind: &str, n: u32) -> Result<()> {
        let r = request(&self.socket, &format!("RULE {key} {kind} {n}"))?;
        if r == "OK" {
            Ok(())
        } else {
            Err(Error::Store(format!(
                "the far side refused rule {kind}: {}",
                inert(&r)
            )))
        }
    }

    /// Every key that arrived, with how many times it was acted on.
    pub(crate) fn dump(&self) -> Result<BTreeMap<String, u64>> {
        Ok(self
            .dump_all()?
            .into_iter()
            .filter(|(_, c)| c.arrivals > 0)
            .map(|(k, c)| (k, c.arrivals))
            .collect())
    }

    /// Every key requested: how many requests were acted on, made, and refused.
    pub(crate) fn dump_all(&self) -> Result<BTreeMap<String, Counts>> {
        let mut conn = UnixStream::connect(&self.socket)?;
        conn.set_read_timeout(Some(Duration::from_secs(30)))?;
        conn.write_all(b"DUMP\n")?;
        let mut out = BTreeMap::new();
        for line in BufReader::new(&conn).lines() {
            let line = line?;
            if line == "END" {
                return Ok(out);
            }
            // A line we cannot read is an error, never a count of 0: that would hide a duplicate.
            let f: Vec<&str> = line.split(' ').collect();
            let num = |i: usize| f.get(i).and_then(|n| n.parse::<u64>().ok());
            let count = match (f.first(), num(1), num(2), num(3), f.len()) {
                (Some(k), Some(arrivals), Some(requests), Some(refused), 4) => Some((
                    k,
                    Counts {
                        arrivals,
                        requests,
                        refused,
                    },
                )),
                _ => None,
            };
            let Some((k, n)) = count else {
                return Err(Error::Store(format!(
                    "the far side's record has an unreadable line: {}",
                    inert(&line)
                )));
            };
            out.insert(k.to_string(), n);
        }
        Err(Error::Store(
            "the far side's record ended before END".into(),
        ))
    }

    /// How many times `key` arrived (0 when never).
    pub(crate) fn arrivals(&self, key: &str) -> Result<u64> {
        Ok(self.dump()?.get(key).copied().unwrap_or(0))
    }
}

impl Drop for FarSide {
    fn drop(&mut self) {
        let _ = request(&self.socket, "QUIT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

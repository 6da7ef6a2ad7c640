//! `python`: the senders are Python processes using the `exactly` module (python/), as a
//! scheduled agent written in Python is. Each iteration is one message: its first sender is
//! SIGKILLed at a named point of the library (paused there through `EXACTLY_FAULT`, which the
//! module's Rust code reads as the CLI does), inside its perform after the request left, or at
//! a random moment; restarts (new Python processes) settle it with their observer, which asks
//! the far side. Python is `$EXACTLY_CHAOS_PYTHON`, else `python3`; without the module the
//! scenario is reported as not run.
use super::harness::FOREVER;
use super::proc::{self, Running};
use super::{Eff, Harness, Tally};
use crate::Result;
use indicatif::ProgressBar;
use rand::Rng;
use std::process::Command;
use std::time::Duration;

/// The sender: argv DB JOB TOKEN ACTION TARGET RUN I SOCKET GUARDED. It sends `SEND key tag` to
/// the far side's socket in perform, and asks `SEEN key` in its observer. With
/// `EXACTLY_PY_HOLD_AFTER_SEND` it announces the sent request and waits before reading the
/// answer. Unguarded (the self-check) it sends without the ledger. Exit: the outcome's code.
const SENDER: &str = r#"
import os, socket, sys, time
import exactly
db, job, token, action, target, run, i, sock, guarded = sys.argv[1:10]

def connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(sock)
    return s

def send(key):
    try:
        s = connect()
    except OSError as e:
        raise exactly.NotSent(f"the far side is unreachable: {e}")
    s.sendall(f"SEND {key} py:{job}:{token}\n".encode())
    hold = os.environ.get("EXACTLY_PY_HOLD_AFTER_SEND")
    if hold:
        print("exactly-python: sent", file=sys.stderr, flush=True)
        time.sleep(float(hold))
    answer = s.makefile("r").readline().strip()
    if not answer.startswith("OK"):
        raise ConnectionError(f"the far side answered {answer!r}")
    return answer

def look(key):
    s = connect()
    s.sendall(f"SEEN {key}\n".encode())
    answer = s.makefile("r").readline().strip()
    if answer.startswith("YES"):
        return exactly.HAPPENED
    if answer == "NO":
        return exactly.NOT_HAPPENED
    return exactly.CANT_TELL

inputs = {"run": run, "i": i}
if guarded != "1":
    send(exactly.key(action, target, inputs))
    sys.exit(0)
store = exactly.open(db)
out = store.effect(job, int(token), action=action, target=target, inputs=inputs,
                   observe=look).run(send)
print(f"exactly-python: {out.outcome.value} {out.reason or ''}", file=sys.stderr, flush=True)
sys.exit(out.exit_code)
"#;

/// How the first sender of an iteration dies.
#[derive(Debug, Clone, Copy)]
enum Kill {
    Point(&'static str),
    /// In perform, after the request left, before the answer was read.
    AfterRequestLeft,
    Random,
}

const KILLS: &[Kill] = &[
    Kill::Point("after_claim"),
    Kill::Point("after_submitted"),
    Kill::AfterRequestLeft,
    Kill::Point("after_send"),
    Kill::Point("after_done"),
    Kill::Random,
];

/// Restarts before the effect counts as stuck.
const SETTLE_TRIES: usize = 8;
/// Long enough that the harness always kills a held sender first.
const HOLD: Duration = Duration::from_secs(60);

/// The Python that runs the senders.
fn python() -> String {
    std::env::var("EXACTLY_CHAOS_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Why the scenario cannot run here: no Python, or no module in it.
fn module_missing(py: &str) -> Option<String> {
    match Command::new(py)
        .args(["-c", "import exactly._native"])
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(_) => Some(format!(
            "the exactly Python module is not installed in {py} (pip install ./python)"
        )),
        Err(e) => Some(format!("cannot run {py}: {e}")),
    }
}

fn sender(h: &Harness, py: &str, e: &Eff) -> Command {
    let mut c = proc::command(std::path::Path::new(py));
    c.args(["-c", SENDER])
        .arg(h.db())
        .arg(&e.job)
        .arg(e.token.to_string())
        .arg(&e.action)
        .arg(&e.target)
        .arg(h.nonce())
        .arg(e.i.to_string())
        .arg(&h.far.socket)
        .arg(if h.guarded { "1" } else { "0" });
    c
}

pub(super) fn run(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let py = python();
    if let Some(why) = module_missing(&py) {
        t.not_run = Some(why);
        return Ok(());
    }
    let job = "chaos-python";
    let token = h.claim(job, "chaos", FOREVER)?;
    for i in 0..u64::from(n) {
        let e = Eff {
            job: job.into(),
            token,
            action: "send-message".into(),
            target: "dave".into(),
            i,
        };
        let kill = match KILLS[(i as usize) % KILLS.len()] {
            // Unguarded, no library code runs to pause at: kill in perform instead.
            Kill::Point(_) if !h.guarded => Kill::AfterRequestLeft,
            k => k,
        };
        let label = format!("python #{i} ({kill:?})");
        let mut first = sender(h, &py, &e);
        let (marker, point) = match kill {
            Kill::Point(p) => {
                first.env("EXACTLY_FAULT", format!("{p}:pause={}ms", HOLD.as_millis()));
                (Some(format!("exactly-fault: {p}")), p)
            }
            Kill::AfterRequestLeft => {
                first.env("EXACTLY_PY_HOLD_AFTER_SEND", HOLD.as_secs().to_string());
                (
                    Some("exactly-python: sent".to_string()),
                    "in_perform_after_send",
                )
            }
            Kill::Random => (None, "random"),
        };
        let mut r = Running::spawn(first)?;
        match marker {
            Some(m) => {
                if r.wait_marker(&m)? && r.kill() {
                    t.kill(point);
                } else {
                    t.anomaly(format!("{label}: the sender ended before reaching {m}"));
                }
            }
            None => {
                // Python's start and import take most of a sender's life: kill within it.
                let after = Duration::from_millis(h.rng.gen_range(5..150));
                std::thread::sleep(after);
                if r.kill() {
                    t.kill(point);
                }
            }
        }
        r.finish()?;
        settle(h, t, &py, &e, &label)?;
        t.intend(&h.key(&e), label);
        t.iterations += 1;
        bar.inc(1);
    }
    h.release(job, token)?;
    Ok(())
}

/// Restarts until a sender ends 0 (done now, or already done); one that never does is an
/// anomaly (the audit then also finds the effect open).
fn settle(h: &Harness, t: &mut Tally, py: &str, e: &Eff, label: &str) -> Result<()> {
    let mut codes = Vec::new();
    for n in 0..SETTLE_TRIES {
        let end = Running::spawn(sender(h, py, e))?.finish()?;
        codes.push(end.code);
        if end.code == Some(0) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20 * (n as u64 + 1)));
    }
    let shown: Vec<String> = codes
        .iter()
        .map(|c| c.map_or("signal".into(), |c| c.to_string()))
        .collect();
    t.anomaly(format!(
        "{label}: Python restarts never settled it (exits {})",
        shown.join(",")
    ));
    Ok(())
}

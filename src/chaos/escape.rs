//! A command that outlives what supervises it: the send leaves the command's process group
//! (`timeout-escape`, `setsid-escape`), the supervisors on the sender's host are stopped or
//! killed (`watchdog-stop`, `watchdog-kill`).
//!
//! Each attacked command stamps its own life into a file (the lease it was given, then
//! `date +%s.%N` every 100 ms and after its send): a command whose last stamp is later than its
//! lease's deadline plus the stop margin outlived its lease, whatever the ledger says. Where
//! every supervisor on the host is stopped or killed and another host takes over, only the far
//! side can refuse the late request: a double fault, counted apart with and without its fence.
use super::machine::{announced, group_of, retry_cmd, sender_cmd, signal, Sender};
use super::proc::Running;
use super::senders::{done, eff, settle, take_lease, SKEW};
use super::{sh_quote, Client, Eff, Harness, Tally};
use crate::{Error, Result, Token};
use indicatif::ProgressBar;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The scenarios of this file, in `SCENARIOS` order.
pub(super) const NAMES: &[&str] = &[
    "timeout-escape",
    "setsid-escape",
    "watchdog-stop",
    "watchdog-kill",
];

/// The lease an attacked sender runs under: short, so a command that outlives it shows in its
/// stamps within the iteration.
const LEASE: &str = "1500ms";
const LEASE_MS: u64 = 1500;
/// When a command that escaped sends: past its lease, the takeover (lease and skew) and the
/// retry's own send, so an escape that is not stopped delivers a duplicate.
const LATE_MS: u64 = LEASE_MS + 1500;
/// How long retries may keep answering "in flight" before the effect counts as stuck.
const SETTLE_WITHIN: Duration = Duration::from_secs(20);

pub fn run(name: &str, h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    match name {
        "timeout-escape" => escape(h, t, n, bar, name, ("timeout 30", "notify-partner")),
        "setsid-escape" => escape(h, t, n, bar, name, ("setsid", "notify-carrier")),
        "watchdog-stop" => watchdog_stop(h, t, n, bar),
        "watchdog-kill" => watchdog_kill(h, t, n, bar),
        other => Err(Error::Usage(format!("no scenario named {other}"))),
    }
}

/// Past a lease's deadline by more than this, a command's stamp shows it alive past it: the
/// stop margin (a poll and the TERM grace) and the stamps' period, with room for a loaded box.
fn margin() -> Duration {
    crate::policy::stop_margin() + Duration::from_millis(300)
}

/// A command's own record of its life.
struct Stamps {
    path: PathBuf,
}

impl Stamps {
    fn new(h: &Harness, name: &str, i: u64) -> Result<Stamps> {
        let path = h.dir.join(format!("{name}-{i}.stamps"));
        let _ = std::fs::remove_file(&path);
        Ok(Stamps { path })
    }

    /// Shell text: notes its lease, stamps every 100 ms for `ms`, sends (`$CLIENT`), stamps.
    fn send_after(&self, ms: u64) -> String {
        format!(
            "S={}; echo \"lease ${{EXACTLY_LEASE_UNTIL:-}}\" >> \"$S\"; i=0; \
             while [ $i -lt {} ]; do date +%s.%N >> \"$S\"; sleep 0.1; i=$((i+1)); done; \
             eval \"$CLIENT\"; date +%s.%N >> \"$S\"",
            sh_quote(&self.path.to_string_lossy()),
            ms / 100
        )
    }

    /// The lease's deadline and the last stamp, in seconds since the epoch.
    fn read(&self) -> (Option<f64>, Option<f64>) {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let mut lease = None;
        let mut last = None;
        for line in text.lines() {
            if let Some(until) = line.strip_prefix("lease ") {
                lease = crate::time::parse(until.trim())
                    .map(|t| t.timestamp_millis() as f64 / 1000.0)
                    .or(lease);
            } else if let Ok(s) = line.trim().parse::<f64>() {
                last = Some(last.map_or(s, |l: f64| l.max(s)));
            }
        }
        (lease, last)
    }

    /// Whether the command was alive past its deadline plus [`margin`]. A command that left no
    /// stamps, or no deadline, is an anomaly: it proves nothing either way.
    fn past_deadline(&self, t: &mut Tally, label: &str, double: bool) -> bool {
        match self.read() {
            (Some(until), Some(last)) => {
                let over = last - until;
                if over > margin().as_secs_f64() {
                    let why = if double {
                        " (a double fault: nothing on its host was left to stop it)"
                    } else {
                        ""
                    };
                    t.fail(format!(
                        "{label}: its command was alive {over:.2}s past its lease's deadline{why}"
                    ));
                    return true;
                }
                false
            }
            (None, Some(_)) => {
                t.anomaly(format!(
                    "{label}: its command was given no EXACTLY_LEASE_UNTIL"
                ));
                false
            }
            (_, None) => {
                t.anomaly(format!("{label}: its command left no stamps"));
                false
            }
        }
    }
}

/// SIGKILLs every process left with `EXACTLY_EFFECT_KEY=key` in its environment (a command,
/// an observer or what they started): nothing of an iteration outlives it. How many there were.
fn end_leftovers(key: &str) -> u64 {
    let want = format!("EXACTLY_EFFECT_KEY={key}");
    let me = std::process::id() as i32;
    let mut n = 0;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for pid in dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| *p != me)
    {
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) && signal(pid, libc::SIGKILL) {
            n += 1;
        }
    }
    n
}

/// Sleeps until `ms` after `since`.
fn until(since: Instant, ms: u64) {
    std::thread::sleep(Duration::from_millis(ms).saturating_sub(since.elapsed()));
}

/// Retries (as `make(token)` builds them) until one ends 0, for at most [`SETTLE_WITHIN`]: "in
/// flight" (5) is waited out; "fenced" (3: the sender's lease ran out meanwhile) takes the
/// lease again on the retry's host, as the next run would. The token it last used.
fn settle_taking(
    h: &Harness,
    t: &mut Tally,
    label: &str,
    job: &str,
    token: Token,
    mut make: impl FnMut(Token) -> Command,
) -> Result<Token> {
    let until = Instant::now() + SETTLE_WITHIN;
    let mut token = token;
    let mut codes = Vec::new();
    loop {
        let end = Running::spawn(make(token))?.finish()?;
        codes.push(end.code.map_or("signal".into(), |c| c.to_string()));
        match end.code {
            Some(0) => return Ok(token),
            Some(3) => {
                if let Some(tb) = take_lease(h, job, "1h", 0, SKEW)? {
                    token = tb;
                }
            }
            Some(5) => std::thread::sleep(Duration::from_millis(50)),
            _ => {}
        }
        if Instant::now() >= until || !matches!(end.code, Some(3) | Some(5)) {
            t.anomaly(format!(
                "{label}: retries never settled it (exits {}): {}",
                codes.join(","),
                end.last_words()
            ));
            return Ok(token);
        }
    }
}

/// Ends the iteration: what is left of it killed, its sender reaped, its stamps judged (a
/// double fault's counted in its entry), the effect intended once.
#[allow(clippy::too_many_arguments)]
fn finish(
    h: &Harness,
    t: &mut Tally,
    e: &Eff,
    stamps: &Stamps,
    label: String,
    a: Running,
    bar: &ProgressBar,
    double: Option<&str>,
) -> Result<()> {
    let key = h.key(e).to_string();
    end_leftovers(&key);
    a.finish()?;
    let past = stamps.past_deadline(t, &label, double.is_some());
    match double {
        Some(name) => {
            let d = t.double_faults.entry(name.to_string()).or_default();
            d.iterations += 1;
            d.alive_past_deadline += u64::from(past);
            t.double_keys.insert(key, name.to_string());
        }
        None => t.alive_past_deadline += u64::from(past),
    }
    done(t, h, e, label, bar);
    Ok(())
}

/// `timeout-escape`, `setsid-escape`: the send runs under `timeout 30 sh -c …` (which puts
/// itself in a process group of its own) or `setsid sh -c …` (a session of its own), so the
/// watchdog's group stop misses it. `exactly effect` alone is SIGKILLed mid-send (its
/// watchdog left to do what it does when it dies); the retry on this host, with an observer,
/// settles the effect. The escaped send must never deliver after it, nor outlive the lease.
fn escape(
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
    name: &str,
    (how, action): (&str, &str),
) -> Result<()> {
    let job = format!("chaos-{name}");
    for i in 0..u64::from(n) {
        let label = format!("{name} #{i}");
        let Some(ta) = take_lease(h, &job, LEASE, 0, SKEW)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        // An action of its own: the effect key does not name the job.
        let e = eff(&job, ta, action, i);
        let stamps = Stamps::new(h, name, i)?;
        let body = format!(
            "export CLIENT; {how} sh -c {}",
            sh_quote(&stamps.send_after(LATE_MS))
        );
        let s = Sender {
            body: &body,
            host: &crate::host(),
            skew_ms: 0,
            max_skew: SKEW,
            client: Client::quick(),
        };
        let mut a = Running::spawn(sender_cmd(h, &e, &s))?;
        let started = Instant::now();
        if announced(&mut a, t, &label)?.is_some() {
            std::thread::sleep(h.ms(150, 400));
            if a.kill() {
                t.kill("effect_sigkill");
            }
        }
        // Reaped, not finished: the escaped send holds its stderr open.
        a.reap()?;
        let host = crate::host();
        let last = settle_taking(h, t, &label, &job, ta, |token| {
            let b = Eff { token, ..e.clone() };
            retry_cmd(h, &b, &host, 0, SKEW, &Client::quick())
        })?;
        // Past the escaped send: had it lived on, it has delivered by now.
        until(started, LATE_MS + 600);
        h.release(&job, last)?;
        finish(h, t, &e, &stamps, label, a, bar, None)?;
    }
    Ok(())
}

/// The client of a double fault: fencing when `--fence` says the far side fences.
fn double_client(t: &Tally) -> Client {
    Client {
        fence: t.fenced,
        ..Client::quick()
    }
}

/// The watchdog leading the command's group is SIGSTOPped, then `exactly effect`: every
/// supervisor on the host is stopped while the command runs on. Another host takes over after
/// the lease and the skew and sends; the command sends late. Nothing on the host can stop it:
/// a double fault, which only the far side's fence (`--fence`) refuses.
fn watchdog_stop(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let name = "watchdog-stop";
    let job = "chaos-watchdog-stop";
    let client = double_client(t);
    for i in 0..u64::from(n) {
        let label = format!("{name} #{i}");
        let Some(ta) = take_lease(h, job, LEASE, 0, SKEW)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        let e = eff(job, ta, "pay-supplier", i);
        let stamps = Stamps::new(h, name, i)?;
        let body = stamps.send_after(LATE_MS);
        let s = Sender {
            body: &body,
            host: "chaos-wd-a",
            skew_ms: 0,
            max_skew: SKEW,
            client,
        };
        let mut a = Running::spawn(sender_cmd(h, &e, &s))?;
        let started = Instant::now();
        let mut stopped = Vec::new();
        if let Some((sh, effect)) = announced(&mut a, t, &label)? {
            std::thread::sleep(h.ms(100, 300));
            // The watchdog first: stopped, it cannot end the group when `exactly effect` stops.
            if let Some(g) = group_of(sh) {
                if signal(g, libc::SIGSTOP) {
                    stopped.push(g);
                    t.stop("watchdog_sigstop");
                }
            }
            let effect = if h.guarded { effect } else { sh };
            if signal(effect, libc::SIGSTOP) {
                stopped.push(effect);
                t.stop("effect_sigstop");
            }
        }
        let taken = take_lease(h, job, "1h", 0, SKEW)?;
        if let Some(tb) = taken {
            let b = Eff {
                token: tb,
                ..e.clone()
            };
            settle(t, &label, || {
                retry_cmd(h, &b, "chaos-wd-b", 0, SKEW, &client)
            })?;
            // Past the command's late send, then the host wakes up.
            until(started, LATE_MS + 600);
        }
        for p in &stopped {
            signal(*p, libc::SIGCONT);
        }
        match taken {
            Some(tb) => {
                h.release(job, tb)?;
            }
            None => t.anomaly(format!("{label}: the other host never got the lease")),
        }
        finish(h, t, &e, &stamps, label, a, bar, Some(name))?;
    }
    Ok(())
}

/// The watchdog and `exactly effect` are both SIGKILLed mid-send while the command's send goes
/// on in a child: gone from the command's group through `setsid` (`% 3 == 0`) or left in it
/// (`% 3 == 2`), and the retry on this host must end it before it sends; or (`% 3 == 1`)
/// another host takes over, which cannot reach this host's processes: a double fault, which
/// only the far side's fence (`--fence`) refuses.
fn watchdog_kill(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let name = "watchdog-kill";
    let job = "chaos-watchdog-kill";
    for i in 0..u64::from(n) {
        let variant = i % 3;
        let takeover = variant == 1;
        let label = format!(
            "{name} #{i} ({})",
            match variant {
                0 => "child in a session of its own, retry on this host",
                1 => "child in the group, another host takes over",
                _ => "child in the group, retry on this host",
            }
        );
        let client = if takeover {
            double_client(t)
        } else {
            Client::quick()
        };
        let Some(ta) = take_lease(h, job, LEASE, 0, SKEW)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        let e = eff(job, ta, "ship-parcel", i);
        let stamps = Stamps::new(h, name, i)?;
        let send = stamps.send_after(LATE_MS);
        let body = if variant == 0 {
            format!("export CLIENT; setsid sh -c {} & wait", sh_quote(&send))
        } else {
            format!("({send}) & wait")
        };
        let host = if takeover {
            "chaos-wk-a".to_string()
        } else {
            crate::host()
        };
        let s = Sender {
            body: &body,
            host: &host,
            skew_ms: 0,
            max_skew: SKEW,
            client,
        };
        let mut a = Running::spawn(sender_cmd(h, &e, &s))?;
        let started = Instant::now();
        if let Some((sh, _)) = announced(&mut a, t, &label)? {
            std::thread::sleep(h.ms(150, 400));
            // The watchdog first, so it cannot end the group when `exactly effect` dies.
            if let Some(g) = group_of(sh) {
                if signal(g, libc::SIGKILL) {
                    t.kill("watchdog_sigkill");
                }
            }
            if a.kill() {
                t.kill("effect_sigkill");
            }
        }
        a.reap()?;
        if takeover {
            match take_lease(h, job, "1h", 0, SKEW)? {
                Some(tb) => {
                    let b = Eff {
                        token: tb,
                        ..e.clone()
                    };
                    settle(t, &label, || {
                        retry_cmd(h, &b, "chaos-wk-b", 0, SKEW, &client)
                    })?;
                    until(started, LATE_MS + 600);
                    h.release(job, tb)?;
                }
                None => t.anomaly(format!("{label}: the other host never got the lease")),
            }
        } else {
            let last = settle_taking(h, t, &label, job, ta, |token| {
                let b = Eff { token, ..e.clone() };
                retry_cmd(h, &b, &host, 0, SKEW, &client)
            })?;
            until(started, LATE_MS + 600);
            h.release(job, last)?;
        }
        let double = takeover.then_some(name);
        finish(h, t, &e, &stamps, label, a, bar, double)?;
    }
    Ok(())
}

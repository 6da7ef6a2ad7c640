//! A command that outlives what supervises it: the send leaves the command's process group
//! (`timeout-escape`, `setsid-escape`), the supervisors on the sender's host are stopped or
//! killed (`watchdog-stop`, `watchdog-kill`), the retry cannot see the sender's processes
//! (`hidepid`), an observer's child holds its stdout (`observer-escape`); the scheduler's spawner
//! frozen while a command ends (`spawner-freeze`) is in `freeze.rs`.
//!
//! Each attacked command stamps its own life into a file (the lease it was given, then
//! `date +%s.%N` every 100 ms and after its send): a command whose last stamp is later than its
//! lease's deadline plus the stop margin outlived its lease, whatever the ledger says. Where
//! every supervisor on the host is stopped or killed and another host takes over, only the far
//! side can refuse the late request: a double fault, counted apart with and without its fence.
use super::machine::{
    announced, as_user, group_of, retry_cmd, root_missing, sender_cmd, share, signal,
    users_missing, Sender,
};
use super::proc::{until, Running};
use super::senders::{done, eff, not_run, settle, take_lease, SKEW};
use super::{sh_quote, Client, Eff, Harness, Tally};
use crate::{Error, Result, Token};
use indicatif::ProgressBar;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The scenarios of this file, in `SCENARIOS` order.
pub(super) const NAMES: &[&str] = &[
    "timeout-escape",
    "setsid-escape",
    "watchdog-stop",
    "watchdog-kill",
    "spawner-freeze",
    "hidepid",
    "observer-escape",
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
/// `observer-escape`'s `--observe-timeout`, and how much longer than it a retry may take.
const OBSERVE_TIMEOUT_MS: u64 = 2000;
const RETRY_SLACK_MS: u64 = 3000;

pub(super) fn run(
    name: &str,
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
) -> Result<()> {
    match name {
        "timeout-escape" => escape(h, t, n, bar, name, ("timeout 30", "notify-partner")),
        "setsid-escape" => escape(h, t, n, bar, name, ("setsid", "notify-carrier")),
        "watchdog-stop" => watchdog_stop(h, t, n, bar),
        "watchdog-kill" => watchdog_kill(h, t, n, bar),
        "spawner-freeze" => super::freeze::spawner_freeze(h, t, n, bar),
        "hidepid" => match root_missing()
            .or_else(|| users_missing(h))
            .or_else(hidepid_missing)
        {
            Some(why) => not_run(t, why),
            None => hidepid(h, t, n, bar),
        },
        "observer-escape" => observer_escape(h, t, n, bar),
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

    /// Waits until the command has stamped once, so a kill lands while it runs (a kill before
    /// would leave nothing to judge); false, an anomaly, when it never does.
    fn started(&self, t: &mut Tally, label: &str) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if self.read().1.is_some() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        t.anomaly(format!("{label}: its command never stamped"));
        false
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
        if announced(&mut a, t, &label)?.is_some() && stamps.started(t, &label) {
            std::thread::sleep(h.ms(50, 300));
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
        let pids = announced(&mut a, t, &label)?.filter(|_| stamps.started(t, &label));
        if let Some((sh, effect)) = pids {
            std::thread::sleep(h.ms(50, 300));
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
        let pids = announced(&mut a, t, &label)?.filter(|_| stamps.started(t, &label));
        if let Some((sh, _)) = pids {
            std::thread::sleep(h.ms(50, 300));
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

/// Why `hidepid=2` cannot be tried here: a private mount namespace with its own /proc, where
/// `daemon` must not see pid 1.
fn hidepid_missing() -> Option<String> {
    let mut c = hidden(&as_user("daemon", &{
        let mut c = Command::new("sh");
        c.args(["-c", "test ! -e /proc/1/stat"]);
        c
    }));
    c.stdout(Stdio::null()).stderr(Stdio::null());
    let ok = c.status().is_ok_and(|s| s.success());
    (!ok).then(|| {
        "unshare --mount with a /proc mounted hidepid=2 does not hide other users' \
         processes here"
            .to_string()
    })
}

/// `cmd` in a mount namespace of its own whose /proc is mounted `hidepid=2`: a user sees only
/// its own processes there.
fn hidden(cmd: &Command) -> Command {
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "mount -t proc -o hidepid=2 proc /proc && exec \"$@\"",
        "sh",
    ])
    .arg(cmd.get_program())
    .args(cmd.get_args())
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// As root, under a /proc mounted `hidepid=2` in a private mount namespace: the sender runs as
/// `nobody`, the retry as `daemon`, which cannot see the sender's processes. The sender is alive
/// and sending (even iterations), or (odd) `exactly effect` is SIGKILLed while its command,
/// in a session of its own, lives on and sends within its lease. A retry that cannot see a
/// sender must not take it for gone: it answers "in flight" until the sender's deadline, never
/// sends before.
fn hidepid(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let name = "hidepid";
    let job = "chaos-hidepid";
    // Sends well inside its lease, so it is done by the deadline the retry waits for.
    let sends_ms = 1200;
    share(h)?;
    for i in 0..u64::from(n) {
        let killed = i % 2 == 1;
        let label = format!(
            "{name} #{i} ({})",
            if killed {
                "exactly effect killed, its command sending"
            } else {
                "sender alive and sending"
            }
        );
        let Some(ta) = take_lease(h, job, "2500ms", 0, SKEW)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        let e = eff(job, ta, "file-return", i);
        let stamps = Stamps::new(h, name, i)?;
        let send = stamps.send_after(sends_ms);
        // Killed, `exactly effect`'s watchdog ends the command's group: what lives on has left
        // it. (A stopped watchdog would not do: the kernel wakes an orphaned group's stopped
        // members with SIGHUP and SIGCONT as their parent dies.)
        let body = if killed {
            format!("export CLIENT; setsid sh -c {} & wait", sh_quote(&send))
        } else {
            send
        };
        let s = Sender {
            body: &body,
            host: &crate::host(),
            skew_ms: 0,
            max_skew: SKEW,
            client: Client::quick(),
        };
        let mut a = Running::spawn(hidden(&as_user("nobody", &sender_cmd(h, &e, &s))))?;
        let started = Instant::now();
        let pids = announced(&mut a, t, &label)?;
        share(h)?;
        if let (true, Some((_, effect))) = (killed, pids) {
            stamps.started(t, &label);
            std::thread::sleep(h.ms(50, 200));
            if h.guarded && signal(effect, libc::SIGKILL) {
                t.kill("effect_sigkill");
            }
        }
        let host = crate::host();
        let last = settle_taking(h, t, &label, job, ta, |token| {
            let b = Eff { token, ..e.clone() };
            hidden(&as_user(
                "daemon",
                &retry_cmd(h, &b, &host, 0, SKEW, &Client::quick()),
            ))
        })?;
        until(started, sends_ms + 1000);
        a.reap()?;
        h.release(job, last)?;
        finish(h, t, &e, &stamps, label, a, bar, None)?;
    }
    Ok(())
}

/// The sender is SIGKILLed before its request leaves, so the retry must ask the observer. The
/// observer answers at once but leaves `setsid sleep 20` holding its stdout; with
/// `--observe-timeout 2s` the retry must be done within that and a few seconds: a longer wait
/// is an anomaly.
fn observer_escape(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let name = "observer-escape";
    let job = "chaos-observer-escape";
    let observe = format!("{}; rc=$?; setsid sleep 20 & exit $rc", h.observe_cmd());
    for i in 0..u64::from(n) {
        let label = format!("{name} #{i}");
        let Some(ta) = take_lease(h, job, LEASE, 0, SKEW)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        let e = eff(job, ta, "refund-order", i);
        let stamps = Stamps::new(h, name, i)?;
        let body = stamps.send_after(600);
        let s = Sender {
            body: &body,
            host: &crate::host(),
            skew_ms: 0,
            max_skew: SKEW,
            client: Client::quick(),
        };
        let mut a = Running::spawn(sender_cmd(h, &e, &s))?;
        if announced(&mut a, t, &label)?.is_some() && stamps.started(t, &label) {
            std::thread::sleep(h.ms(50, 250));
            if a.kill() {
                t.kill("effect_sigkill");
            }
        }
        a.reap()?;
        let host = crate::host();
        let retry = |token: Token| {
            let b = Eff { token, ..e.clone() };
            let mut c = retry_cmd(h, &b, &host, 0, SKEW, &Client::quick());
            if h.guarded {
                c = observed(h, &b, &observe, &host);
            }
            c
        };
        // The first retry's time, to its exit (its stderr may stay open in the escaped child).
        let t0 = Instant::now();
        let mut r = Running::spawn(retry(ta))?;
        r.wait_for(Duration::from_millis(OBSERVE_TIMEOUT_MS + 25_000));
        let took = t0.elapsed().as_millis() as u64;
        r.kill();
        r.reap()?;
        t.longest_retry_ms = t.longest_retry_ms.max(took);
        if took > OBSERVE_TIMEOUT_MS + RETRY_SLACK_MS {
            t.anomaly(format!(
                "{label}: the retry took {:.1}s with --observe-timeout {}s",
                took as f64 / 1000.0,
                OBSERVE_TIMEOUT_MS / 1000
            ));
        }
        end_leftovers(h.key(&e).as_ref());
        let _ = r.finish();
        let last = settle_taking(h, t, &label, job, ta, retry)?;
        h.release(job, last)?;
        finish(h, t, &e, &stamps, label, a, bar, None)?;
    }
    Ok(())
}

/// A retry whose observer is `observe`, bounded by `--observe-timeout`.
fn observed(h: &Harness, e: &Eff, observe: &str, host: &str) -> Command {
    let tag = format!("{}:{}", e.job, e.token);
    let mut c = h.exe_command();
    c.args(h.effect_args(e, observe))
        .args([
            "--observe-timeout",
            &format!("{OBSERVE_TIMEOUT_MS}ms"),
            "--",
        ])
        .args(h.client_argv(&tag, &Client::quick()))
        .env("EXACTLY_HOST", host)
        .env("EXACTLY_MAX_SKEW", SKEW);
    c
}

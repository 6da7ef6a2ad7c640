//! The sender's own faults, as real machines have them: a send script whose request runs in a
//! child (`grandchild`), a sender and a retry of two users (`other-user`), a lease watch that
//! cannot read (`watcher-stall`), a takeover on a skewed clock while the stopped command still
//! sends in its TERM grace (`takeover-skew`), two machines with one `EXACTLY_HOST`
//! (`host-clash`), a dead sender's pid taken by another process (`pid-reuse`), and the whole
//! sender paused past its lease (`pause`, which only the far side's dedupe or fencing stops).
//!
//! Each attempt is the real `exactly effect` wrapping `sh -c SCRIPT`; the script announces its
//! pid and its parent's on stderr, then sends through the far-side client. The attacks are real
//! signals. Those that need root (another user, a pid namespace, `ns_last_pid`) are reported as
//! not run without it.
use super::harness::FOREVER;
use super::machine::{
    announced, as_user, backends_of, group_of, retry_cmd, root_missing, sender_cmd, share, signal,
    squat, unshare_missing, users_missing, Sender,
};
use super::proc::{self, Running};
use super::{Client, Eff, Harness, Tally};
use crate::{Error, Result};
use indicatif::ProgressBar;
use rand::Rng;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `EXACTLY_MAX_SKEW` these scenarios run under, so a takeover waits a lease and not seconds:
/// `takeover-skew` uses [`TAKEOVER_SKEW`] and puts the clocks that far apart.
pub(super) const SKEW: &str = "300ms";
pub(super) const SKEW_MS: u64 = 300;
/// The configured `EXACTLY_MAX_SKEW` of `takeover-skew`, and how far apart its clocks go.
const TAKEOVER_SKEW_MS: i64 = 1000;
/// The short lease a sender runs under when another host is to take over after it.
const LEASE: &str = "700ms";
const LEASE_MS: u64 = 700;
/// How long retries may keep answering "in flight" before the effect counts as stuck.
const SETTLE_WITHIN: Duration = Duration::from_secs(20);
/// How long a takeover may wait for the lease.
const CLAIM_WITHIN: Duration = Duration::from_secs(20);

pub(super) fn run(
    name: &str,
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
) -> Result<()> {
    match name {
        "grandchild" => grandchild(h, t, n, bar),
        "other-user" => match root_missing().or_else(|| users_missing(h)) {
            Some(why) => not_run(t, why),
            None => other_user(h, t, n, bar),
        },
        "watcher-stall" => watcher_stall(h, t, n, bar),
        "takeover-skew" => takeover_skew(h, t, n, bar),
        "host-clash" => match root_missing().or_else(unshare_missing) {
            Some(why) => not_run(t, why),
            None => host_clash(h, t, n, bar),
        },
        "pid-reuse" => match root_missing() {
            Some(why) => not_run(t, why),
            None => pid_reuse(h, t, n, bar),
        },
        "pause" => pause(h, t, n, bar),
        other => Err(Error::Usage(format!("no scenario named {other}"))),
    }
}

pub(super) fn not_run(t: &mut Tally, why: String) -> Result<()> {
    t.not_run = Some(why);
    Ok(())
}

/// Runs `make()` until it ends 0 (done, or done already) while it answers "in flight" (5) or
/// fenced (3), for at most [`SETTLE_WITHIN`]; an effect never settled is an anomaly.
pub(super) fn settle(t: &mut Tally, label: &str, mut make: impl FnMut() -> Command) -> Result<()> {
    let until = Instant::now() + SETTLE_WITHIN;
    let mut codes = Vec::new();
    loop {
        let end = Running::spawn(make())?.finish()?;
        codes.push(end.code);
        if end.code == Some(0) {
            return Ok(());
        }
        if Instant::now() >= until || !matches!(end.code, Some(5) | Some(3)) {
            let shown: Vec<String> = codes
                .iter()
                .map(|c| c.map_or("signal".into(), |c| c.to_string()))
                .collect();
            t.anomaly(format!(
                "{label}: retries never settled it (exits {}): {}",
                shown.join(","),
                end.last_words()
            ));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `exactly lease claim` on `skew_ms`'s clock under `max_skew`, until it wins (None after
/// [`CLAIM_WITHIN`]): a takeover as soon as the lease is free.
pub(super) fn take_lease(
    h: &Harness,
    job: &str,
    dur: &str,
    skew_ms: i64,
    max_skew: &str,
) -> Result<Option<crate::Token>> {
    let until = Instant::now() + CLAIM_WITHIN;
    loop {
        let out = h
            .skewed(skew_ms)
            .arg("--db")
            .arg(h.db())
            .args(["lease", "claim", "--job", job, "--for", dur])
            .env("EXACTLY_MAX_SKEW", max_skew)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| Error::io(format!("cannot run lease claim: {e}"), e))?;
        if out.status.code() == Some(0) {
            return String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<i64>()
                .map(|t| Some(t.into()))
                .map_err(|e| Error::Store(format!("lease claim printed no token: {e}")));
        }
        // 3: held; anything else (a statement timed out behind a stalled server) is tried again.
        if Instant::now() >= until {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn eff(job: &str, token: crate::Token, action: &str, i: u64) -> Eff {
    Eff {
        job: job.into(),
        token,
        action: action.into(),
        target: "far".into(),
        i,
    }
}

pub(super) fn done(t: &mut Tally, h: &Harness, e: &Eff, label: String, bar: &ProgressBar) {
    t.intend(&h.key(e), label);
    t.iterations += 1;
    bar.inc(1);
}

/// The send runs in a child of the script (`(sleep; send) & wait`, as `curl` in a shell script
/// does); `exactly effect` is SIGKILLed mid-send, and on odd iterations the watchdog that leads
/// the command's group too. The retry on this host, with an observer, settles it; the child
/// must never deliver after it.
fn grandchild(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-grandchild";
    let token = h.claim(job, "chaos", FOREVER)?;
    for i in 0..u64::from(n) {
        let e = eff(job, token, "post-webhook", i);
        let later = h.ms(400, 700);
        let body = format!(
            "(sleep {:.3}; eval \"$CLIENT\") & wait",
            later.as_secs_f64()
        );
        let both = i % 2 == 1;
        let label = format!(
            "grandchild #{i} (child sends after {later:?}{})",
            if both { ", watchdog killed too" } else { "" }
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
        if let Some((sh, _)) = announced(&mut a, t, &label)? {
            std::thread::sleep(h.ms(0, 100));
            let group = if h.guarded { group_of(sh) } else { None };
            if a.kill() {
                t.kill("effect_sigkill");
            }
            if both {
                match group {
                    // The group's id is the watchdog's pid.
                    Some(g) if signal(g, libc::SIGKILL) => t.kill("watchdog_sigkill"),
                    _ => {}
                }
            }
        }
        // Its stderr may stay open in a child that outlived it: reaped, not yet finished.
        a.reap()?;
        settle(t, &label, || {
            retry_cmd(h, &e, &crate::host(), 0, SKEW, &Client::quick())
        })?;
        // Past the child's send: had it outlived the sender, it has delivered by now.
        std::thread::sleep((later + Duration::from_millis(300)).saturating_sub(started.elapsed()));
        a.finish()?;
        done(t, h, &e, label, bar);
    }
    h.release(job, token)?;
    Ok(())
}

/// The sender runs as `nobody`, the retry as `daemon` (runuser). A live sender must answer "in
/// flight" (EPERM is alive); a SIGKILLed one is gone, and the retry settles it.
fn other_user(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-other-user";
    let token = h.claim(job, "chaos", FOREVER)?;
    share(h)?;
    for i in 0..u64::from(n) {
        let e = eff(job, token, "send-invoice", i);
        let killed = i % 2 == 1;
        let sending = h.ms(500, 800);
        let body = format!("sleep {:.3}; eval \"$CLIENT\"", sending.as_secs_f64());
        let label = format!(
            "other-user #{i} ({})",
            if killed {
                "sender killed"
            } else {
                "sender alive"
            }
        );
        let s = Sender {
            body: &body,
            host: &crate::host(),
            skew_ms: 0,
            max_skew: SKEW,
            client: Client::quick(),
        };
        let mut a = Running::spawn(as_user("nobody", &sender_cmd(h, &e, &s)))?;
        let pids = announced(&mut a, t, &label)?;
        share(h)?;
        let retry = || {
            as_user(
                "daemon",
                &retry_cmd(h, &e, &crate::host(), 0, SKEW, &Client::quick()),
            )
        };
        if killed {
            // `$PPID` of the script is `exactly effect`, running as nobody.
            if let Some((_, effect)) = pids {
                if h.guarded && signal(effect, libc::SIGKILL) {
                    t.kill("effect_sigkill");
                }
            }
        } else if pids.is_some() {
            let first = Running::spawn(retry())?.finish()?;
            if first.code == Some(5) {
                t.live_senders_in_flight += 1;
            }
        }
        // Reaped, not finished: a leftover of a killed sender may hold its stderr open.
        a.reap()?;
        settle(t, &label, retry)?;
        a.finish()?;
        done(t, h, &e, label, bar);
    }
    h.release(job, token)?;
    Ok(())
}

/// The sender's lease watch cannot read while its command runs past the lease: `exactly
/// effect` itself is SIGSTOPped, or (PostgreSQL, odd iterations) the server processes serving
/// its connections are, as a partition would hang its reads. Another host takes over after the
/// lease and sends; the stalled sender's command must have been stopped at its deadline.
fn watcher_stall(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-watcher-stall";
    let pg = h.db().contains("://");
    // Longer than the lease, the skew and the takeover: an unstopped command sends after it.
    let runs = Duration::from_millis(LEASE_MS + SKEW_MS + 1200);
    for i in 0..u64::from(n) {
        let partition = pg && i % 2 == 1;
        let label = format!(
            "watcher-stall #{i} ({})",
            if partition {
                "its server processes stopped"
            } else {
                "exactly effect stopped"
            }
        );
        let Some(ta) = take_lease(h, job, LEASE, 0, SKEW)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        let e = eff(job, ta, "renew-cert", i);
        let body = format!("sleep {:.3}; eval \"$CLIENT\"", runs.as_secs_f64());
        let s = Sender {
            body: &body,
            host: "chaos-stall-a",
            skew_ms: 0,
            max_skew: SKEW,
            client: Client::quick(),
        };
        let mut a = Running::spawn(sender_cmd(h, &e, &s))?;
        let started = Instant::now();
        let mut stopped = Vec::new();
        if let Some((_, effect)) = announced(&mut a, t, &label)? {
            // Past the first read of the lease, so the watch has its connection.
            std::thread::sleep(h.ms(100, 300));
            let effect = if h.guarded { effect } else { a.pid() as i32 };
            if partition {
                for b in backends_of(h.db(), effect)? {
                    if signal(b, libc::SIGSTOP) {
                        stopped.push(b);
                    }
                }
                if stopped.is_empty() {
                    t.anomaly(format!("{label}: no server process serves the sender"));
                } else {
                    t.stop("server_processes_sigstop");
                }
            } else if signal(effect, libc::SIGSTOP) {
                stopped.push(effect);
                t.stop("effect_sigstop");
            }
        }
        // Another host, once the lease is free.
        match take_lease(h, job, "1h", 0, SKEW)? {
            Some(tb) => {
                let b = Eff {
                    token: tb,
                    ..e.clone()
                };
                settle(t, &label, || {
                    retry_cmd(h, &b, "chaos-stall-b", 0, SKEW, &Client::quick())
                })?;
                std::thread::sleep(
                    (runs + Duration::from_millis(300)).saturating_sub(started.elapsed()),
                );
                for p in &stopped {
                    signal(*p, libc::SIGCONT);
                }
                h.release(job, tb)?;
            }
            None => {
                for p in &stopped {
                    signal(*p, libc::SIGCONT);
                }
                t.anomaly(format!("{label}: the other host never got the lease"));
            }
        }
        a.finish()?;
        done(t, h, &e, label, bar);
    }
    Ok(())
}

/// Clocks apart by up to the configured `EXACTLY_MAX_SKEW` (libfaketime, as `clock-skew`): the
/// sender claims a short lease on its clock, and its command, stopped at the lease's end,
/// sends during its TERM grace; another host on its own clock takes over as soon as the lease
/// is free, and retries until it may send.
fn takeover_skew(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-takeover-skew";
    let max_skew = format!("{TAKEOVER_SKEW_MS}ms");
    for i in 0..u64::from(n) {
        let skew_a = -h.rng.gen_range(0..=TAKEOVER_SKEW_MS / 2);
        // Half the iterations put the clocks as far apart as configured.
        let skew_b = if i % 2 == 0 {
            skew_a + TAKEOVER_SKEW_MS
        } else {
            h.rng.gen_range(0..=TAKEOVER_SKEW_MS / 2)
        };
        let label = format!("takeover-skew #{i} (clocks {skew_a:+}ms and {skew_b:+}ms)");
        let Some(ta) = take_lease(h, job, "1s", skew_a, &max_skew)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        let e = eff(job, ta, "ship-order", i);
        // A request already under way when the stop comes: it goes out in the grace.
        let body = format!(
            "trap 'sleep {:.3}; eval \"$CLIENT\"; exit 1' TERM; sleep 30 & wait",
            h.ms(200, 400).as_secs_f64()
        );
        let s = Sender {
            body: &body,
            host: "chaos-skew-a",
            skew_ms: skew_a,
            max_skew: &max_skew,
            client: Client::quick(),
        };
        let mut a = Running::spawn(sender_cmd(h, &e, &s))?;
        if announced(&mut a, t, &label)?.is_none() {
            a.finish()?;
            continue;
        }
        if !h.guarded {
            // Without the guard nothing stops the command at the lease's end: the harness
            // sends its TERM, as the lease's end would.
            std::thread::sleep(Duration::from_secs(1));
            signal(a.pid() as i32, libc::SIGTERM);
        }
        match take_lease(h, job, "1h", skew_b, &max_skew)? {
            Some(tb) => {
                let b = Eff {
                    token: tb,
                    ..e.clone()
                };
                settle(t, &label, || {
                    retry_cmd(h, &b, "chaos-skew-b", skew_b, &max_skew, &Client::quick())
                })?;
                a.finish()?;
                h.release(job, tb)?;
            }
            None => {
                a.finish()?;
                t.anomaly(format!("{label}: the other host never got the lease"));
            }
        }
        done(t, h, &e, label, bar);
    }
    Ok(())
}

/// Two machines with one `EXACTLY_HOST`: the sender runs in a pid namespace of its own
/// (`unshare --pid`), its pids mean nothing here. It is SIGKILLed mid-send (even iterations) or
/// left sending until its deadline stops it (odd); the retry names the same host and must
/// judge the row by its deadline, never by a pid from the other process table.
fn host_clash(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-host-clash";
    let host = "chaos-clash";
    for i in 0..u64::from(n) {
        let killed = i % 2 == 0;
        let label = format!(
            "host-clash #{i} ({})",
            if killed {
                "sender killed mid-send"
            } else {
                "sender still sending"
            }
        );
        let Some(ta) = take_lease(h, job, LEASE, 0, SKEW)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        let e = eff(job, ta, "sync-ledger", i);
        let sending = if killed {
            h.ms(200, 400)
        } else {
            // Slow: still sending near its deadline, where the stop comes.
            h.ms(LEASE_MS - 250, LEASE_MS + 300)
        };
        let body = format!("sleep {:.3}; eval \"$CLIENT\"", sending.as_secs_f64());
        let s = Sender {
            body: &body,
            host,
            skew_ms: 0,
            max_skew: SKEW,
            client: Client::quick(),
        };
        let inner = sender_cmd(h, &e, &s);
        let mut c = proc::command(std::path::Path::new("unshare"));
        c.args(["--pid", "--fork", "--kill-child", "--mount-proc"])
            .arg(inner.get_program())
            .args(inner.get_args());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        let mut a = Running::spawn(c)?;
        if announced(&mut a, t, &label)?.is_some() && killed {
            std::thread::sleep(h.ms(0, sending.as_millis() as u64));
            // Its namespace's first process dies with unshare, and the namespace with it.
            if a.kill() {
                t.kill("other_machine_sigkill");
            }
        }
        match take_lease(h, job, "1h", 0, SKEW)? {
            Some(tb) => {
                let b = Eff {
                    token: tb,
                    ..e.clone()
                };
                settle(t, &label, || {
                    retry_cmd(h, &b, host, 0, SKEW, &Client::quick())
                })?;
                a.finish()?;
                h.release(job, tb)?;
            }
            None => {
                a.finish()?;
                t.anomaly(format!("{label}: the retry never got the lease"));
            }
        }
        if h.guarded {
            let key = h.key(&e);
            t.host_clash_events += crate::effect::events(&mut h.store, &key)?
                .iter()
                .filter(|ev| ev.kind == crate::state::EventKind::HostClash)
                .count() as u64;
        }
        done(t, h, &e, label, bar);
    }
    Ok(())
}

/// The sender is SIGKILLed mid-send and an unrelated process takes its pid: the retry must see
/// the sender gone (its start time differs), not in flight forever, and settle the effect.
fn pid_reuse(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-pid-reuse";
    let token = h.claim(job, "chaos", FOREVER)?;
    for i in 0..u64::from(n) {
        let e = eff(job, token, "close-account", i);
        let label = format!("pid-reuse #{i}");
        let sending = h.ms(300, 600);
        let body = format!("sleep {:.3}; eval \"$CLIENT\"", sending.as_secs_f64());
        let s = Sender {
            body: &body,
            host: &crate::host(),
            skew_ms: 0,
            max_skew: SKEW,
            client: Client::quick(),
        };
        let mut a = Running::spawn(sender_cmd(h, &e, &s))?;
        let pid = a.pid() as i32;
        if announced(&mut a, t, &label)?.is_some() {
            std::thread::sleep(h.ms(0, 150));
            if a.kill() {
                t.kill("effect_sigkill");
            }
        }
        // Reaped (its pid is free to take), not finished: see `grandchild`.
        a.reap()?;
        let mut squatter = squat(pid)?;
        if squatter.is_some() {
            t.pids_reused += 1;
        }
        let settled = settle(t, &label, || {
            retry_cmd(h, &e, &crate::host(), 0, SKEW, &Client::quick())
        });
        if let Some(c) = squatter.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        settled?;
        a.finish()?;
        done(t, h, &e, label, bar);
    }
    h.release(job, token)?;
    Ok(())
}

/// The whole sender (its command's group, the watchdog leading it, and `exactly effect`) is
/// SIGSTOPped before its request leaves, past its lease; another host takes over and sends,
/// then the sender is continued. Nothing on the sender's side can stop a process that is not
/// running: only a far side that dedupes by `EXACTLY_EFFECT_KEY` (even iterations) or fences
/// by `EXACTLY_FENCING_TOKEN` (odd) refuses the late request. The requests it refused are
/// counted as what a far side without either would have acted on twice.
fn pause(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-pause";
    t.far_side_guarded = true;
    for i in 0..u64::from(n) {
        let fence = i % 2 == 1;
        let label = format!(
            "pause #{i} (far side {})",
            if fence { "fences" } else { "dedupes" }
        );
        let client = Client {
            dedupe: !fence,
            fence,
            ..Client::quick()
        };
        let Some(ta) = take_lease(h, job, LEASE, 0, SKEW)? else {
            t.anomaly(format!("{label}: the sender never got the lease"));
            continue;
        };
        let e = eff(job, ta, "transfer-funds", i);
        // The request is about to leave (the client waits before connecting) when the pause
        // comes: on SIGCONT it leaves at once, racing the watchdog's stop.
        let client = Client {
            hold_before_ms: h.rng.gen_range(300..500),
            ..client
        };
        let s = Sender {
            body: "eval \"$CLIENT\"",
            host: "chaos-pause-a",
            skew_ms: 0,
            max_skew: SKEW,
            client,
        };
        let mut a = Running::spawn(sender_cmd(h, &e, &s))?;
        let mut stopped = Vec::new();
        if let Some((sh, effect)) = announced(&mut a, t, &label)? {
            std::thread::sleep(h.ms(50, client.hold_before_ms - 150));
            // The group first, so the watchdog cannot stop the command before it is paused.
            if let Some(g) = group_of(sh) {
                if signal(-g, libc::SIGSTOP) {
                    stopped.push(-g);
                }
            }
            let effect = if h.guarded { effect } else { sh };
            if signal(effect, libc::SIGSTOP) {
                stopped.push(effect);
            }
            t.stop("sender_tree_sigstop");
        }
        match take_lease(h, job, "1h", 0, SKEW)? {
            Some(tb) => {
                let b = Eff {
                    token: tb,
                    ..e.clone()
                };
                let quick = Client {
                    hold_before_ms: 0,
                    ..client
                };
                settle(t, &label, || {
                    retry_cmd(h, &b, "chaos-pause-b", 0, SKEW, &quick)
                })?;
                for p in &stopped {
                    signal(*p, libc::SIGCONT);
                }
                a.finish()?;
                h.release(job, tb)?;
            }
            None => {
                for p in &stopped {
                    signal(*p, libc::SIGCONT);
                }
                a.finish()?;
                t.anomaly(format!("{label}: the other host never got the lease"));
            }
        }
        done(t, h, &e, label, bar);
    }
    Ok(())
}

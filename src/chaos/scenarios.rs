//! The scenarios that need no scheduler: each iteration is one intended effect, attacked in a
//! different way, then settled by restarts (or the next firing) without clearing the ledger.
use super::far_side::{SENT_MARKER, START_MARKER};
use super::harness::FOREVER;
use super::{Client, Eff, Harness, Tally};
use crate::state::EffectState;
use crate::Result;
use indicatif::ProgressBar;
use rand::Rng;
use std::time::{Duration, Instant};

/// Attempts a restart makes before the harness calls the effect stuck.
const SETTLE_TRIES: usize = 8;
/// Long enough that the harness always kills a paused attempt first.
const PAUSE_FOREVER: Duration = Duration::from_secs(60);

pub(super) fn run(
    name: &str,
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
) -> Result<()> {
    match name {
        "kill-mid-effect" => kill_mid_effect(h, t, n, bar),
        "overrun" => overrun(h, t, n, bar),
        "lost-response" => lost_response(h, t, n, bar),
        "duplicate-registration" => duplicate_registration(h, t, n, bar),
        "concurrent-retry" | "cross-host" | "clock-skew" | "approval-race" => {
            super::concurrent::run(name, h, t, n, bar)
        }
        "grandchild" | "other-user" | "watcher-stall" | "takeover-skew" | "host-clash"
        | "pid-reuse" | "pause" => super::senders::run(name, h, t, n, bar),
        "timeout-escape" | "setsid-escape" | "watchdog-stop" | "watchdog-kill"
        | "spawner-freeze" | "hidepid" | "observer-escape" => {
            super::escape::run(name, h, t, n, bar)
        }
        "run-end-lost" | "frozen-scheduler" | "overload" => super::runs::run(name, h, t, n, bar),
        "clock-step" => super::clock_step::run(h, t, n, bar),
        "decide-ahead" => super::ahead::run(h, t, n, bar),
        "python" => super::python::run(h, t, n, bar),
        "mcp" => super::mcp::run(h, t, n, bar),
        "failover" => super::failover::run(h, t, n, bar),
        _ => super::sched::run(name, h, t, n, bar),
    }
}

/// How the first attempt of a kill-mid-effect iteration dies.
#[derive(Debug, Clone, Copy)]
enum Kill {
    Point(&'static str),
    /// Inside the wrapped command, before its request left.
    CommandBeforeSend,
    /// Inside the wrapped command, after its request left, before the answer was read.
    CommandAfterSend,
    Random,
}

const KILLS: &[Kill] = &[
    Kill::Point("after_claim"),
    Kill::Point("after_submitted"),
    Kill::Point("after_send"),
    Kill::Point("after_done"),
    Kill::CommandBeforeSend,
    Kill::CommandAfterSend,
    Kill::Random,
];

/// Starts an attempt and kills it at a random moment within a typical attempt's duration.
fn kill_randomly(h: &mut Harness, t: &mut Tally, e: &Eff) -> Result<()> {
    let c = Client {
        hold_before_ms: h.rng.gen_range(0..15),
        hold_after_ms: h.rng.gen_range(0..15),
        ..Client::quick()
    };
    // Within the attempt's expected life, so most kills land while it runs.
    let within = h.typical_ms() as u64 + c.hold_before_ms + c.hold_after_ms + 2;
    let after = h.ms(0, within);
    let mut r = h.spawn(e, &c, None)?;
    std::thread::sleep(after);
    if r.kill() {
        t.kill("random");
    }
    r.finish()?;
    Ok(())
}

/// SIGKILL at each named fault point and at random moments, restart without clearing the
/// ledger, let the restart settle the effect.
fn kill_mid_effect(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-kill-mid-effect";
    let token = h.claim(job, "chaos", FOREVER)?;
    for i in 0..u64::from(n) {
        let e = Eff {
            job: job.into(),
            token,
            action: "send-message".into(),
            target: "carol".into(),
            i,
        };
        let kill = KILLS[(i as usize) % KILLS.len()];
        let label = format!("kill-mid-effect #{i} ({kill:?})");
        match kill {
            Kill::Random => kill_randomly(h, t, &e)?,
            _ => {
                let (c, pause, marker, point) = match kill {
                    Kill::Point(p) => (
                        Client::quick(),
                        Some((p, PAUSE_FOREVER)),
                        format!("exactly-fault: {p}"),
                        p,
                    ),
                    Kill::CommandBeforeSend => (
                        Client {
                            hold_before_ms: PAUSE_FOREVER.as_millis() as u64,
                            ..Client::quick()
                        },
                        None,
                        START_MARKER.to_string(),
                        "in_command_before_send",
                    ),
                    _ => (
                        Client {
                            hold_after_ms: PAUSE_FOREVER.as_millis() as u64,
                            ..Client::quick()
                        },
                        None,
                        SENT_MARKER.to_string(),
                        "in_command_after_send",
                    ),
                };
                let mut r = h.spawn(&e, &c, pause)?;
                if r.wait_marker(&marker)? && r.kill() {
                    t.kill(point);
                } else {
                    t.anomaly(format!(
                        "{label}: the attempt ended before reaching {marker}"
                    ));
                }
                r.finish()?;
            }
        }
        // Sometimes the restart dies too, at a random moment.
        if h.rng.gen_bool(0.2) {
            kill_randomly(h, t, &e)?;
        }
        h.settle_tallied(t, &e, &label, SETTLE_TRIES)?;
        t.intend(&h.key(&e), label);
        t.iterations += 1;
        bar.inc(1);
    }
    h.release(job, token)?;
    Ok(())
}

/// A run outlives its lease and the lease is stolen: the stale run's writes must be fenced,
/// and the effect must still happen once.
fn overrun(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-overrun";
    // Long enough that a slow start still finds more than SUBMIT_MIN_LEFT of it to send under.
    let lease_for = Duration::from_millis(500);
    // Stalled past the lease and the clock-skew margin, so the steal lands inside the stall.
    let pause = lease_for + crate::time::max_skew() + Duration::from_millis(250);
    const WHERE: &[Option<&str>] = &[
        None, // the stale run starts a write only after its lease was stolen
        Some("after_claim"),
        Some("after_submitted"),
        Some("after_send"),
    ];
    for i in 0..u64::from(n) {
        let stall = WHERE[(i as usize) % WHERE.len()];
        let label = format!("overrun #{i} (stalled at {})", stall.unwrap_or("start"));
        let claimed = Instant::now();
        let ta = h.claim(job, "chaos-slow", lease_for)?;
        let a = Eff {
            job: job.into(),
            token: ta,
            action: "charge-card".into(),
            target: "dave".into(),
            i,
        };
        let mut slow = match stall {
            Some(p) => {
                let mut r = h.spawn(&a, &Client::quick(), Some((p, pause)))?;
                if !r.wait_marker(&format!("exactly-fault: {p}"))? {
                    t.anomaly(format!("{label}: the slow run never reached {p}"));
                }
                Some(r)
            }
            None => None,
        };
        // The lease runs out while the slow run is stalled; the next run steals it once the
        // clock-skew margin has passed too.
        let expiry = lease_for + crate::time::max_skew() + Duration::from_millis(15);
        std::thread::sleep(expiry.saturating_sub(claimed.elapsed()));
        let tb = h.claim(job, "chaos-next", FOREVER)?;
        let b = Eff {
            token: tb,
            ..a.clone()
        };
        let slow_end = match slow.take() {
            Some(r) => {
                // The new owner tries while the stale run is still stalled mid-effect.
                h.spawn(&b, &Client::quick(), None)?.finish()?;
                r.finish()?
            }
            None => h.spawn(&a, &Client::quick(), None)?.finish()?,
        };
        if h.guarded {
            match slow_end.code {
                Some(3) => {}
                Some(0) => {
                    t.late_writes_accepted += 1;
                    t.anomaly(format!("{label}: the stale run's write was accepted"));
                }
                c => t.anomaly(format!(
                    "{label}: the stale run ended {c:?}, not fenced: {}",
                    slow_end.last_words()
                )),
            }
        }
        h.settle_tallied(t, &b, &label, SETTLE_TRIES)?;
        h.release(job, tb)?;
        t.intend(&h.key(&a), label);
        t.iterations += 1;
        bar.inc(1);
    }
    Ok(())
}

/// The far side acts (or loses the request) and the answer never comes: the effect must end
/// `unknown`, then be settled by the observer, never repeated.
fn lost_response(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-lost-response";
    let token = h.claim(job, "chaos", FOREVER)?;
    for i in 0..u64::from(n) {
        let e = Eff {
            job: job.into(),
            token,
            action: "place-order".into(),
            target: "erin".into(),
            i,
        };
        let key = h.key(&e);
        // 0, 1: acted, answer lost; 2: request lost before acting; 3: acted, answer lost, and
        // the observer cannot tell at first.
        let variant = i % 4;
        let rule = if variant == 2 {
            "lose-request"
        } else {
            "drop-answer"
        };
        let label = format!("lost-response #{i} ({rule})");
        h.far.rule(&key, rule, 1)?;
        let c = Client {
            timeout_ms: 150,
            ..Client::quick()
        };
        let first = h.spawn(&e, &c, None)?.finish()?;
        if h.guarded {
            let state = crate::effect::get(&mut h.store, &key)?.map(|r| r.state);
            if first.code != Some(6) || state != Some(EffectState::Unknown) {
                t.anomaly(format!(
                    "{label}: first attempt ended {:?} with the effect {state:?}, not unknown",
                    first.code
                ));
            }
            if variant == 3 {
                h.far.rule(&key, "flaky-seen", 1)?;
                let second = h.spawn(&e, &Client::quick(), None)?.finish()?;
                let verdict = crate::effect::get(&mut h.store, &key)?.and_then(|r| r.verdict);
                if second.code == Some(5) && verdict.as_deref() == Some("can't tell") {
                    t.observer_cant_tell += 1;
                } else {
                    t.anomaly(format!(
                        "{label}: with the observer unavailable the retry ended {:?} \
                         (verdict {verdict:?}), not unresolved",
                        second.code
                    ));
                }
            }
        }
        h.settle_tallied(t, &e, &label, SETTLE_TRIES)?;
        t.intend(&key, label);
        t.iterations += 1;
        bar.inc(1);
    }
    h.release(job, token)?;
    Ok(())
}

/// One action configured under two job names, both firing at once (and sometimes one killed):
/// the ledger must collapse them into one effect.
fn duplicate_registration(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let jobs = ["chaos-dup-digest", "chaos-dup-daily-digest"];
    let tokens = h.claim_all(&jobs)?;
    for i in 0..u64::from(n) {
        let effs = Eff::per_job(&jobs, &tokens, "send-digest", "team", i);
        let victim = (i % 3 == 2).then_some((i / 3) as usize % 2);
        let label = format!(
            "duplicate-registration #{i}{}",
            if victim.is_some() {
                " (one killed)"
            } else {
                ""
            }
        );
        let first = h.rng.gen_range(0..2usize);
        let mut running = Vec::new();
        for j in [first, 1 - first] {
            let c = Client {
                hold_after_ms: h.rng.gen_range(0..15),
                ..Client::quick()
            };
            running.push((j, h.spawn(&effs[j], &c, None)?));
        }
        if let Some(v) = victim {
            let within = h.typical_ms() as u64 + 17;
            std::thread::sleep(h.ms(0, within));
            for (j, r) in running.iter_mut() {
                if *j == v && r.kill() {
                    t.kill("random");
                }
            }
        }
        for (_, r) in running {
            r.finish()?;
        }
        for e in &effs {
            h.settle_tallied(t, e, &label, SETTLE_TRIES)?;
        }
        t.intend(&h.key(&effs[0]), label);
        t.iterations += 1;
        bar.inc(1);
    }
    for (job, token) in jobs.iter().zip(tokens) {
        h.release(job, token)?;
    }
    Ok(())
}

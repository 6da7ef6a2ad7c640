//! The scenarios of live attempts racing each other (not only kills): `concurrent-retry` (2–4
//! attempts on one `unknown` effect, slow observers, random delays), `cross-host` (the same with
//! attempts that name different hosts, and a fresh effect whose sender is elsewhere),
//! `clock-skew` (processes whose clocks disagree by seconds, through `faketime`, each claiming
//! the lease itself) and `approval-race` (one caller asks for approval, one does not; a person
//! approves or denies at a random moment).
use super::proc::Running;
use super::{Client, Eff, Harness, How, Tally};
use crate::approval::Decided;
use crate::state::EffectState;
use crate::{approval, Error, Result};
use indicatif::ProgressBar;
use rand::Rng;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Tries each caller makes while the effect is in flight elsewhere (exit 5) or fenced.
const CALLER_TRIES: usize = 6;
/// Restarts the harness makes at the end of an iteration before calling the effect stuck.
const SETTLE_TRIES: usize = 12;
/// How far apart `clock-skew` puts two processes' clocks at most: the skew the ledger tolerates
/// (`EXACTLY_MAX_SKEW`'s default) less the time a command takes to be stopped once its lease has
/// expired (a poll, then the grace before `SIGKILL`).
pub(super) const MAX_SKEW_MS: i64 = crate::time::DEFAULT_MAX_SKEW.as_millis() as i64
    - crate::policy::LEASE_POLL.as_millis() as i64
    - crate::policy::STOP_GRACE.as_millis() as i64;
/// The lease each `clock-skew` process claims for itself.
const SKEW_LEASE: &str = "1s";

pub(super) fn run(
    name: &str,
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
) -> Result<()> {
    match name {
        "concurrent-retry" => concurrent_retry(h, t, n, bar, false),
        "cross-host" => concurrent_retry(h, t, n, bar, true),
        "clock-skew" => clock_skew(h, t, n, bar),
        "approval-race" => approval_race(h, t, n, bar),
        other => Err(Error::Usage(format!("no scenario named {other}"))),
    }
}

/// A caller: its attempts (the first, then retries), started `delay` after the race begins.
struct Caller {
    delay: Duration,
    tries: Vec<(Command, Duration)>,
    /// Exit codes after which the caller tries again (in flight, awaiting approval, fenced).
    again: &'static [i32],
}

/// Runs the callers at once (each on its own thread); returns each caller's exit codes.
fn race(callers: Vec<Caller>) -> Vec<Result<Vec<Option<i32>>>> {
    let handles: Vec<_> = callers
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || -> Result<Vec<Option<i32>>> {
                std::thread::sleep(c.delay);
                let mut codes = Vec::new();
                for (cmd, pause) in c.tries {
                    let end = Running::spawn(cmd)?.finish()?;
                    codes.push(end.code);
                    match end.code {
                        Some(code) if c.again.contains(&code) => std::thread::sleep(pause),
                        _ => break,
                    }
                }
                Ok(codes)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(Error::Store("a caller thread panicked".into())))
        })
        .collect()
}

fn record_race(t: &mut Tally, label: &str, results: Vec<Result<Vec<Option<i32>>>>) {
    for r in results {
        if let Err(e) = r {
            t.anomaly(format!("{label}: {e}"));
        }
    }
}

/// Leaves the effect `unknown`: the first attempt's request is lost, or acted on with its
/// answer lost.
fn make_unknown(h: &mut Harness, t: &mut Tally, e: &Eff, arrived: bool, label: &str) -> Result<()> {
    let key = h.key(e);
    h.far.rule(
        &key,
        if arrived {
            "drop-answer"
        } else {
            "lose-request"
        },
        1,
    )?;
    let c = Client {
        timeout_ms: 150,
        ..Client::quick()
    };
    let first = h.spawn(e, &c, None)?.finish()?;
    let state = crate::effect::get(&mut h.store, &key)?.map(|r| r.state);
    if first.code != Some(6) || state != Some(EffectState::Unknown) {
        t.anomaly(format!(
            "{label}: the first attempt ended {:?} with the effect {state:?}, not unknown: {}",
            first.code,
            first.last_words()
        ));
    }
    Ok(())
}

/// 2–4 live attempts on one effect: from an `unknown` left by a lost answer (slow observers,
/// random delays), or — cross-host — also on a fresh effect whose first sender is slow.
/// Attempts are of one job and token (a restart racing a retry) or of different jobs (the same
/// action registered twice); cross-host attempts each name another host.
fn concurrent_retry(
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
    cross_host: bool,
) -> Result<()> {
    let name = if cross_host {
        "cross-host"
    } else {
        "concurrent-retry"
    };
    let jobs: Vec<String> = (0..4).map(|j| format!("chaos-{name}-{j}")).collect();
    let tokens = h.claim_all(&jobs.iter().map(String::as_str).collect::<Vec<_>>())?;
    for i in 0..u64::from(n) {
        let callers_n = h.rng.gen_range(2..=4usize);
        let same_job = i % 2 == 0;
        let fresh = cross_host && i % 4 >= 2;
        let arrived = i % 3 != 0;
        let effs: Vec<Eff> = (0..callers_n)
            .map(|j| {
                let j = if same_job { 0 } else { j };
                Eff {
                    job: jobs[j].clone(),
                    token: tokens[j],
                    action: "pay-invoice".into(),
                    target: format!("acct-of-{name}"),
                    i,
                }
            })
            .collect();
        let label = format!(
            "{name} #{i} ({callers_n} attempts, {}, {})",
            if same_job {
                "one job"
            } else {
                "different jobs"
            },
            if fresh {
                "fresh effect, slow first sender".to_string()
            } else {
                format!(
                    "unknown, request {}",
                    if arrived { "arrived" } else { "lost" }
                )
            }
        );
        if !fresh {
            make_unknown(h, t, &effs[0], arrived, &label)?;
        }
        let mut callers = Vec::new();
        for (j, e) in effs.iter().enumerate() {
            let answer_after = h.rng.gen_range(50..700);
            let mut how = How {
                observe: Some(h.slow_observer(answer_after)),
                ..How::default()
            };
            if cross_host {
                how.host = Some(format!("chaos-host-{j}"));
            }
            let c = Client {
                hold_before_ms: h.rng.gen_range(0..300),
                hold_after_ms: h.rng.gen_range(0..100),
                ..Client::quick()
            };
            let delay = if fresh && j == 0 {
                // The first sender stalls after `submitted`, as a slow network would.
                how.pause = Some(("after_submitted", h.ms(100, 600)));
                Duration::ZERO
            } else if fresh {
                h.ms(20, 400)
            } else {
                h.ms(0, 400)
            };
            let mut tries = Vec::new();
            for _ in 0..CALLER_TRIES {
                let pause = h.ms(50, 300);
                tries.push((h.attempt_with(e, &c, &how), pause));
            }
            callers.push(Caller {
                delay,
                tries,
                again: &[5],
            });
        }
        record_race(t, &label, race(callers));
        h.settle_tallied(t, &effs[0], &label, SETTLE_TRIES)?;
        t.intend(&h.key(&effs[0]), label);
        t.iterations += 1;
        bar.inc(1);
    }
    for (job, token) in jobs.iter().zip(tokens) {
        h.release(job, token)?;
    }
    Ok(())
}

/// `exactly lease claim` run with the caller's clock; None when a live lease is held (exit 3).
fn claim_skewed(
    h: &Harness,
    job: &str,
    owner: &str,
    skew_ms: i64,
    dur: &str,
) -> Result<Option<crate::Token>> {
    let out = h
        .skewed(skew_ms)
        .arg("--db")
        .arg(h.db())
        .args([
            "lease", "claim", "--job", job, "--for", dur, "--owner", owner,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::io(format!("cannot run lease claim: {e}"), e))?;
    match out.status.code() {
        Some(0) => String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<i64>()
            .map(|t| Some(t.into()))
            .map_err(|e| Error::Store(format!("lease claim printed no token: {e}"))),
        Some(3) => Ok(None),
        c => Err(Error::Store(format!(
            "lease claim ended {c:?}: {}",
            crate::sanitize::inert_trunc(&String::from_utf8_lossy(&out.stderr), 200)
        ))),
    }
}

/// Claims until it wins or `within` has passed.
fn claim_until(
    h: &Harness,
    job: &str,
    owner: &str,
    skew_ms: i64,
    dur: &str,
    within: Duration,
) -> Result<Option<crate::Token>> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(tok) = claim_skewed(h, job, owner, skew_ms, dur)? {
            return Ok(Some(tok));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two processes whose clocks disagree by up to [`MAX_SKEW_MS`] each claim the job's short lease
/// themselves (each on its own host) and send the same effect; the first sender is slow, so its
/// lease runs out mid-send by someone's clock.
fn clock_skew(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let job = "chaos-clock-skew";
    for i in 0..u64::from(n) {
        let skew_a = -h.rng.gen_range(0..=MAX_SKEW_MS / 2);
        // Half the iterations put the clocks as far apart as tolerated.
        let skew_b = if i % 2 == 0 {
            skew_a + MAX_SKEW_MS
        } else {
            h.rng.gen_range(0..=MAX_SKEW_MS / 2)
        };
        let label = format!("clock-skew #{i} (clocks {skew_a:+}ms and {skew_b:+}ms)");
        let Some(ta) = claim_until(
            h,
            job,
            "chaos-a",
            skew_a,
            SKEW_LEASE,
            Duration::from_secs(15),
        )?
        else {
            t.anomaly(format!("{label}: the first process never got the lease"));
            continue;
        };
        let a = Eff {
            job: job.into(),
            token: ta,
            action: "book-slot".into(),
            target: "clinic-3".into(),
            i,
        };
        let how_a = How {
            host: Some("chaos-host-a".into()),
            skew_ms: skew_a,
            ..How::default()
        };
        // A send that may outlast the lease.
        let ca = Client {
            hold_before_ms: h.rng.gen_range(200..1500),
            ..Client::quick()
        };
        let first = Caller {
            delay: Duration::ZERO,
            tries: vec![(h.attempt_with(&a, &ca, &how_a), Duration::ZERO)],
            again: &[],
        };
        let b_delay = h.ms(100, 900);
        let answer_after = h.rng.gen_range(50..500);
        let slow = h.slow_observer(answer_after);
        let handle = std::thread::spawn(move || race(vec![first]));
        std::thread::sleep(b_delay);
        // The second process claims with its own clock and sends the same effect.
        let mut b_codes = Vec::new();
        let tb = claim_until(h, job, "chaos-b", skew_b, "5s", Duration::from_secs(15))?;
        if let Some(tb) = tb {
            let b = Eff {
                token: tb,
                ..a.clone()
            };
            let how_b = How {
                host: Some("chaos-host-b".into()),
                skew_ms: skew_b,
                observe: Some(slow),
                ..How::default()
            };
            for _ in 0..CALLER_TRIES {
                let end = Running::spawn(h.attempt_with(&b, &Client::quick(), &how_b))?.finish()?;
                b_codes.push(end.code);
                if end.code != Some(5) {
                    break;
                }
                std::thread::sleep(h.ms(100, 400));
            }
            h.release(job, tb)?;
        } else {
            t.anomaly(format!("{label}: the second process never got the lease"));
        }
        let a_result = handle
            .join()
            .map_err(|_| Error::Store("a caller thread panicked".into()))?;
        record_race(t, &label, a_result);
        // The next run (our clock) settles whatever is left.
        match claim_until(h, job, "chaos-next", 0, "1h", Duration::from_secs(15))? {
            Some(tn) => {
                let next = Eff {
                    token: tn,
                    ..a.clone()
                };
                h.settle_tallied(t, &next, &label, SETTLE_TRIES)?;
                h.release(job, tn)?;
            }
            None => t.anomaly(format!("{label}: the next run never got the lease")),
        }
        t.intend(&h.key(&a), label);
        t.iterations += 1;
        bar.inc(1);
    }
    Ok(())
}

/// One job asks for approval of the effect (`--needs-approval`), another sends the same effect
/// without the flag; a person approves or denies it at a random moment. Nothing may reach the
/// far side before the approval, or at all after a denial.
fn approval_race(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let jobs = ["chaos-pay-a", "chaos-pay-b"];
    let tokens = h.claim_all(&jobs)?;
    for i in 0..u64::from(n) {
        let effs = Eff::per_job(&jobs, &tokens, "pay", "landlord", i);
        let key = h.key(&effs[0]);
        let approve = h.rng.gen_bool(0.6);
        let label = format!(
            "approval-race #{i} ({})",
            if approve { "approved" } else { "denied" }
        );
        let flagged = How {
            needs_approval: true,
            ..How::default()
        };
        // The first caller asks for approval and waits.
        let asked =
            Running::spawn(h.attempt_with(&effs[0], &Client::quick(), &flagged))?.finish()?;
        if asked.code != Some(4) {
            t.anomaly(format!(
                "{label}: the flagged caller ended {:?}, not awaiting approval: {}",
                asked.code,
                asked.last_words()
            ));
        }
        // The unflagged caller and the flagged one's retries race the person's decision.
        let callers = racing_callers(h, &effs, &flagged);
        let decide_after = h.ms(0, 400);
        let handle = std::thread::spawn(move || race(callers));
        std::thread::sleep(decide_after);
        if h.far.arrivals(&key)? > 0 {
            t.unapproved_sends += 1;
            t.fail(format!(
                "{label}: effect {key} reached the far side before anyone approved it"
            ));
        }
        let who = "chaos-operator";
        let decided = if approve {
            approval::approve(&mut h.store, &key, who, None)?
        } else {
            approval::deny(&mut h.store, &key, who, None)?
        };
        if decided != Decided::Done {
            t.anomaly(format!(
                "{label}: the person's decision was not taken: {decided:?}"
            ));
        }
        let results = handle
            .join()
            .map_err(|_| Error::Store("a caller thread panicked".into()))?;
        record_race(t, &label, results);
        if approve {
            settle_approved(h, t, &effs[0], &flagged, &key, label)?;
        } else {
            check_denied(h, t, &effs, &flagged, &key, &label)?;
        }
        t.iterations += 1;
        bar.inc(1);
    }
    for (job, token) in jobs.iter().zip(tokens) {
        h.release(job, token)?;
    }
    Ok(())
}

/// The two callers of one approval-race round, each with its tries: the flagged one (asking
/// for approval again) and an unflagged one, on the same key.
fn racing_callers(h: &mut Harness, effs: &[Eff], flagged: &How) -> Vec<Caller> {
    let mut callers = Vec::new();
    for (j, e) in effs.iter().enumerate() {
        let how = if j == 0 {
            flagged.clone()
        } else {
            How::default()
        };
        let c = Client {
            hold_before_ms: h.rng.gen_range(0..100),
            ..Client::quick()
        };
        let mut tries = Vec::new();
        for _ in 0..CALLER_TRIES {
            tries.push((h.attempt_with(e, &c, &how), h.ms(30, 150)));
        }
        callers.push(Caller {
            delay: h.ms(0, 300),
            tries,
            again: &[4, 5],
        });
    }
    callers
}

/// After an approval: the flagged caller's next run sends it (or finds it done), and it is
/// counted as intended once.
fn settle_approved(
    h: &mut Harness,
    t: &mut Tally,
    eff: &Eff,
    flagged: &How,
    key: &exactly::EffectKey,
    label: String,
) -> Result<()> {
    // The flagged caller's next run sends it (or finds it done).
    let mut done = false;
    for _ in 0..SETTLE_TRIES {
        let end = Running::spawn(h.attempt_with(eff, &Client::quick(), flagged))?.finish()?;
        if end.code == Some(0) {
            done = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !done {
        t.anomaly(format!("{label}: the approved effect was never settled"));
    }
    t.intend(key, label);
    Ok(())
}

/// After a denial: both callers again, and neither may send; the effect ends cancelled.
fn check_denied(
    h: &mut Harness,
    t: &mut Tally,
    effs: &[Eff],
    flagged: &How,
    key: &exactly::EffectKey,
    label: &str,
) -> Result<()> {
    // Both callers again: neither may send a denied effect.
    for (j, e) in effs.iter().enumerate() {
        let how = if j == 0 {
            flagged.clone()
        } else {
            How::default()
        };
        Running::spawn(h.attempt_with(e, &Client::quick(), &how))?.finish()?;
    }
    let arrived = h.far.arrivals(key)?;
    if arrived > 0 {
        t.unapproved_sends += 1;
        t.fail(format!(
            "{label}: the denied effect {key} reached the far side {arrived} times"
        ));
    }
    let state = crate::effect::get(&mut h.store, key)?.map(|r| r.state);
    if state != Some(EffectState::Cancelled) {
        t.anomaly(format!(
            "{label}: the denied effect is {state:?}, not cancelled"
        ));
    }
    Ok(())
}

//! `exactly trigger|pause|resume|backfill`: an operator's controls over registered jobs. Each
//! firing goes through the same library call the scheduler uses (`firing::fire`) and runs in the
//! foreground under the job's lease.
use crate::firing::{self, FireRequest, Fired};
use crate::runner::{registered, run::execute, run_here, LiveJob, Schedule};
use crate::sanitize::inert;
use crate::state::FiringKind;
use crate::state::RunOutcome;
use crate::{jobs, lease, time, Access, Error, Result, Store};
use clap::Args;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub(crate) struct TriggerArgs {
    /// The registered job to fire now.
    #[arg(value_parser = lease::job_name)]
    pub job: crate::JobName,
    /// Who fires it, in leases and firings (default user@host:pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}
#[derive(Args, Debug)]
pub(crate) struct PauseArgs {
    /// The registered job to pause.
    #[arg(value_parser = lease::job_name)]
    pub job: crate::JobName,
    /// Why, shown with the job until it is resumed.
    #[arg(long)]
    pub note: Option<String>,
}
#[derive(Args, Debug)]
pub(crate) struct ResumeArgs {
    /// The paused job to resume.
    #[arg(value_parser = lease::job_name)]
    pub job: crate::JobName,
}
#[derive(Args, Debug)]
pub(crate) struct BackfillArgs {
    /// The registered job whose past slots to fire.
    #[arg(value_parser = lease::job_name)]
    pub job: crate::JobName,
    /// First slot (RFC 3339 instant), inclusive.
    #[arg(long, value_parser = instant)]
    pub from: time::Ts,
    /// Last slot (RFC 3339 instant), inclusive.
    #[arg(long, value_parser = instant)]
    pub to: time::Ts,
    /// Who fires them, in leases and firings (default user@host:pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// Print the result as one JSON object (one entry per slot).
    #[arg(long)]
    pub json: bool,
}

/// `--from`/`--to`'s parser: an instant.
fn instant(s: &str) -> std::result::Result<time::Ts, String> {
    time::parse(s).ok_or_else(|| "not an instant (use e.g. 2026-03-01T07:00:00Z)".to_string())
}

/// Most slots one backfill may fire.
const BACKFILL_MAX: u64 = 1000;

fn effects_line(store: &mut Store, job: &crate::JobName, token: crate::Token) -> Result<String> {
    let c = jobs::effect_counts(store, job, token)?;
    Ok(format!(
        "effects: {} done, {} already done (suppressed), {} unknown, {} fenced writes",
        c.done, c.suppressed, c.unknown, c.fenced
    ))
}

/// A run's result and its effects as JSON, for `trigger --json` and `backfill --json`.
fn run_json(
    store: &mut Store,
    job: &crate::JobName,
    token: crate::Token,
    run_id: &str,
    r: &execute::RunResult,
) -> Result<serde_json::Value> {
    let c = jobs::effect_counts(store, job, token)?;
    Ok(serde_json::json!({
        "run_id": run_id, "token": token, "outcome": r.outcome, "exit_code": r.exit_code,
        "duration_ms": r.duration_ms,
        "effects": {"done": c.done, "suppressed": c.suppressed, "unknown": c.unknown,
                    "fenced_writes": c.fenced},
    }))
}

/// `exactly trigger JOB`: its own firing, now, under the lease and the overlap policy. Exit 0
/// when it ran ok or was queued, 1 when the run failed, 3 when it was not started (coalesced,
/// queue full, missed, paused).
pub(super) fn trigger_main(db: &Option<String>, a: TriggerArgs) -> Result<i32> {
    let mut store = crate::open(db.as_deref(), Access::Write)?;
    let reg = registered(&mut store, &a.job)?;
    let owner = a.owner.unwrap_or_else(lease::default_owner);
    let now = time::now();
    let slot = time::fmt(now);
    let until = time::fmt(time::add(now, reg.lease));
    let granted = Instant::now();
    let fired = firing::fire(
        &mut store,
        &FireRequest {
            job: &a.job,
            slot: &slot,
            kind: FiringKind::Manual,
            owner: &owner,
            lease_until: &until,
            now: &slot,
            overlap: reg.overlap,
            live_here: false,
        },
    )?;
    // The outcome in the words the scheduler's log uses for the same firing.
    let words = inert(&fired.describe(FiringKind::Manual, &slot));
    use serde_json::json;
    let (code, text, v) = match fired {
        Fired::Started(st) => {
            let token = st.token;
            let run_id = st.run_id.clone();
            if !a.json {
                super::pipe::say(&words);
            }
            let r = run_here(db, &reg, st, granted)?;
            let text = format!(
                "{}: in {}{}; {}",
                r.outcome,
                time::human_ms(r.duration_ms as u64),
                r.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default(),
                effects_line(&mut store, &a.job, token)?
            );
            let text = if r.outcome == RunOutcome::AwaitingApproval {
                format!(
                    "{text}; its effect waits for approval: `exactly approve KEY` runs the \
                     firing again at once under a running scheduler (exactly status lists KEY)"
                )
            } else {
                text
            };
            let mut v = json!({"result": "started"});
            v["run"] = run_json(&mut store, &a.job, token, &run_id, &r)?;
            (if r.outcome == RunOutcome::Ok { 0 } else { 1 }, text, v)
        }
        other => not_started(other, words),
    };
    if a.json {
        let mut v = v;
        v["job"] = json!(a.job);
        v["slot"] = json!(slot);
        v["exit"] = json!(code);
        crate::json::alias(&mut v);
        if let Some(run) = v.get_mut("run") {
            crate::json::alias(run);
        }
        super::pipe::say(crate::json::render(v));
    } else {
        super::pipe::say(text);
    }
    Ok(code)
}

/// A trigger that started no run: its exit code (0 for queued, which runs later; 3 for a
/// refusal), the scheduler's words for it, and its JSON.
fn not_started(fired: Fired, words: String) -> (i32, String, serde_json::Value) {
    use serde_json::json;
    match fired {
        // Queued runs later: not a refusal.
        Fired::Queued {
            depth,
            cap,
            waiting,
        } => (
            0,
            words,
            json!({"result": "queued", "depth": depth, "cap": cap, "waiting": waiting}),
        ),
        Fired::Coalesced {
            holder,
            token,
            waiting,
        } => (
            3,
            words,
            json!({"result": "coalesced", "holder": holder, "token": token, "waiting": waiting}),
        ),
        Fired::Saturated { cap } => (3, words, json!({"result": "saturated", "cap": cap})),
        Fired::Missed {
            holder,
            token,
            waiting,
        } => (
            3,
            words,
            json!({"result": "missed", "holder": holder, "token": token, "waiting": waiting}),
        ),
        Fired::Skipped { note, by } => (
            3,
            words,
            json!({"result": "skipped", "paused_by": by, "note": note}),
        ),
        Fired::Duplicate { state, .. } => {
            (3, words, json!({"result": "duplicate", "state": state}))
        }
        Fired::Busy { holder, .. } => (3, words, json!({"result": "busy", "holder": holder})),
        // trigger_main runs a started firing itself; it never comes here.
        Fired::Started(_) => (0, words, json!({"result": "started"})),
    }
}

/// `pause`/`resume`'s line: who acted when it changed something.
fn say_toggled(t: jobs::Toggled, job: &str, by: &str) {
    if t.changed {
        println!("{} by {}", t.describe(job), inert(by));
    } else {
        println!("{}", t.describe(job));
    }
}

pub(super) fn pause_main(db: &Option<String>, a: PauseArgs) -> Result<i32> {
    let mut store = crate::open(db.as_deref(), Access::Write)?;
    registered(&mut store, &a.job)?;
    let by = crate::actor();
    let t = jobs::pause(&mut store, &a.job, &by, a.note.as_deref())?;
    say_toggled(t, &a.job, &by);
    Ok(0)
}

pub(super) fn resume_main(db: &Option<String>, a: ResumeArgs) -> Result<i32> {
    let mut store = crate::open(db.as_deref(), Access::Write)?;
    registered(&mut store, &a.job)?;
    let by = crate::actor();
    let t = jobs::resume(&mut store, &a.job, &by)?;
    say_toggled(t, &a.job, &by);
    Ok(0)
}

/// `exactly backfill JOB --from T --to T`: fires the job's slots in the range, one after the
/// other, each waiting for the lease. A slot that already ran is a duplicate and is not run
/// again; a run's effects that are already done are suppressed by their keys.
pub(super) fn backfill_main(db: &Option<String>, a: BackfillArgs) -> Result<i32> {
    let (from, to) = (a.from, a.to);
    if to < from {
        return Err(Error::Usage("--to is before --from".into()));
    }
    if to > time::now() {
        return Err(Error::Usage(
            "--to is in the future; backfill fires past slots only".into(),
        ));
    }
    let mut store = crate::open(db.as_deref(), Access::Write)?;
    let reg = registered(&mut store, &a.job)?;
    let slots = backfill_slots(&reg, from, to)?;
    // Each slot's result: printed as it comes, or gathered into one JSON object.
    let mut report: Vec<serde_json::Value> = Vec::new();
    let finish = |report: Vec<serde_json::Value>, code: i32| -> Result<i32> {
        if a.json {
            say_backfill_json(&a.job, from, to, report, code);
        }
        Ok(code)
    };
    let say = |text: String| {
        if !a.json {
            super::pipe::say(text);
        }
    };
    if slots.is_empty() {
        say(format!(
            "no slots of {} between {} and {}",
            inert(&a.job),
            time::fmt(from),
            time::fmt(to)
        ));
        return finish(report, 0);
    }
    let owner = a.owner.clone().unwrap_or_else(lease::default_owner);
    let mut failed = false;
    for slot in slots {
        let slot_text = time::fmt(slot);
        let (text, entry, outcome) =
            backfill_slot(db, &mut store, (&a.job, &reg), &owner, &slot_text)?;
        say(text);
        report.push(entry);
        match outcome {
            SlotOutcome::Ran { ok } => failed |= !ok,
            SlotOutcome::Other => {}
            SlotOutcome::Busy => return finish(report, 3),
        }
    }
    finish(report, if failed { 1 } else { 0 })
}

/// The job's slots from `from` to `to`, both included; a range of more than
/// [`BACKFILL_MAX`] is refused.
fn backfill_slots(reg: &LiveJob, from: time::Ts, to: time::Ts) -> Result<Vec<time::Ts>> {
    let schedule = Schedule::from_registry(
        reg.row.settings.schedule.as_deref().unwrap_or(""),
        reg.row.settings.timezone.as_deref(),
    )
    .map_err(|e| Error::Usage(e.to_string()))?
    .with_dst(crate::schedule::Dst::from_registry(
        reg.row.dst_repeated.as_deref(),
        reg.row.dst_skipped.as_deref(),
    ));
    let before = from - chrono::Duration::milliseconds(1);
    let (slots, total) = schedule.slots(before, to, BACKFILL_MAX as usize);
    if total > BACKFILL_MAX {
        return Err(Error::Usage(format!(
            "the range holds {total} slots, more than {BACKFILL_MAX}; narrow --from/--to"
        )));
    }
    Ok(slots)
}

/// How one backfilled slot ended, for the exit code.
enum SlotOutcome {
    /// It ran here; `ok` when the run did.
    Ran { ok: bool },
    /// The lease stayed held past the wait: the backfill stops.
    Busy,
    /// A duplicate, a paused job's skip, or another verdict: nothing ran.
    Other,
}

/// Fires one slot, waiting up to three leases (and 10 s) for the lease: its line, its JSON
/// entry and how it ended.
fn backfill_slot(
    db: &Option<String>,
    store: &mut Store,
    (job, reg): (&crate::JobName, &LiveJob),
    owner: &str,
    slot_text: &str,
) -> Result<(String, serde_json::Value, SlotOutcome)> {
    use serde_json::json;
    let waited_since = Instant::now();
    let max_wait = reg.lease * 3 + Duration::from_secs(10);
    loop {
        let now = time::now();
        let granted = Instant::now();
        let fired = firing::fire(
            store,
            &FireRequest {
                job,
                slot: slot_text,
                kind: FiringKind::Backfill,
                owner,
                lease_until: &time::fmt(time::add(now, reg.lease)),
                now: &time::fmt(now),
                overlap: reg.overlap,
                live_here: false,
            },
        )?;
        let words = inert(&fired.describe(FiringKind::Backfill, slot_text));
        return Ok(match fired {
            Fired::Started(s) => {
                let token = s.token;
                let run_id = s.run_id.clone();
                let r = run_here(db, reg, s, granted)?;
                let text = format!(
                    "{slot_text}: ran, {} in {}; {}",
                    r.outcome,
                    time::human_ms(r.duration_ms as u64),
                    effects_line(store, job, token)?
                );
                let run = run_json(store, job, token, &run_id, &r)?;
                let ok = r.outcome == RunOutcome::Ok;
                (
                    text,
                    json!({"slot": slot_text, "result": "ran", "run": run}),
                    SlotOutcome::Ran { ok },
                )
            }
            Fired::Duplicate { state, .. } => (
                words,
                json!({"slot": slot_text, "result": "duplicate", "state": state}),
                SlotOutcome::Other,
            ),
            Fired::Skipped { .. } => (
                words,
                json!({"slot": slot_text, "result": "skipped"}),
                SlotOutcome::Other,
            ),
            Fired::Busy { .. } if waited_since.elapsed() < max_wait => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            Fired::Busy { holder, until } => (
                format!("{words}; stopping"),
                json!({"slot": slot_text, "result": "busy", "holder": holder, "until": time::fmt(until)}),
                SlotOutcome::Busy,
            ),
            // A backfill waits for the lease instead of applying the overlap policy.
            other => (
                words,
                json!({"slot": slot_text, "result": other.verdict()}),
                SlotOutcome::Other,
            ),
        });
    }
}

/// `backfill --json`'s one object: the range, an entry per slot, the exit code.
fn say_backfill_json(
    job: &crate::JobName,
    from: time::Ts,
    to: time::Ts,
    report: Vec<serde_json::Value>,
    code: i32,
) {
    let mut v = serde_json::json!({
        "job": job, "from": time::fmt(from), "to": time::fmt(to),
        "slots": report, "exit": code,
    });
    crate::json::alias(&mut v);
    for slot in v["slots"].as_array_mut().into_iter().flatten() {
        crate::json::alias(slot);
        if let Some(run) = slot.get_mut("run") {
            crate::json::alias(run);
        }
    }
    super::pipe::say(crate::json::render(v));
}

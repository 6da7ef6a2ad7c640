//! Driving the step machine: each [`Io`] performed against the store and the far side, at the
//! named fault points of the real code path; [`run`] to the end; the observer's settling of
//! open effects.
use super::machine::{Attempt, Input, Io};
use super::{
    attempt_id, observe_with, observer_is_command, sender, Ctx, Effect, Failure, Observation,
    Outcome, Spec,
};
use crate::store::{
    Begin, NewEffect, Observed, Resolution, Seen, SendEnd, SentBy, Submission, Submit, Verdict,
};
use crate::store::{LedgerRow, Store};
use exactly_words::fault;
use exactly_words::sender::Sender;
use exactly_words::state::EffectState;
use exactly_words::time;
use exactly_words::Result;

/// Performs one step of `att` against the store and the action, at the named fault points of
/// the real code path. [`Io::End`] has nothing to perform.
pub fn execute(
    store: &mut Store,
    att: &Attempt,
    io: &Io,
    action: &mut dyn Effect,
) -> Result<Option<Input>> {
    let (key, ctx) = (att.key.as_str(), &att.ctx);
    Ok(Some(match io {
        Io::Begin => begin(store, att)?,
        Io::Look => Input::Looked(action.observe(key)),
        Io::Verdict {
            observation,
            seen,
            lease_check,
        } => verdict(store, att, observation, seen, *lease_check)?,
        Io::Submit { seen } => submit(store, att, seen)?,
        Io::Send => send(att, action),
        Io::Finish { sent, seen } => finish(store, att, action, sent, seen)?,
        Io::Duplicate { detail } => {
            store.record_duplicate(key, &ctx.job, Some(ctx.token.get()), detail, ctx.now())?;
            Input::Counted
        }
        Io::End(_) => return Ok(None),
    }))
}

/// Reserves the key: a new row (submitted at once when no approval is asked for), or the row
/// found, with what is known of its sender.
fn begin(store: &mut Store, att: &Attempt) -> Result<Input> {
    let (key, ctx) = (att.key.as_str(), &att.ctx);
    let new = NewEffect {
        effect_key: key,
        job_key: &ctx.job,
        run_id: &ctx.run_id,
        token: ctx.token.get(),
        terms_shown: att.spec.terms.as_deref(),
        action_id: &att.spec.action,
        target_id: &att.spec.target,
        input_digest: &att.digest,
        input_fields: &att.fields,
        observe_cmd: att.spec.observe_cmd.as_deref(),
    };
    // With no approval asked for, reserve and submit in one transaction when the key
    // has no row yet (one commit fewer); the store falls back to `claimed` otherwise.
    // (A fault at `after_claim` needs the moment between the two commits to stop at.)
    let asked = std::time::Instant::now();
    let mut begin = if att.spec.needs_approval || fault::armed(fault::Point::AfterClaim) {
        store.begin_effect(&new, ctx.now())?
    } else {
        store.begin_and_submit_effect(&new, sent_by(att), ctx.now())?
    };
    if let Begin::Submitted(_, g) = &mut begin {
        g.ends = asked.checked_add(g.left);
    }
    if matches!(begin, Begin::Submitted(..)) {
        fault::point(fault::Point::AfterSubmitted);
    }
    let who = match &begin {
        Begin::Existing(row, _) if row.state == EffectState::Submitted => {
            let who = sender(row);
            if who == Sender::Clash {
                store.record_host_clash(
                    row,
                    &exactly_words::host(),
                    exactly_words::sender::host_id(),
                    ctx.now(),
                )?;
            }
            who
        }
        _ => Sender::Unknown,
    };
    Ok(Input::Began(begin, who))
}

/// Applies the observer's answer to the row it looked at.
fn verdict(
    store: &mut Store,
    att: &Attempt,
    observation: &Observation,
    seen: &Seen,
    lease_check: bool,
) -> Result<Input> {
    let (key, ctx) = (att.key.as_str(), &att.ctx);
    let (res, words) = match observation {
        Observation::Happened(r) => (Some(Resolution::Happened), r.clone().unwrap_or_default()),
        Observation::NotHappened => (Some(Resolution::NotHappened), String::new()),
        Observation::CantTell(w) => (None, w.clone()),
    };
    let fence = Some((ctx.job.as_str(), ctx.token.get()));
    let actor = ctx.actor();
    let observed = Observed {
        verdict: res,
        words: &words,
        fence,
        lease_check,
        actor: &actor,
    };
    Ok(Input::Judged(store.observe_verdict_on(
        key,
        &observed,
        seen,
        ctx.now(),
    )?))
}

/// The compare-and-set to `submitted`: whether we may send.
fn submit(store: &mut Store, att: &Attempt, seen: &Seen) -> Result<Input> {
    let (key, ctx) = (att.key.as_str(), &att.ctx);
    fault::point(fault::Point::AfterClaim);
    let asked = std::time::Instant::now();
    let submission = Submission {
        key,
        job: &ctx.job,
        run_id: &ctx.run_id,
        token: ctx.token.get(),
        by: sent_by(att),
        needs_approval: att.spec.needs_approval,
        terms: att.spec.terms.as_deref(),
    };
    let mut s = store.submit_effect_on(&submission, seen, ctx.now())?;
    if let Submit::Won { granted, .. } = &mut s {
        granted.ends = asked.checked_add(granted.left);
        fault::point(fault::Point::AfterSubmitted);
    }
    Ok(Input::Submitted(s))
}

/// Sends, within the lease granted with `submitted`.
fn send(att: &Attempt, action: &mut dyn Effect) -> Input {
    let key = att.key.as_str();
    action.acting_for(att);
    if let Some(g) = att.granted() {
        // Counted from when the write was asked for; only a machine that never set it
        // (a driver of its own) counts from now.
        let ends = g.ends.unwrap_or_else(|| {
            crate::lease::ends_at(chrono::Duration::from_std(g.left).unwrap_or_default())
        });
        action.granted(g.until, ends, &att.attempt);
    }
    let sent = action.perform(key);
    fault::point(fault::Point::AfterSend);
    Input::Sent(sent)
}

/// Records the far side's answer (or why there is none), for as long as the lease allows.
fn finish(
    store: &mut Store,
    att: &Attempt,
    action: &mut dyn Effect,
    sent: &std::result::Result<String, Failure>,
    seen: &Seen,
) -> Result<Input> {
    let (key, ctx) = (att.key.as_str(), &att.ctx);
    let output = action.output().map(|o| (o.kept.as_slice(), o.total));
    let end = |state, response, output| SendEnd {
        key,
        job: &ctx.job,
        token: ctx.token.get(),
        state,
        response,
        output,
    };
    let ok = within_lease(store, &ctx.job, |store| match sent {
        Ok(response) => {
            let done = end(EffectState::Done, response, output);
            store.finish_effect_on(&done, seen, ctx.now())
        }
        Err(Failure::NotSent(_)) => {
            store.release_effect_on(key, &ctx.job, ctx.token.get(), seen, ctx.now())
        }
        Err(Failure::Lost(reason)) => {
            let unknown = end(EffectState::Unknown, reason, None);
            store.finish_effect_on(&unknown, seen, ctx.now())
        }
    })?;
    fault::point(fault::Point::AfterDone);
    Ok(Input::Finished(ok))
}

/// Pause between tries to record an outcome.
const RECORD_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs `write` until it succeeds or the job's lease has run out (a locked database, a full
/// disk); at least once. The lease's time left is read on the database's clock and counted down
/// on ours. The lease is read only after a failure: in WAL mode
/// a reader is not blocked by another connection's write lock. A fenced answer (`Ok(false)`)
/// is an answer, not a failure.
fn within_lease(
    store: &mut Store,
    job: &exactly_words::JobName,
    mut write: impl FnMut(&mut Store) -> Result<bool>,
) -> Result<bool> {
    // When the lease ends, on our monotonic clock (its time left read on the database's).
    let mut until: Option<Option<std::time::Instant>> = None;
    loop {
        match write(store) {
            Ok(v) => return Ok(v),
            Err(e) => {
                let until = *until.get_or_insert_with(|| {
                    crate::lease::get_with_left(store, job)
                        .ok()
                        .flatten()
                        .map(|(_, left)| crate::lease::ends_at(left))
                });
                if until.is_none_or(|u| std::time::Instant::now() >= u) {
                    return Err(e);
                }
                std::thread::sleep(RECORD_RETRY_PAUSE);
            }
        }
    }
}

/// Who sends for `att`, as the ledger records it.
fn sent_by(att: &Attempt) -> SentBy<'_> {
    SentBy {
        attempt: &att.attempt,
        sender: att.sender.as_deref(),
    }
}

/// Runs one effect under the ledger's guard: drives an [`Attempt`] to its end. See [`Outcome`]
/// for the ways it ends.
pub fn run(store: &mut Store, ctx: &Ctx, spec: &Spec, action: &mut dyn Effect) -> Result<Outcome> {
    Ok(run_found(store, ctx, spec, action)?.0)
}

/// [`run`], with the `done` row a suppressed duplicate was found on ([`Attempt::found`]): a
/// caller replaying the first answer reads the ledger row once, not again after the run.
pub fn run_found(
    store: &mut Store,
    ctx: &Ctx,
    spec: &Spec,
    action: &mut dyn Effect,
) -> Result<(Outcome, Option<LedgerRow>)> {
    // The sender's process group exists before the row can name it.
    let group = action.sender_group();
    let identity =
        exactly_words::sender::Identity::this_process(group).in_cage(action.sender_cage());
    let mut att = Attempt::new(ctx, spec, &attempt_id())?.with_sender(&identity.encode());
    let mut io = att.start();
    loop {
        let done = match execute(store, &att, &io, action) {
            // It was sent (or tried), and what happened cannot be written down.
            Err(e) => match &io {
                Io::Finish { sent, .. } => {
                    let out = Outcome::Unrecorded {
                        key: att.key.clone(),
                        ran: match sent {
                            Ok(_) => "it exited 0".into(),
                            Err(Failure::NotSent(r)) | Err(Failure::Lost(r)) => r.clone(),
                        },
                        reason: e.to_string(),
                    };
                    return Ok((out, None));
                }
                _ => return Err(e),
            },
            Ok(d) => d,
        };
        match done {
            Some(input) => io = att.step(input),
            None => {
                if let Io::End(out) = io {
                    if let Outcome::Unresolved { key, state, reason } = &out {
                        // A retry that met a send in flight: counted, for `exactly doctor`. Best
                        // effort: the outcome (exit 5) stands whether or not it is counted.
                        if state == EffectState::Submitted.as_str() {
                            let _counted = store
                                .record_retry_in_flight(
                                    &ctx.job,
                                    key,
                                    ctx.token.get(),
                                    reason,
                                    ctx.now(),
                                )
                                .is_ok();
                        }
                    }
                    return Ok((out, att.found.take()));
                }
            }
        }
    }
}

/// An observer's verdict on an open effect, and the run that sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    /// The effect key of the effect observed.
    pub effect_key: exactly_words::EffectKey,
    /// The run that sent it.
    pub run_id: String,
    /// What the observer said.
    pub verdict: Observation,
}

/// Runs a recorded observer on every open effect of a job (the runner does this before the
/// job's next run); each verdict applies only to the row version it observed, and a send still
/// in flight is left alone. Returns (effect key, verdict) pairs of the verdicts applied.
pub fn settle_open(store: &mut Store, job: &exactly_words::JobName) -> Result<Vec<Settled>> {
    settle_open_with(store, job, observe_with)
}

/// [`settle_open`] with `observe(cmd, effect_key, env)` running each observer (the scheduler
/// bounds it with [`observe_within`](super::observe_within)). `env` is what the command that
/// recorded the effect had — `EXACTLY_JOB`, and the `EXACTLY_RUN_ID` and `EXACTLY_SCHEDULED_AT`
/// of its run — so an observer that names its firing asks about that firing, not about none.
pub fn settle_open_with(
    store: &mut Store,
    job: &exactly_words::JobName,
    mut observe: impl FnMut(&str, &exactly_words::EffectKey, &[(String, String)]) -> Observation,
) -> Result<Vec<Settled>> {
    let open = store.open_effects_of(job)?;
    let mut out = Vec::new();
    for row in open {
        // An observer that is not a command (`exactly mcp`'s tool) is asked by its program.
        let Some(cmd) = row.observe_cmd.clone().filter(|c| observer_is_command(c)) else {
            continue;
        };
        let who = if row.state == EffectState::Submitted {
            sender(&row)
        } else {
            Sender::Gone
        };
        if who == Sender::Alive {
            continue;
        }
        let mut env = vec![
            ("EXACTLY_JOB".to_string(), job.to_string()),
            ("EXACTLY_RUN_ID".to_string(), row.run_id.clone()),
        ];
        if let Some(slot) = store.run_slot(&row.run_id)? {
            env.push(("EXACTLY_SCHEDULED_AT".to_string(), slot));
        }
        let key = exactly_words::EffectKey::from(row.effect_key.as_str());
        let verdict = observe(&cmd, &key, &env);
        let (res, words) = match &verdict {
            Observation::Happened(r) => (Some(Resolution::Happened), r.clone().unwrap_or_default()),
            Observation::NotHappened => (Some(Resolution::NotHappened), String::new()),
            Observation::CantTell(w) => (None, w.clone()),
        };
        let actor = exactly_words::actor();
        let observed = Observed {
            verdict: res,
            words: &words,
            fence: None,
            lease_check: who != Sender::Gone,
            actor: &actor,
        };
        let applied =
            store.observe_verdict_on(&row.effect_key, &observed, &row.seen(), time::now())?;
        if matches!(applied, Verdict::Applied { .. }) {
            out.push(Settled {
                effect_key: key,
                run_id: row.run_id,
                verdict,
            });
        }
    }
    Ok(out)
}

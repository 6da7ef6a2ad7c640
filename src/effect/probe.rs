//! A probe: a job's latest `done` effect attempted again on purpose, through the ledger's guard
//! — the same effect key, the job's current fencing token — so that a duplicate is seen
//! suppressed and the suppressed counter moves ("if this is always zero, your dedupe is
//! untested: inject a duplicate on purpose and watch it move").
//!
//! A probe never sends. It runs no command and no observer, and it reserves with `claimed`
//! only, never `submitted` (which says a request is about to leave). When the ledger reserves
//! the key for it, or would let it take the row over, dedupe is broken: the probe says so and
//! releases at once what it reserved. Its result is recorded as a `probe` event.
use super::machine::{Attempt, Io};
use super::{attempt_id, Ctx, Input, Outcome, Spec};
use crate::store::ProbeEvent;
use crate::store::Store;
use crate::store::{Begin, NewEffect, Seen};
use exactly_words::sanitize::inert;
use exactly_words::sender::Sender;
use exactly_words::state::EffectState;
use exactly_words::{EffectKey, JobName, Result, Token};

/// What the ledger did with a probe's attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum ProbeVerdict {
    /// The ledger found the key done and suppressed the duplicate (counted as any other).
    Suppressed,
    /// The ledger would have let the attempt go on to send: dedupe is broken. Nothing was sent.
    DedupeBroken {
        /// What the ledger did, in words.
        how: String,
        /// Why a reservation of the probe's is left in the ledger (`claimed`, nothing sent);
        /// None when nothing of the probe's is left.
        left: Option<String>,
    },
    /// The attempt ended another way (a newer token holds the job, the row moved on
    /// meanwhile): no verdict, in these words.
    NoVerdict(String),
}

/// A probe that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// The job probed.
    pub job: JobName,
    /// The effect attempted again: the job's latest `done` effect.
    pub effect_key: EffectKey,
    /// When it was done (the row's last change).
    pub done_at: String,
    /// The job's fencing token the attempt carried (its current one).
    pub token: Token,
    /// What the ledger did.
    pub verdict: ProbeVerdict,
    /// The job's all-time count of suppressed duplicates before the probe.
    pub suppressed_before: u64,
    /// The same count after it.
    pub suppressed_after: u64,
}

/// How a probe ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Probed {
    /// Nothing to probe (no `done` effect, no lease row to attempt under), in these words.
    Nothing(String),
    /// The probe ran.
    Ran(Probe),
}

impl Probed {
    /// The CLI's exit code: 0 when the duplicate was suppressed, 1 otherwise (dedupe broken,
    /// nothing to probe, no verdict).
    pub fn exit_code(&self) -> i32 {
        match self {
            Probed::Ran(Probe {
                verdict: ProbeVerdict::Suppressed,
                ..
            }) => 0,
            _ => 1,
        }
    }

    /// Whether the ledger suppressed the duplicate.
    pub fn suppressed(&self) -> bool {
        self.exit_code() == 0
    }

    /// One sentence for the CLI and the dashboard's status line.
    pub fn describe(&self) -> String {
        let p = match self {
            Probed::Nothing(why) => return format!("nothing to probe: {why}"),
            Probed::Ran(p) => p,
        };
        // The verdict first: a status line cut at the screen's edge keeps it.
        let what = format!(
            "probe of job {}'s effect {} (done {}) under token {}",
            inert(&p.job),
            p.effect_key,
            inert(&p.done_at),
            p.token
        );
        match &p.verdict {
            ProbeVerdict::Suppressed => format!(
                "duplicate suppressed, nothing sent: suppressed {} → {}; {what}",
                p.suppressed_before, p.suppressed_after
            ),
            ProbeVerdict::DedupeBroken { how, left } => format!(
                "dedupe broken: {}; nothing sent; {}; {what}",
                inert(how),
                match left {
                    None => "nothing of the probe's is left in the ledger".to_string(),
                    Some(why) => inert(why),
                }
            ),
            ProbeVerdict::NoVerdict(why) => format!("no verdict: {}; {what}", inert(why)),
        }
    }
}

/// The detail of a `probe` event whose duplicate was suppressed; any other is an alert.
pub const PROBE_SUPPRESSED: &str = "suppressed: the ledger holds it done";

impl ProbeVerdict {
    /// The probe event's detail.
    fn detail(&self) -> String {
        match self {
            ProbeVerdict::Suppressed => PROBE_SUPPRESSED.into(),
            ProbeVerdict::DedupeBroken { how, left } => format!(
                "dedupe broken: {how}; nothing sent; {}",
                left.as_deref().unwrap_or("released")
            ),
            ProbeVerdict::NoVerdict(why) => format!("no verdict: {why}"),
        }
    }
}

/// Probes `job`: attempts its latest `done` effect again under the job's current fencing token,
/// as `by`, sending nothing (see the module's words). The duplicate, when suppressed, is
/// counted as any other; the result is recorded as a `probe` event.
pub fn probe(store: &mut Store, job: &JobName, by: &str) -> Result<Probed> {
    let Some(row) = store.latest_done_effect(job)? else {
        return Ok(Probed::Nothing(format!(
            "job {} has no done effect",
            inert(job)
        )));
    };
    let Some(lease) = crate::lease::get(store, job)? else {
        return Ok(Probed::Nothing(format!(
            "job {} has no lease row, so no fencing token to attempt under",
            inert(job)
        )));
    };
    let token = Token::from(lease.fencing_token);
    let key = EffectKey::from(row.effect_key.as_str());
    let now = store.now();
    let before = store.suppressed_of(job)?;
    let ctx = Ctx::new(job, token).at(now).by(by);
    let ctx = Ctx {
        run_id: format!("probe-{}", ctx.run_id),
        ..ctx
    };
    let spec = Spec {
        action: row.action_id.clone().unwrap_or_default(),
        target: row.target_id.clone().unwrap_or_default(),
        ..Spec::default()
    };
    let digest = row.input_digest.clone().unwrap_or_default();
    let mut att = Attempt::for_row(&ctx, &spec, key.clone(), &digest, &attempt_id());
    let verdict = attempt(store, &mut att, &digest)?;
    let after = store.suppressed_of(job)?;
    store.record_probe(
        &ProbeEvent {
            key: &key,
            job,
            token: token.get(),
            actor: by,
            detail: &verdict.detail(),
        },
        now,
    )?;
    Ok(Probed::Ran(Probe {
        job: job.clone(),
        effect_key: key,
        done_at: row.updated_at,
        token,
        verdict,
        suppressed_before: before,
        suppressed_after: after,
    }))
}

/// Drives the probe's attempt through the step machine until the ledger has answered.
fn attempt(store: &mut Store, att: &mut Attempt, digest: &str) -> Result<ProbeVerdict> {
    let (key, ctx) = (att.key.clone(), att.ctx.clone());
    let now = ctx.now();
    // Our own `claimed` row, if the ledger reserved the key for us.
    let mut reserved: Option<Seen> = None;
    // The state the row was found in, when one held the key.
    let mut found: Option<EffectState> = None;
    let mut io = att.start();
    loop {
        let input = match &io {
            Io::Begin => {
                let new = NewEffect {
                    effect_key: &key,
                    job_key: &ctx.job,
                    run_id: &ctx.run_id,
                    token: ctx.token.get(),
                    terms_shown: None,
                    action_id: &att.spec.action,
                    target_id: &att.spec.target,
                    input_digest: digest,
                    input_fields: &att.fields,
                    observe_cmd: None,
                };
                // Reserve only: a probe never records `submitted`, a send about to leave.
                let begun = store.begin_effect(&new, now)?;
                match &begun {
                    Begin::Claimed(seen) => reserved = Some(seen.clone()),
                    Begin::Existing(row, _) => found = Some(row.state.clone()),
                    _ => {}
                }
                Input::Began(begun, Sender::Unknown)
            }
            Io::Duplicate { detail } => {
                let detail = format!("probe: {detail}");
                store.record_duplicate(&key, &ctx.job, Some(ctx.token.get()), &detail, now)?;
                Input::Counted
            }
            // The ledger would let the attempt go on to send.
            Io::Submit { .. } => {
                let Some(mine) = reserved.take() else {
                    let state = found.map_or_else(|| "claimed".into(), |s| s.to_string());
                    return Ok(ProbeVerdict::DedupeBroken {
                        how: format!(
                            "its row is {state} again, not done: the next attempt would take \
                             it over and send"
                        ),
                        left: None,
                    });
                };
                let left =
                    match store.release_effect_on(&key, &ctx.job, ctx.token.get(), &mine, now) {
                        Ok(true) => None,
                        Ok(false) => Some(
                            "its reservation could not be released (a newer token holds the job): \
                         the row stays claimed"
                                .to_string(),
                        ),
                        Err(e) => Some(format!("its reservation could not be released: {e}")),
                    };
                return Ok(ProbeVerdict::DedupeBroken {
                    how: "the ledger reserved the effect key again although it holds it done"
                        .into(),
                    left,
                });
            }
            Io::Look => {
                let state = found.map_or_else(|| "open".into(), |s| s.to_string());
                return Ok(ProbeVerdict::NoVerdict(format!(
                    "its row is {state} now, not done; a probe runs no observer"
                )));
            }
            Io::End(Outcome::DuplicateSuppressed { .. }) => return Ok(ProbeVerdict::Suppressed),
            Io::End(Outcome::Fenced { .. }) => {
                return Ok(ProbeVerdict::NoVerdict(
                    "fenced: a newer token took the job meanwhile".into(),
                ))
            }
            Io::End(Outcome::Cancelled { .. }) => {
                return Ok(ProbeVerdict::NoVerdict(
                    "its row is cancelled now, not done".into(),
                ))
            }
            Io::End(Outcome::Unresolved { reason, .. }) => {
                return Ok(ProbeVerdict::NoVerdict(reason.clone()))
            }
            // Steps after a reservation or an observation, which a probe stops before.
            other => {
                return Ok(ProbeVerdict::NoVerdict(format!(
                    "the attempt stopped at {other:?}"
                )))
            }
        };
        io = att.step(input);
    }
}

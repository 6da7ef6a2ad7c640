//! The effect lifecycle: `claimed` → `submitted` (committed before the request leaves) → `done`
//! or `unknown`. A second attempt learns what happened from the unique violation and branches
//! on the row's state; `submitted`/`unknown` are settled by an observer before any retry.
//!
//! The protocol is a step machine ([`Attempt`]) that does no I/O: it asks for one store call or
//! far-side call at a time ([`Io`]) and takes the answer ([`Input`]). [`run`] drives it for the
//! CLI, the scheduler and the library; tests drive many attempts in any interleaving. Every
//! transition it asks for is a compare-and-set on the row version it last read ([`Seen`]), so a
//! verdict applies only to the attempt it observed, and a send in flight is never settled.
use crate::fault;
use crate::key;
use crate::state::EffectState;
use crate::store::{Begin, NewEffect, Resolution, Seen, Store, Submit, Verdict};
use crate::wrapped::{self, LeaseWatch, NotStarted, Output};
use crate::Result;
use serde_json::{Map, Value};
use std::process::{Command, Stdio};

/// Who is acting: the job, the fencing token of its lease, and the run.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub job: String,
    pub token: i64,
    pub run_id: String,
}

impl Ctx {
    pub fn new(job: &str, token: i64) -> Ctx {
        Ctx {
            job: job.to_string(),
            token,
            run_id: format!("{job}-{token}-{}", std::process::id()),
        }
    }
    pub fn with_run_id(mut self, run_id: &str) -> Ctx {
        self.run_id = run_id.to_string();
        self
    }
}

/// What the effect is about: action, target and the inputs that change its consequence.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    pub action: String,
    pub target: String,
    pub inputs: Map<String, Value>,
    pub terms: Option<String>,
    pub needs_approval: bool,
    /// A shell command recorded with the effect so a later run can settle it.
    pub observe_cmd: Option<String>,
}

impl Spec {
    pub fn new(action: &str, target: &str) -> Spec {
        Spec {
            action: action.to_string(),
            target: target.to_string(),
            ..Default::default()
        }
    }
    pub fn input(mut self, k: &str, v: impl Into<Value>) -> Spec {
        self.inputs.insert(k.to_string(), v.into());
        self
    }
    pub fn terms(mut self, t: &str) -> Spec {
        self.terms = Some(t.to_string());
        self
    }
    pub fn needs_approval(mut self, yes: bool) -> Spec {
        self.needs_approval = yes;
        self
    }
    pub fn input_digest(&self) -> String {
        key::input_digest(&self.inputs)
    }
    /// The effect key (DESIGN.md's contract). See [`Spec::checked_key`].
    pub fn key(&self) -> String {
        key::effect_key(&self.action, &self.target, &self.input_digest())
    }
    /// The effect key, refusing (exit 2) a spec whose joined string could be read two ways:
    /// an empty or `|`-holding action, an empty target, an empty input key.
    pub fn checked_key(&self) -> Result<String> {
        key::check(&self.action, &self.target, &self.inputs)?;
        Ok(self.key())
    }
}

/// Why a send did not produce an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Definitely nothing was sent (exit 75): the reservation is released.
    NotSent(String),
    /// The request may have left: the effect becomes `unknown`.
    Lost(String),
}

/// The far side's answer to "did this effect happen?".
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    Happened(Option<String>),
    NotHappened,
    CantTell(String),
}

/// The effect itself: `perform` sends it (passing the effect key on as the far side's
/// idempotency key where it has one), `observe` asks the far side whether it happened.
pub trait Effect {
    fn perform(&mut self, effect_key: &str) -> std::result::Result<String, Failure>;
    fn observe(&mut self, effect_key: &str) -> Observation;
    /// The response as the bytes the last `perform` produced and how many there were in all
    /// (a command's stdout), when the action has them; kept with the effect so a duplicate
    /// replays them.
    fn output(&self) -> Option<&Output> {
        None
    }
}

/// Every way an attempt can end. Only the first sends anything.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Sent now; the answer is recorded.
    Done { key: String, response: String },
    /// Already done (now or, per the observer, earlier): nothing sent.
    DuplicateSuppressed {
        key: String,
        response: Option<String>,
    },
    /// A higher fencing token exists: stop quietly, do not retry.
    Fenced { key: String },
    /// Waiting for a person: nothing sent.
    AwaitingApproval { key: String },
    /// An earlier attempt may have sent it and nobody can tell yet: nothing sent.
    Unresolved {
        key: String,
        state: String,
        reason: String,
    },
    /// We sent and lost the answer: the effect is `unknown` until resolved.
    Unknown { key: String, reason: String },
    /// Denied or resolved "never retry".
    Cancelled { key: String },
    /// The action promised nothing was sent; the reservation was released.
    NotSent { key: String, reason: String },
    /// The action ran (`ran` says how it ended) but its outcome could not be recorded (a
    /// locked database, a full disk) within the lease: the effect stays `submitted` until an
    /// observer or an operator settles it.
    Unrecorded {
        key: String,
        ran: String,
        reason: String,
    },
    /// Too little of the lease was left to send under it (or it was released): nothing sent.
    LeaseEnding { key: String, until: Option<String> },
}

impl Outcome {
    pub fn key(&self) -> &str {
        match self {
            Outcome::Done { key, .. }
            | Outcome::DuplicateSuppressed { key, .. }
            | Outcome::Fenced { key }
            | Outcome::AwaitingApproval { key }
            | Outcome::Unresolved { key, .. }
            | Outcome::Unknown { key, .. }
            | Outcome::Cancelled { key }
            | Outcome::NotSent { key, .. }
            | Outcome::Unrecorded { key, .. }
            | Outcome::LeaseEnding { key, .. } => key,
        }
    }

    /// The CLI's exit code (DESIGN.md's contract).
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Done { .. } | Outcome::DuplicateSuppressed { .. } => 0,
            Outcome::Fenced { .. } | Outcome::LeaseEnding { .. } => 3,
            Outcome::AwaitingApproval { .. } => 4,
            Outcome::Unresolved { .. } => 5,
            Outcome::Unknown { .. } | Outcome::Unrecorded { .. } => 6,
            Outcome::Cancelled { .. } => 7,
            Outcome::NotSent { .. } => 75,
        }
    }
}

/// `host:pid` of this attempt, recorded with `submitted` so a restart can tell a dead sender
/// from one still sending. The host is [`crate::host`] (`EXACTLY_HOST`, else the host name).
pub fn attempt_id() -> String {
    format!("{}:{}", crate::host(), std::process::id())
}

/// What can be known about the process that moved a row to `submitted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// A live process on this host (other than us): it may be sending right now.
    Alive,
    /// This host, and its process is gone (the command it ran died with it): nothing more
    /// will leave on its behalf.
    Gone,
    /// Another host, ourselves, or no attempt recorded: only its lease can tell.
    Unknown,
}

/// Looks the sender of a `submitted` row up by its attempt id (`host:pid`).
pub fn sender(attempt: Option<&str>) -> Sender {
    let Some((host, pid)) = attempt.and_then(|a| a.rsplit_once(':')) else {
        return Sender::Unknown;
    };
    let Ok(pid) = pid.parse::<i32>() else {
        return Sender::Unknown;
    };
    if host != crate::host() || pid as u32 == std::process::id() || pid <= 0 {
        return Sender::Unknown;
    }
    // SAFETY: signal 0 only checks that the process exists.
    if unsafe { libc::kill(pid, 0) == 0 } {
        Sender::Alive
    } else {
        Sender::Gone
    }
}

/// One step of an attempt for its driver to perform; its answer goes back in as an [`Input`].
/// The attempt itself does no I/O (the sans-IO style of `quinn-proto`): [`run`] drives it for
/// the CLI, the scheduler and the library, and tests drive many attempts in any order.
#[derive(Debug, Clone, PartialEq)]
pub enum Io {
    /// Reserve the key (and, needing no approval, submit it in the same transaction), or read
    /// the row that holds it ([`Store::begin_and_submit_effect`], [`Store::begin_effect`]).
    Begin,
    /// Ask the far side whether the effect happened ([`Effect::observe`]).
    Look,
    /// Record the observer's verdict on the row version it looked at
    /// ([`Store::observe_verdict_on`]).
    Verdict {
        observation: Observation,
        seen: Seen,
        lease_check: bool,
    },
    /// Move `claimed` → `submitted`, a compare-and-set on `seen` ([`Store::submit_effect_on`]).
    Submit { seen: Seen },
    /// Send it ([`Effect::perform`]).
    Send,
    /// Record the answer ([`Store::finish_effect_on`], or [`Store::release_effect_on`] for nothing
    /// sent) on the row as our `submitted` left it.
    Finish {
        sent: std::result::Result<String, Failure>,
        seen: Seen,
    },
    /// Count a suppressed duplicate ([`Store::record_duplicate`]), then end.
    Duplicate { detail: String },
    /// The attempt is over.
    End(Outcome),
}

/// The answer to an [`Io`].
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Began(Begin, Sender),
    Looked(Observation),
    Judged(Verdict),
    Submitted(Submit),
    Sent(std::result::Result<String, Failure>),
    Finished(bool),
    Counted,
}

/// How often an attempt re-reads a row that moved under it before it gives up (exit 5).
const REREADS: u8 = 3;

/// One attempt at one effect, as a step machine: [`Attempt::start`] gives the first [`Io`],
/// [`Attempt::step`] takes each answer and gives the next, until [`Io::End`].
#[derive(Debug, Clone)]
pub struct Attempt {
    key: String,
    digest: String,
    ctx: Ctx,
    spec: Spec,
    attempt: String,
    /// What the last observation was about, so its verdict names that row version.
    looked_at: Option<(Seen, bool)>,
    /// Our `submitted` row, for the compare-and-set that records the answer.
    submitted: Option<Seen>,
    /// The outcome a counted duplicate ends with.
    duplicate: Option<Outcome>,
    rereads: u8,
    last: Io,
}

impl Attempt {
    /// A new attempt; `attempt` is its id (`host:pid`, see [`attempt_id`]). Refuses a spec whose
    /// key could be read two ways.
    pub fn new(ctx: &Ctx, spec: &Spec, attempt: &str) -> Result<Attempt> {
        let key = spec.checked_key()?;
        Ok(Attempt {
            key,
            digest: spec.input_digest(),
            ctx: ctx.clone(),
            spec: spec.clone(),
            attempt: attempt.to_string(),
            looked_at: None,
            submitted: None,
            duplicate: None,
            rereads: 0,
            last: Io::Begin,
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    /// The step the driver must perform now.
    pub fn pending(&self) -> &Io {
        &self.last
    }

    /// The first step.
    pub fn start(&mut self) -> Io {
        self.last = Io::Begin;
        self.last.clone()
    }

    /// Takes the answer to the pending step; returns the next.
    pub fn step(&mut self, input: Input) -> Io {
        self.last = self.next(input);
        self.last.clone()
    }

    fn end(&self, out: Outcome) -> Io {
        Io::End(out)
    }

    fn unresolved(&self, state: &str, reason: String) -> Io {
        self.end(Outcome::Unresolved {
            key: self.key.clone(),
            state: state.to_string(),
            reason,
        })
    }

    /// The row moved under us: read it again (a bounded number of times).
    fn reread(&mut self, state: &str, why: &str) -> Io {
        if self.rereads >= REREADS {
            return self.unresolved(
                state,
                format!("the ledger row kept moving under this attempt ({why})"),
            );
        }
        self.rereads += 1;
        self.looked_at = None;
        Io::Begin
    }

    fn duplicate(&mut self, detail: &str, response: Option<String>) -> Io {
        self.duplicate = Some(Outcome::DuplicateSuppressed {
            key: self.key.clone(),
            response,
        });
        Io::Duplicate {
            detail: detail.to_string(),
        }
    }

    fn in_flight(&self, attempt: Option<&str>, since: &str, until: Option<&str>) -> Io {
        let who = attempt.unwrap_or("an attempt that recorded no id");
        let lease = until
            .map(|u| format!("; its lease runs until {u}"))
            .unwrap_or_default();
        self.unresolved(
            EffectState::Submitted.as_str(),
            format!("in flight: attempt {who} has been sending it since {since}{lease}"),
        )
    }

    fn next(&mut self, input: Input) -> Io {
        let key = self.key.clone();
        match input {
            Input::Began(Begin::Fenced, _) => self.end(Outcome::Fenced { key }),
            Input::Began(Begin::Claimed(seen), _) => Io::Submit { seen },
            // Reserved and submitted in one transaction: ours to send.
            Input::Began(Begin::Submitted(seen), _) => {
                self.submitted = Some(seen);
                Io::Send
            }
            Input::Began(Begin::Existing(row, lease), sender) => match &row.state {
                EffectState::Done => self.duplicate("already done", row.response.clone()),
                EffectState::Cancelled => self.end(Outcome::Cancelled { key }),
                // Nothing was sent: the compare-and-set takes the row over.
                EffectState::Claimed => Io::Submit { seen: row.seen() },
                EffectState::Submitted => {
                    let since = row.updated_at.as_str();
                    match sender {
                        Sender::Alive => self.in_flight(row.attempt.as_deref(), since, None),
                        Sender::Unknown if lease.live => {
                            self.in_flight(row.attempt.as_deref(), since, lease.until.as_deref())
                        }
                        _ => {
                            self.looked_at = Some((row.seen(), sender != Sender::Gone));
                            Io::Look
                        }
                    }
                }
                EffectState::Unknown => {
                    self.looked_at = Some((row.seen(), false));
                    Io::Look
                }
                EffectState::Other(other) => self.unresolved(
                    other,
                    format!(
                        "the ledger row is in unrecognised state {:?}",
                        crate::sanitize::inert(other)
                    ),
                ),
            },
            Input::Looked(observation) => {
                let Some((seen, lease_check)) = self.looked_at.clone() else {
                    return self.reread("?", "an observation without a row");
                };
                Io::Verdict {
                    observation,
                    seen,
                    lease_check,
                }
            }
            Input::Judged(v) => {
                let observation = match &self.last {
                    Io::Verdict { observation, .. } => observation.clone(),
                    _ => Observation::CantTell(String::new()),
                };
                match v {
                    Verdict::Applied { seen, .. } => match observation {
                        Observation::Happened(resp) => {
                            self.duplicate("observer: already happened", resp)
                        }
                        Observation::NotHappened => Io::Submit { seen },
                        Observation::CantTell(why) => self.unresolved(
                            seen.state.as_str(),
                            format!(
                                "the observer could not tell ({why}); resolve it with `exactly resolve`"
                            ),
                        ),
                    },
                    Verdict::Stale { state } => {
                        self.reread(state.as_str(), "an observer's verdict about it went stale")
                    }
                    Verdict::NotOpen { state, .. } => {
                        self.reread(state.as_str(), "it was settled by someone else meanwhile")
                    }
                    Verdict::NotFound => self.reread("released", "it was released meanwhile"),
                    Verdict::InFlight {
                        attempt,
                        since,
                        until,
                        ..
                    } => self.in_flight(attempt.as_deref(), &since, until.as_deref()),
                    Verdict::Fenced => self.end(Outcome::Fenced { key }),
                }
            }
            Input::Submitted(s) => match s {
                Submit::Won { seen, .. } => {
                    self.submitted = Some(seen);
                    Io::Send
                }
                Submit::Fenced => self.end(Outcome::Fenced { key }),
                Submit::NotApproved => self.end(Outcome::AwaitingApproval { key }),
                Submit::Denied => self.end(Outcome::Cancelled { key }),
                Submit::LeaseEnding { until } => self.end(Outcome::LeaseEnding { key, until }),
                Submit::Lost(row) => match &row.state {
                    EffectState::Done => {
                        self.duplicate("done by a concurrent attempt", row.response.clone())
                    }
                    EffectState::Cancelled => self.end(Outcome::Cancelled { key }),
                    state => {
                        let state = state.to_string();
                        self.reread(&state, "a concurrent attempt moved it first")
                    }
                },
            },
            Input::Sent(sent) => Io::Finish {
                sent,
                seen: self.submitted.clone().unwrap_or_default(),
            },
            Input::Finished(ok) => {
                let sent = match &self.last {
                    Io::Finish { sent, .. } => sent.clone(),
                    _ => Err(Failure::Lost(String::new())),
                };
                if !ok {
                    return self.end(Outcome::Fenced { key });
                }
                self.end(match sent {
                    Ok(response) => Outcome::Done { key, response },
                    Err(Failure::NotSent(reason)) => Outcome::NotSent { key, reason },
                    Err(Failure::Lost(reason)) => Outcome::Unknown { key, reason },
                })
            }
            Input::Counted => {
                let out = self
                    .duplicate
                    .take()
                    .unwrap_or(Outcome::DuplicateSuppressed {
                        key,
                        response: None,
                    });
                self.end(out)
            }
        }
    }
}

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
        Io::Begin => {
            let new = NewEffect {
                effect_key: key,
                job_key: &ctx.job,
                run_id: &ctx.run_id,
                token: ctx.token,
                terms_shown: att.spec.terms.as_deref(),
                action_id: &att.spec.action,
                target_id: &att.spec.target,
                input_digest: &att.digest,
                observe_cmd: att.spec.observe_cmd.as_deref(),
            };
            // With no approval asked for, reserve and submit in one transaction when the key
            // has no row yet (one commit fewer); the store falls back to `claimed` otherwise.
            // (A fault at `after_claim` needs the moment between the two commits to stop at.)
            let begin = if att.spec.needs_approval || fault::armed("after_claim") {
                store.begin_effect(&new)?
            } else {
                store.begin_and_submit_effect(&new, &att.attempt)?
            };
            if matches!(begin, Begin::Submitted(_)) {
                fault::point("after_submitted");
            }
            let who = match &begin {
                Begin::Existing(row, _) if row.state == EffectState::Submitted => {
                    sender(row.attempt.as_deref())
                }
                _ => Sender::Unknown,
            };
            Input::Began(begin, who)
        }
        Io::Look => Input::Looked(action.observe(key)),
        Io::Verdict {
            observation,
            seen,
            lease_check,
        } => {
            let (res, words) = match observation {
                Observation::Happened(r) => {
                    (Some(Resolution::Happened), r.clone().unwrap_or_default())
                }
                Observation::NotHappened => (Some(Resolution::NotHappened), String::new()),
                Observation::CantTell(w) => (None, w.clone()),
            };
            let fence = Some((ctx.job.as_str(), ctx.token));
            Input::Judged(store.observe_verdict_on(key, res, &words, fence, seen, *lease_check)?)
        }
        Io::Submit { seen } => {
            fault::point("after_claim");
            let s = store.submit_effect_on(
                key,
                &ctx.job,
                &ctx.run_id,
                ctx.token,
                &att.attempt,
                att.spec.needs_approval,
                att.spec.terms.as_deref(),
                seen,
            )?;
            if matches!(s, Submit::Won { .. }) {
                fault::point("after_submitted");
            }
            Input::Submitted(s)
        }
        Io::Send => {
            let sent = action.perform(key);
            fault::point("after_send");
            Input::Sent(sent)
        }
        Io::Finish { sent, seen } => {
            let output = action.output().map(|o| (o.kept.as_slice(), o.total));
            let ok = within_lease(store, &ctx.job, |store| match sent {
                Ok(response) => store.finish_effect_output_on(
                    key,
                    &ctx.job,
                    ctx.token,
                    EffectState::Done,
                    response,
                    seen,
                    output,
                ),
                Err(Failure::NotSent(_)) => store.release_effect_on(key, &ctx.job, ctx.token, seen),
                Err(Failure::Lost(reason)) => store.finish_effect_on(
                    key,
                    &ctx.job,
                    ctx.token,
                    EffectState::Unknown,
                    reason,
                    seen,
                ),
            })?;
            fault::point("after_done");
            Input::Finished(ok)
        }
        Io::Duplicate { detail } => {
            store.record_duplicate(key, &ctx.job, Some(ctx.token), detail)?;
            Input::Counted
        }
        Io::End(_) => return Ok(None),
    }))
}

/// Pause between tries to record an outcome.
const RECORD_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs `write` until it succeeds or the job's lease has run out by our clock (a locked
/// database, a full disk); at least once. The lease is read only after a failure: in WAL mode
/// a reader is not blocked by another connection's write lock. A fenced answer (`Ok(false)`)
/// is an answer, not a failure.
fn within_lease(
    store: &mut Store,
    job: &str,
    mut write: impl FnMut(&mut Store) -> Result<bool>,
) -> Result<bool> {
    let mut until: Option<Option<crate::time::Ts>> = None;
    loop {
        match write(store) {
            Ok(v) => return Ok(v),
            Err(e) => {
                let until = *until.get_or_insert_with(|| {
                    store
                        .lease(job)
                        .ok()
                        .flatten()
                        .and_then(|l| crate::time::parse(&l.lease_until))
                });
                if until.is_none_or(|u| crate::time::now() >= u) {
                    return Err(e);
                }
                std::thread::sleep(RECORD_RETRY_PAUSE);
            }
        }
    }
}

/// Runs one effect under the ledger's guard: drives an [`Attempt`] to its end. See [`Outcome`]
/// for the ways it ends.
pub fn run(store: &mut Store, ctx: &Ctx, spec: &Spec, action: &mut dyn Effect) -> Result<Outcome> {
    let mut att = Attempt::new(ctx, spec, &attempt_id())?;
    let mut io = att.start();
    loop {
        let done = match execute(store, &att, &io, action) {
            // It was sent (or tried), and what happened cannot be written down.
            Err(e) => match &io {
                Io::Finish { sent, .. } => {
                    return Ok(Outcome::Unrecorded {
                        key: att.key.clone(),
                        ran: match sent {
                            Ok(_) => "it exited 0".into(),
                            Err(Failure::NotSent(r)) | Err(Failure::Lost(r)) => r.clone(),
                        },
                        reason: e.to_string(),
                    })
                }
                _ => return Err(e),
            },
            Ok(d) => d,
        };
        match done {
            Some(input) => io = att.step(input),
            None => {
                if let Io::End(out) = io {
                    return Ok(out);
                }
            }
        }
    }
}

/// An observer's verdict on an open effect, and the run that sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub effect_key: String,
    pub run_id: String,
    pub verdict: Observation,
}

/// Runs a recorded observer on every open effect of a job (the runner does this before the
/// job's next run); each verdict applies only to the row version it observed, and a send still
/// in flight is left alone. Returns (effect key, verdict) pairs of the verdicts applied.
pub fn settle_open(store: &mut Store, job: &str) -> Result<Vec<Settled>> {
    settle_open_with(store, job, |cmd, key| observe_with(cmd, key, &[]))
}

/// [`settle_open`] with `observe(cmd, effect_key)` running each observer (the scheduler bounds
/// it with [`observe_within`]).
pub fn settle_open_with(
    store: &mut Store,
    job: &str,
    mut observe: impl FnMut(&str, &str) -> Observation,
) -> Result<Vec<Settled>> {
    let open = store.open_effects_of(job)?;
    let mut out = Vec::new();
    for row in open {
        let who = if row.state == EffectState::Submitted {
            sender(row.attempt.as_deref())
        } else {
            Sender::Gone
        };
        if who == Sender::Alive {
            continue;
        }
        let Some(cmd) = row.observe_cmd.clone() else {
            continue;
        };
        let verdict = observe(&cmd, &row.effect_key);
        let (res, words) = match &verdict {
            Observation::Happened(r) => (Some(Resolution::Happened), r.clone().unwrap_or_default()),
            Observation::NotHappened => (Some(Resolution::NotHappened), String::new()),
            Observation::CantTell(w) => (None, w.clone()),
        };
        let applied = store.observe_verdict_on(
            &row.effect_key,
            res,
            &words,
            None,
            &row.seen(),
            who != Sender::Gone,
        )?;
        if matches!(applied, Verdict::Applied { .. }) {
            out.push(Settled {
                effect_key: row.effect_key,
                run_id: row.run_id,
                verdict,
            });
        }
    }
    Ok(out)
}

/// An effect that is a command: exit 0 is done (stdout is the response), exit 75 promises
/// nothing was sent, anything else (or a signal) leaves it unknown. See [`crate::wrapped`] for
/// how it runs: streamed, in its own process group, signals forwarded, held to its lease.
pub struct CommandAction {
    pub argv: Vec<String>,
    pub observe_cmd: Option<String>,
    /// Extra environment for both the command and the observer.
    pub env: Vec<(String, String)>,
    /// The lease the command runs under; it is stopped once that lease has expired.
    pub lease: Option<LeaseWatch>,
    /// What the last `perform` wrote on stdout.
    pub output: Option<Output>,
}

impl CommandAction {
    pub fn new(argv: Vec<String>) -> CommandAction {
        CommandAction {
            argv,
            observe_cmd: None,
            env: Vec::new(),
            lease: None,
            output: None,
        }
    }
}

impl Effect for CommandAction {
    fn perform(&mut self, effect_key: &str) -> std::result::Result<String, Failure> {
        self.output = None;
        let Some((prog, args)) = self.argv.split_first() else {
            return Err(Failure::NotSent("no command given".into()));
        };
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("EXACTLY_EFFECT_KEY", effect_key);
        let ended = match wrapped::run(&mut cmd, self.lease.clone()) {
            Ok(e) => e,
            // It never started, so nothing left this machine.
            Err(NotStarted::Spawn(e)) => {
                return Err(Failure::NotSent(format!("cannot start {prog:?}: {e}")))
            }
            Err(NotStarted::LeaseGone(why)) => {
                return Err(Failure::NotSent(format!(
                    "{} before it started",
                    why.words().replace(", so the command was stopped", "")
                )))
            }
        };
        let response = String::from_utf8_lossy(&ended.output.kept)
            .trim_end()
            .to_string();
        self.output = Some(ended.output);
        let status = match ended.status {
            Ok(s) => s,
            Err(e) => return Err(Failure::Lost(format!("lost the command: {e}"))),
        };
        let code = status.code();
        if let Some(why) = ended.stopped {
            // Stopped mid-send: only its own promise makes it "not sent".
            return Err(if code == Some(75) {
                Failure::NotSent(format!("{}; it exited 75: nothing sent", why.words()))
            } else {
                Failure::Lost(why.words())
            });
        }
        let signalled = ended
            .forwarded
            .map(|s| format!(" after we forwarded signal {s}"))
            .unwrap_or_default();
        match code {
            Some(0) => Ok(response),
            Some(75) => Err(Failure::NotSent(
                "the command exited 75: nothing sent".into(),
            )),
            Some(c) => Err(Failure::Lost(format!("the command exited {c}{signalled}"))),
            None => {
                use std::os::unix::process::ExitStatusExt;
                Err(Failure::Lost(format!(
                    "the command was killed by signal {}{signalled}",
                    status.signal().unwrap_or(0)
                )))
            }
        }
    }

    fn observe(&mut self, effect_key: &str) -> Observation {
        match &self.observe_cmd {
            Some(cmd) => observe_with(cmd, effect_key, &self.env),
            None => Observation::CantTell("no --observe command was given".into()),
        }
    }

    fn output(&self) -> Option<&Output> {
        self.output.as_ref()
    }
}

/// A command we run dies with us: if we are killed mid-effect, an orphan must not go on to
/// send after a restart has already observed "not happened" and sent again.
fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// Runs an observer shell command: exit 0 happened, 1 did not happen, anything else can't tell.
pub fn observe_with(cmd: &str, effect_key: &str, env: &[(String, String)]) -> Observation {
    let out = die_with_parent(Command::new("sh").arg("-c").arg(cmd))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("EXACTLY_EFFECT_KEY", effect_key)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    match out {
        Ok(o) => match o.status.code() {
            Some(0) => {
                let s = String::from_utf8_lossy(&o.stdout).trim_end().to_string();
                Observation::Happened((!s.is_empty()).then_some(s))
            }
            Some(1) => Observation::NotHappened,
            Some(c) => Observation::CantTell(format!("observer exited {c}")),
            None => Observation::CantTell("observer was killed".into()),
        },
        Err(e) => Observation::CantTell(format!("cannot start observer: {e}")),
    }
}

/// [`observe_with`], bounded: an observer still running after `limit`, or when `stop` is set
/// (shutdown, a lost lease), is killed with its process group and the verdict is "can't tell".
pub fn observe_within(
    cmd: &str,
    effect_key: &str,
    env: &[(String, String)],
    limit: std::time::Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> Observation {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    let child = die_with_parent(Command::new("sh").arg("-c").arg(cmd))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("EXACTLY_EFFECT_KEY", effect_key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Observation::CantTell(format!("cannot start observer: {e}")),
    };
    let pgid = child.id() as i32;
    let reader = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = std::io::Read::read_to_end(
                &mut std::io::Read::take(&mut out, wrapped::RESPONSE_MAX as u64),
                &mut buf,
            );
            let _ = std::io::copy(&mut out, &mut std::io::sink());
            buf
        })
    });
    // A limit too far to represent is no limit.
    let deadline = Instant::now().checked_add(limit);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) => {}
            Err(e) => break Err(format!("lost the observer: {e}")),
        }
        let stopped = stop.load(std::sync::atomic::Ordering::SeqCst);
        if stopped || deadline.is_some_and(|d| Instant::now() >= d) {
            // SAFETY: a negative pid names the observer's own process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            break Err(if stopped {
                "observer stopped: its run is ending".to_string()
            } else {
                format!(
                    "observer timed out after {}",
                    crate::time::human_ms(limit.as_millis() as u64)
                )
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever it left behind holding our pipe goes with it.
    // SAFETY: as above; the group may already be empty.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let out = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    match status {
        Ok(s) => match s.code() {
            Some(0) => {
                let s = String::from_utf8_lossy(&out).trim_end().to_string();
                Observation::Happened((!s.is_empty()).then_some(s))
            }
            Some(1) => Observation::NotHappened,
            Some(c) => Observation::CantTell(format!("observer exited {c}")),
            None => Observation::CantTell("observer was killed".into()),
        },
        Err(why) => Observation::CantTell(why),
    }
}

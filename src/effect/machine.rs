//! The effect protocol as a step machine: no I/O, one store or far-side call asked for at a
//! time ([`Io`]), each answer taken back ([`Input`]).
use super::{Ctx, Failure, Observation, Outcome, Spec};
use crate::store::{Begin, Granted, Seen, Submit, Verdict};
use exactly_words::sender::Sender;
use exactly_words::state::EffectState;
use exactly_words::time::Ts;
use exactly_words::Result;

/// One step of an attempt for its driver to perform; its answer goes back in as an [`Input`].
/// The attempt itself does no I/O (the sans-IO style of `quinn-proto`): [`run`](super::run) drives
/// it for the CLI, the scheduler and the library, and tests drive many attempts in any order.
#[derive(Debug, Clone, PartialEq)]
pub enum Io {
    /// Reserve the key (and, needing no approval, submit it in the same transaction), or read
    /// the row that holds it (`Store::begin_and_submit_effect`, `Store::begin_effect`).
    Begin,
    /// Ask the far side whether the effect happened ([`Effect::observe`](super::Effect::observe)).
    Look,
    /// Record the observer's verdict on the row version it looked at
    /// (`Store::observe_verdict_on`).
    Verdict {
        /// What the far side said.
        observation: Observation,
        /// The row version it looked at.
        seen: Seen,
        /// Whether a live lease keeps the row in flight (false: its sender is known gone).
        lease_check: bool,
    },
    /// Move `claimed` → `submitted`, a compare-and-set on `seen` (`Store::submit_effect_on`).
    Submit {
        /// Our `claimed` row as we read it.
        seen: Seen,
    },
    /// Send it ([`Effect::perform`](super::Effect::perform)) within the lease granted.
    Send,
    /// Record the answer (`Store::finish_effect_on`, or `Store::release_effect_on` for nothing
    /// sent) on the row as our `submitted` left it.
    Finish {
        /// The far side's answer, or why there is none.
        sent: std::result::Result<String, Failure>,
        /// Our `submitted` row as we left it.
        seen: Seen,
    },
    /// Count a suppressed duplicate (`Store::record_duplicate`), then end.
    Duplicate {
        /// What the duplicate met, in words (recorded with its event).
        detail: String,
    },
    /// The attempt is over.
    End(Outcome),
}

/// The answer to an [`Io`].
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The answer to [`Io::Begin`], with what was found of an existing `submitted` row's sender.
    Began(Begin, Sender),
    /// The answer to [`Io::Look`]: what the far side said.
    Looked(Observation),
    /// The answer to [`Io::Verdict`].
    Judged(Verdict),
    /// The answer to [`Io::Submit`]: whether we may send.
    Submitted(Submit),
    /// The answer to [`Io::Send`]: the far side's answer, or why there is none.
    Sent(std::result::Result<String, Failure>),
    /// The answer to [`Io::Finish`]: false when a higher fencing token refused the write.
    Finished(bool),
    /// The answer to [`Io::Duplicate`]: counted.
    Counted,
}

/// How often an attempt re-reads a row that moved under it before it gives up (exit 5).
const REREADS: u8 = 3;

/// One attempt at one effect, as a step machine: [`Attempt::start`] gives the first [`Io`],
/// [`Attempt::step`] takes each answer and gives the next, until [`Io::End`].
#[derive(Debug, Clone)]
pub struct Attempt {
    pub(super) key: exactly_words::EffectKey,
    pub(super) digest: String,
    /// Each input's digest and what it was to this attempt ([`crate::key::input_fields`]).
    pub(super) fields: String,
    pub(super) ctx: Ctx,
    pub(super) spec: Spec,
    pub(super) attempt: String,
    /// The sender's identity recorded with `submitted` ([`crate::sender::Identity::encode`]).
    pub(super) sender: Option<String>,
    /// The lease our `submitted` was granted under: the send stops at its end.
    pub(super) granted: Option<Granted>,
    /// What the last observation was about, so its verdict names that row version.
    pub(super) looked_at: Option<(Seen, bool)>,
    /// Our `submitted` row, for the compare-and-set that records the answer.
    pub(super) submitted: Option<Seen>,
    /// The outcome a counted duplicate ends with.
    pub(super) duplicate: Option<Outcome>,
    /// The `done` row a duplicate was suppressed on ([`Attempt::found`]).
    pub(super) found: Option<crate::store::LedgerRow>,
    pub(super) rereads: u8,
    pub(super) last: Io,
}

impl Attempt {
    /// A new attempt; `attempt` is its id (`host:pid`, see [`attempt_id`](super::attempt_id)).
    /// Refuses a spec whose key could be read two ways.
    pub fn new(ctx: &Ctx, spec: &Spec, attempt: &str) -> Result<Attempt> {
        // `Spec::checked_key`, with the inputs' digest computed once for the key and the row.
        exactly_words::key::check(&spec.action, &spec.target, &spec.inputs)?;
        let digest = spec.input_digest();
        let key = exactly_words::key::effect_key(&spec.action, &spec.target, &digest);
        let mut att = Attempt::for_row(ctx, spec, key, &digest, attempt);
        att.fields = exactly_words::key::input_fields(
            &spec.action,
            &spec.target,
            &spec.inputs,
            &ctx.run_id,
            std::env::var("EXACTLY_SCHEDULED_AT").ok().as_deref(),
            ctx.now(),
        );
        Ok(att)
    }

    /// An attempt at the effect a ledger row holds, under its recorded `key` and input
    /// `digest` rather than a key derived again from inputs (a row keeps only their digest):
    /// a probe attempts the row exactly as the ledger holds it.
    pub(super) fn for_row(
        ctx: &Ctx,
        spec: &Spec,
        key: exactly_words::EffectKey,
        digest: &str,
        attempt: &str,
    ) -> Attempt {
        Attempt {
            key,
            digest: digest.to_string(),
            // The row keeps its own fields; a probe's reservation, if any, is released.
            fields: String::new(),
            ctx: ctx.clone(),
            spec: spec.clone(),
            attempt: attempt.to_string(),
            sender: None,
            granted: None,
            looked_at: None,
            submitted: None,
            duplicate: None,
            found: None,
            rereads: 0,
            last: Io::Begin,
        }
    }

    /// The sender's identity to record with `submitted` (the process set that will send).
    pub fn with_sender(mut self, identity: &str) -> Attempt {
        self.sender = Some(identity.to_string());
        self
    }

    /// The effect key it is about.
    pub fn key(&self) -> &exactly_words::EffectKey {
        &self.key
    }

    /// The lease our send was granted under, once `submitted` is ours.
    pub fn granted(&self) -> Option<&Granted> {
        self.granted.as_ref()
    }

    /// Its id (`host:pid`), which the row it submits names.
    pub fn id(&self) -> &str {
        &self.attempt
    }

    /// The `done` row a suppressed duplicate was found on, as the attempt read it: what the
    /// first attempt answered, its response bytes included, with no second read.
    pub fn found(&self) -> Option<&crate::store::LedgerRow> {
        self.found.as_ref()
    }

    /// Who is acting.
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

    fn in_flight(&self, attempt: Option<&str>, since: &str, until: Option<Ts>) -> Io {
        let who = attempt.unwrap_or("an attempt that recorded no id");
        let lease = until
            .map(|u| format!("; its lease runs until {}", exactly_words::time::fmt(u)))
            .unwrap_or_default();
        self.unresolved(
            EffectState::Submitted.as_str(),
            format!("in flight: attempt {who} has been sending it since {since}{lease}"),
        )
    }

    fn next(&mut self, input: Input) -> Io {
        let key = self.key.clone();
        match input {
            Input::Began(Begin::Fenced, _) => self.end(Outcome::Fenced {
                key,
                ran: None,
                response: None,
            }),
            Input::Began(Begin::Claimed(seen), _) => Io::Submit { seen },
            // Reserved and submitted in one transaction: ours to send.
            Input::Began(Begin::Submitted(seen, granted), _) => {
                self.submitted = Some(seen);
                self.granted = Some(granted);
                Io::Send
            }
            Input::Began(Begin::Existing(row, lease), sender) => {
                self.existing(&row, (lease.live, lease.until), sender)
            }
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
            Input::Judged(v) => self.judged(v),
            Input::Submitted(s) => self.on_submit(s),
            Input::Sent(sent) => Io::Finish {
                sent,
                seen: self.submitted.clone().unwrap_or_default(),
            },
            Input::Finished(ok) => self.finished(ok),
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

    /// A row already exists for the key: its state decides, and for a `submitted` one, whether
    /// its sender may still be sending.
    fn existing(
        &mut self,
        row: &crate::store::LedgerRow,
        (lease_live, lease_until): (bool, Option<Ts>),
        sender: Sender,
    ) -> Io {
        let key = self.key.clone();
        match &row.state {
            EffectState::Done => {
                self.found = Some(row.clone());
                self.duplicate("already done", row.response.clone())
            }
            EffectState::Cancelled => self.end(Outcome::Cancelled { key }),
            // Nothing was sent: the compare-and-set takes the row over.
            EffectState::Claimed => Io::Submit { seen: row.seen() },
            EffectState::Submitted => {
                let since = row.updated_at.as_str();
                match sender {
                    Sender::Alive => self.in_flight(row.attempt.as_deref(), since, None),
                    Sender::Unknown | Sender::Clash if lease_live => {
                        self.in_flight(row.attempt.as_deref(), since, lease_until)
                    }
                    _ => {
                        // Only a sender known gone skips the deadline check.
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
                    exactly_words::sanitize::inert(other)
                ),
            ),
        }
    }

    /// The observer's verdict, applied to the row (or not): what the attempt does next.
    fn judged(&mut self, v: Verdict) -> Io {
        let key = self.key.clone();
        let observation = match &self.last {
            Io::Verdict { observation, .. } => observation.clone(),
            _ => Observation::CantTell(String::new()),
        };
        match v {
            Verdict::Applied { seen, .. } => match observation {
                Observation::Happened(resp) => self.duplicate("observer: already happened", resp),
                Observation::NotHappened => Io::Submit { seen },
                Observation::CantTell(why) => self.unresolved(
                    seen.state.as_str(),
                    format!(
                        "the observer could not tell ({why}); \
                         resolve it with `exactly resolve`"
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
            } => self.in_flight(attempt.as_deref(), &since, until),
            Verdict::Fenced => self.end(Outcome::Fenced {
                key,
                ran: None,
                response: None,
            }),
        }
    }

    /// Whether we may send, after the compare-and-set to `submitted`.
    fn on_submit(&mut self, s: Submit) -> Io {
        let key = self.key.clone();
        match s {
            Submit::Won { seen, granted, .. } => {
                self.submitted = Some(seen);
                self.granted = Some(granted);
                Io::Send
            }
            Submit::Fenced => self.end(Outcome::Fenced {
                key,
                ran: None,
                response: None,
            }),
            Submit::NotApproved => self.end(Outcome::AwaitingApproval { key }),
            Submit::Denied => self.end(Outcome::Cancelled { key }),
            Submit::LeaseEnding { until } => self.end(Outcome::LeaseEnding { key, until }),
            Submit::Lost(row) => match &row.state {
                EffectState::Done => {
                    self.found = Some((*row).clone());
                    self.duplicate("done by a concurrent attempt", row.response.clone())
                }
                EffectState::Cancelled => self.end(Outcome::Cancelled { key }),
                state => {
                    let state = state.to_string();
                    self.reread(&state, "a concurrent attempt moved it first")
                }
            },
        }
    }

    /// The outcome recorded (or refused by a higher fencing token): the attempt's end.
    fn finished(&mut self, ok: bool) -> Io {
        let key = self.key.clone();
        let sent = match &self.last {
            Io::Finish { sent, .. } => sent.clone(),
            _ => Err(Failure::Lost(String::new())),
        };
        if !ok {
            let (ran, response) = match sent {
                Ok(r) => ("it exited 0".to_string(), Some(r)),
                Err(Failure::NotSent(r)) | Err(Failure::Lost(r)) => (r, None),
            };
            return self.end(Outcome::Fenced {
                key,
                ran: Some(ran),
                response,
            });
        }
        self.end(match sent {
            Ok(response) => Outcome::Done { key, response },
            Err(Failure::NotSent(reason)) => Outcome::NotSent { key, reason },
            Err(Failure::Lost(reason)) => Outcome::Unknown { key, reason },
        })
    }
}

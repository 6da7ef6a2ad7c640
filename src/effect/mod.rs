//! The effect lifecycle: `claimed` → `submitted` (committed before the request leaves) → `done`
//! or `unknown`. A second attempt learns what happened from the unique violation and branches
//! on the row's state; `submitted`/`unknown` are settled by an observer before any retry.
//!
//! The protocol is a step machine ([`Attempt`]) that does no I/O: it asks for one store call or
//! far-side call at a time ([`Io`]) and takes the answer ([`Input`]). [`run`] drives it for the
//! CLI, the scheduler and the library; tests drive many attempts in any interleaving. Every
//! transition it asks for is a compare-and-set on the row version it last read ([`Seen`]), so a
//! verdict applies only to the attempt it observed, and a send in flight is never settled.
//!
//! Rooms: this file holds what an effect is (its context, spec, outcomes, the far side's
//! interface); `machine.rs` the step machine; `drive.rs` what performs its steps against the
//! store and the far side; `command.rs` an effect that is a command, and observer processes;
//! `probe.rs` a done effect attempted again on purpose, sending nothing.
mod command;
mod drive;
mod machine;
mod probe;

#[cfg(feature = "proof")]
pub use crate::store::switch_guard_off_for_proof;
pub use crate::store::SUBMIT_MIN_LEFT;
pub use crate::store::{Begin, Granted, LedgerRow, Seen, Submit, Verdict};
pub use command::{observe_with, observe_within, CommandEffect, OBSERVE_TIMEOUT};
pub use drive::{execute, run, run_found, settle_open, settle_open_with, Settled};
pub use machine::{Attempt, Input, Io};
pub use probe::{probe, Probe, ProbeVerdict, Probed, PROBE_SUPPRESSED};

use crate::store::Store;
use crate::wrapped::Output;
use exactly_words::key;
use exactly_words::sender::Sender;
use exactly_words::Result;
use exactly_words::{EffectKey, JobName, Token};
use serde_json::{Map, Value};

/// Who is acting: the job, the fencing token of its lease, and the run.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The job acting.
    pub job: JobName,
    /// The fencing token of the job's lease: every write carries it.
    pub token: Token,
    /// The run acting, recorded with the effect.
    pub run_id: String,
    /// The clock every step of the attempt reads: None is the real one ([`Ctx::at`]).
    pub at: Option<exactly_words::time::Ts>,
    /// Who records an observer's verdict: None is [`crate::actor`] ([`Ctx::by`]).
    pub by: Option<String>,
}

impl Ctx {
    /// `job` acting under the lease whose fencing token is `token`, as a run of this process.
    pub fn new(job: &JobName, token: Token) -> Ctx {
        Ctx {
            job: job.clone(),
            token,
            run_id: format!("{job}-{token}-{}", std::process::id()),
            at: None,
            by: None,
        }
    }
    /// The same context as the run `run_id`.
    pub fn with_run_id(mut self, run_id: &str) -> Ctx {
        self.run_id = run_id.to_string();
        self
    }
    /// Every step happens at `now` (a simulation's or a test's clock), not the real time.
    pub fn at(mut self, now: exactly_words::time::Ts) -> Ctx {
        self.at = Some(now);
        self
    }
    /// Verdicts are recorded as `actor` rather than [`crate::actor`].
    pub fn by(mut self, actor: &str) -> Ctx {
        self.by = Some(actor.to_string());
        self
    }
    /// The time of a step: the pinned clock, else the real one.
    pub fn now(&self) -> exactly_words::time::Ts {
        self.at.unwrap_or_else(exactly_words::time::now)
    }
    /// Who records a verdict.
    pub fn actor(&self) -> String {
        self.by.clone().unwrap_or_else(exactly_words::actor)
    }
}

/// What the effect is about: action, target and the inputs that change its consequence.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// What the effect does (`send-invoice`): part of its effect key.
    pub action: String,
    /// What it acts on (`customer-42`): part of its effect key.
    pub target: String,
    /// The inputs that change its consequence: their digest is part of its effect key.
    pub inputs: Map<String, Value>,
    /// What it does in words, shown to a person approving or resolving it.
    pub terms: Option<String>,
    /// Whether a person must approve it before it is sent.
    pub needs_approval: bool,
    /// A shell command recorded with the effect so a later run can settle it, or the words of
    /// an observer that is not a command ([`observer_elsewhere`]).
    pub observe_cmd: Option<String>,
}

/// How the observe command column begins for an observer that is not a command: the text, to
/// a shell, exits 3 (cannot tell) and names the observer in a comment.
const ELSEWHERE: &str = "exit 3 # not a command: observed by ";

/// The observe command column's text for an effect whose observer is asked by the program
/// that recorded it, not run as a command (`exactly mcp`'s observer tool, `mcp:list_sent`):
/// `doctor` sees an observer, and nothing runs it ([`observer_is_command`]). The name keeps
/// letters, digits and `_-.:/@` only, so even a shell given the text runs nothing but `exit 3`.
pub fn observer_elsewhere(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-.:/@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{ELSEWHERE}{safe}")
}

/// Whether a recorded observe text is a shell command to run (not [`observer_elsewhere`]'s).
pub fn observer_is_command(text: &str) -> bool {
    !text.starts_with(ELSEWHERE)
}

impl Spec {
    /// The effect `action` on `target`, with no inputs yet.
    pub fn new(action: &str, target: &str) -> Spec {
        Spec {
            action: action.to_string(),
            target: target.to_string(),
            ..Default::default()
        }
    }
    /// Adds the input `k` = `v` (a new value is a new effect key).
    pub fn input(mut self, k: &str, v: impl Into<Value>) -> Spec {
        self.inputs.insert(k.to_string(), v.into());
        self
    }
    /// Sets the words a person approving or resolving it is shown.
    pub fn terms(mut self, t: &str) -> Spec {
        self.terms = Some(t.to_string());
        self
    }
    /// Sets whether a person must approve it before it is sent.
    pub fn needs_approval(mut self, yes: bool) -> Spec {
        self.needs_approval = yes;
        self
    }
    /// SHA-256 of its inputs as canonical JSON (RFC 8785), lowercase hex.
    pub fn input_digest(&self) -> String {
        key::input_digest(&self.inputs)
    }
    /// The effect key (docs/contract.md, "Effect key"). See [`Spec::checked_key`].
    pub fn key(&self) -> EffectKey {
        key::effect_key(&self.action, &self.target, &self.input_digest())
    }
    /// The effect key, refusing (exit 2) a spec whose joined string could be read two ways:
    /// an empty or `|`-holding action, an empty target, an empty input key.
    pub fn checked_key(&self) -> Result<EffectKey> {
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
    /// It happened; with the far side's answer, if it gives one.
    Happened(Option<String>),
    /// It did not happen: a retry may send it.
    NotHappened,
    /// The far side cannot say (why, in words): the effect stays open.
    CantTell(String),
}

/// The effect itself: `perform` sends it (passing the effect key on as the far side's
/// idempotency key where it has one), `observe` asks the far side whether it happened.
pub trait Effect {
    /// Sends the effect; its answer is recorded with it (a duplicate gets it back).
    fn perform(&mut self, effect_key: &str) -> std::result::Result<String, Failure>;
    /// Asks the far side whether the effect with this key happened; sends nothing.
    fn observe(&mut self, effect_key: &str) -> Observation;
    /// The response as the bytes the last `perform` produced and how many there were in all
    /// (a command's stdout), when the action has them; kept with the effect so a duplicate
    /// replays them.
    fn output(&self) -> Option<&Output> {
        None
    }
    /// The process group its sends run in, made before the row is submitted so the row can
    /// name it ([`crate::sender::Identity`]); None when the effect sends from this process.
    fn sender_group(&mut self) -> Option<exactly_words::sender::Group> {
        None
    }
    /// The cage its sends run in (made with the group, see [`Effect::sender_group`]): the row
    /// names it, and a retry ends what is left in it before judging the sender gone.
    fn sender_cage(&self) -> Option<exactly_words::contain::Cage> {
        None
    }
    /// Told, just before [`Effect::perform`], the lease the send was granted under (its end on
    /// the database's clock and on ours), and the row it is recorded on: a send must stop there.
    fn granted(
        &mut self,
        _until: exactly_words::time::Ts,
        _ends: std::time::Instant,
        _attempt: &str,
    ) {
    }
    /// Told, just before [`Effect::perform`] (and before [`Effect::granted`]), the attempt the
    /// send is for: its job, fencing token and run ([`Attempt::ctx`]), effect key
    /// ([`Attempt::key`]), the lease it was granted under ([`Attempt::granted`]) and the id
    /// its row names ([`Attempt::id`]). An effect takes these from here rather than keeping
    /// copies of its own; the default does nothing.
    fn acting_for(&mut self, _attempt: &Attempt) {}
}

/// Every way an attempt can end. Only the first sends anything.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Sent now; the answer is recorded.
    Done {
        /// The effect key.
        key: EffectKey,
        /// The far side's answer.
        response: String,
    },
    /// Already done (now or, per the observer, earlier): nothing sent.
    DuplicateSuppressed {
        /// The effect key.
        key: EffectKey,
        /// The answer recorded when it was done, if any.
        response: Option<String>,
    },
    /// A higher fencing token exists: stop quietly, do not retry.
    Fenced {
        /// The effect key.
        key: EffectKey,
        /// Set when the action had already run (how it ended) and only its result was fenced:
        /// the row stays `submitted`, and only a far side that refuses stale tokens
        /// (`EXACTLY_FENCING_TOKEN`) kept a late send out.
        ran: Option<String>,
        /// The action's answer, when it ran and answered (kept: only its row was fenced).
        response: Option<String>,
    },
    /// Waiting for a person: nothing sent.
    AwaitingApproval {
        /// The effect key.
        key: EffectKey,
    },
    /// An earlier attempt may have sent it and nobody can tell yet: nothing sent.
    Unresolved {
        /// The effect key.
        key: EffectKey,
        /// The ledger state it was found in.
        state: String,
        /// Why nobody can tell yet.
        reason: String,
    },
    /// We sent and lost the answer: the effect is `unknown` until resolved.
    Unknown {
        /// The effect key.
        key: EffectKey,
        /// How the answer was lost.
        reason: String,
    },
    /// Denied or resolved "never retry".
    Cancelled {
        /// The effect key.
        key: EffectKey,
    },
    /// The action promised nothing was sent; the reservation was released.
    NotSent {
        /// The effect key.
        key: EffectKey,
        /// Why nothing was sent.
        reason: String,
    },
    /// The action ran (`ran` says how it ended) but its outcome could not be recorded (a
    /// locked database, a full disk) within the lease: the effect stays `submitted` until an
    /// observer or an operator settles it.
    Unrecorded {
        /// The effect key.
        key: EffectKey,
        /// How the action ended.
        ran: String,
        /// Why its outcome could not be recorded.
        reason: String,
    },
    /// Too little of the lease was left to send under it (or it was released): nothing sent.
    LeaseEnding {
        /// The effect key.
        key: EffectKey,
        /// When the lease ends; None when it was released.
        until: Option<exactly_words::time::Ts>,
    },
}

impl Outcome {
    /// The effect key of the effect the attempt was about.
    pub fn key(&self) -> &EffectKey {
        match self {
            Outcome::Done { key, .. }
            | Outcome::DuplicateSuppressed { key, .. }
            | Outcome::Fenced { key, .. }
            | Outcome::AwaitingApproval { key }
            | Outcome::Unresolved { key, .. }
            | Outcome::Unknown { key, .. }
            | Outcome::Cancelled { key }
            | Outcome::NotSent { key, .. }
            | Outcome::Unrecorded { key, .. }
            | Outcome::LeaseEnding { key, .. } => key,
        }
    }

    /// The CLI's exit code (docs/contract.md, "Exit codes").
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

/// A job's open effects (`submitted` or `unknown`): what its observers must settle.
pub fn open_of(store: &mut Store, job: &JobName) -> Result<Vec<LedgerRow>> {
    store.open_effects_of(job)
}

/// The jobs with open effects (their next run settles them first, see [`open_of`]).
pub fn jobs_with_open(store: &mut Store) -> Result<std::collections::HashSet<String>> {
    store.jobs_with_open_effects()
}

/// The ledger's rows in one state, of one job if given, oldest change first
/// (`exactly effects`), with the database's schema version and its clock's now.
pub fn in_state(
    store: &mut Store,
    state: &exactly_words::state::EffectState,
    job: Option<&str>,
) -> Result<(i64, exactly_words::time::Ts, Vec<LedgerRow>)> {
    let caller_now = exactly_words::time::now();
    let got = store.effects_in_state(state, job, &exactly_words::time::fmt(caller_now))?;
    let now = exactly_words::time::parse(&got.now).unwrap_or(caller_now);
    Ok((got.schema_version, now, got.rows))
}

/// The ledger row of an effect, if it was ever begun (`exactly effect status`, the effect detail).
pub fn get(store: &mut Store, key: &EffectKey) -> Result<Option<LedgerRow>> {
    store.effect(key)
}

/// The recorded history of an effect, oldest first (the effect detail).
pub fn events(store: &mut Store, key: &EffectKey) -> Result<Vec<crate::snapshot::EventRow>> {
    store.effect_events(key)
}

/// `host:pid` of this attempt, recorded with `submitted` so a restart can tell a dead sender
/// from one still sending. The host is [`crate::host`] (`EXACTLY_HOST`, else the host name).
pub fn attempt_id() -> String {
    format!("{}:{}", exactly_words::host(), std::process::id())
}

/// Looks the sender of a `submitted` row up by its identity (see [`crate::sender`]); if it is
/// gone on this host, what is left of its group is ended first, so nothing of it sends after
/// the answer.
pub fn sender(row: &LedgerRow) -> Sender {
    match exactly_words::sender::judge(row.attempt.as_deref(), row.sender.as_deref()) {
        exactly_words::sender::Judged::Alive => Sender::Alive,
        exactly_words::sender::Judged::Gone => Sender::Gone,
        exactly_words::sender::Judged::Elsewhere => Sender::Unknown,
        exactly_words::sender::Judged::Clash => Sender::Clash,
    }
}

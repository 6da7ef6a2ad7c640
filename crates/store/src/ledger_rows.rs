//! The effect aggregate's rows and answers: the ledger row as read, the version a writer saw
//! ([`Seen`]), and what each transition in `ledger.rs` answers.
use super::db::{args, DbResult, Optional, Row, Tx};
use super::rows::{ser_ts, ser_ts_opt, ts, ts_req};
use super::{int, text, text_or_empty, word};
use exactly_words::state::EffectState;
use exactly_words::time::Ts;
use exactly_words::EffectKey;

/// A whole `effect_ledger` row, its times read at the store's door: a time column that holds
/// no time is [`Error::Corrupt`](exactly_words::Error::Corrupt) naming it, never a guess.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LedgerRow {
    /// The effect key: derived from the action, its target and its inputs.
    pub effect_key: EffectKey,
    /// The job whose run claimed it.
    pub job_key: String,
    /// The run that last claimed or submitted it.
    pub run_id: String,
    /// The fencing token it was last claimed or submitted under.
    pub fencing_token: Option<i64>,
    /// Its state: `claimed`, `submitted`, `done`, `unknown` or `cancelled`.
    pub state: EffectState,
    /// What the effect does, in words a person approving or resolving it is shown.
    pub terms_shown: Option<String>,
    /// The far side's answer (or the observer's words when it settled the row `done`).
    pub response: Option<String>,
    /// When its row was created.
    #[serde(serialize_with = "ser_ts")]
    pub created_at: Ts,
    /// When it last changed. Text, not a time: it is the compare-and-set witness ([`Seen`]),
    /// compared byte for byte in SQL, so a re-formatted value could make a CAS miss.
    pub updated_at: String,
    /// What the effect does (the action part of its effect key).
    pub action_id: Option<String>,
    /// What it acts on (the target part of its effect key).
    pub target_id: Option<String>,
    /// SHA-256 of its inputs as canonical JSON (the last part of its effect key).
    pub input_digest: Option<String>,
    /// The command that asks the far side whether the effect happened.
    pub observe_cmd: Option<String>,
    /// The attempt id (`host:pid`) that last submitted it.
    pub attempt: Option<String>,
    /// The observer's latest verdict: `happened`, `not happened` or `can't tell`.
    pub verdict: Option<String>,
    /// When that verdict was recorded.
    #[serde(serialize_with = "ser_ts_opt")]
    pub verdict_at: Option<Ts>,
    /// Who settled it by hand.
    pub resolved_by: Option<String>,
    /// When it was settled by hand.
    #[serde(serialize_with = "ser_ts_opt")]
    pub resolved_at: Option<Ts>,
    /// The note left with that resolution.
    pub resolution_note: Option<String>,
    /// What the resolver checked on the far side.
    pub evidence: Option<String>,
    /// Bumped by every transition; NULL (a row written with the seed's SQL) reads as 0.
    pub version: i64,
    /// The command's stdout exactly as written, up to the response cap.
    #[serde(skip)]
    pub response_raw: Option<Vec<u8>>,
    /// Bytes the command wrote in all; more than `response_raw` holds means it was cut.
    pub response_total: Option<i64>,
    /// The sender's identity (`sender::Identity::encode`), recorded with `submitted`.
    pub sender: Option<String>,
    /// Until when the sender's lease let it send (database clock), recorded with `submitted`.
    #[serde(serialize_with = "ser_ts_opt")]
    pub sender_until: Option<Ts>,
}

/// The row of no effect (the empty key, created at the epoch): what a transition answers with
/// when the row it raced is gone, which one transaction never sees.
impl Default for LedgerRow {
    fn default() -> Self {
        LedgerRow {
            effect_key: EffectKey::from(String::new()),
            job_key: String::new(),
            run_id: String::new(),
            fencing_token: None,
            state: EffectState::default(),
            terms_shown: None,
            response: None,
            created_at: Ts::default(),
            updated_at: String::new(),
            action_id: None,
            target_id: None,
            input_digest: None,
            observe_cmd: None,
            attempt: None,
            verdict: None,
            verdict_at: None,
            resolved_by: None,
            resolved_at: None,
            resolution_note: None,
            evidence: None,
            version: 0,
            response_raw: None,
            response_total: None,
            sender: None,
            sender_until: None,
        }
    }
}

impl LedgerRow {
    /// What a writer read of this row, for a later compare-and-set.
    pub fn seen(&self) -> Seen {
        Seen {
            state: self.state.clone(),
            version: self.version,
            updated_at: self.updated_at.clone(),
        }
    }
}

/// A ledger row as a writer last read it. Every transition is a compare-and-set on it: it
/// applies only if the row still is in this state, at this version, updated at this instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The state the writer read.
    pub state: EffectState,
    /// The version the writer read.
    pub version: i64,
    /// The row's `updated_at` the writer read. Text, not a time: the compare-and-set matches it
    /// byte for byte in SQL (`updated_at = ?`), so a re-formatted value could make a CAS miss.
    pub updated_at: String,
}

pub(crate) const LEDGER_COLS: &str =
    "effect_key, job_key, run_id, fencing_token, state, terms_shown,
    response, created_at, updated_at, action_id, target_id, input_digest, observe_cmd, attempt,
    verdict, verdict_at, resolved_by, resolved_at, resolution_note, evidence,
    coalesce(version, 0), response_raw, response_total, sender, sender_until";

pub(crate) fn ledger_row(r: &Row<'_>) -> DbResult<LedgerRow> {
    Ok(LedgerRow {
        effect_key: EffectKey::from(text_or_empty(r, 0)?),
        job_key: text_or_empty(r, 1)?,
        run_id: text_or_empty(r, 2)?,
        fencing_token: int(r, 3)?,
        state: word(r, 4)?,
        terms_shown: text(r, 5)?,
        response: text(r, 6)?,
        created_at: ts_req(r, 7, "effect_ledger.created_at")?,
        updated_at: text_or_empty(r, 8)?,
        action_id: text(r, 9)?,
        target_id: text(r, 10)?,
        input_digest: text(r, 11)?,
        observe_cmd: text(r, 12)?,
        attempt: text(r, 13)?,
        verdict: text(r, 14)?,
        verdict_at: ts(r, 15, "effect_ledger.verdict_at")?,
        resolved_by: text(r, 16)?,
        resolved_at: ts(r, 17, "effect_ledger.resolved_at")?,
        resolution_note: text(r, 18)?,
        evidence: text(r, 19)?,
        version: int(r, 20)?.unwrap_or(0),
        response_raw: bytes(r, 21)?,
        response_total: int(r, 22)?,
        sender: text(r, 23)?,
        sender_until: ts(r, 24, "effect_ledger.sender_until")?,
    })
}

/// Reads a BLOB (or TEXT) column as the bytes stored.
fn bytes(r: &Row<'_>, idx: usize) -> DbResult<Option<Vec<u8>>> {
    Ok(match r.value(idx)? {
        super::db::Value::Text(b) => Some(b.into_owned()),
        _ => None,
    })
}

pub(super) fn read_row(tx: &Tx<'_>, key: &str) -> DbResult<Option<LedgerRow>> {
    tx.one(
        &format!("SELECT {LEDGER_COLS} FROM effect_ledger WHERE effect_key = ?1"),
        args![key],
        ledger_row,
    )
    .optional()
}

/// The answer to a move the ledger may refuse.
#[derive(Debug, Clone, PartialEq)]
pub enum Begin {
    /// Our row was inserted in state `claimed`, as seen here.
    Claimed(Seen),
    /// Our row was inserted in state `submitted` for our attempt, as seen here
    /// (`Store::begin_and_submit_effect`): send it, within the lease granted.
    Submitted(Seen, Granted),
    /// A row already exists for the key: branch on its state. With it, whether the lease under
    /// which it was submitted may still be live (its token's lease ends after now minus the
    /// clock-skew margin): its sender may still be sending.
    Existing(Box<LedgerRow>, SenderLease),
    /// A higher fencing token exists for the job.
    Fenced,
}

/// The lease a send was granted under, as the transaction that recorded `submitted` read it:
/// its end on the database's clock, and how long that was from the transaction's now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Granted {
    /// When the lease ends, on the database's clock (the released instant, before every
    /// other, when no lease was found: the send's deadline is then at once).
    pub until: Ts,
    /// How long the lease had left when the transaction read it.
    pub left: std::time::Duration,
    /// When it ends on this host's monotonic clock, counted from before the write was sent (set
    /// by the driver, which knows when it asked): a pause after the commit shortens the send,
    /// never lengthens it.
    pub ends: Option<std::time::Instant>,
}

/// Who sends: the attempt id (`host:pid`, shown) and the sender's identity (judged).
#[derive(Debug, Clone, Copy, Default)]
pub struct SentBy<'a> {
    /// The attempt id (`host:pid`), shown to people.
    pub attempt: &'a str,
    /// The sender's identity (`sender::Identity::encode`), judged by observers.
    pub sender: Option<&'a str>,
}

/// A `submitted` asked for: the effect, the run that sends it under its token, who sends, and
/// whether it needs a person's approval (with the `terms` shown).
#[derive(Debug, Clone, Copy)]
pub struct Submission<'a> {
    pub key: &'a str,
    pub job: &'a str,
    pub run_id: &'a str,
    pub token: i64,
    pub by: SentBy<'a>,
    pub needs_approval: bool,
    pub terms: Option<&'a str>,
}

/// What became of a send, to record under the job's token: `done` with the far side's
/// response, or `unknown` with why (`response`); the command's stdout as bytes when kept
/// (`output`: the bytes, already cut to the cap, and how many it wrote in all).
#[derive(Debug, Clone)]
pub struct SendEnd<'a> {
    pub key: &'a str,
    pub job: &'a str,
    pub token: i64,
    pub state: EffectState,
    pub response: &'a str,
    pub output: Option<(&'a [u8], u64)>,
}

impl SendEnd<'_> {
    /// The far side's answer, which a duplicate replays: an `unknown` has none, and our words
    /// for why (`response` then) go in its event only.
    pub(crate) fn answer(&self) -> Option<&str> {
        (self.state == EffectState::Done).then_some(self.response)
    }

    /// The kept stdout and how many bytes it had in all, as stored.
    pub(crate) fn stored_output(&self) -> (Option<&[u8]>, Option<i64>) {
        match self.output {
            Some((raw, total)) => (Some(raw), Some(total.min(i64::MAX as u64) as i64)),
            None => (None, None),
        }
    }
}

/// The lease a `submitted` row was sent under, as the store found it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SenderLease {
    /// The sender may still be sending: the deadline its row carries (else its token's lease)
    /// ends after now minus the clock-skew margin and the stop grace.
    pub live: bool,
    /// When that lease ends (None: the token holds no lease any more).
    pub until: Option<Ts>,
}

/// The answer to moving a `claimed` row to `submitted`: whether we may send.
#[derive(Debug, Clone, PartialEq)]
pub enum Submit {
    /// We moved the row `claimed` → `submitted`: we, and only we, may send.
    Won {
        /// Whether this send used up the effect's approval.
        approval_consumed: bool,
        /// The row as we left it, for the compare-and-set that records the answer.
        seen: Seen,
        /// The lease the send may go on under.
        granted: Granted,
    },
    /// Less than [`super::SUBMIT_MIN_LEFT`] of our lease is left (or it was released): the lease is
    /// the permission to send, so nothing is sent. Renew it and try again.
    LeaseEnding {
        /// When our lease ends; None when it was released.
        until: Option<Ts>,
    },
    /// Someone else moved it first (or it is no longer `claimed`): never send.
    Lost(Box<LedgerRow>),
    /// A higher fencing token exists for the job: never send.
    Fenced,
    /// The effect needs an approval that is not granted (pending, or missing).
    NotApproved,
    /// The approval was denied: the effect is now `cancelled`.
    Denied,
}

/// Facts recorded with a new ledger row.
#[derive(Debug, Clone, Default)]
pub struct NewEffect<'a> {
    /// The effect key.
    pub effect_key: &'a str,
    /// The job claiming it.
    pub job_key: &'a str,
    /// The run claiming it.
    pub run_id: &'a str,
    /// The fencing token of the claiming lease.
    pub token: i64,
    /// What the effect does, as a person approving it is shown.
    pub terms_shown: Option<&'a str>,
    /// What the effect does (part of its effect key).
    pub action_id: &'a str,
    /// What it acts on (part of its effect key).
    pub target_id: &'a str,
    /// The digest of its inputs (part of its effect key).
    pub input_digest: &'a str,
    /// Each input's digest and mark (`key::input_fields`), for `exactly doctor`.
    pub input_fields: &'a str,
    /// The command that asks the far side whether it happened.
    pub observe_cmd: Option<&'a str>,
}

/// A person's settling of an open effect: how, by whom, their note and evidence, and whether
/// it is forced past a sender that may still be sending.
#[derive(Debug, Clone, Copy)]
pub struct Settlement<'a> {
    /// What the person found: happened, did not happen, or cancel.
    pub how: Resolution,
    /// Who settles it, as recorded.
    pub by: &'a str,
    /// Their note, if any.
    pub note: Option<&'a str>,
    /// What they saw at the far side (a receipt, a reference), if any.
    pub evidence: Option<&'a str>,
    /// Settle it even if its sender may still be sending.
    pub force: bool,
}

/// An observer's verdict on the attempt it looked at: what it found (None: can't tell) and its
/// words, who observed, the job and token it acts for (`fence`: refused when stale), and
/// whether the sender's lease is judged (`lease_check`; false: the sender is known gone).
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    pub verdict: Option<Resolution>,
    pub words: &'a str,
    pub fence: Option<(&'a str, i64)>,
    pub lease_check: bool,
    pub actor: &'a str,
}

/// How an operator (or observer) settles an effect that may or may not have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// It happened on the far side: the row becomes `done`.
    Happened,
    /// It did not happen: the row goes back to `claimed`, so a retry may send.
    NotHappened,
    /// It must never be sent: the row becomes `cancelled`.
    Cancel,
}

impl Resolution {
    /// The ledger state this resolution moves an effect to.
    pub(crate) fn target_state(self) -> EffectState {
        match self {
            Resolution::Happened => EffectState::Done,
            Resolution::NotHappened => EffectState::Claimed,
            Resolution::Cancel => EffectState::Cancelled,
        }
    }
    /// The resolution as the command line spells it.
    pub fn word(self) -> &'static str {
        match self {
            Resolution::Happened => "happened",
            Resolution::NotHappened => "not-happened",
            Resolution::Cancel => "cancel",
        }
    }
}

/// The answer to an observer's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Recorded (and, when definite, the row settled); `seen` is the row as it left it.
    Applied {
        /// The state the row was in.
        from: EffectState,
        /// The row as the verdict left it.
        seen: Seen,
    },
    /// The row moved since the observer looked: the verdict was discarded.
    Stale {
        /// The row's state now.
        state: EffectState,
    },
    /// The row's sender may still be sending (its lease is live): not settled.
    InFlight {
        /// The row's state (`submitted`).
        state: EffectState,
        /// The attempt id (`host:pid`) of its sender.
        attempt: Option<String>,
        /// When the row was submitted.
        since: String,
        /// When the sender's lease ends; None when its token holds no lease.
        until: Option<Ts>,
    },
    /// A higher fencing token exists for the observing job.
    Fenced,
    /// The effect is not open (already settled): nothing was recorded.
    NotOpen {
        /// The state it is in.
        state: EffectState,
        /// Who settled it by hand, if anyone did.
        by: Option<String>,
    },
    /// No ledger row has this effect key.
    NotFound,
}

/// A `submitted` row's sender that may still be sending: its attempt id (`host:pid`), when its
/// lease ends (None: its token holds no lease any more), and whether its process was found
/// running on this host (then it may send past its lease's end, until it is stopped).
#[derive(Debug, Clone, PartialEq)]
pub struct Sending {
    /// Its attempt id (`host:pid`).
    pub attempt: Option<String>,
    /// When its lease ends; None when its token holds no lease any more.
    pub until: Option<Ts>,
    /// Whether its process was found running on this host.
    pub running: bool,
}

/// The answer to a person's resolution of an effect.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// Settled: the row moved to the resolution's state.
    Done {
        /// The state it was in.
        from: EffectState,
        /// Resolved with `force` while its sender may still be sending: who, and until when.
        forced: Option<Sending>,
    },
    /// The row's sender may still be sending: nothing changed. A person who has checked the
    /// far side resolves it with `force`.
    InFlight(Sending),
    /// The effect is not open (already settled, by someone else or by an observer).
    NotOpen {
        /// The state it is in.
        state: EffectState,
        /// Who settled it by hand, if anyone did.
        by: Option<String>,
    },
    /// A higher fencing token exists for the settling job: nothing was changed.
    Fenced,
    /// No ledger row has this effect key.
    NotFound,
}

//! The approval aggregate: an approval per effect key, requested once, decided once by a
//! person, consumed by the one send it allows.
use super::db::{args, DbResult, Optional, Row};
use super::ledger::BUMP;
use super::{record_event, text, text_or_empty, word, NewEvent, Store};
use exactly_words::state::EventKind;
use exactly_words::state::{ApprovalState, EffectState};
use exactly_words::time::Ts;
use exactly_words::{EffectKey, Result};

/// An approval row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ApprovalRow {
    /// The effect key it approves: one approval per effect.
    pub effect_key: EffectKey,
    /// The job whose effect asked for it.
    pub job_key: String,
    /// What the effect does, as the approver is shown.
    pub terms_shown: Option<String>,
    /// `pending`, `approved`, `denied` or `consumed`.
    pub state: ApprovalState,
    /// When it was requested.
    #[serde(serialize_with = "super::rows::ser_ts")]
    pub requested_at: Ts,
    /// Who approved or denied it.
    pub decided_by: Option<String>,
    /// When it was approved or denied.
    #[serde(serialize_with = "super::rows::ser_ts_opt")]
    pub decided_at: Option<Ts>,
    /// The note left with the decision.
    pub note: Option<String>,
    /// When the send it allowed used it up.
    #[serde(serialize_with = "super::rows::ser_ts_opt")]
    pub consumed_at: Option<Ts>,
}

pub(crate) const APPROVAL_COLS: &str =
    "effect_key, job_key, terms_shown, state, requested_at, decided_by, decided_at, \
     note, consumed_at";

pub(crate) fn approval_row(r: &Row<'_>) -> DbResult<ApprovalRow> {
    Ok(ApprovalRow {
        effect_key: EffectKey::from(text_or_empty(r, 0)?),
        job_key: text_or_empty(r, 1)?,
        terms_shown: text(r, 2)?,
        state: word(r, 3)?,
        requested_at: super::rows::ts_req(r, 4, "exactly_approvals.requested_at")?,
        decided_by: text(r, 5)?,
        decided_at: super::rows::ts(r, 6, "exactly_approvals.decided_at")?,
        note: text(r, 7)?,
        consumed_at: super::rows::ts(r, 8, "exactly_approvals.consumed_at")?,
    })
}

/// The answer to an operator's decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    /// The decision was recorded.
    Done,
    /// Someone decided first: their decision stands.
    Already {
        /// What was found: the approval's state, or the effect's.
        state: Already,
        /// Who decided the approval (None for an effect already past `claimed`).
        by: Option<String>,
        /// When it was decided (or the effect last changed).
        at: Option<Ts>,
    },
    /// No approval was requested for this effect key.
    NotFound,
}

/// What a decision found already there: the approval decided, or the effect past `claimed`.
#[derive(Debug, Clone, PartialEq)]
pub enum Already {
    /// The approval was already decided (or consumed).
    Approval(ApprovalState),
    /// The effect was already past `claimed`: a denial no longer stops it.
    Effect(EffectState),
}

impl Already {
    /// The state found, as its database word.
    pub fn as_str(&self) -> &str {
        match self {
            Already::Approval(s) => s.as_str(),
            Already::Effect(s) => s.as_str(),
        }
    }
}

/// The approval a run's command stopped at (`exactly effect --needs-approval` exits 4): the
/// job's pending approval (or one approved and not yet used), the one whose effect this run
/// claimed first. `(effect_key, approved)`; None when the job has none (the exit 4 was the
/// command's own).
pub(super) fn awaited_tx(
    tx: &super::db::Tx<'_>,
    job: &str,
    run_id: &str,
) -> DbResult<Option<(String, bool)>> {
    tx.one(
        "SELECT a.effect_key, a.state FROM exactly_approvals a
           LEFT JOIN effect_ledger l ON l.effect_key = a.effect_key
         WHERE a.job_key = ?1 AND (a.state = 'pending'
               OR (a.state = 'approved' AND a.consumed_at IS NULL AND l.state = 'claimed'))
         ORDER BY CASE WHEN l.run_id = ?2 THEN 0 ELSE 1 END, a.requested_at DESC LIMIT 1",
        args![job, run_id],
        |r| {
            Ok((
                text_or_empty(r, 0)?,
                word::<ApprovalState>(r, 1)? == ApprovalState::Approved,
            ))
        },
    )
    .optional()
}

/// What a firing whose run waits for `key`'s approval says (its row's detail): the key, so a
/// decision finds the firing it wakes or ends.
pub(super) fn awaiting_detail(key: &str) -> String {
    format!(
        "its effect {key} waits for approval: `exactly approve {key}` runs it again at once, \
         `exactly deny {key}` ends it"
    )
}

/// What an approval's decision does to the firings whose run waits for it: approved, each goes
/// again at once (`retry`, no backoff: the next scheduler tick runs it, under a new lease and
/// token); denied, each ends `denied`.
fn wake_firings_tx(
    tx: &super::db::Tx<'_>,
    job: &str,
    key: &str,
    approve: bool,
    by: &str,
    now: &str,
) -> DbResult<usize> {
    let (state, detail) = if approve {
        ("retry", approved_detail(key, by))
    } else {
        (
            "denied",
            format!("{APPROVAL_DENIED} by {by}: effect {key} is never sent"),
        )
    };
    tx.exec(
        "UPDATE exactly_firings SET state = ?3, updated_at = ?4, detail = ?5
         WHERE job_key = ?1 AND state = 'awaiting_approval' AND detail LIKE ?2",
        args![job, format!("%{key}%"), state, now, detail],
    )
}

/// The detail of a firing woken by its approval (`resume_firing` tells it by its start).
pub(super) const APPROVAL_CAME: &str = "its approval came";
/// The detail of a firing ended by a denial.
const APPROVAL_DENIED: &str = "its approval was denied";

/// The detail of a firing woken because `key` was approved by `by`.
pub(super) fn approved_detail(key: &str, by: &str) -> String {
    format!("{APPROVAL_CAME} (effect {key}, approved by {by}): it runs again now")
}

impl Store {
    pub fn approval(&mut self, key: &str) -> Result<Option<ApprovalRow>> {
        self.read(|tx| {
            tx.one(
                &format!("SELECT {APPROVAL_COLS} FROM exactly_approvals WHERE effect_key = ?1"),
                args![key],
                approval_row,
            )
            .optional()
        })
    }

    /// Approves or denies a pending approval. Of two operators deciding at once, one wins; the
    /// other learns who did. A denial also cancels the effect if nothing was sent.
    pub fn decide_approval(
        &mut self,
        key: &str,
        approve: bool,
        by: &str,
        note: Option<&str>,
        now: &str,
    ) -> Result<Decided> {
        let state = if approve {
            ApprovalState::Approved
        } else {
            ApprovalState::Denied
        };
        self.write(|tx| {
            let now = tx.now(now);
            if !approve {
                // A denial stops an effect that was not sent; one that was (or may have been)
                // is not pending any more, whatever its approval row says.
                let effect: Option<(EffectState, Ts)> = tx
                    .one(
                        "SELECT state, updated_at FROM effect_ledger WHERE effect_key = ?1",
                        args![key],
                        |r| {
                            Ok((
                                word(r, 0)?,
                                super::rows::ts_req(r, 1, "effect_ledger.updated_at")?,
                            ))
                        },
                    )
                    .optional()?;
                if let Some((state, at)) = effect.filter(|(s, _)| *s != EffectState::Claimed) {
                    return Ok(Decided::Already {
                        state: Already::Effect(state),
                        by: None,
                        at: Some(at),
                    });
                }
            }
            let job: Option<String> = tx
                .one(
                    "UPDATE exactly_approvals SET state = ?2, decided_by = ?3, \
                         decided_at = ?4, note = ?5
                     WHERE effect_key = ?1 AND state = 'pending' RETURNING job_key",
                    args![key, state, by, now, note],
                    |r| text_or_empty(r, 0),
                )
                .optional()?;
            let Some(job) = job else {
                let row = tx
                    .one(
                        &format!(
                            "SELECT {APPROVAL_COLS} FROM exactly_approvals \
                                  WHERE effect_key = ?1"
                        ),
                        args![key],
                        approval_row,
                    )
                    .optional()?;
                return Ok(match row {
                    Some(a) => Decided::Already {
                        state: Already::Approval(a.state),
                        by: a.decided_by,
                        at: a.decided_at,
                    },
                    None => Decided::NotFound,
                });
            };
            if !approve {
                tx.exec(
                    &format!(
                        "UPDATE effect_ledger SET state = 'cancelled', updated_at = ?2, \
                             resolved_by = ?3,
                            resolved_at = ?2, resolution_note = ?4, {BUMP}
                         WHERE effect_key = ?1 AND state = 'claimed'"
                    ),
                    args![key, now, by, note],
                )?;
            }
            let k = if approve {
                EventKind::ApprovalGranted
            } else {
                EventKind::ApprovalDenied
            };
            let mut ev = NewEvent::new(k, now).job(&job).effect(key).actor(by);
            ev.detail = note;
            record_event(tx, &ev)?;
            wake_firings_tx(tx, &job, key, approve, by, now)?;
            Ok(Decided::Done)
        })
    }
}

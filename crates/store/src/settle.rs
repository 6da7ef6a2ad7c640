//! Settling an open effect: an observer's verdict on the attempt it looked at, and a person's
//! resolution. Each a compare-and-set on the row as read, in one transaction.
use super::db::{args, DbResult, Tx};
use super::lease::{current_token, fenced};
use super::ledger::{guard_off, row_sender, BUMP};
use super::ledger_rows::*;
use super::{int, record_event, NewEvent, Store};
use exactly_words::sender::Sender;
use exactly_words::state::{EffectState, EventKind};
use exactly_words::time::Ts;
use exactly_words::Result;

impl Store {
    /// Records an observer's verdict on the row version it looked at (`seen`) and, when it is
    /// definite, settles it: happened → `done`, did not happen → `claimed`. A verdict applies
    /// only to the attempt it observed: if the row moved since, the verdict is discarded and
    /// recorded as a `stale_verdict` event. A `submitted` row whose sender's lease is still
    /// live (with the clock-skew margin) is in flight and is not settled, unless `lease_check`
    /// is false (the caller knows the sender is gone). With `fence`, refused when stale.
    /// `actor` is who observed (recorded with the verdict).
    pub fn observe_verdict_on(
        &mut self,
        key: &str,
        o: &Observed<'_>,
        seen: &Seen,
        now: Ts,
    ) -> Result<Verdict> {
        let Observed {
            verdict,
            words,
            fence,
            lease_check,
            actor,
        } = *o;
        let now = exactly_words::time::fmt(now);
        self.write(|tx| {
            let now = tx.now(&now);
            let Some(row) = read_row(tx, key)? else {
                return Ok(Verdict::NotFound);
            };
            let label = match verdict {
                Some(Resolution::Happened) => "happened",
                Some(Resolution::NotHappened) => "not happened",
                _ => "can't tell",
            };
            if *seen != row.seen() && !guard_off() {
                stale_verdict_tx(tx, (key, &row), o, seen, label, now)?;
                return Ok(Verdict::Stale { state: row.state });
            }
            if !row.state.is_open() {
                return Ok(Verdict::NotOpen {
                    state: row.state,
                    by: row.resolved_by,
                });
            }
            if let Some((job, token)) = fence {
                if current_token(tx, job)? != Some(token) {
                    fenced(tx, job, Some(key), token, "observer verdict refused", now)?;
                    return Ok(Verdict::Fenced);
                }
            }
            // Alive never reaches here: the attempt is in flight before it looks.
            let who = if lease_check {
                Sender::Unknown
            } else {
                Sender::Gone
            };
            if let Some(lease) = sending(tx, &row, who, now)? {
                return Ok(Verdict::InFlight {
                    state: row.state,
                    attempt: row.attempt,
                    since: row.updated_at,
                    until: lease.until,
                });
            }
            let detail = exactly_words::sanitize::inert_trunc(&format!("{label}: {words}"), 300);
            let target = match verdict {
                Some(how @ (Resolution::Happened | Resolution::NotHappened)) => {
                    Some(how.target_state())
                }
                _ => None,
            };
            let version = write_verdict_tx(tx, (key, &row), target.as_ref(), words, label, now)?;
            let mut ev = NewEvent::new(EventKind::ObserverVerdict, now)
                .job(&row.job_key)
                .effect(key)
                .actor(actor)
                .detail(&detail);
            ev.token = fence.map(|f| f.1);
            record_event(tx, &ev)?;
            let after = match target {
                Some(state) => Seen {
                    state,
                    version,
                    updated_at: now.to_string(),
                },
                None => row.seen(),
            };
            Ok(Verdict::Applied {
                from: row.state,
                seen: after,
            })
        })
    }

    /// An operator settles an open effect: happened → `done`, did not happen → `claimed` (a
    /// retry may send), cancel → `cancelled`. A `claimed` row may also be cancelled. A
    /// `submitted` row whose sender may still be sending (the observer's judgement, `sending`) is
    /// refused as [`Resolved::InFlight`] unless `force`. `sender` is what the caller found of the
    /// process of the attempt it read (`attempt`); decided here, in the write's transaction, so a
    /// sender that submitted since the caller looked is judged by its lease.
    pub fn resolve_effect(
        &mut self,
        key: &str,
        s: &Settlement<'_>,
        (attempt, sender): (Option<&str>, Sender),
        now: Ts,
    ) -> Result<Resolved> {
        let Settlement {
            how,
            by,
            note,
            evidence,
            force,
        } = *s;
        let now = exactly_words::time::fmt(now);
        self.write(|tx| {
            let now = tx.now(&now);
            let Some(row) = read_row(tx, key)? else {
                return Ok(Resolved::NotFound);
            };
            let open = row.state.is_open()
                || (how == Resolution::Cancel && row.state == EffectState::Claimed);
            if !open {
                return Ok(Resolved::NotOpen {
                    state: row.state,
                    by: row.resolved_by,
                });
            }
            // What the caller saw of a process is about the attempt it read, not a newer one.
            let who = if row.attempt.as_deref() == attempt {
                sender
            } else {
                Sender::Unknown
            };
            let in_flight = sending(tx, &row, who, now)?.map(|lease| Sending {
                attempt: row.attempt.clone(),
                until: lease.until,
                running: who == Sender::Alive,
            });
            if let (Some(s), false) = (&in_flight, force) {
                return Ok(Resolved::InFlight(s.clone()));
            }
            tx.exec(
                &format!(
                    "UPDATE effect_ledger SET state = ?2, updated_at = ?3, resolved_by = ?4, \
                         resolved_at = ?3,
                        resolution_note = ?5, evidence = coalesce(?6, evidence), {BUMP}
                     WHERE effect_key = ?1"
                ),
                args![key, how.target_state(), now, by, note, evidence],
            )?;
            if how == Resolution::Cancel {
                tx.exec(
                    "UPDATE exactly_approvals SET state = 'denied', \
                         decided_by = coalesce(decided_by, ?2),
                        decided_at = coalesce(decided_at, ?3)
                     WHERE effect_key = ?1 AND state IN ('pending', 'approved')",
                    args![key, by, now],
                )?;
            }
            let mut detail = format!("{} → {} ({})", row.state, how.target_state(), how.word());
            if let Some(s) = &in_flight {
                detail.push_str(&format!("; forced while in flight: {}", s.describe()));
            }
            if let Some(n) = note {
                detail.push_str(&format!("; note: {n}"));
            }
            if let Some(e) = evidence {
                detail.push_str(&format!("; evidence: {e}"));
            }
            record_event(
                tx,
                &NewEvent::new(EventKind::Resolved, now)
                    .job(&row.job_key)
                    .effect(key)
                    .actor(by)
                    .detail(&detail),
            )?;
            Ok(Resolved::Done {
                from: row.state,
                forced: in_flight,
            })
        })
    }
}

/// Whether a `submitted` row's sender may still be sending: the one judgement an observer's
/// verdict and a person's resolution share (Some: in flight, with its lease as found).
/// `sender` is what the caller found of its process on this host ([`crate::effect::sender`],
/// outside the store): alive → in flight; gone → not (its command died with it); otherwise its
/// row's deadline decides ([`row_sender`]: the skew margin and the stop grace included).
fn sending(
    tx: &Tx<'_>,
    row: &LedgerRow,
    sender: Sender,
    now: &str,
) -> DbResult<Option<SenderLease>> {
    if row.state != EffectState::Submitted || sender == Sender::Gone || guard_off() {
        return Ok(None);
    }
    let lease = row_sender(tx, row, now)?;
    Ok((sender == Sender::Alive || lease.live).then_some(lease))
}

/// A verdict about a row that moved since its observer looked is discarded, loudly.
fn stale_verdict_tx(
    tx: &Tx<'_>,
    (key, row): (&str, &LedgerRow),
    o: &Observed<'_>,
    seen: &Seen,
    label: &str,
    now: &str,
) -> DbResult<()> {
    let detail = exactly_words::sanitize::inert_trunc(
        &format!(
            "verdict {label:?} about {} v{} discarded: the row is now {} v{}",
            seen.state, seen.version, row.state, row.version
        ),
        300,
    );
    let mut ev = NewEvent::new(EventKind::StaleVerdict, now)
        .job(&row.job_key)
        .effect(key)
        .actor(o.actor)
        .detail(&detail);
    ev.token = o.fence.map(|f| f.1);
    record_event(tx, &ev)
}

/// Writes the verdict on the row: a definite one moves it to `target` (with the far side's
/// words as its response when done) and bumps its version; the row's version after.
fn write_verdict_tx(
    tx: &Tx<'_>,
    (key, row): (&str, &LedgerRow),
    target: Option<&EffectState>,
    words: &str,
    label: &str,
    now: &str,
) -> DbResult<i64> {
    Ok(match target {
        Some(state) => {
            let resp = (*state == EffectState::Done && !words.is_empty()).then_some(words);
            tx.one(
                &format!(
                    "UPDATE effect_ledger SET state = ?2, response = coalesce(?3, response),
                        verdict = ?4, verdict_at = ?5, updated_at = ?5, {BUMP}
                     WHERE effect_key = ?1 RETURNING coalesce(version, 0)"
                ),
                args![key, state, resp, label, now],
                |r| int(r, 0),
            )?
            .unwrap_or(0)
        }
        None => {
            // "Can't tell" moves nothing, so it does not bump the version.
            tx.exec(
                "UPDATE effect_ledger SET verdict = ?2, verdict_at = ?3 \
                 WHERE effect_key = ?1",
                args![key, label, now],
            )?;
            row.version
        }
    })
}

//! The outcome of a send in the ledger: `done` or `unknown` recorded (`finish_effect_on`), or
//! the reservation released when nothing was sent (`release_effect_on`), each only under the
//! current fencing token and the row as our `submitted` left it.
use super::db::args;
use super::lease::fenced;
use super::ledger::{still_as_seen, wrote, BUMP};
use super::ledger_rows::*;
use super::{record_event, NewEvent, Store};
use exactly_words::state::{EffectState, EventKind};
use exactly_words::time::Ts;
use exactly_words::Result;

impl Store {
    /// Records the outcome of our send: `done` with the response, or `unknown` (`response` is
    /// then why, recorded in its event: the row's `response` stays the far side's). Refused (and
    /// counted as a fenced write) unless we still hold the current token and the row is still
    /// as our `submitted` left it (`seen`). The command's stdout, when kept, is stored as bytes
    /// too (`end.output`).
    pub fn finish_effect_on(&mut self, end: &SendEnd<'_>, seen: &Seen, now: Ts) -> Result<bool> {
        let (key, job, token, state) = (end.key, end.job, end.token, &end.state);
        let now = exactly_words::time::fmt(now);
        let (raw, total) = end.stored_output();
        if exactly_words::fault::once(exactly_words::fault::Point::FinishReplyLost) {
            self.lose_next_reply();
        }
        // `response` is the far side's answer, which a duplicate replays: an `unknown` has
        // none, and our words for why (`response` here) go in its event only.
        let answer = end.answer();
        if let Some(ok) = self.fast_finish(end, seen)? {
            return Ok(ok);
        }
        self.write(|tx| {
            let now = tx.now(&now);
            let ok = tx.exec(
                &format!(
                    "UPDATE effect_ledger SET state = ?4, response = ?5, updated_at = ?6, {BUMP},
                        response_raw = ?10, response_total = ?11
                     WHERE effect_key = ?1 AND fencing_token = ?3 AND {}
                       AND ?3 = (SELECT max(fencing_token) FROM job_lease WHERE job_key = ?2)",
                    still_as_seen(7)
                ),
                args![
                    key,
                    job,
                    token,
                    state,
                    answer,
                    now,
                    seen.state,
                    seen.version,
                    seen.updated_at,
                    raw,
                    total
                ],
            )? == 1;
            // Our own write, committed on an earlier try whose reply was lost: done already.
            if !ok
                && read_row(tx, key)?.is_some_and(|row| {
                    wrote(&row, state, token, seen)
                        && same_text(row.response.as_deref(), answer)
                        && raw.is_none_or(|raw| row.response_raw.as_deref() == Some(raw))
                })
            {
                return Ok(true);
            }
            if ok {
                let k = if *state == EffectState::Done {
                    EventKind::EffectDone
                } else {
                    EventKind::EffectUnknown
                };
                let detail = exactly_words::sanitize::inert_trunc(end.response, 200);
                record_event(
                    tx,
                    &NewEvent::new(k, now)
                        .job(job)
                        .effect(key)
                        .token(token)
                        .detail(&detail),
                )?;
            } else {
                fenced(tx, job, Some(key), token, &format!("{state} refused"), now)?;
            }
            Ok(ok)
        })
    }

    /// The command promised nothing was sent: the reservation is released (the row removed, an
    /// approval it consumed handed back), so a later attempt starts clean.
    pub fn release_effect_on(
        &mut self,
        key: &str,
        job: &str,
        token: i64,
        seen: &Seen,
        now: Ts,
    ) -> Result<bool> {
        let now = exactly_words::time::fmt(now);
        if exactly_words::fault::once(exactly_words::fault::Point::FinishReplyLost) {
            self.lose_next_reply();
        }
        self.write(|tx| {
            let now = tx.now(&now);
            let ok = tx.exec(
                &format!(
                    "DELETE FROM effect_ledger WHERE effect_key = ?1 AND fencing_token = ?3 AND {}
                       AND ?3 = (SELECT max(fencing_token) FROM job_lease WHERE job_key = ?2)",
                    still_as_seen(4)
                ),
                args![key, job, token, seen.state, seen.version, seen.updated_at],
            )? == 1;
            // No row at all: our delete committed on an earlier try whose reply was lost (only
            // a release deletes an unsettled row, and ours was ours to release).
            if !ok && read_row(tx, key)?.is_none() {
                return Ok(true);
            }
            if ok {
                tx.exec(
                    "UPDATE exactly_approvals SET state = 'approved', consumed_at = NULL, \
                         consumed_token = NULL
                     WHERE effect_key = ?1 AND state = 'consumed' AND consumed_token = ?2",
                    args![key, token],
                )?;
                record_event(
                    tx,
                    &NewEvent::new(EventKind::EffectReleased, now)
                        .job(job)
                        .effect(key)
                        .token(token),
                )?;
            } else {
                fenced(tx, job, Some(key), token, "release refused", now)?;
            }
            Ok(ok)
        })
    }
}

/// Stored text equal to what was written (PostgreSQL's text stores a NUL as U+FFFD).
fn same_text(stored: Option<&str>, written: Option<&str>) -> bool {
    match (stored, written) {
        (Some(s), Some(w)) => s == w || s == w.replace('\0', "\u{FFFD}"),
        (s, w) => s == w,
    }
}

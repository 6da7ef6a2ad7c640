//! The hot transitions on PostgreSQL as one round trip each: a call of the function
//! `pg_functions` installed for it (an effect's begin and finish: the one statement of
//! `pg_single`), sent outside any transaction (it commits on its own). Each
//! answers what the transaction in `ledger.rs`/`lease.rs` would, or `None` when that
//! transaction must decide (the function wrote nothing then), and the caller runs it as before.
//! SQLite, a database whose functions are missing or another version's, and the guard switched
//! off for a proof all take the transactions.
use super::db::{args, DbError, DbResult, Row};
use super::ledger::{granted, guard_off, SUBMIT_MIN_LEFT};
use super::ledger_rows::{
    Begin, NewEffect, Seen, SendEnd, SenderLease, SentBy, Submission, Submit,
};
use super::pg::{PgConn, PgStore};
use super::rows::ts;
use super::{int, text, text_or_empty, Conn, LeaseClaim, Store};
use exactly_words::state::{EffectState, EventKind};
use exactly_words::time::Ts;
use exactly_words::Result;

/// The first row of `sql`'s answer, read by `f`; the server's clock (column `at`) noted.
fn first<T>(
    c: &mut PgConn,
    sql: &str,
    args: &[super::db::Arg<'_>],
    at: usize,
    f: impl FnOnce(&Row<'_>) -> DbResult<T>,
) -> DbResult<T> {
    maybe_first(c, sql, args, at, f)?.ok_or(DbError::NoRows)
}

/// [`first`], for a statement that answers no row when it wrote nothing.
fn maybe_first<T>(
    c: &mut PgConn,
    sql: &str,
    args: &[super::db::Arg<'_>],
    at: usize,
    f: impl FnOnce(&Row<'_>) -> DbResult<T>,
) -> DbResult<Option<T>> {
    let rows = c.query(sql, args)?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let row = Row::Pg(row);
    c.saw_clock(&text_or_empty(&row, at)?);
    f(&row).map(Some)
}

/// A won send's grant: the lease `until` as of the server's `at`.
fn grant(until: Option<Ts>, at: &str) -> super::ledger_rows::Granted {
    granted(&SenderLease { live: false, until }, at)
}

/// What a function's `o_until` is: the job's lease end as stored, named when it holds no time.
const UNTIL: &str = "job_lease.lease_until";

fn never(_: &impl Sized) -> bool {
    false
}

impl Store {
    /// The PostgreSQL store, when the transitions may go by their functions.
    fn fast_pg(&self) -> Option<&PgStore> {
        match &self.conn {
            Conn::Pg(db) if db.fast && !guard_off() => Some(db),
            _ => None,
        }
    }

    /// `begin_tx` in one round trip; None: fenced, the key is taken (or no function), and the
    /// transaction reads which.
    pub(super) fn fast_begin(
        &mut self,
        e: &NewEffect<'_>,
        submit_as: Option<SentBy<'_>>,
        now: Ts,
    ) -> Result<Option<Begin>> {
        let Some(db) = self.fast_pg() else {
            return Ok(None);
        };
        let min_until = exactly_words::time::fmt(exactly_words::time::add(now, SUBMIT_MIN_LEFT));
        let (attempt, sender) = submit_as.map_or((None, None), |a| (Some(a.attempt), a.sender));
        let begin_sql = super::pg_single::begin();
        let answer = db.call(
            &mut |c| {
                let min_until = c.later(&min_until);
                maybe_first(
                    c,
                    begin_sql,
                    args![
                        e.effect_key,
                        e.job_key,
                        e.run_id,
                        e.token,
                        e.terms_shown,
                        e.action_id,
                        e.target_id,
                        e.input_digest,
                        e.observe_cmd,
                        submit_as.is_some(),
                        attempt,
                        sender,
                        min_until,
                        e.input_fields
                    ],
                    1,
                    |r| Ok((text_or_empty(r, 0)?, text_or_empty(r, 1)?, ts(r, 2, UNTIL)?)),
                )
            },
            &never,
        );
        // No row: fenced, or the key is taken; the transaction reads which (and records a
        // fenced claim).
        let Some((state, at, until)) = answer.map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        let seen = |state| Seen {
            state,
            version: 1,
            updated_at: at.clone(),
        };
        Ok(match state.as_str() {
            "claimed" => Some(Begin::Claimed(seen(EffectState::Claimed))),
            "submitted" => Some(Begin::Submitted(
                seen(EffectState::Submitted),
                grant(until, &at),
            )),
            _ => None,
        })
    }

    /// `submit_effect_on` on a row seen `claimed`, no approval asked for, in one round trip;
    /// None: the transaction decides (an approval row, a row changed since it was seen).
    pub(super) fn fast_submit(
        &mut self,
        s: &Submission<'_>,
        seen: &Seen,
        now: Ts,
    ) -> Result<Option<Submit>> {
        let (key, job, run_id, token, by) = (s.key, s.job, s.run_id, s.token, s.by);
        let Some(db) = self.fast_pg() else {
            return Ok(None);
        };
        let min_until = exactly_words::time::fmt(exactly_words::time::add(now, SUBMIT_MIN_LEFT));
        let answer = db.call(
            &mut |c| {
                let min_until = c.later(&min_until);
                first(
                    c,
                    "SELECT o_outcome, o_at, o_until, o_version FROM exactly_submit_effect(
                       ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    args![
                        key,
                        job,
                        run_id,
                        token,
                        by.attempt,
                        by.sender,
                        min_until,
                        seen.state,
                        seen.version,
                        seen.updated_at
                    ],
                    1,
                    |r| {
                        Ok((
                            text_or_empty(r, 0)?,
                            text_or_empty(r, 1)?,
                            ts(r, 2, UNTIL)?,
                            int(r, 3)?,
                        ))
                    },
                )
            },
            &never,
        );
        let (outcome, at, until, version) = answer.map_err(|e| self.err(e))?;
        Ok(match outcome.as_str() {
            "fenced" => Some(Submit::Fenced),
            "lease_ending" => Some(Submit::LeaseEnding { until }),
            "won" => Some(Submit::Won {
                approval_consumed: false,
                seen: Seen {
                    state: EffectState::Submitted,
                    version: version.unwrap_or(0),
                    updated_at: at.clone(),
                },
                granted: grant(until, &at),
            }),
            _ => None,
        })
    }

    /// `finish_effect_on`'s compare-and-set and its event in one round trip; None: it did not
    /// apply (a retry meeting its own write, a fenced write), and the transaction says which.
    pub(super) fn fast_finish(&mut self, end: &SendEnd<'_>, seen: &Seen) -> Result<Option<bool>> {
        let (key, job, token, state) = (end.key, end.job, end.token, &end.state);
        let (answer, (raw, total)) = (end.answer(), end.stored_output());
        let detail = exactly_words::sanitize::inert_trunc(end.response, 200);
        // The fault point `finish_reply_lost` loses the reply of the write that applies.
        let lose = self.lose_reply;
        let Some(db) = self.fast_pg() else {
            return Ok(None);
        };
        let kind = if *state == EffectState::Done {
            EventKind::EffectDone
        } else {
            EventKind::EffectUnknown
        };
        // A `done` moves no counter: its statement has no part for one.
        let done = *state == EffectState::Done;
        let finish_sql = if done {
            super::pg_single::finish_done()
        } else {
            super::pg_single::finish()
        };
        let reply = db.call(
            &mut |c| {
                let args = args![
                    key,
                    job,
                    token,
                    state,
                    answer,
                    raw,
                    total,
                    seen.state,
                    seen.version,
                    seen.updated_at,
                    kind,
                    detail
                ];
                if done {
                    Ok(maybe_first(c, finish_sql, args, 0, |_| Ok(()))?.is_some())
                } else {
                    first(c, finish_sql, args, 1, |r| Ok(text_or_empty(r, 0)? == "ok"))
                }
            },
            &|ok: &bool| lose && *ok,
        );
        // A reply lost or not, the fault is spent once the write it was for applied.
        if !matches!(reply, Ok(false)) {
            self.lose_reply = false;
        }
        let ok = reply.map_err(|e| self.err(e))?;
        Ok(ok.then_some(true))
    }

    /// `claim_lease_tx` in one round trip.
    pub(super) fn fast_claim(
        &mut self,
        job: &str,
        owner: &str,
        until: &str,
    ) -> Result<Option<LeaseClaim>> {
        let Some(db) = self.fast_pg() else {
            return Ok(None);
        };
        let skew_ms =
            i64::try_from(exactly_words::time::max_skew().as_millis()).unwrap_or(i64::MAX);
        let answer = db.call(
            &mut |c| {
                let until = c.later(until);
                first(
                    c,
                    "SELECT o_won, o_token, o_owner, o_until, o_at
                     FROM exactly_claim_lease(?1, ?2, ?3, ?4)",
                    args![job, owner, until, skew_ms],
                    4,
                    |r| {
                        let token = int(r, 1)?.unwrap_or(0);
                        let owner = text(r, 2)?;
                        Ok(if r.get::<bool>(0)? {
                            LeaseClaim::Won {
                                token,
                                stolen_from: owner.map(|o| (o, token - 1)),
                            }
                        } else {
                            LeaseClaim::Held {
                                owner: owner.unwrap_or_default(),
                                token,
                                until: crate::rows::ts_req(r, 3, "job_lease.lease_until")?,
                            }
                        })
                    },
                )
            },
            &never,
        );
        answer.map(Some).map_err(|e| self.err(e))
    }

    /// `set_lease_until` in one round trip.
    pub(super) fn fast_set_lease(
        &mut self,
        job: &str,
        token: i64,
        until: &str,
        only_held: bool,
        what: &str,
    ) -> Result<Option<bool>> {
        let Some(db) = self.fast_pg() else {
            return Ok(None);
        };
        let answer = db.call(
            &mut |c| {
                let until = c.later(until);
                first(
                    c,
                    "SELECT o_ok, o_at FROM exactly_set_lease(?1, ?2, ?3, ?4, ?5)",
                    args![job, token, until, only_held, what],
                    1,
                    |r| r.get::<bool>(0),
                )
            },
            &never,
        );
        answer.map(Some).map_err(|e| self.err(e))
    }

    /// `renew_leases` in one round trip, whatever their number.
    pub(super) fn fast_renew_many(
        &mut self,
        leases: &[(&str, i64, String)],
    ) -> Result<Option<Vec<Option<bool>>>> {
        let Some(db) = self.fast_pg() else {
            return Ok(None);
        };
        let jobs: Vec<&str> = leases.iter().map(|l| l.0).collect();
        let tokens: Vec<i64> = leases.iter().map(|l| l.1).collect();
        let answer = db.call(
            &mut |c| {
                let untils: Vec<String> = leases.iter().map(|l| c.later(&l.2)).collect();
                let rows = c.query_typed(
                    "SELECT o_result, o_at FROM exactly_renew_leases($1, $2, $3)",
                    &[&jobs, &tokens, &untils],
                )?;
                if let Some(r) = rows.first() {
                    c.saw_clock(&text_or_empty(&Row::Pg(r), 1)?);
                }
                rows.iter()
                    .map(|r| Ok(int(&Row::Pg(r), 0)?.map(|n| n == 1)))
                    .collect::<DbResult<Vec<_>>>()
            },
            &never,
        );
        let out = answer.map_err(|e| self.err(e))?;
        if out.len() != leases.len() {
            return Err(exactly_words::Error::Store(format!(
                "database {}: {} renewals answered for {} leases",
                self.path,
                out.len(),
                leases.len()
            )));
        }
        Ok(Some(out))
    }
}

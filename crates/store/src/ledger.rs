//! The effect aggregate: the ledger's transitions (claimed → submitted → done | unknown,
//! cancelled), each a compare-and-set on the row as its writer read it. Each method is one
//! transaction; each write that acts for a job carries its fencing token and is refused when a
//! higher token exists for the job.
use super::db::{args, DbResult, Optional, Tx};
use super::lease::{current_token, fenced};
use super::ledger_rows::*;
use super::rows::{time_in, ts_req};
use super::{int, record_event, text, word, NewEvent, Store, RELEASED};
use exactly_words::policy::Gate;
use exactly_words::state::EventKind;
use exactly_words::state::{ApprovalState, EffectState};
use exactly_words::time::Ts;
use exactly_words::Result;

/// The proof switch (`proof` feature, built only for the tests).
#[cfg(feature = "proof")]
static GUARD_OFF: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Switches off the compare-and-set on the version a writer read and the in-flight check,
/// leaving the guard this crate had before them (state checks and fencing only), so a test can
/// show that its interleavings find the duplicate they prevent. For that proof only: it exists
/// only in a build with the `proof` feature, which the test suite turns on.
#[cfg(feature = "proof")]
pub fn switch_guard_off_for_proof(off: bool) {
    GUARD_OFF.store(off, std::sync::atomic::Ordering::SeqCst);
}

#[cfg(feature = "proof")]
pub(super) fn guard_off() -> bool {
    GUARD_OFF.load(std::sync::atomic::Ordering::SeqCst)
}

/// Without the `proof` feature the guard is always on.
#[cfg(not(feature = "proof"))]
pub(super) const fn guard_off() -> bool {
    false
}

/// The SQL condition "the row is still as seen" over parameters ?S (state), ?V (version) and ?U
/// (updated_at), numbered from `first`.
pub(super) fn still_as_seen(first: usize) -> String {
    if guard_off() {
        return format!(
            "state = ?{} AND (?{} IS NULL OR 1) AND (?{} IS NULL OR 1)",
            first,
            first + 1,
            first + 2
        );
    }
    format!(
        "state = ?{} AND coalesce(version, 0) = ?{} AND updated_at = ?{}",
        first,
        first + 1,
        first + 2
    )
}

/// The version a transition writes.
pub(super) const BUMP: &str = "version = coalesce(version, 0) + 1";

/// The least of a lease that must be left for `submitted` to be written: the shortest lease
/// accepted anywhere. The lease is the permission to send.
pub const SUBMIT_MIN_LEFT: std::time::Duration = std::time::Duration::from_millis(100);

/// The lease a send under (`job`, `token`) holds now, and whether it is live, judged against
/// `now` minus the skew margin and the stop margin.
pub(super) fn sender_lease(
    tx: &Tx<'_>,
    job: &str,
    token: Option<i64>,
    now: &str,
) -> DbResult<SenderLease> {
    let now = tx.now(now);
    let Some(token) = token else {
        return Ok(SenderLease::default());
    };
    let until = tx
        .one(
            "SELECT lease_until FROM job_lease WHERE job_key = ?1 AND fencing_token = ?2 \
             AND lease_until <> ?3",
            args![job, token, RELEASED],
            |r| ts_req(r, 0, LEASE_UNTIL),
        )
        .optional()?;
    lease_until(until, now)
}

/// The column a sender's lease end is read from, named when it holds no time.
const LEASE_UNTIL: &str = "job_lease.lease_until";

/// A sender's lease that ends at `until` (None: its token holds no lease), judged at `now`.
fn lease_until(until: Option<Ts>, now: &str) -> DbResult<SenderLease> {
    Ok(SenderLease {
        live: !guard_off() && until.map(|u| sending_until(u, now)).transpose()? == Some(true),
        until,
    })
}

/// What a reservation that may submit at once must know before it writes: the job's current
/// token, the lease `token` holds (as [`sender_lease`] reads it) and whether the key has an
/// approval row. On SQLite one statement (the job's lease is one row); on PostgreSQL, where
/// this is the fallback beside `exactly_begin_effect`, the three reads as they were.
fn begin_facts(
    tx: &Tx<'_>,
    job: &str,
    key: &str,
    token: i64,
    now: &str,
) -> DbResult<(Option<i64>, SenderLease, bool)> {
    if tx.is_pg() {
        let current = current_token(tx, job)?;
        let asked = tx
            .one(
                "SELECT 1 FROM exactly_approvals WHERE effect_key = ?1",
                args![key],
                |_| Ok(true),
            )
            .optional()?
            .unwrap_or(false);
        return Ok((current, sender_lease(tx, job, Some(token), now)?, asked));
    }
    let row = tx
        .one(
            "SELECT fencing_token, lease_until,
                    EXISTS (SELECT 1 FROM exactly_approvals WHERE effect_key = ?2)
             FROM job_lease WHERE job_key = ?1",
            args![job, key],
            |r| Ok((r.get::<i64>(0)?, text(r, 1)?, r.get::<bool>(2)?)),
        )
        .optional()?;
    Ok(match row {
        Some((current, until, asked)) => {
            let until = until
                .filter(|u| current == token && u != RELEASED)
                .map(|u| time_in(LEASE_UNTIL, &u))
                .transpose()?;
            (Some(current), lease_until(until, now)?, asked)
        }
        // No lease row: fenced, whatever else there is.
        None => (None, SenderLease::default(), false),
    })
}

/// A sender whose lease let it send until `until` may still be sending at `now`: the lease has
/// not ended on every clock (the skew margin), or the command it wrapped has not yet been
/// stopped (`exactly effect` stops it at its deadline, then waits out its grace before SIGKILL).
/// A `now` that is not a time is the database's corruption.
fn sending_until(until: Ts, now: &str) -> DbResult<bool> {
    let now = time_in("the transaction's clock", now)?;
    let margin = exactly_words::time::max_skew() + exactly_words::policy::stop_margin();
    let margin = chrono::Duration::from_std(margin).unwrap_or(chrono::Duration::MAX);
    Ok(now.checked_sub_signed(margin).is_none_or(|m| until >= m))
}

/// Whether the sender of a `submitted` row may still be sending: judged from the deadline the row
/// carries (the margin travels with the row, so a takeover of the job's lease shortens nothing),
/// and, for a row that carries none (written before deadlines, or by another program), from its
/// token's lease.
pub(super) fn row_sender(tx: &Tx<'_>, row: &LedgerRow, now: &str) -> DbResult<SenderLease> {
    let lease = sender_lease(tx, &row.job_key, row.fencing_token, now)?;
    match row.sender_until {
        Some(until) => {
            let now = tx.now(now);
            Ok(SenderLease {
                live: !guard_off() && (sending_until(until, now)? || lease.live),
                until: Some(until).max(lease.until),
            })
        }
        None => Ok(lease),
    }
}

/// What a won send is granted: its lease's end and the time left to it on the database's clock.
/// No lease, or a `now` that is not a time, grants nothing: the released instant and no time
/// left, so the send's deadline is at once, the safe direction for one that cannot be read.
pub(super) fn granted(lease: &SenderLease, now: &str) -> Granted {
    let left = match (lease.until, exactly_words::time::parse(now)) {
        (Some(u), Some(n)) => (u - n).to_std().unwrap_or_default(),
        _ => std::time::Duration::ZERO,
    };
    Granted {
        until: lease.until.unwrap_or_else(released),
        left,
        ends: None,
    }
}

/// The released instant ([`RELEASED`]), before every other.
fn released() -> Ts {
    chrono::DateTime::UNIX_EPOCH
}

/// Whether `row` is what a transition to `state` under `token` made of the row as `seen`: the
/// one transition after `seen` (version + 1), to that state, with that token. A retried write
/// whose first try committed (its reply lost) finds this, and is not fenced by its own row.
pub(super) fn wrote(row: &LedgerRow, state: &EffectState, token: i64, seen: &Seen) -> bool {
    !guard_off()
        && row.state == *state
        && row.fencing_token == Some(token)
        && row.version == seen.version + 1
}

impl Store {
    /// Reserves an effect: inserts `claimed` (fenced by token), or on the unique violation
    /// returns the existing row so the caller can branch on its state.
    pub fn begin_effect(&mut self, e: &NewEffect<'_>, now: Ts) -> Result<Begin> {
        self.begin_tx(e, None, now)
    }

    /// Reserves an effect and, when nothing stands in the way, marks it `submitted` for
    /// `attempt` in the same transaction ([`Begin::Submitted`]): one commit instead of two for
    /// the common case. The state machine is unchanged: `submitted` is durable before anything
    /// is sent, and a crash before the send leaves `submitted` for the observer, as after
    /// [`Store::submit_effect_on`]. Anything that needs the full path — an approval row for the
    /// key (or any earlier row), or less than [`SUBMIT_MIN_LEFT`] of the lease — reserves
    /// `claimed` as [`Store::begin_effect`] does, and the caller submits as before. For callers
    /// that need no approval (`needs_approval` asks for one in the submit step).
    pub fn begin_and_submit_effect(
        &mut self,
        e: &NewEffect<'_>,
        by: SentBy<'_>,
        now: Ts,
    ) -> Result<Begin> {
        self.begin_tx(e, Some(by), now)
    }

    fn begin_tx(
        &mut self,
        e: &NewEffect<'_>,
        submit_as: Option<SentBy<'_>>,
        now_ts: Ts,
    ) -> Result<Begin> {
        // After an asynchronous failover the ledger may have lost the row of an effect already
        // sent: within the window a new row is recorded `unknown`, so its observer (or a
        // person) settles it before anything is sent (`pg_timeline`).
        let hold = self.failover_window(now_ts);
        if !hold {
            if let Some(begun) = self.fast_begin(e, submit_as, now_ts)? {
                return Ok(begun);
            }
        }
        let now = exactly_words::time::fmt(now_ts);
        let min_until = exactly_words::time::fmt(exactly_words::time::add(now_ts, SUBMIT_MIN_LEFT));
        let (mut closed, was_held) = (false, hold);
        let begun = self.write(|tx| {
            let min_until = time_in("the least lease end", &tx.later(&min_until))?;
            let now = tx.now(&now);
            // The window's end is read in this transaction: the default one closes once every
            // effect of the old timeline's last leases is accounted for.
            let hold = hold && super::pg_timeline::held(tx, now)?;
            closed = was_held && !hold;
            let (current, lease, asked) = match submit_as {
                Some(_) => begin_facts(tx, e.job_key, e.effect_key, e.token, now)?,
                None => (current_token(tx, e.job_key)?, SenderLease::default(), true),
            };
            if current != Some(e.token) {
                fenced(
                    tx,
                    e.job_key,
                    Some(e.effect_key),
                    e.token,
                    "effect claim refused",
                    now,
                )?;
                return Ok(Begin::Fenced);
            }
            // Submit at once only with no approval row for the key (an approval asked for by
            // anyone binds every caller) and enough lease left to send under.
            let enough = lease.until.is_some_and(|u| u >= min_until);
            let attempt = submit_as.filter(|_| !asked && enough && !hold);
            let state = if hold {
                EffectState::Unknown
            } else if attempt.is_some() {
                EffectState::Submitted
            } else {
                EffectState::Claimed
            };
            match insert_row_tx(tx, e, &state, attempt, &lease, now)? {
                // The token was checked above, in this transaction: no row means the key is taken.
                1.. if hold => held_unknown_tx(tx, e, now),
                1.. => {
                    let seen = Seen {
                        state,
                        version: 1,
                        updated_at: now.to_string(),
                    };
                    Ok(if attempt.is_some() {
                        Begin::Submitted(seen, granted(&lease, now))
                    } else {
                        Begin::Claimed(seen)
                    })
                }
                0 => key_taken_tx(tx, e, now),
            }
        })?;
        if closed {
            self.failover_window_closed();
        }
        Ok(begun)
    }

    /// The compare-and-set `claimed` → `submitted` on the row as `seen`, committed before the
    /// request leaves. The approval requirement belongs to the key: once anyone asked for
    /// approval of it (or `needs_approval`, which asks now), it is sent only once approved; the
    /// approval is consumed in the same transaction.
    pub fn submit_effect_on(
        &mut self,
        s: &Submission<'_>,
        seen: &Seen,
        now_ts: Ts,
    ) -> Result<Submit> {
        let Submission {
            key,
            job,
            token,
            by,
            needs_approval,
            ..
        } = *s;
        if !needs_approval {
            if let Some(s) = self.fast_submit(s, seen, now_ts)? {
                return Ok(s);
            }
        }
        let now = exactly_words::time::fmt(now_ts);
        let min_until = exactly_words::time::fmt(exactly_words::time::add(now_ts, SUBMIT_MIN_LEFT));
        self.write(|tx| {
            let min_until = time_in("the least lease end", &tx.later(&min_until))?;
            let now = tx.now(&now);
            if current_token(tx, job)? != Some(token) {
                fenced(tx, job, Some(key), token, "submit refused", now)?;
                return Ok(Submit::Fenced);
            }
            let lease = sender_lease(tx, job, Some(token), now)?;
            if lease.until.is_none_or(|u| u < min_until) {
                return Ok(Submit::LeaseEnding { until: lease.until });
            }
            if seen.state != EffectState::Claimed {
                return Ok(Submit::Lost(Box::new(
                    read_row(tx, key)?.unwrap_or_default(),
                )));
            }
            let approval: Option<ApprovalState> = tx
                .one(
                    "SELECT state FROM exactly_approvals WHERE effect_key = ?1",
                    args![key],
                    |r| word(r, 0),
                )
                .optional()?;
            // The rule is the domain's (`policy::gate`); the store applies it in this
            // transaction, with the compare-and-set below.
            let consumed_before = approval == Some(ApprovalState::Consumed);
            let consume = match exactly_words::policy::gate(approval, needs_approval) {
                Gate::Ask => {
                    ask_approval_tx(tx, s, now)?;
                    return Ok(Submit::NotApproved);
                }
                Gate::Send { consume } => consume,
                Gate::Cancel => {
                    cancel_as_seen_tx(tx, key, seen, now)?;
                    return Ok(Submit::Denied);
                }
                Gate::Wait => return Ok(Submit::NotApproved),
            };
            let Some(version) = submit_as_seen_tx(tx, s, seen, &lease, now)? else {
                let row = read_row(tx, key)?.unwrap_or_default();
                // Our own `submitted`, committed on an earlier try whose reply was lost: won.
                if wrote(&row, &EffectState::Submitted, token, seen)
                    && row.attempt.as_deref() == Some(by.attempt)
                {
                    let seen = row.seen();
                    let granted = granted(&lease, now);
                    return Ok(Submit::Won {
                        approval_consumed: consumed_before,
                        seen,
                        granted,
                    });
                }
                return Ok(Submit::Lost(Box::new(row)));
            };
            let after = Seen {
                state: EffectState::Submitted,
                version: version.unwrap_or(0),
                updated_at: now.to_string(),
            };
            if consume {
                consume_approval_tx(tx, s, now)?;
            }
            Ok(Submit::Won {
                approval_consumed: consume,
                seen: after,
                granted: granted(&lease, now),
            })
        })
    }

    /// Counts an attempt that found its effect already `done`.
    pub fn record_duplicate(
        &mut self,
        key: &str,
        job: &str,
        token: Option<i64>,
        detail: &str,
        now: Ts,
    ) -> Result<()> {
        let now = exactly_words::time::fmt(now);
        self.write(|tx| {
            let now = tx.now(&now);
            let mut ev = NewEvent::new(EventKind::DuplicateSuppressed, now)
                .job(job)
                .effect(key)
                .detail(detail);
            ev.token = token;
            record_event(tx, &ev)
        })
    }

    /// Moves the deadline a `submitted` row carries on to `until` (the sender's lease, renewed),
    /// while the row is still ours (`attempt`, `token`) and the lease still is too. False when
    /// nothing moved: the sender must then keep to the deadline already recorded.
    pub fn extend_sender(
        &mut self,
        key: &str,
        attempt: &str,
        job: &str,
        token: i64,
        until: &str,
    ) -> Result<bool> {
        self.write(|tx| {
            Ok(tx.exec(
                "UPDATE effect_ledger SET sender_until = ?5
                 WHERE effect_key = ?1 AND state = 'submitted' AND attempt = ?2
                   AND fencing_token = ?4 AND (sender_until IS NULL OR sender_until < ?5)
                   AND EXISTS (SELECT 1 FROM job_lease WHERE job_key = ?3 AND fencing_token = ?4
                               AND lease_until >= ?5)",
                args![key, attempt, job, token, until],
            )? == 1)
        })
    }

    /// Records that an attempt of `key` (job `job`, token `token`) met an earlier attempt still
    /// in flight and sent nothing (`why`).
    pub fn record_retry_in_flight(
        &mut self,
        job: &str,
        key: &str,
        token: i64,
        why: &str,
        now: Ts,
    ) -> Result<()> {
        let now = exactly_words::time::fmt(now);
        let detail = exactly_words::sanitize::inert_trunc(why, 300);
        self.write(|tx| {
            let now = tx.now(&now);
            let mut ev = NewEvent::new(EventKind::RetryInFlight, now)
                .job(job)
                .effect(key)
                .detail(&detail);
            ev.token = Some(token);
            record_event(tx, &ev)
        })
    }

    /// Records that the sender of `row` goes by our host name `host` on another machine than
    /// ours (`host_id`): two process tables under one name, so its pid says nothing here.
    pub fn record_host_clash(
        &mut self,
        row: &LedgerRow,
        host: &str,
        host_id: &str,
        now: Ts,
    ) -> Result<()> {
        let now = exactly_words::time::fmt(now);
        let theirs = row
            .sender
            .as_deref()
            .and_then(|s| s.split(';').next())
            .unwrap_or("?");
        let detail = exactly_words::sanitize::inert_trunc(
            &format!(
                "host name {host:?} is used by two machines: the sender of this effect ran on \
                 {theirs}, this attempt on {host_id}; judged by its deadline, not its pid"
            ),
            300,
        );
        self.write(|tx| {
            let now = tx.now(&now);
            let mut ev = NewEvent::new(EventKind::HostClash, now)
                .job(&row.job_key)
                .effect(&row.effect_key)
                .detail(&detail);
            ev.token = row.fencing_token;
            record_event(tx, &ev)
        })
    }

    pub fn effect(&mut self, key: &str) -> Result<Option<LedgerRow>> {
        self.read(|tx| read_row(tx, key))
    }
}

/// The claim's new row (`claimed`, `submitted` at once with its sender, or `unknown` in a
/// failover window), written only while `e.token` is the job's newest; 0 when the key is taken.
fn insert_row_tx(
    tx: &Tx<'_>,
    e: &NewEffect<'_>,
    state: &EffectState,
    attempt: Option<SentBy<'_>>,
    lease: &SenderLease,
    now: &str,
) -> DbResult<usize> {
    tx.exec(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
            terms_shown, created_at, updated_at, action_id, target_id, \
                input_digest, observe_cmd,
            attempt, version, sender, sender_until, input_fields)
         SELECT ?1, ?2, ?3, ?4, ?11, ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?12, 1, ?13, ?14, ?15
         WHERE ?4 = (SELECT max(fencing_token) FROM job_lease WHERE job_key = ?2)
         ON CONFLICT (effect_key) DO NOTHING",
        args![
            e.effect_key,
            e.job_key,
            e.run_id,
            e.token,
            e.terms_shown,
            now,
            e.action_id,
            e.target_id,
            e.input_digest,
            e.observe_cmd,
            state,
            attempt.map(|a| a.attempt),
            attempt.and_then(|a| a.sender),
            attempt.and(lease.until.map(exactly_words::time::fmt)),
            e.input_fields
        ],
    )
}

/// A row written `unknown` in a failover window: its event, and the row as it now stands.
fn held_unknown_tx(tx: &Tx<'_>, e: &NewEffect<'_>, now: &str) -> DbResult<Begin> {
    record_event(
        tx,
        &NewEvent::new(EventKind::EffectUnknown, now)
            .job(e.job_key)
            .effect(e.effect_key)
            .token(e.token)
            .detail(super::pg_timeline::HOLD),
    )?;
    let row = read_row(tx, e.effect_key)?.unwrap_or_default();
    Ok(Begin::Existing(Box::new(row), SenderLease::default()))
}

/// The key is taken: the row (and its sender's lease, when `submitted`) is how a second
/// attempt learns what is going on; an observer it lacked is added.
fn key_taken_tx(tx: &Tx<'_>, e: &NewEffect<'_>, now: &str) -> DbResult<Begin> {
    let row = read_row(tx, e.effect_key)?.unwrap_or_default();
    if row.observe_cmd.is_none() && e.observe_cmd.is_some() {
        tx.exec(
            "UPDATE effect_ledger SET observe_cmd = ?2 WHERE effect_key = ?1",
            args![e.effect_key, e.observe_cmd],
        )?;
    }
    let lease = if row.state == EffectState::Submitted {
        row_sender(tx, &row, now)?
    } else {
        SenderLease::default()
    };
    Ok(Begin::Existing(Box::new(row), lease))
}

/// Asks a person to approve the key (`pending`), with its event.
fn ask_approval_tx(tx: &Tx<'_>, s: &Submission<'_>, now: &str) -> DbResult<()> {
    tx.exec(
        "INSERT INTO exactly_approvals (effect_key, job_key, terms_shown, \
             state, requested_at)
         VALUES (?1, ?2, ?3, 'pending', ?4)",
        args![s.key, s.job, s.terms, now],
    )?;
    record_event(
        tx,
        &NewEvent::new(EventKind::ApprovalRequested, now)
            .job(s.job)
            .effect(s.key),
    )
}

/// A denied effect ends `cancelled`, if its row is still as seen.
fn cancel_as_seen_tx(tx: &Tx<'_>, key: &str, seen: &Seen, now: &str) -> DbResult<()> {
    tx.exec(
        &format!(
            "UPDATE effect_ledger SET state = 'cancelled', updated_at = ?2, {BUMP}
             WHERE effect_key = ?1 AND {}",
            still_as_seen(3)
        ),
        args![key, now, seen.state, seen.version, seen.updated_at],
    )?;
    Ok(())
}

/// The compare-and-set `claimed` → `submitted` on the row as seen, under the job's newest
/// token: the row's new version, or None when it was lost.
fn submit_as_seen_tx(
    tx: &Tx<'_>,
    s: &Submission<'_>,
    seen: &Seen,
    lease: &SenderLease,
    now: &str,
) -> DbResult<Option<Option<i64>>> {
    tx.one(
        &format!(
            "UPDATE effect_ledger SET state = 'submitted', job_key = ?2, run_id = ?3,
                fencing_token = ?4, attempt = ?5, updated_at = ?6, {BUMP},
                sender = ?10, sender_until = ?11
             WHERE effect_key = ?1 AND {}
               AND ?4 = (SELECT max(fencing_token) FROM job_lease WHERE job_key = ?2)
             RETURNING coalesce(version, 0)",
            still_as_seen(7)
        ),
        args![
            s.key,
            s.job,
            s.run_id,
            s.token,
            s.by.attempt,
            now,
            seen.state,
            seen.version,
            seen.updated_at,
            s.by.sender,
            lease.until.map(exactly_words::time::fmt)
        ],
        |r| int(r, 0),
    )
    .optional()
}

/// The approval the send used is consumed, by this token, with its event.
fn consume_approval_tx(tx: &Tx<'_>, s: &Submission<'_>, now: &str) -> DbResult<()> {
    tx.exec(
        "UPDATE exactly_approvals SET state = 'consumed', consumed_at = ?2, \
             consumed_token = ?3
         WHERE effect_key = ?1 AND state = 'approved'",
        args![s.key, now, s.token],
    )?;
    record_event(
        tx,
        &NewEvent::new(EventKind::ApprovalConsumed, now)
            .job(s.job)
            .effect(s.key)
            .token(s.token),
    )
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;

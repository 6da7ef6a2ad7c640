//! The firing aggregate: identity = job + scheduled instant (the primary key is the dedupe).
//! A firing's fate — started, duplicate, skipped, coalesced, queued, saturated, missed — is
//! decided in one transaction together with the lease claim, so a crash never leaves half a
//! decision; a firing whose run died is resumed, at most `policy::MAX_ATTEMPTS` runs in all (the
//! policies are the domain's, `crate::firing`: the store supplies the facts inside the
//! transaction).
use super::db::{args, DbResult, Optional, Tx};
use super::firing_rows::{start_run, upsert_firing};
pub use super::firing_rows::{
    AfterFailure, FailureRules, FireRequest, Fired, Resumed, RunOwner, Started,
};
use super::job::paused;
use super::lease::{claim_lease_tx, LeaseClaim};
use super::paused_rows::{covered_tx, roll_skipped_tx};
use super::waiting::waiting_before;
use super::{record_event, text, word, NewEvent, Store};
use exactly_words::policy::{Overlap, WhileLive};
use exactly_words::state::{EventKind, FiringKind, FiringState};
use exactly_words::Result;

impl Store {
    /// The latest slot the schedule itself fired (manual and backfill firings do not count).
    pub fn last_slot(&mut self, job: &str) -> Result<Option<exactly_words::time::Ts>> {
        self.read(|tx| last_slot_tx(tx, job))
    }

    /// [`Store::last_slot`] of each job, in one transaction: a scheduler starting with many
    /// jobs asks once, not once per job.
    pub fn last_slots(&mut self, jobs: &[&str]) -> Result<Vec<Option<exactly_words::time::Ts>>> {
        self.read(|tx| jobs.iter().map(|j| last_slot_tx(tx, j)).collect())
    }

    /// Records firings that passed with nobody to run them (beyond the catch-up window): each
    /// slot a `missed` row (or `skipped` while paused) whose detail is `reason`, the counter
    /// raised by each one. `total` may exceed the slots given when the gap is too long to record
    /// row by row. Slots another scheduler already fired are left alone. Returns how many were
    /// counted.
    pub fn record_missed(
        &mut self,
        job: &str,
        slots: &[String],
        total: u64,
        owner: &str,
        now: &str,
        reason: &str,
    ) -> Result<u64> {
        self.write(|tx| Ok(missed_tx(tx, job, slots, total, owner, now, reason)?.0))
    }

    /// Decides a firing: a duplicate of one already fired, skipped while paused, started under
    /// a lease we just won, or — a run being live — coalesced, queued, saturated or missed per
    /// the job's overlap policy. One transaction.
    pub fn fire(&mut self, f: &FireRequest<'_>) -> Result<Fired> {
        self.write(|tx| fire_tx(tx, f))
    }

    /// Decides several firings (see [`Store::fire`]) in one transaction: one commit and one
    /// wait for the write lock for the lot, so a scheduler with hundreds of jobs due at the same
    /// instant starts them all on time. The caller keeps batches small (the write lock is held
    /// for the whole batch) and gives each job at most one firing per batch.
    pub fn fire_many(&mut self, batch: &[FireRequest<'_>]) -> Result<Vec<Fired>> {
        self.write(|tx| batch.iter().map(|f| fire_tx(tx, f)).collect())
    }

    /// [`Store::fire_many`] for a scheduler's due slots, each judged by its lateness when the
    /// transaction holds the database (`clock` is read then, not before a wait for a lock or a
    /// server): a slot later than its window is recorded missed for its reason, never started
    /// late; the others are decided at that instant, their lease measured from it.
    pub fn fire_due(
        &mut self,
        batch: &[DueRequest<'_>],
        clock: &dyn Fn() -> exactly_words::time::Ts,
    ) -> Result<Vec<DueFate>> {
        self.write(|tx| {
            let at = clock();
            let at_text = exactly_words::time::fmt(at);
            batch.iter().map(|d| due_tx(tx, d, at, &at_text)).collect()
        })
    }

    /// [`Store::fire_due`] tried at most `tries` times on PostgreSQL: `None` when each try
    /// conflicted with concurrent transactions (see [`Store::write_or_conflict`]); nothing of
    /// the batch was decided then.
    pub fn fire_due_or_conflict(
        &mut self,
        batch: &[DueRequest<'_>],
        clock: &dyn Fn() -> exactly_words::time::Ts,
        tries: u32,
    ) -> Result<Option<Vec<DueFate>>> {
        self.write_or_conflict(tries, |tx| {
            let at = clock();
            let at_text = exactly_words::time::fmt(at);
            batch.iter().map(|d| due_tx(tx, d, at, &at_text)).collect()
        })
    }
}

fn last_slot_tx(tx: &Tx<'_>, job: &str) -> DbResult<Option<exactly_words::time::Ts>> {
    tx.one(
        "SELECT scheduled_at FROM exactly_firings WHERE job_key = ?1
           AND kind IN ('scheduled', 'catchup') ORDER BY scheduled_at DESC LIMIT 1",
        args![job],
        // Not a time is the row's corruption: read as no slot, the slots since the real last
        // one were neither caught up nor called missed.
        |r| super::rows::ts(r, 0, "exactly_firings.scheduled_at"),
    )
    .optional()
    .map(Option::flatten)
}

/// A scheduler's due slot: fired as `fire` says, unless it is later than `window` when decided.
#[derive(Debug, Clone)]
pub struct DueRequest<'a> {
    /// The firing to decide.
    pub fire: FireRequest<'a>,
    /// The job's catch-up window plus the scheduler's slack: a slot later than this is missed.
    pub window: std::time::Duration,
    /// Why such a slot was missed (its firing's detail).
    pub reason: &'a str,
    /// A slot not due yet, decided ahead of it (its instant, the slot plus its jitter, on the
    /// caller's clock): started only where nothing stands in its way (no firing of it yet, no
    /// pause, no run live, no earlier firing waiting, the lease free), its run's recorded
    /// start this instant; anything else is [`DueFate::NotYet`], decided when it falls due.
    pub ahead: Option<&'a str>,
}

/// What became of a due slot.
#[derive(Debug, Clone, PartialEq)]
pub enum DueFate {
    /// Decided in time: its fate.
    Fired(Fired),
    /// Later than its window when decided: recorded `missed` (`skipped` while paused).
    Late {
        /// How long after its slot it was decided (ms).
        late_ms: i64,
        /// Recorded `skipped`, the job being paused.
        skipped: bool,
    },
    /// Asked ahead of its slot, and something stood in its way: nothing was written; it is
    /// decided when it falls due, as any other.
    NotYet,
}

fn due_tx(
    tx: &Tx<'_>,
    d: &DueRequest<'_>,
    at: exactly_words::time::Ts,
    at_text: &str,
) -> DbResult<DueFate> {
    let f = &d.fire;
    // Its instant may have come while the transaction waited for the database: then it is
    // decided as any due slot.
    if let Some(starts_at) = d
        .ahead
        .filter(|s| exactly_words::time::parse(s).is_some_and(|s| s > at))
    {
        return ahead_tx(tx, f, at_text, starts_at);
    }
    // A slot that is not a time is the caller's error, said: read as on time, it was started
    // however late.
    let late_ms = (at - f.slot_ts()?).num_milliseconds();
    let window = d.window.as_millis().min(i64::MAX as u128) as i64;
    if late_ms > window {
        let slots = [f.slot.to_string()];
        let (n, skipped) = missed_tx(tx, f.job, &slots, 1, f.owner, at_text, d.reason)?;
        if n > 0 {
            return Ok(DueFate::Late { late_ms, skipped });
        }
        // Already fired by someone: decided below as the duplicate it is.
    }
    // The lease runs for as long from now as the caller asked from its own now.
    let until = match (
        exactly_words::time::parse(f.now),
        exactly_words::time::parse(f.lease_until),
    ) {
        (Some(asked), Some(until)) if f.lease_until != super::RELEASED => {
            exactly_words::time::fmt(until + (at - asked).max(chrono::Duration::zero()))
        }
        _ => f.lease_until.to_string(),
    };
    let now_fire = FireRequest {
        now: at_text,
        lease_until: &until,
        ..f.clone()
    };
    fire_tx(tx, &now_fire).map(DueFate::Fired)
}

/// A slot decided ahead of its instant `starts_at` (see [`DueRequest::ahead`]): started only on
/// the path where deciding it now and deciding it when due cannot differ, its lease running
/// from `starts_at` for as long as the caller asked; else nothing written.
fn ahead_tx(tx: &Tx<'_>, f: &FireRequest<'_>, at_text: &str, starts_at: &str) -> DbResult<DueFate> {
    let fired: bool = tx.one(
        "SELECT EXISTS (SELECT 1 FROM exactly_firings WHERE job_key = ?1 AND scheduled_at = ?2)",
        args![f.job, f.slot],
        |r| r.get(0),
    )?;
    let now_fire = FireRequest {
        now: at_text,
        ..f.clone()
    };
    if fired
        || f.live_here
        || covered_tx(tx, f.job, f.slot)?.is_some()
        || paused(tx, f.job)?.is_some()
        || waiting_before(tx, &now_fire)?.is_some()
    {
        return Ok(DueFate::NotYet);
    }
    // The lease's end as asked, counted from the slot (the claim moves it to its clock).
    match claim_lease_tx(tx, f.job, f.owner, f.lease_until, at_text)? {
        LeaseClaim::Won { token, stolen_from } => {
            let won = (token, stolen_from);
            started_tx(tx, &now_fire, won, &tx.later(starts_at)).map(DueFate::Fired)
        }
        LeaseClaim::Held { .. } => Ok(DueFate::NotYet),
    }
}

/// [`Store::record_missed`] inside the caller's transaction: (firings counted, whether the job
/// is paused, so they were recorded `skipped`).
fn missed_tx(
    tx: &Tx<'_>,
    job: &str,
    slots: &[String],
    total: u64,
    owner: &str,
    now: &str,
    reason: &str,
) -> DbResult<(u64, bool)> {
    let now = tx.now(now);
    let paused = paused(tx, job)?;
    let state = if paused.is_some() {
        FiringState::Skipped
    } else {
        FiringState::Missed
    };
    let mut inserted = 0u64;
    for s in slots {
        // A slot a pause's rolling row stands for was decided with its pause.
        if covered_tx(tx, job, s)?.is_some() {
            continue;
        }
        inserted += tx.exec(
            "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, owner, created_at, \
                 updated_at, detail)
             VALUES (?1, ?2, 'scheduled', ?3, ?4, ?5, ?5, ?6)
             ON CONFLICT(job_key, scheduled_at) DO NOTHING",
            args![job, s, &state, owner, now, reason],
        )? as u64;
    }
    if inserted == 0 {
        return Ok((0, paused.is_some()));
    }
    let unrecorded = total.saturating_sub(slots.len() as u64);
    let n = inserted + unrecorded;
    let first = slots.first().cloned().unwrap_or_default();
    let last = slots.last().cloned().unwrap_or_default();
    let k = if paused.is_some() {
        EventKind::FiringSkippedPaused
    } else {
        EventKind::FiringMissed
    };
    let detail = if paused.is_some() {
        format!("{n} firing(s) up to {last} passed while paused ({reason})")
    } else if unrecorded > 0 {
        format!(
            "{n} firing(s) up to {last} missed: {reason} (outside the catch-up window; \
                 the latest {inserted} recorded from {first})"
        )
    } else {
        format!(
            "{n} firing(s) from {first} to {last} missed: {reason} (outside the catch-up window)"
        )
    };
    record_event(
        tx,
        &NewEvent::new(k.clone(), now)
            .job(job)
            .actor(owner)
            .detail(&detail),
    )?;
    // record_event counted one; the counter counts firings.
    tx.exec(
        "UPDATE exactly_counters SET n = n + ?3 WHERE kind = ?1 AND job_key = ?2",
        args![k, job, (n - 1) as i64],
    )?;
    Ok((n, paused.is_some()))
}

/// Records a firing's fate as its event, worded by the domain as the scheduler's log says it.
fn fate_event(
    tx: &Tx<'_>,
    f: &FireRequest<'_>,
    kind: EventKind,
    token: Option<i64>,
    fired: &Fired,
) -> DbResult<()> {
    let detail = fired.describe(f.kind, f.slot);
    let mut ev = NewEvent::new(kind, f.now)
        .job(f.job)
        .actor(f.owner)
        .detail(&detail);
    if let Some(t) = token {
        ev = ev.token(t);
    }
    record_event(tx, &ev)
}

fn fire_tx(tx: &Tx<'_>, f: &FireRequest<'_>) -> DbResult<Fired> {
    let existing: Option<(FiringState, Option<String>)> = tx
        .one(
            "SELECT state, owner FROM exactly_firings WHERE job_key = ?1 AND scheduled_at = ?2",
            args![f.job, f.slot],
            |r| Ok((word::<FiringState>(r, 0)?, text(r, 1)?)),
        )
        .optional()?;
    let scheduled = matches!(f.kind, FiringKind::Scheduled | FiringKind::Catchup);
    let existing = match existing {
        // A slot a pause's rolling row stands for was decided (skipped) with its pause.
        None if scheduled => {
            covered_tx(tx, f.job, f.slot)?.map(|owner| (FiringState::Skipped, owner))
        }
        e => e,
    };
    if let Some((state, owner)) = existing {
        if !(f.kind == FiringKind::Backfill && state.never_ran()) {
            let fired = Fired::Duplicate { state, owner };
            fate_event(tx, f, EventKind::FiringDuplicate, None, &fired)?;
            return Ok(fired);
        }
        if state == FiringState::Skipped {
            if let Some((note, by)) = paused(tx, f.job)? {
                // Still paused: a backfill leaves the skipped row (a pause's rolling row
                // among them) as it is.
                return Ok(Fired::Skipped { note, by });
            }
        }
    }
    if let Some((note, by)) = paused(tx, f.job)? {
        // One event for a pause, at its first skipped firing; the counter counts each.
        let earlier: bool = tx.one(
            "SELECT EXISTS (SELECT 1 FROM exactly_firings f WHERE f.job_key = ?1 \
                 AND f.state = 'skipped' AND f.scheduled_at <> ?2 \
                 AND f.updated_at >= (SELECT coalesce(paused_at, '') FROM exactly_jobs \
                                      WHERE job_key = ?1))",
            args![f.job, f.slot],
            |r| r.get(0),
        )?;
        // The schedule's slots skipped in one pause are two rows, not one each: its first, and
        // one rolling row at the latest that counts them (see `ROLLING`).
        let rolled = scheduled && roll_skipped_tx(tx, f, note.as_deref())?;
        if !rolled {
            upsert_firing(tx, f, FiringState::Skipped, None, note.as_deref())?;
        }
        let fired = Fired::Skipped { note, by };
        if earlier || rolled {
            tx.exec(
                "INSERT INTO exactly_counters (kind, job_key, n) VALUES (?1, ?2, 1)
                 ON CONFLICT(kind, job_key) DO UPDATE SET n = exactly_counters.n + 1",
                args![EventKind::FiringSkippedPaused, f.job],
            )?;
        } else {
            fate_event(tx, f, EventKind::FiringSkippedPaused, None, &fired)?;
        }
        return Ok(fired);
    }
    fire_unpaused_tx(tx, f)
}

/// [`fire_tx`] past the duplicate and pause checks: the lease and the overlap policy decide.
fn fire_unpaused_tx(tx: &Tx<'_>, f: &FireRequest<'_>) -> DbResult<Fired> {
    // An earlier firing that waits for the lease (its run died, its effect never happened, or
    // it is queued) goes first: a new slot that took the free lease would pass it, and under
    // coalesce the waiting one would then sit behind every later slot.
    let waiting = if f.live_here || f.kind == FiringKind::Backfill {
        None
    } else {
        waiting_before(tx, f)?
    };
    let claim = if let Some((owner, token, _)) = &waiting {
        LeaseClaim::Held {
            owner: owner.clone(),
            token: *token,
            until: f.now_ts()?,
        }
    } else if f.live_here {
        let token: i64 = tx.one(
            "SELECT coalesce(max(fencing_token), 0) FROM job_lease WHERE job_key = ?1",
            args![f.job],
            |r| r.get(0),
        )?;
        LeaseClaim::Held {
            owner: f.owner.to_string(),
            token,
            until: f.now_ts()?,
        }
    } else {
        claim_lease_tx(tx, f.job, f.owner, f.lease_until, f.now)?
    };
    match claim {
        LeaseClaim::Won { token, stolen_from } => {
            started_tx(tx, f, (token, stolen_from), tx.now(f.now))
        }
        LeaseClaim::Held {
            owner: holder,
            token,
            until,
        } => {
            if f.kind == FiringKind::Backfill {
                return Ok(Fired::Busy { holder, until });
            }
            while_live_tx(tx, f, (holder, token), waiting.map(|(_, _, w)| w))
        }
    }
}

/// A firing whose lease `won` (its token, and whom it was taken from): its run recorded as
/// started at `started_at` (this transaction's clock), the firing `running` by it.
fn started_tx(
    tx: &Tx<'_>,
    f: &FireRequest<'_>,
    (token, stolen_from): (i64, Option<(String, i64)>),
    started_at: &str,
) -> DbResult<Fired> {
    let slot = f.slot_ts()?;
    let run_id = start_run(tx, f.job, f.slot, f.owner, started_at, token)?;
    upsert_firing(tx, f, FiringState::Running, Some(&run_id), None)?;
    Ok(Fired::Started(Started {
        token: token.into(),
        run_id,
        slot,
        stolen_from,
    }))
}

/// A run is live (or an earlier firing goes first): the job's overlap policy decides this
/// firing's fate (coalesced, queued, saturated or missed), recorded with its event.
fn while_live_tx(
    tx: &Tx<'_>,
    f: &FireRequest<'_>,
    (holder, token): (String, i64),
    waiting: Option<String>,
) -> DbResult<Fired> {
    let live = match &waiting {
        Some(w) => format!("{w} goes first"),
        None => format!("a run is live ({holder}, token {token})"),
    };
    // The queue's depth is the only fact a policy reads; only a queue needs it.
    let queued: i64 = match f.overlap {
        Overlap::Queue { .. } => tx.one(
            "SELECT count(*) FROM exactly_firings WHERE job_key = ?1 AND state = 'queued'",
            args![f.job],
            |r| r.get(0),
        )?,
        _ => 0,
    };
    match f.overlap.decide(queued.max(0) as u64) {
        WhileLive::Coalesce => {
            upsert_firing(tx, f, FiringState::Coalesced, None, Some(&live))?;
            let fired = Fired::Coalesced {
                holder,
                token,
                waiting,
            };
            fate_event(tx, f, EventKind::FiringCoalesced, Some(token), &fired)?;
            Ok(fired)
        }
        WhileLive::Queue { depth, cap } => {
            upsert_firing(tx, f, FiringState::Queued, None, Some(&live))?;
            Ok(Fired::Queued {
                depth,
                cap,
                waiting,
            })
        }
        WhileLive::Saturated { cap } => {
            upsert_firing(tx, f, FiringState::Saturated, None, Some(&live))?;
            let fired = Fired::Saturated { cap };
            fate_event(tx, f, EventKind::QueueSaturated, Some(token), &fired)?;
            Ok(fired)
        }
        WhileLive::Missed => {
            upsert_firing(tx, f, FiringState::Missed, None, Some(&live))?;
            let fired = Fired::Missed {
                holder,
                token,
                waiting,
            };
            fate_event(tx, f, EventKind::FiringMissed, Some(token), &fired)?;
            Ok(fired)
        }
    }
}

impl Store {
    /// How many firings of a job had how many runs: (runs, firings), fewest runs first.
    pub fn runs_per_firing(&mut self, job: &str) -> Result<Vec<(i64, i64)>> {
        self.read(|tx| {
            let rows = tx.rows(
                "SELECT n, count(*) FROM (SELECT count(*) AS n FROM exactly_runs WHERE job_key = ?1
                   GROUP BY scheduled_at) AS per_firing GROUP BY n ORDER BY n",
                args![job],
                |r| Ok((r.get(0)?, r.get(1)?)),
            );
            rows
        })
    }

    /// How many firings of a job ended `gave_up`.
    pub fn firings_gave_up(&mut self, job: &str) -> Result<i64> {
        self.read(|tx| {
            tx.one(
                "SELECT count(*) FROM exactly_firings WHERE job_key = ?1 AND state = 'gave_up'",
                args![job],
                |r| r.get(0),
            )
        })
    }
}

//! A firing's rows and the words of its fate: what the firing aggregate (`firing.rs`), the
//! paused job's rows (`paused_rows.rs`), what waits for a free lease (`waiting.rs`) and the
//! resumption of firings (`resume.rs`) all write, so each of them imports this and none of
//! them the others' loops.
use super::db::{args, DbResult, Tx};
use super::lease::{claim_lease_tx, LeaseClaim};
use super::{record_event, NewEvent};
use exactly_words::policy::Overlap;
use exactly_words::state::{EventKind, FiringKind, FiringState};
use exactly_words::time::{fmt, Ts};

/// The detail of a firing marked to go again because its run failed (`retries`): its backoff
/// counts from that run's end.
pub(super) const FAILED_RETRY: &str = "its run failed";

/// The detail of a firing marked to go again because an observer found its effect never
/// happened.
pub(super) const EFFECT_NEVER_HAPPENED: &str =
    "an observer found an effect of this firing never happened";

/// A firing about to be decided.
#[derive(Debug, Clone)]
pub struct FireRequest<'a> {
    /// The job firing.
    pub job: &'a str,
    /// The scheduled instant (fixed-width UTC): with the job, the firing's identity.
    pub slot: &'a str,
    /// Why it is fired. A backfill waits for a busy lease (nothing recorded) instead of
    /// applying the overlap policy, and may take over a firing that never ran.
    pub kind: FiringKind,
    /// Who fires it: the lease owner its run would hold.
    pub owner: &'a str,
    /// When the lease a run would win ends.
    pub lease_until: &'a str,
    /// The caller's clock (the server's is used on PostgreSQL).
    pub now: &'a str,
    /// The job's overlap policy, applied while a run is live.
    pub overlap: Overlap,
    /// The caller is itself running this job right now: its run is live whatever the lease row
    /// says (a heartbeat may be late), so the overlap policy applies without a claim.
    pub live_here: bool,
}

impl FireRequest<'_> {
    /// The caller's now as a time (the until of a lease it found held by a firing that waits,
    /// or by itself): text that is not one is the caller's error.
    pub(super) fn now_ts(&self) -> DbResult<Ts> {
        exactly_words::time::parse(self.now).ok_or_else(|| {
            super::db::DbError::Other(format!(
                "the firing's clock {:?} is not a time",
                exactly_words::sanitize::inert_trunc(self.now, 40)
            ))
        })
    }

    /// The request's slot as a time: text that is not one is the caller's error, never a
    /// firing recorded under a slot no reader can place.
    pub(super) fn slot_ts(&self) -> DbResult<Ts> {
        exactly_words::time::parse(self.slot)
            .filter(|t| fmt(*t) == self.slot)
            .ok_or_else(|| {
                super::db::DbError::Other(format!(
                    "the firing's slot {:?} is not a time in the fixed-width form",
                    exactly_words::sanitize::inert_trunc(self.slot, 40)
                ))
            })
    }
}

/// A run that just started: we hold the job's lease with this token.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    /// The fencing token of the lease we won.
    pub token: exactly_words::Token,
    /// The new run's id.
    pub run_id: String,
    /// The slot it runs for.
    pub slot: Ts,
    /// The previous holder and its token, when we took over a lease that had expired.
    pub stolen_from: Option<(String, i64)>,
}

/// What resuming a job's firings (`firing::resume`) did: the run it started, and the firings
/// it gave up on (slot, runs it had).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resumed {
    /// The run started, if one was.
    pub started: Option<Started>,
    /// Firings that used up their runs: their slot and how many runs they had.
    pub gave_up: Vec<(Ts, i64)>,
    /// A `running` firing not resumed because the scheduler that runs it may be alive (its run
    /// may only be slow to record its end): the owner's name.
    pub held_by: Option<String>,
    /// A failed firing whose retry waits for its backoff: its slot, and how much of the backoff
    /// is left (never more than the backoff itself, whatever the wall clock did since its run
    /// ended): a scheduler holds it on its monotonic clock, so a clock step neither silences
    /// nor hurries the retry.
    pub backoff_left: Option<(Ts, std::time::Duration)>,
}

/// What a job does after a failed run (its `retries` and `pause_after_failures`), decided in the
/// transaction that records the run's end.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureRules {
    /// The firing goes again while it has had fewer runs than this (1 + retries).
    pub retry_below: i64,
    /// The job is paused when its last this many runs all failed.
    pub pause_after: Option<i64>,
    /// Who pauses it (the scheduler).
    pub by: String,
}

/// What a failed run's end decided (see [`FailureRules`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AfterFailure {
    /// The firing goes again: its runs so far.
    pub retry: Option<i64>,
    /// The job was paused: its failed runs in a row.
    pub paused: Option<i64>,
}

/// Who ran a firing's last run, as the scheduler registry knows it (see
/// `exactly::firing::ResumeRules`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunOwner {
    /// The lease owner that ran it.
    pub owner: String,
    /// The owner's scheduler row, if it is a scheduler (a manual run's owner has none).
    pub scheduler: Option<OwnerScheduler>,
}

/// The scheduler that ran a firing's last run, as it recorded itself.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnerScheduler {
    /// The machine it runs on (boot id / pid namespace), if it recorded one.
    pub host_id: Option<String>,
    /// Its process id.
    pub pid: i64,
    /// It recorded a clean end.
    pub ended: bool,
    /// Its heartbeat is older than the rules' staleness (on the database's clock).
    pub silent: bool,
}

/// The fate of a firing.
#[derive(Debug, Clone, PartialEq)]
pub enum Fired {
    /// A run started: we hold the job's lease.
    Started(Started),
    /// The same firing was fired before (another scheduler, a restart): not run again.
    Duplicate {
        /// The state the firing is in.
        state: FiringState,
        /// Who fired it first.
        owner: Option<String>,
    },
    /// The job is paused: recorded as skipped.
    Skipped {
        /// The pause's note.
        note: Option<String>,
        /// Who paused the job.
        by: Option<String>,
    },
    /// A run is live (or an earlier firing goes first, see `Fired::waiting`) and the policy
    /// is coalesce: dropped, recorded.
    Coalesced {
        /// The lease owner of the live run.
        holder: String,
        /// Its fencing token.
        token: i64,
        /// The earlier firing that goes first, in words.
        waiting: Option<String>,
    },
    /// A run is live (or an earlier firing goes first) and the policy is queue: waiting, at
    /// this depth.
    Queued {
        /// Its place in the queue, counting itself.
        depth: u64,
        /// How many firings the queue holds at most.
        cap: u32,
        /// The earlier firing that goes first, in words.
        waiting: Option<String>,
    },
    /// A run is live and the queue is full: dropped, saturation recorded.
    Saturated {
        /// How many firings the queue holds at most.
        cap: u32,
    },
    /// A run is live (or an earlier firing goes first) and the policy is fail: a loud miss.
    Missed {
        /// The lease owner of the live run.
        holder: String,
        /// Its fencing token.
        token: i64,
        /// The earlier firing that goes first, in words.
        waiting: Option<String>,
    },
    /// Backfill only: the lease is held; nothing recorded, try again later.
    Busy {
        /// Who holds the lease.
        holder: String,
        /// When that lease ends.
        until: Ts,
    },
}

pub(super) fn upsert_firing(
    tx: &Tx<'_>,
    f: &FireRequest<'_>,
    state: FiringState,
    run_id: Option<&str>,
    detail: Option<&str>,
) -> DbResult<()> {
    // A backfill that runs a pause's rolling row keeps its kind: the slot a scheduler picks up
    // after (`last_slot`) stays where the pause left it.
    tx.exec(
        "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, owner, run_id, \
             created_at, updated_at, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)
         ON CONFLICT(job_key, scheduled_at) DO UPDATE SET \
             kind = CASE WHEN exactly_firings.state = 'skipped' \
                 AND exactly_firings.detail LIKE '% firing(s) skipped while paused since %' \
                 THEN exactly_firings.kind ELSE excluded.kind END, \
             state = excluded.state,
            owner = excluded.owner, run_id = excluded.run_id, updated_at = excluded.updated_at,
            detail = excluded.detail",
        args![
            f.job,
            f.slot,
            f.kind,
            state,
            f.owner,
            run_id,
            tx.now(f.now),
            detail
        ],
    )?;
    Ok(())
}

/// Starts a run for a firing whose lease we just won, its recorded start `started_at` (on this
/// transaction's clock: see [`Tx::now`], [`Tx::later`]).
pub(super) fn start_run(
    tx: &Tx<'_>,
    job: &str,
    slot: &str,
    owner: &str,
    started_at: &str,
    token: i64,
) -> DbResult<String> {
    let run_id = format!("{job}-t{token}");
    tx.exec(
        "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, started_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![run_id, job, slot, owner, token, started_at],
    )?;
    Ok(run_id)
}

/// Starts a waiting firing (queued, interrupted, to retry) if the job's lease can be won: a new
/// run under the new token, and the firing marked `running` by it.
pub(super) fn start_firing(
    tx: &Tx<'_>,
    job: &str,
    slot: Ts,
    owner: &str,
    lease_until: &str,
    now: &str,
) -> DbResult<Option<Started>> {
    let now = tx.now(now);
    let slot_text = fmt(slot);
    let LeaseClaim::Won { token, stolen_from } = claim_lease_tx(tx, job, owner, lease_until, now)?
    else {
        return Ok(None);
    };
    let run_id = start_run(tx, job, &slot_text, owner, now, token)?;
    tx.exec(
        "UPDATE exactly_firings SET state = 'running', owner = ?3, run_id = ?4, updated_at = ?5
         WHERE job_key = ?1 AND scheduled_at = ?2",
        args![job, slot_text, owner, run_id, now],
    )?;
    Ok(Some(Started {
        token: token.into(),
        run_id,
        slot,
        stolen_from,
    }))
}

/// The loud event of a firing that used up its runs.
pub(super) fn gave_up_event(
    tx: &Tx<'_>,
    job: &str,
    slot: &str,
    (runs, limit): (i64, i64),
    owner: Option<&str>,
    now: &str,
) -> DbResult<()> {
    let now = tx.now(now);
    let detail = format!(
        "firing at {slot} GAVE UP after {runs} runs (at most {limit}): not run again; \
         check its effects by hand"
    );
    let mut e = NewEvent::new(EventKind::FiringGaveUp, now)
        .job(job)
        .detail(&detail);
    if let Some(o) = owner {
        e = e.actor(o);
    }
    record_event(tx, &e)
}

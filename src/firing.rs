//! Firings: a job's instant (scheduled, catch-up, manual, backfill), fired at most once. The
//! rules (what a firing does while a run is live, how many runs one firing gets) are in
//! [`crate::policy`]; the store records what they decide in one transaction with the lease
//! claim, so a crash never leaves half a decision.
use crate::store::Store;
pub use crate::store::{
    DueFate, DueRequest, FireRequest, Fired, Resumed, RunOwner, Started, Waiting,
};
use exactly_words::policy::RetryRules;
use exactly_words::{time, JobName, Result};
use std::time::Duration;

/// Decides a firing: a duplicate of one already fired, skipped while paused, started under a
/// lease won now, or — a run being live — what its [`crate::policy::Overlap`] says. One
/// transaction.
pub fn fire(store: &mut Store, req: &FireRequest<'_>) -> Result<Fired> {
    store.fire(req)
}

/// Decides several firings in one transaction (one commit for the lot): a scheduler with
/// hundreds of jobs due at one instant starts them on time. Keep batches small and give each
/// job at most one firing per batch.
pub fn fire_many(store: &mut Store, batch: &[FireRequest<'_>]) -> Result<Vec<Fired>> {
    store.fire_many(batch)
}

/// Decides a scheduler's due slots in one transaction, each by its lateness at the moment the
/// transaction holds the database: a slot later than its window (a wait for a locked or
/// unreachable database included) is recorded missed for its reason instead of run late.
pub fn fire_due(store: &mut Store, batch: &[DueRequest<'_>]) -> Result<Vec<DueFate>> {
    store.fire_due(batch, &time::now)
}

/// [`fire_due`], tried at most `tries` times on PostgreSQL: `None` when each try conflicted
/// with other writers' transactions (serialization failures, deadlocks), so nothing was
/// decided; a smaller batch may pass where this one did not. The database answered: no outage.
pub fn fire_due_or_conflict(
    store: &mut Store,
    batch: &[DueRequest<'_>],
    tries: u32,
) -> Result<Option<Vec<DueFate>>> {
    store.fire_due_or_conflict(batch, &time::now, tries)
}

/// Marks a scheduler's connection: its firings go before the process's other writers (its
/// runs' own writes), so a burst of due slots is decided first.
pub fn writes_first(store: &mut Store) {
    store.writes_first()
}

/// Every job whose lease is free at `now` and that has a queued firing or one to resume: one
/// read per scheduler tick for all jobs.
pub fn waiting_jobs(store: &mut Store, now: time::Ts) -> Result<Vec<(String, Waiting)>> {
    store.waiting_jobs(&time::fmt(now))
}

/// The latest slot the schedule itself fired (manual and backfill firings do not count).
pub fn last_slot(store: &mut Store, job: &JobName) -> Result<Option<time::Ts>> {
    store.last_slot(job)
}

/// [`last_slot`] of each job, read in one transaction.
pub fn last_slots(store: &mut Store, jobs: &[&JobName]) -> Result<Vec<Option<time::Ts>>> {
    let names: Vec<&str> = jobs.iter().map(|j| j.as_str()).collect();
    store.last_slots(&names)
}

/// Records firings that passed with nobody to run them (beyond the catch-up window): `missed`
/// (or `skipped` while paused), `reason` saying why (no scheduler ran, the database was
/// unavailable). Returns how many were counted.
pub fn record_missed(
    store: &mut Store,
    job: &str,
    slots: &[String],
    total: u64,
    owner: &str,
    reason: &str,
) -> Result<u64> {
    store.record_missed(job, slots, total, owner, &store.now_text(), reason)
}

/// Which of `slots` (job, slot) are already recorded as firings, in any state: a scheduler
/// fires another's slot only when it is not (see `runner::scheduler::share`).
pub fn recorded(
    store: &mut Store,
    slots: &[(&str, &str)],
) -> Result<std::collections::HashSet<(String, String)>> {
    store.recorded_firings(slots)
}

/// What waits to start for a job whose lease is free at `now`.
pub fn waiting(store: &mut Store, job: &JobName, now: time::Ts) -> Result<Waiting> {
    store.waiting(job, &time::fmt(now))
}

/// Starts the oldest queued firing of a job if its lease can be won (and it is not paused).
pub fn start_queued(
    store: &mut Store,
    job: &str,
    owner: &str,
    lease_until: time::Ts,
    now: time::Ts,
) -> Result<Option<Started>> {
    let (until, now) = (time::fmt(lease_until), time::fmt(now));
    store.start_queued(job, owner, &until, &now)
}

/// How a scheduler judges whether another's run is dead before it resumes that run's firing.
#[derive(Debug, Clone)]
pub struct ResumeRules {
    /// This scheduler's owner name: a run of its own with no live thread here is dead.
    pub me: String,
    /// Silent this long (its heartbeat, on the database's clock), a scheduler on another machine
    /// is taken for gone: [`crate::jobs::scheduler_dead_after`], when status calls it dead.
    pub silent_for: Duration,
    /// Whether a silent scheduler may be taken for gone now: not while this scheduler has itself
    /// just got the database back (every heartbeat is old then, the live ones' too).
    pub trust_silence: bool,
}

impl ResumeRules {
    /// Whether the run's owner is gone: itself (the caller runs nothing of the job), a manual
    /// run (no scheduler row: its lease is the only word), a scheduler that recorded its end,
    /// one on this machine whose process is gone, or one silent for `silent_for` elsewhere.
    pub fn gone(&self, who: &RunOwner) -> bool {
        if who.owner == self.me {
            return true;
        }
        let Some(s) = &who.scheduler else {
            return true;
        };
        if s.ended {
            return true;
        }
        let here = s.host_id.as_deref() == Some(exactly_words::sender::host_id());
        if here && s.pid > 0 && !exactly_words::sender::process_alive(s.pid as i32, 0, None) {
            return true;
        }
        s.silent && self.trust_silence
    }
}

/// What a job does after a failed run, and what that decided (see
/// [`crate::jobs::finish_run_then`]).
pub use crate::store::{AfterFailure, FailureRules};

/// Fires again, for the same slot, a firing whose run died or whose effect an observer found
/// never happened; one that had [`crate::policy::MAX_ATTEMPTS`] runs ends `gave_up` instead.
/// `running` firings older than `oldest` are given up as `interrupted`. A `running` firing whose
/// scheduler may be alive is left to it ([`Resumed::held_by`]); a failed one waits for its backoff
/// ([`Resumed::backoff_left`]).
pub fn resume(
    store: &mut Store,
    job: &str,
    lease_until: time::Ts,
    now: time::Ts,
    oldest: time::Ts,
    rules: &ResumeRules,
    retry: &RetryRules<'_>,
) -> Result<Resumed> {
    let silent = chrono::Duration::from_std(rules.silent_for).unwrap_or(chrono::Duration::MAX);
    let gone = |w: &RunOwner| rules.gone(w);
    let by = crate::store::Resumer {
        owner: &rules.me,
        silent_for: silent,
        gone: &gone,
    };
    let (lease_until, now, oldest) = (time::fmt(lease_until), time::fmt(now), time::fmt(oldest));
    let at = crate::store::ResumeTimes {
        lease_until: &lease_until,
        now: &now,
        oldest: &oldest,
    };
    store.resume_firing(job, &by, &at, retry)
}

/// An observer found that an effect sent by `run_id` never happened: that run's firing is fired
/// again by the next [`resume`]. Returns whether a firing was marked.
pub fn retry_of_run(store: &mut Store, job: &JobName, run_id: &str) -> Result<bool> {
    store.retry_firing_of_run(job, run_id, &store.now_text())
}

/// How many firings of a job had how many runs: (runs, firings), fewest runs first.
pub fn runs_per_firing(store: &mut Store, job: &JobName) -> Result<Vec<(i64, i64)>> {
    store.runs_per_firing(job)
}

/// How many firings of a job ended `gave_up`.
pub fn gave_up_count(store: &mut Store, job: &JobName) -> Result<i64> {
    store.firings_gave_up(job)
}

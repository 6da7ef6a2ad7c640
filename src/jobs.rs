//! Jobs as the database knows them: the registry a scheduler writes from its jobs file, the
//! operator's pause and resume, the schedulers that run them, and their runs (what `top`'s job
//! detail, `logs`, `trigger` and `backfill` read). The store records; the time and the actor
//! come from here.
use crate::store::Store;
use exactly_words::time;
use exactly_words::{JobName, Result, Token};
use unicode_normalization::UnicodeNormalization;

pub use crate::store::rows::{EventRow, RunRow};
pub use crate::store::{
    EffectCounts, JobRecord, NotifyEnd, Outage, Pruned, Registered, RunEnd, SchedulerReg,
    RUN_WINDOW, RUN_WINDOW_DAYS,
};

/// A job name as stored and looked up (the jobs file, the CLI): Unicode NFC, surrounding
/// whitespace (a no-break space too) trimmed, so `a`, `a ` and a decomposed `é` are one job.
pub fn normalize_name(name: &str) -> String {
    name.nfc().collect::<String>().trim().to_string()
}

/// What two job names are compared by for a collision: normalised and lowercased.
pub fn name_key(name: &str) -> String {
    normalize_name(name).to_lowercase()
}

/// Why `name` cannot be a job's: an invisible character (zero-width, a BOM, a soft hyphen), a
/// bidi control or a control character would make two names that look alike two jobs.
pub fn name_problem(name: &str) -> Option<String> {
    let c = name.chars().find(|c| {
        matches!(
            c,
            '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{180E}' | '\u{00AD}'
        ) || c.is_control()
            || exactly_words::sanitize::is_bidi(*c)
    })?;
    Some(format!(
        "a job name must not contain invisible, bidi or control characters (found U+{:04X}): \
         two names that look alike would be two jobs",
        c as u32
    ))
}

/// Writes the jobs of one file (`source`) into the registry and retires the jobs that file no
/// longer has. Pause state is kept across registrations. The newest registration wins: one
/// that replaces another live scheduler's different definition of a job records a
/// `definition_conflict` event, and that scheduler stops firing the job
/// (`runner::config::definitions`).
pub fn register(
    store: &mut Store,
    jobs: &[JobRecord],
    source: &str,
    owner: &str,
) -> Result<Registered> {
    let now = store.now();
    let alive_since = time::fmt(
        now - chrono::Duration::from_std(scheduler_dead_after()).unwrap_or(chrono::Duration::MAX),
    );
    store.register_jobs(jobs, source, owner, &time::fmt(now), &alive_since)
}

/// Deletes each job's runs beyond its `keep_runs` newest (and their settled firings); the
/// all-time counters stay. The number of runs and firings deleted.
pub fn keep_newest_runs(store: &mut Store) -> Result<(u64, u64)> {
    store.keep_newest_runs(None)
}

/// One job's registry record, if it was ever registered.
pub fn record(store: &mut Store, job: &JobName) -> Result<Option<JobRecord>> {
    store.registered_job(job)
}

/// Every job in the registry (retired ones too), by name.
pub fn records(store: &mut Store) -> Result<Vec<JobRecord>> {
    store.registered_jobs()
}

/// What a pause or a resume did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Toggled {
    /// A pause (else a resume).
    pub pause: bool,
    /// False when the job already was in that state: nothing changed.
    pub changed: bool,
}

impl Toggled {
    /// The outcome in words (the CLI and the dashboard add who acted).
    pub fn describe(&self, job: &str) -> String {
        let j = exactly_words::sanitize::inert(job);
        match (self.pause, self.changed) {
            (true, true) => format!("paused job {j}"),
            (false, true) => format!("resumed job {j}"),
            (true, false) => format!("job {j} was already paused"),
            (false, false) => format!("job {j} was not paused"),
        }
    }
}

/// Pauses a job as `by` (firings while paused are recorded as skipped), with an optional note.
pub fn pause(store: &mut Store, job: &JobName, by: &str, note: Option<&str>) -> Result<Toggled> {
    let now = store.now_text();
    let changed = store.set_paused(job, true, by, note, &now)?;
    Ok(Toggled {
        pause: true,
        changed,
    })
}

/// Resumes a paused job as `by`.
pub fn resume(store: &mut Store, job: &JobName, by: &str) -> Result<Toggled> {
    let now = store.now_text();
    let changed = store.set_paused(job, false, by, None, &now)?;
    Ok(Toggled {
        pause: false,
        changed,
    })
}

/// Records that scheduler `owner` reloaded its jobs file; `detail` says what changed.
pub fn reloaded(store: &mut Store, owner: &str, detail: &str) -> Result<()> {
    store.record_reload(owner, detail, &store.now_text())
}

/// Records that scheduler `owner` replaced its watchdog process; `detail` says why and what
/// it re-armed.
pub fn watchdog_restarted(store: &mut Store, owner: &str, detail: &str) -> Result<()> {
    store.record_watchdog_restart(owner, detail, &store.now_text())
}

/// A scheduler silent this long is not alive (`EXACTLY_SCHEDULER_DEAD_AFTER`, default 10s;
/// schedulers beat every 2 s).
pub fn scheduler_dead_after() -> std::time::Duration {
    std::env::var("EXACTLY_SCHEDULER_DEAD_AFTER")
        .ok()
        .and_then(|s| time::parse_duration(&s).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(SCHEDULER_DEAD_AFTER)
}
/// How long a scheduler may be silent before it is not alive, unless the environment says.
pub const SCHEDULER_DEAD_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// The schedulers running the jobs file `source` now: alive by their heartbeat (see
/// [`scheduler_dead_after`]) and not ended, by owner.
pub fn live_schedulers(store: &mut Store, source: &str) -> Result<Vec<String>> {
    store.live_schedulers(source, scheduler_dead_after(), &store.now_text())
}

/// Records a scheduler's start (a restart under the same owner starts its row afresh; its
/// first heartbeat too).
pub fn scheduler_started(store: &mut Store, s: &SchedulerReg<'_>) -> Result<()> {
    let now = store.now_text();
    store.scheduler_started(s, &now, None).map(|_| ())
}

/// When the latest outage of the jobs file `source` that ended before `before` ended (see
/// [`scheduler_started_after`]): every slot up to then was handled.
pub fn last_outage_end(
    store: &mut Store,
    source: &str,
    before: Option<time::Ts>,
) -> Result<Option<time::Ts>> {
    let before = before.map(time::fmt).unwrap_or_else(|| "9999".to_string());
    store.last_outage_end(source, &before)
}

/// [`scheduler_started`] for a scheduler's first start: the time since the last scheduler of its
/// jobs file was heard from, when none is alive, is an outage (one `scheduler_outage` event,
/// returned).
pub fn scheduler_started_after(store: &mut Store, s: &SchedulerReg<'_>) -> Result<Option<Outage>> {
    let now = store.now_text();
    store.scheduler_started(s, &now, Some(scheduler_dead_after()))
}

/// One scheduler heartbeat; false when its row is gone or taken over (pruned, another pid).
pub fn scheduler_beat(store: &mut Store, owner: &str, pid: u32) -> Result<bool> {
    store.scheduler_beat(owner, pid, &store.now_text())
}

/// Records a scheduler's clean shutdown.
pub fn scheduler_ended(store: &mut Store, owner: &str, pid: u32) -> Result<()> {
    store.scheduler_ended(owner, pid, &store.now_text())
}

/// A job's most recent runs, newest first (the job detail).
pub fn recent_runs(store: &mut Store, job: &JobName, limit: usize) -> Result<Vec<RunRow>> {
    store.recent_runs(job, limit)
}

/// One run and its captured output (the run view, `exactly logs --run`).
pub fn run_output(store: &mut Store, run_id: &str) -> Result<Option<(RunRow, String)>> {
    store.run_output(run_id)
}

/// The job's next run started after `after` (its latest when None): `exactly logs -f`.
pub fn run_after(store: &mut Store, job: &JobName, after: Option<&str>) -> Result<Option<RunRow>> {
    store.run_after(job, after)
}

/// Durations of the job's recent runs that ended by themselves, for the lint's p99.
pub fn run_durations(store: &mut Store, job: &JobName) -> Result<Vec<i64>> {
    let oldest = time::fmt(store.now() - chrono::Duration::days(RUN_WINDOW_DAYS));
    store.run_durations(job, &oldest)
}

/// Saves what a live run printed so far (the run view shows it before the run ends).
pub fn run_output_so_far(store: &mut Store, run_id: &str, log: &str) -> Result<()> {
    store.run_output_so_far(run_id, log)
}

/// Records that a run's lease renewal was refused: a newer token holds the job.
pub fn run_fenced(store: &mut Store, job: &JobName, run_id: &str, token: Token) -> Result<()> {
    store.run_fenced(job, run_id, token.get(), &store.now_text())
}

/// Records how a run ended (as at the handle's clock: the run's end); its firing is settled
/// (ran, retry, or gave up after [`crate::policy::MAX_ATTEMPTS`] runs).
pub fn finish_run(store: &mut Store, end: &RunEnd<'_>) -> Result<exactly_words::state::RunOutcome> {
    let now = store.now_text();
    let outcome = store.finish_run(end, &now)?;
    // A job with `keep_runs` is trimmed as each run ends, so it never holds more than N ended
    // runs for long; the end is recorded either way, so a failed trim is left to the upkeep's.
    let _ = store.keep_newest_runs(Some(end.job));
    Ok(outcome)
}

/// [`finish_run`], and for a failed run its job's retry and pause by `failure` (see
/// [`crate::firing::FailureRules`]) in the same transaction.
pub fn finish_run_then(
    store: &mut Store,
    end: &RunEnd<'_>,
    failure: Option<&crate::firing::FailureRules>,
) -> Result<(
    exactly_words::state::RunOutcome,
    crate::firing::AfterFailure,
)> {
    let (outcome, after, keep) = store.finish_run_kept(end, &store.now_text(), failure)?;
    // Read with the end: a job without `keep_runs` (most) costs no second transaction.
    if let Some(n) = keep {
        let _ = store.trim_runs(end.job, n);
    }
    Ok((outcome, after))
}

/// Runs `f` with the writes of `store` put before the process's other writers (gc, output and
/// the like), after the scheduler's firings and the lease renewals: for a run's own lease
/// renewal and its end, which a run waits on. The handle goes back among the others afterwards.
pub fn writes_first<T>(store: &mut Store, f: impl FnOnce(&mut Store) -> T) -> T {
    store.set_writes_first(true);
    let out = f(store);
    store.set_writes_first(false);
    out
}

/// What a run's effects did, from the events carrying its token.
pub fn effect_counts(store: &mut Store, job: &JobName, token: Token) -> Result<EffectCounts> {
    store.run_effect_counts(job, token.get())
}

/// Deletes history older than `horizon` (`exactly gc`, `retain`): see docs/operations.md's
/// "Retention" for what is never deleted.
pub fn prune(store: &mut Store, horizon: time::Ts, effects: bool, dry_run: bool) -> Result<Pruned> {
    store.prune(&time::fmt(horizon), effects, dry_run)
}

/// Records what became of a notification (`[[notify]]`): a `notify_sent` or `notify_failed`
/// event for the dashboard, and its rule's counter for `exactly_notifications_total`.
pub fn notification_ended(store: &mut Store, end: &NotifyEnd<'_>) -> Result<()> {
    store.notification_ended(end, &store.now_text())
}

/// (rule, outcome, notifier job, count) of every notification recorded so far.
pub fn notification_counts(store: &mut Store) -> Result<Vec<(String, String, String, u64)>> {
    store.notification_counts()
}

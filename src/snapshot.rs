//! The [`Snapshot`]: one plain value, built from what the store reads in one short read
//! transaction (a [`Reading`]), that every reader renders — `status` (text, JSON), `metrics`
//! (OpenMetrics/Prometheus), the dashboard.
//! Here the model and what is derived from its rows (percentiles, a job's warnings);
//! `status.rs` and `metrics.rs` render it.
use crate::time::{human_age, human_ms};
use crate::Store;
use serde::Serialize;

/// Everything the dashboard, `status` and `metrics` show, read in one short transaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// The database's clock when read (the server's, on PostgreSQL).
    #[serde(serialize_with = "crate::store::rows::ser_ts")]
    pub taken_at: crate::time::Ts,
    /// The database read, as its path or URL.
    pub db: String,
    /// The host that read it.
    pub host: String,
    /// `PRAGMA user_version` of the database read.
    pub schema_version: i64,
    /// Schedulers (`exactly run`) seen recently, most recent heartbeat first.
    pub schedulers: Vec<SchedulerRow>,
    /// How many schedulers are alive.
    pub schedulers_alive: u64,
    /// Seconds without a heartbeat after which a scheduler is not alive.
    pub scheduler_dead_after_s: i64,
    /// Whole-system warnings (no scheduler alive while jobs are registered, a host-name clash).
    pub warnings: Vec<String>,
    /// Of `warnings`, the host-name clashes (the dashboard's header already says "no scheduler").
    pub host_clashes: Vec<String>,
    /// Times the PostgreSQL database failed over (its server's timeline changed), all time.
    pub failovers: u64,
    /// When the newest failover was found (the server's clock), if any.
    #[serde(serialize_with = "crate::store::rows::ser_ts_opt")]
    pub last_failover_at: Option<crate::time::Ts>,
    /// Of `warnings`, a failover in the last 7 days, with what the guard did.
    pub failover_warnings: Vec<String>,
    /// Counters over all time.
    pub totals: Window,
    /// Counters over the last 24 hours.
    pub last_24h: Window,
    /// Age in seconds of the oldest open (`unknown`, or `submitted` by a dead holder) effect.
    pub oldest_unknown_s: Option<i64>,
    /// Firings missed, all jobs, all time: recorded, plus slots passed with no scheduler.
    pub missed_firings: u64,
    /// Every job: registered, or known only by its lease.
    pub jobs: Vec<JobRow>,
    /// Open effects, oldest first.
    pub unknown: Vec<OpenEffect>,
    /// Approvals waiting for a decision, oldest first.
    pub pending_approvals: Vec<ApprovalView>,
    /// Approvals granted and not yet consumed, oldest first.
    pub unused_approvals: Vec<ApprovalView>,
    /// Most recent first.
    pub events: Vec<EventRow>,
    /// Notifications (`[[notify]]`) counted so far, per notifier, rule and outcome.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<NotificationCount>,
}

pub use crate::state::{is_failure, RunOutcome, FAILING_OUTCOMES};
pub use crate::store::rows::{
    ApprovalView, EventRow, JobRow, JobSettings, NotificationCount, OpenEffect, Reading, Replaced,
    RunRow, SchedulerRow, Window, RUN_BUCKETS_MS,
};

pub use crate::time::percentiles;

/// What a job is doing, in one word: the one judgement `jobs`, `top`, `status`, `status
/// --check`, the metrics and the notifier all show ([`JobRow::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Removed from its jobs file: it no longer fires.
    Retired,
    /// Paused: its firings are skipped until it is resumed.
    Paused,
    /// A run is under way (it has no outcome yet), or a live lease is held on the job (a
    /// scheduler's run, a cron wrapper's `exactly lease claim`, a library claim).
    Running,
    /// Its newest run stopped at an effect that waits for a person's approval (outcome
    /// `awaiting_approval`): `exactly approve` sends it, `exactly deny` ends the firing.
    AwaitingApproval,
    /// Its newest finished run that failed or succeeded failed (`failed`, `timeout`): a
    /// failing episode is open.
    Failing,
    /// Its newest run ended and no failure is open.
    Ok,
    /// It never ran.
    Idle,
}

impl JobState {
    /// The word in JSON (`state`) and metrics: `retired`, `paused`, `running`,
    /// `awaiting_approval`, `failing`, `ok`, `idle`.
    pub fn word(self) -> &'static str {
        match self {
            JobState::Retired => "retired",
            JobState::Paused => "paused",
            JobState::Running => "running",
            JobState::AwaitingApproval => "awaiting_approval",
            JobState::Failing => "failing",
            JobState::Ok => "ok",
            JobState::Idle => "idle",
        }
    }

    /// The words a person reads (`jobs`, `top`, `status`): the JSON word, but `waiting for
    /// approval`.
    pub fn label(self) -> &'static str {
        match self {
            JobState::AwaitingApproval => "waiting for approval",
            s => s.word(),
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl Serialize for JobState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.word())
    }
}

impl JobRow {
    /// What the job is doing, in one word: retired, then paused, then running (its newest run
    /// has no outcome yet, or anyone holds a live lease on it), then waiting for approval (its
    /// newest run's outcome), then failing (an episode is open: [`JobRow::failing_episode`]),
    /// then ok; idle when it never ran.
    pub fn state(&self) -> JobState {
        let outcome = self.last_run.as_ref().map(|r| r.outcome.as_ref());
        let leased = self.lease_owner.is_some() && self.lease_left_s.is_some_and(|l| l > 0);
        if self.retired {
            JobState::Retired
        } else if self.paused {
            JobState::Paused
        } else if leased || matches!(outcome, Some(None)) {
            JobState::Running
        } else if matches!(outcome, Some(Some(RunOutcome::AwaitingApproval))) {
            JobState::AwaitingApproval
        } else if self.failing_episode().is_some() {
            JobState::Failing
        } else if outcome.is_some() {
            JobState::Ok
        } else {
            JobState::Idle
        }
    }

    /// The job's open failing episode: its newest finished run that failed or succeeded
    /// failed. A run under way, and runs that say nothing of the job (killed by a deploy,
    /// fenced, not started, waiting for approval), never end it; only a finished `ok` run
    /// does. Its key is the job and its last success before the failures (`never` when it
    /// never succeeded): read from the runs, so every reader and every scheduler, restarted
    /// or not, names one episode alike. `(key, failed runs since that success)`.
    pub fn failing_episode(&self) -> Option<(String, u64)> {
        if self.failed_since_ok == 0 || self.retired {
            return None;
        }
        let since = self
            .last_success_at
            .map_or_else(|| "never".to_string(), crate::time::fmt);
        Some((
            format!("{}@after-ok:{since}", self.job_key),
            self.failed_since_ok,
        ))
    }
}

/// The one count of registered jobs every output gives (`status`, `status --check` and its
/// perfdata, `exactly_jobs_registered`): jobs a jobs file registered (they have a schedule) and
/// not retired, paused ones included, which are said apart: "2 jobs registered (1 paused)".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// Jobs with a schedule, not retired.
    pub jobs: usize,
    /// Of those, the paused.
    pub paused: usize,
}

impl Registered {
    /// The count of a snapshot's jobs.
    pub fn of(jobs: &[JobRow]) -> Registered {
        let live = jobs
            .iter()
            .filter(|j| j.settings.schedule.is_some() && !j.retired);
        let (mut n, mut paused) = (0, 0);
        for j in live {
            n += 1;
            paused += usize::from(j.paused);
        }
        Registered { jobs: n, paused }
    }

    /// "2 jobs registered, 1 paused", for a place already in parentheses.
    pub fn listed(&self) -> String {
        self.to_string().replace(" (", ", ").replace(')', "")
    }
}

impl std::fmt::Display for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.jobs == 1 { "job" } else { "jobs" };
        write!(f, "{} {s} registered", self.jobs)?;
        if self.paused > 0 {
            write!(f, " ({} paused)", self.paused)?;
        }
        Ok(())
    }
}

/// When a job fires next: after the latest slot any scheduler fired (or the last run's), so a
/// job nobody fires shows a next firing in the past; and the slots past its catch-up window
/// that no scheduler fired, misses a scheduler will record when it starts again (a paused
/// job's are skipped, not missed). Read from the registry's schedule.
pub fn plan(j: &mut JobRow, now: crate::time::Ts) {
    let schedule = j
        .settings
        .schedule
        .as_deref()
        .filter(|_| !j.retired)
        .and_then(|s| parsed(s, j.settings.timezone.as_deref()))
        .map(|s| match &j.dst {
            Some(d) => s.with_dst(d.policy()),
            None => s,
        });
    if let Some(schedule) = schedule {
        let last_slot = j.last_slot;
        // A slot fired ahead of now (a clock since stepped back) is not where firing resumes:
        // the scheduler goes on from the new time (see runner/clock.rs).
        let next = schedule.next_after(last_slot.map_or(now, |l| l.min(now)));
        j.next_fire_at = next;
        if let (Some(last), false) = (last_slot, j.paused) {
            let grace = j.catchup_s.max(0) + crate::schedule::LATE_OK.as_secs() as i64;
            let horizon = now - chrono::Duration::seconds(grace);
            j.missed_unrecorded = passed_slots(&schedule, last, horizon);
        }
    }
    j.missed_firings = j.missed_recorded + j.missed_unrecorded;
}

/// Registry schedules as parsed, by (schedule, timezone).
type Parsed =
    std::collections::HashMap<(String, Option<String>), Option<crate::schedule::Schedule>>;

thread_local! {
    /// A dashboard polling 1,000 jobs parses each schedule once, not once a poll.
    static SCHEDULES: std::cell::RefCell<Parsed> = Default::default();
}

/// A registry schedule, parsed (once per thread).
fn parsed(schedule: &str, tz: Option<&str>) -> Option<crate::schedule::Schedule> {
    SCHEDULES.with(|c| {
        let mut c = c.borrow_mut();
        // Registries change rarely; a bound keeps a dashboard left open for months small.
        if c.len() > 10_000 {
            c.clear();
        }
        c.entry((schedule.to_string(), tz.map(str::to_string)))
            .or_insert_with(|| crate::schedule::Schedule::from_registry(schedule, tz).ok())
            .clone()
    })
}

/// Most slots counted as passed-unfired per job and poll (a minutely cron dead for a year).
const UNRECORDED_MAX: u64 = 1_000;

/// Slots in `(last, upto]`, counted up to [`UNRECORDED_MAX`].
fn passed_slots(
    schedule: &crate::schedule::Schedule,
    last: crate::time::Ts,
    upto: crate::time::Ts,
) -> u64 {
    if let crate::schedule::Schedule::Every { .. } = schedule {
        return schedule.slots(last, upto, 0).1;
    }
    let mut n = 0;
    let mut at = last;
    while let Some(next) = schedule.next_after(at) {
        if next > upto || n >= UNRECORDED_MAX {
            break;
        }
        n += 1;
        at = next;
    }
    n
}

/// The overlap forecast and a failing job, as warnings a person can act on, each with its
/// reason in a word (see [`JobRow::warning_tags`]).
pub fn job_warnings(j: &JobRow) -> Vec<(&'static str, String)> {
    let mut w = Vec::new();
    if let Some((_, failed)) = j.failing_episode() {
        let last = match &j.last_run {
            Some(r) if r.outcome.as_ref().is_some_and(|o| o.is_failure()) => format!(
                "last run {}{}",
                r.outcome_or_running(),
                r.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default()
            ),
            Some(r) => format!(
                "{failed} run(s) failed since its last success; its newest run is {}",
                r.outcome_or_running()
            ),
            None => format!("{failed} run(s) failed since its last success"),
        };
        w.push((
            "failing",
            format!(
                "{last}; {} of {} runs failed in the window",
                j.runs_failed, j.runs
            ),
        ));
    }
    if j.firings_gave_up > 0 {
        w.push((
            "gave up",
            format!(
                "{} firing(s) gave up after {} runs: check their effects by hand",
                j.firings_gave_up,
                crate::policy::MAX_ATTEMPTS
            ),
        ));
    }
    if j.firings_need_retry > 0 {
        let why = j
            .retry_detail
            .as_deref()
            .map(crate::sanitize::inert)
            .unwrap_or_else(|| "marked to run again".into());
        let then = if j.paused {
            format!(
                "the job is paused: they wait for `exactly resume {}`",
                crate::sanitize::inert(&j.job_key)
            )
        } else {
            "a scheduler re-runs them".into()
        };
        w.push((
            "retry",
            format!(
                "{} firing(s) to run again ({why}); {then}",
                j.firings_need_retry
            ),
        ));
    }
    if let (Some(p99), Some(interval)) = (j.p99_ms, j.settings.interval_s) {
        if interval > 0 && p99 > (interval as u64) * 1000 {
            w.push((
                "p99>iv",
                format!(
                    "p99 {} > interval {}: a queue, not a schedule",
                    human_ms(p99),
                    human_age(interval)
                ),
            ));
        }
    }
    w.extend(lease_warnings(j));
    if let (Some(lease), Some(interval)) = (j.settings.lease_ms, j.settings.interval_s) {
        if interval > 0 && lease >= interval * 1000 {
            w.push((
                "lease>=iv",
                format!(
                    "lease {} >= interval {}: a crashed run blocks the next firing",
                    human_ms(lease as u64),
                    human_age(interval)
                ),
            ));
        }
    }
    w
}

/// What can happen to a job's lease, as warnings. A lease the scheduler renews (a job a jobs
/// file registered: `exactly run` renews each run's lease every third of it) is outlasted by
/// long runs as a matter of course: what is at risk is the renewal, so a late renewal (the
/// longest gap between renewals past half the lease: a renewal came a sixth of the lease or
/// more after it was due) and a lease too short to ride out a stall (where the interval leaves
/// room for a longer one) are said. A lease nobody
/// renews (a wrapper's or a program's `lease claim`) is taken from a holder that outlasts it:
/// its hold durations' p99 past the lease is said. (The lease against the interval is
/// [`job_warnings`]'s.)
pub fn lease_warnings(j: &JobRow) -> Vec<(&'static str, String)> {
    use crate::lease::{unrenewed_for_at_most, RENEWALS_PER_LEASE, RENEWED_LEASE_MIN_BEATS};
    use std::time::Duration;
    let mut w = Vec::new();
    if !j.lease_renewed {
        if let (Some(p99), Some(lease)) = (j.hold_p99_ms, j.hold_lease_ms) {
            if lease > 0 && p99 > lease {
                w.push((
                    "p99>lease",
                    format!(
                        "p99 hold {} > lease {}, which nothing renews: a live holder's job will \
                         be taken over",
                        human_ms(p99),
                        human_ms(lease)
                    ),
                ));
            }
        }
        return w;
    }
    let Some(lease) = j.settings.lease_ms.filter(|l| *l > 0) else {
        return w;
    };
    let lease = Duration::from_millis(lease as u64);
    let every = lease / RENEWALS_PER_LEASE;
    let stopped_at = unrenewed_for_at_most(lease);
    let ms = |d: Duration| human_ms(d.as_millis() as u64);
    let min = crate::lease::SCHEDULER_BEAT * RENEWED_LEASE_MIN_BEATS;
    let interval = j
        .settings
        .interval_s
        .map(|iv| Duration::from_secs(iv.max(0) as u64));
    if crate::lease::renewal_margin_thin(lease, interval) {
        w.push((
            "lease<6s",
            format!(
                "lease {} under {RENEWED_LEASE_MIN_BEATS} scheduler heartbeats ({}): renewed \
                 every {}, a run is stopped after {} without a renewal, so a stall of {} \
                 stops it: too little renewal margin",
                ms(lease),
                ms(min),
                ms(every),
                ms(stopped_at),
                ms(stopped_at.saturating_sub(every))
            ),
        ));
    }
    if let Some(gap) = j.renewal_gap_max_ms.map(Duration::from_millis) {
        if gap > lease / 2 {
            w.push((
                "renew gap",
                format!(
                    "a lease renewal came late: {} without one (due every {}; a run is \
                     stopped at {})",
                    ms(gap),
                    ms(every),
                    ms(stopped_at)
                ),
            ));
        }
    }
    w
}

impl Snapshot {
    /// Reads the snapshot (one short read transaction, indexes only, notification counts
    /// included); then, from the facts read, each job's next firing, the firings it missed and
    /// its warnings.
    pub fn read(store: &mut Store) -> crate::Result<Snapshot> {
        let now = store.now();
        let dead_after = crate::jobs::scheduler_dead_after();
        let reading = store.reading(now, dead_after)?;
        let mut snap = Snapshot::from_reading(reading, &crate::hostname(), dead_after);
        for j in &mut snap.jobs {
            let (repeated, skipped) = std::mem::take(&mut j.dst_policy);
            j.dst = crate::schedule::dst_shown(
                j.settings.schedule.as_deref(),
                j.settings.timezone.as_deref(),
                repeated,
                skipped,
            );
            plan(j, now);
            (j.warning_tags, j.warnings) = job_warnings(j).into_iter().unzip();
        }
        add_replaced_warnings(&mut snap);
        Ok(snap)
    }

    /// The snapshot of what the store read on `host`, with the whole system's warnings: no
    /// scheduler alive while jobs are registered, one host name on two machines. A scheduler
    /// silent for `dead_after` is not alive.
    pub fn from_reading(r: Reading, host: &str, dead_after: std::time::Duration) -> Snapshot {
        let now = r.taken_at;
        let schedulers_alive = r.schedulers.iter().filter(|s| s.alive).count() as u64;
        let mut warnings = Vec::new();
        let registered = Registered::of(&r.jobs);
        if registered.jobs > 0 && schedulers_alive == 0 {
            let last = r
                .schedulers
                .iter()
                .map(|s| s.heartbeat_at)
                .max()
                .map(|t| {
                    let ago = human_age(crate::time::age_s(t, now));
                    format!("last heartbeat {ago} ago")
                })
                .unwrap_or_else(|| "none has ever run on this database".into());
            warnings.push(format!(
                "no scheduler alive ({last}): {registered} are not firing; start exactly run"
            ));
        }
        let host_clashes = host_clashes(&r.schedulers, r.host_clashes_24h);
        warnings.extend(host_clashes.iter().cloned());
        let failover_warnings = failover_warnings(r.last_failover.as_ref(), now);
        warnings.extend(failover_warnings.iter().cloned());
        let missed_firings =
            r.missed_recorded + r.jobs.iter().map(|j| j.missed_unrecorded).sum::<u64>();
        Snapshot {
            taken_at: r.taken_at,
            db: r.db,
            host: host.to_string(),
            schema_version: r.schema_version,
            schedulers: r.schedulers,
            schedulers_alive,
            scheduler_dead_after_s: dead_after.as_secs() as i64,
            warnings,
            host_clashes,
            failovers: r.failovers,
            last_failover_at: r.last_failover.map(|(at, _)| at),
            failover_warnings,
            totals: r.totals,
            last_24h: r.last_24h,
            oldest_unknown_s: r.oldest_unknown_s,
            missed_firings,
            jobs: r.jobs,
            unknown: r.unknown,
            pending_approvals: r.pending_approvals,
            unused_approvals: r.unused_approvals,
            events: r.events,
            notifications: r.notifications,
        }
    }
}

/// How long a failover stays among the warnings.
const FAILOVER_SHOWN_S: i64 = 7 * 86400;

/// A failover found in the last 7 days, in words: when, and what the guard did.
fn failover_warnings(
    last: Option<&(crate::time::Ts, String)>,
    now: crate::time::Ts,
) -> Vec<String> {
    let Some((at, detail)) = last else {
        return Vec::new();
    };
    let age = crate::time::age_s(*at, now);
    if age > FAILOVER_SHOWN_S {
        return Vec::new();
    }
    vec![format!(
        "database failed over {} ago ({}); check the far side for effects sent just before",
        human_age(age),
        crate::sanitize::inert(detail)
    )]
}

/// One host name, two machines: every pid-based judgement between them would be wrong. The
/// live schedulers that clash now, and the clashes recorded in the last 24 h.
fn host_clashes(schedulers: &[SchedulerRow], recorded_24h: u64) -> Vec<String> {
    let mut clashing: Vec<&str> = Vec::new();
    for a in schedulers.iter().filter(|s| s.alive) {
        let twin = schedulers.iter().any(|b| {
            b.alive
                && b.host == a.host
                && b.host_id.is_some()
                && a.host_id.is_some()
                && b.host_id != a.host_id
        });
        if twin && !clashing.contains(&a.host.as_str()) {
            clashing.push(&a.host);
        }
    }
    let mut out = Vec::new();
    for h in clashing {
        out.push(format!(
            "host name {:?} is used by live schedulers on two machines: \
             give each its own EXACTLY_HOST (their effects are judged by deadline, never by pid)",
            crate::sanitize::inert(h)
        ));
    }
    if recorded_24h > 0 {
        out.push(format!(
            "{recorded_24h} host-name clash(es) in 24h: two machines write under one host name \
             (see the host_clash events); give each its own EXACTLY_HOST"
        ));
    }
    out
}

/// Adds to each job's warnings a definition the newest registration replaced while the
/// scheduler holding it is alive (it no longer fires the job).
fn add_replaced_warnings(snap: &mut Snapshot) {
    let alive: Vec<&str> = snap
        .schedulers
        .iter()
        .filter(|s| s.alive)
        .map(|s| s.owner.as_str())
        .collect();
    for j in &mut snap.jobs {
        let Some(c) = &j.replaced else { continue };
        if j.retired || !alive.contains(&c.owner.as_str()) {
            continue;
        }
        j.warning_tags.push("redefined");
        j.warnings.push(format!(
            "definition differs from the one registered by {} from {} at {}: scheduler {} ({}) \
             holds another and no longer fires it",
            c.by.as_deref().unwrap_or("?"),
            c.by_source.as_deref().unwrap_or("?"),
            c.at.as_deref().unwrap_or("?"),
            c.owner,
            c.source.as_deref().unwrap_or("?"),
        ));
    }
}

/// A number that changes whenever another connection commits (SQLite's `data_version`): a
/// dashboard reads the whole snapshot again only when it moved.
pub fn data_version(store: &mut Store) -> crate::Result<i64> {
    store.data_version()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_runs() {
        let d: Vec<i64> = (1..=100).collect();
        let (p50, p99) = percentiles(&d);
        assert_eq!(p50, Some(50));
        assert_eq!(p99, Some(99));
        assert_eq!(percentiles(&[]), (None, None));
    }
}

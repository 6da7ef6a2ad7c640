//! The [`Snapshot`]: one plain value the store builds in one short read transaction and every
//! reader renders — `status` (text, JSON), `metrics` (OpenMetrics/Prometheus), the dashboard.
//! Here the model and what is derived from its rows (percentiles, a job's warnings);
//! `metrics.rs` renders it.
use crate::approval::ApprovalRow;
use crate::time::{human_age, human_ms};
use crate::Store;
use serde::Serialize;

/// Counters over one window (all time, or the last 24 h).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Window {
    pub duplicates_suppressed: u64,
    pub fenced_writes: u64,
    pub claimed_never_submitted: u64,
    pub unknown: u64,
    pub pending_approvals: u64,
    pub unused_approvals: u64,
}

/// Everything the dashboard, `status` and `metrics` show, read in one short transaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    pub taken_at: String,
    pub db: String,
    pub host: String,
    /// `PRAGMA user_version` of the database read.
    pub schema_version: i64,
    /// Schedulers (`exactly run`) seen recently, most recent heartbeat first.
    pub schedulers: Vec<SchedulerRow>,
    pub schedulers_alive: u64,
    /// Seconds without a heartbeat after which a scheduler is not alive.
    pub scheduler_dead_after_s: i64,
    /// Whole-system warnings (no scheduler alive while jobs are registered, a host-name clash).
    pub warnings: Vec<String>,
    /// Of `warnings`, the host-name clashes (the dashboard's header already says "no scheduler").
    pub host_clashes: Vec<String>,
    pub totals: Window,
    pub last_24h: Window,
    /// Age in seconds of the oldest open (`unknown`, or `submitted` by a dead holder) effect.
    pub oldest_unknown_s: Option<i64>,
    pub missed_firings: u64,
    pub jobs: Vec<JobRow>,
    /// Open effects, oldest first.
    pub unknown: Vec<OpenEffect>,
    pub pending_approvals: Vec<ApprovalView>,
    pub unused_approvals: Vec<ApprovalView>,
    /// Most recent first.
    pub events: Vec<EventRow>,
    /// Notifications (`[[notify]]`) counted so far, per notifier, rule and outcome.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<NotificationCount>,
}

/// How many notifications of one notifier and rule ended one way (`sent`, `failed`), all time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NotificationCount {
    /// The notifier's job, `exactly-notify:<name>`.
    pub notifier: String,
    pub rule: String,
    pub outcome: String,
    pub count: u64,
}

/// One `exactly run` process as it recorded itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedulerRow {
    pub owner: String,
    pub host: String,
    pub pid: i64,
    pub started_at: String,
    pub heartbeat_at: String,
    /// Set on a clean shutdown; a killed scheduler never sets it and just falls silent.
    pub ended_at: Option<String>,
    pub alive: bool,
    /// The machine behind `host` (boot id / pid namespace); None from schedulers before it.
    pub host_id: Option<String>,
}

pub use crate::state::{is_failure, FAILING_OUTCOMES};

/// The upper bounds (ms) of the run-duration buckets the store counts, a tenth of a second to a
/// day (`store/schema.rs` words each one in SQL; a test there keeps the two equal).
pub const RUN_BUCKETS_MS: &[i64] = &[
    100, 500, 1_000, 5_000, 15_000, 30_000, 60_000, 300_000, 900_000, 1_800_000, 3_600_000,
    7_200_000, 21_600_000, 86_400_000,
];
pub use crate::time::percentiles;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobRow {
    pub job_key: String,
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub interval_s: Option<i64>,
    pub lease_s: Option<i64>,
    /// The lease exactly (sub-second leases exist); `lease_s` is whole seconds.
    pub lease_ms: Option<i64>,
    pub overlap: Option<String>,
    pub queue_cap: Option<i64>,
    /// A cron job's daylight-saving policy in its zone; absent for other jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<crate::schedule::DstShown>,
    /// The registry's `dst_repeated` and `dst_skipped`, as stored (read into `dst`).
    #[serde(skip)]
    pub dst_policy: (Option<String>, Option<String>),
    pub runs: u64,
    pub p50_ms: Option<u64>,
    pub p99_ms: Option<u64>,
    /// The durations (ms) behind p50/p99: the job's runs in the duration window.
    #[serde(skip)]
    pub durations_ms: Vec<i64>,
    pub fencing_token: Option<i64>,
    pub lease_owner: Option<String>,
    pub lease_until: Option<String>,
    /// Seconds until the lease expires (negative: expired); None when released or never held.
    pub lease_left_s: Option<i64>,
    pub paused: bool,
    pub pause_note: Option<String>,
    pub retired: bool,
    pub queue_depth: u64,
    pub last_run: Option<RunRow>,
    /// The next firing: after the latest slot fired (in the past when no scheduler fired it).
    pub next_fire_at: Option<String>,
    /// When the latest `ok` run ended.
    pub last_success_at: Option<String>,
    /// Runs in the run window that ended `failed` or `timeout`.
    pub runs_failed: u64,
    /// Its newest runs that failed, in a row (within the run window); `pause_after_failures`
    /// counts the same, since the job was last resumed.
    pub consecutive_failures: u64,
    /// Why it is paused (the pause's note: the operator's, or the failure policy's); None when
    /// it is not paused.
    pub paused_reason: Option<String>,
    /// All-time runs per outcome (kept by counters, so pruning history keeps them).
    pub runs_by_outcome: std::collections::BTreeMap<String, u64>,
    /// All-time ended runs per duration bucket ([`RUN_BUCKETS_MS`], then one past the last),
    /// not cumulative, and their durations' sum: kept by counters, so they never go down.
    #[serde(skip)]
    pub run_duration_counts: Vec<u64>,
    #[serde(skip)]
    pub run_duration_sum_ms: u64,
    /// Firings missed: recorded by a scheduler, plus those passed since with no scheduler to
    /// run them (`missed_unrecorded`, counted by the reader).
    pub missed_firings: u64,
    pub missed_unrecorded: u64,
    pub duplicates_suppressed: u64,
    pub fenced_writes: u64,
    /// Firings that used up their runs (three) without finishing.
    pub firings_gave_up: u64,
    /// Firings an observer marked for a re-run that has not happened yet.
    pub firings_need_retry: u64,
    pub warnings: Vec<String>,
    /// Each warning's reason in a word (`failing`, `p99>lease`, …), in the order of
    /// `warnings`: what a narrow screen shows in the row itself. Not part of the JSON.
    #[serde(skip)]
    pub warning_tags: Vec<&'static str>,
    /// Facts the store reads for [`plan`]: the latest slot fired (or the last run's), the
    /// catch-up window, the misses a scheduler recorded. Not part of the JSON.
    #[serde(skip)]
    pub last_slot: Option<String>,
    #[serde(skip)]
    pub catchup_s: i64,
    #[serde(skip)]
    pub missed_recorded: u64,
    /// A live scheduler's different definition the newest registration replaced (a warning
    /// while that scheduler is alive: `runner::definitions`).
    #[serde(skip)]
    pub replaced: Option<Replaced>,
}

/// Whose definition of a job the newest registration (`by`, from `by_source`, `at`) replaced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replaced {
    pub owner: String,
    pub source: Option<String>,
    pub by: Option<String>,
    pub by_source: Option<String>,
    pub at: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunRow {
    pub run_id: String,
    pub job_key: String,
    pub scheduled_at: String,
    pub owner: String,
    pub fencing_token: i64,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub outcome: Option<String>,
    pub duration_ms: Option<i64>,
    pub exit_code: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct OpenEffect {
    pub effect_key: String,
    pub job_key: String,
    pub state: String,
    pub since: String,
    pub age_s: i64,
    pub terms_shown: Option<String>,
    pub verdict: Option<String>,
    pub fencing_token: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ApprovalView {
    pub effect_key: String,
    pub job_key: String,
    pub terms_shown: Option<String>,
    pub state: String,
    pub requested_at: String,
    pub age_s: i64,
    pub decided_by: Option<String>,
}

impl ApprovalView {
    pub fn from_row(a: ApprovalRow, now: crate::time::Ts) -> Self {
        let age_s = crate::time::parse(&a.requested_at)
            .map(|t| crate::time::age_s(t, now))
            .unwrap_or(0);
        ApprovalView {
            effect_key: a.effect_key,
            job_key: a.job_key,
            terms_shown: a.terms_shown,
            state: a.state.to_string(),
            requested_at: a.requested_at,
            age_s,
            decided_by: a.decided_by,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventRow {
    pub id: i64,
    pub at: String,
    pub kind: String,
    pub job_key: Option<String>,
    pub effect_key: Option<String>,
    pub fencing_token: Option<i64>,
    pub actor: Option<String>,
    pub detail: Option<String>,
}

/// When a job fires next: after the latest slot any scheduler fired (or the last run's), so a
/// job nobody fires shows a next firing in the past; and the slots past its catch-up window
/// that no scheduler fired, misses a scheduler will record when it starts again (a paused
/// job's are skipped, not missed). Read from the registry's schedule.
pub fn plan(j: &mut JobRow, now: crate::time::Ts) {
    let schedule = j
        .schedule
        .as_deref()
        .filter(|_| !j.retired)
        .and_then(|s| parsed(s, j.timezone.as_deref()))
        .map(|s| match &j.dst {
            Some(d) => s.with_dst(d.policy()),
            None => s,
        });
    if let Some(schedule) = schedule {
        let last_slot = j.last_slot.as_deref().and_then(crate::time::parse);
        // A slot fired ahead of now (a clock since stepped back) is not where firing resumes:
        // the scheduler goes on from the new time (see runner/clock.rs).
        let next = schedule.next_after(last_slot.map_or(now, |l| l.min(now)));
        j.next_fire_at = next.map(crate::time::fmt);
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
    if let Some(r) = &j.last_run {
        if let Some(o) = r.outcome.as_deref().filter(|o| is_failure(o)) {
            w.push((
                "failing",
                format!(
                    "last run {o}{}; {} of {} runs failed in the window",
                    r.exit_code
                        .map(|c| format!(" (exit {c})"))
                        .unwrap_or_default(),
                    j.runs_failed,
                    j.runs
                ),
            ));
        }
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
        w.push((
            "retry",
            format!(
                "{} firing(s) need retry: an effect never happened; a scheduler re-runs them",
                j.firings_need_retry
            ),
        ));
    }
    if let (Some(p99), Some(interval)) = (j.p99_ms, j.interval_s) {
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
    if let (Some(p99), Some(lease)) = (j.p99_ms, j.lease_ms) {
        if lease > 0 && p99 > lease as u64 {
            w.push((
                "p99>lease",
                format!(
                    "p99 {} > lease {}: live runs will be stolen",
                    human_ms(p99),
                    human_ms(lease as u64)
                ),
            ));
        }
    }
    if let (Some(lease), Some(interval)) = (j.lease_ms, j.interval_s) {
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

impl Snapshot {
    /// Reads the snapshot (one short read transaction, indexes only); then, from the facts
    /// read, each job's next firing, the firings it missed and its warnings.
    pub fn read(store: &mut Store) -> crate::Result<Snapshot> {
        let now = crate::time::now();
        let dead_after = crate::jobs::scheduler_dead_after();
        let mut snap = store.snapshot(now, &crate::hostname(), dead_after)?;
        for j in &mut snap.jobs {
            let (repeated, skipped) = std::mem::take(&mut j.dst_policy);
            j.dst = crate::schedule::dst_shown(
                j.schedule.as_deref(),
                j.timezone.as_deref(),
                repeated,
                skipped,
            );
            plan(j, now);
            (j.warning_tags, j.warnings) = job_warnings(j).into_iter().unzip();
        }
        add_replaced_warnings(&mut snap);
        // A database that cannot say (an old schema read read-only) has counted none.
        snap.notifications = crate::jobs::notification_counts(store)
            .unwrap_or_default()
            .into_iter()
            .map(|(rule, outcome, notifier, count)| NotificationCount {
                notifier,
                rule,
                outcome,
                count,
            })
            .collect();
        Ok(snap)
    }
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
            "definition differs from the one registered by {} from {} at {}: scheduler {} ({}) holds another and no longer fires it",
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

//! The rows the store reads for the snapshot and the detail views: plain values in the store's
//! own words. [`crate::snapshot`] builds the [`crate::snapshot::Snapshot`] from a [`Reading`]
//! and shows these rows to the library's users under its own name.
use super::ApprovalRow;
use crate::schedule::DstShown;
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

/// Everything one short read transaction of the snapshot reads, as the store found it; the
/// snapshot derives from it what a person is told (warnings, next firings, missed slots).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// The database's clock when read (the server's, on PostgreSQL).
    pub taken_at: String,
    pub db: String,
    /// `PRAGMA user_version` (or the schema table's version) of the database read.
    pub schema_version: i64,
    pub schedulers: Vec<SchedulerRow>,
    pub totals: Window,
    pub last_24h: Window,
    /// Age in seconds of the oldest open effect.
    pub oldest_unknown_s: Option<i64>,
    /// Firings a scheduler recorded missed, all jobs, all time.
    pub missed_recorded: u64,
    pub jobs: Vec<JobRow>,
    pub unknown: Vec<OpenEffect>,
    pub pending_approvals: Vec<ApprovalView>,
    pub unused_approvals: Vec<ApprovalView>,
    pub events: Vec<EventRow>,
    /// `host_clash` events in the last 24 h.
    pub host_clashes_24h: u64,
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

/// The upper bounds (ms) of the run-duration buckets the store counts, a tenth of a second to a
/// day (`store/schema.rs` words each one in SQL; a test there keeps the two equal).
pub const RUN_BUCKETS_MS: &[i64] = &[
    100, 500, 1_000, 5_000, 15_000, 30_000, 60_000, 300_000, 900_000, 1_800_000, 3_600_000,
    7_200_000, 21_600_000, 86_400_000,
];
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
    pub dst: Option<DstShown>,
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

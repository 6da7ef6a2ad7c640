//! The [`Snapshot`]: one plain value the store builds in one short read transaction and every
//! reader renders — `status` (text, JSON), `metrics` (OpenMetrics/Prometheus), the dashboard.
//! Here the model and what is derived from its rows (percentiles, a job's warnings);
//! `metrics.rs` renders it.
use crate::store::{ApprovalRow, Store};
use crate::time::{human_age, human_ms};
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
    /// Whole-system warnings (no scheduler alive while jobs are registered).
    pub warnings: Vec<String>,
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
}

/// Run outcomes that count as the job failing (not a deploy's kill, not a lost lease).
pub const FAILING_OUTCOMES: &[&str] = &["failed", "timeout"];

/// Whether an outcome counts as the job failing.
pub fn is_failure(outcome: &str) -> bool {
    FAILING_OUTCOMES.contains(&outcome)
}

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
    /// All-time runs per outcome (kept by counters, so pruning history keeps them).
    pub runs_by_outcome: std::collections::BTreeMap<String, u64>,
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

/// Percentiles of run durations (ms) with hdrhistogram; None when there are no runs.
pub fn percentiles(durations_ms: &[i64]) -> (Option<u64>, Option<u64>) {
    let Ok(mut h) = hdrhistogram::Histogram::<u64>::new(3) else {
        return (None, None);
    };
    for &d in durations_ms {
        let _ = h.record(d.max(0) as u64);
    }
    if h.is_empty() {
        return (None, None);
    }
    (
        Some(h.value_at_quantile(0.50)),
        Some(h.value_at_quantile(0.99)),
    )
}

/// The overlap forecast and a failing job, as warnings a person can act on.
pub fn job_warnings(j: &JobRow) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(r) = &j.last_run {
        if let Some(o) = r.outcome.as_deref().filter(|o| is_failure(o)) {
            w.push(format!(
                "last run {o}{}; {} of {} runs failed in the window",
                r.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default(),
                j.runs_failed,
                j.runs
            ));
        }
    }
    if j.firings_gave_up > 0 {
        w.push(format!(
            "{} firing(s) gave up after 3 runs: check their effects by hand",
            j.firings_gave_up
        ));
    }
    if j.firings_need_retry > 0 {
        w.push(format!(
            "{} firing(s) need retry: an effect never happened; a scheduler re-runs them",
            j.firings_need_retry
        ));
    }
    if let (Some(p99), Some(interval)) = (j.p99_ms, j.interval_s) {
        if interval > 0 && p99 > (interval as u64) * 1000 {
            w.push(format!(
                "p99 {} > interval {}: a queue, not a schedule",
                human_ms(p99),
                human_age(interval)
            ));
        }
    }
    if let (Some(p99), Some(lease)) = (j.p99_ms, j.lease_ms) {
        if lease > 0 && p99 > lease as u64 {
            w.push(format!(
                "p99 {} > lease {}: live runs will be stolen",
                human_ms(p99),
                human_ms(lease as u64)
            ));
        }
    }
    if let (Some(lease), Some(interval)) = (j.lease_ms, j.interval_s) {
        if interval > 0 && lease >= interval * 1000 {
            w.push(format!(
                "lease {} >= interval {}: a crashed run blocks the next firing",
                human_ms(lease as u64),
                human_age(interval)
            ));
        }
    }
    w
}

impl Snapshot {
    /// Reads the snapshot (one short read transaction, indexes only).
    pub fn read(store: &mut Store) -> crate::Result<Snapshot> {
        store.snapshot()
    }
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

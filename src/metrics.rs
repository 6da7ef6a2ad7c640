//! The one plain [`Snapshot`] value read from the database, and what renders only it:
//! `status` (text and JSON) and `metrics` (Prometheus text). The dashboard draws it too.
use crate::sanitize::inert;
use crate::store::{ApprovalRow, Store};
use crate::time::{human_age, human_ms};
use serde::Serialize;
use std::fmt::Write as _;

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
            state: a.state,
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

    pub fn to_json(&self) -> String {
        let jobs: Vec<_> = self
            .jobs
            .iter()
            .map(|j| {
                serde_json::json!({
                    "job_key": j.job_key, "schedule": j.schedule, "interval_s": j.interval_s,
                    "lease_s": j.lease_s, "lease_ms": j.lease_ms, "overlap": j.overlap, "queue_cap": j.queue_cap,
                    "runs": j.runs, "p50_ms": j.p50_ms, "p99_ms": j.p99_ms,
                    "fencing_token": j.fencing_token, "lease_owner": j.lease_owner,
                    "lease_until": j.lease_until, "paused": j.paused, "pause_note": j.pause_note,
                    "retired": j.retired, "queue_depth": j.queue_depth,
                    "duplicates_suppressed": j.duplicates_suppressed,
                    "fenced_writes": j.fenced_writes,
                    "last_run": j.last_run, "warnings": j.warnings,
                    "timezone": j.timezone, "next_fire_at": j.next_fire_at,
                    "last_success_at": j.last_success_at, "runs_failed": j.runs_failed,
                    "runs_by_outcome": j.runs_by_outcome, "missed_firings": j.missed_firings,
                })
            })
            .collect();
        let unknown: Vec<_> = self
            .unknown
            .iter()
            .map(|u| {
                serde_json::json!({
                    "effect_key": u.effect_key, "job_key": u.job_key, "state": u.state,
                    "since": u.since, "age_s": u.age_s, "terms_shown": u.terms_shown,
                    "verdict": u.verdict,
                })
            })
            .collect();
        let approvals = |v: &[ApprovalView]| -> Vec<serde_json::Value> {
            v.iter()
                .map(|a| {
                    serde_json::json!({
                        "effect_key": a.effect_key, "job_key": a.job_key,
                        "terms_shown": a.terms_shown, "age_s": a.age_s,
                        "requested_at": a.requested_at, "decided_by": a.decided_by,
                    })
                })
                .collect()
        };
        let schedulers: Vec<_> = self
            .schedulers
            .iter()
            .map(|s| {
                serde_json::json!({
                    "owner": s.owner, "host": s.host, "pid": s.pid, "started_at": s.started_at,
                    "heartbeat_at": s.heartbeat_at, "ended_at": s.ended_at, "alive": s.alive,
                })
            })
            .collect();
        let mut totals = serde_json::to_value(&self.totals).unwrap_or_default();
        if let Some(t) = totals.as_object_mut() {
            t.insert("schedulers_alive".into(), self.schedulers_alive.into());
        }
        let v = serde_json::json!({
            "taken_at": self.taken_at,
            "db": self.db,
            "host": self.host,
            "schema_version": self.schema_version,
            "warnings": self.warnings,
            "schedulers": schedulers,
            "scheduler_dead_after_s": self.scheduler_dead_after_s,
            "totals": totals,
            "last_24h": self.last_24h,
            "oldest_unknown_s": self.oldest_unknown_s,
            "missed_firings": self.missed_firings,
            "jobs": jobs,
            "unknown": unknown,
            "pending_approvals": approvals(&self.pending_approvals),
            "unused_approvals": approvals(&self.unused_approvals),
        });
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }

    /// A readable summary for `exactly status`.
    pub fn to_text(&self) -> String {
        let t = &self.totals;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "exactly status — {} at {}",
            inert(&self.db),
            self.taken_at
        );
        let _ = writeln!(
            s,
            "duplicates suppressed {} (24h {})   fenced writes {} (24h {})   claimed, never submitted {}",
            t.duplicates_suppressed,
            self.last_24h.duplicates_suppressed,
            t.fenced_writes,
            self.last_24h.fenced_writes,
            t.claimed_never_submitted
        );
        let oldest = self
            .oldest_unknown_s
            .map(|a| format!(" (oldest {})", human_age(a)))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "unknown {}{oldest}   pending approvals {}   approved but unused {}",
            t.unknown, t.pending_approvals, t.unused_approvals
        );
        let _ = writeln!(
            s,
            "schedulers alive {} (silent {} = dead)   missed firings {}",
            self.schedulers_alive,
            human_age(self.scheduler_dead_after_s),
            self.missed_firings
        );
        for w in &self.warnings {
            let _ = writeln!(s, "! {}", inert(w));
        }
        if !self.schedulers.is_empty() {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "{:<32} {:<16} {:>8} {:<9} last heartbeat",
                "SCHEDULER", "HOST", "PID", "STATE"
            );
            let now = crate::time::parse(&self.taken_at);
            for sc in &self.schedulers {
                let ago = match (now, crate::time::parse(&sc.heartbeat_at)) {
                    (Some(n), Some(h)) => format!("{} ago", human_age(crate::time::age_s(h, n))),
                    _ => inert(&sc.heartbeat_at),
                };
                let state = if sc.alive {
                    "alive"
                } else if sc.ended_at.is_some() {
                    "stopped"
                } else {
                    "DEAD"
                };
                let _ = writeln!(
                    s,
                    "{:<32} {:<16} {:>8} {:<9} {ago}",
                    crate::sanitize::inert_trunc(&sc.owner, 32),
                    crate::sanitize::inert_trunc(&sc.host, 16),
                    sc.pid,
                    state
                );
            }
        }
        if !self.jobs.is_empty() {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "{:<24} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>6}  {:<22} {:<22} lease",
                "JOB", "RUNS", "FAILED", "P50", "P99", "INTERVAL", "LEASE", "TOKEN", "NEXT", "LAST"
            );
            let now = crate::time::parse(&self.taken_at);
            for j in &self.jobs {
                let lease = match (&j.lease_owner, j.lease_left_s) {
                    (Some(o), Some(left)) if left > 0 => {
                        format!("held by {} for {}", inert(o), human_age(left))
                    }
                    (Some(_), Some(_)) => "expired".to_string(),
                    _ => "free".to_string(),
                };
                let next = match (&j.next_fire_at, now) {
                    _ if j.paused => "paused".to_string(),
                    (Some(n), Some(now)) => match crate::time::parse(n) {
                        Some(t) if t >= now => format!("in {}", human_age((t - now).num_seconds())),
                        Some(t) => format!("overdue {}", human_age((now - t).num_seconds())),
                        None => "-".into(),
                    },
                    _ => "-".into(),
                };
                let last = match (&j.last_run, now) {
                    (Some(r), Some(now)) => format!(
                        "{}{} {} ago",
                        inert(r.outcome.as_deref().unwrap_or("running")),
                        r.exit_code
                            .filter(|c| *c != 0)
                            .map(|c| format!(" {c}"))
                            .unwrap_or_default(),
                        crate::time::parse(&r.started_at)
                            .map(|t| human_age(crate::time::age_s(t, now)))
                            .unwrap_or_else(|| "?".into())
                    ),
                    _ => "-".into(),
                };
                let _ = writeln!(
                    s,
                    "{:<24} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>6}  {:<22} {:<22} {lease}",
                    crate::sanitize::inert_trunc(&j.job_key, 24),
                    j.runs,
                    j.runs_failed,
                    j.p50_ms.map(human_ms).unwrap_or_else(|| "-".into()),
                    j.p99_ms.map(human_ms).unwrap_or_else(|| "-".into()),
                    j.interval_s.map(human_age).unwrap_or_else(|| "-".into()),
                    j.lease_ms
                        .map(|ms| human_ms(ms.max(0) as u64))
                        .unwrap_or_else(|| "-".into()),
                    j.fencing_token
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into()),
                    next,
                    last,
                );
                if j.paused {
                    let _ = writeln!(
                        s,
                        "  paused{}",
                        j.pause_note
                            .as_deref()
                            .map(|n| format!(": {}", inert(n)))
                            .unwrap_or_default()
                    );
                }
                if j.missed_firings > 0 {
                    let pending = if j.missed_unrecorded > 0 {
                        format!(
                            " ({} passed since the last firing with no scheduler to run them)",
                            j.missed_unrecorded
                        )
                    } else {
                        String::new()
                    };
                    let _ = writeln!(s, "  ! {} firing(s) missed{pending}", j.missed_firings);
                }
                for w in &j.warnings {
                    let _ = writeln!(s, "  ! {}", inert(w));
                }
            }
        }
        if !self.unknown.is_empty() {
            let _ = writeln!(s, "\nunknown (resolve before any retry):");
            for u in &self.unknown {
                let _ = writeln!(
                    s,
                    "  {}  {:<10} {:<20} {}",
                    inert(&u.effect_key),
                    u.state,
                    crate::sanitize::inert_trunc(&u.job_key, 20),
                    human_age(u.age_s)
                );
            }
        }
        if !self.pending_approvals.is_empty() {
            let _ = writeln!(s, "\npending approvals:");
            for a in &self.pending_approvals {
                let _ = writeln!(
                    s,
                    "  {}  {:<20} {}  {}",
                    inert(&a.effect_key),
                    crate::sanitize::inert_trunc(&a.job_key, 20),
                    human_age(a.age_s),
                    crate::sanitize::inert_trunc(a.terms_shown.as_deref().unwrap_or(""), 60)
                );
            }
        }
        s
    }

    /// Prometheus text exposition.
    pub fn to_prometheus(&self) -> String {
        let mut s = String::new();
        let t = &self.totals;
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} {kind}");
            let _ = writeln!(s, "{name} {value}");
        };
        metric(
            "exactly_duplicates_suppressed_total",
            "counter",
            "Attempts that found their effect already done.",
            t.duplicates_suppressed.to_string(),
        );
        metric(
            "exactly_fenced_writes_total",
            "counter",
            "Writes refused because a higher fencing token exists.",
            t.fenced_writes.to_string(),
        );
        metric(
            "exactly_claimed_never_submitted",
            "gauge",
            "Effects reserved by a lease that expired or was superseded, never sent.",
            t.claimed_never_submitted.to_string(),
        );
        metric(
            "exactly_unknown_effects",
            "gauge",
            "Effects that may or may not have happened.",
            t.unknown.to_string(),
        );
        metric(
            "exactly_oldest_unknown_age_seconds",
            "gauge",
            "Age of the oldest unresolved effect.",
            self.oldest_unknown_s.unwrap_or(0).to_string(),
        );
        metric(
            "exactly_pending_approvals",
            "gauge",
            "Effects waiting for a person's approval.",
            t.pending_approvals.to_string(),
        );
        metric(
            "exactly_unused_approvals",
            "gauge",
            "Approvals granted but not yet consumed.",
            t.unused_approvals.to_string(),
        );
        metric(
            "exactly_missed_firings_total",
            "counter",
            "Firings missed under overlap policy fail or outside catch-up.",
            self.missed_firings.to_string(),
        );
        metric(
            "exactly_schedulers_alive",
            "gauge",
            "Schedulers (exactly run) whose heartbeat is recent.",
            self.schedulers_alive.to_string(),
        );
        metric(
            "exactly_jobs_registered",
            "gauge",
            "Jobs registered by a jobs file and not retired.",
            self.jobs
                .iter()
                .filter(|j| j.schedule.is_some() && !j.retired)
                .count()
                .to_string(),
        );
        let label = |j: &JobRow| prom_label(&j.job_key);
        {
            let name = "exactly_job_runs_total";
            let _ = writeln!(
                s,
                "# HELP {name} Runs ended, per job and outcome (all time)."
            );
            let _ = writeln!(s, "# TYPE {name} counter");
            for j in &self.jobs {
                for (outcome, n) in &j.runs_by_outcome {
                    let _ = writeln!(
                        s,
                        "{name}{{job=\"{}\",outcome=\"{}\"}} {n}",
                        label(j),
                        prom_label(outcome)
                    );
                }
            }
        }
        let mut per_job =
            |name: &str, kind: &str, help: &str, f: &dyn Fn(&JobRow) -> Option<String>| {
                let _ = writeln!(s, "# HELP {name} {help}");
                let _ = writeln!(s, "# TYPE {name} {kind}");
                for j in &self.jobs {
                    if let Some(v) = f(j) {
                        let _ = writeln!(s, "{name}{{job=\"{}\"}} {v}", label(j));
                    }
                }
            };
        per_job(
            "exactly_job_duplicates_suppressed_total",
            "counter",
            "Duplicates suppressed per job.",
            &|j| Some(j.duplicates_suppressed.to_string()),
        );
        per_job(
            "exactly_job_fenced_writes_total",
            "counter",
            "Fenced writes per job.",
            &|j| Some(j.fenced_writes.to_string()),
        );
        per_job(
            "exactly_job_runs",
            "gauge",
            "Runs in the duration window per job.",
            &|j| Some(j.runs.to_string()),
        );
        per_job(
            "exactly_job_run_p50_seconds",
            "gauge",
            "Median run duration.",
            &|j| j.p50_ms.map(|v| format!("{:.3}", v as f64 / 1000.0)),
        );
        per_job(
            "exactly_job_run_p99_seconds",
            "gauge",
            "99th percentile run duration.",
            &|j| j.p99_ms.map(|v| format!("{:.3}", v as f64 / 1000.0)),
        );
        per_job(
            "exactly_job_interval_seconds",
            "gauge",
            "Schedule interval.",
            &|j| j.interval_s.map(|v| v.to_string()),
        );
        per_job(
            "exactly_job_lease_seconds",
            "gauge",
            "Lease duration.",
            &|j| j.lease_ms.map(|v| format!("{:.3}", v as f64 / 1000.0)),
        );
        per_job(
            "exactly_job_fencing_token",
            "gauge",
            "Current fencing token.",
            &|j| j.fencing_token.map(|v| v.to_string()),
        );
        per_job(
            "exactly_job_queue_depth",
            "gauge",
            "Firings waiting under overlap policy queue.",
            &|j| Some(j.queue_depth.to_string()),
        );
        per_job(
            "exactly_job_runs_failed",
            "gauge",
            "Runs in the duration window that ended failed or timeout.",
            &|j| Some(j.runs_failed.to_string()),
        );
        per_job(
            "exactly_job_last_success_timestamp_seconds",
            "gauge",
            "When the job's latest ok run ended (Unix seconds).",
            &|j| j.last_success_at.as_deref().and_then(unix_s),
        );
        per_job(
            "exactly_job_last_run_timestamp_seconds",
            "gauge",
            "When the job's latest run started (Unix seconds).",
            &|j| j.last_run.as_ref().and_then(|r| unix_s(&r.started_at)),
        );
        per_job(
            "exactly_job_next_fire_timestamp_seconds",
            "gauge",
            "The job's next firing (Unix seconds); in the past when nobody fired it.",
            &|j| j.next_fire_at.as_deref().and_then(unix_s),
        );
        per_job(
            "exactly_job_missed_firings_total",
            "counter",
            "Firings missed per job (recorded, and passed with no scheduler).",
            &|j| Some(j.missed_firings.to_string()),
        );
        per_job(
            "exactly_job_paused",
            "gauge",
            "1 when the job is paused.",
            &|j| Some(u8::from(j.paused).to_string()),
        );
        s
    }
}

/// A ledger timestamp as Unix seconds with milliseconds.
fn unix_s(ts: &str) -> Option<String> {
    crate::time::parse(ts).map(|t| format!("{:.3}", t.timestamp_millis() as f64 / 1000.0))
}

/// Escapes a Prometheus label value (and keeps it printable).
fn prom_label(s: &str) -> String {
    inert(s).replace('\\', "\\\\").replace('"', "\\\"")
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

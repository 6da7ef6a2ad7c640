//! The [`Snapshot`]: one plain value, built from what the store reads in one short read
//! transaction (a [`Reading`]), that every reader renders — `status` (text, JSON), `metrics`
//! (OpenMetrics/Prometheus), the dashboard.
//! Here the model and what is derived from its rows (percentiles, a job's warnings);
//! `status.rs` and `metrics.rs` render it.
use crate::store::Store;
use exactly_words::time::human_age;
use serde::Serialize;

mod job;
pub use job::{job_warnings, lease_warnings, plan, JobRow, JobState, Registered};

/// Everything the dashboard, `status` and `metrics` show, read in one short transaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// The database's clock when read (the server's, on PostgreSQL).
    #[serde(serialize_with = "crate::store::rows::ser_ts")]
    pub taken_at: exactly_words::time::Ts,
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
    pub last_failover_at: Option<exactly_words::time::Ts>,
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

pub use crate::store::rows::{
    ApprovalView, EventRow, JobFacts, JobSettings, NotificationCount, OpenEffect, ParsedSchedule,
    Reading, Replaced, RunRow, SchedulerRow, Window, RUN_BUCKETS_MS,
};
pub use exactly_words::state::{is_failure, RunOutcome, FAILING_OUTCOMES};

pub use exactly_words::time::percentiles;

impl Snapshot {
    /// Reads the snapshot (one short read transaction, indexes only, notification counts
    /// included); then, from the facts read, each job's next firing, the firings it missed and
    /// its warnings.
    pub fn read(store: &mut Store) -> exactly_words::Result<Snapshot> {
        let now = store.now();
        let dead_after = crate::jobs::scheduler_dead_after();
        let reading = store.reading(now, dead_after)?;
        let mut snap = Snapshot::from_reading(reading, &exactly_words::hostname(), dead_after);
        for j in &mut snap.jobs {
            j.derive(now);
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
        let jobs: Vec<JobRow> = r.jobs.into_iter().map(JobRow::from_facts).collect();
        let registered = Registered::of(&jobs);
        if registered.jobs > 0 && schedulers_alive == 0 {
            let last = r
                .schedulers
                .iter()
                .map(|s| s.heartbeat_at)
                .max()
                .map(|t| {
                    let ago = human_age(exactly_words::time::age_s(t, now));
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
            r.missed_recorded + jobs.iter().map(|j| j.missed_unrecorded).sum::<u64>();
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
            jobs,
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
    last: Option<&(exactly_words::time::Ts, String)>,
    now: exactly_words::time::Ts,
) -> Vec<String> {
    let Some((at, detail)) = last else {
        return Vec::new();
    };
    let age = exactly_words::time::age_s(*at, now);
    if age > FAILOVER_SHOWN_S {
        return Vec::new();
    }
    vec![format!(
        "database failed over {} ago ({}); check the far side for effects sent just before",
        human_age(age),
        exactly_words::sanitize::inert(detail)
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
            exactly_words::sanitize::inert(h)
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
            c.at.map_or_else(|| "?".to_string(), exactly_words::time::fmt),
            c.owner,
            c.source.as_deref().unwrap_or("?"),
        ));
    }
}

/// A number that changes whenever another connection commits (SQLite's `data_version`): a
/// dashboard reads the whole snapshot again only when it moved.
pub fn data_version(store: &mut Store) -> exactly_words::Result<i64> {
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

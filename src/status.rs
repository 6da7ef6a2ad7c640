//! `exactly status`: the [`Snapshot`] as text for a person and as JSON for a script.
use crate::snapshot::{JobRow, Snapshot};
use exactly_words::sanitize::inert;
use exactly_words::state::EventKind;
use exactly_words::time::{human_age, human_ms};
use std::fmt::Write as _;

impl Snapshot {
    /// `status --json`: the snapshot the dashboard draws, serialised whole (serde), with
    /// `json_schema_version` and `totals.schedulers_alive` added.
    pub fn to_json(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        // The naming scheme's names beside the older ones (`crate::json`).
        // Each job's state word, the one `jobs --json` says (`JobRow::state`).
        if let Some(jobs) = v.get_mut("jobs").and_then(|j| j.as_array_mut()) {
            for (row, j) in jobs.iter_mut().zip(&self.jobs) {
                if let Some(o) = row.as_object_mut() {
                    o.insert("state".into(), j.state().word().into());
                }
            }
        }
        crate::json::alias_each(&mut v, "jobs");
        crate::json::alias_each(&mut v, "unknown");
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "json_schema_version".into(),
                crate::json::JSON_SCHEMA_VERSION.into(),
            );
            if let Some(t) = o.get_mut("totals").and_then(|t| t.as_object_mut()) {
                t.insert("schedulers_alive".into(), self.schedulers_alive.into());
            }
        }
        exactly_words::sanitize::json_visible(serde_json::to_string_pretty(&v).unwrap_or_default())
    }

    /// A readable summary for `exactly status`.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        self.text_totals(&mut s);
        self.text_schedulers(&mut s);
        // The latest reload of a jobs file (SIGHUP), among the events read.
        if let Some(e) = self
            .events
            .iter()
            .find(|e| e.kind == EventKind::JobsReloaded)
        {
            let _ = writeln!(
                s,
                "last reload {} by {}: {}",
                exactly_words::time::fmt(e.at),
                inert(e.actor.as_deref().unwrap_or("?")),
                inert(e.detail.as_deref().unwrap_or(""))
            );
        }
        self.text_jobs(&mut s);
        self.text_open(&mut s);
        s
    }

    /// `status`'s head: the database, its totals, and its warnings.
    fn text_totals(&self, s: &mut String) {
        let t = &self.totals;
        let _ = writeln!(
            s,
            "exactly status — {} at {}",
            inert(&self.db),
            exactly_words::time::fmt(self.taken_at)
        );
        let _ = writeln!(
            s,
            "duplicates suppressed {} (24h {})   fenced writes {} (24h {})   claimed, \
             never submitted {}",
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
    }

    /// `status`'s schedulers table, when there are any.
    fn text_schedulers(&self, s: &mut String) {
        if self.schedulers.is_empty() {
            return;
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<32} {:<16} {:>8} {:<9} last heartbeat",
            "SCHEDULER", "HOST", "PID", "STATE"
        );
        let now = self.taken_at;
        let ago = |at: exactly_words::time::Ts| {
            format!("{} ago", human_age(exactly_words::time::age_s(at, now)))
        };
        // The live ones listed; the ended ones (stopped or dead: one per restart, so many on a
        // long-lived database) folded into one line. `--json` keeps every one.
        let (live, ended): (Vec<_>, Vec<_>) = self.schedulers.iter().partition(|sc| sc.alive);
        for sc in live {
            let ago = ago(sc.heartbeat_at);
            let _ = writeln!(
                s,
                "{:<32} {:<16} {:>8} {:<9} {ago}",
                exactly_words::sanitize::inert_trunc(&sc.owner, 32),
                exactly_words::sanitize::inert_trunc(&sc.host, 16),
                sc.pid,
                "alive"
            );
        }
        let Some(last) = ended
            .iter()
            .max_by(|a, b| a.heartbeat_at.cmp(&b.heartbeat_at))
        else {
            return;
        };
        let stopped = ended.iter().filter(|sc| sc.ended_at.is_some()).count();
        let dead = ended.len() - stopped;
        let how = match (stopped, dead) {
            (_, 0) => format!("{stopped} stopped"),
            (0, _) => format!("{dead} DEAD: killed or lost, no clean stop"),
            _ => format!("{stopped} stopped, {dead} DEAD: killed or lost, no clean stop"),
        };
        let _ = writeln!(
            s,
            "{} ended ({how}), the last {} on {} (pid {}), last heartbeat {}",
            ended.len(),
            exactly_words::sanitize::inert_trunc(&last.owner, 32),
            exactly_words::sanitize::inert_trunc(&last.host, 16),
            last.pid,
            ago(last.heartbeat_at)
        );
    }

    /// `status`'s jobs table, when there are any: a row per job and its notes under it.
    fn text_jobs(&self, s: &mut String) {
        if self.jobs.is_empty() {
            return;
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<24} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>6}  {:<22} {:<22} lease",
            "JOB", "RUNS", "FAILED", "P50", "P99", "INTERVAL", "LEASE", "TOKEN", "NEXT", "LAST"
        );
        let now = Some(self.taken_at);
        for j in &self.jobs {
            job_row(s, j, now);
            job_notes(s, j);
        }
    }

    /// `status`'s open effects and pending approvals, when there are any.
    fn text_open(&self, s: &mut String) {
        if !self.unknown.is_empty() {
            let _ = writeln!(s, "\nunknown (resolve before any retry):");
            for u in &self.unknown {
                let _ = writeln!(
                    s,
                    "  {}  {:<10} {:<20} {}",
                    inert(&u.effect_key),
                    u.state,
                    exactly_words::sanitize::inert_trunc(&u.job_key, 20),
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
                    exactly_words::sanitize::inert_trunc(&a.job_key, 20),
                    human_age(a.age_s),
                    exactly_words::sanitize::inert_trunc(
                        a.terms_shown.as_deref().unwrap_or(""),
                        60
                    )
                );
            }
        }
    }
}

/// A job's row in `status`'s jobs table.
fn job_row(s: &mut String, j: &JobRow, now: Option<exactly_words::time::Ts>) {
    let lease = match (&j.lease_owner, j.lease_left_s) {
        (Some(o), Some(left)) if left > 0 => {
            format!("held by {} for {}", inert(o), human_age(left))
        }
        (Some(_), Some(_)) => "expired".to_string(),
        _ => "free".to_string(),
    };
    let next = match (&j.next_fire_at, now) {
        _ if j.paused => "paused".to_string(),
        (Some(t), Some(now)) if *t >= now => format!("in {}", human_age((*t - now).num_seconds())),
        (Some(t), Some(now)) => format!("overdue {}", human_age((now - *t).num_seconds())),
        _ => "-".into(),
    };
    let last = match (&j.last_run, now) {
        (Some(r), Some(now)) => format!(
            "{}{} {} ago",
            inert(r.outcome_or_running()),
            r.exit_code
                .filter(|c| *c != 0)
                .map(|c| format!(" {c}"))
                .unwrap_or_default(),
            human_age(exactly_words::time::age_s(r.started_at, now))
        ),
        _ => "-".into(),
    };
    let _ = writeln!(
        s,
        "{:<24} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>6}  {:<22} {:<22} {lease}",
        exactly_words::sanitize::inert_trunc(&j.job_key, 24),
        j.runs,
        j.runs_failed,
        j.p50_ms.map(human_ms).unwrap_or_else(|| "-".into()),
        j.p99_ms.map(human_ms).unwrap_or_else(|| "-".into()),
        j.settings
            .interval_s
            .map(human_age)
            .unwrap_or_else(|| "-".into()),
        j.settings
            .lease_ms
            .map(|ms| human_ms(ms.max(0) as u64))
            .unwrap_or_else(|| "-".into()),
        j.fencing_token
            .map(|t| t.to_string())
            .unwrap_or_else(|| "-".into()),
        next,
        last,
    );
}

/// The notes under a job's row: its pause, a run waiting for approval, daylight saving,
/// missed firings and warnings.
fn job_notes(s: &mut String, j: &JobRow) {
    if j.state() == crate::snapshot::JobState::AwaitingApproval {
        let _ = writeln!(
            s,
            "  {}: its run stopped at an effect a person must decide (exactly approve KEY \
             sends it within seconds; exactly deny KEY ends the firing)",
            j.state()
        );
    }
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
    if let (Some(d), Some(tz)) = (&j.dst, &j.settings.timezone) {
        let _ = writeln!(
            s,
            "  daylight saving in {}: repeated hour {}, skipped hour {}",
            inert(tz),
            d.repeated,
            d.skipped
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
    if let (Some(p50), Some(p99)) = (j.start_lag_p50_ms, j.start_lag_p99_ms) {
        let _ = writeln!(
            s,
            "  lag p50 {}, lag p99 {}: the scheduler's, before each command started (not in P50/P99)",
            human_ms(p50),
            human_ms(p99)
        );
    }
    for w in &j.warnings {
        let _ = writeln!(s, "  ! {}", inert(w));
    }
}

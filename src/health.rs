//! `exactly status --check`: one verdict from a [`Snapshot`], in the monitoring plugins'
//! convention (Nagios): 0 ok, 1 warning, 2 critical, and one summary line. The rules are
//! docs/monitoring.md's (`status --check`): critical is what loses or may double work without a
//! person acting, warning is what waits for one.
use crate::snapshot::Snapshot;
use exactly_words::sanitize::inert;
use exactly_words::time::human_age;

/// An effect `unknown` for longer than this is critical (a younger one is a warning).
pub const UNKNOWN_CRITICAL_S: i64 = 3600;
/// A firing this far behind its time with a scheduler alive is late (a warning): a firing
/// waits up to 2 s for its tick, and a busy scheduler a little more.
pub const LATE_AFTER_S: i64 = 60;

/// How bad things are, in the monitoring plugins' convention (its value is the exit code).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Nothing to do.
    Ok = 0,
    /// Something waits for a person.
    Warning = 1,
    /// Work is lost, or may be doubled, unless a person acts.
    Critical = 2,
}

impl Level {
    /// The level as the summary line spells it: `OK`, `WARNING`, `CRITICAL`.
    pub fn word(self) -> &'static str {
        match self {
            Level::Ok => "OK",
            Level::Warning => "WARNING",
            Level::Critical => "CRITICAL",
        }
    }
}

/// The verdict and its reasons, the worst first.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// The worst level among the reasons (`Ok` when there are none).
    pub level: Level,
    /// Each problem found, with its level, the worst first.
    pub reasons: Vec<(Level, String)>,
    /// `name=value` pairs for the plugin's performance data.
    pub perfdata: Vec<(String, i64)>,
}

impl Health {
    /// The exit code monitoring plugins expect.
    pub fn exit_code(&self) -> i32 {
        self.level as i32
    }

    /// `EXACTLY CRITICAL - reason; reason | unknown=1 …`: one line.
    pub fn line(&self) -> String {
        let text = if self.reasons.is_empty() {
            "no problems".to_string()
        } else {
            self.reasons
                .iter()
                .map(|(_, r)| r.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        };
        let perf = self
            .perfdata
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        format!("EXACTLY {} - {text} | {perf}", self.level.word())
    }
}

/// Judges a snapshot: critical when registered jobs have no scheduler alive, or an effect has
/// been unknown for over [`UNKNOWN_CRITICAL_S`]; warning for a younger unknown, a pending
/// approval, a job whose last run failed, a late or missed firing, or another whole-system
/// warning (a host-name clash).
pub fn check(snap: &Snapshot) -> Health {
    let mut reasons: Vec<(Level, String)> = Vec::new();
    // The count every output gives (paused jobs included, and said): a paused job still needs
    // a scheduler alive to be resumed.
    let registered = crate::snapshot::Registered::of(&snap.jobs);
    if registered.jobs > 0 && snap.schedulers_alive == 0 {
        reasons.push((
            Level::Critical,
            format!("no scheduler alive ({})", registered.listed()),
        ));
    }
    let old = snap
        .unknown
        .iter()
        .filter(|u| u.age_s > UNKNOWN_CRITICAL_S)
        .count();
    if let Some(oldest) = snap.unknown.iter().map(|u| u.age_s).max() {
        let level = if old > 0 {
            Level::Critical
        } else {
            Level::Warning
        };
        reasons.push((
            level,
            format!(
                "{} unknown effect(s), oldest {} (exactly effects --state unknown)",
                snap.totals.unknown,
                human_age(oldest)
            ),
        ));
    }
    if let Some(oldest) = snap.pending_approvals.iter().map(|a| a.age_s).max() {
        reasons.push((
            Level::Warning,
            format!(
                "{} approval(s) pending, oldest {}",
                snap.pending_approvals.len(),
                human_age(oldest)
            ),
        ));
    }
    let now = snap.taken_at;
    let mut failing = Vec::new();
    let mut late = Vec::new();
    for j in snap.jobs.iter().filter(|j| !j.retired) {
        // An open failing episode (a run under way does not end it; a run waiting for
        // approval is not a failure): the one judgement every reader makes.
        if j.failing_episode().is_some() {
            failing.push(inert(&j.job_key));
        }
        let behind = j.next_fire_at.map_or(0, |next| (now - next).num_seconds());
        // With no scheduler alive every job is late: that is already critical, said once.
        if !j.paused
            && snap.schedulers_alive > 0
            && (behind > LATE_AFTER_S || j.missed_unrecorded > 0)
        {
            late.push(inert(&j.job_key));
        }
    }
    if !failing.is_empty() {
        reasons.push((Level::Warning, format!("failing: {}", failing.join(", "))));
    }
    if !late.is_empty() {
        reasons.push((Level::Warning, format!("firing late: {}", late.join(", "))));
    }
    for c in snap.failover_warnings.iter().chain(&snap.host_clashes) {
        reasons.push((Level::Warning, inert(c)));
    }
    reasons.sort_by_key(|r| std::cmp::Reverse(r.0));
    let level = reasons.first().map(|r| r.0).unwrap_or(Level::Ok);
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    Health {
        level,
        reasons,
        perfdata: vec![
            ("schedulers_alive".into(), n(snap.schedulers_alive)),
            ("jobs_registered".into(), registered.jobs as i64),
            ("unknown".into(), n(snap.totals.unknown)),
            (
                "oldest_unknown_s".into(),
                snap.oldest_unknown_s.unwrap_or(0),
            ),
            ("pending_approvals".into(), n(snap.totals.pending_approvals)),
            ("jobs_failing".into(), failing.len() as i64),
            ("jobs_late".into(), late.len() as i64),
        ],
    }
}

//! The validation of one job's table (a [`RawJob`]) into a [`Job`]: each key checked, every
//! mistake a [`Problem`] under the job's name.
use super::dst_policy::dst_policy;
use super::job::{FarSide, Job, Overlap, OBSERVE_TIMEOUT_DEFAULT};
use super::problem::Problem;
use super::retry::{self, Policy, RawPolicy};
use crate::schedule::Schedule;
use serde::Deserialize;
use std::time::Duration;

/// The typed form of one `[[job]]` table, after unknown keys were reported and removed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub(super) name: Option<String>,
    pub(super) schedule: Option<String>,
    pub(super) every: Option<String>,
    pub(super) timezone: Option<String>,
    pub(super) lease: Option<String>,
    pub(super) overlap: Option<String>,
    pub(super) queue_cap: Option<i64>,
    pub(super) catchup: Option<String>,
    pub(super) timeout: Option<String>,
    pub(super) observe_timeout: Option<String>,
    pub(super) command: Option<Vec<String>>,
    pub(super) dst_repeated: Option<String>,
    pub(super) dst_skipped: Option<String>,
    pub(super) keep_runs: Option<i64>,
    pub(super) retries: Option<i64>,
    pub(super) retry_backoff: Option<String>,
    pub(super) retry_backoff_max: Option<String>,
    pub(super) pause_after_failures: Option<i64>,
    pub(super) jitter: Option<String>,
    pub(super) starting_deadline: Option<String>,
    pub(super) ping: Option<String>,
    pub(super) far_side: Option<String>,
}

/// One job's table, validated into a [`Job`], or `None` with its problems pushed.
pub(super) fn validate(name: &str, mut raw: RawJob, problems: &mut Vec<Problem>) -> Option<Job> {
    let before = problems.len();
    let mut c = Checks { name, problems };
    c.check_name(&raw);
    let schedule = c.schedule_of(&raw);
    let lease = c.lease_of(&raw);
    let catchup = match raw.catchup.as_deref() {
        None => Some(Duration::ZERO),
        Some(v) => match crate::time::parse_duration(v) {
            Ok(d) => Some(d),
            Err(e) => c.refuse("invalid catchup", e.to_string()),
        },
    };
    let timeout = match raw.timeout.as_deref() {
        None => Some(None),
        Some(t) => c.limit("timeout", t).map(Some),
    };
    let observe_timeout = match raw.observe_timeout.as_deref() {
        None => Some(OBSERVE_TIMEOUT_DEFAULT),
        Some(t) => c.limit("observe_timeout", t),
    };
    let overlap = c.overlap_of(&raw);
    let command = c.command_of(raw.command.take());
    let cron_in_zone =
        raw.schedule.is_some() && raw.timezone.as_deref().is_some_and(|t| t != "UTC");
    let dst = dst_policy(
        name,
        raw.dst_repeated.as_deref(),
        raw.dst_skipped.as_deref(),
        cron_in_zone,
        c.problems,
    );
    let keep_runs = c.keep_runs_of(&raw);
    let policy = c.policy_of(&raw, schedule.as_ref());
    let ping = match raw.ping.as_deref().map(crate::runner::run::ping::check_url) {
        None => Some(None),
        Some(Ok(url)) => Some(Some(url)),
        Some(Err(why)) => c.refuse("invalid ping", why),
    };
    let far_side = match raw.far_side.as_deref() {
        None => Some(None),
        Some(w) => match FarSide::parse(w) {
            Some(f) => Some(Some(f)),
            None => c.refuse(
                format!("invalid far_side {w:?}"),
                "choose dedupes (it keeps each EXACTLY_EFFECT_KEY once) or fences (it refuses \
                 a stale EXACTLY_FENCING_TOKEN)",
            ),
        },
    };
    if problems.len() > before {
        return None;
    }
    Some(Job {
        name: crate::JobName::from(name.to_string()),
        schedule: schedule?.with_dst(dst?),
        lease: lease?,
        overlap: overlap?,
        catchup: catchup?,
        timeout: timeout?,
        observe_timeout: observe_timeout?,
        command: command?,
        keep_runs: keep_runs?,
        policy: policy?,
        ping: ping?,
        far_side: far_side?,
    })
}

/// The checks of one job's table: each reports what it finds wrong under the job's name.
struct Checks<'a> {
    name: &'a str,
    problems: &'a mut Vec<Problem>,
}

impl Checks<'_> {
    /// Reports `what` (and `why`) as an error of the job.
    fn error(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.problems.push(Problem::error(self.name, what, why));
    }

    /// Reports an error of the job: the value is unusable (None).
    fn refuse<T>(&mut self, what: impl Into<String>, why: impl Into<String>) -> Option<T> {
        self.error(what, why);
        None
    }

    /// A job's name: given, and one the ledger and the lease table can hold.
    fn check_name(&mut self, raw: &RawJob) {
        if raw
            .name
            .as_deref()
            .map(crate::jobs::normalize_name)
            .unwrap_or_default()
            .is_empty()
        {
            self.error(
                "missing name",
                "a job's name is its identity in the ledger and the lease table",
            );
        } else if let Some(why) = raw
            .name
            .as_deref()
            .and_then(crate::jobs::name_problem)
            .or_else(|| crate::lease::job_name_problem(self.name))
        {
            self.error("invalid name", why);
        }
    }

    /// A job's schedule: a cron expression (in its time zone) or a fixed interval, one of them.
    fn schedule_of(&mut self, raw: &RawJob) -> Option<Schedule> {
        match (&raw.schedule, &raw.every) {
            (Some(_), Some(_)) => self.refuse(
                "both schedule and every",
                "give a cron schedule or a fixed interval, not both",
            ),
            (None, None) => self.refuse(
                "no schedule",
                "give schedule = \"CRON\" or every = \"DURATION\"",
            ),
            (Some(expr), None) => self.cron_of(expr, raw.timezone.as_deref()),
            (None, Some(every)) => {
                if raw.timezone.is_some() {
                    self.error(
                        "timezone with every",
                        "an interval fires at multiples of it since the Unix epoch; \
                         a time zone applies only to cron schedules",
                    );
                }
                match Schedule::every(every) {
                    Ok(s) => Some(s),
                    Err(why) => self.refuse("invalid every", why),
                }
            }
        }
    }

    /// A cron schedule in its time zone; a bad zone and a bad expression are both reported.
    fn cron_of(&mut self, expr: &str, zone: Option<&str>) -> Option<Schedule> {
        match Schedule::cron(expr, zone) {
            Ok(s) => Some(s),
            Err(why) => {
                let bad_zone = matches!(why, crate::schedule::ScheduleError::Zone(_));
                let what = if bad_zone {
                    "invalid timezone"
                } else {
                    "invalid cron schedule"
                };
                self.error(what, why);
                // A bad zone stops the parse before the expression: check that too.
                if let (true, Err(why)) = (bad_zone, Schedule::cron(expr, None)) {
                    self.error("invalid cron schedule", why);
                }
                None
            }
        }
    }

    /// A job's lease: given, and long enough for a heartbeat to keep.
    fn lease_of(&mut self, raw: &RawJob) -> Option<Duration> {
        let Some(l) = raw.lease.as_deref() else {
            self.error(
                "missing lease",
                "choose it: longer than the worst-case run, shorter than the interval",
            );
            return None;
        };
        match crate::time::parse_duration(l) {
            Ok(d) if d >= Duration::from_millis(100) => Some(d),
            Ok(_) => self.refuse(
                "invalid lease",
                format!("lease = {l:?} is shorter than 100ms; no heartbeat can keep it"),
            ),
            Err(e) => self.refuse("invalid lease", e.to_string()),
        }
    }

    /// A time limit (`timeout`, `observe_timeout`). A limit under 100ms leaves no room to
    /// start a process; every limit is bounded at 100y.
    fn limit(&mut self, key: &str, value: &str) -> Option<Duration> {
        match crate::time::parse_duration(value) {
            Ok(d) if d >= Duration::from_millis(100) => Some(d),
            Ok(_) => self.refuse(
                format!("invalid {key}"),
                format!("{key} = {value:?} is shorter than 100ms"),
            ),
            Err(e) => self.refuse(format!("invalid {key}"), e.to_string()),
        }
    }

    /// A job's overlap policy, chosen; a queue with its cap, and a cap only with a queue.
    fn overlap_of(&mut self, raw: &RawJob) -> Option<Overlap> {
        let overlap = match raw.overlap.as_deref() {
            None => self.refuse(
                "missing overlap policy",
                "choose coalesce, queue or fail; otherwise the platform decides by accident",
            ),
            Some("coalesce") => Some(Overlap::Coalesce),
            Some("fail") => Some(Overlap::Fail),
            Some("queue") => self.queue_of(raw.queue_cap),
            Some(other) => self.refuse(
                format!("invalid overlap {other:?}"),
                "choose coalesce, queue or fail",
            ),
        };
        if raw.queue_cap.is_some() && raw.overlap.as_deref().is_some_and(|o| o != "queue") {
            self.error(
                "queue_cap without overlap = \"queue\"",
                "only a queue has a cap; the value would be ignored",
            );
        }
        overlap
    }

    /// `overlap = "queue"` with its cap.
    fn queue_of(&mut self, cap: Option<i64>) -> Option<Overlap> {
        match cap {
            None => self.refuse(
                "overlap = \"queue\" without queue_cap",
                "a queue without a cap grows without limit",
            ),
            Some(c) if !(1..=10_000).contains(&c) => self.refuse(
                format!("invalid queue_cap {c}"),
                "queue_cap must be between 1 and 10000",
            ),
            Some(c) => Some(Overlap::Queue { cap: c as u32 }),
        }
    }

    /// A job's command: given, with a program.
    fn command_of(&mut self, command: Option<Vec<String>>) -> Option<Vec<String>> {
        match command {
            None => self.refuse(
                "missing command",
                "give command = [\"program\", \"arg\", …]",
            ),
            Some(c) if c.is_empty() || c[0].trim().is_empty() => {
                self.refuse("empty command", "give command = [\"program\", \"arg\", …]")
            }
            Some(c) => Some(c),
        }
    }

    /// `keep_runs`: None when absent (`retain` decides), else a count in range.
    fn keep_runs_of(&mut self, raw: &RawJob) -> Option<Option<u32>> {
        match raw.keep_runs {
            None => Some(None),
            Some(n) if (1..=1_000_000).contains(&n) => Some(Some(n as u32)),
            Some(n) => self.refuse(
                format!("invalid keep_runs {n}"),
                "keep_runs must be between 1 and 1000000 (the newest runs kept)",
            ),
        }
    }

    /// The failure and timing policy (`retry.rs`), checked against the schedule's interval.
    fn policy_of(&mut self, raw: &RawJob, schedule: Option<&Schedule>) -> Option<Policy> {
        let raw_policy = RawPolicy {
            retries: raw.retries,
            retry_backoff: raw.retry_backoff.as_deref(),
            retry_backoff_max: raw.retry_backoff_max.as_deref(),
            pause_after_failures: raw.pause_after_failures,
            jitter: raw.jitter.as_deref(),
            starting_deadline: raw.starting_deadline.as_deref(),
            catchup: raw.catchup.is_some(),
        };
        let interval = schedule.map(retry::interval_of);
        retry::validate(self.name, &raw_policy, interval, self.problems)
    }
}

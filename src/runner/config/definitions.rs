//! One definition per job: each scheduler registers a digest of each job's definition
//! (everything that decides what fires), and the newest registration wins. A scheduler whose
//! definition of a job is no longer the registered one (another scheduler registered a
//! different one since, or its file retired the job) stops firing that job and says why, once.
//! It reads the registry every [`CHECK_EVERY`] (one query), and `status`, `top` and `check`
//! show a replaced definition while the scheduler that held it is alive.
use super::job::{late_allowed_s, Job};
use super::problem::{resolved_command, Problem, Severity};
use crate::jobs;
use crate::jobs::JobRecord;
use crate::sanitize::inert;
use crate::Store;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a scheduler compares its definitions with the registry's.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Lowercase hex SHA-256 of a canonical serialization (a JSON array in a fixed order) of
/// everything that changes what a job fires: schedule, time zone, lease, overlap and its cap,
/// catch-up, timeouts, the failure policy when set and the command as resolved from the jobs file's
/// folder `dir`.
pub(crate) fn digest(job: &Job, dir: Option<&Path>) -> String {
    let ms = |d: Duration| d.as_millis() as u64;
    let mut canonical = serde_json::json!([
        "v1",
        job.schedule.describe(),
        job.schedule.timezone(),
        job.schedule.interval_s(),
        ms(job.lease),
        job.overlap.name(),
        job.overlap.cap(),
        ms(job.catchup),
        job.timeout.map(ms),
        ms(job.observe_timeout),
        resolved_command(&job.command, dir),
        job.schedule
            .dst()
            .map(|d| [d.repeated.name(), d.skipped.name()]),
    ]);
    // The failure policy only when set: a job without it keeps the digest it always had.
    let p = &job.policy;
    if p.is_set(super::retry::interval_of(&job.schedule)) {
        if let Some(a) = canonical.as_array_mut() {
            a.push(serde_json::json!([
                p.retries,
                ms(p.retry_backoff),
                ms(p.retry_backoff_max),
                p.pause_after_failures,
                ms(p.jitter),
                p.starting_deadline.map(ms),
            ]));
        }
    }
    format!("{:x}", Sha256::digest(canonical.to_string().as_bytes()))
}

/// Who registered a job's definition, in words: "<owner> from <source> at <time>".
fn registered_by(r: &JobRecord) -> String {
    format!(
        "{} from {} at {}",
        r.owner.as_deref().unwrap_or("?"),
        r.source.as_deref().unwrap_or("?"),
        r.updated_at
            .map_or_else(|| "?".to_string(), crate::time::fmt)
    )
}

/// A scheduler's own definitions, compared with the registry's now and then.
pub(crate) struct Watch {
    mine: BTreeMap<String, String>,
    next: Instant,
}

impl Watch {
    pub(crate) fn new(jobs: &[Job], dir: Option<&Path>) -> Watch {
        Watch {
            mine: jobs
                .iter()
                .map(|j| (j.name.to_string(), digest(j, dir)))
                .collect(),
            next: Instant::now() + CHECK_EVERY,
        }
    }

    /// Every [`CHECK_EVERY`]: the jobs this scheduler must stop firing from now on (each is
    /// named once, with a WARN line saying why), each with whether it was retired (gone from
    /// its file) rather than superseded. A database error is logged and tried again.
    pub(crate) fn stopped(&mut self, store: &mut Store) -> Vec<(String, bool)> {
        if Instant::now() < self.next || self.mine.is_empty() {
            return Vec::new();
        }
        self.next = Instant::now() + CHECK_EVERY;
        let records = match jobs::records(store) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("cannot read the job registry: {e}");
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for r in records {
            let Some(mine) = self.mine.get(&r.job_key) else {
                continue;
            };
            let why = if r.retired {
                format!(
                    "retired by the newest registration of its file ({}): \
                     this scheduler stops firing it",
                    registered_by(&r)
                )
            } else if r.definition_digest.as_deref().is_some_and(|d| d != mine) {
                format!(
                    "definition differs from the one registered by {}: \
                     the newest registration wins, so this scheduler stops firing it",
                    registered_by(&r)
                )
            } else {
                continue;
            };
            tracing::warn!(job = %r.job_key, "{}", inert(&why));
            self.mine.remove(&r.job_key);
            out.push((r.job_key, r.retired));
        }
        out
    }
}

/// `check`'s line for a job whose definition differs from the registered one (the file's
/// `run` would take the job over), if it does.
pub(crate) fn check_problem(
    job: &Job,
    dir: Option<&Path>,
    registered: &[JobRecord],
) -> Option<Problem> {
    let r = registered.iter().find(|r| r.job_key == job.name)?;
    let theirs = r.definition_digest.as_deref()?;
    if r.retired || theirs == digest(job, dir) {
        return None;
    }
    Some(Problem {
        severity: Severity::Warning,
        at: None,
        job: job.name.to_string(),
        what: format!(
            "definition differs from the one registered by {}",
            registered_by(r)
        ),
        why: "the newest registration wins: running this file takes the job over, \
              and a scheduler still running the other definition stops firing it"
            .into(),
    })
}

/// The registry's records of a file's jobs, commands resolved from its folder `cwd`.
pub(crate) fn registry_records(jobs: &[Job], cwd: Option<&Path>) -> Vec<JobRecord> {
    jobs.iter()
        .map(|j| JobRecord {
            job_key: j.name.to_string(),
            settings: j.settings(),
            command_digest: Some(j.command_digest(cwd)),
            definition_digest: Some(digest(j, cwd)),
            keep_runs: j.keep_runs.map(i64::from),
            far_side: j.far_side,
            command: Some(serde_json::to_string(&j.command).unwrap_or_default()),
            // What readers allow past a slot, besides `LATE_OK`, before counting it missed.
            catchup_s: Some(late_allowed_s(j)),
            timeout_ms: j.timeout.map(|t| t.as_millis() as i64),
            observe_timeout_ms: Some(j.observe_timeout.as_millis() as i64),
            dst_repeated: j.schedule.dst().map(|d| d.repeated.name().to_string()),
            dst_skipped: j.schedule.dst().map(|d| d.skipped.name().to_string()),
            ..JobRecord::default()
        })
        .collect()
}

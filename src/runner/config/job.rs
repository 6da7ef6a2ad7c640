//! A valid job of the jobs file, as the runner works with it, and the keys a `[[job]]` table
//! may hold.
use super::problem::resolved_command;
use super::retry::Policy;
use crate::schedule::{jitter_for, Schedule};
use crate::time::{self, Ts};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

pub(crate) use crate::policy::{FarSide, Overlap};

/// A valid job from the file.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub name: crate::JobName,
    pub schedule: Schedule,
    pub lease: Duration,
    pub overlap: Overlap,
    /// Firings missed by up to this much (while no scheduler ran) still run.
    pub catchup: Duration,
    /// A run past this is stopped (outcome `timeout`); None: no limit.
    pub timeout: Option<Duration>,
    /// An observer past this is "can't tell".
    pub observe_timeout: Duration,
    pub command: Vec<String>,
    /// Keep only this many of the job's newest runs (`keep_runs`); None: `retain` decides.
    pub keep_runs: Option<u32>,
    /// Retries, pause after failures, jitter, starting deadline (`retry.rs`).
    pub policy: Policy,
    /// A dead man's switch (`ping`, healthchecks.io's convention): pinged as each run starts
    /// and ends (`run/ping.rs`).
    pub ping: Option<String>,
    /// What the far side does with the effect key or the token (`far_side`): declared, since
    /// it cannot be seen from here; `exactly doctor` reads it. None: not declared.
    pub far_side: Option<FarSide>,
}

/// How long an observer may take when the jobs file does not say (`observe_timeout`).
pub(crate) const OBSERVE_TIMEOUT_DEFAULT: Duration = crate::effect::OBSERVE_TIMEOUT;

impl Job {
    /// Lowercase hex SHA-256 of the command as it runs from the jobs file's folder `dir`
    /// (see [`resolved_command`]).
    pub(crate) fn command_digest(&self, dir: Option<&Path>) -> String {
        command_digest(&resolved_command(&self.command, dir))
    }

    /// When the firing at `slot` is due: its slot, plus its jitter.
    pub(crate) fn due_at(&self, slot: Ts) -> Ts {
        // Most jobs have none: no hash on the scheduler's every tick.
        if self.policy.jitter.is_zero() {
            return slot;
        }
        let j = jitter_for(&self.name, &time::fmt(slot), self.policy.jitter);
        slot + chrono::Duration::from_std(j).unwrap_or(chrono::Duration::zero())
    }

    /// How late after it is due a firing may still start: `starting_deadline`, or the
    /// catch-up window plus the scheduler's own slack (`LATE_OK`).
    pub(crate) fn start_window(&self) -> Duration {
        self.policy
            .starting_deadline
            .unwrap_or(self.catchup + crate::schedule::LATE_OK)
    }

    /// Its settings as the registry keeps them (and `status` shows them).
    pub(crate) fn settings(&self) -> crate::snapshot::JobSettings {
        crate::snapshot::JobSettings {
            schedule: Some(self.schedule.describe()),
            timezone: self.schedule.timezone(),
            interval_s: Some(self.schedule.interval_s()),
            lease_s: Some(self.lease.as_secs() as i64),
            lease_ms: Some(self.lease.as_millis() as i64),
            overlap: Some(self.overlap),
            queue_cap: self.overlap.cap().map(i64::from),
        }
    }
}

pub(crate) fn command_digest(argv: &[String]) -> String {
    let json = serde_json::to_string(argv).unwrap_or_default();
    format!("{:x}", Sha256::digest(json.as_bytes()))
}

/// The keys a `[[job]]` table may hold.
pub(crate) const JOB_KEYS: &[&str] = &[
    "name",
    "schedule",
    "every",
    "timezone",
    "lease",
    "overlap",
    "queue_cap",
    "catchup",
    "timeout",
    "observe_timeout",
    "command",
    "dst_repeated",
    "dst_skipped",
    "keep_runs",
    "retries",
    "retry_backoff",
    "retry_backoff_max",
    "pause_after_failures",
    "jitter",
    "starting_deadline",
    "ping",
    "far_side",
];

/// How late past its slot, besides the scheduler's own `LATE_OK`, a job's firing may still
/// start: its catch-up window, or its starting deadline, plus its jitter, in whole seconds
/// rounded up. The registry keeps it as `catchup_s`, so a reader (`status`, `top`) does not
/// count a firing still waiting out its jitter as missed.
pub(crate) fn late_allowed_s(job: &Job) -> i64 {
    let late = (job.start_window() + job.policy.jitter).saturating_sub(crate::schedule::LATE_OK);
    late.as_millis().div_ceil(1000) as i64
}

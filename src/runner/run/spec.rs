//! What one run is given: the firing it runs, its job's settings as they stood when it fired,
//! and the flag that stops it (see `execute.rs`).
use crate::firing::{self, Started};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything a run needs; it opens its own database connection.
#[derive(Debug, Clone)]
pub(crate) struct RunSpec {
    pub db: String,
    pub job: crate::JobName,
    pub started: Started,
    /// The firing ran before (a resumed firing): an earlier run may have left processes.
    pub resumed: bool,
    /// The job may have open effects: their observers run before the command.
    pub settle: bool,
    pub lease: Duration,
    /// A command running longer is stopped (outcome `timeout`).
    pub timeout: Option<Duration>,
    /// An observer running longer is "can't tell".
    pub observe_timeout: Duration,
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// Set at shutdown once the grace period is over: kill the command.
    pub kill: Arc<AtomicBool>,
    /// When the write that granted the run its lease was sent: its local deadline counts from
    /// here (from its slot, for a run decided ahead of it, whose lease runs from the slot).
    pub granted: Instant,
    /// Decided ahead of its slot: its command starts then, not before (see
    /// `scheduler/batches.rs`). None: at once.
    pub start_at: Option<Instant>,
    /// Set when its job left the jobs file (a reload) while the run waited for its slot: its
    /// command never starts, as if the slot had been decided when due.
    pub withdrawn: Arc<AtomicBool>,
    /// A failed run's retry and its job's pause, recorded with its end (None: neither).
    pub failure: Option<firing::FailureRules>,
    /// The job's dead man's switch (`ping.rs`), pinged as the run starts and ends.
    pub ping: Option<String>,
}

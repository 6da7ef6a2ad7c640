//! The scheduler (`exactly run JOBS.toml`): the jobs file's problems, registering its jobs,
//! and running firings (here for the operator controls in `cli/controls.rs`).
//!
//! A firing is a fact identified by (job, scheduled instant); the firings table's primary key
//! makes a second scheduler, a restart or a second "run now" of the same firing a recorded
//! duplicate instead of a second run. Each run holds the job's lease, renewed by heartbeat,
//! and hands its fencing token to the command, whose effect writes are refused once the token
//! is stale.
pub(crate) mod config;
pub(crate) mod log;
pub(crate) mod notify;
pub(crate) mod run;
pub(crate) mod scheduler;
pub(crate) mod spawn;

pub(crate) use crate::schedule::Schedule;
pub(crate) use config::check::{problems, read_jobs_file};
use config::job::Overlap;

use config::check::canonical_source;
use config::definitions::registry_records;
use run::execute;
use scheduler::liveness;

use crate::firing;
use crate::jobs::{self, JobRecord};
use crate::sanitize::inert;
use crate::{lease, time, Access, Error, Result, Store};
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tracing::Level;

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// The jobs file (TOML, [[job]] tables).
    pub jobs: String,
    /// This scheduler's name in leases and firings (default user@host:pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// On SIGTERM/SIGINT, how long running commands get to finish before they are killed
    /// (SIGHUP reloads the jobs file instead).
    #[arg(long, default_value = "30s", value_name = "DUR")]
    pub grace: String,
    /// A database that keeps failing (unreachable, locked, unwritable) this long stops the
    /// scheduler: its commands get --grace, then it exits 1 for a service manager to restart it.
    /// On PostgreSQL a write waiting this long for a missing synchronous standby gives up too,
    /// saying so (instead of EXACTLY_SYNC_WAIT_MS).
    #[arg(long, default_value = scheduler::GIVE_UP_AFTER_DEFAULT, value_name = "DUR")]
    pub give_up_after: String,
    /// How log lines on stderr are written: text (`TIME LEVEL job=JOB message`) or json (one
    /// object per line: time, level, job, message). RUST_LOG filters them (default info).
    #[arg(
        long,
        value_enum,
        env = log::FORMAT_VAR,
        default_value = "text",
        ignore_case = true,
        value_name = "FORMAT"
    )]
    pub log_format: log::LogFormat,
}

/// The database path as children see it: absolute, since they run in the jobs file's folder.
fn absolute_db(db: &Option<String>) -> String {
    let p = crate::db_path(db.as_deref());
    let path = Path::new(&p);
    if path.is_absolute() || p.contains("://") {
        return p;
    }
    std::env::current_dir()
        .map(|d| d.join(path).to_string_lossy().into_owned())
        .unwrap_or(p)
}

pub(crate) fn run_main(db: &Option<String>, a: RunArgs) -> Result<i32> {
    let grace = time::parse_duration(&a.grace)?;
    let give_up_after = time::parse_duration(&a.give_up_after)?;
    // A write waiting for a missing synchronous standby gives up after the same bound.
    crate::sync_wait_bound(give_up_after, "--give-up-after");
    let (jobs, retain, _, problems) = problems(db, &a.jobs)?;
    let n = problems.iter().filter(|p| p.refuses_run()).count();
    if n > 0 {
        for p in &problems {
            eprintln!("{}", p.line(&a.jobs));
        }
        return Err(Error::Usage(format!(
            "refusing to run {}: {n} problem(s) above (see exactly check)",
            inert(&a.jobs)
        )));
    }
    for p in &problems {
        let level = if p.rejects() {
            Level::WARN
        } else {
            Level::INFO
        };
        log::line(level, &p.job, &format!("{} — {}", p.what, p.why));
    }
    let db_path = absolute_db(db);
    let mut store = crate::open(Some(&db_path), Access::Write)?;
    let (source, cwd) = canonical_source(&a.jobs);
    let owner = a.owner.unwrap_or_else(lease::default_owner);
    let regs = registry_records(&jobs, cwd.as_deref());
    let registered = jobs::register(&mut store, &regs, &source, &owner)?;
    for r in &registered.retired {
        tracing::info!(job = %r, "retired: no longer in {}", inert(&source));
    }
    // SIGTERM and SIGINT stop it gracefully; SIGHUP reloads the jobs file, as daemons do.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())?;
    // Heartbeat (and `retain` pruning) until this function returns: a clean end is recorded.
    let _upkeep = liveness::start(&db_path, &owner, &source, retain)?;
    // The `[[notify]]` rules, evaluated on a thread of their own (`notify/notifier.rs`).
    let notifiers = config::parse::parse(&read_jobs_file(&a.jobs)?).notify;
    notify::notifier::start(&db_path, notifiers, &owner, cwd.clone(), stop.clone());
    scheduler::fire_until_stopped(
        store,
        scheduler::Config {
            db: db_path,
            owner,
            cwd,
            source,
            jobs_path: a.jobs.clone(),
            grace,
            give_up_after,
            outage: _upkeep.outage.clone(),
            alive_since: time::now(),
        },
        jobs,
        &registered.fresh,
        scheduler::Signals { stop, reload },
    )
}

/// The signals that stop a run in the foreground (a hang-up, an SSH session closing, too).
const STOP_SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGHUP,
];

/// A registered, live job, as the controls need it (its registry record, read into settings).
pub(crate) struct LiveJob {
    pub(crate) row: JobRecord,
    pub(crate) overlap: Overlap,
    pub(crate) lease: Duration,
    timeout: Option<Duration>,
    observe_timeout: Duration,
    command: Vec<String>,
    cwd: Option<PathBuf>,
}

pub(crate) fn registered(store: &mut Store, job: &str) -> Result<LiveJob> {
    let Some(row) = jobs::record(store, &crate::JobName::from(job))? else {
        return Err(Error::not_found(
            exactly::Missing::Job,
            format!(
                "no job named {} is registered; `exactly run JOBS.toml` registers the jobs of a \
                 file",
                inert(job)
            ),
        ));
    };
    if row.retired {
        return Err(Error::Usage(format!(
            "job {} is retired: it is no longer in any jobs file",
            inert(job)
        )));
    }
    let overlap = row.settings.overlap;
    let command: Option<Vec<String>> = row
        .command
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok());
    let (Some(overlap), Some(command)) = (overlap, command) else {
        return Err(Error::Usage(format!(
            "job {} has no schedule in the registry; `exactly run JOBS.toml` registers it",
            inert(job)
        )));
    };
    let lease = row
        .settings
        .lease_ms
        .map(|ms| Duration::from_millis(ms.max(100) as u64))
        .or(row
            .settings
            .lease_s
            .map(|s| Duration::from_secs(s.max(1) as u64)))
        .unwrap_or(Duration::from_secs(60))
        // A registry written by an older version may hold any length; leases are at most 100y.
        .min(time::MAX_DURATION);
    let cwd = row
        .source
        .as_deref()
        .and_then(|s| Path::new(s).parent().map(Path::to_path_buf));
    let timeout = row
        .timeout_ms
        .map(|ms| Duration::from_millis(ms.max(100) as u64));
    let observe_timeout = row
        .observe_timeout_ms
        .map(|ms| Duration::from_millis(ms.max(100) as u64))
        .unwrap_or(config::job::OBSERVE_TIMEOUT_DEFAULT);
    Ok(LiveJob {
        row,
        overlap,
        lease,
        timeout,
        observe_timeout,
        command,
        cwd,
    })
}

/// Runs a started firing in the foreground; SIGTERM/SIGINT/SIGHUP kill the command.
pub(crate) fn run_here(
    db: &Option<String>,
    reg: &LiveJob,
    started: firing::Started,
    granted: std::time::Instant,
) -> Result<execute::RunResult> {
    let kill = Arc::new(AtomicBool::new(false));
    for sig in STOP_SIGNALS {
        signal_hook::flag::register(sig, kill.clone())?;
    }
    execute::execute(&run::spec::RunSpec {
        db: absolute_db(db),
        job: crate::JobName::from(reg.row.job_key.clone()),
        started,
        // A manual firing is of a new slot: nothing ran it before.
        resumed: false,
        settle: true,
        lease: reg.lease,
        timeout: reg.timeout,
        observe_timeout: reg.observe_timeout,
        command: reg.command.clone(),
        cwd: reg.cwd.clone(),
        kill,
        granted,
        start_at: None,
        withdrawn: Arc::new(AtomicBool::new(false)),
        // A run in the foreground is run once: no retry, no pause.
        failure: None,
        // The registry does not keep `ping`: a run started by hand pings nothing.
        ping: None,
    })
}

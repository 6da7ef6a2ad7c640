//! The scheduler (`exactly run JOBS.toml`): the jobs file's problems, registering its jobs,
//! and running firings (here for the operator controls in `cli/controls.rs`).
//!
//! A firing is a fact identified by (job, scheduled instant); the firings table's primary key
//! makes a second scheduler, a restart or a second "run now" of the same firing a recorded
//! duplicate instead of a second run. Each run holds the job's lease, renewed by heartbeat,
//! and hands its fencing token to the command, whose effect writes are refused once the token
//! is stale.
pub mod clock;
pub mod config;
pub mod definitions;
pub mod dst;
pub mod execute;
mod health;
mod hold;
mod lend;
pub mod liveness;
pub mod log;
mod missed;
pub mod notify;
pub mod notify_config;
mod notify_send;
mod output;
pub mod ping;
pub mod policy;
pub mod positions;
pub mod problems;
pub mod procs;
mod reload;
mod renewer;
pub mod scheduler;
mod share;
pub mod spawn;
pub mod spawner;
mod supervise;
pub mod watch;
pub mod watchdog;

pub use crate::schedule::Schedule;
pub use config::{Job, Overlap, Problem, Severity};

use crate::firing;
use crate::jobs::{self, JobRecord};
use crate::sanitize::inert;
use crate::{lease, time, Access, Error, Result, Store};
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tracing::Level;

#[derive(Args, Debug)]
pub struct RunArgs {
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
    #[arg(long, default_value = health::GIVE_UP_AFTER_DEFAULT, value_name = "DUR")]
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
pub(crate) fn read_jobs_file(path: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("cannot read jobs file {}: {e}", inert(path))))
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

/// Run-time history per job from the database, for the lint.
fn history(store: &mut Store, jobs: &[Job]) -> Result<BTreeMap<String, config::History>> {
    let mut out = BTreeMap::new();
    for j in jobs {
        let d = jobs::run_durations(store, &j.name)?;
        if d.is_empty() {
            continue;
        }
        let (_, p99) = time::percentiles(&d);
        out.insert(
            j.name.to_string(),
            config::History {
                runs: d.len() as u64,
                p99_ms: p99,
            },
        );
    }
    Ok(out)
}

/// The same command (as resolved from each file's folder) registered under another name by
/// another jobs file.
fn registry_duplicates(
    registered: &[JobRecord],
    jobs: &[Job],
    source: &str,
    dir: Option<&Path>,
) -> Vec<Problem> {
    let mut out = Vec::new();
    for j in jobs {
        let digest = j.command_digest(dir);
        for r in registered {
            if r.retired
                || r.job_key == j.name
                || r.source.as_deref() == Some(source)
                || r.command_digest.as_deref() != Some(digest.as_str())
            {
                continue;
            }
            out.push(Problem {
                severity: Severity::Warning,
                at: None,
                job: j.name.to_string(),
                what: format!(
                    "same command as job {:?} of {}",
                    r.job_key,
                    r.source.as_deref().unwrap_or("another file")
                ),
                why: "one action registered under two names fires twice; \
                      the commonest duplicate and the hardest to see"
                    .into(),
            });
        }
    }
    out
}

fn canonical_source(path: &str) -> (String, Option<PathBuf>) {
    match std::fs::canonicalize(path) {
        Ok(p) => (
            p.to_string_lossy().into_owned(),
            p.parent().map(Path::to_path_buf),
        ),
        Err(_) => (path.to_string(), None),
    }
}

/// A jobs file as `check` sees it: its valid jobs, `retain`, the number of its `[[notify]]`
/// tables, and its problems.
pub(crate) type Checked = (Vec<Job>, Option<Duration>, usize, Vec<Problem>);

/// Everything `check` says about a file: its parse problems, then the lint of its valid jobs
/// with the history and registry of the database if one exists (`check` never creates one).
/// `run` refuses the file on exactly these lines, so the two never disagree. Also the number of
/// its `[[notify]]` tables (a file of those alone is `watch`'s, and `check` passes it).
pub(crate) fn problems(db: &Option<String>, path: &str) -> Result<Checked> {
    let text = read_jobs_file(path)?;
    let mut loaded = config::parse(&text);
    let mut problems = std::mem::take(&mut loaded.problems);
    let db_path = crate::db_path(db.as_deref());
    let mut hist = BTreeMap::new();
    let (source, dir) = canonical_source(path);
    if crate::db_exists(&db_path)? {
        let mut store = crate::open(Some(&db_path), Access::Write)?;
        hist = history(&mut store, &loaded.jobs)?;
        let registered = jobs::records(&mut store)?;
        let dir = dir.as_deref();
        problems.extend(registry_duplicates(&registered, &loaded.jobs, &source, dir));
        let differs = |j| definitions::check_problem(j, dir, &registered);
        problems.extend(loaded.jobs.iter().filter_map(differs));
    }
    problems.extend(config::lint(&loaded.jobs, &hist, dir.as_deref()));
    loaded.place(&mut problems);
    Ok((loaded.jobs, loaded.retain, loaded.notify.len(), problems))
}

pub fn run_main(db: &Option<String>, a: RunArgs) -> Result<i32> {
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
    // The `[[notify]]` rules, evaluated on a thread of their own (`notify.rs`).
    let notifiers = config::parse(&read_jobs_file(&a.jobs)?).notify;
    notify::start(&db_path, notifiers, &owner, cwd.clone(), stop.clone());
    scheduler::run(
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
        },
        jobs,
        &registered.fresh,
        scheduler::Signals { stop, reload },
    )
}

impl Job {
    /// Its settings as the registry keeps them (and `status` shows them).
    pub fn settings(&self) -> crate::snapshot::JobSettings {
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

/// The registry's records of a file's jobs, commands resolved from its folder `cwd`.
fn registry_records(jobs: &[Job], cwd: Option<&Path>) -> Vec<JobRecord> {
    jobs.iter()
        .map(|j| JobRecord {
            job_key: j.name.to_string(),
            settings: j.settings(),
            command_digest: Some(j.command_digest(cwd)),
            definition_digest: Some(definitions::digest(j, cwd)),
            keep_runs: j.keep_runs.map(i64::from),
            far_side: j.far_side,
            command: Some(serde_json::to_string(&j.command).unwrap_or_default()),
            // What readers allow past a slot, besides `LATE_OK`, before counting it missed.
            catchup_s: Some(policy::late_allowed_s(j)),
            timeout_ms: j.timeout.map(|t| t.as_millis() as i64),
            observe_timeout_ms: Some(j.observe_timeout.as_millis() as i64),
            dst_repeated: j.schedule.dst().map(|d| d.repeated.name().to_string()),
            dst_skipped: j.schedule.dst().map(|d| d.skipped.name().to_string()),
            ..JobRecord::default()
        })
        .collect()
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
        return Err(Error::Usage(format!(
            "no job named {} is registered; `exactly run JOBS.toml` registers the jobs of a file",
            inert(job)
        )));
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
        .unwrap_or(config::OBSERVE_TIMEOUT_DEFAULT);
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
    execute::execute(&execute::RunSpec {
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
        // A run in the foreground is run once: no retry, no pause.
        failure: None,
        // The registry does not keep `ping`: a run started by hand pings nothing.
        ping: None,
    })
}

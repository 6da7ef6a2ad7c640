//! The scheduler (`exactly run JOBS.toml`), its linter (`exactly check`) and the operator
//! controls (`trigger`, `pause`, `resume`, `backfill`).
//!
//! A firing is a fact identified by (job, scheduled instant); the firings table's primary key
//! makes a second scheduler, a restart or a second "run now" of the same firing a recorded
//! duplicate instead of a second run. Each run holds the job's lease, renewed by heartbeat,
//! and hands its fencing token to the command, whose effect writes are refused once the token
//! is stale.
pub mod config;
pub mod execute;
pub mod liveness;
pub mod procs;
pub mod schedule;
pub mod scheduler;

pub use config::{Job, Overlap, Problem, Severity};
pub use schedule::Schedule;

use crate::sanitize::inert;
use crate::state::RunOutcome;
use crate::store::{FireRequest, Fired, JobReg, RegisteredJob, Store};
use crate::{lease, time, Error, Result};
use clap::Args;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The jobs file (TOML, [[job]] tables).
    pub jobs: String,
    /// This scheduler's name in leases and firings (default user@host:pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// On SIGTERM/SIGINT/SIGHUP, how long running commands get to finish before they are killed.
    #[arg(long, default_value = "30s", value_name = "DUR")]
    pub grace: String,
}
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The jobs file to lint.
    pub jobs: String,
    /// Exit 1 for warnings too (errors always exit 1).
    #[arg(long)]
    pub strict: bool,
    /// Print the problems as one JSON object.
    #[arg(long)]
    pub json: bool,
}
#[derive(Args, Debug)]
pub struct TriggerArgs {
    /// The registered job to fire now.
    #[arg(value_parser = lease::job_name)]
    pub job: String,
    /// Who fires it, in leases and firings (default user@host:pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}
#[derive(Args, Debug)]
pub struct PauseArgs {
    /// The registered job to pause.
    #[arg(value_parser = lease::job_name)]
    pub job: String,
    /// Why, shown with the job until it is resumed.
    #[arg(long)]
    pub note: Option<String>,
}
#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The paused job to resume.
    #[arg(value_parser = lease::job_name)]
    pub job: String,
}
#[derive(Args, Debug)]
pub struct BackfillArgs {
    /// The registered job whose past slots to fire.
    #[arg(value_parser = lease::job_name)]
    pub job: String,
    /// First slot (RFC 3339 instant), inclusive.
    #[arg(long)]
    pub from: String,
    /// Last slot (RFC 3339 instant), inclusive.
    #[arg(long)]
    pub to: String,
    /// Who fires them, in leases and firings (default user@host:pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// Print the result as one JSON object (one entry per slot).
    #[arg(long)]
    pub json: bool,
}

/// Most slots one backfill may fire.
const BACKFILL_MAX: u64 = 1000;

fn read_jobs_file(path: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("cannot read jobs file {}: {e}", inert(path))))
}

/// The database path as children see it: absolute, since they run in the jobs file's folder.
fn absolute_db(db: &Option<String>) -> String {
    let p = crate::store::default_path(db.as_deref());
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
        let d = store.run_durations(&j.name)?;
        if d.is_empty() {
            continue;
        }
        let (_, p99) = crate::metrics::percentiles(&d);
        out.insert(
            j.name.clone(),
            config::History {
                runs: d.len() as u64,
                p99_ms: p99,
            },
        );
    }
    Ok(out)
}

/// The same command registered under another name by another jobs file.
fn registry_duplicates(store: &mut Store, jobs: &[Job], source: &str) -> Result<Vec<Problem>> {
    let registered = store.registered_jobs()?;
    let mut out = Vec::new();
    for j in jobs {
        let digest = j.command_digest();
        for r in &registered {
            if r.retired
                || r.job_key == j.name
                || r.source.as_deref() == Some(source)
                || r.command_digest.as_deref() != Some(digest.as_str())
            {
                continue;
            }
            out.push(Problem {
                severity: Severity::Warning,
                job: j.name.clone(),
                what: format!(
                    "same command as job {:?} of {}",
                    r.job_key,
                    r.source.as_deref().unwrap_or("another file")
                ),
                why: "one action registered under two names fires twice; the commonest duplicate and the hardest to see".into(),
            });
        }
    }
    Ok(out)
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

/// Everything `check` says about a file: its parse problems, then the lint of its valid jobs
/// with the history and registry of the database if one exists (`check` never creates one).
/// `run` refuses the file on exactly these lines, so the two never disagree.
fn problems(db: &Option<String>, path: &str) -> Result<(Vec<Job>, Option<Duration>, Vec<Problem>)> {
    let text = read_jobs_file(path)?;
    let mut loaded = config::parse(&text);
    let mut problems = std::mem::take(&mut loaded.problems);
    let db_path = crate::store::default_path(db.as_deref());
    let mut hist = BTreeMap::new();
    if Path::new(&db_path).exists() {
        let mut store = Store::open(&db_path)?;
        hist = history(&mut store, &loaded.jobs)?;
        let (source, _) = canonical_source(path);
        problems.extend(registry_duplicates(&mut store, &loaded.jobs, &source)?);
    }
    problems.extend(config::lint(&loaded.jobs, &hist));
    Ok((loaded.jobs, loaded.retain, problems))
}

pub fn check_main(db: &Option<String>, a: CheckArgs) -> Result<i32> {
    let (jobs, _, problems) = problems(db, &a.jobs)?;
    let count = |s: &str| problems.iter().filter(|p| p.kind() == s).count();
    let (errors, warnings, notes) = (count("error"), count("warning"), count("note"));
    // Errors fail the check (and `run` refuses them); warnings (risks read from the history of
    // runs, which `run` logs and runs) only with --strict; notes never.
    let code = i32::from(errors > 0 || (a.strict && warnings > 0));
    if a.json {
        let v = serde_json::json!({
            "file": a.jobs,
            "jobs": jobs.len(),
            "errors": errors,
            "warnings": warnings,
            "notes": notes,
            "strict": a.strict,
            "ok": code == 0,
            "problems": problems.iter().map(|p| serde_json::json!({
                "severity": p.kind(),
                "job": p.job,
                "what": p.what,
                "why": p.why,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(code);
    }
    for p in &problems {
        println!("{}", p.line(&a.jobs));
    }
    if code != 0 {
        return Ok(code);
    }
    if warnings > 0 {
        println!(
            "{}: ok with {warnings} warning(s) ({} jobs; --strict fails on warnings)",
            inert(&a.jobs),
            jobs.len()
        );
    } else {
        println!("{}: ok ({} jobs)", inert(&a.jobs), jobs.len());
    }
    Ok(0)
}

pub fn run_main(db: &Option<String>, a: RunArgs) -> Result<i32> {
    let grace = time::parse_duration(&a.grace)?;
    let (jobs, retain, problems) = problems(db, &a.jobs)?;
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
        let level = if p.rejects() { "WARN" } else { "INFO" };
        execute::log_line(level, &p.job, &format!("{} — {}", p.what, p.why));
    }
    let db_path = absolute_db(db);
    let mut store = Store::open(&db_path)?;
    let (source, cwd) = canonical_source(&a.jobs);
    let owner = a.owner.unwrap_or_else(lease::default_owner);
    let regs: Vec<JobReg> = jobs
        .iter()
        .map(|j| JobReg {
            job_key: j.name.clone(),
            schedule: j.schedule.describe(),
            timezone: j.schedule.timezone(),
            interval_s: j.schedule.interval_s(),
            lease_s: j.lease.as_secs() as i64,
            lease_ms: j.lease.as_millis() as i64,
            overlap: j.overlap.name().to_string(),
            queue_cap: j.overlap.cap().map(i64::from),
            command_digest: j.command_digest(),
            command: serde_json::to_string(&j.command).unwrap_or_default(),
            catchup_s: j.catchup.as_secs() as i64,
            timeout_ms: j.timeout.map(|t| t.as_millis() as i64),
            observe_timeout_ms: j.observe_timeout.as_millis() as i64,
        })
        .collect();
    let registered = store.register_jobs(&regs, &source, &owner)?;
    for r in &registered.retired {
        execute::log_line(
            "INFO",
            r,
            &format!("retired: no longer in {}", inert(&source)),
        );
    }
    // A hang-up (an SSH session closing) stops it as gracefully as SIGTERM does.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in STOP_SIGNALS {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    // Heartbeat (and `retain` pruning) until this function returns: a clean end is recorded.
    let _upkeep = liveness::start(&db_path, &owner, &source, retain)?;
    scheduler::run(
        store,
        scheduler::Config {
            db: db_path,
            owner,
            cwd,
            grace,
        },
        jobs,
        &registered.fresh,
        stop,
    )
}

/// The signals that stop a scheduler (or a run in the foreground) gracefully.
const STOP_SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGHUP,
];

/// A registered, live job, as the controls need it.
struct Registered {
    row: RegisteredJob,
    overlap: Overlap,
    lease: Duration,
    timeout: Option<Duration>,
    observe_timeout: Duration,
    command: Vec<String>,
    cwd: Option<PathBuf>,
}

fn registered(store: &mut Store, job: &str) -> Result<Registered> {
    let Some(row) = store.registered_job(job)? else {
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
    let overlap = row
        .overlap
        .as_deref()
        .and_then(|o| Overlap::from_registry(o, row.queue_cap));
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
        .lease_ms
        .map(|ms| Duration::from_millis(ms.max(100) as u64))
        .or(row.lease_s.map(|s| Duration::from_secs(s.max(1) as u64)))
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
    Ok(Registered {
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
fn run_here(
    db: &Option<String>,
    reg: &Registered,
    started: crate::store::Started,
) -> Result<execute::RunResult> {
    let kill = Arc::new(AtomicBool::new(false));
    for sig in STOP_SIGNALS {
        signal_hook::flag::register(sig, kill.clone())?;
    }
    execute::execute(&execute::RunSpec {
        db: absolute_db(db),
        job: reg.row.job_key.clone(),
        started,
        // A manual firing is of a new slot: nothing ran it before.
        resumed: false,
        lease: reg.lease,
        timeout: reg.timeout,
        observe_timeout: reg.observe_timeout,
        command: reg.command.clone(),
        cwd: reg.cwd.clone(),
        kill,
    })
}

fn effects_line(store: &mut Store, job: &str, token: i64) -> Result<String> {
    let c = store.run_effect_counts(job, token)?;
    Ok(format!(
        "effects: {} done, {} already done (suppressed), {} unknown, {} fenced writes",
        c.done, c.suppressed, c.unknown, c.fenced
    ))
}

/// A run's result and its effects as JSON, for `trigger --json` and `backfill --json`.
fn run_json(
    store: &mut Store,
    job: &str,
    token: i64,
    run_id: &str,
    r: &execute::RunResult,
) -> Result<serde_json::Value> {
    let c = store.run_effect_counts(job, token)?;
    Ok(serde_json::json!({
        "run_id": run_id, "token": token, "outcome": r.outcome, "exit_code": r.exit_code,
        "duration_ms": r.duration_ms,
        "effects": {"done": c.done, "suppressed": c.suppressed, "unknown": c.unknown,
                    "fenced_writes": c.fenced},
    }))
}

/// `exactly trigger JOB`: its own firing, now, under the lease and the overlap policy. Exit 0
/// when it ran ok or was queued, 1 when the run failed, 3 when it was not started (coalesced,
/// queue full, missed, paused).
pub fn trigger_main(db: &Option<String>, a: TriggerArgs) -> Result<i32> {
    let mut store = crate::cli::open(db)?;
    let reg = registered(&mut store, &a.job)?;
    let owner = a.owner.unwrap_or_else(lease::default_owner);
    let now = time::now();
    let slot = time::fmt(now);
    let until = time::fmt(time::add(now, reg.lease));
    let fired = store.fire(&FireRequest {
        job: &a.job,
        slot: &slot,
        kind: "manual",
        owner: &owner,
        lease_until: &until,
        now: &slot,
        overlap: reg.overlap,
        backfill: false,
        live_here: false,
    })?;
    let job = inert(&a.job);
    use serde_json::json;
    let (code, text, v) = match fired {
        Fired::Started(st) => {
            let token = st.token;
            let run_id = st.run_id.clone();
            if !a.json {
                println!(
                    "started: manual firing of {job} at {slot}, run {} (token {token})",
                    inert(&run_id)
                );
            }
            let r = run_here(db, &reg, st)?;
            let text = format!(
                "{}: in {}{}; {}",
                r.outcome,
                time::human_ms(r.duration_ms as u64),
                r.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default(),
                effects_line(&mut store, &a.job, token)?
            );
            let mut v = json!({"result": "started"});
            v["run"] = run_json(&mut store, &a.job, token, &run_id, &r)?;
            (if r.outcome == RunOutcome::Ok { 0 } else { 1 }, text, v)
        }
        Fired::Queued { depth, cap } => (
            0,
            format!("queued: a run of {job} is live; this firing waits ({depth} of {cap}) for a scheduler to start it"),
            json!({"result": "queued", "depth": depth, "cap": cap}),
        ),
        Fired::Coalesced { holder, token } => (
            3,
            format!("coalesced: a run of {job} is live ({}, token {token}); overlap = coalesce drops this firing", inert(&holder)),
            json!({"result": "coalesced", "holder": holder, "token": token}),
        ),
        Fired::Saturated { cap } => (
            3,
            format!("refused: the queue of {job} is full ({cap} waiting); recorded as saturation"),
            json!({"result": "saturated", "cap": cap}),
        ),
        Fired::Missed { holder, token } => (
            3,
            format!("refused: a run of {job} is live ({}, token {token}) and overlap = fail; recorded as a missed firing", inert(&holder)),
            json!({"result": "missed", "holder": holder, "token": token}),
        ),
        Fired::Skipped { note, by } => (
            3,
            format!(
                "skipped: {job} is paused by {}{}",
                inert(by.as_deref().unwrap_or("someone")),
                note.as_deref().map(|n| format!(": {}", inert(n))).unwrap_or_default()
            ),
            json!({"result": "skipped", "paused_by": by, "note": note}),
        ),
        Fired::Duplicate { state, .. } => (
            3,
            format!(
                "duplicate: this firing of {job} at {slot} was already {}",
                inert(state.as_str())
            ),
            json!({"result": "duplicate", "state": state}),
        ),
        Fired::Busy { holder, .. } => (
            3,
            format!("refused by lease: held by {}", inert(&holder)),
            json!({"result": "busy", "holder": holder}),
        ),
    };
    if a.json {
        let mut v = v;
        v["job"] = json!(a.job);
        v["slot"] = json!(slot);
        v["exit"] = json!(code);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("{text}");
    }
    Ok(code)
}

pub fn pause_main(db: &Option<String>, a: PauseArgs) -> Result<i32> {
    let mut store = crate::cli::open(db)?;
    registered(&mut store, &a.job)?;
    let by = crate::actor();
    if store.set_paused(&a.job, true, &by, a.note.as_deref())? {
        println!("paused {} by {}", inert(&a.job), inert(&by));
    } else {
        println!("{} was already paused", inert(&a.job));
    }
    Ok(0)
}

pub fn resume_main(db: &Option<String>, a: ResumeArgs) -> Result<i32> {
    let mut store = crate::cli::open(db)?;
    registered(&mut store, &a.job)?;
    let by = crate::actor();
    if store.set_paused(&a.job, false, &by, None)? {
        println!("resumed {} by {}", inert(&a.job), inert(&by));
    } else {
        println!("{} was not paused", inert(&a.job));
    }
    Ok(0)
}

/// `exactly backfill JOB --from T --to T`: fires the job's slots in the range, one after the
/// other, each waiting for the lease. A slot that already ran is a duplicate and is not run
/// again; a run's effects that are already done are suppressed by their keys.
pub fn backfill_main(db: &Option<String>, a: BackfillArgs) -> Result<i32> {
    let parse = |s: &str, what: &str| {
        time::parse(s).ok_or_else(|| {
            Error::Usage(format!(
                "--{what} {} is not an instant (use e.g. 2026-03-01T07:00:00Z)",
                inert(s)
            ))
        })
    };
    let from = parse(&a.from, "from")?;
    let to = parse(&a.to, "to")?;
    if to < from {
        return Err(Error::Usage("--to is before --from".into()));
    }
    if to > time::now() {
        return Err(Error::Usage(
            "--to is in the future; backfill fires past slots only".into(),
        ));
    }
    let mut store = crate::cli::open(db)?;
    let reg = registered(&mut store, &a.job)?;
    let schedule = Schedule::from_registry(
        reg.row.schedule.as_deref().unwrap_or(""),
        reg.row.timezone.as_deref(),
    )
    .map_err(Error::Usage)?;
    let before = from - chrono::Duration::milliseconds(1);
    let (slots, total) = schedule.slots(before, to, BACKFILL_MAX as usize);
    if total > BACKFILL_MAX {
        return Err(Error::Usage(format!(
            "the range holds {total} slots, more than {BACKFILL_MAX}; narrow --from/--to"
        )));
    }
    // Each slot's result: printed as it comes, or gathered into one JSON object.
    let mut report: Vec<serde_json::Value> = Vec::new();
    let finish = |report: Vec<serde_json::Value>, code: i32| -> Result<i32> {
        if a.json {
            let v = serde_json::json!({
                "job": a.job, "from": time::fmt(from), "to": time::fmt(to),
                "slots": report, "exit": code,
            });
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        }
        Ok(code)
    };
    let say = |text: String| {
        if !a.json {
            println!("{text}");
        }
    };
    if slots.is_empty() {
        say(format!(
            "no slots of {} between {} and {}",
            inert(&a.job),
            time::fmt(from),
            time::fmt(to)
        ));
        return finish(report, 0);
    }
    let owner = a.owner.unwrap_or_else(lease::default_owner);
    let mut failed = false;
    for slot in slots {
        let slot_text = time::fmt(slot);
        let waited_since = Instant::now();
        let max_wait = reg.lease * 3 + Duration::from_secs(10);
        loop {
            let now = time::now();
            let fired = store.fire(&FireRequest {
                job: &a.job,
                slot: &slot_text,
                kind: "backfill",
                owner: &owner,
                lease_until: &time::fmt(time::add(now, reg.lease)),
                now: &time::fmt(now),
                overlap: reg.overlap,
                backfill: true,
                live_here: false,
            })?;
            match fired {
                Fired::Started(s) => {
                    let token = s.token;
                    let run_id = s.run_id.clone();
                    let r = run_here(db, &reg, s)?;
                    say(format!(
                        "{slot_text}: ran, {} in {}; {}",
                        r.outcome,
                        time::human_ms(r.duration_ms as u64),
                        effects_line(&mut store, &a.job, token)?
                    ));
                    let run = run_json(&mut store, &a.job, token, &run_id, &r)?;
                    report
                        .push(serde_json::json!({"slot": slot_text, "result": "ran", "run": run}));
                    failed |= r.outcome != RunOutcome::Ok;
                }
                Fired::Duplicate { state, .. } => {
                    say(format!(
                        "{slot_text}: already {} — duplicate firing, not run again",
                        inert(state.as_str())
                    ));
                    report.push(serde_json::json!({"slot": slot_text, "result": "duplicate", "state": state}));
                }
                Fired::Skipped { .. } => {
                    say(format!("{slot_text}: skipped, {} is paused", inert(&a.job)));
                    report.push(serde_json::json!({"slot": slot_text, "result": "skipped"}));
                }
                Fired::Busy { holder, until } => {
                    if waited_since.elapsed() < max_wait {
                        std::thread::sleep(Duration::from_millis(200));
                        continue;
                    }
                    say(format!(
                        "{slot_text}: refused by lease: held by {} until {}; stopping",
                        inert(&holder),
                        inert(&until)
                    ));
                    report.push(serde_json::json!({"slot": slot_text, "result": "busy", "holder": holder, "until": until}));
                    return finish(report, 3);
                }
                // A backfill waits for the lease instead of applying the overlap policy.
                other => {
                    say(format!("{slot_text}: {other:?}"));
                    report.push(
                        serde_json::json!({"slot": slot_text, "result": format!("{other:?}")}),
                    );
                }
            }
            break;
        }
    }
    finish(report, if failed { 1 } else { 0 })
}

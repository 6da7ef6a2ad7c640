//! The kill-mid-effect harness (`exactly chaos`): real `exactly effect` processes send effects to
//! a far side that records every arrival; the harness kills them at named fault points and at
//! random moments, restarts them without clearing the ledger, and counts what the far side got.
//! The number that matters is duplicate effects observed, which must be zero.
//!
//! Rooms: the command line and the run (`mod.rs`), the shared machinery (`harness.rs`), what
//! was observed and the report (`tally.rs`), the scenarios (`scenarios.rs`, `concurrent.rs`,
//! `sched.rs`, `senders.rs` for a sender's process and host faults, and `escape.rs` for commands
//! that outlive what supervises them), the far side, and the children (`proc.rs`).
mod ahead;
mod clock_step;
mod concurrent;
mod escape;
mod failover;
mod far_client;
pub(crate) mod far_side;
mod freeze;
mod harness;
mod machine;
mod mcp;
mod mcp_far;
mod pg_pair;
mod proc;
pub(crate) mod proxy;
mod python;
mod runs;
mod scenarios;
mod sched;
mod senders;
mod tally;

pub(crate) use harness::sh_quote;
pub(crate) use harness::{skew_clock, Client, Eff, Harness, How};
pub(crate) use tally::Tally;
use tally::{table, Report};

use crate::snapshot::Snapshot;
use crate::{Error, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Every scenario, in the order they run.
pub(crate) const SCENARIOS: &[&str] = &[
    "kill-mid-effect",
    "deploy-restart",
    "blue-green",
    "overrun",
    "lost-response",
    "duplicate-registration",
    "slow-observer",
    "concurrent-retry",
    "cross-host",
    "clock-skew",
    "approval-race",
    "grandchild",
    "other-user",
    "watcher-stall",
    "takeover-skew",
    "host-clash",
    "pid-reuse",
    "pause",
    "timeout-escape",
    "setsid-escape",
    "watchdog-stop",
    "watchdog-kill",
    "spawner-freeze",
    "hidepid",
    "observer-escape",
    "run-end-lost",
    "frozen-scheduler",
    "overload",
    "clock-step",
    "decide-ahead",
    "python",
    "mcp",
    "failover",
];

#[derive(Args, Debug)]
pub(crate) struct ChaosArgs {
    /// Iterations of each scenario.
    #[arg(long, default_value_t = 100)]
    pub iterations: u32,
    /// One object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run only these scenarios (repeatable; default all). The sender faults: `grandchild` (the
    /// send runs in a child of the script), `other-user` (sender and retry of other users; root),
    /// `watcher-stall` (the lease watch paused or its server stalled), `takeover-skew` (skewed
    /// clocks, a send in the TERM grace), `host-clash` (two machines, one EXACTLY_HOST; root),
    /// `pid-reuse` (a dead sender's pid taken; root), `pause` (the whole sender paused; stopped
    /// only by the far side's dedupe or fencing). The escapes, each checked by the commands' own
    /// stamps against their lease's deadline: `timeout-escape` and `setsid-escape` (the send
    /// leaves the command's group through `timeout` or `setsid`; `exactly effect` SIGKILLed),
    /// `watchdog-stop` (watchdog and `exactly effect` SIGSTOPped, another host takes over: a
    /// double fault, see `--fence`), `watchdog-kill` (both SIGKILLed; a retry on the host, or
    /// another host: a double fault), `spawner-freeze` (the scheduler's spawner SIGSTOPped while
    /// a command with a `timeout` and `retries` ends), `hidepid` (a retry that cannot see the
    /// sender's /proc; root), `observer-escape` (an observer's child holding its stdout).
    /// The scheduler's faults: `run-end-lost` (a run's
    /// end unrecordable: its database folder read-only, or its server cut off; root for
    /// SQLite), `frozen-scheduler` (SIGSTOP past the lease, two spellings of one database),
    /// `overload` (two schedulers, more jobs than the machine runs), `clock-step` (the wall
    /// clock stepped back and forward), `decide-ahead` (the scheduler SIGKILLed between
    /// deciding a slot ahead of it and the slot). `python`: the senders are Python processes
    /// using the module (python/; `$EXACTLY_CHAOS_PYTHON`, else python3; not run
    /// where the module is not installed). `mcp`: an MCP client calls through `exactly mcp`,
    /// whose gateway or server is SIGKILLed mid-call, then calls again through a new gateway.
    /// `failover`: two local PostgreSQL servers (a primary
    /// and its asynchronous standby, `initdb` and `pg_basebackup`), the primary SIGKILLed while
    /// its WAL stream is held back, the standby promoted, the lost range run again; unguarded,
    /// the failover guard is off (`EXACTLY_FAILOVER_GUARD=off`).
    #[arg(
        long = "scenario",
        value_name = "NAME",
        num_args = 1..,
        value_parser = clap::builder::PossibleValuesParser::new(SCENARIOS)
    )]
    pub scenarios: Vec<String>,
    /// Seed for kill moments and variants, to replay a run.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Self-check: send without the ledger's guard (no `exactly effect`), retrying naively.
    /// Must report duplicates, or the harness cannot see them.
    #[arg(long)]
    pub unguarded: bool,
    /// In the double faults (`watchdog-stop`, `watchdog-kill` taken over by another host) the far
    /// side refuses stale fencing tokens: their duplicates must then be 0. Without it they are
    /// counted apart (`double_faults`), never as the run's duplicates.
    #[arg(long)]
    pub fence: bool,
    /// Every sender, retry and scheduler starts in a mount namespace of its own where the
    /// cgroup filesystems are read-only: the fallback where no cgroup can be made (root; every
    /// scenario is not run without it).
    #[arg(long)]
    pub no_cgroup: bool,
    /// Keep the work directory (database, far-side socket) for inspection.
    #[arg(long)]
    pub keep: bool,
}

/// The work directory: `$TMPDIR/exactly-chaos-<pid>-<nanos>`, removed at the end unless kept.
fn work_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("exactly-chaos-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| {
        Error::io(
            format!("cannot create the work directory {}: {e}", dir.display()),
            e,
        )
    })?;
    Ok(dir)
}

pub(crate) fn chaos_main(db: &Option<String>, a: ChaosArgs) -> Result<i32> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::io(format!("cannot find the exactly binary: {e}"), e))?;
    let dir = work_dir()?;
    let result = run_all(&exe, &dir, db, &a);
    if !a.keep && db.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else if !a.keep {
        let _ = std::fs::remove_file(dir.join("far.sock"));
        let _ = std::fs::remove_dir(&dir);
    }
    let report = result?;
    record(db, &report);
    if a.json {
        let v = serde_json::to_value(&report)
            .map_err(|e| Error::Store(format!("cannot write the report: {e}")))?;
        println!("{}", crate::json::render(v));
    } else {
        print!("{}", table(&report, &a));
        if a.keep {
            println!("work directory kept: {}", dir.display());
        }
    }
    Ok(if report.ok { 0 } else { 1 })
}

/// Records the run in the database the user names (`--db`, `$EXACTLY_DB`, else the default one
/// if it exists), for `exactly doctor`'s kill-test rule. Best effort: a database that cannot
/// take the record is said on stderr, and the run's report stands. An unguarded run (the
/// guard switched off on purpose) is not the user's kill test and is not recorded.
fn record(db: &Option<String>, report: &Report) {
    if !report.guarded {
        return;
    }
    let target = crate::db_path(db.as_deref());
    if db.is_none() && !crate::db_exists(&target).unwrap_or(false) {
        return;
    }
    let run = crate::checklist::KillTestRun {
        scenarios: report
            .scenarios
            .keys()
            .filter(|k| !report.not_run.contains_key(*k))
            .cloned()
            .collect(),
        iterations: report.iterations_per_scenario,
        duplicates: report.total.duplicate_effects,
        lost: report.total.lost_effects,
        passed: report.ok,
    };
    let recorded = crate::open(Some(&target), crate::Access::Write)
        .and_then(|mut store| crate::checklist::record_kill_test(&mut store, &run));
    if let Err(e) = recorded {
        eprintln!(
            "exactly chaos: the run was not recorded in {}: {}",
            crate::sanitize::inert(&crate::shown_db(&target)),
            crate::sanitize::inert(&e.to_string())
        );
    }
}

fn run_all(exe: &Path, dir: &Path, db: &Option<String>, a: &ChaosArgs) -> Result<Report> {
    let db_path = match db {
        Some(d) => d.clone(),
        None => dir.join("chaos.db").display().to_string(),
    };
    let seed = a.seed.unwrap_or_else(|| rand::thread_rng().gen());
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let no_cgroup_missing = (a.no_cgroup && !root)
        .then(|| "--no-cgroup needs root (a mount namespace of its own)".to_string());
    if a.no_cgroup && root {
        let mounts = proc::cgroup_mounts()?;
        proc::no_cgroup(&mounts)?;
        proc::check_no_cgroup(&mounts)?;
    }
    let store = crate::open(Some(&db_path), crate::Access::Write)?;
    let far = far_side::FarSide::start(exe, &dir.join("far.sock"))?;
    let observe = format!(
        "{} far-side seen --socket {}",
        sh_quote(&exe.display().to_string()),
        sh_quote(&far.socket.display().to_string())
    );
    let mut h = Harness {
        exe: exe.to_path_buf(),
        db: db_path.clone(),
        dir: dir.to_path_buf(),
        store,
        far,
        rng: StdRng::seed_from_u64(seed),
        guarded: !a.unguarded,
        // Keys of this run never collide with an earlier run's in a reused database.
        nonce: format!("{seed:016x}-{}", std::process::id()),
        observe,
        typical_ms: 0.0,
    };
    let names = chosen(a);
    let bar = progress(u64::from(a.iterations) * names.len() as u64);
    let mut per = BTreeMap::new();
    let mut total = Tally::default();
    let started = Instant::now();
    // The bar draws only on a terminal: elsewhere (a log, CI) one line per scenario's start and
    // end on stderr says a long run is alive; stdout stays the report.
    let lines = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let count = names.len();
    for (i, name) in names.into_iter().enumerate() {
        bar.set_message(name.to_string());
        let place = format!("{name} ({}/{count})", i + 1);
        if lines {
            eprintln!("chaos: {place} started");
        }
        let t = run_one(
            &mut h,
            name,
            a,
            no_cgroup_missing.clone(),
            &bar,
            (&place, lines),
        )?;
        total.add(&t);
        per.insert(name.to_string(), t);
    }
    bar.finish_and_clear();
    total.wall_ms = started.elapsed().as_millis() as u64;
    let ok = total.ok() && h.guarded;
    let not_run = per
        .iter()
        .filter_map(|(k, t)| t.not_run.clone().map(|w| (k.clone(), w)))
        .collect();
    Ok(Report {
        not_run,
        iterations_per_scenario: a.iterations,
        seed,
        guarded: h.guarded,
        db: crate::shown_db(&db_path),
        ok,
        total,
        scenarios: per,
    })
}

/// The scenarios `--scenario` names, in the harness's order (all when it names none).
fn chosen(a: &ChaosArgs) -> Vec<&'static str> {
    if a.scenarios.is_empty() {
        SCENARIOS.to_vec()
    } else {
        SCENARIOS
            .iter()
            .copied()
            .filter(|s| a.scenarios.iter().any(|x| x == s))
            .collect()
    }
}

/// The progress bar over every iteration of every scenario (drawn on a terminal only).
fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {msg:24} [{bar:30}] {pos}/{len} {elapsed}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// One scenario's iterations, its audit and its counters' moves, as its tally; `not_run` says
/// why it cannot run here. Off a terminal, its end is one line on stderr (`place`, `lines`).
fn run_one(
    h: &mut Harness,
    name: &str,
    a: &ChaosArgs,
    not_run: Option<String>,
    bar: &ProgressBar,
    (place, lines): (&str, bool),
) -> Result<Tally> {
    let before = Snapshot::read(&mut h.store)?.totals;
    let t0 = Instant::now();
    let mut t = Tally {
        fenced: a.fence,
        not_run,
        ..Tally::default()
    };
    let run = match t.not_run {
        Some(_) => Ok(()),
        None => scenarios::run(name, h, &mut t, a.iterations, bar),
    };
    if let Err(e) = run {
        t.anomaly(format!("{name}: {e}"));
    }
    if let Err(e) = h.audit(&mut t) {
        t.anomaly(format!("{name}: audit: {e}"));
    }
    if t.not_run.is_some() {
        t.iterations = 0;
    }
    let after = Snapshot::read(&mut h.store)?.totals;
    t.fenced_writes = after.fenced_writes.saturating_sub(before.fenced_writes);
    t.duplicates_suppressed = after
        .duplicates_suppressed
        .saturating_sub(before.duplicates_suppressed);
    t.wall_ms = t0.elapsed().as_millis() as u64;
    if lines {
        let how = match &t.not_run {
            Some(why) => format!("not run ({why})"),
            None if t.ok() => "ok".to_string(),
            None => format!("{} anomalies", t.anomalies),
        };
        let took = t0.elapsed().as_secs_f64();
        eprintln!("chaos: {place} ended in {took:.1}s: {how}");
    }
    Ok(t)
}

//! `cargo bench`: what exactly-once costs, against SQLite's own limit, and what the dashboard
//! costs when nothing changes (one module per part: write, lifecycle, claims, poll, top, fire,
//! chaos, pg, scaleout; `stamp` makes commands that record their own start). Prints a table and
//! writes `target/bench/summary.json`.
//!
//! Everything runs against real SQLite files under `target/bench/` (one file system for the
//! bare and the product writes) and, for `top`, claims, fire lag and chaos, the real release
//! binary that `cargo bench` builds (`CARGO_BIN_EXE_exactly`). `EXACTLY_BENCH_SMOKE=1` runs every
//! part at tiny sizes for seconds (CI does this: it checks the benches still work, not the
//! figures). `EXACTLY_BENCH_ONLY=write,lifecycle,claims,poll,top,fire,contain,chaos,pg` runs a
//! subset (the summary then holds only those keys; `pgwrite` is the `pg` part's write ratio and
//! its counts alone); `fire` includes `contain`, the fire lag and
//! wrapped sends with containment on and off (`contain.rs`); `burst` is `fire`'s first part
//! alone, the bursts of 500 and 2,000 due at once (a quicker look at their fire and decision
//! lags). The ratios the docs lead with
//! (fire lag ÷ spawn floor, containment's costs) are rows of the table beside their figures.
//!
//! With `EXACTLY_BENCH_PG=postgres://user:pass@host:port/db` the `pg` part measures the same
//! write ratio, claim race and dashboard poll against that PostgreSQL server (the `pg_*` keys,
//! figures beside SQLite's; goals for the write ratio and for claims from one process through
//! the library). It works in schemas of its own (`exactly_bench_*`),
//! each created fresh and dropped when its part ends, on error too; it needs a role that may
//! `CREATE SCHEMA`. Without the URL there is no `pg` part. `scaleout` (PostgreSQL only) runs
//! `exactly run` as 1 and as 3 schedulers on 1,500 jobs every 5 s: command-start lag, each
//! slot run exactly once, transactions per firing, jobs per scheduler.
use exactly::effect::{self, Effect, Failure, Observation, Spec};
use exactly::snapshot::Snapshot;
use exactly::{lease, Store};
use rusqlite::{params, Connection};
use serde_json::{json, Map, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod chaos;
mod claims;
mod contain;
mod fire;
mod lifecycle;
mod output;
mod pg;
#[path = "../../tests/support/pg_wire.rs"]
mod pg_wire;
mod poll;
mod scaleout;
mod stamp;
mod top;
mod util;
mod write;

use chaos::*;
use claims::*;
use contain::*;
use fire::*;
use lifecycle::*;
use output::*;
use pg::*;
use poll::*;
use scaleout::*;
use stamp::*;
use top::*;
use util::*;
use write::*;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Bump when the poll fixture's content or schema changes: cached fixtures of another version are
/// rebuilt.
const FIXTURE_VERSION: u32 = 4;

/// Sizes and durations of one bench run.
pub(crate) struct Plan {
    smoke: bool,
    write_secs: f64,
    claim_secs: f64,
    /// Effects in the "small" and "large" poll fixtures (10k and 1M in a full run).
    poll_sizes: [u64; 2],
    poll_jobs: u64,
    poll_runs: u64,
    polls: usize,
    top_secs: f64,
    fire_jobs: usize,
    /// 400 firings/s: 2,000 jobs every 5 s.
    fire_jobs_400: usize,
    fire_secs: f64,
    /// Jobs every 5 s and seconds of the `scaleout` part (PostgreSQL only).
    scale_jobs: usize,
    scale_secs: f64,
    chaos_iterations: u32,
}

impl Plan {
    fn from_env() -> Plan {
        let smoke = std::env::var("EXACTLY_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
        // The scaleout part's job count, to see where one machine stops keeping up.
        let scale_jobs = std::env::var("EXACTLY_BENCH_SCALE_JOBS")
            .ok()
            .and_then(|v| v.parse().ok());
        if smoke {
            Plan {
                smoke,
                write_secs: 0.5,
                claim_secs: 1.0,
                poll_sizes: [1_000, 10_000],
                poll_jobs: 50,
                poll_runs: 2_000,
                polls: 3,
                top_secs: 3.0,
                fire_jobs: 20,
                fire_jobs_400: 40,
                fire_secs: fire_secs(11.0),
                scale_jobs: scale_jobs.unwrap_or(30),
                scale_secs: 11.0,
                chaos_iterations: 7,
            }
        } else {
            Plan {
                smoke,
                write_secs: 5.0,
                claim_secs: 10.0,
                poll_sizes: [10_000, 1_000_000],
                poll_jobs: 1_000,
                poll_runs: 100_000,
                polls: 21,
                top_secs: 30.0,
                fire_jobs: 500,
                fire_jobs_400: 2_000,
                fire_secs: fire_secs(60.0),
                scale_jobs: scale_jobs.unwrap_or(1_500),
                scale_secs: 60.0,
                chaos_iterations: 70,
            }
        }
    }
}

/// `EXACTLY_BENCH_FIRE_SECS`: how long each fire-lag run lasts (a quicker look while working).
fn fire_secs(default: f64) -> f64 {
    std::env::var("EXACTLY_BENCH_FIRE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() -> Res<()> {
    // `cargo bench` passes `--bench`; a filter argument is not used.
    let plan = Plan::from_env();
    let only: Option<Vec<String>> = std::env::var("EXACTLY_BENCH_ONLY")
        .ok()
        .map(|s| s.split(',').map(|p| p.trim().to_string()).collect());
    let wants = |part: &str| only.as_ref().is_none_or(|o| o.iter().any(|p| p == part));
    let pg_url = std::env::var("EXACTLY_BENCH_PG")
        .ok()
        .filter(|u| !u.trim().is_empty());
    for part in ["pg", "pgwrite", "scaleout"] {
        if wants(part) && only.is_some() && pg_url.is_none() {
            return Err(format!(
                "EXACTLY_BENCH_ONLY names {part}, but EXACTLY_BENCH_PG is not set \
                 (postgres://user:pass@host:port/db)"
            )
            .into());
        }
    }
    let root = bench_dir()?;
    let mut out = Map::new();
    out.insert("smoke".into(), json!(plan.smoke));
    out.insert("machine".into(), machine());
    out.insert("run_at".into(), json!(exactly::time::now_text()));
    out.insert("load_before".into(), json!(loadavg()));
    if wants("write") {
        eprintln!("bench: write_ratio …");
        write_ratio(&plan, &root, &mut out)?;
    }
    if wants("lifecycle") {
        eprintln!("bench: lifecycle latency …");
        lifecycle_latency(&plan, &root, &mut out)?;
    }
    if wants("claims") {
        eprintln!("bench: claim_contention …");
        claim_contention(&plan, &root, &mut out)?;
    }
    let mut large = None;
    if wants("poll") || wants("top") {
        eprintln!("bench: poll fixtures …");
        let small = fixture(&plan, &root, plan.poll_sizes[0])?;
        let big = fixture(&plan, &root, plan.poll_sizes[1])?;
        if wants("poll") {
            let a = poll_ms(&plan, path_str(&small)?)?;
            let b = poll_ms(&plan, path_str(&big)?)?;
            out.insert("poll_ms_10k".into(), json!(round(a, 3)));
            out.insert("poll_ms_1m".into(), json!(round(b, 3)));
            out.insert("poll_ratio".into(), json!(round(b / a, 3)));
            out.insert(
                "poll_sizes".into(),
                json!({"small": plan.poll_sizes[0], "large": plan.poll_sizes[1],
                       "jobs": plan.poll_jobs, "runs": plan.poll_runs}),
            );
        }
        large = Some(big);
    }
    if let (true, Some(url)) = (wants("pg"), &pg_url) {
        pg(&plan, url, &mut out)?;
    } else if let (true, Some(url)) = (wants("pgwrite"), &pg_url) {
        eprintln!("bench: pg_write_ratio …");
        pg_write_ratio(&plan, url, &mut out)?;
    }
    if wants("top") {
        if let Some(big) = &large {
            eprintln!("bench: top idle …");
            top_idle(&plan, &root, big, &mut out)?;
        }
    }
    if wants("fire") || wants("burst") {
        eprintln!("bench: fire lag …");
        fire_lag(&plan, &root, &mut out)?;
    }
    if wants("fire") {
        fire_spread(&plan, &root, &mut out)?;
    }
    if wants("fire") || wants("contain") {
        eprintln!("bench: containment on and off …");
        contain(&plan, &root, &mut out)?;
    }
    if let (true, Some(url)) = (wants("scaleout"), &pg_url) {
        scaleout(&plan, url, &mut out)?;
    }
    if wants("chaos") {
        eprintln!("bench: chaos …");
        chaos(&plan, &root, &mut out)?;
    }
    out.insert("load_after".into(), json!(loadavg()));
    ratios(&mut out);
    let summary = Value::Object(out);
    print_table(&summary, plan.smoke);
    let file = root.join("summary.json");
    std::fs::write(&file, serde_json::to_string_pretty(&summary)? + "\n")?;
    println!("wrote {}", file.display());
    Ok(())
}

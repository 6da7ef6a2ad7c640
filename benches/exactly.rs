//! `cargo bench`: what exactly-once costs, against SQLite's own limit, and what the dashboard
//! costs when nothing changes. Prints a table and writes `target/bench/summary.json`.
//!
//! Everything runs against real SQLite files under `target/bench/` (one file system for the
//! bare and the product writes) and, for `top`, claims, fire lag and chaos, the real release
//! binary that `cargo bench` builds (`CARGO_BIN_EXE_exactly`). `EXACTLY_BENCH_SMOKE=1` runs every
//! part at tiny sizes for seconds (CI does this: it checks the benches still work, not the
//! figures). `EXACTLY_BENCH_ONLY=write,claims,poll,top,fire,chaos,pg` runs a subset (the summary
//! then holds only those keys).
//!
//! With `EXACTLY_BENCH_PG=postgres://user:pass@host:port/db` the `pg` part measures the same
//! write ratio, claim race and dashboard poll against that PostgreSQL server (the `pg_*` keys,
//! figures beside SQLite's, without goals). It works in schemas of its own (`exactly_bench_*`),
//! each created fresh and dropped when its part ends, on error too; it needs a role that may
//! `CREATE SCHEMA`. Without the URL there is no `pg` part.
use exactly::effect::{self, Effect, Failure, Observation, Spec};
use exactly::metrics::Snapshot;
use exactly::{lease, Store};
use rusqlite::{params, Connection};
use serde_json::{json, Map, Value};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Bump when the poll fixture's content or schema changes: cached fixtures of another version are
/// rebuilt.
const FIXTURE_VERSION: u32 = 4;

/// Sizes and durations of one bench run.
struct Plan {
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
    fire_secs: f64,
    chaos_iterations: u32,
}

impl Plan {
    fn from_env() -> Plan {
        let smoke = std::env::var("EXACTLY_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
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
                fire_secs: 11.0,
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
                fire_secs: 60.0,
                chaos_iterations: 70,
            }
        }
    }
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
    if wants("pg") && only.is_some() && pg_url.is_none() {
        return Err(
            "EXACTLY_BENCH_ONLY names pg, but EXACTLY_BENCH_PG is not set \
                    (postgres://user:pass@host:port/db)"
                .into(),
        );
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
    }
    if wants("top") {
        if let Some(big) = &large {
            eprintln!("bench: top idle …");
            top_idle(&plan, &root, big, &mut out)?;
        }
    }
    if wants("fire") {
        eprintln!("bench: fire lag …");
        fire_lag(&plan, &root, &mut out)?;
    }
    if wants("chaos") {
        eprintln!("bench: chaos …");
        chaos(&plan, &root, &mut out)?;
    }
    out.insert("load_after".into(), json!(loadavg()));
    let summary = Value::Object(out);
    print_table(&summary, plan.smoke);
    let file = root.join("summary.json");
    std::fs::write(&file, serde_json::to_string_pretty(&summary)? + "\n")?;
    println!("wrote {}", file.display());
    Ok(())
}

// ---------------------------------------------------------------- write_ratio

/// Sends nothing and always succeeds: the cost measured is the ledger's alone.
struct Nothing;

impl Effect for Nothing {
    fn perform(&mut self, _key: &str) -> Result<String, Failure> {
        Ok(String::new())
    }
    fn observe(&mut self, _key: &str) -> Observation {
        Observation::NotHappened
    }
}

/// Bare single-row commits per second with the store's own pragmas on the same file system.
fn bare_commits(dir: &Path, secs: f64) -> Res<f64> {
    let mut c = bare_db(&dir.join("bare.db"))?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        bare_commit(&mut c, n)?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// A fresh ledger at `path` with the bench job's lease held: (store, context of its holder).
fn fresh_ledger(path: &Path) -> Res<(Store, effect::Ctx)> {
    remove_db(path);
    ledger_with_lease(path_str(path)?)
}

/// The ledger `db` (a SQLite path or a PostgreSQL URL) opened, with the bench job's lease held.
fn ledger_with_lease(db: &str) -> Res<(Store, effect::Ctx)> {
    let mut store = Store::open(db)?;
    let token = match lease::claim(&mut store, "bench", "bench", Duration::from_secs(3600))? {
        lease::Claim::Won { token } => token,
        lease::Claim::Held { .. } => return Err("the bench lease is held".into()),
    };
    Ok((store, effect::Ctx::new("bench", token)))
}

fn remove_db(path: &Path) {
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
    }
}

/// One whole effect lifecycle, its input `n`.
fn lifecycle(store: &mut Store, ctx: &effect::Ctx, n: u64) -> Res<()> {
    let spec = Spec::new("send", "bench").input("i", n.to_string());
    match effect::run(store, ctx, &spec, &mut Nothing)? {
        effect::Outcome::Done { .. } => Ok(()),
        other => Err(format!("lifecycle {n} ended {other:?}").into()),
    }
}

/// A bare database with the store's pragmas and one table with a unique key.
fn bare_db(path: &Path) -> Res<Connection> {
    remove_db(path);
    let c = Connection::open(path)?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.busy_timeout(Duration::from_secs(5))?;
    c.execute(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, v TEXT)",
        [],
    )?;
    Ok(c)
}

/// One bare single-row commit, its key from `n`.
fn bare_commit(c: &mut Connection, n: u64) -> Res<()> {
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute(
        "INSERT INTO t (k, v) VALUES (?1, ?2)",
        params![format!("{n:032x}"), "2026-11-30T00:00:00.000Z"],
    )?;
    tx.commit()?;
    Ok(())
}

/// Whole effect lifecycles per second through the library (lease held, no approval).
fn lifecycles(dir: &Path, secs: f64, round_no: u32) -> Res<f64> {
    let (mut store, ctx) = fresh_ledger(&dir.join(format!("ledger-{round_no}.db")))?;
    lifecycles_for(&mut store, &ctx, secs)
}

/// Lifecycles per second for `secs` on an open ledger whose lease `ctx` holds.
fn lifecycles_for(store: &mut Store, ctx: &effect::Ctx, secs: f64) -> Res<f64> {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        lifecycle(store, ctx, n)?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

fn write_ratio(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("write");
    std::fs::create_dir_all(&dir)?;
    // Interleaved rounds, so a neighbour's burst of disk work hits both sides alike.
    let (mut bare, mut life) = (Vec::new(), Vec::new());
    for r in 0..3 {
        bare.push(bare_commits(&dir, plan.write_secs / 3.0)?);
        life.push(lifecycles(&dir, plan.write_secs / 3.0, r)?);
    }
    let bare_s = median(&mut bare);
    let life_s = median(&mut life);
    out.insert("write_ratio".into(), json!(round(life_s / bare_s, 3)));
    out.insert("lifecycles_per_s".into(), json!(round(life_s, 0)));
    out.insert("bare_commits_per_s".into(), json!(round(bare_s, 0)));
    // What a commit costs here is its fsync and the pages it writes: count the WAL frames each
    // side appends (no checkpoint in between: 50 writes stay under the 1,000-frame autocheckpoint).
    let (life_frames, bare_frames) = wal_frames(&dir, 50)?;
    out.insert(
        "wal_frames_per_lifecycle".into(),
        json!(round(life_frames, 1)),
    );
    out.insert(
        "wal_frames_per_bare_commit".into(),
        json!(round(bare_frames, 1)),
    );
    Ok(())
}

/// WAL frames appended per effect lifecycle and per bare commit, over `n` of each.
fn wal_frames(dir: &Path, n: u64) -> Res<(f64, f64)> {
    // Frames now in the WAL, as a passive checkpoint reports them (it copies, never resets).
    let checkpoint = |path: &Path, mode: &str| -> Res<f64> {
        let c = Connection::open(path)?;
        let log: i64 = c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(1))?;
        Ok(log as f64)
    };
    // A few first, so page allocation at the file's start is not counted; then the WAL is
    // emptied and `n` more counted.
    let path = dir.join("frames.db");
    let (mut store, ctx) = fresh_ledger(&path)?;
    for i in 0..20 {
        lifecycle(&mut store, &ctx, i)?;
    }
    checkpoint(&path, "TRUNCATE")?;
    for i in 20..20 + n {
        lifecycle(&mut store, &ctx, i)?;
    }
    let life = checkpoint(&path, "PASSIVE")? / n as f64;

    let bare = dir.join("frames-bare.db");
    let mut c = bare_db(&bare)?;
    for i in 0..20 {
        bare_commit(&mut c, i)?;
    }
    checkpoint(&bare, "TRUNCATE")?;
    for i in 20..20 + n {
        bare_commit(&mut c, i)?;
    }
    Ok((life, checkpoint(&bare, "PASSIVE")? / n as f64))
}

// ---------------------------------------------------------------- claim_contention

/// One won claim: its token, when its process was started and when it answered.
struct Grant {
    token: i64,
    started: Instant,
    answered: Instant,
}

fn claim_contention(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("claims");
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("claims.db");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    drop(Store::open(path_str(&db)?)?);
    let figures = race(plan, path_str(&db)?, || {
        let c = Connection::open(&db)?;
        Ok(c.query_row(
            "SELECT fencing_token FROM job_lease WHERE job_key = 'race'",
            [],
            |r| r.get(0),
        )?)
    })?;
    out.insert("claim_contention".into(), figures);
    Ok(())
}

/// Eight processes of the real binary claiming one job's 100 ms lease on the ledger `db` (a
/// SQLite path or a PostgreSQL URL, its schema made) over and over for the plan's claim time;
/// `last_token` reads the job's fencing token from the table afterwards. The figures as the
/// summary's `claim_contention` holds them.
fn race(plan: &Plan, db: &str, last_token: impl FnOnce() -> Res<i64>) -> Res<Value> {
    let lease_ms: u64 = 100;
    let secs = plan.claim_secs;
    let racers = 8;
    let start = Instant::now();
    let results: Vec<Res<(Vec<Grant>, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..racers)
            .map(|w| {
                s.spawn(move || -> Res<(Vec<Grant>, u64)> {
                    let mut grants = Vec::new();
                    let mut answered = 0u64;
                    let mut i = 0u64;
                    while start.elapsed().as_secs_f64() < secs {
                        i += 1;
                        let started = Instant::now();
                        let o = Command::new(exe())
                            .args(["--db", db, "lease", "claim", "--job", "race"])
                            .args(["--for", &format!("{lease_ms}ms")])
                            .args(["--owner", &format!("racer-{w}-{i}")])
                            .stdin(Stdio::null())
                            .output()?;
                        let answered_at = Instant::now();
                        match o.status.code() {
                            Some(0) => {
                                let token = String::from_utf8_lossy(&o.stdout).trim().parse()?;
                                grants.push(Grant {
                                    token,
                                    started,
                                    answered: answered_at,
                                });
                                answered += 1;
                            }
                            Some(3) => answered += 1,
                            _ => {
                                return Err(format!(
                                    "lease claim failed: {}",
                                    String::from_utf8_lossy(&o.stderr).trim()
                                )
                                .into())
                            }
                        }
                    }
                    Ok((grants, answered))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a racer panicked".into())))
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut grants = Vec::new();
    let mut answered = 0;
    for r in results {
        let (g, a) = r?;
        grants.extend(g);
        answered += a;
    }
    grants.sort_by_key(|g| g.token);
    // A double grant: two winners of one token, or a winner that answered before the previous
    // winner's lease (at least `lease_ms` from the moment its process started) could have ended.
    let lease = Duration::from_millis(lease_ms);
    let mut double = 0u64;
    for w in grants.windows(2) {
        if w[0].token == w[1].token || w[1].answered < w[0].started + lease {
            double += 1;
        }
    }
    // The tokens in the table agree with what the winners printed.
    if grants.last().map(|g| g.token) != Some(last_token()?) {
        double += 1;
    }
    Ok(json!({
        "claims_per_s": round(answered as f64 / elapsed, 1),
        "grants_per_s": round(grants.len() as f64 / elapsed, 1),
        "double_grants": double,
        "processes": racers,
        "lease_ms": lease_ms,
    }))
}

// ---------------------------------------------------------------- poll fixtures

/// The poll fixture of `n` effects, built once per fixture version and day (its runs must fall
/// in the last week, as a live ledger's do) and cached under `target/bench/`.
fn fixture(plan: &Plan, root: &Path, n: u64) -> Res<PathBuf> {
    let day = exactly::time::now_text()[..10].to_string();
    let name = format!(
        "fixture-v{FIXTURE_VERSION}-{n}-{}j-{}r-{day}.db",
        plan.poll_jobs, plan.poll_runs
    );
    let path = root.join("fixtures").join(name);
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(root.join("fixtures"))?;
    // Older fixtures of these sizes (another version or day) are stale.
    let shape = format!("-{n}-{}j-{}r-", plan.poll_jobs, plan.poll_runs);
    if let Ok(rd) = std::fs::read_dir(root.join("fixtures")) {
        for e in rd.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            if f.contains(&shape) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let tmp = path.with_extension("tmp");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", tmp.display()));
    }
    let t = Instant::now();
    drop(Store::open(path_str(&tmp)?)?);
    fill(plan, &tmp, n)?;
    {
        // Fold the WAL into the file so the cached fixture is one file.
        let c = Connection::open(&tmp)?;
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    }
    std::fs::rename(&tmp, &path)?;
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", tmp.display()));
    }
    eprintln!(
        "bench: built fixture of {n} effects in {:.1?} ({})",
        t.elapsed(),
        path.display()
    );
    Ok(path)
}

/// Fills a fresh database with a realistic ledger, in one transaction with prepared statements:
/// `n` effects (0.05 % unknown, 0.02 % claimed, 0.02 % submitted, the rest done, 0.01 % waiting
/// for approval), `jobs` jobs every 5 minutes with leases, `runs` runs over the last 3 days with
/// their firings, and a month of events (one per settled effect, a few other kinds).
fn fill(plan: &Plan, path: &Path, n: u64) -> Res<()> {
    use exactly::time::{fmt, now};
    let mut c = Connection::open(path)?;
    c.pragma_update(None, "synchronous", "OFF")?;
    let tx = c.transaction()?;
    let now = now();
    let month_ms = 30 * 24 * 3600 * 1000i64;
    let ago = |ms: i64| fmt(now - chrono::Duration::milliseconds(ms));
    let jobs = plan.poll_jobs;
    {
        let mut job = tx.prepare(
            "INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, lease_ms, overlap,
               command, command_digest, catchup_s, source, owner, updated_at)
             VALUES (?1, 'every 5m', 300, 60, 60000, 'coalesce', ?2, ?2, 60, 'bench.toml', 'bench', ?3)",
        )?;
        let mut lease = tx.prepare(
            "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
             VALUES (?1, 'bench', ?2, ?3, ?4)",
        )?;
        for j in 0..jobs {
            let key = format!("job-{j:04}");
            job.execute(params![key, format!("[\"run\",\"{j}\"]"), ago(0)])?;
            // Every tenth job is running now; the rest hold released leases.
            let until = if j % 10 == 0 {
                fmt(now + chrono::Duration::minutes(1))
            } else {
                exactly::lease::RELEASED.to_string()
            };
            lease.execute(params![key, 100 + j as i64, until, ago(month_ms)])?;
        }
        let mut eff = tx.prepare(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
               response, created_at, updated_at, action_id, target_id, input_digest, attempt, version)
             VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?6, 'send', ?7, ?8, 'bench:1', 3)",
        )?;
        let mut ev = tx.prepare(
            "INSERT INTO exactly_events (at, kind, job_key, effect_key, fencing_token, detail)
             VALUES (?1, ?2, ?3, ?4, 1, ?5)",
        )?;
        let mut appr = tx.prepare(
            "INSERT INTO exactly_approvals (effect_key, job_key, terms_shown, state, requested_at)
             VALUES (?1, ?2, 'pay 10 EUR', 'pending', ?3)",
        )?;
        for i in 0..n {
            let key = format!("{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let job = format!("job-{:04}", i % jobs);
            let at = ago((n - i) as i64 * month_ms / n as i64);
            let state = match i % 10_000 {
                0..=4 => "unknown",
                5..=6 => "claimed",
                7..=8 => "submitted",
                _ => "done",
            };
            let response = (state == "done").then_some("ok 200");
            eff.execute(params![
                key,
                job,
                format!("run-{i}"),
                state,
                response,
                at,
                format!("customer-{i}"),
                key
            ])?;
            if i % 10_000 == 9 {
                appr.execute(params![key, job, at])?;
            }
            let kind = match state {
                "done" => "effect_done",
                "unknown" => "effect_unknown",
                _ => continue,
            };
            ev.execute(params![at, kind, job, key, "ok 200"])?;
            if i % 100 == 0 {
                ev.execute(params![
                    at,
                    "duplicate_suppressed",
                    job,
                    key,
                    "already done"
                ])?;
            }
        }
        let mut run = tx.prepare(
            "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token,
               started_at, ended_at, outcome, duration_ms, exit_code, log)
             VALUES (?1, ?2, ?3, 'bench', ?4, ?5, ?6, ?7, ?8, ?9, 'done')",
        )?;
        let mut firing = tx.prepare(
            "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, owner, run_id,
               created_at, updated_at) VALUES (?1, ?2, 'schedule', 'done', 'bench', ?3, ?2, ?2)",
        )?;
        let span_ms = 3 * 24 * 3600 * 1000i64;
        for r in 0..plan.poll_runs {
            let j = r % jobs;
            let job = format!("job-{j:04}");
            let at_ms = span_ms - (r as i64 * span_ms / plan.poll_runs as i64);
            let scheduled = ago(at_ms);
            let started = ago(at_ms - 40);
            let dur = 200 + (r * 7919 % 5000) as i64;
            let ended = ago(at_ms - 40 - dur);
            let failed = r % 50 == 0;
            run.execute(params![
                format!("run-{job}-{r}"),
                job,
                scheduled,
                100 + j as i64,
                started,
                ended,
                if failed { "failed" } else { "ok" },
                dur,
                if failed { 1 } else { 0 }
            ])?;
            firing.execute(params![job, scheduled, format!("run-{job}-{r}")])?;
        }
        let mut counter = tx.prepare(
            "INSERT INTO exactly_counters (kind, job_key, n) VALUES (?1, ?2, ?3)
             ON CONFLICT(kind, job_key) DO UPDATE SET n = n + excluded.n",
        )?;
        let per_job = (n / jobs).max(1) as i64;
        let runs_per_job = (plan.poll_runs / jobs).max(1) as i64;
        for j in 0..jobs {
            let job = format!("job-{j:04}");
            counter.execute(params!["effect_done", job, per_job])?;
            counter.execute(params!["duplicate_suppressed", job, per_job / 100])?;
            counter.execute(params!["run_ended:ok", job, runs_per_job])?;
            counter.execute(params!["run_ended:failed", job, runs_per_job / 50])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Median milliseconds to build one Snapshot, as `exactly top` does (read-only connection), from
/// the database `db` (a SQLite file's path or a PostgreSQL URL).
fn poll_ms(plan: &Plan, db: &str) -> Res<f64> {
    let mut store = Store::open_read_only(db)?;
    // A first read warms the page cache, as a running dashboard's has.
    std::hint::black_box(Snapshot::read(&mut store)?);
    let mut times = Vec::new();
    for _ in 0..plan.polls {
        let t = Instant::now();
        std::hint::black_box(Snapshot::read(&mut store)?);
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(median(&mut times))
}

// ---------------------------------------------------------------- top

/// The real `exactly top` in a pseudo-terminal (util-linux `script`) on the unchanging large
/// fixture: CPU from /proc/PID/stat, RSS from /proc/PID/status, bytes from the terminal.
fn top_idle(plan: &Plan, root: &Path, fixture: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("top");
    std::fs::create_dir_all(&dir)?;
    // A copy, so a dashboard's side files never touch the cached fixture.
    let db = dir.join("top.db");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    std::fs::copy(fixture, &db)?;
    let inner = format!(
        "stty rows 40 cols 140; exec {} --db {} top",
        shell_quote(&exe()),
        shell_quote(path_str(&db)?)
    );
    let mut script = Command::new("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start script(1) (util-linux) for a pseudo-terminal: {e}"))?;
    let stdout = script.stdout.take().ok_or("no stdout from script")?;
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = {
        let counted = counted.clone();
        std::thread::spawn(move || {
            let mut stdout = stdout;
            let mut buf = [0u8; 8192];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                counted.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let result = (|| -> Res<()> {
        let pid = find_child(script.id(), "exactly", Duration::from_secs(10))?;
        // Let it draw its first frames and settle.
        std::thread::sleep(Duration::from_secs(3));
        let (cpu0, bytes0, t0) = (
            cpu_ticks(pid)?,
            counted.load(std::sync::atomic::Ordering::Relaxed),
            Instant::now(),
        );
        std::thread::sleep(Duration::from_secs_f64(plan.top_secs));
        let (cpu1, bytes1, secs) = (
            cpu_ticks(pid)?,
            counted.load(std::sync::atomic::Ordering::Relaxed),
            t0.elapsed().as_secs_f64(),
        );
        let (rss_kb, hwm_kb) = rss_kb(pid)?;
        let hz = clock_ticks_per_s();
        let cpu_pct = (cpu1 - cpu0) as f64 / hz / secs * 100.0;
        out.insert("top_idle_cpu_pct".into(), json!(round(cpu_pct, 3)));
        out.insert(
            "top_idle_bytes_per_s".into(),
            json!(round((bytes1 - bytes0) as f64 / secs, 1)),
        );
        out.insert("top_rss_mb".into(), json!(round(rss_kb as f64 / 1024.0, 1)));
        out.insert(
            "top_peak_rss_mb".into(),
            json!(round(hwm_kb as f64 / 1024.0, 1)),
        );
        out.insert("top_secs".into(), json!(round(secs, 1)));
        // SAFETY: signalling the dashboard we started; it restores the terminal and exits.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        Ok(())
    })();
    let deadline = Instant::now() + Duration::from_secs(5);
    while script.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = script.kill();
    let _ = script.wait();
    let _ = reader.join();
    result
}

/// The pid of the first descendant of `parent` named `name`.
fn find_child(parent: u32, name: &str, wait: Duration) -> Res<u32> {
    let deadline = Instant::now() + wait;
    loop {
        let mut todo = vec![parent];
        while let Some(p) = todo.pop() {
            let kids =
                std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
            for k in kids
                .split_whitespace()
                .filter_map(|k| k.parse::<u32>().ok())
            {
                let comm = std::fs::read_to_string(format!("/proc/{k}/comm")).unwrap_or_default();
                if comm.trim() == name {
                    return Ok(k);
                }
                todo.push(k);
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no {name} process appeared under pid {parent}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Res<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').ok_or("bad /proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime 15.
    Ok(f.get(11).ok_or("no utime")?.parse::<u64>()?
        + f.get(12).ok_or("no stime")?.parse::<u64>()?)
}

fn rss_kb(pid: u32) -> Res<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

// ---------------------------------------------------------------- fire lag

fn fire_lag(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("fire");
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("fire.db");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    let jobs = dir.join("jobs.toml");
    let mut toml = String::new();
    for j in 0..plan.fire_jobs {
        // Distinct commands, so the duplicate-registration lint stays quiet.
        toml.push_str(&format!(
            "[[job]]\nname = \"tick-{j:03}\"\nevery = \"5s\"\nlease = \"4s\"\ntimeout = \"3s\"\noverlap = \"coalesce\"\ncommand = [\"true\", \"{j}\"]\n\n"
        ));
    }
    std::fs::write(&jobs, toml)?;
    let started = exactly::time::now_text();
    let mut child: Child = Command::new(exe())
        .args(["--db", path_str(&db)?, "run", path_str(&jobs)?])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(dir.join("run.log"))?))
        .spawn()?;
    let until = Instant::now() + Duration::from_secs_f64(plan.fire_secs);
    while Instant::now() < until {
        if let Some(st) = child.try_wait()? {
            return Err(format!(
                "exactly run stopped early ({st}); see {}",
                dir.join("run.log").display()
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: signalling the scheduler we started; SIGTERM stops it gracefully.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("exactly run did not stop within 30 s of SIGTERM".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Firings scheduled after the scheduler started: catch-up of earlier slots is not lag.
    let c = Connection::open(&db)?;
    let mut stmt = c.prepare(
        "SELECT (julianday(started_at) - julianday(scheduled_at)) * 86400000.0 FROM exactly_runs
         WHERE scheduled_at >= ?1",
    )?;
    let mut lags: Vec<f64> = stmt
        .query_map([&started], |r| r.get::<_, f64>(0))?
        .collect::<rusqlite::Result<_>>()?;
    if lags.is_empty() {
        return Err(format!(
            "exactly run started no run in {} s (see {})",
            plan.fire_secs,
            dir.join("run.log").display()
        )
        .into());
    }
    lags.sort_by(f64::total_cmp);
    let pct = |p: f64| lags[((lags.len() as f64 - 1.0) * p).round() as usize];
    out.insert("fire_lag_p99_ms".into(), json!(round(pct(0.99), 1)));
    out.insert("fire_lag_p50_ms".into(), json!(round(pct(0.50), 1)));
    out.insert("fire_lag_max_ms".into(), json!(round(pct(1.0), 1)));
    out.insert("fire_runs".into(), json!(lags.len()));
    out.insert(
        "fire_expected_runs".into(),
        json!((plan.fire_secs / 5.0).floor() as usize * plan.fire_jobs),
    );
    Ok(())
}

// ---------------------------------------------------------------- chaos

fn chaos(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("chaos");
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("chaos.db");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    let n = plan.chaos_iterations;
    let t = Instant::now();
    let o = Command::new(exe())
        .args([
            "--db",
            path_str(&db)?,
            "chaos",
            "--scenario",
            "kill-mid-effect",
        ])
        .args(["--iterations", &n.to_string(), "--json", "--seed", "13"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    let secs = t.elapsed().as_secs_f64();
    let v: Value = serde_json::from_slice(&o.stdout)
        .map_err(|e| format!("exactly chaos printed no JSON ({e}), exit {:?}", o.status))?;
    let dups = v["duplicate_effects"]
        .as_u64()
        .ok_or("no duplicate_effects")?;
    if !o.status.success() || dups != 0 {
        return Err(format!("exactly chaos failed: exit {:?}, {v}", o.status).into());
    }
    out.insert(
        "chaos_iterations_per_s".into(),
        json!(round(n as f64 / secs, 2)),
    );
    out.insert(
        "chaos".into(),
        json!({"iterations": n, "secs": round(secs, 1), "duplicate_effects": dups,
               "lost_effects": v["lost_effects"]}),
    );
    Ok(())
}

// ---------------------------------------------------------------- PostgreSQL

/// The `pg` part: the write ratio, the claim race and the dashboard's poll against the
/// PostgreSQL database at `url`, each in fresh schemas of its own that it drops.
fn pg(plan: &Plan, url: &str, out: &mut Map<String, Value>) -> Res<()> {
    let mut c = pg_connect(url)?;
    let setting = |c: &mut postgres::Client, name: &str| -> Res<String> {
        Ok(c.query_one("SELECT current_setting($1)", &[&name])?.get(0))
    };
    out.insert(
        "pg_server".into(),
        json!({
            "url": redact(url),
            "version": setting(&mut c, "server_version")?,
            "synchronous_commit": setting(&mut c, "synchronous_commit")?,
            "fsync": setting(&mut c, "fsync")?,
        }),
    );
    drop(c);
    eprintln!("bench: pg_write_ratio …");
    pg_write_ratio(plan, url, out)?;
    eprintln!("bench: pg_claim_contention …");
    let schema = PgSchema::create(url, "claims")?;
    drop(Store::open(&schema.url)?);
    let figures = race(plan, &schema.url, || {
        let row = pg_connect(&schema.url)?.query_one(
            "SELECT fencing_token FROM job_lease WHERE job_key = 'race'",
            &[],
        )?;
        Ok(row.get(0))
    })?;
    drop(schema);
    let double = figures["double_grants"].as_u64().unwrap_or(u64::MAX);
    if double != 0 {
        eprintln!("bench: WARNING: {double} double grants on PostgreSQL (must be 0)");
    }
    out.insert("pg_claims_per_s".into(), figures["claims_per_s"].clone());
    out.insert("pg_double_grants".into(), json!(double));
    out.insert("pg_claim_contention".into(), figures);
    eprintln!("bench: pg poll fixtures …");
    // One fixture at a time: the small one is dropped before the large one is filled.
    let mut ms = [0.0; 2];
    for (m, &n) in ms.iter_mut().zip(&plan.poll_sizes) {
        let schema = pg_fixture(plan, url, n)?;
        *m = poll_ms(plan, &schema.url)?;
    }
    out.insert("pg_poll_ms_10k".into(), json!(round(ms[0], 3)));
    out.insert("pg_poll_ms_1m".into(), json!(round(ms[1], 3)));
    out.insert("pg_poll_ratio".into(), json!(round(ms[1] / ms[0], 3)));
    out.insert(
        "pg_poll_sizes".into(),
        json!({"small": plan.poll_sizes[0], "large": plan.poll_sizes[1],
               "jobs": plan.poll_jobs, "runs": plan.poll_runs}),
    );
    Ok(())
}

/// A schema of its own in the bench's PostgreSQL database, dropped (CASCADE) with this value.
struct PgSchema {
    name: String,
    /// The URL with this schema as its search_path: what `--db` and `Store::open` are given.
    url: String,
    base: String,
}

impl PgSchema {
    fn create(base: &str, what: &str) -> Res<PgSchema> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let name = format!(
            "exactly_bench_{what}_{}_{}_{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        pg_connect(base)?
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .map_err(|e| format!("CREATE SCHEMA {name} in {}: {e}", redact(base)))?;
        Ok(PgSchema {
            url: with_search_path(base, &name)?,
            name,
            base: base.to_string(),
        })
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // The store's pooled connections to the schema sit idle (no transaction, no lock); a
        // claimer left running may not: wait a while for its lock, then leave the schema with a
        // warning rather than hang.
        let sql = format!(
            "SET lock_timeout = '20s'; DROP SCHEMA IF EXISTS {} CASCADE",
            self.name
        );
        if let Err(e) = pg_connect(&self.base).and_then(|mut c| Ok(c.batch_execute(&sql)?)) {
            eprintln!("bench: WARNING: schema {} not dropped: {e}", self.name);
        }
    }
}

fn pg_connect(url: &str) -> Res<postgres::Client> {
    postgres::Client::connect(url, postgres::NoTls)
        .map_err(|e| format!("connecting to {}: {e}", redact(url)).into())
}

/// `url` with `options=-csearch_path=SCHEMA` (URL-encoded) added to its query.
fn with_search_path(url: &str, schema: &str) -> Res<String> {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    if query.split('&').any(|kv| kv.starts_with("options=")) {
        return Err(format!(
            "EXACTLY_BENCH_PG {} has options= already: the bench adds its own (search_path)",
            redact(url)
        )
        .into());
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{sep}options=-csearch_path%3D{schema}"))
}

/// The URL with its password hidden, for messages and the summary.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if s + 3 < at => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

/// `write_ratio` on PostgreSQL: effect lifecycles through the library (a fresh schema each
/// round) against bare single-row commits on the same server, rounds interleaved.
fn pg_write_ratio(plan: &Plan, url: &str, out: &mut Map<String, Value>) -> Res<()> {
    let bare_schema = PgSchema::create(url, "bare")?;
    let mut c = pg_connect(&bare_schema.url)?;
    let (mut bare, mut life) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        bare.push(pg_bare_commits(&mut c, plan.write_secs / 3.0)?);
        let schema = PgSchema::create(url, "ledger")?;
        let (mut store, ctx) = ledger_with_lease(&schema.url)?;
        life.push(lifecycles_for(&mut store, &ctx, plan.write_secs / 3.0)?);
    }
    let bare_s = median(&mut bare);
    let life_s = median(&mut life);
    out.insert("pg_write_ratio".into(), json!(round(life_s / bare_s, 3)));
    out.insert("pg_lifecycles_per_s".into(), json!(round(life_s, 0)));
    out.insert("pg_bare_commits_per_s".into(), json!(round(bare_s, 0)));
    Ok(())
}

/// Bare single-row commits per second on PostgreSQL: a fresh table with a unique text key, one
/// INSERT per autocommit statement over one connection, the server's synchronous_commit.
fn pg_bare_commits(c: &mut postgres::Client, secs: f64) -> Res<f64> {
    c.batch_execute(
        "DROP TABLE IF EXISTS t;
         CREATE TABLE t (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                         k TEXT NOT NULL UNIQUE, v TEXT)",
    )?;
    let insert = c.prepare("INSERT INTO t (k, v) VALUES ($1, $2)")?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        c.execute(
            &insert,
            &[&format!("{n:032x}"), &"2026-11-30T00:00:00.000Z"],
        )?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// The poll fixture of `n` effects on PostgreSQL, the same rows as [`fill`] writes on SQLite (the
/// same keys, states, times relative to now, runs, firings, events and counters), in a fresh
/// schema made by `exactly init` and filled with `INSERT … SELECT … FROM generate_series` in one
/// transaction, then vacuumed and analysed. Built anew on every run; dropped with the value.
fn pg_fixture(plan: &Plan, base: &str, n: u64) -> Res<PgSchema> {
    let t = Instant::now();
    let schema = PgSchema::create(base, &format!("poll{n}"))?;
    let o = Command::new(exe())
        .args(["--db", &schema.url, "init"])
        .stdin(Stdio::null())
        .output()?;
    if !o.status.success() {
        return Err(format!(
            "exactly init on PostgreSQL failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )
        .into());
    }
    let mut c = pg_connect(&schema.url)?;
    c.batch_execute(&pg_fill_sql(plan, n))?;
    // What autovacuum would do to a live ledger soon after these inserts (and would otherwise
    // start in the middle of the polls): visibility map and statistics.
    c.batch_execute("VACUUM (ANALYZE)")?;
    let events: i64 = c
        .query_one("SELECT count(*) FROM exactly_events", &[])?
        .get(0);
    eprintln!(
        "bench: built PostgreSQL fixture of {n} effects ({events} events) in {:.1?} (schema {})",
        t.elapsed(),
        schema.name
    );
    Ok(schema)
}

/// The SQL that fills a fresh schema as [`fill`] fills a SQLite file (see there for the shape).
/// Times are the server's `now()` less the same offsets, in exactly's text format.
fn pg_fill_sql(plan: &Plan, n: u64) -> String {
    let jobs = plan.poll_jobs;
    let runs = plan.poll_runs;
    let month_ms = 30 * 24 * 3600 * 1000i64;
    let span_ms = 3 * 24 * 3600 * 1000i64;
    let ts = |at: &str| {
        format!("to_char(({at}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
    };
    let ago = |ms: &str| ts(&format!("now() - ({ms}) * interval '1 millisecond'"));
    let job =
        |j: &str| format!("'job-' || lpad(({j})::text, greatest(4, length(({j})::text)), '0')");
    // `format!("{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15))`, as fill's keys.
    let x = "(i::numeric * 11400714819323198485 % 18446744073709551616)";
    let key = format!(
        "repeat('0', 16) || lpad(to_hex(floor({x} / 4294967296)::bigint), 8, '0')
           || lpad(to_hex(({x} % 4294967296)::bigint), 8, '0')"
    );
    // Effect i's key, job, time and state, over the effects `series` names.
    let effects = |series: &str| {
        format!(
            "(SELECT i, {key} AS key, {job} AS job, {at} AS at,
                CASE WHEN i % 10000 <= 4 THEN 'unknown' WHEN i % 10000 <= 6 THEN 'claimed'
                     WHEN i % 10000 <= 8 THEN 'submitted' ELSE 'done' END AS state
             FROM {series} AS i)",
            job = job(&format!("i % {jobs}")),
            at = ago(&format!("({n} - i) * {month_ms} / {n}")),
        )
    };
    let all = format!("generate_series(0::bigint, {}::bigint)", n - 1);
    let per_job = (n / jobs).max(1) as i64;
    let runs_per_job = (runs / jobs).max(1) as i64;
    format!(
        "BEGIN;
         SET LOCAL synchronous_commit = off;
         INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, lease_ms, overlap,
           command, command_digest, catchup_s, source, owner, updated_at)
         SELECT {jk}, 'every 5m', 300, 60, 60000, 'coalesce', '[\"run\",\"' || j || '\"]',
           '[\"run\",\"' || j || '\"]', 60, 'bench.toml', 'bench', {now}
         FROM generate_series(0::bigint, {jobs_1}::bigint) AS j ORDER BY j;
         INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
         SELECT {jk}, 'bench', 100 + j,
           CASE WHEN j % 10 = 0 THEN {in_a_minute} ELSE '{released}' END, {month_ago}
         FROM generate_series(0::bigint, {jobs_1}::bigint) AS j ORDER BY j;
         INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
           response, created_at, updated_at, action_id, target_id, input_digest, attempt, version)
         SELECT key, job, 'run-' || i, 1, state, CASE WHEN state = 'done' THEN 'ok 200' END,
           at, at, 'send', 'customer-' || i, key, 'bench:1', 3
         FROM {all_effects} AS f ORDER BY i;
         INSERT INTO exactly_approvals (effect_key, job_key, terms_shown, state, requested_at)
         SELECT key, job, 'pay 10 EUR', 'pending', at FROM {approvals} AS f ORDER BY i;
         INSERT INTO exactly_events (at, kind, job_key, effect_key, fencing_token, detail)
         SELECT f.at, e.kind, f.job, f.key, 1, e.detail
         FROM {all_effects} AS f
         CROSS JOIN LATERAL (VALUES
           (0, CASE WHEN f.state = 'done' THEN 'effect_done' ELSE 'effect_unknown' END, 'ok 200'),
           (1, 'duplicate_suppressed', 'already done')) AS e (k, kind, detail)
         WHERE f.state IN ('done', 'unknown') AND (e.k = 0 OR f.i % 100 = 0)
         ORDER BY f.i, e.k;
         INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token,
           started_at, ended_at, outcome, duration_ms, exit_code, log)
         SELECT 'run-' || job || '-' || r, job, {scheduled}, 'bench', 100 + j, {started}, {ended},
           CASE WHEN r % 50 = 0 THEN 'failed' ELSE 'ok' END, dur,
           CASE WHEN r % 50 = 0 THEN 1 ELSE 0 END, 'done'
         FROM (SELECT r, r % {jobs} AS j, {rjob} AS job,
                 {span_ms} - r * {span_ms} / {runs} AS at_ms, 200 + r * 7919 % 5000 AS dur
               FROM generate_series(0::bigint, {runs_1}::bigint) AS r) AS s
         ORDER BY r;
         INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, owner, run_id,
           created_at, updated_at)
         SELECT job_key, scheduled_at, 'schedule', 'done', 'bench', run_id, scheduled_at,
           scheduled_at
         FROM exactly_runs ORDER BY rowid;
         INSERT INTO exactly_counters (kind, job_key, n)
         SELECT c.kind, {jk}, c.n
         FROM generate_series(0::bigint, {jobs_1}::bigint) AS j
         CROSS JOIN (VALUES ('effect_done', {per_job}), ('duplicate_suppressed', {dups}),
           ('run_ended:ok', {runs_per_job}), ('run_ended:failed', {failed})) AS c (kind, n)
         ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + excluded.n;
         COMMIT;",
        jk = job("j"),
        jobs_1 = jobs - 1,
        now = ago("0"),
        in_a_minute = ts("now() + interval '1 minute'"),
        released = lease::RELEASED,
        month_ago = ago(&month_ms.to_string()),
        all_effects = effects(&all),
        approvals = effects(&format!(
            "generate_series(9::bigint, {}::bigint, 10000)",
            n - 1
        )),
        scheduled = ago("at_ms"),
        started = ago("at_ms - 40"),
        ended = ago("at_ms - 40 - dur"),
        rjob = job(&format!("r % {jobs}")),
        runs_1 = runs - 1,
        dups = per_job / 100,
        failed = runs_per_job / 50,
    )
}

// ---------------------------------------------------------------- output

/// (key, goal as text, met?) for the table.
fn goal(key: &str, v: f64) -> Option<(&'static str, bool)> {
    Some(match key {
        "write_ratio" => ("≥ 0.40", v >= 0.40),
        "claim_contention.double_grants" => ("= 0", v == 0.0),
        "poll_ms_1m" => ("≤ 10", v <= 10.0),
        "poll_ratio" => ("≤ 1.5", v <= 1.5),
        "top_idle_cpu_pct" => ("≤ 0.2", v <= 0.2),
        "top_rss_mb" => ("≤ 40", v <= 40.0),
        "fire_lag_p99_ms" => ("≤ 250", v <= 250.0),
        _ => return None,
    })
}

fn print_table(s: &Value, smoke: bool) {
    let rows = [
        "write_ratio",
        "lifecycles_per_s",
        "bare_commits_per_s",
        "wal_frames_per_lifecycle",
        "wal_frames_per_bare_commit",
        "pg_write_ratio",
        "pg_lifecycles_per_s",
        "pg_bare_commits_per_s",
        "claim_contention.claims_per_s",
        "claim_contention.double_grants",
        "pg_claims_per_s",
        "pg_double_grants",
        "poll_ms_10k",
        "poll_ms_1m",
        "poll_ratio",
        "pg_poll_ms_10k",
        "pg_poll_ms_1m",
        "pg_poll_ratio",
        "top_idle_cpu_pct",
        "top_idle_bytes_per_s",
        "top_rss_mb",
        "fire_lag_p50_ms",
        "fire_lag_p99_ms",
        "chaos_iterations_per_s",
    ];
    if smoke {
        println!("SMOKE RUN (tiny sizes, seconds): the figures below are not the benchmark's");
    }
    println!("{:<34} {:>12}  goal", "figure", "value");
    for k in rows {
        let v = k.split('.').try_fold(s, |v, p| v.get(p));
        let Some(n) = v.and_then(Value::as_f64) else {
            continue;
        };
        let (g, mark) = match goal(k, n) {
            Some((g, true)) => (g, "met"),
            Some((g, false)) => (g, if smoke { "" } else { "MISSED" }),
            None => ("", ""),
        };
        println!("{k:<34} {n:>12}  {g:<8} {mark}");
    }
}

// ---------------------------------------------------------------- helpers

fn exe() -> String {
    env!("CARGO_BIN_EXE_exactly").to_string()
}

fn bench_dir() -> Res<PathBuf> {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let d = target.join("bench");
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn path_str(p: &Path) -> Res<&str> {
    p.to_str()
        .ok_or_else(|| format!("path {} is not UTF-8", p.display()).into())
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    json!({"cores": cores, "cpu": cpu})
}

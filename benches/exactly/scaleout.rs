use super::*;
use std::collections::HashMap;

/// Slots this long after the last scheduler started are measured: before, schedulers that
/// started apart have not yet read each other's heartbeats (membership is read each second).
const SETTLE_MS: i64 = 3000;

/// The `scaleout` part: `exactly run` as 1, then as 3 schedulers on one fresh PostgreSQL schema
/// each, with `plan.scale_jobs` jobs every 5 s whose commands stamp their own start. Reports
/// the command-start lag, whether every slot ran exactly once (runs in the database and stamps
/// both counted per (job, slot)), transactions per firing and the jobs each scheduler carries.
pub(crate) fn scaleout(plan: &Plan, url: &str, out: &mut Map<String, Value>) -> Res<()> {
    // The machine's own limit for a burst of this many commands (see `fire::spawn_floor`).
    let floor = spawn_floor(&bench_dir()?.join("scaleout"), plan.scale_jobs)?;
    out.insert(
        "scaleout_spawn_floor_p99_ms".into(),
        json!(round(pct(&floor, 0.99), 1)),
    );
    for n in [1usize, 3] {
        eprintln!("bench: scaleout with {n} scheduler(s) …");
        let r = scale_round(plan, url, n)?;
        let lag = &r["lag_p99_ms"];
        if n == 3 {
            out.insert("scaleout_fire_lag_p99_ms".into(), lag.clone());
            out.insert("scaleout_fire_lag_p50_ms".into(), r["lag_p50_ms"].clone());
            out.insert(
                "scaleout_xact_per_firing_3".into(),
                r["xact_per_firing"].clone(),
            );
            let once = r["exactly_once"].as_bool() == Some(true);
            out.insert("scaleout_exactly_once".into(), json!(u8::from(once)));
            out.insert("scaleout_jobs_per_scheduler".into(), r["jobs_min"].clone());
        } else {
            out.insert("scaleout_1_fire_lag_p99_ms".into(), lag.clone());
            out.insert(
                "scaleout_xact_per_firing_1".into(),
                r["xact_per_firing"].clone(),
            );
            let once = r["exactly_once"].as_bool() == Some(true);
            out.insert("scaleout_1_exactly_once".into(), json!(u8::from(once)));
        }
        out.insert(format!("scaleout_{n}"), r);
    }
    Ok(())
}

/// A database of its own, dropped with this value: `pg_stat_database` counts transactions per
/// database, and other clients of the bench's database (tests, other benches) would count too.
struct ScratchDb {
    name: String,
    url: String,
    base: String,
}

impl ScratchDb {
    /// None when the role may not `CREATE DATABASE`: the round then counts in the bench's
    /// database, whoever else uses it (said in its figures as `xact_db_shared`).
    fn create(base: &str) -> Res<Option<ScratchDb>> {
        let name = format!("exactly_bench_scaleout_{}", std::process::id());
        let mut c = pg_connect(base)?;
        c.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))?;
        if let Err(e) = c.batch_execute(&format!("CREATE DATABASE {name}")) {
            eprintln!("bench: scaleout counts transactions in the shared database: {e}");
            return Ok(None);
        }
        // postgres://user:pass@host:port/DB?query: the database is the last path segment.
        let (head, query) = match base.split_once('?') {
            Some((h, q)) => (h, Some(q)),
            None => (base, None),
        };
        let Some((prefix, _)) = head.rsplit_once('/') else {
            return Err(format!("EXACTLY_BENCH_PG {} names no database", redact(base)).into());
        };
        let url = match query {
            Some(q) => format!("{prefix}/{name}?{q}"),
            None => format!("{prefix}/{name}"),
        };
        Ok(Some(ScratchDb {
            name,
            url,
            base: base.to_string(),
        }))
    }
}

impl Drop for ScratchDb {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = pg_connect(&self.base).and_then(|mut c| Ok(c.batch_execute(&sql)?)) {
            eprintln!("bench: WARNING: database {} not dropped: {e}", self.name);
        }
    }
}

/// Transactions ended in the database so far: (all, rolled back). A transaction that failed
/// for serialization (40001) at a statement or at COMMIT counts as rolled back.
fn xacts(c: &mut postgres::Client) -> Res<(i64, i64)> {
    // Stats are read from a snapshot taken at the first read of a transaction: clear it.
    c.batch_execute("SELECT pg_stat_clear_snapshot()")?;
    let row = c.query_one(
        "SELECT (xact_commit + xact_rollback)::bigint, xact_rollback::bigint \
         FROM pg_stat_database WHERE datname = current_database()",
        &[],
    )?;
    Ok((row.get(0), row.get(1)))
}

fn scale_round(plan: &Plan, url: &str, n: usize) -> Res<Value> {
    let dir = bench_dir()?.join(format!("scaleout-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let scratch = ScratchDb::create(url)?;
    let url = scratch.as_ref().map_or(url, |d| d.url.as_str());
    let schema = PgSchema::create(url, "scaleout")?;
    drop(Store::open(&schema.url)?);
    let stamps = dir.join("stamps.txt");
    let jobs = dir.join("jobs.toml");
    let mut toml = String::new();
    for j in 0..plan.scale_jobs {
        toml.push_str(&format!(
            "[[job]]\nname = \"s-{j:04}\"\nevery = \"5s\"\nlease = \"4s\"\ntimeout = \"3s\"\n\
             overlap = \"coalesce\"\ncommand = {}\n\n",
            stamp_command(&stamps, j)?
        ));
    }
    std::fs::write(&jobs, toml)?;
    let mut stats = pg_connect(url)?;
    let xact_before = xacts(&mut stats)?;
    let mut children: Vec<Child> = Vec::new();
    for k in 0..n {
        let log = std::fs::File::create(dir.join(format!("s{k}.log")))?;
        children.push(
            Command::new(exe())
                .args(["--db", &schema.url, "run", path_str(&jobs)?])
                // A short grace: an overloaded round must still end (its runs are a stamp).
                .args(["--owner", &format!("s{k}"), "--grace", "5s"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(log))
                .spawn()?,
        );
    }
    let started_ms = exactly::time::now().timestamp_millis();
    let until = Instant::now() + Duration::from_secs_f64(plan.scale_secs);
    let mut early = None;
    while Instant::now() < until && early.is_none() {
        for (k, c) in children.iter_mut().enumerate() {
            if let Some(st) = c.try_wait()? {
                early = Some(format!("scheduler s{k} stopped early ({st})"));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stopped_ms = exactly::time::now().timestamp_millis();
    for c in &children {
        // SAFETY: signalling the schedulers we started; SIGTERM stops each gracefully.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for c in children.iter_mut() {
        while c.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                early.get_or_insert_with(|| "a scheduler did not stop within 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    if let Some(e) = early {
        return Err(format!("{e}; see {}", dir.display()).into());
    }
    // Backends flush their counts at exit and at most every second: let them.
    std::thread::sleep(Duration::from_millis(1500));
    let (xact_after, rollback_after) = xacts(&mut stats)?;
    let (xact, rollbacks) = (xact_after - xact_before.0, rollback_after - xact_before.1);

    // Measured: slots after the schedulers settled, up to the last one that fell due a full
    // second before they were stopped (its runs had time to start).
    let from = started_ms + SETTLE_MS;
    let to = stopped_ms - 1000;
    let first = from.div_euclid(5000) * 5000 + if from % 5000 == 0 { 0 } else { 5000 };
    let slots: Vec<i64> = (first..=to).step_by(5000).collect();
    let expected = slots.len() * plan.scale_jobs;
    let in_range = |ms: i64| ms >= first && ms <= to;
    let all = read_stamps(&stamps)?;
    let mut per: HashMap<(&str, &str), usize> = HashMap::new();
    let mut lags: Vec<f64> = Vec::new();
    for s in all.iter().filter(|s| in_range(s.slot_ms)) {
        *per.entry((s.job.as_str(), s.slot.as_str())).or_default() += 1;
        lags.push(s.lag_ms);
    }
    let stamped_twice = per.values().filter(|&&k| k > 1).count();
    let stamped = per.len();
    let mut db = pg_connect(&schema.url)?;
    let fmt = |ms: i64| -> Res<String> {
        Ok(exactly::time::fmt(
            chrono::DateTime::from_timestamp_millis(ms).ok_or("instant out of range")?,
        ))
    };
    let (lo, hi) = (fmt(first)?, fmt(to)?);
    let one = |db: &mut postgres::Client, sql: &str| -> Res<i64> {
        Ok(db.query_one(sql, &[&lo, &hi])?.get(0))
    };
    let firings = one(
        &mut db,
        "SELECT count(*) FROM exactly_firings WHERE scheduled_at >= $1 AND scheduled_at <= $2",
    )?;
    let ran = one(
        &mut db,
        "SELECT count(*) FROM exactly_firings WHERE scheduled_at >= $1 AND scheduled_at <= $2 AND \
         state = 'ran'",
    )?;
    let missed = one(
        &mut db,
        "SELECT count(*) FROM exactly_firings WHERE scheduled_at >= $1 AND scheduled_at <= $2 AND \
         state = 'missed'",
    )?;
    let runs_twice = one(
        &mut db,
        "SELECT count(*) FROM (SELECT 1 FROM exactly_runs WHERE scheduled_at >= $1 AND \
         scheduled_at <= $2
         GROUP BY job_key, scheduled_at HAVING count(*) > 1) AS t",
    )?;
    let runs = one(
        &mut db,
        "SELECT count(*) FROM exactly_runs WHERE scheduled_at >= $1 AND scheduled_at <= $2",
    )?;
    // When each run was decided (lease won, run recorded): the lag before its command starts.
    // A run decided ahead of its slot records the slot as its start: its firing's record is
    // when it was decided (see fire.rs, `DECIDED`).
    let decided: Vec<f64> = db
        .query(
            "SELECT coalesce(percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY
               extract(epoch FROM least(r.started_at::timestamptz, \
                 coalesce(f.created_at, r.started_at)::timestamptz) \
                 - r.scheduled_at::timestamptz) * 1000), \
               ARRAY[]::float8[])
             FROM exactly_runs r LEFT JOIN exactly_firings f \
               ON f.job_key = r.job_key AND f.scheduled_at = r.scheduled_at \
             WHERE r.scheduled_at >= $1 AND r.scheduled_at <= $2",
            &[&lo, &hi],
        )?
        .first()
        .map(|r| r.get(0))
        .unwrap_or_default();
    // Why slots were missed: "database unavailable" is a batch that kept conflicting (or a
    // real outage); the others were decided past their window.
    let missed_why: Vec<(String, i64)> = db
        .query(
            "SELECT coalesce(detail, ''), count(*) FROM exactly_firings
             WHERE scheduled_at >= $1 AND scheduled_at <= $2 AND state = 'missed'
             GROUP BY 1 ORDER BY 2 DESC",
            &[&lo, &hi],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let all_firings: i64 = db
        .query_one("SELECT count(*) FROM exactly_firings", &[])?
        .get(0);
    let duplicates: i64 = db
        .query_one(
            "SELECT coalesce(sum(n), 0)::bigint FROM exactly_counters WHERE kind = \
             'firing_duplicate'",
            &[],
        )?
        .get(0);
    let carried: Vec<(String, i64)> = db
        .query(
            "SELECT owner, count(DISTINCT job_key) FROM exactly_runs
             WHERE scheduled_at >= $1 AND scheduled_at <= $2 GROUP BY owner ORDER BY owner",
            &[&lo, &hi],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    drop(db);
    drop(schema);
    drop(stats);
    let shared = scratch.is_none();
    drop(scratch);
    lags.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        lags.get(((lags.len() as f64 - 1.0).max(0.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    let exactly_once = stamped_twice == 0
        && runs_twice == 0
        && stamped == expected
        && runs as usize == expected
        && firings as usize == expected;
    Ok(json!({
        "schedulers": n,
        "jobs": plan.scale_jobs,
        "secs": plan.scale_secs,
        "slots_measured": slots.len(),
        "expected_runs": expected,
        "firings": firings,
        "firings_ran": ran,
        "firings_missed": missed,
        "runs": runs,
        "runs_twice": runs_twice,
        "stamped": stamped,
        "stamped_twice": stamped_twice,
        "exactly_once": exactly_once,
        "lag_p50_ms": round(pct(0.5), 1),
        "lag_p99_ms": round(pct(0.99), 1),
        "lag_max_ms": round(pct(1.0), 1),
        "decided_lag_p50_ms": decided.first().map(|v| round(*v, 1)),
        "decided_lag_p99_ms": decided.get(1).map(|v| round(*v, 1)),
        "xact": xact,
        "xact_rollback": rollbacks,
        "xact_db_shared": shared,
        "firings_all": all_firings,
        "xact_per_firing": round(xact as f64 / all_firings.max(1) as f64, 2),
        "duplicates": duplicates,
        "missed_why": missed_why
            .iter()
            .map(|(d, k)| json!({"detail": d, "firings": k}))
            .collect::<Vec<_>>(),
        "jobs_carried": carried
            .iter()
            .map(|(o, k)| json!({"owner": o, "jobs": k}))
            .collect::<Vec<_>>(),
        "jobs_min": carried.iter().map(|(_, k)| *k).min().unwrap_or(0),
        "jobs_max": carried.iter().map(|(_, k)| *k).max().unwrap_or(0),
    }))
}

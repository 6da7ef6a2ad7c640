use super::*;

/// The poll fixture of `n` effects, built once per fixture version and day (its runs must fall
/// in the last week, as a live ledger's do) and cached under `target/bench/`.
pub(crate) fn fixture(plan: &Plan, root: &Path, n: u64) -> Res<PathBuf> {
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
pub(crate) fn fill(plan: &Plan, path: &Path, n: u64) -> Res<()> {
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
             VALUES (?1, 'every 5m', 300, 60, 60000, 'coalesce', ?2, ?2, 60, 'bench.toml', \
             'bench', ?3)",
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
                lease::RELEASED.to_string()
            };
            lease.execute(params![key, 100 + j as i64, until, ago(month_ms)])?;
        }
        let mut eff = tx.prepare(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
               response, created_at, updated_at, action_id, target_id, input_digest, attempt, \
               version)
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
pub(crate) fn poll_ms(plan: &Plan, db: &str) -> Res<f64> {
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

use super::*;

pub(crate) fn fire_lag(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
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

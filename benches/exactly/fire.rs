use super::*;

/// What one scheduler run measured.
pub(crate) struct Lag {
    /// Command start minus slot, ms, one per stamp, sorted.
    pub(crate) start: Vec<f64>,
    /// When each run's firing was decided minus slot, ms, sorted: [`DECIDED`]. Negative for a
    /// firing decided ahead of its slot.
    pub(crate) decided: Vec<f64>,
    pub(crate) missed: u64,
    pub(crate) firings: u64,
    /// The scheduler's CPU (with its watchdog and spawner, without the commands) per firing.
    pub(crate) cpu_ms_per_firing: f64,
}

pub(crate) fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// When a run's firing was decided: the run's recorded start, or — for a run decided ahead of
/// its slot, whose recorded start is the slot (`scheduler/batches.rs`) — its firing's record,
/// which is older. `runs.started_at` alone, as before deciding ahead, would read 0 for those.
const DECIDED: &str = "min(r.started_at, coalesce(f.created_at, r.started_at))";

/// `exactly run` with `jobs` jobs every 5 s for `secs`, each command a stamp. Only slots after
/// the scheduler started count: catch-up of earlier ones is not lag.
pub(crate) fn fire_run(dir: &Path, jobs: usize, secs: f64) -> Res<Lag> {
    fire_run_env(dir, jobs, secs, &[])
}

/// [`fire_run`] with `env` added to the scheduler's environment (which its commands inherit).
pub(crate) fn fire_run_env(dir: &Path, jobs: usize, secs: f64, env: &[(&str, &str)]) -> Res<Lag> {
    std::fs::create_dir_all(dir)?;
    let db = dir.join("fire.db");
    let stamps = dir.join("stamps.txt");
    for f in [
        db.clone(),
        dir.join("fire.db-wal"),
        dir.join("fire.db-shm"),
        stamps.clone(),
    ] {
        let _ = std::fs::remove_file(f);
    }
    let cmd = stamp_argv(&stamps)?;
    let quoted: Vec<String> = cmd.iter().map(|a| format!("{a:?}")).collect();
    let mut toml = String::new();
    for j in 0..jobs {
        // Distinct commands, so the duplicate-registration lint stays quiet.
        toml.push_str(&format!(
            "[[job]]\nname = \"tick-{j:04}\"\nevery = \"5s\"\nlease = \"4s\"\ntimeout = \"3s\"\n\
             overlap = \"coalesce\"\ncommand = [{}, \"{j}\"]\n\n",
            quoted.join(", ")
        ));
    }
    let jobs_file = dir.join("jobs.toml");
    std::fs::write(&jobs_file, toml)?;
    let started = exactly::time::now_text();
    let log = dir.join("run.log");
    let mut child: Child = Command::new(exe())
        .args(["--db", path_str(&db)?, "run", path_str(&jobs_file)?])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log)?))
        .spawn()?;
    let pid = child.id();
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let mut cpu_first: Option<u64> = None;
    let mut cpu_last = 0;
    while Instant::now() < until {
        if let Some(st) = child.try_wait()? {
            return Err(format!("exactly run stopped early ({st}); see {}", log.display()).into());
        }
        // From the first firing on: registering the jobs is not firing them.
        let ticks = scheduler_ticks(pid)?;
        if cpu_first.is_none() && std::fs::metadata(&stamps).is_ok() {
            cpu_first = Some(ticks);
        }
        cpu_last = ticks;
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(&mut child)?;
    let c = Connection::open(&db)?;
    let mut stmt = c.prepare(&format!(
        "SELECT (julianday({DECIDED}) - julianday(r.scheduled_at)) * 86400000.0 \
         FROM exactly_runs r LEFT JOIN exactly_firings f \
           ON f.job_key = r.job_key AND f.scheduled_at = r.scheduled_at \
         WHERE r.scheduled_at >= ?1"
    ))?;
    let mut decided: Vec<f64> = stmt
        .query_map([&started], |r| r.get::<_, f64>(0))?
        .collect::<rusqlite::Result<_>>()?;
    decided.sort_by(f64::total_cmp);
    let count = |sql: &str| -> Res<u64> {
        Ok(c.query_row(sql, [&started], |r| r.get::<_, i64>(0))? as u64)
    };
    let missed = count(
        "SELECT COUNT(*) FROM exactly_firings WHERE state = 'missed' AND scheduled_at >= ?1",
    )?;
    let firings = count("SELECT COUNT(*) FROM exactly_firings WHERE scheduled_at >= ?1")?;
    let mut start: Vec<f64> = read_stamps(&stamps)?
        .into_iter()
        .filter(|s| s.slot.as_str() >= started.as_str())
        .map(|s| s.lag_ms)
        .collect();
    start.sort_by(f64::total_cmp);
    if start.is_empty() {
        return Err(format!("no command started in {secs} s (see {})", log.display()).into());
    }
    let cpu_ms = cpu_last.saturating_sub(cpu_first.unwrap_or(cpu_last)) as f64 * 1000.0
        / clock_ticks_per_s();
    Ok(Lag {
        cpu_ms_per_firing: cpu_ms / start.len().max(1) as f64,
        start,
        decided,
        missed,
        firings,
    })
}

/// CPU ticks of the scheduler and its own helper processes (its watchdog, `exactly`, and its
/// spawner, `exactly-spawner`): not the jobs' commands, nor anything under them.
fn scheduler_ticks(pid: u32) -> Res<u64> {
    let ours = |comm: &str| comm.starts_with("exactly");
    let mut total = cpu_ticks(pid)?;
    for (k, comm) in descendants(pid, ours) {
        if ours(&comm) {
            total += cpu_ticks(k).unwrap_or(0);
        }
    }
    Ok(total)
}

/// One stamp command of a floor, started at once with nothing between it and the kernel.
fn floor_stamp(cmd: &[String], i: usize) -> Res<Child> {
    Ok(Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("EXACTLY_SCHEDULED_AT", "floor")
        .env("EXACTLY_JOB", i.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?)
}

/// The machine's own limit: `n` of the same stamp commands started back to back from this
/// process (`posix_spawn`, no scheduler, no database), each one's start minus the instant the
/// first was asked for, ms, sorted. A burst of `n` firings due at one instant cannot start
/// faster than this.
pub(crate) fn spawn_floor(dir: &Path, n: usize) -> Res<Vec<f64>> {
    std::fs::create_dir_all(dir)?;
    let stamps = dir.join("floor.txt");
    let _ = std::fs::remove_file(&stamps);
    let cmd = stamp_argv(&stamps)?;
    let t0 = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let mut kids = Vec::with_capacity(n);
    for i in 0..n {
        kids.push(floor_stamp(&cmd, i)?);
    }
    for mut k in kids {
        k.wait()?;
    }
    let t0 = t0.as_nanos() as f64 / 1e6;
    let mut lags = Vec::with_capacity(n);
    for line in std::fs::read_to_string(&stamps)?.lines() {
        let ns = line.split_whitespace().next().ok_or("empty stamp")?;
        lags.push(ns.parse::<f64>()? / 1e6 - t0);
    }
    lags.sort_by(f64::total_cmp);
    Ok(lags)
}

/// Command start lag at 100 firings/s (500 jobs every 5 s) and 400 firings/s (2,000 jobs).
pub(crate) fn fire_lag(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("fire");
    for (jobs, suffix) in [(plan.fire_jobs, ""), (plan.fire_jobs_400, "_400")] {
        let floor = spawn_floor(&dir, jobs)?;
        out.insert(
            format!("spawn_floor_p50_ms{suffix}"),
            json!(round(pct(&floor, 0.50), 1)),
        );
        out.insert(
            format!("spawn_floor_p99_ms{suffix}"),
            json!(round(pct(&floor, 0.99), 1)),
        );
    }
    for (jobs, suffix) in [(plan.fire_jobs, ""), (plan.fire_jobs_400, "_400")] {
        eprintln!("bench: fire lag, {jobs} jobs every 5 s …");
        let lag = fire_run(&dir.join(format!("jobs{jobs}")), jobs, plan.fire_secs)?;
        let mut put = |k: &str, v: Value| out.insert(format!("{k}{suffix}"), v);
        put("fire_lag_p50_ms", json!(round(pct(&lag.start, 0.50), 1)));
        put("fire_lag_p99_ms", json!(round(pct(&lag.start, 0.99), 1)));
        put("fire_lag_max_ms", json!(round(pct(&lag.start, 1.0), 1)));
        put(
            "decision_lag_p50_ms",
            json!(round(pct(&lag.decided, 0.50), 1)),
        );
        put(
            "decision_lag_p99_ms",
            json!(round(pct(&lag.decided, 0.99), 1)),
        );
        put("fire_runs", json!(lag.start.len()));
        put("fire_firings", json!(lag.firings));
        put("fire_missed", json!(lag.missed));
        put(
            "scheduler_cpu_ms_per_firing",
            json!(round(lag.cpu_ms_per_firing, 3)),
        );
    }
    Ok(())
}

/// The realistic mix: `jobs` jobs `every = "{every}s"` with a jitter of a second less, so their
/// firings spread over the interval (10,000 over a minute: about 167 a second) instead of
/// falling due together. Command start lag is measured from each firing's due time (its slot
/// plus its jitter, the hash every scheduler computes: `schedule::jitter_for`), over one whole
/// interval's slot after the scheduler started; its floor is the bench itself starting the same
/// stamp commands at the same instants (`spread_floor`).
pub(crate) fn fire_spread(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let (jobs, every) = if plan.smoke { (20, 4) } else { (10_000, 60) };
    let dir = root.join("fire").join(format!("spread{jobs}"));
    eprintln!("bench: fire lag, {jobs} jobs every {every} s spread by jitter …");
    let (lag, offsets) = spread_run(&dir, jobs, every)?;
    eprintln!(
        "bench: spawn floor, the same {} starts at the same instants …",
        offsets.len()
    );
    let floor = spread_floor(&dir, &offsets)?;
    let mut put = |k: &str, v: Value| out.insert(format!("{k}_spread"), v);
    put("fire_lag_p50_ms", json!(round(pct(&lag.start, 0.50), 1)));
    put("fire_lag_p99_ms", json!(round(pct(&lag.start, 0.99), 1)));
    put("fire_lag_max_ms", json!(round(pct(&lag.start, 1.0), 1)));
    put("spawn_floor_p50_ms", json!(round(pct(&floor, 0.50), 1)));
    put("spawn_floor_p99_ms", json!(round(pct(&floor, 0.99), 1)));
    put(
        "decision_lag_p99_ms",
        json!(round(pct(&lag.decided, 0.99), 1)),
    );
    put("fire_runs", json!(lag.start.len()));
    put("fire_firings", json!(lag.firings));
    put("fire_missed", json!(lag.missed));
    eprintln!(
        "bench: spread: fire lag p99 {:.1} ms, its floor p99 {:.1} ms ({} runs, {} missed)",
        pct(&lag.start, 0.99),
        pct(&floor, 0.99),
        lag.start.len(),
        lag.missed
    );
    Ok(())
}

/// One `exactly run` of [`fire_spread`]'s jobs until one whole interval's slot has passed: the
/// lags from due time (start and decision), and each firing's due time after its slot, ms.
fn spread_run(dir: &Path, jobs: usize, every: u64) -> Res<(Lag, Vec<f64>)> {
    std::fs::create_dir_all(dir)?;
    let db = dir.join("fire.db");
    let stamps = dir.join("stamps.txt");
    for f in ["fire.db", "fire.db-wal", "fire.db-shm", "stamps.txt"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    let cmd = stamp_argv(&stamps)?;
    let quoted: Vec<String> = cmd.iter().map(|a| format!("{a:?}")).collect();
    let jitter = Duration::from_secs(every - 1);
    let mut toml = String::new();
    for j in 0..jobs {
        toml.push_str(&format!(
            "[[job]]\nname = \"tick-{j:05}\"\nevery = \"{every}s\"\njitter = \"{}s\"\n\
             lease = \"4s\"\ntimeout = \"3s\"\noverlap = \"coalesce\"\ncommand = [{}, \"{j}\"]\n\n",
            every - 1,
            quoted.join(", ")
        ));
    }
    let jobs_file = dir.join("jobs.toml");
    std::fs::write(&jobs_file, toml)?;
    let log = dir.join("run.log");
    let mut child: Child = Command::new(exe())
        .args(["--db", path_str(&db)?, "run", path_str(&jobs_file)?])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log)?))
        .spawn()?;
    // Reading and checking 10,000 jobs takes the scheduler most of a minute here: the slot
    // measured is the first whole interval's once it fires.
    let ready_by = Instant::now() + Duration::from_secs(600);
    while !std::fs::read_to_string(&log)?.contains(" job(s)") {
        if let Some(st) = child.try_wait()? {
            return Err(format!("exactly run stopped early ({st}); see {}", log.display()).into());
        }
        if Instant::now() > ready_by {
            stop(&mut child)?;
            return Err(
                format!("exactly run did not start in 600 s; see {}", log.display()).into(),
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let t0 = exactly::time::now();
    let every_ms = every as i64 * 1000;
    let first = (t0.timestamp_millis() + 1_000) / every_ms * every_ms + every_ms;
    let slot = chrono::DateTime::from_timestamp_millis(first).ok_or("no such slot")?;
    let slot_text = exactly::time::fmt(slot);
    let end_ms = first + every_ms + 1_500;
    while exactly::time::now().timestamp_millis() < end_ms {
        if let Some(st) = child.try_wait()? {
            return Err(format!("exactly run stopped early ({st}); see {}", log.display()).into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(&mut child)?;
    let due_ms =
        |job: &str| exactly::schedule::jitter_for(job, &slot_text, jitter).as_secs_f64() * 1000.0;
    let c = Connection::open(&db)?;
    let mut stmt = c.prepare(&format!(
        "SELECT r.job_key, (julianday({DECIDED}) - julianday(r.scheduled_at)) * 86400000.0 \
         FROM exactly_runs r LEFT JOIN exactly_firings f \
           ON f.job_key = r.job_key AND f.scheduled_at = r.scheduled_at \
         WHERE r.scheduled_at = ?1"
    ))?;
    let mut decided: Vec<f64> = stmt
        .query_map([&slot_text], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?
        .into_iter()
        .map(|(job, ms)| ms - due_ms(&job))
        .collect();
    decided.sort_by(f64::total_cmp);
    let count = |sql: &str| -> Res<u64> {
        Ok(c.query_row(sql, [&slot_text], |r| r.get::<_, i64>(0))? as u64)
    };
    let missed =
        count("SELECT COUNT(*) FROM exactly_firings WHERE state = 'missed' AND scheduled_at = ?1")?;
    let firings = count("SELECT COUNT(*) FROM exactly_firings WHERE scheduled_at = ?1")?;
    let mut start: Vec<f64> = read_stamps(&stamps)?
        .into_iter()
        .filter(|s| s.slot == slot_text)
        .map(|s| s.lag_ms - due_ms(&s.job))
        .collect();
    start.sort_by(f64::total_cmp);
    if start.is_empty() {
        return Err(format!("no command started for {slot_text} (see {})", log.display()).into());
    }
    let offsets = (0..jobs).map(|j| due_ms(&format!("tick-{j:05}"))).collect();
    Ok((
        Lag {
            start,
            decided,
            missed,
            firings,
            cpu_ms_per_firing: f64::NAN,
        },
        offsets,
    ))
}

/// SIGTERM to a scheduler, and its exit within 30 s.
fn stop(child: &mut Child) -> Res<()> {
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
    Ok(())
}

/// The machine's own lag at the spread's rate: the stamp command started by this process at
/// each instant of `offsets` (ms after a common start), each start minus its instant, ms,
/// sorted.
fn spread_floor(dir: &Path, offsets: &[f64]) -> Res<Vec<f64>> {
    let stamps = dir.join("floor.txt");
    let _ = std::fs::remove_file(&stamps);
    let cmd = stamp_argv(&stamps)?;
    let mut order: Vec<(usize, f64)> = offsets.iter().copied().enumerate().collect();
    order.sort_by(|a, b| a.1.total_cmp(&b.1));
    let wall_ms = || -> Res<f64> {
        Ok(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64()
            * 1000.0)
    };
    let t0 = wall_ms()? + 500.0;
    let mut kids: Vec<Child> = Vec::new();
    for (i, at) in &order {
        let wait = t0 + at - wall_ms()?;
        if wait > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait / 1000.0));
        }
        kids.push(floor_stamp(&cmd, *i)?);
        // Reaped as they go: thousands of zombies are not what a scheduler leaves.
        kids.retain_mut(|k| !matches!(k.try_wait(), Ok(Some(_))));
    }
    for mut k in kids {
        k.wait()?;
    }
    let mut lags = Vec::with_capacity(offsets.len());
    for line in std::fs::read_to_string(&stamps)?.lines() {
        let mut w = line.split_whitespace();
        let (Some(ns), Some(_), Some(i)) = (w.next(), w.next(), w.next()) else {
            return Err(format!("floor stamp {line:?} is not 'NANOSECONDS SLOT JOB'").into());
        };
        let i: usize = i.parse()?;
        let at = offsets.get(i).ok_or("a floor stamp of no start")?;
        lags.push(ns.parse::<f64>()? / 1e6 - (t0 + at));
    }
    lags.sort_by(f64::total_cmp);
    Ok(lags)
}

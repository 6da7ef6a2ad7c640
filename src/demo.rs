//! `exactly demo`: a live simulated workload — a dozen jobs run by two real schedulers
//! (blue-green), effects through the real ledger against a simulated far side with latency,
//! lost answers and timeouts, plus an old cron job that overruns its lease — shown in
//! `exactly top`. Within a minute every counter on the dashboard moves.
use crate::{time, Error, Result};
use clap::Args;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub(crate) struct DemoArgs {
    /// Only run the workload (no dashboard), then exit, leaving the database --db names.
    #[arg(long)]
    pub no_ui: bool,
    /// How long to run (default: until the dashboard quits; 30s with --no-ui).
    #[arg(long = "for", value_name = "DUR")]
    pub dur: Option<String>,
}

const DEMO_SH: &str = include_str!("../assets/demo/demo.sh");
const WRAPPER_SH: &str = include_str!("../assets/demo/legacy-wrapper.sh");
const JOBS_TOML: &str = include_str!("../assets/demo/jobs.toml");

/// The demo's folder in the temporary directory (its scripts, logs and, without --db, its
/// database), removed however the demo ends: declared before the children, so dropped after
/// them, once nothing writes there any more.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Children that are stopped (SIGTERM, then SIGKILL after a grace) however the demo ends.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &self.0 {
            // SAFETY: signalling our own children.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in &mut self.0 {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn demo_main(db: &Option<String>, a: DemoArgs) -> Result<i32> {
    // Ctrl-C, a closed terminal or a kill ends the demo the same way as its time running out,
    // so its folder is still removed: heard from the start, before anything is made.
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register(sig, interrupted.clone())?;
    }
    let exe = std::env::current_exe()?;
    let exe_s = exe.to_string_lossy().into_owned();
    let dir = std::env::temp_dir().join(format!("exactly-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let scratch = Scratch(dir.clone());
    let dir_s = dir.to_string_lossy().into_owned();
    // Only a database the demo creates, unless --db names one.
    let db_path = match db {
        Some(p) => p.clone(),
        None => dir.join("demo.db").to_string_lossy().into_owned(),
    };
    let fill = |s: &str| s.replace("__EXE__", &exe_s).replace("__DIR__", &dir_s);
    std::fs::write(dir.join("demo.sh"), fill(DEMO_SH))?;
    std::fs::write(dir.join("legacy-wrapper.sh"), fill(WRAPPER_SH))?;
    std::fs::write(dir.join("jobs.toml"), fill(JOBS_TOML))?;
    std::fs::write(dir.join("far-side.log"), "")?;
    crate::open(Some(&db_path), crate::Access::Write)?;
    let dur = match &a.dur {
        Some(d) => Some(time::parse_duration(d)?),
        None if a.no_ui => Some(Duration::from_secs(30)),
        None => None,
    };

    let mut children = Children(Vec::new());
    for owner in ["scheduler-blue", "scheduler-green"] {
        children.0.push(scheduler(&exe, &db_path, &dir, owner)?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let legacy = {
        let stop = stop.clone();
        let (db_path, dir) = (db_path.clone(), dir.clone());
        std::thread::spawn(move || legacy_cron(&db_path, &dir, &stop))
    };
    let code = if a.no_ui {
        eprintln!(
            "exactly demo: running for {} on {}",
            humantime::format_duration(dur.unwrap_or_default()),
            crate::shown_db(&db_path)
        );
        let end = Instant::now() + dur.unwrap_or_default();
        while Instant::now() < end && !interrupted.load(Ordering::SeqCst) {
            std::thread::sleep(
                Duration::from_millis(100).min(end.saturating_duration_since(Instant::now())),
            );
        }
        0
    } else {
        let mut top = Command::new(&exe);
        top.arg("--db").arg(&db_path).arg("top");
        let mut child = top
            .spawn()
            .map_err(|e| Error::io(format!("cannot start the dashboard: {e}"), e))?;
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                break status.code().unwrap_or(1);
            }
            if dur.is_some_and(|d| start.elapsed() >= d) || interrupted.load(Ordering::SeqCst) {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                let _ = child.wait();
                break 0;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    stop.store(true, Ordering::SeqCst);
    let _ = legacy.join();
    drop(children);
    drop(scratch);
    match db {
        Some(_) => {
            let shown = crate::shown_db(&db_path);
            eprintln!(
                "exactly demo: stopped; the database is {shown} (try: exactly --db {shown} status)"
            );
        }
        None => eprintln!(
            "exactly demo: stopped; its files are removed (give --db FILE to keep the database)"
        ),
    }
    Ok(code)
}

fn scheduler(exe: &Path, db: &str, dir: &Path, owner: &str) -> Result<Child> {
    let log = std::fs::File::create(dir.join(format!("{owner}.log")))?;
    Command::new(exe)
        .arg("--db")
        .arg(db)
        .arg("run")
        .arg(dir.join("jobs.toml"))
        .arg("--owner")
        .arg(owner)
        .arg("--grace")
        .arg("2s")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .map_err(|e| Error::io(format!("cannot start the demo scheduler: {e}"), e))
}

/// Two hosts run the same old cron job; the first overruns its lease and is fenced.
fn legacy_cron(db: &str, dir: &Path, stop: &AtomicBool) {
    let wrapper: PathBuf = dir.join("legacy-wrapper.sh");
    let spawn = |owner: &str, sleep: &str| {
        Command::new("sh")
            .arg(&wrapper)
            .arg(owner)
            .arg(sleep)
            .env("EXACTLY_DB", db)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()
    };
    // The second host takes an expired lease over only once the clock-skew margin has passed
    // too, so the first one's overrun spans the margin.
    let skew = time::max_skew();
    let overrun = format!("{:.1}", 1.6 + skew.as_secs_f64());
    while !stop.load(Ordering::SeqCst) {
        let a = spawn("cron@host-a", &overrun);
        std::thread::sleep(Duration::from_millis(1200) + skew);
        let b = spawn("cron@host-b", "0.2");
        for mut c in [a, b].into_iter().flatten() {
            let _ = c.wait();
        }
        for _ in 0..30 {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

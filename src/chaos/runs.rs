//! The scheduler on machines as they really are, with real `exactly run` processes and
//! commands that write every start, end and stop to a book:
//! - `run-end-lost`: a run's end cannot be recorded for a while after its command exited 0 (the
//!   SQLite database's folder remounted read-only under the scheduler, in a mount namespace of
//!   its own; or, on PostgreSQL, every connection cut and refused by a proxy). The firing must
//!   not run again.
//! - `frozen-scheduler`: two schedulers on one database spelled two ways; the one running the
//!   job is frozen (SIGSTOP) past its lease while the other takes the job over, then thawed.
//!   Its command must be stopped before the other's starts.
//! - `overload`: two schedulers with more jobs every second than two cores can run. Firings
//!   may be missed or never started (recorded so), never run twice.
//!
//! The book is the far side: a firing whose command wrote `end` twice ran twice; a `start` while
//! another copy of the job had not ended or stopped is an overlap.
use super::proc::Running;
use super::proxy::{self, Proxy};
use super::sched::Watcher;
use super::{sh_quote, Harness, Tally};
use crate::{Error, Result};
use indicatif::ProgressBar;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Jobs in `overload`: two schedulers on two cores cannot run them all each second.
const OVERLOAD_JOBS: usize = 300;
/// The clock-skew margin the scenarios' schedulers assume (`EXACTLY_MAX_SKEW`): their clocks
/// are one machine's, so takeovers need not wait the default 2 s.
const SKEW: &str = "300ms";
/// When `frozen-scheduler`'s schedulers take a silent one for dead
/// (`EXACTLY_SCHEDULER_DEAD_AFTER`).
const DEAD_AFTER: &str = "4s";

pub(super) fn run(
    name: &str,
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
) -> Result<()> {
    match name {
        "run-end-lost" => run_end_lost(h, t, n, bar),
        "frozen-scheduler" => frozen(h, t, n, bar),
        "overload" => overload(h, t, n, bar),
        other => Err(Error::Usage(format!("no scenario named {other}"))),
    }
}

/// A scenario's folder, jobs file and book.
struct Site {
    dir: PathBuf,
    book: PathBuf,
    jobs: PathBuf,
}

impl Site {
    fn new(h: &Harness, name: &str) -> Result<Site> {
        let dir = h.dir.join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(Site {
            book: dir.join("book.txt"),
            jobs: dir.join("jobs.toml"),
            dir,
        })
    }

    /// A command that books its start, its end, and its stop by SIGTERM, around `body`.
    fn command(&self, body: &str) -> String {
        let book = sh_quote(&self.book.to_string_lossy());
        let me = "$EXACTLY_JOB $EXACTLY_SCHEDULED_AT $EXACTLY_FENCING_TOKEN";
        let cmd = format!(
            "trap 'echo stop {me} >> {book}; exit 143' TERM; echo start {me} >> {book}; {body}; \
             echo end {me} >> {book}"
        );
        toml_string(&cmd)
    }

    fn write_jobs(&self, jobs: &[(String, &str, &str)], body: &str) -> Result<()> {
        let mut text = String::new();
        for (name, every, lease) in jobs {
            text.push_str(&format!(
                "[[job]]\nname = {}\nevery = \"{every}\"\nlease = \"{lease}\"\noverlap = \
                 \"coalesce\"\ncommand = [\"sh\", \"-c\", {}]\n\n",
                toml_string(name),
                self.command(body)
            ));
        }
        std::fs::write(&self.jobs, text)?;
        Ok(())
    }

    /// Counts double runs and overlapping copies in the book.
    fn audit(&self, h: &mut Harness, t: &mut Tally) -> Result<()> {
        let text = std::fs::read_to_string(&self.book).unwrap_or_default();
        let mut ends: BTreeMap<(String, String), u64> = BTreeMap::new();
        let mut live: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            let [what, job, slot, token] = f[..] else {
                continue;
            };
            let copies = live.entry(job.to_string()).or_default();
            match what {
                "start" => {
                    t.job_runs += 1;
                    if !copies.is_empty() {
                        t.overlapping_copies += 1;
                        t.fail(format!("{job}: token {token} started while {copies:?} ran"));
                    }
                    copies.insert(token.to_string());
                }
                "end" => {
                    copies.remove(token);
                    *ends.entry((job.to_string(), slot.to_string())).or_default() += 1;
                }
                _ => {
                    copies.remove(token);
                }
            }
        }
        // A firing that ran to its end twice is a double run when the scheduler recorded one of
        // its runs `ok` (exit 0) and still ran it again. A command stopped at its deadline just
        // as it finished (it booked its end, then SIGTERM made it exit 143) was not done for the
        // scheduler: its firing goes again, and only an effect key keeps its effect once.
        for ((job, slot), n) in ends.iter().filter(|(_, n)| **n > 1) {
            let mut runs: Vec<_> =
                crate::jobs::recent_runs(&mut h.store, &crate::JobName::from(job), 1000)?
                    .into_iter()
                    .filter(|r| crate::time::fmt(r.scheduled_at) == *slot)
                    .collect();
            runs.sort_by_key(|r| r.fencing_token);
            let done_then_again = runs
                .iter()
                .rev()
                .skip(1)
                .any(|r| r.outcome == Some(crate::state::RunOutcome::Ok));
            if done_then_again {
                t.double_runs += n - 1;
                t.fail(format!(
                    "{job}: the firing at {slot} ran to its end {n} times after an ok run"
                ));
            } else {
                t.ends_after_a_stop += n - 1;
            }
        }
        Ok(())
    }
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// An `exactly run` of the site's jobs on `db`, under `owner`.
fn scheduler(
    h: &Harness,
    site: &Site,
    db: &str,
    owner: &str,
    env: &[(&str, &str)],
) -> Result<Running> {
    // `EXACTLY_CHAOS_SCHEDULER`: another build's `exactly` as the schedulers (an older release,
    // to see a scenario fail where the guard is missing).
    let mut cmd = match std::env::var_os("EXACTLY_CHAOS_SCHEDULER") {
        Some(exe) => super::proc::command(Path::new(&exe)),
        None => h.exe_command(),
    };
    cmd.envs(env.iter().copied());
    cmd.env("EXACTLY_MAX_SKEW", SKEW)
        .arg("--db")
        .arg(db)
        .arg("run")
        .arg(&site.jobs)
        .args(["--owner", owner, "--grace", "10s"]);
    Running::spawn(cmd)
}

fn signal(r: &Running, sig: i32) {
    // SAFETY: signalling our own child, which is not reaped while `r` lives.
    unsafe {
        libc::kill(r.pid() as i32, sig);
    }
}

/// Stops the schedulers (SIGTERM, their grace) and collects what they said.
fn stop_all(live: Vec<Running>, t: &mut Tally) -> Result<String> {
    let mut said = String::new();
    let mut live = live;
    for r in live.iter_mut() {
        signal(r, libc::SIGCONT);
        r.term();
    }
    for mut r in live {
        if !r.wait_for(Duration::from_secs(30)) {
            r.kill();
        }
        let ended = r.finish()?;
        t.runs_not_started += ended.stderr.matches("its command never started").count() as u64;
        said.push_str(&ended.stderr);
    }
    Ok(said)
}

fn wait_for_file(p: &Path, within: Duration) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if p.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// How the end of a run is made unrecordable.
enum Outage {
    /// SQLite: the database refuses the end as a read-only file does, for longer than the
    /// lease, at the fault point `run_end` in the real write path (a folder cannot be remounted
    /// read-only under the scheduler's open database: the kernel refuses while it writes).
    ReadOnly,
    /// PostgreSQL: every connection cut and refused, as a stopped server's are.
    Cut(Proxy),
}

impl Outage {
    fn set(&self, on: bool) {
        match self {
            Outage::ReadOnly => {}
            Outage::Cut(p) if on => p.cut(),
            Outage::Cut(p) => p.restore(),
        }
    }
}

fn run_end_lost(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let site = Site::new(h, "run-end-lost")?;
    let (ending, go) = (site.dir.join("ending"), site.dir.join("go"));
    let body = format!(
        "touch {e}; while [ ! -e {g} ]; do sleep 0.02; done; rm -f {e}",
        e = sh_quote(&ending.to_string_lossy()),
        g = sh_quote(&go.to_string_lossy())
    );
    let job = format!("end-lost-{}", h.nonce());
    site.write_jobs(&[(job.clone(), "1s", "900ms")], &body)?;
    let (mut sched, outage) = if crate::is_server_db(h.db()) {
        let p = Proxy::start(&proxy::target_of(h.db())?)?;
        let url = p.url_for(h.db())?;
        (scheduler(h, &site, &url, "end-lost", &[])?, Outage::Cut(p))
    } else {
        let db = h.db().to_string();
        let r = scheduler(
            h,
            &site,
            &db,
            "end-lost",
            &[("EXACTLY_FAULT", "run_end:fail=1500ms")],
        )?;
        (r, Outage::ReadOnly)
    };
    let mut result = Ok(());
    for _ in 0..n {
        if !wait_for_file(&ending, Duration::from_secs(20)) {
            result = Err(Error::Store(
                "run-end-lost: no run reached its end within 20 s".into(),
            ));
            break;
        }
        // The command exits 0 while its end cannot be recorded, for longer than its lease.
        outage.set(true);
        std::fs::write(&go, "")?;
        std::thread::sleep(Duration::from_millis(1500));
        outage.set(false);
        t.stop("end unrecordable");
        // Its end is recorded once the database is back (on PostgreSQL a write already under
        // way may also wait the cut out and pass); the next run may start after it.
        let recorded = sched.wait_marker(" ok in ");
        let _ = std::fs::remove_file(&go);
        if !matches!(recorded, Ok(true)) {
            t.anomaly("run-end-lost: a run's end was never recorded".into());
        }
        t.iterations += 1;
        bar.inc(1);
    }
    outage.set(false);
    let _ = std::fs::write(&go, "");
    let said = stop_all(vec![sched], t)?;
    // Kept with the work directory (--keep), for a failure's story.
    let _ = std::fs::write(site.dir.join("scheduler.log"), &said);
    for _ in 0..said.matches("end recorded after").count() {
        t.stop("end retried until recorded");
    }
    if result.is_err() {
        if let Some(l) = said.lines().rev().find(|l| l.contains("ERROR")) {
            t.fail(crate::sanitize::inert_trunc(l, 300));
        }
    }
    site.audit(h, t)?;
    result
}

fn frozen(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let site = Site::new(h, "frozen-scheduler")?;
    let job = format!("frozen-{}", h.nonce());
    site.write_jobs(&[(job.clone(), "1s", "900ms")], "sleep 7 & wait")?;
    // One database, two spellings: leftovers and overlaps are judged by its identity.
    let other = if crate::is_server_db(h.db()) {
        let sep = if h.db().contains('?') { '&' } else { '?' };
        format!("{}{sep}application_name=frozen-b", h.db())
    } else {
        let p = Path::new(h.db());
        match (p.parent(), p.file_name()) {
            (Some(d), Some(f)) => d.join(".").join(f).to_string_lossy().into_owned(),
            _ => h.db().to_string(),
        }
    };
    let watch = Watcher::start(h.db(), &job);
    // A frozen scheduler is taken for dead after 4 s of silence (two missed beats), not 10.
    let env = [("EXACTLY_SCHEDULER_DEAD_AFTER", DEAD_AFTER)];
    let live = vec![
        scheduler(h, &site, h.db(), "frozen-a", &env)?,
        scheduler(h, &site, &other, "frozen-b", &env)?,
    ];
    let mut result = Ok(());
    for _ in 0..n {
        // Freeze whichever holds the job's lease, past the lease and the takeover margin.
        let Some(i) = wait_holder(&job, &live, Duration::from_secs(10)) else {
            result = Err(Error::Store(
                "frozen-scheduler: no scheduler ran the job's command in 10 s".into(),
            ));
            break;
        };
        // Long enough for the other to take the frozen one for dead and resume its firing (its
        // heartbeat silent DEAD_AFTER) while its command, unstopped, would still run.
        signal(&live[i], libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(5000));
        signal(&live[i], libc::SIGCONT);
        t.stop("frozen past its lease");
        std::thread::sleep(Duration::from_millis(300));
        t.iterations += 1;
        bar.inc(1);
    }
    stop_all(live, t)?;
    let seen = watch.stop();
    t.overlapping_copies += seen.len() as u64;
    for o in seen.iter().take(5) {
        t.fail(format!("{job}: two runs of one firing alive at once: {o}"));
    }
    site.audit(h, t)?;
    result
}

/// Which of `scheds` runs the job's command now (the command is the scheduler's child, or its
/// spawner's, with `EXACTLY_JOB` in its environment), waiting up to `within` for one to.
fn wait_holder(job: &str, scheds: &[Running], within: Duration) -> Option<usize> {
    let want = format!("EXACTLY_JOB={job}");
    let until = Instant::now() + within;
    while Instant::now() < until {
        let pids = std::fs::read_dir("/proc").into_iter().flatten().flatten();
        for pid in pids.filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
            let Some(ppid) = crate::sender::stat(pid as i32).map(|s| s.ppid as u32) else {
                continue;
            };
            let grand = crate::sender::stat(ppid as i32).map(|s| s.ppid as u32);
            let Some(i) = scheds
                .iter()
                .position(|r| r.pid() == ppid || Some(r.pid()) == grand)
            else {
                continue;
            };
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
                return Some(i);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn overload(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let site = Site::new(h, "overload")?;
    let jobs: Vec<(String, &str, &str)> = (0..OVERLOAD_JOBS)
        .map(|i| (format!("load-{}-{i}", h.nonce()), "1s", "900ms"))
        .collect();
    site.write_jobs(&jobs, "true")?;
    let live = vec![
        scheduler(h, &site, h.db(), "overload-a", &[])?,
        scheduler(h, &site, h.db(), "overload-b", &[])?,
    ];
    // An iteration is one second of firings of every job, on both schedulers, counted from the
    // first run's start: on a loaded machine two schedulers registering 300 jobs can take
    // seconds, and those seconds are start-up, not overload.
    wait_for_file(&site.book, Duration::from_secs(60));
    for _ in 0..n {
        std::thread::sleep(Duration::from_secs(1));
        t.iterations += 1;
        bar.inc(1);
    }
    stop_all(live, t)?;
    site.audit(h, t)
}

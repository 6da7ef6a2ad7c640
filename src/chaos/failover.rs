//! The `failover` scenario: two local PostgreSQL servers, a primary and an asynchronous standby
//! (`initdb`, then `pg_basebackup -R`), on free ports in the work directory. A range of keys runs
//! claim → effect → release while both are in step; then the primary's WAL sender is stopped
//! (SIGSTOP), a second range runs (acknowledged by the primary, never streamed), every process of
//! the primary is SIGKILLed and the standby promoted. The second range runs again against the
//! promoted server, through a multi-host URL with `target_session_attrs=read-write`.
//!
//! Counted: fencing tokens printed twice for the job (`tokens_reissued`), effects the far side
//! (a file) got twice (`duplicate_effects`), effects held for a person (`held_for_person`), and
//! `failover` events. Half the keys have an observer (it looks in the far side's file), half
//! have none. With the guard (the default) the promoted server raises the tokens and holds the
//! keys its ledger lost: 0 and 0. Unguarded (`--unguarded`: `EXACTLY_FAILOVER_GUARD=off` for
//! every process), the duplicates show.
//!
//! The server binaries: `EXACTLY_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`. As
//! root they run as the `postgres` user (through `runuser`). A missing tool is an error: the
//! scenario fails, it is never skipped.
use super::pg_pair::*;
use super::{Harness, Tally};
use crate::Result;
use indicatif::ProgressBar;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one key's claim → effect → release printed.
struct Op {
    token: Option<i64>,
    /// `exactly effect`'s exit code.
    effect_exit: i32,
}

/// The workload's processes: `exactly` with the URL, the far side a file.
struct Work<'a> {
    exe: &'a Path,
    url: String,
    far: PathBuf,
    guarded: bool,
    job: &'static str,
    /// `EXACTLY_TOKEN_MEMORY` for every process: a file of the round's (off unguarded, so what
    /// the failover guard alone leaves shows).
    memory: PathBuf,
}

impl Work<'_> {
    /// The far side's empty file and the database made on the pair's primary.
    fn init(&self) -> Result<()> {
        std::fs::write(&self.far, "").map_err(|e| err(format!("the far side's file: {e}")))?;
        let init = self
            .exactly()
            .arg("init")
            .output()
            .map_err(|e| err(format!("exactly init: {e}")))?;
        if !init.status.success() {
            return Err(err(format!(
                "exactly init: {}",
                String::from_utf8_lossy(&init.stderr).trim()
            )));
        }
        Ok(())
    }

    fn exactly(&self) -> Command {
        let mut c = Command::new(self.exe);
        c.arg("--db").arg(&self.url).stdin(Stdio::null());
        c.env_remove("EXACTLY_FAILOVER_GUARD");
        if !self.guarded {
            c.env("EXACTLY_FAILOVER_GUARD", "off");
        }
        c.env("EXACTLY_TOKEN_MEMORY", &self.memory);
        c
    }

    /// Claims the job's lease (waiting while it is held), runs the effect for key `i`, releases.
    fn op(&self, i: u32) -> Result<Op> {
        let start = Instant::now();
        let token = loop {
            let out = self
                .exactly()
                .args(["lease", "claim", "--job", self.job, "--for", "30s"])
                .output()
                .map_err(|e| err(format!("exactly lease claim: {e}")))?;
            match out.status.code() {
                Some(0) => {
                    let text = String::from_utf8_lossy(&out.stdout);
                    break text
                        .trim()
                        .parse::<i64>()
                        .map_err(|_| err(format!("lease claim printed {text:?}")))?;
                }
                // Held (a lease the lost range took, still live on the promoted server).
                Some(3) if start.elapsed() < Duration::from_secs(60) => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                _ => {
                    return Err(err(format!(
                        "exactly lease claim: {}: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )))
                }
            }
        };
        let target = format!("k{i}");
        let far = crate::chaos::sh_quote(&self.far.display().to_string());
        let mut effect = self.exactly();
        effect.args(["effect", "--job", self.job, "--token", &token.to_string()]);
        effect.args(["--action", "send", "--target", &target, "--quiet"]);
        if i.is_multiple_of(2) {
            effect.args([
                "--observe",
                &format!("grep -qx \"$EXACTLY_EFFECT_KEY\" {far}"),
            ]);
        }
        effect.args([
            "--",
            "sh",
            "-c",
            &format!("echo \"$EXACTLY_EFFECT_KEY\" >> {far}"),
        ]);
        let status = effect
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| err(format!("exactly effect: {e}")))?;
        let _ = self
            .exactly()
            .args(["lease", "release", "--job", self.job])
            .args(["--token", &token.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        Ok(Op {
            token: Some(token),
            effect_exit: status.code().unwrap_or(-1),
        })
    }
}

/// How the primary replicates in a round.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// The default: a commit is acknowledged before the standby has it.
    Async,
    /// `synchronous_standby_names = '*'` (set with ALTER SYSTEM after the base backup): a commit
    /// is acknowledged once the standby flushed it.
    Sync,
}

pub(super) fn run(h: &mut Harness, t: &mut Tally, n: u32, bar: &ProgressBar) -> Result<()> {
    let n = n.max(2);
    // Where there is no PostgreSQL server to start, the scenario says so and does not pass (as
    // `python` without its module); the test of it fails.
    if let Err(e) = server_bin() {
        t.not_run = Some(e.to_string());
        return Ok(());
    }
    round(h, t, n, Mode::Async, bar)?;
    round(h, t, n, Mode::Sync, bar)
}

/// One round: a pair, a range streamed, a range run as the primary dies, the promoted standby
/// running the second range again.
fn round(h: &mut Harness, t: &mut Tally, n: u32, mode: Mode, bar: &ProgressBar) -> Result<()> {
    let name = format!("failover-{mode:?}").to_lowercase();
    let pair = Pair::start(&h.dir.join(&name))?;
    let work = Work {
        exe: &h.exe,
        url: pair.url(),
        far: h.dir.join(format!("{name}-far-side")),
        guarded: h.guarded,
        job: "failover",
        memory: match h.guarded {
            true => h.dir.join(format!("{name}-tokens")),
            false => PathBuf::from("off"),
        },
    };
    work.init()?;
    if mode == Mode::Sync {
        pair.synchronous()?;
    } else {
        standby_says_so(&pair, &work, t)?;
    }
    // Streamed: both servers have these.
    let mut before: Vec<i64> = Vec::new();
    for i in 0..n {
        before.extend(work.op(i)?.token);
        bar.inc(1);
    }
    pair.wait_caught_up()?;
    if mode == Mode::Async {
        if pair.hold_stream()? == 0 {
            return Err(err("the primary has no WAL sender to hold"));
        }
        *t.stops.entry("wal_sender".into()).or_default() += 1;
    }
    // Asynchronous: acknowledged by the primary alone, the promoted standby never hears of
    // them. Synchronous: acknowledged once the standby has them.
    let mut lost: Vec<i64> = Vec::new();
    for i in n..2 * n {
        lost.extend(work.op(i)?.token);
    }
    pair.primary.kill_all()?;
    t.kill("primary");
    pair.promote()?;
    // The second range again, on the promoted server.
    let mut seen: BTreeMap<i64, u32> = BTreeMap::new();
    for tok in before.iter().chain(&lost) {
        *seen.entry(*tok).or_default() += 1;
    }
    for i in n..2 * n {
        let op = work.op(i)?;
        if let Some(tok) = op.token {
            if seen.contains_key(&tok) {
                t.tokens_reissued += 1;
            }
            *seen.entry(tok).or_default() += 1;
        }
        // exit 5: held (no observer, no row): a person resolves it.
        if op.effect_exit == 5 {
            t.held_for_person += 1;
        } else if op.effect_exit != 0 {
            t.anomaly(format!(
                "{name}: key k{i}: exactly effect exited {}",
                op.effect_exit
            ));
        }
        t.iterations += 1;
    }
    count_far_side(&work, n, t)?;
    if h.guarded {
        one_memory_across_the_failover(&work, seen.keys().max().copied(), t);
    }
    failover_is_shown(&work, &name, mode, t)?;
    if mode == Mode::Sync {
        sync_wait_is_bounded(&pair, &work, t)?;
    }
    drop(pair);
    Ok(())
}

/// Every key of both ranges was meant to reach the far side once: the requests it got, and
/// each one past a key's first as a duplicate.
fn count_far_side(work: &Work<'_>, n: u32, t: &mut Tally) -> Result<()> {
    // Every key of both ranges, each meant to reach the far side once.
    t.intended_effects += 2 * u64::from(n);
    let far = std::fs::read_to_string(&work.far).map_err(|e| err(format!("far side: {e}")))?;
    let mut per_key: BTreeMap<&str, u64> = BTreeMap::new();
    for line in far.lines() {
        *per_key.entry(line).or_default() += 1;
    }
    t.far_side_requests += far.lines().count() as u64;
    t.duplicate_effects += per_key.values().map(|c| c.saturating_sub(1)).sum::<u64>();
    Ok(())
}

/// The promoted server's ledger records one failover, and says how replication was.
fn failover_is_shown(work: &Work<'_>, name: &str, mode: Mode, t: &mut Tally) -> Result<()> {
    let mut store = crate::open(Some(&work.url), crate::Access::ReadOnly)?;
    let snap = crate::snapshot::Snapshot::read(&mut store)?;
    t.failovers_seen += snap.failovers;
    if snap.failovers != 1 {
        t.anomaly(format!("{name}: {} failover events, not 1", snap.failovers));
    }
    let said = snap.failover_warnings.join(" ");
    let how = match mode {
        Mode::Async => "replication was asynchronous",
        Mode::Sync => "replication was synchronous",
    };
    if !said.contains(how) {
        t.anomaly(format!("{name}: the failover does not say {how:?}: {said}"));
    }
    drop(store);
    Ok(())
}

/// The CLI's token memory knows the promoted standby as the database the primary was (one
/// entry for the job, not two) and holds the highest token the round printed: a memory that
/// took it for another database would not notice a token going back across the failover.
fn one_memory_across_the_failover(work: &Work<'_>, highest: Option<i64>, t: &mut Tally) {
    let text = std::fs::read_to_string(&work.memory).unwrap_or_default();
    let mine: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["job"] == work.job)
        .collect();
    let kept = mine.first().and_then(|v| v["token"].as_i64());
    if mine.len() != 1 || kept != highest {
        t.anomaly(format!(
            "the token memory holds {} entries for the job across the failover (wanted one, \
             token {highest:?}): {text}",
            mine.len()
        ));
    }
}

/// The promoted server told to wait for a synchronous standby it does not have: a claim is
/// refused with that reason after `EXACTLY_SYNC_WAIT_MS`, and a scheduler's write after its
/// `--give-up-after`, never left hanging.
fn sync_wait_is_bounded(pair: &Pair, work: &Work<'_>, t: &mut Tally) -> Result<()> {
    let mut c = pair.standby.client()?;
    for sql in [
        "ALTER SYSTEM SET synchronous_standby_names = 'gone'",
        "SELECT pg_reload_conf()",
    ] {
        c.batch_execute(sql)
            .map_err(|e| err(format!("{sql}: {e}")))?;
    }
    let start = Instant::now();
    let mut child = work
        .exactly()
        .env("EXACTLY_SYNC_WAIT_MS", "1000")
        .args(["lease", "claim", "--job", "no-standby", "--for", "1m"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("exactly lease claim: {e}")))?;
    // A claim that hangs is what this checks against: it is killed after 15 s.
    while child.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child
        .wait_with_output()
        .map_err(|e| err(format!("exactly lease claim: {e}")))?;
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(1)
        || !stderr.contains("synchronous standby")
        || took > Duration::from_secs(10)
    {
        t.anomaly(format!(
            "a claim waiting for a missing synchronous standby: {} after {took:.1?}: {:?}",
            out.status,
            stderr.trim()
        ));
    }
    scheduler_gives_up(work, t)
}

/// A scheduler started with `--give-up-after 1s` gives up on a write waiting for the missing
/// synchronous standby after that bound (not `EXACTLY_SYNC_WAIT_MS`'s 30 s), saying why.
fn scheduler_gives_up(work: &Work<'_>, t: &mut Tally) -> Result<()> {
    let dir = work.far.parent().unwrap_or(Path::new("."));
    let jobs = dir.join("sync-wait-jobs.toml");
    std::fs::write(
        &jobs,
        "[[job]]\nname = \"no-standby-run\"\nevery = \"1s\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
         command = [\"true\"]\n",
    )
    .map_err(|e| err(format!("{}: {e}", jobs.display())))?;
    let start = Instant::now();
    let mut child = work
        .exactly()
        .env_remove("EXACTLY_SYNC_WAIT_MS")
        .arg("run")
        .arg(&jobs)
        .args(["--give-up-after", "1s", "--grace", "1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("exactly run: {e}")))?;
    // A scheduler that waits on (the 30 s default) is what this checks against: killed at 15 s.
    while child.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child
        .wait_with_output()
        .map_err(|e| err(format!("exactly run: {e}")))?;
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stderr.contains("(--give-up-after) for a synchronous standby")
        || took > Duration::from_secs(10)
    {
        t.anomaly(format!(
            "a scheduler (--give-up-after 1s) writing with its synchronous standby gone: {} \
             after {took:.1?}: {:?}",
            out.status,
            stderr.trim()
        ));
    }
    Ok(())
}

/// A write sent to the standby alone is refused saying it is a standby, not a role's problem.
fn standby_says_so(pair: &Pair, work: &Work<'_>, t: &mut Tally) -> Result<()> {
    let url = format!(
        "postgres://exactly:exactly@127.0.0.1:{}/exactly",
        pair.standby.port
    );
    let out = Command::new(work.exe)
        .args([
            "--db",
            &url,
            "lease",
            "claim",
            "--job",
            "on-standby",
            "--for",
            "1m",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| err(format!("exactly lease claim: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(1) || !stderr.contains("the server is a standby (in recovery)") {
        t.anomaly(format!(
            "a claim on the standby: {} {:?}, not the standby's sentence",
            out.status,
            stderr.trim()
        ));
    }
    Ok(())
}

//! The kill-mid-effect harness (`exactly chaos`): real `exactly effect` processes send effects to
//! a far side that records every arrival; the harness kills them at named fault points and at
//! random moments, restarts them without clearing the ledger, and counts what the far side got.
//! The number that matters is duplicate effects observed, which must be zero.
mod concurrent;
pub mod far_side;
mod proc;
mod scenarios;
mod sched;

use crate::effect::Spec;
use crate::sanitize::inert;
use crate::snapshot::Snapshot;
use crate::state::EffectState;
use crate::store::Store;
use crate::{lease, Error, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use proc::Running;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Every scenario, in the order they run.
pub const SCENARIOS: &[&str] = &[
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
];

#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// Iterations of each scenario.
    #[arg(long, default_value_t = 100)]
    pub iterations: u32,
    /// One object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run only these scenarios (repeatable; default all).
    #[arg(long = "scenario", value_name = "NAME", num_args = 1.., value_parser = clap::builder::PossibleValuesParser::new(SCENARIOS))]
    pub scenarios: Vec<String>,
    /// Seed for kill moments and variants, to replay a run.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Self-check: send without the ledger's guard (no `exactly effect`), retrying naively.
    /// Must report duplicates, or the harness cannot see them.
    #[arg(long)]
    pub unguarded: bool,
    /// Keep the work directory (database, far-side socket) for inspection.
    #[arg(long)]
    pub keep: bool,
}

/// What one scenario (or the whole run) observed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub iterations: u64,
    /// Effects the workload meant to happen, each exactly once.
    pub intended_effects: u64,
    /// Requests the far side recorded.
    pub far_side_requests: u64,
    pub kills: BTreeMap<String, u64>,
    pub duplicate_effects: u64,
    pub lost_effects: u64,
    /// Effects left `submitted`/`unknown` by a kill or a lost answer, then settled by the observer.
    pub unknown_resolved: u64,
    pub unknown_unresolved: u64,
    /// Unresolved unknowns with no observer verdict saying why.
    pub unexplained_unknowns: u64,
    pub claimed_leaked: u64,
    pub fenced_writes: u64,
    pub duplicates_suppressed: u64,
    /// Writes by a run whose lease was stolen that the ledger accepted (must be 0).
    pub late_writes_accepted: u64,
    /// Effects that reached the far side after a caller asked for approval and before a person
    /// approved them, or after a person denied them (must be 0).
    pub unapproved_sends: u64,
    /// Interim "can't tell" verdicts that a later attempt settled.
    pub observer_cant_tell: u64,
    /// Scheduler strikes that landed while an effect was being sent.
    pub mid_effect_strikes: u64,
    /// Scheduler scenarios: how many firings had how many runs ({runs: firings}).
    pub runs_per_firing: BTreeMap<u64, u64>,
    /// The most runs one firing had (at most 3).
    pub max_runs_per_firing: u64,
    /// Firings that used up their 3 runs and were given up.
    pub firings_gave_up: u64,
    /// Times two runs of one firing were seen alive at once in the process table (must be 0).
    pub overlapping_copies: u64,
    pub wall_ms: u64,
    /// Broken expectations and harness errors (each a failure, listed in `failures`).
    pub anomalies: u64,
    pub failures: Vec<String>,
    #[serde(skip)]
    intents: Vec<(String, String)>,
}

const FAILURES_KEPT: usize = 20;

impl Tally {
    pub fn kill(&mut self, point: &str) {
        *self.kills.entry(point.to_string()).or_default() += 1;
    }
    /// A broken expectation (an effect not fenced, not unknown when it must be, never settled)
    /// or a harness error: fails the run.
    pub fn anomaly(&mut self, what: String) {
        self.anomalies += 1;
        self.fail(what);
    }
    pub fn fail(&mut self, what: String) {
        if self.failures.len() < FAILURES_KEPT {
            self.failures.push(what);
        }
    }
    /// Records an effect the workload means to happen exactly once.
    pub fn intend(&mut self, key: &str, label: String) {
        self.intended_effects += 1;
        self.intents.push((key.to_string(), label));
    }
    pub fn ok(&self) -> bool {
        self.duplicate_effects == 0
            && self.lost_effects == 0
            && self.claimed_leaked == 0
            && self.unexplained_unknowns == 0
            && self.late_writes_accepted == 0
            && self.unapproved_sends == 0
            && self.anomalies == 0
            && self.max_runs_per_firing <= 3
            && self.overlapping_copies == 0
    }
    fn add(&mut self, o: &Tally) {
        self.iterations += o.iterations;
        self.intended_effects += o.intended_effects;
        self.far_side_requests += o.far_side_requests;
        for (k, n) in &o.kills {
            *self.kills.entry(k.clone()).or_default() += n;
        }
        self.duplicate_effects += o.duplicate_effects;
        for (k, n) in &o.runs_per_firing {
            *self.runs_per_firing.entry(*k).or_default() += n;
        }
        self.max_runs_per_firing = self.max_runs_per_firing.max(o.max_runs_per_firing);
        self.firings_gave_up += o.firings_gave_up;
        self.overlapping_copies += o.overlapping_copies;
        self.lost_effects += o.lost_effects;
        self.unknown_resolved += o.unknown_resolved;
        self.unknown_unresolved += o.unknown_unresolved;
        self.unexplained_unknowns += o.unexplained_unknowns;
        self.claimed_leaked += o.claimed_leaked;
        self.fenced_writes += o.fenced_writes;
        self.duplicates_suppressed += o.duplicates_suppressed;
        self.late_writes_accepted += o.late_writes_accepted;
        self.unapproved_sends += o.unapproved_sends;
        self.observer_cant_tell += o.observer_cant_tell;
        self.mid_effect_strikes += o.mid_effect_strikes;
        self.anomalies += o.anomalies;
        for f in &o.failures {
            self.fail(f.clone());
        }
    }
}

/// How the far-side client behaves in one attempt.
#[derive(Debug, Clone, Copy, Default)]
pub struct Client {
    pub timeout_ms: u64,
    pub hold_before_ms: u64,
    pub hold_after_ms: u64,
}

impl Client {
    pub fn quick() -> Client {
        Client {
            timeout_ms: 5000,
            ..Default::default()
        }
    }
}

/// `faketime` (Debian package `faketime`): runs a process with its clock shifted.
pub const FAKETIME: &str = "faketime";

/// How one attempt of the concurrency scenarios differs from a plain one.
#[derive(Debug, Clone, Default)]
pub struct How {
    /// The observer command (default: the harness's prompt one).
    pub observe: Option<String>,
    /// `EXACTLY_HOST`: the host name the attempt records as its own.
    pub host: Option<String>,
    /// How far the attempt's clock is off ours, in milliseconds.
    pub skew_ms: i64,
    pub needs_approval: bool,
    pub pause: Option<(&'static str, Duration)>,
}

/// One intended effect, as a job sends it.
#[derive(Debug, Clone)]
pub struct Eff {
    pub job: String,
    pub token: i64,
    pub action: String,
    pub target: String,
    pub i: u64,
}

/// The shared machinery: the database, the far side, the binary, the dice.
pub struct Harness {
    exe: PathBuf,
    db: String,
    pub dir: PathBuf,
    pub store: Store,
    pub far: far_side::FarSide,
    pub rng: StdRng,
    pub guarded: bool,
    nonce: String,
    observe: String,
    /// Running average of a clean attempt's wall time, so random kills land inside one.
    typical_ms: f64,
}

/// Single-quotes a path for `sh -c`.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Harness {
    /// The effect key `exactly effect` computes for this effect (DESIGN.md's contract).
    pub fn key(&self, e: &Eff) -> String {
        self.spec(e).key()
    }

    fn spec(&self, e: &Eff) -> Spec {
        Spec::new(&e.action, &e.target)
            .input("run", self.nonce.clone())
            .input("i", e.i.to_string())
    }

    pub fn claim(&mut self, job: &str, owner: &str, dur: Duration) -> Result<i64> {
        match lease::claim(&mut self.store, job, owner, dur)? {
            lease::Claim::Won { token } => Ok(token),
            lease::Claim::Held { owner, until, .. } => Err(Error::Store(format!(
                "job {} is leased by {} until {}; wait for it or use a fresh database",
                inert(job),
                inert(&owner),
                inert(&until)
            ))),
        }
    }

    pub fn exe_command(&self) -> Command {
        proc::command(&self.exe)
    }

    /// Part of every input, so this run's keys never collide with an earlier run's.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    pub fn db(&self) -> &str {
        &self.db
    }

    pub fn exe(&self) -> &Path {
        &self.exe
    }

    /// The far-side client's argv.
    pub fn client_argv(&self, tag: &str, c: &Client) -> Vec<String> {
        vec![
            self.exe.display().to_string(),
            "far-side".into(),
            "send".into(),
            "--socket".into(),
            self.far.socket.display().to_string(),
            "--tag".into(),
            tag.into(),
            "--timeout".into(),
            format!("{}ms", c.timeout_ms.max(1)),
            "--hold-before".into(),
            format!("{}ms", c.hold_before_ms),
            "--hold-after".into(),
            format!("{}ms", c.hold_after_ms),
        ]
    }

    /// The observer shell command `exactly effect --observe` runs.
    pub fn observe_cmd(&self) -> &str {
        &self.observe
    }

    /// One attempt at an effect: `exactly effect … -- client` when guarded, else the bare client
    /// (the self-check). `pause_at` makes it stop at a named fault point and announce it.
    pub fn attempt(&self, e: &Eff, c: &Client, pause_at: Option<(&str, Duration)>) -> Command {
        let tag = format!("{}:{}", e.job, e.token);
        let argv = self.client_argv(&tag, c);
        let mut cmd;
        let fault_var;
        if self.guarded {
            cmd = self.exe_command();
            cmd.args(self.effect_args(e, &self.observe)).arg("--");
            cmd.args(&argv);
            fault_var = "EXACTLY_FAULT";
        } else {
            cmd = proc::command(&self.exe);
            cmd.args(&argv[1..]).env("EXACTLY_EFFECT_KEY", self.key(e));
            fault_var = far_side::CLIENT_FAULT_ENV;
        }
        if let Some((point, d)) = pause_at {
            cmd.env(fault_var, format!("{point}:pause={}ms", d.as_millis()));
        }
        cmd
    }

    /// One `exactly effect` attempt shaped by `how`: its own observer, host name, clock
    /// offset (through `faketime`), approval flag and fault pause.
    pub fn attempt_with(&self, e: &Eff, c: &Client, how: &How) -> Command {
        let tag = format!("{}:{}", e.job, e.token);
        let mut cmd = self.skewed(how.skew_ms);
        cmd.args(self.effect_args(e, how.observe.as_deref().unwrap_or(&self.observe)));
        if how.needs_approval {
            cmd.arg("--needs-approval");
        }
        cmd.arg("--").args(self.client_argv(&tag, c));
        if let Some(host) = &how.host {
            cmd.env("EXACTLY_HOST", host);
        }
        if let Some((point, d)) = how.pause {
            cmd.env(
                "EXACTLY_FAULT",
                format!("{point}:pause={}ms", d.as_millis()),
            );
        }
        cmd
    }

    /// `--db … effect …` for one intended effect, up to (not including) the `--` before its
    /// command: every attempt at `e` computes the same key.
    fn effect_args(&self, e: &Eff, observe: &str) -> Vec<String> {
        let mut v: Vec<String> = vec!["--db".into(), self.db.clone(), "effect".into()];
        for (flag, val) in [
            ("--job", e.job.clone()),
            ("--token", e.token.to_string()),
            ("--action", e.action.clone()),
            ("--target", e.target.clone()),
            ("--input", format!("run={}", self.nonce)),
            ("--input", format!("i={}", e.i)),
            ("--observe", observe.to_string()),
        ] {
            v.push(flag.into());
            v.push(val);
        }
        v
    }

    /// The binary, run with its clock `skew_ms` off ours (through `faketime`) when not 0.
    pub fn skewed(&self, skew_ms: i64) -> Command {
        if skew_ms == 0 {
            return self.exe_command();
        }
        let mut c = proc::command(Path::new(FAKETIME));
        // Without this, libfaketime caches its offset and may read the spec late.
        c.env("FAKETIME_NO_CACHE", "1")
            .arg("-f")
            .arg(format!("{:+.3}s", skew_ms as f64 / 1000.0))
            .arg(&self.exe);
        c
    }

    /// An observer that asks the far side at once and answers `ms` later (a slow API).
    pub fn slow_observer(&self, ms: u64) -> String {
        format!("{} --answer-after {ms}ms", self.observe)
    }

    pub fn spawn(
        &self,
        e: &Eff,
        c: &Client,
        pause_at: Option<(&str, Duration)>,
    ) -> Result<Running> {
        Running::spawn(self.attempt(e, c, pause_at))
    }

    /// Runs attempts (the restarts, the next firings) until one ends 0: done now or already
    /// done. Returns every exit code seen; the last is 0 unless it gave up.
    pub fn settle(&self, e: &Eff, c: &Client, tries: usize) -> Result<Vec<Option<i32>>> {
        let mut codes = Vec::new();
        for n in 0..tries {
            let end = self.spawn(e, c, None)?.finish()?;
            codes.push(end.code);
            if end.code == Some(0) {
                break;
            }
            // Give a sender that is still alive (exit 5) time to finish.
            std::thread::sleep(Duration::from_millis(10 * (n as u64 + 1)));
        }
        Ok(codes)
    }

    pub fn typical_ms(&self) -> f64 {
        self.typical_ms
    }

    pub fn observe_duration(&mut self, d: Duration) {
        let ms = d.as_secs_f64() * 1000.0;
        self.typical_ms = if self.typical_ms == 0.0 {
            ms
        } else {
            0.9 * self.typical_ms + 0.1 * ms
        };
    }

    /// Random milliseconds in `lo..hi`.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.gen_range(lo..hi.max(lo + 1)))
    }

    /// Counts what the far side got for each intended effect, and what the ledger says of it.
    fn audit(&mut self, t: &mut Tally) -> Result<()> {
        let arrivals = self.far.dump()?;
        let intents = std::mem::take(&mut t.intents);
        for (key, label) in &intents {
            let n = arrivals.get(key).copied().unwrap_or(0);
            t.far_side_requests += n;
            let row = if self.guarded {
                self.store.effect(key)?
            } else {
                None
            };
            let state = row.as_ref().map(|r| &r.state);
            if n > 1 {
                t.duplicate_effects += n - 1;
                t.fail(format!("{label}: effect {key} arrived {n} times"));
            }
            if n == 0 && state != Some(&EffectState::Cancelled) {
                t.lost_effects += 1;
                t.fail(format!("{label}: effect {key} never arrived"));
            }
            let Some(row) = row else {
                if self.guarded {
                    t.anomaly(format!("{label}: effect {key} has no ledger row"));
                }
                continue;
            };
            let verdict = row.verdict.as_deref().unwrap_or("");
            match &row.state {
                EffectState::Done | EffectState::Cancelled => {
                    if verdict == "happened" || verdict == "not happened" {
                        t.unknown_resolved += 1;
                    }
                }
                EffectState::Claimed => {
                    t.claimed_leaked += 1;
                    t.fail(format!("{label}: effect {key} left claimed"));
                }
                state => {
                    t.unknown_unresolved += 1;
                    if verdict.is_empty() {
                        t.unexplained_unknowns += 1;
                    }
                    t.fail(format!(
                        "{label}: effect {key} left {} (observer: {})",
                        inert(state.as_str()),
                        if verdict.is_empty() { "none" } else { verdict }
                    ));
                }
            }
        }
        t.intents = intents;
        Ok(())
    }
}

/// The work directory: `$TMPDIR/exactly-chaos-<pid>-<nanos>`, removed at the end unless kept.
fn work_dir() -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!("exactly-chaos-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| {
        Error::Store(format!(
            "cannot create the work directory {}: {e}",
            dir.display()
        ))
    })?;
    Ok(dir)
}

/// The whole run's result, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Report {
    iterations_per_scenario: u32,
    seed: u64,
    guarded: bool,
    db: String,
    #[serde(flatten)]
    total: Tally,
    ok: bool,
    scenarios: BTreeMap<String, Tally>,
}

pub fn chaos_main(db: &Option<String>, a: ChaosArgs) -> Result<i32> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Store(format!("cannot find the exactly binary: {e}")))?;
    let dir = work_dir()?;
    let result = run_all(&exe, &dir, db, &a);
    if !a.keep && db.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    } else if !a.keep {
        let _ = std::fs::remove_file(dir.join("far.sock"));
        let _ = std::fs::remove_dir(&dir);
    }
    let report = result?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .map_err(|e| Error::Store(format!("cannot write the report: {e}")))?
        );
    } else {
        print!("{}", table(&report, &a));
        if a.keep {
            println!("work directory kept: {}", dir.display());
        }
    }
    Ok(if report.ok { 0 } else { 1 })
}

fn run_all(exe: &Path, dir: &Path, db: &Option<String>, a: &ChaosArgs) -> Result<Report> {
    let db_path = match db {
        Some(d) => d.clone(),
        None => dir.join("chaos.db").display().to_string(),
    };
    let seed = a.seed.unwrap_or_else(|| rand::thread_rng().gen());
    let store = Store::open(&db_path)?;
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
    let names: Vec<&str> = if a.scenarios.is_empty() {
        SCENARIOS.to_vec()
    } else {
        SCENARIOS
            .iter()
            .copied()
            .filter(|s| a.scenarios.iter().any(|x| x == s))
            .collect()
    };
    let bar = ProgressBar::new(u64::from(a.iterations) * names.len() as u64);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {msg:24} [{bar:30}] {pos}/{len} {elapsed}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    let mut per = BTreeMap::new();
    let mut total = Tally::default();
    let started = Instant::now();
    for name in names {
        bar.set_message(name.to_string());
        let before = Snapshot::read(&mut h.store)?.totals;
        let t0 = Instant::now();
        let mut t = Tally::default();
        if let Err(e) = scenarios::run(name, &mut h, &mut t, a.iterations, &bar) {
            t.anomaly(format!("{name}: {e}"));
        }
        if let Err(e) = h.audit(&mut t) {
            t.anomaly(format!("{name}: audit: {e}"));
        }
        let after = Snapshot::read(&mut h.store)?.totals;
        t.fenced_writes = after.fenced_writes.saturating_sub(before.fenced_writes);
        t.duplicates_suppressed = after
            .duplicates_suppressed
            .saturating_sub(before.duplicates_suppressed);
        t.wall_ms = t0.elapsed().as_millis() as u64;
        total.add(&t);
        per.insert(name.to_string(), t);
    }
    bar.finish_and_clear();
    total.wall_ms = started.elapsed().as_millis() as u64;
    let ok = total.ok() && h.guarded;
    Ok(Report {
        iterations_per_scenario: a.iterations,
        seed,
        guarded: h.guarded,
        db: db_path,
        ok,
        total,
        scenarios: per,
    })
}

fn secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

fn table(r: &Report, a: &ChaosArgs) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "exactly chaos: {} iterations per scenario, seed {}{}",
        a.iterations,
        r.seed,
        if r.guarded {
            ""
        } else {
            ", UNGUARDED self-check (no ledger)"
        }
    );
    let _ = writeln!(
        s,
        "{:<24}{:>6}{:>7}{:>6}{:>6}{:>10}{:>10}{:>8}{:>8}{:>12}{:>9}",
        "scenario",
        "iters",
        "kills",
        "dups",
        "lost",
        "unk-res",
        "unk-open",
        "leaked",
        "fenced",
        "suppressed",
        "time"
    );
    let row = |s: &mut String, name: &str, t: &Tally| {
        let _ = writeln!(
            s,
            "{:<24}{:>6}{:>7}{:>6}{:>6}{:>10}{:>10}{:>8}{:>8}{:>12}{:>9}",
            name,
            t.iterations,
            t.kills.values().sum::<u64>(),
            t.duplicate_effects,
            t.lost_effects,
            t.unknown_resolved,
            t.unknown_unresolved,
            t.claimed_leaked,
            t.fenced_writes,
            t.duplicates_suppressed,
            secs(t.wall_ms)
        );
    };
    for name in SCENARIOS {
        if let Some(t) = r.scenarios.get(*name) {
            row(&mut s, name, t);
        }
    }
    row(&mut s, "total", &r.total);
    let kills: Vec<String> = r
        .total
        .kills
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(s, "kills per point: {}", kills.join(", "));
    let _ = writeln!(
        s,
        "far side: {} requests for {} intended effects",
        r.total.far_side_requests, r.total.intended_effects
    );
    if !r.total.runs_per_firing.is_empty() {
        let per: Vec<String> = r
            .total
            .runs_per_firing
            .iter()
            .map(|(runs, n)| format!("{n}×{runs}"))
            .collect();
        let _ = writeln!(
            s,
            "scheduler: firings by runs {} (most {}), {} gave up, {} overlapping copies seen",
            per.join(", "),
            r.total.max_runs_per_firing,
            r.total.firings_gave_up,
            r.total.overlapping_copies
        );
    }
    if r.scenarios.contains_key("approval-race") || r.total.unapproved_sends > 0 {
        let _ = writeln!(
            s,
            "unapproved sends (before an approval or after a denial): {}",
            r.total.unapproved_sends
        );
    }
    if r.total.late_writes_accepted > 0 {
        let _ = writeln!(
            s,
            "late writes accepted after a stolen lease: {}",
            r.total.late_writes_accepted
        );
    }
    for f in &r.total.failures {
        let _ = writeln!(s, "  ! {}", inert(f));
    }
    let t = &r.total;
    let verdict = if r.ok {
        format!(
            "PASS: 0 duplicate effects, 0 lost, 0 leaked; {} unknowns, all resolved",
            t.unknown_resolved
        )
    } else if !r.guarded {
        format!(
            "UNGUARDED: {} duplicate effects observed without the ledger (the harness can see them)",
            t.duplicate_effects
        )
    } else {
        format!(
            "FAIL: {} duplicate, {} lost, {} leaked, {} unexplained unknown, {} late writes accepted, {} unapproved sends, {} anomalies, {} most runs of a firing, {} overlapping copies",
            t.duplicate_effects,
            t.lost_effects,
            t.claimed_leaked,
            t.unexplained_unknowns,
            t.late_writes_accepted,
            t.unapproved_sends,
            t.anomalies,
            t.max_runs_per_firing,
            t.overlapping_copies
        )
    };
    let _ = writeln!(s, "{verdict}");
    s
}

//! The shared machinery of every scenario: the database, the far side, the `exactly` binary,
//! the dice, and one attempt of an effect as a real child process.
use super::far_side;
use super::proc::{self, Running};
use super::Tally;
use crate::effect::Spec;
use crate::sanitize::inert;
use crate::state::EffectState;
use crate::Store;
use crate::{lease, Error, Result, Token};
use rand::rngs::StdRng;
use rand::Rng;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How the far-side client behaves in one attempt.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Client {
    pub timeout_ms: u64,
    pub hold_before_ms: u64,
    pub hold_after_ms: u64,
    /// Ask the far side to act on the effect key once (`far-side send --dedupe`).
    pub dedupe: bool,
    /// Send the fencing token; the far side refuses a lower one (`far-side send --fence`).
    pub fence: bool,
}

impl Client {
    pub(crate) fn quick() -> Client {
        Client {
            timeout_ms: 5000,
            ..Default::default()
        }
    }
}

/// `faketime` (Debian package `faketime`): runs a process with its clock shifted.
pub(super) const FAKETIME: &str = "faketime";

/// The library behind `faketime` (its thread-safe build), for a process whose clock must be
/// shifted while it keeps its own pid (one the harness kills): see [`skew_clock`].
/// The skewed schedulers on PostgreSQL need it (there is no fallback for them).
pub(super) fn libfaketime() -> Result<PathBuf> {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu/faketime",
        "/usr/lib/aarch64-linux-gnu/faketime",
        "/usr/lib/faketime",
    ];
    dirs.iter()
        .map(|d| Path::new(d).join("libfaketimeMT.so.1"))
        .find(|p| p.exists())
        .ok_or_else(|| {
            Error::Environment(
                "libfaketimeMT.so.1 not found (Debian package faketime): \
                 the schedulers on PostgreSQL run on skewed clocks"
                    .into(),
            )
        })
}

/// Runs `cmd` with its clock `offset` off ours (`"+1.5s"`, `"-1h"`): libfaketime preloaded into
/// the process itself.
pub(crate) fn skew_clock(cmd: &mut Command, offset: &str) -> Result<()> {
    // Without FAKETIME_NO_CACHE, libfaketime caches its offset and may read the spec late.
    cmd.env("LD_PRELOAD", libfaketime()?)
        .env("FAKETIME", offset)
        .env("FAKETIME_NO_CACHE", "1");
    Ok(())
}

/// How one attempt of the concurrency scenarios differs from a plain one.
#[derive(Debug, Clone, Default)]
pub(crate) struct How {
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
pub(crate) struct Eff {
    pub job: String,
    pub token: Token,
    pub action: String,
    pub target: String,
    pub i: u64,
}

impl Eff {
    /// The same effect (action, target, iteration) as each of `jobs` sends it under its token.
    pub(crate) fn per_job(
        jobs: &[&str],
        tokens: &[Token],
        action: &str,
        target: &str,
        i: u64,
    ) -> Vec<Eff> {
        jobs.iter()
            .zip(tokens)
            .map(|(job, &token)| Eff {
                job: job.to_string(),
                token,
                action: action.into(),
                target: target.into(),
                i,
            })
            .collect()
    }
}

/// How long the harness's own leases last: longer than any scenario.
pub(super) const FOREVER: Duration = Duration::from_secs(3600);

/// The shared machinery: the database, the far side, the binary, the dice.
pub(crate) struct Harness {
    pub(super) exe: PathBuf,
    pub(super) db: String,
    pub dir: PathBuf,
    pub store: Store,
    pub far: far_side::FarSide,
    pub rng: StdRng,
    pub guarded: bool,
    pub(super) nonce: String,
    pub(super) observe: String,
    /// Running average of a clean attempt's wall time, so random kills land inside one.
    pub(super) typical_ms: f64,
}

/// Single-quotes a path for `sh -c`.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Harness {
    /// The effect key `exactly effect` computes for this effect (docs/contract.md, "Effect key").
    pub(crate) fn key(&self, e: &Eff) -> exactly::EffectKey {
        self.spec(e).key()
    }

    fn spec(&self, e: &Eff) -> Spec {
        Spec::new(&e.action, &e.target)
            .input("run", self.nonce.clone())
            .input("i", e.i.to_string())
    }

    /// Claims each job's lease for the whole scenario ([`FOREVER`]); their tokens, in order.
    pub(crate) fn claim_all(&mut self, jobs: &[&str]) -> Result<Vec<Token>> {
        jobs.iter()
            .map(|j| self.claim(j, "chaos", FOREVER))
            .collect()
    }

    /// Releases `job`'s lease taken under `token` (false: a newer token holds it).
    pub(crate) fn release(&mut self, job: &str, token: Token) -> Result<bool> {
        lease::release(&mut self.store, &job.into(), token)
    }

    pub(crate) fn claim(&mut self, job: &str, owner: &str, dur: Duration) -> Result<Token> {
        match lease::claim(&mut self.store, &job.into(), owner, dur)? {
            lease::Claim::Won { token } => Ok(token),
            lease::Claim::Held { owner, until, .. } => Err(Error::Store(format!(
                "job {} is leased by {} until {}; wait for it or use a fresh database",
                inert(job),
                inert(&owner),
                exactly::time::fmt(until)
            ))),
        }
    }

    pub(crate) fn exe_command(&self) -> Command {
        proc::command(&self.exe)
    }

    /// Part of every input, so this run's keys never collide with an earlier run's.
    pub(crate) fn nonce(&self) -> &str {
        &self.nonce
    }

    pub(crate) fn db(&self) -> &str {
        &self.db
    }

    pub(crate) fn exe(&self) -> &Path {
        &self.exe
    }

    /// The far-side client's argv.
    pub(crate) fn client_argv(&self, tag: &str, c: &Client) -> Vec<String> {
        let mut v = vec![
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
        ];
        if c.dedupe {
            v.push("--dedupe".into());
        }
        if c.fence {
            v.push("--fence".into());
        }
        v
    }

    /// The observer shell command `exactly effect --observe` runs.
    pub(crate) fn observe_cmd(&self) -> &str {
        &self.observe
    }

    /// One attempt at an effect: `exactly effect … -- client` when guarded, else the bare client
    /// (the self-check). `pause_at` makes it stop at a named fault point and announce it.
    pub(crate) fn attempt(
        &self,
        e: &Eff,
        c: &Client,
        pause_at: Option<(&str, Duration)>,
    ) -> Command {
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
    pub(crate) fn attempt_with(&self, e: &Eff, c: &Client, how: &How) -> Command {
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
    pub(super) fn effect_args(&self, e: &Eff, observe: &str) -> Vec<String> {
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

    /// The binary, run with its clock `skew_ms` off ours when not 0: libfaketime preloaded into
    /// the process itself, so a kill reaches it. (The `faketime` wrapper forks: killing it left
    /// the real process running and the wrapper's semaphore behind, and a later wrapper whose
    /// pid matched a leaked one failed with "sem_open: File exists".) Without the library, the
    /// wrapper.
    pub(crate) fn skewed(&self, skew_ms: i64) -> Command {
        if skew_ms == 0 {
            return self.exe_command();
        }
        let offset = format!("{:+.3}s", skew_ms as f64 / 1000.0);
        let mut c = self.exe_command();
        if skew_clock(&mut c, &offset).is_err() {
            c = proc::command(Path::new(FAKETIME));
            c.env("FAKETIME_NO_CACHE", "1")
                .arg("-f")
                .arg(offset)
                .arg(&self.exe);
        }
        c
    }

    /// An observer that asks the far side at once and answers `ms` later (a slow API).
    pub(crate) fn slow_observer(&self, ms: u64) -> String {
        format!("{} --answer-after {ms}ms", self.observe)
    }

    pub(crate) fn spawn(
        &self,
        e: &Eff,
        c: &Client,
        pause_at: Option<(&str, Duration)>,
    ) -> Result<Running> {
        Running::spawn(self.attempt(e, c, pause_at))
    }

    /// Runs attempts (the restarts, the next firings) until one ends 0: done now or already
    /// done. Returns every exit code seen; the last is 0 unless it gave up.
    pub(crate) fn settle(&self, e: &Eff, c: &Client, tries: usize) -> Result<Vec<Option<i32>>> {
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

    /// Restarts until the effect is settled (done now or already), as the next run would; a
    /// restart that never gets there is an anomaly. Each restart's time goes into the typical
    /// attempt's, so random kills land inside one.
    pub(crate) fn settle_tallied(
        &mut self,
        t: &mut Tally,
        e: &Eff,
        label: &str,
        tries: usize,
    ) -> Result<()> {
        let started = Instant::now();
        let c = self.settle(e, &Client::quick(), tries)?;
        self.observe_duration(started.elapsed() / c.len().max(1) as u32);
        if c.last() != Some(&Some(0)) {
            let codes: Vec<String> = c
                .iter()
                .map(|c| c.map_or("signal".into(), |c| c.to_string()))
                .collect();
            t.anomaly(format!(
                "{label}: restarts never settled it (exits {})",
                codes.join(",")
            ));
        }
        Ok(())
    }

    pub(crate) fn typical_ms(&self) -> f64 {
        self.typical_ms
    }

    pub(crate) fn observe_duration(&mut self, d: Duration) {
        let ms = d.as_secs_f64() * 1000.0;
        self.typical_ms = if self.typical_ms == 0.0 {
            ms
        } else {
            0.9 * self.typical_ms + 0.1 * ms
        };
    }

    /// Random milliseconds in `lo..hi`.
    pub(crate) fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.gen_range(lo..hi.max(lo + 1)))
    }

    /// Counts what the far side got for each intended effect, and what the ledger says of it.
    pub(super) fn audit(&mut self, t: &mut Tally) -> Result<()> {
        let seen = self.far.dump_all()?;
        let intents = std::mem::take(&mut t.intents);
        for (key, label) in &intents {
            let counts = seen.get(key).copied().unwrap_or_default();
            let n = counts.arrivals;
            t.far_side_requests += n;
            if t.far_side_guarded {
                t.far_side_refused += counts.refused;
                t.pause_duplicates_without_dedupe += counts.requests.saturating_sub(1);
            }
            let row = if self.guarded {
                crate::effect::get(&mut self.store, &key.into())?
            } else {
                None
            };
            let state = row.as_ref().map(|r| &r.state);
            // A double fault's late request is the far side's to refuse: counted apart, and
            // a real duplicate only when it got past a fencing far side.
            let double = t.double_keys.get(key.as_str()).cloned();
            if let Some(scenario) = double {
                let fenced = t.fenced;
                let d = t.double_faults.entry(scenario).or_default();
                if fenced {
                    d.unfenced_duplicates += counts.requests.saturating_sub(1);
                    *d.fenced_duplicates.get_or_insert(0) += n.saturating_sub(1);
                } else {
                    d.unfenced_duplicates += n.saturating_sub(1);
                }
            }
            let double_unfenced = t.double_keys.contains_key(key.as_str()) && !t.fenced;
            if n > 1 && !double_unfenced {
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
            // How the sender that settled it was held: under --no-cgroup, never a cgroup.
            if let Some(c) = row
                .sender
                .as_deref()
                .and_then(crate::sender::containment_of)
            {
                *t.containment.entry(c.to_string()).or_default() += 1;
            }
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

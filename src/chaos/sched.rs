//! The scenarios that need the scheduler: `deploy-restart` (SIGTERM of `exactly run` mid-run,
//! then a new one), `blue-green` (two schedulers on the same jobs, one SIGKILLed and
//! replaced) and `slow-observer` (observers slower than the lease, the scheduler SIGKILLed at
//! random moments), on the real `exactly run`. Throughout, a watcher scans the process table
//! for two runs of one firing alive at once, and the end counts the runs of every firing.
//!
//! The job works the way the essay's keys do: each run sends every pending item (a fact: an
//! order to deliver) through `exactly effect`, keyed by the item, so an effect a dead run left
//! behind is settled by whichever run comes next, on whichever scheduler. Each iteration adds
//! one item and strikes one scheduler.
use super::proc::Running;
use super::{sh_quote, Eff, Harness, Tally};
use crate::effect;
use crate::runner::run::procs;
use crate::sender::Sender;
use crate::state::EffectState;
use crate::{Error, Result};
use indicatif::ProgressBar;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the end of a scenario waits for every item to be settled.
const SETTLE_WAIT: Duration = Duration::from_secs(90);
/// Pending items beyond which a strike waits for a run to be mid-effect (so runs make progress).
const BACKLOG: usize = 6;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// SIGTERM the one scheduler, start the next while the old one drains.
    Deploy,
    /// Two schedulers; SIGKILL one and start a replacement.
    BlueGreen,
    /// One scheduler whose observers take longer than the lease; SIGKILL it, start another.
    SlowObserver,
}

/// The job's lease in the slow-observer scenario, and how long its observers take (longer).
const SLOW_LEASE: &str = "500ms";
const SLOW_OBSERVER: &str = "sleep 0.8";

pub(super) fn run(
    name: &str,
    h: &mut Harness,
    t: &mut Tally,
    n: u32,
    bar: &ProgressBar,
) -> Result<()> {
    let mode = match name {
        "deploy-restart" => Mode::Deploy,
        "blue-green" => Mode::BlueGreen,
        "slow-observer" => Mode::SlowObserver,
        other => return Err(Error::Usage(format!("no scenario named {}", other))),
    };
    let mut f = Fleet::new(h, mode)?;
    let watch = Watcher::start(h.db(), &f.job);
    let result = f.iterations(h, t, n, bar);
    // Whatever happened, stop every scheduler we started and settle what is pending.
    let settled = f.settle(h, t);
    let seen = watch.stop();
    t.overlapping_copies += seen.len() as u64;
    for o in seen.iter().take(5) {
        t.fail(format!(
            "{}: two runs of one firing alive at once: {o}",
            f.name
        ));
    }
    let counted = f.count_runs(h, t);
    result.and(settled).and(counted)
}

/// Scans the process table for processes of two different runs of one firing alive at once
/// (each run's command carries `EXACTLY_SCHEDULED_AT` and `EXACTLY_RUN_ID`).
pub(super) struct Watcher {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<BTreeSet<String>>,
}

impl Watcher {
    pub(super) fn start(db: &str, job: &str) -> Watcher {
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, db, job) = (stop.clone(), db.to_string(), job.to_string());
        let handle = std::thread::spawn(move || {
            let mut seen = BTreeSet::new();
            // Runs' commands carry the database's identity, not the spelling they were given.
            let mut id = None;
            while !flag.load(Ordering::SeqCst) {
                if id.is_none() {
                    id = crate::db_identity(&db).ok();
                }
                let Some(db) = id.as_deref() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let mut runs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
                for p in procs::of_job(db, &job) {
                    runs.entry(p.slot).or_default().insert(p.run_id);
                }
                for (slot, ids) in runs.into_iter().filter(|(_, ids)| ids.len() > 1) {
                    let ids: Vec<String> = ids.into_iter().collect();
                    seen.insert(format!("{slot}: {}", ids.join(" and ")));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        });
        Watcher { stop, handle }
    }

    /// The overlaps seen, one line per firing and set of runs.
    pub(super) fn stop(self) -> BTreeSet<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_default()
    }
}

struct Sched {
    owner: String,
    r: Running,
}

struct Fleet {
    name: &'static str,
    mode: Mode,
    job: String,
    jobs_file: PathBuf,
    items_file: PathBuf,
    /// Where the self-check's naive job notes items it thinks are done.
    done_file: PathBuf,
    /// Items not yet seen `done` in the ledger: (item, effect key).
    pending: Vec<(u64, String)>,
    live: Vec<Sched>,
    /// SIGTERMed schedulers finishing their runs.
    draining: Vec<Sched>,
    started: u32,
}

impl Fleet {
    fn new(h: &mut Harness, mode: Mode) -> Result<Fleet> {
        let name: &'static str = match mode {
            Mode::Deploy => "deploy-restart",
            Mode::BlueGreen => "blue-green",
            Mode::SlowObserver => "slow-observer",
        };
        let job = format!("chaos-{name}");
        let base = h.dir.join(name);
        std::fs::create_dir_all(&base)?;
        let items_file = base.join("items.txt");
        std::fs::write(&items_file, "")?;
        let done_file = base.join("done.txt");
        std::fs::write(&done_file, "")?;
        let script = base.join("job.sh");
        let exe = sh_quote(&h.exe().display().to_string());
        let items = sh_quote(&items_file.display().to_string());
        let send = format!(
            "{exe} far-side send --socket {sock} --tag \"$EXACTLY_JOB:$EXACTLY_FENCING_TOKEN\" \
             --hold-after 300ms --timeout 5s",
            sock = sh_quote(&h.far.socket.display().to_string()),
        );
        let inputs = format!(
            "--action deliver --target warehouse --input run={} --input i=\"$i\"",
            h.nonce()
        );
        let body = if h.guarded {
            // The command a user would write: one guarded effect per pending item, keyed by it.
            let obs = if mode == Mode::SlowObserver {
                format!("{SLOW_OBSERVER}; {}", h.observe_cmd())
            } else {
                h.observe_cmd().to_string()
            };
            format!(
                "OBS={obs}\nfor i in $(cat {items}); do\n  \
                 {exe} effect {inputs} --observe \"$OBS\" -- {send}\ndone\n",
                obs = sh_quote(&obs),
            )
        } else {
            // The self-check's naive job: send, then note the item done; a run killed between
            // the two sends it again next time.
            format!(
                "for i in $(cat {items}); do\n  \
                 grep -qx \"$i\" {done} && continue\n  \
                 EXACTLY_EFFECT_KEY=$({exe} key {inputs}) {send} && echo \"$i\" >> {done}\ndone\n",
                done = sh_quote(&done_file.display().to_string()),
            )
        };
        std::fs::write(&script, format!("#!/bin/sh\n{body}"))?;
        let jobs_file = base.join("jobs.toml");
        let lease = if mode == Mode::SlowObserver {
            SLOW_LEASE
        } else {
            "900ms"
        };
        std::fs::write(
            &jobs_file,
            format!(
                "[[job]]\nname = \"{job}\"\nevery = \"1s\"\nlease = \"{lease}\"\n\
                 overlap = \"coalesce\"\ncommand = [\"sh\", {}]\n",
                toml_str(&script)
            ),
        )?;
        Ok(Fleet {
            name,
            mode,
            job,
            jobs_file,
            items_file,
            done_file,
            pending: Vec::new(),
            live: Vec::new(),
            draining: Vec::new(),
            started: 0,
        })
    }

    fn start(&mut self, h: &Harness, grace: &str) -> Result<()> {
        self.started += 1;
        let owner = format!("chaos-{}-{}", self.name, self.started);
        let mut cmd = h.exe_command();
        // On a database server the schedulers stand in for hosts: each names its own, and two
        // of every three run on a clock 1.5 s off (the server's clock decides their leases).
        if crate::is_server_db(h.db()) {
            let n = self.started as usize % 3;
            cmd.env("EXACTLY_HOST", format!("chaos-host-{n}"));
            if let Some(skew) = ["", "+1.5s", "-1.5s"].get(n).filter(|s| !s.is_empty()) {
                super::harness::skew_clock(&mut cmd, skew)?;
            }
        }
        cmd.arg("--db")
            .arg(h.db())
            .arg("run")
            .arg(&self.jobs_file)
            .args(["--owner", &owner, "--grace", grace]);
        self.live.push(Sched {
            owner,
            r: Running::spawn(cmd)?,
        });
        Ok(())
    }

    fn write_items(&self) -> Result<()> {
        let tmp = self.items_file.with_extension("tmp");
        let body: String = self.pending.iter().map(|(i, _)| format!("{i}\n")).collect();
        std::fs::write(&tmp, body)?;
        std::fs::rename(&tmp, &self.items_file)?;
        Ok(())
    }

    /// Drops items the ledger shows done. Returns the live scheduler whose run is sending an
    /// effect right now, if any (a draining one's does not count: it is no longer the target).
    fn prune(&mut self, h: &mut Harness) -> Result<Option<String>> {
        let mut in_flight = Vec::new();
        let before = self.pending.len();
        let mut keep = Vec::new();
        if !h.guarded {
            let done = std::fs::read_to_string(&self.done_file).unwrap_or_default();
            let done: Vec<&str> = done.lines().collect();
            self.pending
                .retain(|(i, _)| !done.contains(&i.to_string().as_str()));
            if self.pending.len() != before {
                self.write_items()?;
            }
            // No ledger to tell a run mid-send: strikes land at random moments.
            return Ok(None);
        }
        for (i, key) in std::mem::take(&mut self.pending) {
            match effect::get(&mut h.store, &crate::EffectKey::from(&key))? {
                Some(row) if row.state == EffectState::Done => {}
                Some(row) => {
                    if row.state == EffectState::Submitted && effect::sender(&row) == Sender::Alive
                    {
                        in_flight.push(row.run_id);
                    }
                    keep.push((i, key));
                }
                None => keep.push((i, key)),
            }
        }
        self.pending = keep;
        if self.pending.len() != before {
            self.write_items()?;
        }
        if in_flight.is_empty() {
            return Ok(None);
        }
        let runs = crate::jobs::recent_runs(&mut h.store, &crate::JobName::from(&self.job), 10)?;
        Ok(runs
            .into_iter()
            .filter(|r| in_flight.contains(&r.run_id))
            .map(|r| r.owner)
            .find(|o| self.live.iter().any(|s| &s.owner == o)))
    }

    /// Reaps drained schedulers; a deploy's SIGTERM must end in a clean exit.
    fn reap(&mut self, t: &mut Tally) -> Result<()> {
        let mut still = Vec::new();
        for mut s in std::mem::take(&mut self.draining) {
            if s.r.running() {
                still.push(s);
                continue;
            }
            let end = s.r.finish()?;
            // A SIGTERM that lands before the scheduler set up its handler ends it at once,
            // before it started anything: that is not a failed shutdown.
            let early = end.code.is_none() && !end.stderr.contains("started with");
            if self.mode == Mode::Deploy && end.code != Some(0) && !early {
                t.anomaly(format!(
                    "{}: scheduler {} ended {:?} after SIGTERM: {}",
                    self.name,
                    s.owner,
                    end.code,
                    end.last_words()
                ));
            }
        }
        self.draining = still;
        Ok(())
    }

    fn iterations(
        &mut self,
        h: &mut Harness,
        t: &mut Tally,
        n: u32,
        bar: &ProgressBar,
    ) -> Result<()> {
        let schedulers = if self.mode == Mode::BlueGreen { 2 } else { 1 };
        for _ in 0..schedulers {
            self.start(h, "30s")?;
        }
        for i in 0..u64::from(n) {
            let e = Eff {
                job: self.job.clone(),
                token: crate::Token::from(0),
                action: "deliver".into(),
                target: "warehouse".into(),
                i,
            };
            let key = h.key(&e);
            t.intend(&key, format!("{} item #{i}", self.name));
            self.pending.push((i, key.to_string()));
            self.write_items()?;
            let sender = self.wait_to_strike(h)?;
            if sender.is_some() {
                t.mid_effect_strikes += 1;
            }
            self.strike(h, t, sender)?;
            // A deploy sometimes cuts the old runs short; the replacement starts at once.
            let grace = if self.mode == Mode::Deploy && h.rng.gen_bool(0.5) {
                "0s"
            } else {
                "30s"
            };
            self.start(h, grace)?;
            self.reap(t)?;
            self.prune(h)?;
            t.iterations += 1;
            bar.inc(1);
        }
        Ok(())
    }

    /// Waits for the moment to strike: mid-effect (a run is sending an item, the owner of its
    /// scheduler returned) or a random moment (None).
    fn wait_to_strike(&mut self, h: &mut Harness) -> Result<Option<String>> {
        // Strike mid-effect (a run is sending an item) or at a random moment.
        // slow-observer strikes at random moments more often: its point is the observers
        // and the attempt limit, not the send.
        let mid = if self.mode == Mode::SlowObserver {
            0.4
        } else {
            0.8
        };
        let wait_mid = h.guarded && (h.rng.gen_bool(mid) || self.pending.len() > BACKLOG);
        let mut sender = None;
        if wait_mid {
            let deadline = Instant::now() + Duration::from_millis(2500);
            while Instant::now() < deadline {
                sender = self.prune(h)?;
                if sender.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(h.ms(0, 30));
        } else {
            let most = if self.mode == Mode::SlowObserver {
                2500
            } else {
                1200
            };
            std::thread::sleep(h.ms(50, most));
        }
        Ok(sender)
    }

    /// Takes a scheduler down as the mode does (a deploy's SIGTERM, a crash, a host lost):
    /// the one whose run is mid-effect, else one at random.
    fn strike(&mut self, h: &mut Harness, t: &mut Tally, sender: Option<String>) -> Result<()> {
        // The scheduler whose run is mid-effect, else one at random.
        let victim = sender
            .and_then(|o| self.live.iter().position(|s| s.owner == o))
            .unwrap_or_else(|| h.rng.gen_range(0..self.live.len().max(1)));
        if victim < self.live.len() {
            let mut s = self.live.remove(victim);
            match self.mode {
                Mode::Deploy => {
                    if s.r.term() {
                        t.kill("scheduler_sigterm");
                    }
                    self.draining.push(s);
                }
                Mode::SlowObserver => {
                    // The scheduler alone dies (an OOM kill, a crash): whatever its command
                    // started is left for the next run of the firing to end.
                    if s.r.kill() {
                        t.kill("scheduler_sigkill");
                    }
                    s.r.finish()?;
                }
                Mode::BlueGreen => {
                    // Half the time the machine goes with it: its runs die mid-effect too.
                    // Otherwise the runs live on as orphans that the lease must fence.
                    if h.rng.gen_bool(0.5) {
                        if kill_with_runs(&mut s.r) {
                            t.kill("host_sigkill");
                        }
                    } else if s.r.kill() {
                        t.kill("scheduler_sigkill");
                    }
                    s.r.finish()?;
                }
            }
        }
        Ok(())
    }

    /// Counts the runs of every firing of the job: at most 3 each, however often schedulers died.
    fn count_runs(&self, h: &mut Harness, t: &mut Tally) -> Result<()> {
        for (runs, firings) in
            crate::firing::runs_per_firing(&mut h.store, &crate::JobName::from(&self.job))?
        {
            let runs = runs.max(0) as u64;
            *t.runs_per_firing.entry(runs).or_default() += firings.max(0) as u64;
            t.max_runs_per_firing = t.max_runs_per_firing.max(runs);
        }
        t.firings_gave_up +=
            crate::firing::gave_up_count(&mut h.store, &crate::JobName::from(&self.job))?.max(0)
                as u64;
        if t.max_runs_per_firing > 3 {
            t.anomaly(format!(
                "{}: a firing ran {} times (at most 3)",
                self.name, t.max_runs_per_firing
            ));
        }
        Ok(())
    }

    /// Stops the fleet politely, then lets one scheduler run until every item is done.
    fn settle(&mut self, h: &mut Harness, t: &mut Tally) -> Result<()> {
        for mut s in std::mem::take(&mut self.live) {
            s.r.term();
            self.draining.push(s);
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.draining.is_empty() && Instant::now() < deadline {
            self.reap(t)?;
            std::thread::sleep(Duration::from_millis(20));
        }
        self.start(h, "30s")?;
        let deadline = Instant::now() + SETTLE_WAIT;
        while !self.pending.is_empty() && Instant::now() < deadline {
            self.prune(h)?;
            std::thread::sleep(Duration::from_millis(50));
        }
        for mut s in std::mem::take(&mut self.live) {
            s.r.term();
            if !s.r.wait_for(Duration::from_secs(40)) {
                t.anomaly(format!(
                    "{}: scheduler {} ignored SIGTERM",
                    self.name, s.owner
                ));
            }
            s.r.finish()?;
        }
        for s in std::mem::take(&mut self.draining) {
            drop(s); // killed by Running's drop: it outlived a minute of grace
            t.anomaly(format!(
                "{}: a scheduler did not stop after SIGTERM",
                self.name
            ));
        }
        if !self.pending.is_empty() {
            t.anomaly(format!(
                "{}: {} item(s) not done {:?} after the fleet settled",
                self.name,
                self.pending.len(),
                SETTLE_WAIT
            ));
        }
        Ok(())
    }
}

/// SIGKILLs a scheduler and every run it started (each leads its own process group), as the
/// loss of its machine would. Stopped first, so it cannot start a run between scan and kill.
fn kill_with_runs(r: &mut Running) -> bool {
    let pid = r.pid() as i32;
    // SAFETY: signalling our own unreaped child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let runs = children(pid);
    let killed = r.kill();
    for c in runs {
        // SAFETY: a negative pid names the run's process group; it has no other members.
        unsafe { libc::kill(-c, libc::SIGKILL) };
    }
    killed
}

/// The pids whose parent is `pid`, from /proc.
fn children(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|c| {
            std::fs::read_to_string(format!("/proc/{c}/stat"))
                .ok()
                .and_then(|st| {
                    // Fields after the command name, which may itself hold spaces and ')'.
                    let rest = &st[st.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// A TOML basic string.
fn toml_str(p: &Path) -> String {
    serde_json::to_string(&p.display().to_string()).unwrap_or_else(|_| "\"\"".into())
}

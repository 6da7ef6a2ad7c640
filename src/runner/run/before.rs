//! What a run does before its command, when it may have something to do: end what an earlier
//! run of its firing left on this machine, settle the job's open effects with their observers
//! (on a thread of their own, under the lease's heartbeat), mark for retry the runs whose effect
//! never happened, and confirm its token still holds the lease.
use super::execute::{log_line, Run, RunResult, LEFTOVER_WAIT};
use super::hold::Heartbeat;
use super::procs;
use super::spec::RunSpec;
use crate::firing;
use crate::state::RunOutcome;
use crate::{effect, time, Result};
use crate::{Access, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Level;

/// Runs the job's observers on a thread of their own while this one keeps the lease. Returns
/// the verdicts, or None when the run was stopped or fenced meanwhile.
fn observe(
    spec: &RunSpec,
    store: &mut Store,
    beat: &mut Heartbeat,
) -> Option<Vec<effect::Settled>> {
    // Most runs find nothing open: no observer thread and no second connection for them.
    match effect::open_of(store, &spec.job) {
        Ok(open) if open.is_empty() => return Some(Vec::new()),
        _ => {}
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (db, job, cwd, limit, flag) = (
        spec.db.clone(),
        spec.job.clone(),
        spec.cwd.clone(),
        spec.observe_timeout,
        stop.clone(),
    );
    let observers = std::thread::spawn(move || -> Result<Vec<effect::Settled>> {
        let mut store = crate::open(Some(&db), Access::Write)?;
        effect::settle_open_with(&mut store, &job, |cmd, key, env| {
            effect::observe_within(cmd, key, env, cwd.as_deref(), limit, &flag)
        })
    });
    while !observers.is_finished() {
        beat.tick(spec);
        if beat.fenced || spec.kill.load(Ordering::SeqCst) {
            stop.store(true, Ordering::SeqCst);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let settled = match observers.join() {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            log_line(
                Level::WARN,
                &spec.job,
                &format!("observers could not run: {e}"),
            );
            Vec::new()
        }
        Err(_) => {
            log_line(
                Level::WARN,
                &spec.job,
                "observers could not run: their thread panicked",
            );
            Vec::new()
        }
    };
    if stop.load(Ordering::SeqCst) {
        return None;
    }
    Some(settled)
}

impl Run<'_> {
    /// What a run does before its command when it may have something to do: end what an
    /// earlier run of its firing left, settle the job's open effects, and confirm the lease.
    /// Some(result) when the run ended there.
    pub(super) fn before_command(&mut self, store: &mut Store) -> Result<Option<RunResult>> {
        self.end_leftovers();
        // A first run its batch found without open effects (asked once its lease was granted:
        // none can be begun under an older token since) only confirms its lease, however late
        // it starts: asking again would be a read per late run of a starved scheduler.
        if !self.spec.settle && !self.spec.resumed {
            return self.confirm_lease(store);
        }
        // Unknown before retry: the job's open effects get their observers' verdicts first,
        // under the lease's heartbeat so a slow observer never lets the lease lapse.
        let Some(settled) = observe(self.spec, store, &mut self.beat) else {
            let outcome = if self.beat.fenced {
                RunOutcome::Fenced
            } else {
                RunOutcome::Killed
            };
            let why = "stopped while its observers ran, before its command started";
            return self.end(outcome, why).map(Some);
        };
        self.settled(store, &settled);
        self.confirm_lease(store)
    }

    /// A resumed firing never overlaps what an earlier run of it left alive on this machine (a
    /// first run has no earlier one, and is spared the scan of every process).
    fn end_leftovers(&self) {
        let spec = self.spec;
        if !spec.resumed {
            return;
        }
        let (job, run_id, slot) = (&spec.job, &spec.started.run_id, spec.started.slot);
        let slot = &time::fmt(slot);
        let ended = procs::end_leftovers(&self.db_id, job, slot, run_id, LEFTOVER_WAIT);
        if ended > 0 {
            log_line(
                Level::WARN,
                job,
                &format!(
                    "ended {ended} leftover process(es) \
                          of an earlier run of the firing at {slot} before run {run_id}"
                ),
            );
        }
    }

    /// Says what the observers found, and marks for retry the runs whose effect never happened.
    fn settled(&self, store: &mut Store, settled: &[effect::Settled]) {
        let (job, run_id) = (&self.spec.job, &self.spec.started.run_id);
        for s in settled {
            if let effect::Observation::CantTell(w) = &s.verdict {
                log_line(
                    Level::WARN,
                    job,
                    &format!("observer of effect {} can't tell: {w}", s.effect_key),
                );
            }
        }
        if !settled.is_empty() {
            log_line(
                Level::INFO,
                job,
                &format!(
                    "observers settled {} open effect(s) before run {run_id}",
                    settled.len()
                ),
            );
        }
        // An effect that never happened goes out with a re-run of the firing that meant it (its
        // key is of the facts, so that firing's done effects are suppressed).
        for s in settled
            .iter()
            .filter(|s| s.verdict == effect::Observation::NotHappened)
        {
            if let Err(e) = firing::retry_of_run(store, job, &s.run_id) {
                log_line(
                    Level::WARN,
                    job,
                    &format!("cannot mark run {} for retry: {e}", s.run_id),
                );
            }
        }
    }

    /// The token must still hold the lease before the command starts, with half of it left on
    /// our clock: observers may have taken long, and a newer token means another run owns the
    /// job now. Some(result) when the run ended here.
    fn confirm_lease(&mut self, store: &mut Store) -> Result<Option<RunResult>> {
        let spec = self.spec;
        let confirm_by = Instant::now() + spec.lease / 2;
        loop {
            let fresh = self.beat.left() >= spec.lease / 2 && lease_fresh(store, spec);
            if fresh || self.beat.renew(store, spec) {
                return Ok(None);
            }
            if self.beat.fenced {
                let why = "its token lost the lease before its command started";
                return self.end(RunOutcome::Fenced, why).map(Some);
            }
            if Instant::now() >= confirm_by || spec.kill.load(Ordering::SeqCst) {
                let why = "could not confirm its lease in time \
                           (an overloaded or unreachable database); its command never started";
                let run_id = &spec.started.run_id;
                log_line(Level::WARN, &spec.job, &format!("run {run_id}: {why}"));
                return self.end(RunOutcome::NotStarted, why).map(Some);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether the lease row still names this run's token with most of a lease left (the claim
/// that started the run, or the heartbeat while observers ran, just set it): then the command
/// may start on a read, sparing a write that would queue behind every other run's.
fn lease_fresh(store: &mut Store, spec: &RunSpec) -> bool {
    let Ok(Some((row, left))) = crate::lease::get_with_left(store, &spec.job) else {
        return false;
    };
    let Ok(margin) = chrono::Duration::from_std(spec.lease * 2 / 3) else {
        return false;
    };
    row.fencing_token == spec.started.token && left >= margin
}

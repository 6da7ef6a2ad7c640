//! A run's hold on its job: the lease's heartbeat, the local deadline its command is stopped at,
//! and the durable record of its end.
//!
//! The deadline is counted on the monotonic clock from before the write that granted or last
//! renewed the lease, less [`lease::STOP_MARGIN`], and handed to the run's watchdog (a process of its
//! own, see [`crate::wrapped::Watchdog`]): the command is stopped there even while the
//! scheduler is frozen, hung on a read, or starved of CPU, so by the time another scheduler may
//! take the lease (its end plus the clock-skew margin) nothing of this run is left sending.
//!
//! The end of a run is recorded or the run stays owned: every failure to record it (a locked,
//! read-only, full or unreachable database) is retried with capped back-off for as long as the
//! scheduler lives, the lease renewed meanwhile, and other schedulers do not resume a run whose
//! scheduler is alive (see [`crate::firing::ResumeRules`]). Its writes go before the process's
//! queued firings.
use super::lend::{lend, Lent};
use super::renewer::{self, Hold};
use super::spec::RunSpec;
use crate::jobs::{self, RunEnd};
use crate::runner::spawn::watchdog;
use crate::state::RunOutcome;
use crate::{lease, time, Error, Result, Store};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Level;

/// At shutdown (kill set), how long recording the end may still be retried: a scheduler that
/// is told to stop cannot own a run forever (the next one resumes it, see docs/proof.md's limits).
const FINISH_RETRY_AT_SHUTDOWN: Duration = Duration::from_secs(5);
/// The back-off between tries to record an end: doubling from the first to the cap.
const END_RETRY_FIRST: Duration = Duration::from_millis(100);
const END_RETRY_CAP: Duration = Duration::from_secs(1);

/// The stop margin for a lease: [`lease::STOP_MARGIN`] (the watchdog's SIGTERM, its grace
/// before SIGKILL, and a margin, so the stop is over before the lease is), but never more than
/// a quarter of a short one.
fn stop_margin(lease: Duration) -> Duration {
    lease::stop_margin(lease)
}

/// A run's side of the lease's heartbeat: the process's renewer (`renewer.rs`) renews it every
/// third of the lease from the run's first step to its recorded end; the run moves its
/// watchdog's deadline as it hears of renewals. Once renewal is refused the run is fenced.
pub(super) struct Heartbeat {
    pub fenced: bool,
    lease: Duration,
    hold: Arc<Hold>,
    /// The deadline the watchdog was last given.
    armed: Option<Instant>,
    /// The command's process group, held by the watchdog.
    group: Option<i32>,
}

impl Heartbeat {
    /// Enlists the run's lease, granted by a write sent at `spec.granted`.
    pub(super) fn new(spec: &RunSpec) -> Heartbeat {
        Heartbeat {
            fenced: false,
            lease: spec.lease,
            hold: renewer::enlist(
                &spec.db,
                &spec.job,
                spec.started.token,
                spec.lease,
                spec.granted,
            ),
            armed: None,
            group: None,
        }
    }

    /// When the command must be stopped unless the lease is renewed first.
    pub(super) fn deadline(&self) -> Instant {
        self.hold.heard().renewed_at + self.lease - stop_margin(self.lease)
    }

    /// Hands the command's process group to the watchdog, with the deadline (and every later
    /// one as it moves). False when there is no watchdog: this thread alone keeps the deadline.
    pub(super) fn guard(&mut self, group: i32) -> bool {
        // Kept even when no watchdog took it: it is armed again each tick (a restarted
        // watchdog, see `supervise.rs`), and let go of when the command ends.
        self.group = Some(group);
        self.armed = None;
        self.arm();
        self.armed.is_some()
    }

    fn arm(&mut self) {
        let d = self.deadline();
        if let Some(g) = self.group.filter(|_| self.armed != Some(d)) {
            if watchdog::arm(g, d) {
                self.armed = Some(d);
            }
        }
    }

    /// Whether the watchdog stopped the command at the deadline (this process may have been
    /// frozen or hung meanwhile, and renewed the lease since).
    pub(super) fn watchdog_fired(&mut self) -> bool {
        self.group.is_some_and(watchdog::fired)
    }

    /// The command has ended and been reaped: the watchdog lets its group go.
    pub(super) fn end_group(&mut self) {
        if let Some(g) = self.group.take() {
            watchdog::disarm(g);
        }
    }

    /// The longest the run's lease has gone without a renewal (see [`Hold::renewal_gap`]).
    pub(super) fn renewal_gap(&self) -> Duration {
        self.hold.renewal_gap()
    }

    /// Time left before the deadline.
    pub(super) fn left(&self) -> Duration {
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Takes in what the renewer heard: a later deadline (handed to the watchdog), or a fence.
    pub(super) fn tick(&mut self, spec: &RunSpec) {
        self.arm();
        if !self.fenced && self.hold.heard().fenced {
            match lend(&spec.db) {
                Ok(mut store) => self.fence(&mut store, spec),
                Err(e) => {
                    self.fenced = true;
                    tracing::warn!(
                        job = %spec.job,
                        "run {} fenced; cannot record it: {e}",
                        spec.started.run_id
                    );
                }
            }
        }
    }

    fn fence(&mut self, store: &mut Store, spec: &RunSpec) {
        // Stop renewing; the token now refuses the command's later writes.
        self.fenced = true;
        let run_id = &spec.started.run_id;
        tracing::warn!(
            job = %spec.job,
            "run {run_id} fenced: a newer token holds the lease; its command is stopped and its \
             writes refused"
        );
        if let Err(e) = jobs::run_fenced(store, &spec.job, run_id, spec.started.token) {
            tracing::warn!(job = %spec.job, "cannot record the fenced run: {e}");
        }
    }

    /// Renews now, on the run's own connection: true while the token still holds the lease. A
    /// busy database is not a fence (false, but not fenced).
    pub(super) fn renew(&mut self, store: &mut Store, spec: &RunSpec) -> bool {
        let sent = Instant::now();
        let renewed = jobs::writes_first(store, |s| {
            lease::renew(s, &spec.job, spec.started.token, spec.lease)
        });
        match renewed {
            Ok(true) => {
                self.hold.renewed(sent);
                self.arm();
                true
            }
            Ok(false) => {
                self.fence(store, spec);
                false
            }
            Err(e) => {
                tracing::warn!(job = %spec.job, "lease renewal failed: {e}");
                false
            }
        }
    }
}

/// An end not recorded: the run stays owned, its lease renewed meanwhile; said once. True at
/// shutdown past [`FINISH_RETRY_AT_SHUTDOWN`]: give up with `e`.
fn end_not_recorded(
    spec: &RunSpec,
    beat: &mut Heartbeat,
    end: &RunEnd<'_>,
    e: &Error,
    since: Instant,
    tries: &mut u64,
) -> bool {
    beat.hold.unretire();
    *tries += 1;
    if spec.kill.load(Ordering::SeqCst) && since.elapsed() > FINISH_RETRY_AT_SHUTDOWN {
        tracing::error!(
            job = %spec.job,
            "run {} ended {} but its end could not be recorded before shutdown ({e}); \
             the next scheduler resumes its firing",
            spec.started.run_id,
            end.outcome,
        );
        return true;
    }
    if *tries == 1 {
        tracing::warn!(
            job = %spec.job,
            "run {} ended {} but its end cannot be recorded yet ({e}); retrying, \
             the run stays owned",
            spec.started.run_id,
            end.outcome,
        );
    }
    beat.tick(spec);
    false
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunResult {
    pub outcome: RunOutcome,
    pub exit_code: Option<i32>,
    /// The command's own: from its start (or, when it never started, the run's) to the end.
    pub duration_ms: i64,
    /// What its failure decided: its firing's retry, its job's pause (see `RunSpec::failure`).
    pub after: crate::firing::AfterFailure,
}

/// Writes the run's end until it is recorded, or until [`end_not_recorded`] gives up.
fn record_end(
    spec: &RunSpec,
    beat: &mut Heartbeat,
    end: &RunEnd<'_>,
) -> Result<(RunOutcome, crate::firing::AfterFailure)> {
    let since = Instant::now();
    let (mut tries, mut pause) = (0u64, END_RETRY_FIRST);
    let mut lent: Option<Lent> = None;
    let (outcome, after) = loop {
        let s = match lent.as_mut() {
            Some(s) => s,
            None => match lend(&spec.db) {
                Ok(s) => lent.insert(s),
                Err(e) => {
                    if end_not_recorded(spec, beat, end, &e, since, &mut tries) {
                        return Err(e);
                    }
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(END_RETRY_CAP);
                    continue;
                }
            },
        };
        let e = match try_end(s, beat, spec, end, since) {
            Ok(o) => break o,
            Err(e) => e,
        };
        if end_not_recorded(spec, beat, end, &e, since, &mut tries) {
            return Err(e);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(END_RETRY_CAP);
        if !matches!(e, Error::Busy { .. }) {
            // A connection that met a read-only file or a lost server may not recover itself.
            if let Some(s) = lent.as_mut() {
                let _ = s.reopen();
            }
        }
    };
    if tries > 0 {
        tracing::info!(
            job = %spec.job,
            "run {}'s end recorded after {} ({tries} failed tries)",
            spec.started.run_id,
            time::human_ms(since.elapsed().as_millis() as u64),
        );
    }
    Ok((outcome, after))
}

/// One try at writing the run's end, its renewals retired first.
fn try_end(
    s: &mut Lent,
    beat: &mut Heartbeat,
    spec: &RunSpec,
    end: &RunEnd<'_>,
    since: Instant,
) -> Result<(RunOutcome, crate::firing::AfterFailure)> {
    // No renewal may land after the release this write makes.
    beat.hold.retire();
    jobs::writes_first(s, |s| {
        // The fault point `run_end:fail=DUR`: the database refuses the end for DUR.
        match crate::fault::fails_for(crate::fault::Point::RunEnd).filter(|d| since.elapsed() < *d)
        {
            Some(_) => Err(Error::Store(format!(
                "database {}: attempt to write a readonly database (fault point run_end)",
                crate::db_name(s)
            ))),
            None => jobs::finish_run_then(s, end, spec.failure.as_ref()),
        }
    })
}

/// Records the end of the run, retrying every failure (see the module's comment): a run that
/// ended, exit 0 included, is never taken for a dead one. `store` is reopened after an error
/// that is not a lock (a file made read-only and back, a server restarted).
pub(super) fn finish(
    spec: &RunSpec,
    beat: &mut Heartbeat,
    outcome: RunOutcome,
    exit_code: Option<i32>,
    began: Instant,
    command_started: Option<Instant>,
    log: &str,
) -> Result<RunResult> {
    beat.end_group();
    // The command's own duration; the time before it started is the scheduler's start lag,
    // counted from the write that recorded the run's start.
    let duration_ms = command_started.unwrap_or(began).elapsed().as_millis() as i64;
    let start_lag_ms =
        command_started.map(|c| c.saturating_duration_since(spec.granted).as_millis() as i64);
    let renewal_gap_ms = Some(beat.renewal_gap().as_millis() as i64);
    let end = RunEnd {
        job: &spec.job,
        run_id: &spec.started.run_id,
        slot: &time::fmt(spec.started.slot),
        token: spec.started.token.get(),
        outcome,
        exit_code,
        duration_ms,
        start_lag_ms,
        renewal_gap_ms,
        log,
    };
    let (outcome, after) = record_end(spec, beat, &end)?;
    let level = if outcome == RunOutcome::Ok {
        Level::INFO
    } else {
        Level::WARN
    };
    crate::runner::log::line(
        level,
        &spec.job,
        &format!(
            "run {} {outcome} in {}{}",
            spec.started.run_id,
            time::human_ms(duration_ms as u64),
            exit_code
                .map(|c| format!(" (exit {c})"))
                .unwrap_or_default()
        ),
    );
    Ok(RunResult {
        outcome,
        exit_code,
        duration_ms,
        after,
    })
}

//! The run aggregate: one row per run of a firing, its output as it arrives, and how it ended
//! (the outcome settles the firing: ran, retry or gave up; a stopped run's `submitted` effects
//! become `unknown`).
use super::db::{args, DbResult, Optional, Tx};
use super::firing_rows::{gave_up_event, AfterFailure, FailureRules};
use super::{int, record_event, text_or_empty, word, NewEvent, Store, RELEASED};
use exactly_words::policy::used_up;
use exactly_words::state::{EventKind, FiringState, RunOutcome};
use exactly_words::Result;

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunEnd<'a> {
    /// The job it ran.
    pub job: &'a str,
    /// The run's id.
    pub run_id: &'a str,
    /// The slot its firing was scheduled for.
    pub slot: &'a str,
    /// The fencing token it ran under.
    pub token: i64,
    /// How it ended.
    pub outcome: RunOutcome,
    /// Its command's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// How long its command ran (ms): from the command's start (the run's, when it never
    /// started) to the end.
    pub duration_ms: i64,
    /// From the run's recorded start to its command's start (ms); None when it never started.
    pub start_lag_ms: Option<i64>,
    /// The longest its lease went without a renewal (ms).
    pub renewal_gap_ms: Option<i64>,
    /// Its output, as kept with the run.
    pub log: &'a str,
}

/// What a run's effects did, from the events carrying its token.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EffectCounts {
    /// Effects it sent and recorded `done`.
    pub done: u64,
    /// Effects not sent again: the ledger already held their effect key.
    pub suppressed: u64,
    /// Writes refused: a higher fencing token held the job.
    pub fenced: u64,
    /// Effects it left `unknown`.
    pub unknown: u64,
}

impl Store {
    /// Durations of a job's recent runs that ended by themselves (`ok`, `failed`): a run we
    /// stopped (killed, timeout) or that was fenced says how long we let it run, not how long
    /// the job takes. The snapshot's window: the last 500, at most 7 days.
    /// `oldest`: the window's start (the caller's now less `RUN_WINDOW_DAYS`).
    pub fn run_durations(&mut self, job: &str, oldest: &str) -> Result<Vec<i64>> {
        self.read(|tx| {
            let rows = tx.rows(
                "SELECT duration_ms FROM exactly_runs WHERE job_key = ?1 AND started_at >= ?2
                   AND duration_ms IS NOT NULL AND outcome IN ('ok', 'failed')
                   ORDER BY started_at DESC LIMIT ?3",
                args![job, oldest, super::RUN_WINDOW as i64],
                |r| r.get(0),
            );
            rows
        })
    }

    /// Records that a run's lease renewal was refused: a higher token exists.
    pub fn run_fenced(&mut self, job: &str, run_id: &str, token: i64, now: &str) -> Result<()> {
        self.write(|tx| {
            let now = tx.now(now);
            let detail =
                format!("run {run_id} fenced: lease renewal refused, a newer token holds the job");
            record_event(
                tx,
                &NewEvent::new(EventKind::RunFenced, now)
                    .job(job)
                    .token(token)
                    .detail(&detail),
            )
        })
    }

    /// Stores a running run's output so far (readable by `exactly logs --follow`); a run that
    /// ended keeps its final output.
    pub fn run_output_so_far(&mut self, run_id: &str, log: &str) -> Result<()> {
        self.write(|tx| {
            tx.exec(
                "UPDATE exactly_runs SET log = ?2 WHERE run_id = ?1 AND ended_at IS NULL",
                args![run_id, log],
            )?;
            Ok(())
        })
    }

    /// Records how a run ended and releases its lease (unless it was fenced). Returns the final
    /// outcome: `fenced` when the release was refused.
    pub fn finish_run(&mut self, end: &RunEnd<'_>, now: &str) -> Result<RunOutcome> {
        Ok(self.finish_run_then(end, now, None)?.0)
    }

    /// [`Store::finish_run_then`], and the job's `keep_runs` read in the same transaction (None:
    /// no limit), so a run's end trims its job without a read of its own.
    pub fn finish_run_kept(
        &mut self,
        end: &RunEnd<'_>,
        now: &str,
        failure: Option<&FailureRules>,
    ) -> Result<(RunOutcome, AfterFailure, Option<i64>)> {
        self.write(|tx| {
            let (outcome, after) = finish_run_tx(tx, end, now, failure)?;
            let keep = tx
                .one(
                    "SELECT keep_runs FROM exactly_jobs WHERE job_key = ?1 \
                     AND keep_runs IS NOT NULL AND retired = 0",
                    args![end.job],
                    |r| r.get::<i64>(0),
                )
                .optional()?;
            Ok((outcome, after, keep))
        })
    }

    /// [`Store::finish_run`], and for a failed run its job's retry and pause (`failure`),
    /// in the same transaction: a crash never leaves a failed run without its retry.
    pub fn finish_run_then(
        &mut self,
        end: &RunEnd<'_>,
        now: &str,
        failure: Option<&FailureRules>,
    ) -> Result<(RunOutcome, AfterFailure)> {
        self.write(|tx| finish_run_tx(tx, end, now, failure))
    }

    /// Counts what a run's effects did, from the events that carry its fencing token.
    pub fn run_effect_counts(&mut self, job: &str, token: i64) -> Result<EffectCounts> {
        self.read(|tx| {
            let rows = tx.rows(
                "SELECT kind, count(*) FROM exactly_events WHERE job_key = ?1 AND fencing_token = ?2
                   AND kind IN (?3, ?4, ?5, ?6) GROUP BY kind",
                args![
                    job,
                    token,
                    EventKind::EffectDone,
                    EventKind::DuplicateSuppressed,
                    EventKind::FencedWrite,
                    EventKind::EffectUnknown
                ],
                |r| {
                    Ok((
                        word::<EventKind>(r, 0)?,
                        int(r, 1)?.unwrap_or(0).max(0) as u64,
                    ))
                },
            )?;
            let mut c = EffectCounts::default();
            for (k, n) in rows {
                match k {
                    EventKind::EffectDone => c.done = n,
                    EventKind::DuplicateSuppressed => c.suppressed = n,
                    EventKind::FencedWrite => c.fenced = n,
                    _ => c.unknown = n,
                }
            }
            Ok(c)
        })
    }
}

/// [`Store::finish_run_then`] inside the caller's transaction.
fn finish_run_tx(
    tx: &Tx<'_>,
    end: &RunEnd<'_>,
    now: &str,
    failure: Option<&FailureRules>,
) -> DbResult<(RunOutcome, AfterFailure)> {
    let now = tx.now(now);
    let mut outcome = end.outcome.clone();
    if outcome != RunOutcome::Fenced && !release_lease_tx(tx, end, now)? {
        outcome = RunOutcome::Fenced;
    }
    // A command that stopped at an effect waiting for a person's approval (`exactly
    // effect --needs-approval` exits 4 while the job's approval is pending) did not
    // fail: its firing waits for the decision.
    let mut awaited = None;
    if outcome == RunOutcome::Failed && end.exit_code == Some(4) {
        awaited = super::approval::awaited_tx(tx, end.job, end.run_id)?;
        if awaited.is_some() {
            outcome = RunOutcome::AwaitingApproval;
        }
    }
    record_run_end_tx(tx, end, now, &outcome)?;
    settle_firing_tx(tx, end, now, &outcome, awaited.as_ref())?;
    stopped_effects_unknown_tx(tx, end, now, &outcome)?;
    run_end_event_tx(tx, end, now, &outcome)?;
    let after = match failure {
        Some(f) if exactly_words::state::is_failure(outcome.as_str()) => {
            super::resume::after_failed_tx(tx, end.job, end.run_id, f, now)?
        }
        _ => AfterFailure::default(),
    };
    Ok((outcome, after))
}

/// Releases the run's lease, unless a newer holder took it: then the run was fenced, and both
/// events say so. Whether the lease was released.
fn release_lease_tx(tx: &Tx<'_>, end: &RunEnd<'_>, now: &str) -> DbResult<bool> {
    let released = tx
        .one(
            "UPDATE job_lease SET lease_until = ?2 WHERE job_key = ?1 \
                 AND fencing_token = ?3
               AND lease_until <> ?2 RETURNING fencing_token",
            args![end.job, RELEASED, end.token],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !released {
        let detail = format!("run {} fenced: lease release refused", end.run_id);
        record_event(
            tx,
            &NewEvent::new(EventKind::FencedWrite, now)
                .job(end.job)
                .token(end.token)
                .detail("lease release refused"),
        )?;
        record_event(
            tx,
            &NewEvent::new(EventKind::RunFenced, now)
                .job(end.job)
                .token(end.token)
                .detail(&detail),
        )?;
    }
    Ok(released)
}

/// Writes how the run ended onto its row.
fn record_run_end_tx(
    tx: &Tx<'_>,
    end: &RunEnd<'_>,
    now: &str,
    outcome: &RunOutcome,
) -> DbResult<()> {
    tx.exec(
        "UPDATE exactly_runs SET ended_at = ?2, outcome = ?3, duration_ms = ?4, \
             exit_code = ?5, log = ?6, start_lag_ms = ?7, renewal_gap_ms = ?8
         WHERE run_id = ?1",
        args![
            end.run_id,
            now,
            outcome,
            end.duration_ms,
            end.exit_code,
            end.log,
            end.start_lag_ms,
            end.renewal_gap_ms
        ],
    )?;
    Ok(())
}

/// Settles the run's firing by its outcome: ran, missed, awaiting approval, retry or gave up.
fn settle_firing_tx(
    tx: &Tx<'_>,
    end: &RunEnd<'_>,
    now: &str,
    outcome: &RunOutcome,
    awaited: Option<&(String, bool)>,
) -> DbResult<()> {
    // A run we had to kill (grace expired at a deploy, a signal) did not finish its
    // work: its firing goes again (see `resume_firing`), a bounded number of times so a
    // command that always crashes cannot loop.
    // Counted only for a killed run: the count walks the job's runs, and every other
    // outcome ends the firing whatever it says.
    let attempts: i64 = if *outcome == RunOutcome::Killed {
        tx.one(
            "SELECT count(*) FROM exactly_runs WHERE job_key = ?1 AND scheduled_at = ?2",
            args![end.job, end.slot],
            |r| r.get(0),
        )?
    } else {
        0
    };
    let state = match (outcome, !used_up(attempts)) {
        (RunOutcome::Killed, true) => FiringState::Retry,
        (RunOutcome::Killed, false) => FiringState::GaveUp,
        (RunOutcome::NotStarted, _) => FiringState::Missed,
        // Approved while its run was ending: it goes again at once.
        (RunOutcome::AwaitingApproval, _) if awaited.is_some_and(|a| a.1) => FiringState::Retry,
        (RunOutcome::AwaitingApproval, _) => FiringState::AwaitingApproval,
        _ => FiringState::Ran,
    };
    // A firing whose command never started is a miss, and says why.
    let detail = match outcome {
        RunOutcome::NotStarted => {
            format!(
                "{outcome}: {}",
                exactly_words::sanitize::inert_trunc(end.log, 200)
            )
        }
        RunOutcome::AwaitingApproval => match awaited {
            Some((key, true)) => super::approval::approved_detail(key, "a person"),
            Some((key, false)) => super::approval::awaiting_detail(key),
            None => outcome.to_string(),
        },
        _ => outcome.to_string(),
    };
    let moved = tx.exec(
        "UPDATE exactly_firings SET state = ?6, updated_at = ?4, detail = ?5
         WHERE job_key = ?1 AND scheduled_at = ?2 AND run_id = ?3",
        args![end.job, end.slot, end.run_id, now, detail, state],
    )?;
    if moved > 0 && state == FiringState::GaveUp {
        gave_up_event(
            tx,
            end.job,
            end.slot,
            (attempts, exactly_words::policy::MAX_ATTEMPTS),
            None,
            now,
        )?;
    }
    Ok(())
}

/// A run we stopped (timeout, shutdown) was killed with its whole process group: an effect it
/// had `submitted` lost its sender, so it is `unknown` until observed.
fn stopped_effects_unknown_tx(
    tx: &Tx<'_>,
    end: &RunEnd<'_>,
    now: &str,
    outcome: &RunOutcome,
) -> DbResult<()> {
    if !matches!(outcome, RunOutcome::Timeout | RunOutcome::Killed) {
        return Ok(());
    }
    let keys = tx.rows(
        "UPDATE effect_ledger SET state = 'unknown', updated_at = ?3
         WHERE job_key = ?1 AND fencing_token = ?2 AND state = 'submitted'
         RETURNING effect_key",
        args![end.job, end.token, now],
        |r| text_or_empty(r, 0),
    )?;
    for key in keys {
        let detail = format!(
            "its run {} was stopped ({outcome}) while it was sending",
            end.run_id
        );
        record_event(
            tx,
            &NewEvent::new(EventKind::EffectUnknown, now)
                .job(end.job)
                .effect(&key)
                .token(end.token)
                .detail(&detail),
        )?;
    }
    Ok(())
}

/// The event a run that did not succeed leaves: failed, killed, timed out, or its firing missed.
fn run_end_event_tx(
    tx: &Tx<'_>,
    end: &RunEnd<'_>,
    now: &str,
    outcome: &RunOutcome,
) -> DbResult<()> {
    let k = match outcome {
        RunOutcome::Failed => Some(EventKind::RunFailed),
        RunOutcome::Killed => Some(EventKind::RunKilled),
        RunOutcome::Timeout => Some(EventKind::RunTimeout),
        RunOutcome::NotStarted => Some(EventKind::FiringMissed),
        _ => None,
    };
    if let Some(k) = k {
        let detail = match end.exit_code {
            Some(c) => format!("run {} {outcome} (exit {c})", end.run_id),
            None => format!("run {} {outcome}", end.run_id),
        };
        record_event(
            tx,
            &NewEvent::new(k, now)
                .job(end.job)
                .token(end.token)
                .detail(&detail),
        )?;
    }
    Ok(())
}

//! Firings brought back: a firing whose run died, or whose effect an observer found never
//! happened, is fired again for the same slot — at most `policy::MAX_ATTEMPTS` runs, then it
//! ends `gave_up` (a loud event); one too old is given up as interrupted.
use super::db::{args, DbResult, Optional, Tx};
use super::firing_rows::{
    gave_up_event, start_firing, AfterFailure, FailureRules, OwnerScheduler, Resumed, RunOwner,
    EFFECT_NEVER_HAPPENED, FAILED_RETRY,
};
use super::job::{paused, set_paused_tx};
use super::{record_event, text, text_or_empty, NewEvent, Store};
use exactly_words::policy::RetryRules;
use exactly_words::state::{is_failure, EventKind};
use exactly_words::time::{fmt, Ts};
use exactly_words::Result;

/// After a failed run, in the transaction that records its end: marks its firing to go again
/// while it has had fewer runs than `retry_below`, and pauses the job when its last
/// `pause_after` runs all failed.
pub(super) fn after_failed_tx(
    tx: &Tx<'_>,
    job: &str,
    run_id: &str,
    rules: &FailureRules,
    now: &str,
) -> DbResult<AfterFailure> {
    let mut out = AfterFailure::default();
    let runs: i64 = tx.one(
        "SELECT count(*) FROM exactly_runs WHERE job_key = ?1 AND scheduled_at =
            (SELECT scheduled_at FROM exactly_runs WHERE run_id = ?2)",
        args![job, run_id],
        |r| r.get(0),
    )?;
    if runs < rules.retry_below {
        let detail = format!(
            "{FAILED_RETRY}: run {} of at most {} goes after its backoff",
            runs + 1,
            rules.retry_below
        );
        let marked = tx.exec(
            "UPDATE exactly_firings SET state = 'retry', updated_at = ?3, detail = ?4
             WHERE job_key = ?1 AND run_id = ?2 AND state = 'ran'",
            args![job, run_id, now, detail],
        )?;
        if marked > 0 {
            out.retry = Some(runs);
        }
    }
    let Some(n) = rules.pause_after else {
        return Ok(out);
    };
    // Counted since the job was last resumed: a resumed job gets N runs again.
    let last = tx.rows(
        "SELECT outcome FROM exactly_runs WHERE job_key = ?1 AND ended_at IS NOT NULL
           AND ended_at > coalesce((SELECT paused_at FROM exactly_jobs
                                    WHERE job_key = ?1 AND paused = 0), '')
         ORDER BY ended_at DESC LIMIT ?2",
        args![job, n],
        |r| text_or_empty(r, 0),
    )?;
    let in_a_row = last.iter().take_while(|o| is_failure(o)).count() as i64;
    if in_a_row >= n {
        let note = format!(
            "paused after {in_a_row} failed runs in a row (pause_after_failures = {n}); \
             `exactly resume {job}` fires it again"
        );
        if set_paused_tx(tx, job, true, &rules.by, Some(&note), now)? {
            out.paused = Some(in_a_row);
        }
    }
    Ok(out)
}

/// A run that never recorded its end (its process died) is closed as `killed`.
fn close_dead_run(tx: &Tx<'_>, run_id: Option<&str>, now: &str) -> DbResult<()> {
    let now = tx.now(now);
    if let Some(old) = run_id {
        tx.exec(
            "UPDATE exactly_runs SET ended_at = ?2, outcome = 'killed'
             WHERE run_id = ?1 AND ended_at IS NULL",
            args![old, now],
        )?;
    }
    Ok(())
}

/// The owner of a run and its scheduler's row, if any.
fn run_owner(
    tx: &Tx<'_>,
    run_id: Option<&str>,
    now: &str,
    silent_for: chrono::Duration,
) -> DbResult<Option<RunOwner>> {
    let Some(run_id) = run_id else {
        return Ok(None);
    };
    // An unreadable clock is said, not read as "now": that would judge every scheduler by
    // the wrong instant.
    let silent_before = fmt(clock(now)? - silent_for);
    tx.one(
        "SELECT r.owner, s.owner, s.host_id, s.pid, s.ended_at IS NOT NULL, s.heartbeat_at < ?2
         FROM exactly_runs r LEFT JOIN exactly_schedulers s ON s.owner = r.owner
         WHERE r.run_id = ?1",
        args![run_id, silent_before],
        |r| {
            let owner = text_or_empty(r, 0)?;
            let scheduler = match text(r, 1)? {
                None => None,
                Some(_) => Some(OwnerScheduler {
                    host_id: text(r, 2)?,
                    pid: r.get::<Option<i64>>(3)?.unwrap_or(0),
                    ended: r.get::<Option<bool>>(4)?.unwrap_or(false),
                    silent: r.get::<Option<bool>>(5)?.unwrap_or(true),
                }),
            };
            Ok(RunOwner { owner, scheduler })
        },
    )
    .optional()
}

/// Who resumes a job's firings, and how it judges an earlier run's scheduler: silent for
/// `silent_for`, or `gone` (see `exactly::firing::ResumeRules`).
pub struct Resumer<'a> {
    pub owner: &'a str,
    pub silent_for: chrono::Duration,
    pub gone: &'a dyn Fn(&RunOwner) -> bool,
}

/// The instants a resume works with: the lease it takes ends at `lease_until`, and `running`
/// firings before `oldest` are too old to resume.
pub struct ResumeTimes<'a> {
    pub lease_until: &'a str,
    pub now: &'a str,
    pub oldest: &'a str,
}

impl Store {
    /// Fires again, for the same slot, a firing whose run died with its scheduler (still
    /// `running`, its run never ended and its token no longer holds a live lease) or whose effect
    /// an observer found never happened (`retry`, however old). The command's effects are keyed
    /// by facts, so what was done is suppressed and only what never went out is sent. A firing
    /// that already had its job's attempts (`policy::MAX_ATTEMPTS`, or more with `retries`) ends
    /// `gave_up` (a loud event) instead of another. A firing whose run failed goes again only
    /// after its backoff (what is left of it: [`Resumed::backoff_left`]).
    /// `running` firings older than `oldest` are given up as `interrupted` (recorded, never
    /// silent). The caller must not be running the job itself. One transaction.
    pub fn resume_firing(
        &mut self,
        job: &str,
        by: &Resumer<'_>,
        at: &ResumeTimes<'_>,
        retry: &RetryRules<'_>,
    ) -> Result<Resumed> {
        let Resumer {
            owner,
            silent_for,
            gone,
        } = *by;
        let ResumeTimes {
            lease_until,
            now,
            oldest,
        } = *at;
        self.write(|tx| {
            let now = tx.now(now);
            let mut out = Resumed::default();
            if paused(tx, job)?.is_some() {
                return Ok(out);
            }
            let live: bool = tx.one(
                "SELECT EXISTS (SELECT 1 FROM job_lease WHERE job_key = ?1 AND lease_until > ?2)",
                args![job, now],
                |r| r.get(0),
            )?;
            if live {
                return Ok(out);
            }
            interrupt_too_old_tx(tx, job, oldest, owner, now)?;
            loop {
                let Some(c) = next_candidate_tx(tx, job)? else {
                    return Ok(out);
                };
                // A run is resumed only once its scheduler is gone, never because its end is
                // slow to be recorded (a busy or unreachable database): that scheduler still
                // owns it and records its end when it can.
                if c.state == "running" {
                    if let Some(who) = run_owner(tx, c.old_run.as_deref(), now, silent_for)? {
                        if !gone(&who) {
                            out.held_by = Some(who.owner);
                            return Ok(out);
                        }
                    }
                }
                let slot = fmt(c.slot);
                let runs: i64 = tx.one(
                    "SELECT count(*) FROM exactly_runs WHERE job_key = ?1 AND scheduled_at = ?2",
                    args![job, slot],
                    |r| r.get(0),
                )?;
                if c.failed() {
                    if let Some(left) = backoff_left_tx(tx, job, &slot, runs, retry, now)? {
                        out.backoff_left = Some((c.slot, left));
                        return Ok(out);
                    }
                }
                if runs >= retry.attempts {
                    used_up_tx(tx, job, &c, (runs, retry.attempts), owner, now)?;
                    out.gave_up.push((c.slot, runs));
                    continue;
                }
                let Some(started) = start_firing(tx, job, c.slot, owner, lease_until, now)? else {
                    return Ok(out);
                };
                close_dead_run(tx, c.old_run.as_deref(), now)?;
                let detail = format!(
                    "firing at {} resumed by run {} (run {} of at most {}): {} (was run {})",
                    slot,
                    started.run_id,
                    runs + 1,
                    retry.attempts,
                    c.why(),
                    c.old_run.as_deref().unwrap_or("-")
                );
                record_event(
                    tx,
                    &NewEvent::new(EventKind::FiringResumed, now)
                        .job(job)
                        .actor(owner)
                        .token(started.token.get())
                        .detail(&detail),
                )?;
                out.started = Some(started);
                return Ok(out);
            }
        })
    }

    /// An observer found that an effect sent by `run_id` never happened: that run's firing is
    /// fired again (see [`Store::resume_firing`]). Returns whether a firing was marked.
    pub fn retry_firing_of_run(&mut self, job: &str, run_id: &str, now: &str) -> Result<bool> {
        self.write(|tx| {
            let now = tx.now(now);
            Ok(tx.exec(
                "UPDATE exactly_firings SET state = 'retry', updated_at = ?3,
                    detail = ?4
                 WHERE job_key = ?1 AND run_id = ?2 AND state = 'ran'",
                args![job, run_id, now, EFFECT_NEVER_HAPPENED],
            )? > 0)
        })
    }
}

/// With no live lease, a `running` firing's run is dead unless it ended normally: one older
/// than the resume window (`oldest`) is not resumed but marked interrupted, with one event.
fn interrupt_too_old_tx(
    tx: &Tx<'_>,
    job: &str,
    oldest: &str,
    owner: &str,
    now: &str,
) -> DbResult<()> {
    let given_up = tx.exec(
        "UPDATE exactly_firings SET state = 'interrupted', updated_at = ?3,
            detail = 'its run died and the firing is older than the resume window'
         WHERE job_key = ?1 AND state = 'running' AND scheduled_at < ?2",
        args![job, oldest, now],
    )?;
    if given_up > 0 {
        let detail =
            format!("{given_up} interrupted firing(s) before {oldest} not resumed: too old");
        record_event(
            tx,
            &NewEvent::new(EventKind::FiringMissed, now)
                .job(job)
                .actor(owner)
                .detail(&detail),
        )?;
    }
    Ok(())
}

/// A firing whose runs are used up ends `gave_up`, loudly.
fn used_up_tx(
    tx: &Tx<'_>,
    job: &str,
    c: &Candidate,
    runs: (i64, i64),
    owner: &str,
    now: &str,
) -> DbResult<()> {
    close_dead_run(tx, c.old_run.as_deref(), now)?;
    let slot = fmt(c.slot);
    tx.exec(
        "UPDATE exactly_firings SET state = 'gave_up', updated_at = ?3,
            detail = 'its runs were used up without finishing'
         WHERE job_key = ?1 AND scheduled_at = ?2",
        args![job, slot, now],
    )?;
    gave_up_event(tx, job, &slot, runs, Some(owner), now)
}

/// A firing to bring back: the job's newest `running` or `retry` one.
struct Candidate {
    slot: Ts,
    state: String,
    old_run: Option<String>,
    detail: Option<String>,
}

impl Candidate {
    /// Marked to go again because its run failed (`retries`): it waits out its backoff.
    fn failed(&self) -> bool {
        self.state == "retry"
            && self
                .detail
                .as_deref()
                .is_some_and(|d| d.starts_with(FAILED_RETRY))
    }

    /// Why it is resumed, as its event says.
    fn why(&self) -> &'static str {
        let approved = self
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with(super::approval::APPROVAL_CAME));
        if self.failed() {
            "its run failed (retries)"
        } else if approved {
            "its approval came"
        } else if self.state == "retry" {
            "an observer found its effect never happened"
        } else {
            "its run died with its scheduler"
        }
    }
}

fn next_candidate_tx(tx: &Tx<'_>, job: &str) -> DbResult<Option<Candidate>> {
    tx.one(
        "SELECT scheduled_at, state, run_id, detail FROM exactly_firings
             WHERE job_key = ?1 AND state IN ('running', 'retry')
             ORDER BY scheduled_at DESC LIMIT 1",
        args![job],
        |r| {
            Ok(Candidate {
                // A bad slot is the row's corruption, said: skipped, the firing was never
                // resumed nor given up; guessed, it would run for a slot nobody scheduled.
                slot: super::rows::slot(r, 0, "exactly_firings.scheduled_at")?,
                state: text_or_empty(r, 1)?,
                old_run: text(r, 2)?,
                detail: text(r, 3)?,
            })
        },
    )
    .optional()
}

/// A failed firing's backoff, counted from its last run's end: how long is left, or None when
/// it may go now (waited out, or `retry.held` says the caller waited it).
fn backoff_left_tx(
    tx: &Tx<'_>,
    job: &str,
    slot: &str,
    runs: i64,
    retry: &RetryRules<'_>,
    now: &str,
) -> DbResult<Option<std::time::Duration>> {
    // A bad end is the row's corruption, said: read as "no run ended" it let the retry go at
    // once, without its backoff.
    let ended = tx.one(
        "SELECT max(ended_at) FROM exactly_runs WHERE job_key = ?1 \
         AND scheduled_at = ?2",
        args![job, slot],
        |r| super::rows::ts(r, 0, "exactly_runs.ended_at"),
    )?;
    let backoff = (retry.backoff)(slot, runs);
    let wait = chrono::Duration::from_std(backoff).unwrap_or(chrono::Duration::zero());
    let at = ended.map(|e| e + wait);
    let now_ts = clock(now)?;
    let held = retry.held == Some(slot);
    let Some(at) = at.filter(|at| !held && now_ts < *at) else {
        return Ok(None);
    };
    // A wall clock stepped back since the run's end would make the wait longer than the
    // backoff: never more than the backoff.
    let left = (at - now_ts).to_std().unwrap_or(backoff).min(backoff);
    Ok(Some(left))
}

/// The transaction's clock as a time (the caller's `now`, or the server's).
fn clock(now: &str) -> DbResult<Ts> {
    exactly_words::time::parse(now)
        .ok_or_else(|| super::db::DbError::Other(format!("the clock's time {now:?} is unreadable")))
}

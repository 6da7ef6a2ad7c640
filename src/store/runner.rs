//! The scheduler's SQL: the job registry, firings (identity = job + scheduled instant, the
//! primary key is the dedupe), runs, and the persisted queue. A firing's fate — started,
//! duplicate, skipped, coalesced, queued, saturated, missed — is decided in one transaction
//! together with the lease claim, so a crash never leaves half a decision.
use super::ledger::{claim_lease_tx, LeaseClaim};
use super::{int, kind, record_event, text, text_or_empty, NewEvent, Store, RELEASED};
use crate::runner::Overlap;
use crate::Result;
use rusqlite::{params, OptionalExtension, Transaction};

/// How many runs one firing gets, however they end (killed, died with their scheduler, an
/// effect that never happened): counted from the runs table, so across restarts and schedulers.
pub const MAX_ATTEMPTS: i64 = 3;

/// Firing states that never ran a command: a backfill may take such a firing over.
const NEVER_RAN: &[&str] = &["missed", "coalesced", "saturated", "skipped"];

/// One job as a scheduler registers it.
#[derive(Debug, Clone, Default)]
pub struct JobReg {
    pub job_key: String,
    pub schedule: String,
    pub timezone: Option<String>,
    pub interval_s: i64,
    pub lease_s: i64,
    /// The lease in milliseconds (sub-second leases exist in tests and fast jobs).
    pub lease_ms: i64,
    pub overlap: String,
    pub queue_cap: Option<i64>,
    pub command_digest: String,
    /// The argv as JSON.
    pub command: String,
    pub catchup_s: i64,
    /// A run past this is stopped; None: no limit.
    pub timeout_ms: Option<i64>,
    pub observe_timeout_ms: i64,
}

/// A registry row, as `trigger`, `backfill` and `check` read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegisteredJob {
    pub job_key: String,
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub interval_s: Option<i64>,
    pub lease_s: Option<i64>,
    pub lease_ms: Option<i64>,
    pub overlap: Option<String>,
    pub queue_cap: Option<i64>,
    pub command_digest: Option<String>,
    pub command: Option<String>,
    pub catchup_s: Option<i64>,
    pub timeout_ms: Option<i64>,
    pub observe_timeout_ms: Option<i64>,
    pub paused: bool,
    pub pause_note: Option<String>,
    pub retired: bool,
    pub source: Option<String>,
}

const REG_COLS: &str = "job_key, schedule, timezone, interval_s, lease_s, lease_ms, overlap,
    queue_cap, command_digest, command, catchup_s, paused, pause_note, retired, source,
    timeout_ms, observe_timeout_ms";

fn reg_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RegisteredJob> {
    Ok(RegisteredJob {
        job_key: text_or_empty(r, 0)?,
        schedule: text(r, 1)?,
        timezone: text(r, 2)?,
        interval_s: int(r, 3)?,
        lease_s: int(r, 4)?,
        lease_ms: int(r, 5)?,
        overlap: text(r, 6)?,
        queue_cap: int(r, 7)?,
        command_digest: text(r, 8)?,
        command: text(r, 9)?,
        catchup_s: int(r, 10)?,
        paused: int(r, 11)?.unwrap_or(0) != 0,
        pause_note: text(r, 12)?,
        retired: int(r, 13)?.unwrap_or(0) != 0,
        source: text(r, 14)?,
        timeout_ms: int(r, 15)?,
        observe_timeout_ms: int(r, 16)?,
    })
}

/// What registering a file changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Registered {
    /// Jobs new to the registry (or back from retirement): they have no past to have missed.
    pub fresh: Vec<String>,
    /// Jobs of this file no longer in it.
    pub retired: Vec<String>,
}

/// A firing about to be decided.
#[derive(Debug, Clone)]
pub struct FireRequest<'a> {
    pub job: &'a str,
    /// The scheduled instant (fixed-width UTC): with the job, the firing's identity.
    pub slot: &'a str,
    /// `scheduled`, `catchup`, `manual` or `backfill`.
    pub kind: &'a str,
    pub owner: &'a str,
    pub lease_until: &'a str,
    pub now: &'a str,
    pub overlap: Overlap,
    /// Backfill: a busy lease is waited for (nothing recorded) instead of applying the overlap
    /// policy, and a firing that never ran may be taken over.
    pub backfill: bool,
    /// The caller is itself running this job right now: its run is live whatever the lease row
    /// says (a heartbeat may be late), so the overlap policy applies without a claim.
    pub live_here: bool,
}

/// A run that just started: we hold the job's lease with this token.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub token: i64,
    pub run_id: String,
    pub slot: String,
    pub stolen_from: Option<(String, i64)>,
}

/// What [`Store::resume_firing`] did: the run it started, and the firings it gave up on
/// (slot, runs it had).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resumed {
    pub started: Option<Started>,
    pub gave_up: Vec<(String, i64)>,
}

/// What waits to start for a job (both false while its lease is live).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Waiting {
    pub queued: bool,
    pub resumable: bool,
}

/// The fate of a firing.
#[derive(Debug, Clone, PartialEq)]
pub enum Fired {
    Started(Started),
    /// The same firing was fired before (another scheduler, a restart): not run again.
    Duplicate {
        state: String,
        owner: Option<String>,
    },
    /// The job is paused: recorded as skipped.
    Skipped {
        note: Option<String>,
        by: Option<String>,
    },
    /// A run is live and the policy is coalesce: dropped, recorded.
    Coalesced {
        holder: String,
        token: i64,
    },
    /// A run is live and the policy is queue: waiting, at this depth.
    Queued {
        depth: u64,
        cap: u32,
    },
    /// A run is live and the queue is full: dropped, saturation recorded.
    Saturated {
        cap: u32,
    },
    /// A run is live and the policy is fail: a loud miss.
    Missed {
        holder: String,
        token: i64,
    },
    /// Backfill only: the lease is held; nothing recorded, try again later.
    Busy {
        holder: String,
        until: String,
    },
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunEnd<'a> {
    pub job: &'a str,
    pub run_id: &'a str,
    pub slot: &'a str,
    pub token: i64,
    /// `ok`, `failed`, `fenced`, `killed` or `timeout`.
    pub outcome: &'a str,
    pub exit_code: Option<i32>,
    pub duration_ms: i64,
    pub log: &'a str,
}

/// What a run's effects did, from the events carrying its token.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EffectCounts {
    pub done: u64,
    pub suppressed: u64,
    pub fenced: u64,
    pub unknown: u64,
}

fn upsert_firing(
    tx: &Transaction<'_>,
    f: &FireRequest<'_>,
    state: &str,
    run_id: Option<&str>,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, owner, run_id, created_at, updated_at, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)
         ON CONFLICT(job_key, scheduled_at) DO UPDATE SET kind = excluded.kind, state = excluded.state,
            owner = excluded.owner, run_id = excluded.run_id, updated_at = excluded.updated_at,
            detail = excluded.detail",
        params![f.job, f.slot, f.kind, state, f.owner, run_id, f.now, detail],
    )?;
    Ok(())
}

fn paused(
    tx: &Transaction<'_>,
    job: &str,
) -> rusqlite::Result<Option<(Option<String>, Option<String>)>> {
    let row = tx
        .query_row(
            "SELECT paused, pause_note, paused_by FROM exactly_jobs WHERE job_key = ?1",
            [job],
            |r| Ok((int(r, 0)?.unwrap_or(0) != 0, text(r, 1)?, text(r, 2)?)),
        )
        .optional()?;
    Ok(row.and_then(|(p, note, by)| p.then_some((note, by))))
}

/// Starts a run for a firing whose lease we just won.
fn start_run(
    tx: &Transaction<'_>,
    job: &str,
    slot: &str,
    owner: &str,
    now: &str,
    token: i64,
) -> rusqlite::Result<String> {
    let run_id = format!("{job}-t{token}");
    tx.execute(
        "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, started_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![run_id, job, slot, owner, token, now],
    )?;
    Ok(run_id)
}

/// Starts a waiting firing (queued, interrupted, to retry) if the job's lease can be won: a new
/// run under the new token, and the firing marked `running` by it.
fn start_firing(
    tx: &Transaction<'_>,
    job: &str,
    slot: &str,
    owner: &str,
    lease_until: &str,
    now: &str,
) -> rusqlite::Result<Option<Started>> {
    let LeaseClaim::Won { token, stolen_from } = claim_lease_tx(tx, job, owner, lease_until, now)?
    else {
        return Ok(None);
    };
    let run_id = start_run(tx, job, slot, owner, now, token)?;
    tx.execute(
        "UPDATE exactly_firings SET state = 'running', owner = ?3, run_id = ?4, updated_at = ?5
         WHERE job_key = ?1 AND scheduled_at = ?2",
        params![job, slot, owner, run_id, now],
    )?;
    Ok(Some(Started {
        token,
        run_id,
        slot: slot.to_string(),
        stolen_from,
    }))
}

/// A run that never recorded its end (its process died) is closed as `killed`.
fn close_dead_run(tx: &Transaction<'_>, run_id: Option<&str>, now: &str) -> rusqlite::Result<()> {
    if let Some(old) = run_id {
        tx.execute(
            "UPDATE exactly_runs SET ended_at = ?2, outcome = 'killed'
             WHERE run_id = ?1 AND ended_at IS NULL",
            params![old, now],
        )?;
    }
    Ok(())
}

/// The loud event of a firing that used up its runs.
fn gave_up_event(
    tx: &Transaction<'_>,
    job: &str,
    slot: &str,
    runs: i64,
    owner: Option<&str>,
) -> rusqlite::Result<()> {
    let detail = format!(
        "firing at {slot} GAVE UP after {runs} runs (at most {MAX_ATTEMPTS}): not run again; check its effects by hand"
    );
    let mut e = NewEvent::new(kind::FIRING_GAVE_UP).job(job).detail(&detail);
    if let Some(o) = owner {
        e = e.actor(o);
    }
    record_event(tx, &e)
}

impl Store {
    /// Writes the jobs of one file into the registry and retires the jobs that file no longer
    /// has. Pause state is kept across registrations.
    pub fn register_jobs(
        &mut self,
        jobs: &[JobReg],
        source: &str,
        owner: &str,
    ) -> Result<Registered> {
        let now = crate::time::now_text();
        self.write(|tx| {
            let mut out = Registered::default();
            for j in jobs {
                let before: Option<(bool, bool)> = tx
                    .query_row(
                        "SELECT retired, schedule IS NOT NULL FROM exactly_jobs WHERE job_key = ?1",
                        [&j.job_key],
                        |r| Ok((int(r, 0)?.unwrap_or(0) != 0, int(r, 1)?.unwrap_or(0) != 0)),
                    )
                    .optional()?;
                if !matches!(before, Some((false, true))) {
                    out.fresh.push(j.job_key.clone());
                }
                tx.execute(
                    "INSERT INTO exactly_jobs (job_key, schedule, timezone, interval_s, lease_s, lease_ms,
                        overlap, queue_cap, command_digest, command, catchup_s, retired, source, owner, updated_at,
                        timeout_ms, observe_timeout_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12, ?13, ?14, ?15, ?16)
                     ON CONFLICT(job_key) DO UPDATE SET schedule = excluded.schedule,
                        timezone = excluded.timezone, interval_s = excluded.interval_s,
                        lease_s = excluded.lease_s, lease_ms = excluded.lease_ms, overlap = excluded.overlap,
                        queue_cap = excluded.queue_cap, command_digest = excluded.command_digest,
                        command = excluded.command, catchup_s = excluded.catchup_s, retired = 0,
                        source = excluded.source, owner = excluded.owner, updated_at = excluded.updated_at,
                        timeout_ms = excluded.timeout_ms, observe_timeout_ms = excluded.observe_timeout_ms",
                    params![
                        j.job_key, j.schedule, j.timezone, j.interval_s, j.lease_s, j.lease_ms, j.overlap,
                        j.queue_cap, j.command_digest, j.command, j.catchup_s, source, owner, now,
                        j.timeout_ms, j.observe_timeout_ms
                    ],
                )?;
            }
            let mut stmt = tx.prepare(
                "SELECT job_key FROM exactly_jobs WHERE source = ?1 AND retired = 0",
            )?;
            let mine = stmt
                .query_map([source], |r| text_or_empty(r, 0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            for job in mine {
                if jobs.iter().any(|j| j.job_key == job) {
                    continue;
                }
                tx.execute(
                    "UPDATE exactly_jobs SET retired = 1, updated_at = ?2 WHERE job_key = ?1",
                    params![job, now],
                )?;
                let detail = format!("no longer in {source}");
                record_event(
                    tx,
                    &NewEvent::new(kind::JOB_RETIRED).job(&job).actor(owner).detail(&detail),
                )?;
                out.retired.push(job);
            }
            Ok(out)
        })
    }

    pub fn registered_job(&mut self, job: &str) -> Result<Option<RegisteredJob>> {
        self.read(|tx| {
            tx.query_row(
                &format!("SELECT {REG_COLS} FROM exactly_jobs WHERE job_key = ?1"),
                [job],
                reg_row,
            )
            .optional()
        })
    }

    pub fn registered_jobs(&mut self) -> Result<Vec<RegisteredJob>> {
        self.read(|tx| {
            let mut stmt = tx.prepare(&format!(
                "SELECT {REG_COLS} FROM exactly_jobs ORDER BY job_key"
            ))?;
            let rows = stmt.query_map([], reg_row)?.collect();
            rows
        })
    }

    /// Durations of a job's recent runs that ended by themselves (`ok`, `failed`): a run we
    /// stopped (killed, timeout) or that was fenced says how long we let it run, not how long
    /// the job takes. The snapshot's window: the last 500, at most 7 days.
    pub fn run_durations(&mut self, job: &str) -> Result<Vec<i64>> {
        let oldest =
            crate::time::fmt(crate::time::now() - chrono::Duration::days(super::RUN_WINDOW_DAYS));
        self.read(|tx| {
            let mut stmt = tx.prepare(
                "SELECT duration_ms FROM exactly_runs WHERE job_key = ?1 AND started_at >= ?2
                   AND duration_ms IS NOT NULL AND outcome IN ('ok', 'failed')
                   ORDER BY started_at DESC LIMIT ?3",
            )?;
            let rows = stmt
                .query_map(params![job, oldest, super::RUN_WINDOW as i64], |r| r.get(0))?
                .collect();
            rows
        })
    }

    /// The latest slot the schedule itself fired (manual and backfill firings do not count).
    pub fn last_slot(&mut self, job: &str) -> Result<Option<String>> {
        self.read(|tx| {
            tx.query_row(
                "SELECT scheduled_at FROM exactly_firings WHERE job_key = ?1
                   AND kind IN ('scheduled', 'catchup') ORDER BY scheduled_at DESC LIMIT 1",
                [job],
                |r| text(r, 0),
            )
            .optional()
            .map(Option::flatten)
        })
    }

    /// Records firings that passed with nobody to run them (beyond the catch-up window): each
    /// slot a `missed` row (or `skipped` while paused), the counter raised by each one. `total`
    /// may exceed the slots given when the gap is too long to record row by row. Slots another
    /// scheduler already fired are left alone. Returns how many were counted.
    pub fn record_missed(
        &mut self,
        job: &str,
        slots: &[String],
        total: u64,
        owner: &str,
    ) -> Result<u64> {
        let now = crate::time::now_text();
        self.write(|tx| {
            let paused = paused(tx, job)?;
            let state = if paused.is_some() { "skipped" } else { "missed" };
            let mut inserted = 0u64;
            for s in slots {
                inserted += tx.execute(
                    "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, owner, created_at, updated_at, detail)
                     VALUES (?1, ?2, 'scheduled', ?3, ?4, ?5, ?5, 'no scheduler ran it in time')
                     ON CONFLICT(job_key, scheduled_at) DO NOTHING",
                    params![job, s, state, owner, now],
                )? as u64;
            }
            if inserted == 0 {
                return Ok(0);
            }
            let unrecorded = total.saturating_sub(slots.len() as u64);
            let n = inserted + unrecorded;
            let (first, last) = (slots.first().cloned().unwrap_or_default(), slots.last().cloned().unwrap_or_default());
            let k = if paused.is_some() { kind::FIRING_SKIPPED_PAUSED } else { kind::FIRING_MISSED };
            let detail = if paused.is_some() {
                format!("{n} firing(s) up to {last} passed while paused and while no scheduler ran")
            } else if unrecorded > 0 {
                format!("{n} firing(s) up to {last} missed while no scheduler ran (outside the catch-up window; the latest {inserted} recorded from {first})")
            } else {
                format!("{n} firing(s) from {first} to {last} missed while no scheduler ran (outside the catch-up window)")
            };
            record_event(tx, &NewEvent::new(k).job(job).actor(owner).detail(&detail))?;
            // record_event counted one; the counter counts firings.
            tx.execute(
                "UPDATE exactly_counters SET n = n + ?3 WHERE kind = ?1 AND job_key = ?2",
                params![k, job, (n - 1) as i64],
            )?;
            Ok(n)
        })
    }

    /// Decides a firing: a duplicate of one already fired, skipped while paused, started under
    /// a lease we just won, or — a run being live — coalesced, queued, saturated or missed per
    /// the job's overlap policy. One transaction.
    pub fn fire(&mut self, f: &FireRequest<'_>) -> Result<Fired> {
        self.write(|tx| {
            let existing: Option<(String, Option<String>)> = tx
                .query_row(
                    "SELECT state, owner FROM exactly_firings WHERE job_key = ?1 AND scheduled_at = ?2",
                    params![f.job, f.slot],
                    |r| Ok((text_or_empty(r, 0)?, text(r, 1)?)),
                )
                .optional()?;
            if let Some((state, owner)) = existing {
                if !(f.backfill && NEVER_RAN.contains(&state.as_str())) {
                    let detail = format!(
                        "{} firing at {} already {state} by {}",
                        f.kind,
                        f.slot,
                        owner.as_deref().unwrap_or("someone")
                    );
                    record_event(
                        tx,
                        &NewEvent::new(kind::FIRING_DUPLICATE).job(f.job).actor(f.owner).detail(&detail),
                    )?;
                    return Ok(Fired::Duplicate { state, owner });
                }
            }
            if let Some((note, by)) = paused(tx, f.job)? {
                upsert_firing(tx, f, "skipped", None, note.as_deref())?;
                let detail = format!(
                    "{} firing at {} skipped: paused by {}{}",
                    f.kind,
                    f.slot,
                    by.as_deref().unwrap_or("someone"),
                    note.as_deref().map(|n| format!(": {n}")).unwrap_or_default()
                );
                record_event(
                    tx,
                    &NewEvent::new(kind::FIRING_SKIPPED_PAUSED).job(f.job).actor(f.owner).detail(&detail),
                )?;
                return Ok(Fired::Skipped { note, by });
            }
            let claim = if f.live_here {
                let token: i64 = tx.query_row(
                    "SELECT coalesce(max(fencing_token), 0) FROM job_lease WHERE job_key = ?1",
                    [f.job],
                    |r| r.get(0),
                )?;
                LeaseClaim::Held {
                    owner: f.owner.to_string(),
                    token,
                    until: f.now.to_string(),
                }
            } else {
                claim_lease_tx(tx, f.job, f.owner, f.lease_until, f.now)?
            };
            match claim {
                LeaseClaim::Won { token, stolen_from } => {
                    let run_id = start_run(tx, f.job, f.slot, f.owner, f.now, token)?;
                    upsert_firing(tx, f, "running", Some(&run_id), None)?;
                    Ok(Fired::Started(Started {
                        token,
                        run_id,
                        slot: f.slot.to_string(),
                        stolen_from,
                    }))
                }
                LeaseClaim::Held { owner: holder, token, until } => {
                    if f.backfill {
                        return Ok(Fired::Busy { holder, until });
                    }
                    let live = format!("a run is live ({holder}, token {token})");
                    match f.overlap {
                        Overlap::Coalesce => {
                            upsert_firing(tx, f, "coalesced", None, Some(&live))?;
                            let detail = format!("{} firing at {} dropped: {live}", f.kind, f.slot);
                            record_event(
                                tx,
                                &NewEvent::new(kind::FIRING_COALESCED).job(f.job).actor(f.owner).token(token).detail(&detail),
                            )?;
                            Ok(Fired::Coalesced { holder, token })
                        }
                        Overlap::Queue { cap } => {
                            let depth: i64 = tx.query_row(
                                "SELECT count(*) FROM exactly_firings WHERE job_key = ?1 AND state = 'queued'",
                                [f.job],
                                |r| r.get(0),
                            )?;
                            if (depth as u64) < u64::from(cap) {
                                upsert_firing(tx, f, "queued", None, Some(&live))?;
                                Ok(Fired::Queued { depth: depth as u64 + 1, cap })
                            } else {
                                upsert_firing(tx, f, "saturated", None, Some(&live))?;
                                let detail = format!(
                                    "{} firing at {} dropped: queue full ({depth} of {cap} waiting) and {live}",
                                    f.kind, f.slot
                                );
                                record_event(
                                    tx,
                                    &NewEvent::new(kind::QUEUE_SATURATED).job(f.job).actor(f.owner).token(token).detail(&detail),
                                )?;
                                Ok(Fired::Saturated { cap })
                            }
                        }
                        Overlap::Fail => {
                            upsert_firing(tx, f, "missed", None, Some(&live))?;
                            let detail = format!(
                                "{} firing at {} missed: overlap = fail and {live}",
                                f.kind, f.slot
                            );
                            record_event(
                                tx,
                                &NewEvent::new(kind::FIRING_MISSED).job(f.job).actor(f.owner).token(token).detail(&detail),
                            )?;
                            Ok(Fired::Missed { holder, token })
                        }
                    }
                }
            }
        })
    }

    /// What waits to start for a job whose lease is free: queued firings (see
    /// [`Store::start_queued`]) and firings to resume (see [`Store::resume_firing`]). One cheap
    /// read per scheduler tick before any write.
    pub fn waiting(&mut self, job: &str, now: &str) -> Result<Waiting> {
        self.read(|tx| {
            tx.query_row(
                "SELECT NOT EXISTS (SELECT 1 FROM job_lease WHERE job_key = ?1 AND lease_until > ?2),
                    EXISTS (SELECT 1 FROM exactly_firings WHERE job_key = ?1 AND state = 'queued'),
                    EXISTS (SELECT 1 FROM exactly_firings WHERE job_key = ?1 AND state IN ('running', 'retry'))",
                params![job, now],
                |r| {
                    let free: bool = r.get(0)?;
                    Ok(Waiting {
                        queued: free && r.get::<_, bool>(1)?,
                        resumable: free && r.get::<_, bool>(2)?,
                    })
                },
            )
        })
    }

    /// Starts the oldest queued firing of a job if its lease can be won (and it is not paused).
    pub fn start_queued(
        &mut self,
        job: &str,
        owner: &str,
        lease_until: &str,
        now: &str,
    ) -> Result<Option<Started>> {
        self.write(|tx| {
            if paused(tx, job)?.is_some() {
                return Ok(None);
            }
            let slot: Option<String> = tx
                .query_row(
                    "SELECT scheduled_at FROM exactly_firings WHERE job_key = ?1 AND state = 'queued'
                     ORDER BY scheduled_at LIMIT 1",
                    [job],
                    |r| text_or_empty(r, 0),
                )
                .optional()?;
            let Some(slot) = slot else { return Ok(None) };
            start_firing(tx, job, &slot, owner, lease_until, now)
        })
    }

    /// Records that a run's lease renewal was refused: a higher token exists.
    pub fn run_fenced(&mut self, job: &str, run_id: &str, token: i64) -> Result<()> {
        self.write(|tx| {
            let detail =
                format!("run {run_id} fenced: lease renewal refused, a newer token holds the job");
            record_event(
                tx,
                &NewEvent::new(kind::RUN_FENCED)
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
            tx.execute(
                "UPDATE exactly_runs SET log = ?2 WHERE run_id = ?1 AND ended_at IS NULL",
                params![run_id, log],
            )?;
            Ok(())
        })
    }

    /// Records how a run ended and releases its lease (unless it was fenced). Returns the final
    /// outcome: `fenced` when the release was refused.
    pub fn finish_run(&mut self, end: &RunEnd<'_>) -> Result<String> {
        let now = crate::time::now_text();
        self.write(|tx| {
            let mut outcome = end.outcome.to_string();
            if outcome != "fenced" {
                let released = tx
                    .query_row(
                        "UPDATE job_lease SET lease_until = ?2 WHERE job_key = ?1 AND fencing_token = ?3
                           AND lease_until <> ?2 RETURNING fencing_token",
                        params![end.job, RELEASED, end.token],
                        |_| Ok(()),
                    )
                    .optional()?
                    .is_some();
                if !released {
                    let detail = format!("run {} fenced: lease release refused", end.run_id);
                    record_event(
                        tx,
                        &NewEvent::new(kind::FENCED_WRITE).job(end.job).token(end.token).detail("lease release refused"),
                    )?;
                    record_event(tx, &NewEvent::new(kind::RUN_FENCED).job(end.job).token(end.token).detail(&detail))?;
                    outcome = "fenced".into();
                }
            }
            tx.execute(
                "UPDATE exactly_runs SET ended_at = ?2, outcome = ?3, duration_ms = ?4, exit_code = ?5, log = ?6
                 WHERE run_id = ?1",
                params![end.run_id, now, outcome, end.duration_ms, end.exit_code, end.log],
            )?;
            // A run we had to kill (grace expired at a deploy, a signal) did not finish its
            // work: its firing goes again (see `resume_firing`), a bounded number of times so a
            // command that always crashes cannot loop.
            let attempts: i64 = tx.query_row(
                "SELECT count(*) FROM exactly_runs WHERE job_key = ?1 AND scheduled_at = ?2",
                params![end.job, end.slot],
                |r| r.get(0),
            )?;
            let state = match (outcome.as_str(), attempts < MAX_ATTEMPTS) {
                ("killed", true) => "retry",
                ("killed", false) => "gave_up",
                _ => "ran",
            };
            let moved = tx.execute(
                "UPDATE exactly_firings SET state = ?6, updated_at = ?4, detail = ?5
                 WHERE job_key = ?1 AND scheduled_at = ?2 AND run_id = ?3",
                params![end.job, end.slot, end.run_id, now, outcome, state],
            )?;
            if moved > 0 && state == "gave_up" {
                gave_up_event(tx, end.job, end.slot, attempts, None)?;
            }
            // A run we stopped (timeout, shutdown) was killed with its whole process group: an
            // effect it had `submitted` lost its sender, so it is `unknown` until observed.
            if outcome == "timeout" || outcome == "killed" {
                let mut stmt = tx.prepare(
                    "UPDATE effect_ledger SET state = 'unknown', updated_at = ?3
                     WHERE job_key = ?1 AND fencing_token = ?2 AND state = 'submitted'
                     RETURNING effect_key",
                )?;
                let keys = stmt
                    .query_map(params![end.job, end.token, now], |r| text_or_empty(r, 0))?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                for key in keys {
                    let detail = format!("its run {} was stopped ({outcome}) while it was sending", end.run_id);
                    record_event(
                        tx,
                        &NewEvent::new(kind::EFFECT_UNKNOWN).job(end.job).effect(&key).token(end.token).detail(&detail),
                    )?;
                }
            }
            let k = match outcome.as_str() {
                "failed" => Some(kind::RUN_FAILED),
                "killed" => Some(kind::RUN_KILLED),
                "timeout" => Some(kind::RUN_TIMEOUT),
                _ => None,
            };
            if let Some(k) = k {
                let detail = match end.exit_code {
                    Some(c) => format!("run {} {outcome} (exit {c})", end.run_id),
                    None => format!("run {} {outcome}", end.run_id),
                };
                record_event(tx, &NewEvent::new(k).job(end.job).token(end.token).detail(&detail))?;
            }
            Ok(outcome)
        })
    }

    /// Counts what a run's effects did, from the events that carry its fencing token.
    pub fn run_effect_counts(&mut self, job: &str, token: i64) -> Result<EffectCounts> {
        self.read(|tx| {
            let mut stmt = tx.prepare(
                "SELECT kind, count(*) FROM exactly_events WHERE job_key = ?1 AND fencing_token = ?2
                   AND kind IN (?3, ?4, ?5, ?6) GROUP BY kind",
            )?;
            let rows = stmt.query_map(
                params![
                    job,
                    token,
                    kind::EFFECT_DONE,
                    kind::DUPLICATE_SUPPRESSED,
                    kind::FENCED_WRITE,
                    kind::EFFECT_UNKNOWN
                ],
                |r| Ok((text_or_empty(r, 0)?, int(r, 1)?.unwrap_or(0).max(0) as u64)),
            )?;
            let mut c = EffectCounts::default();
            for row in rows {
                let (k, n) = row?;
                match k.as_str() {
                    kind::EFFECT_DONE => c.done = n,
                    kind::DUPLICATE_SUPPRESSED => c.suppressed = n,
                    kind::FENCED_WRITE => c.fenced = n,
                    _ => c.unknown = n,
                }
            }
            Ok(c)
        })
    }

    /// How many firings of a job had how many runs: (runs, firings), fewest runs first.
    pub fn runs_per_firing(&mut self, job: &str) -> Result<Vec<(i64, i64)>> {
        self.read(|tx| {
            let mut stmt = tx.prepare(
                "SELECT n, count(*) FROM (SELECT count(*) AS n FROM exactly_runs WHERE job_key = ?1
                   GROUP BY scheduled_at) GROUP BY n ORDER BY n",
            )?;
            let rows = stmt
                .query_map([job], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect();
            rows
        })
    }

    /// How many firings of a job ended `gave_up`.
    pub fn firings_gave_up(&mut self, job: &str) -> Result<i64> {
        self.read(|tx| {
            tx.query_row(
                "SELECT count(*) FROM exactly_firings WHERE job_key = ?1 AND state = 'gave_up'",
                [job],
                |r| r.get(0),
            )
        })
    }

    /// A firing's state and run, if it was fired.
    pub fn firing_state(
        &mut self,
        job: &str,
        slot: &str,
    ) -> Result<Option<(String, Option<String>)>> {
        self.read(|tx| {
            tx.query_row(
                "SELECT state, run_id FROM exactly_firings WHERE job_key = ?1 AND scheduled_at = ?2",
                params![job, slot],
                |r| Ok((text_or_empty(r, 0)?, text(r, 1)?)),
            )
            .optional()
        })
    }
}

impl Store {
    /// Fires again, for the same slot, a firing whose run died with its scheduler (still
    /// `running`, its run never ended and its token no longer holds a live lease) or whose effect
    /// an observer found never happened (`retry`, however old). The command's effects are keyed
    /// by facts, so what was done is suppressed and only what never went out is sent. A firing
    /// that already had [`MAX_ATTEMPTS`] runs ends `gave_up` (a loud event) instead of a fourth.
    /// `running` firings older than `oldest` are given up as `interrupted` (recorded, never
    /// silent). The caller must not be running the job itself. One transaction.
    pub fn resume_firing(
        &mut self,
        job: &str,
        owner: &str,
        lease_until: &str,
        now: &str,
        oldest: &str,
    ) -> Result<Resumed> {
        self.write(|tx| {
            let mut out = Resumed::default();
            if paused(tx, job)?.is_some() {
                return Ok(out);
            }
            let live: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM job_lease WHERE job_key = ?1 AND lease_until > ?2)",
                params![job, now],
                |r| r.get(0),
            )?;
            if live {
                return Ok(out);
            }
            // With no live lease, a `running` firing's run is dead unless it ended normally.
            let given_up = tx.execute(
                "UPDATE exactly_firings SET state = 'interrupted', updated_at = ?3,
                    detail = 'its run died and the firing is older than the resume window'
                 WHERE job_key = ?1 AND state = 'running' AND scheduled_at < ?2",
                params![job, oldest, now],
            )?;
            if given_up > 0 {
                let detail = format!(
                    "{given_up} interrupted firing(s) before {oldest} not resumed: too old"
                );
                record_event(
                    tx,
                    &NewEvent::new(kind::FIRING_MISSED)
                        .job(job)
                        .actor(owner)
                        .detail(&detail),
                )?;
            }
            loop {
                let found: Option<(String, String, Option<String>)> = tx
                    .query_row(
                        "SELECT scheduled_at, state, run_id FROM exactly_firings
                         WHERE job_key = ?1 AND state IN ('running', 'retry')
                         ORDER BY scheduled_at DESC LIMIT 1",
                        [job],
                        |r| Ok((text_or_empty(r, 0)?, text_or_empty(r, 1)?, text(r, 2)?)),
                    )
                    .optional()?;
                let Some((slot, state, old_run)) = found else {
                    return Ok(out);
                };
                let runs: i64 = tx.query_row(
                    "SELECT count(*) FROM exactly_runs WHERE job_key = ?1 AND scheduled_at = ?2",
                    params![job, slot],
                    |r| r.get(0),
                )?;
                if runs >= MAX_ATTEMPTS {
                    close_dead_run(tx, old_run.as_deref(), now)?;
                    tx.execute(
                        "UPDATE exactly_firings SET state = 'gave_up', updated_at = ?3,
                            detail = 'its runs were used up without finishing'
                         WHERE job_key = ?1 AND scheduled_at = ?2",
                        params![job, slot, now],
                    )?;
                    gave_up_event(tx, job, &slot, runs, Some(owner))?;
                    out.gave_up.push((slot, runs));
                    continue;
                }
                let Some(started) = start_firing(tx, job, &slot, owner, lease_until, now)? else {
                    return Ok(out);
                };
                close_dead_run(tx, old_run.as_deref(), now)?;
                let why = if state == "retry" {
                    "an observer found its effect never happened"
                } else {
                    "its run died with its scheduler"
                };
                let detail = format!(
                    "firing at {slot} resumed by run {} (run {} of at most {MAX_ATTEMPTS}): {why} (was run {})",
                    started.run_id,
                    runs + 1,
                    old_run.as_deref().unwrap_or("-")
                );
                record_event(
                    tx,
                    &NewEvent::new(kind::FIRING_RESUMED)
                        .job(job)
                        .actor(owner)
                        .token(started.token)
                        .detail(&detail),
                )?;
                out.started = Some(started);
                return Ok(out);
            }
        })
    }

    /// An observer found that an effect sent by `run_id` never happened: that run's firing is
    /// fired again (see [`Store::resume_firing`]). Returns whether a firing was marked.
    pub fn retry_firing_of_run(&mut self, job: &str, run_id: &str) -> Result<bool> {
        let now = crate::time::now_text();
        self.write(|tx| {
            Ok(tx.execute(
                "UPDATE exactly_firings SET state = 'retry', updated_at = ?3,
                    detail = 'an observer found an effect of this firing never happened'
                 WHERE job_key = ?1 AND run_id = ?2 AND state = 'ran'",
                params![job, run_id, now],
            )? > 0)
        })
    }
}

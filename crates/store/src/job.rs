//! The job aggregate: the registry a scheduler writes from its jobs file (what `top` and
//! `status` show of each job) and the operator's pause and resume.
use super::db::{args, DbResult, Optional, Row, Tx};
use super::rows::{overlap_of, JobSettings};
use super::{int, record_event, text, text_or_empty, NewEvent, Store};
use exactly_words::policy::Overlap;
use exactly_words::state::EventKind;
use exactly_words::Result;

impl Store {
    /// Pauses or resumes a job (firings while paused are recorded as skipped by the runner).
    /// Returns false when it already was in that state.
    pub fn set_paused(
        &mut self,
        job: &str,
        paused: bool,
        by: &str,
        note: Option<&str>,
        now: &str,
    ) -> Result<bool> {
        self.write(|tx| {
            let now = tx.now(now);
            set_paused_tx(tx, job, paused, by, note, now)
        })
    }

    /// Records that a scheduler replaced its watchdog process (`detail`: pids, runs re-armed).
    pub fn record_watchdog_restart(&mut self, owner: &str, detail: &str, now: &str) -> Result<()> {
        self.write(|tx| {
            let now = tx.now(now);
            let ev = NewEvent::new(EventKind::WatchdogRestarted, now)
                .actor(owner)
                .detail(detail);
            record_event(tx, &ev)
        })
    }

    /// Records that a scheduler reloaded its jobs file (`detail`: what changed).
    pub fn record_reload(&mut self, owner: &str, detail: &str, now: &str) -> Result<()> {
        self.write(|tx| {
            let now = tx.now(now);
            let ev = NewEvent::new(EventKind::JobsReloaded, now)
                .actor(owner)
                .detail(detail);
            record_event(tx, &ev)
        })
    }
}

/// [`Store::set_paused`] inside a transaction.
pub(super) fn set_paused_tx(
    tx: &Tx<'_>,
    job: &str,
    paused: bool,
    by: &str,
    note: Option<&str>,
    now: &str,
) -> DbResult<bool> {
    let was: Option<i64> = tx
        .one(
            "SELECT paused FROM exactly_jobs WHERE job_key = ?1",
            args![job],
            |r| int(r, 0),
        )
        .optional()?
        .flatten();
    if (was.unwrap_or(0) != 0) == paused {
        return Ok(false);
    }
    tx.exec(
        "INSERT INTO exactly_jobs (job_key, paused, pause_note, paused_by, paused_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)
         ON CONFLICT(job_key) DO UPDATE SET paused = excluded.paused,
            pause_note = excluded.pause_note, paused_by = excluded.paused_by,
            paused_at = excluded.paused_at, updated_at = excluded.updated_at",
        args![
            job,
            i64::from(paused),
            if paused { note } else { None },
            by,
            now
        ],
    )?;
    let k = if paused {
        EventKind::JobPaused
    } else {
        EventKind::JobResumed
    };
    let mut ev = NewEvent::new(k, now).job(job).actor(by);
    ev.detail = note;
    record_event(tx, &ev)?;
    Ok(true)
}

/// A job as the registry holds it: what a scheduler writes from its jobs file (every setting
/// `Some`), and what `trigger`, `backfill` and `check` read back (a registry written by an older
/// version may lack some). The jobs file's entry is `runner::config::job::Job`; the dashboard's
/// `JobRow`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobRecord {
    /// The job's name, the key of its lease.
    pub job_key: String,
    /// How it fires and holds its lease.
    pub settings: JobSettings,
    /// SHA-256 of the command as it runs (its argv as JSON).
    pub command_digest: Option<String>,
    /// The argv as JSON.
    pub command: Option<String>,
    /// How late a firing may still start, besides the scheduler's 2 s: the catch-up window, or
    /// the starting deadline, plus the jitter (`runner::config::job::late_allowed_s`).
    pub catchup_s: Option<i64>,
    /// A run past this is stopped; None: no limit.
    pub timeout_ms: Option<i64>,
    /// How long its observe command may take before its answer counts as "can't tell".
    pub observe_timeout_ms: Option<i64>,
    /// A cron job's daylight-saving policy in a zone (`once`|`both`, `next`|`skip`).
    pub dst_repeated: Option<String>,
    /// What a cron slot in a skipped hour does (`next`|`skip`); None: `next`.
    pub dst_skipped: Option<String>,
    /// Whether its firings are skipped until it is resumed.
    pub paused: bool,
    /// The note left with its latest pause.
    pub pause_note: Option<String>,
    /// Read back only: registering writes these from the registry's own rules.
    pub retired: bool,
    /// The jobs file that registered it.
    pub source: Option<String>,
    /// SHA-256 of everything that decides what fires (`runner::config::definitions::digest`).
    pub definition_digest: Option<String>,
    /// Keep only this many of the job's newest runs.
    pub keep_runs: Option<i64>,
    /// What its far side is declared to do (`far_side`); None: not declared.
    pub far_side: Option<exactly_words::policy::FarSide>,
    /// Read back only: the scheduler that registered it last, and when.
    pub owner: Option<String>,
    /// When it was last registered or changed (written from the transaction's clock, never
    /// compared as a witness).
    pub updated_at: Option<exactly_words::time::Ts>,
}

const REG_COLS: &str = "job_key, schedule, timezone, interval_s, lease_s, lease_ms, overlap,
    queue_cap, command_digest, command, catchup_s, paused, pause_note, retired, source,
    timeout_ms, observe_timeout_ms, dst_repeated, dst_skipped, definition_digest, keep_runs, \
        owner, updated_at, far_side";
/// [`REG_COLS`] on a database from before schema version 9 (read read-only, not upgraded): no
/// far side was declared.
const REG_COLS_V8: &str = "job_key, schedule, timezone, interval_s, lease_s, lease_ms, overlap,
    queue_cap, command_digest, command, catchup_s, paused, pause_note, retired, source,
    timeout_ms, observe_timeout_ms, dst_repeated, dst_skipped, definition_digest, keep_runs, \
        owner, updated_at, CAST(NULL AS TEXT)";

/// The registry's columns as this database has them.
fn reg_cols(tx: &Tx<'_>) -> DbResult<&'static str> {
    Ok(if super::prepare::version(tx)? >= 9 {
        REG_COLS
    } else {
        REG_COLS_V8
    })
}

fn reg_row(r: &Row<'_>) -> DbResult<JobRecord> {
    Ok(JobRecord {
        job_key: text_or_empty(r, 0)?,
        settings: JobSettings {
            schedule: text(r, 1)?,
            timezone: text(r, 2)?,
            interval_s: int(r, 3)?,
            lease_s: int(r, 4)?,
            lease_ms: int(r, 5)?,
            overlap: overlap_of(text(r, 6)?, int(r, 7)?),
            queue_cap: int(r, 7)?,
        },
        command_digest: text(r, 8)?,
        command: text(r, 9)?,
        catchup_s: int(r, 10)?,
        paused: int(r, 11)?.unwrap_or(0) != 0,
        pause_note: text(r, 12)?,
        retired: int(r, 13)?.unwrap_or(0) != 0,
        source: text(r, 14)?,
        timeout_ms: int(r, 15)?,
        observe_timeout_ms: int(r, 16)?,
        dst_repeated: text(r, 17)?,
        dst_skipped: text(r, 18)?,
        definition_digest: text(r, 19)?,
        keep_runs: int(r, 20)?,
        owner: text(r, 21)?,
        updated_at: super::rows::ts(r, 22, "exactly_jobs.updated_at")?,
        far_side: text(r, 23)?
            .as_deref()
            .and_then(exactly_words::policy::FarSide::parse),
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

pub(super) fn paused(tx: &Tx<'_>, job: &str) -> DbResult<Option<(Option<String>, Option<String>)>> {
    let row = tx
        .one(
            "SELECT paused, pause_note, paused_by FROM exactly_jobs WHERE job_key = ?1",
            args![job],
            |r| Ok((int(r, 0)?.unwrap_or(0) != 0, text(r, 1)?, text(r, 2)?)),
        )
        .optional()?;
    Ok(row.and_then(|(p, note, by)| p.then_some((note, by))))
}

type Before = (bool, bool, Option<String>, Option<String>, Option<String>);

/// The scheduler (owner, source) whose different definition of `j` this registration replaces,
/// if it is another one and still alive: that one stops firing the job (newest wins).
fn replaced_live(
    tx: &Tx<'_>,
    before: Option<&Before>,
    j: &JobRecord,
    owner: &str,
    alive_since: &str,
) -> DbResult<Option<(String, Option<String>)>> {
    let Some((false, true, Some(old), Some(by), src)) = before else {
        return Ok(None);
    };
    if by == owner || j.definition_digest.as_deref().is_none_or(|new| new == old) {
        return Ok(None);
    }
    let alive: i64 = tx.one(
        "SELECT count(*) FROM exactly_schedulers
         WHERE owner = ?1 AND ended_at IS NULL AND heartbeat_at >= ?2",
        args![by, alive_since],
        |r| r.get(0),
    )?;
    Ok((alive > 0).then(|| (by.clone(), src.clone())))
}

/// Records a replaced live definition (an event, and on the job for `status` and `top`); a
/// changed definition that replaced none clears the note, an unchanged one keeps it.
fn note_replaced(
    tx: &Tx<'_>,
    before: Option<&Before>,
    j: &JobRecord,
    replaced: Option<(String, Option<String>)>,
    owner: &str,
    now: &str,
) -> DbResult<()> {
    if let Some((by, src)) = replaced {
        tx.exec(
            "UPDATE exactly_jobs SET conflict_owner = ?2, conflict_source = ?3 WHERE job_key = ?1",
            args![j.job_key, by, src],
        )?;
        let detail = format!(
            "replaced the different definition of scheduler {by} ({}), which stops firing it",
            src.as_deref().unwrap_or("?")
        );
        let ev = NewEvent::new(EventKind::DefinitionConflict, now)
            .job(&j.job_key)
            .actor(owner)
            .detail(&detail);
        return record_event(tx, &ev);
    }
    let unchanged = before.is_some_and(|b| b.2.is_some() && b.2 == j.definition_digest);
    if !unchanged {
        tx.exec(
            "UPDATE exactly_jobs SET conflict_owner = NULL, conflict_source = NULL \
             WHERE job_key = ?1",
            args![j.job_key],
        )?;
    }
    Ok(())
}

impl Store {
    /// Writes the jobs of one file into the registry and retires the jobs that file no longer
    /// has. Pause state is kept across registrations.
    pub fn register_jobs(
        &mut self,
        jobs: &[JobRecord],
        source: &str,
        owner: &str,
        now: &str,
        alive_since: &str,
    ) -> Result<Registered> {
        self.write(|tx| {
            let now = tx.now(now);
            let alive_since = tx.later(alive_since);
            let mut out = Registered::default();
            for j in jobs {
                let before = job_before_tx(tx, &j.job_key)?;
                if !matches!(before, Some((false, true, ..))) {
                    out.fresh.push(j.job_key.clone());
                }
                let replaced = replaced_live(tx, before.as_ref(), j, owner, &alive_since)?;
                upsert_job_tx(tx, j, source, owner, now)?;
                note_replaced(tx, before.as_ref(), j, replaced, owner, now)?;
            }
            let mine = tx.rows(
                "SELECT job_key FROM exactly_jobs WHERE source = ?1 AND retired = 0",
                args![source],
                |r| text_or_empty(r, 0),
            )?;
            for job in mine {
                if jobs.iter().any(|j| j.job_key == job) {
                    continue;
                }
                tx.exec(
                    "UPDATE exactly_jobs SET retired = 1, updated_at = ?2 WHERE job_key = ?1",
                    args![job, now],
                )?;
                let detail = format!("no longer in {source}");
                record_event(
                    tx,
                    &NewEvent::new(EventKind::JobRetired, now)
                        .job(&job)
                        .actor(owner)
                        .detail(&detail),
                )?;
                out.retired.push(job);
            }
            Ok(out)
        })
    }

    pub fn registered_job(&mut self, job: &str) -> Result<Option<JobRecord>> {
        self.read(|tx| {
            let cols = reg_cols(tx)?;
            tx.one(
                &format!("SELECT {cols} FROM exactly_jobs WHERE job_key = ?1"),
                args![job],
                reg_row,
            )
            .optional()
        })
    }

    pub fn registered_jobs(&mut self) -> Result<Vec<JobRecord>> {
        self.read(registered_in)
    }
}

/// Every registered job, in the transaction `tx` (`exactly doctor` reads them with the rest).
pub(super) fn registered_in(tx: &Tx<'_>) -> DbResult<Vec<JobRecord>> {
    let cols = reg_cols(tx)?;
    tx.rows(
        &format!("SELECT {cols} FROM exactly_jobs ORDER BY job_key"),
        &[],
        reg_row,
    )
}

/// The job's row as it stood before this registration, if it had one.
fn job_before_tx(tx: &Tx<'_>, job_key: &str) -> DbResult<Option<Before>> {
    tx.one(
        "SELECT retired, schedule IS NOT NULL, definition_digest, owner, source
             FROM exactly_jobs WHERE job_key = ?1",
        args![job_key],
        |r| {
            Ok((
                int(r, 0)?.unwrap_or(0) != 0,
                int(r, 1)?.unwrap_or(0) != 0,
                text(r, 2)?,
                text(r, 3)?,
                text(r, 4)?,
            ))
        },
    )
    .optional()
}

/// Writes the job's definition (new, or over its old row, which it un-retires).
fn upsert_job_tx(tx: &Tx<'_>, j: &JobRecord, source: &str, owner: &str, now: &str) -> DbResult<()> {
    tx.exec(
        "INSERT INTO exactly_jobs (job_key, schedule, timezone, interval_s, \
             lease_s, lease_ms,
            overlap, queue_cap, command_digest, command, catchup_s, retired, source, \
                owner, updated_at,
            timeout_ms, observe_timeout_ms, dst_repeated, dst_skipped, \
                definition_digest, keep_runs, far_side)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12, ?13, ?14, ?15, \
             ?16, ?17, ?18, ?19, ?20, ?21)
         ON CONFLICT(job_key) DO UPDATE SET schedule = excluded.schedule,
            timezone = excluded.timezone, interval_s = excluded.interval_s,
            lease_s = excluded.lease_s, lease_ms = excluded.lease_ms, \
                overlap = excluded.overlap,
            queue_cap = excluded.queue_cap, command_digest = excluded.command_digest,
            command = excluded.command, catchup_s = excluded.catchup_s, retired = 0,
            source = excluded.source, owner = excluded.owner, \
                updated_at = excluded.updated_at,
            timeout_ms = excluded.timeout_ms, \
                observe_timeout_ms = excluded.observe_timeout_ms,
            dst_repeated = excluded.dst_repeated, dst_skipped = excluded.dst_skipped,
            definition_digest = excluded.definition_digest, \
                keep_runs = excluded.keep_runs, far_side = excluded.far_side",
        args![
            j.job_key,
            j.settings.schedule,
            j.settings.timezone,
            j.settings.interval_s,
            j.settings.lease_s,
            j.settings.lease_ms,
            j.settings.overlap.map(Overlap::name),
            j.settings.queue_cap,
            j.command_digest,
            j.command,
            j.catchup_s,
            source,
            owner,
            now,
            j.timeout_ms,
            j.observe_timeout_ms,
            j.dst_repeated,
            j.dst_skipped,
            j.definition_digest,
            j.keep_runs,
            j.far_side.map(exactly_words::policy::FarSide::name)
        ],
    )?;
    Ok(())
}

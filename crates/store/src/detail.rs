//! Reads for the detail views and `logs`: one effect's events, a job's runs, one run's output,
//! a job's open effects. Each through an index.
use super::db::{args, DbResult, Optional, Row, Tx};
use super::rows::{EventRow, RunRow};
use super::{int, text, text_or_empty, word, Store};
use exactly_words::state::RunOutcome;
use exactly_words::Result;

pub(super) fn event_row(r: &Row<'_>) -> DbResult<EventRow> {
    Ok(EventRow {
        id: int(r, 0)?.unwrap_or(0),
        at: super::rows::ts_req(r, 1, "exactly_events.at")?,
        kind: word(r, 2)?,
        job_key: text(r, 3)?,
        effect_key: text(r, 4)?.map(exactly_words::EffectKey::from),
        fencing_token: int(r, 5)?,
        actor: text(r, 6)?,
        detail: text(r, 7)?,
    })
}

/// A job's `submitted`/`unknown` rows, in the words the open-effects index needs: its own term
/// first (see `effect_ledger_open` in schema.rs), then the narrower one.
pub(super) const JOB_OPEN: &str = concat!(open_term!(), " AND state IN ('submitted', 'unknown')");

pub(super) const EVENT_COLS: &str =
    "id, at, kind, job_key, effect_key, fencing_token, actor, detail";
pub(super) const RUN_COLS: &str =
    "run_id, job_key, scheduled_at, owner, fencing_token, started_at, ended_at, \
         outcome, duration_ms,
     exit_code, start_lag_ms";
/// [`RUN_COLS`] on a database from before schema version 8 (read read-only, not upgraded): no
/// start lag was measured.
const RUN_COLS_V7: &str =
    "run_id, job_key, scheduled_at, owner, fencing_token, started_at, ended_at, \
         outcome, duration_ms,
     exit_code, CAST(NULL AS BIGINT)";

/// Whether the database has schema version 8's run columns (`start_lag_ms`, `renewal_gap_ms`):
/// a writer upgrades every database it opens; a read command reads an older one as it is.
pub(super) fn has_run_lags(tx: &Tx<'_>) -> DbResult<bool> {
    Ok(super::prepare::version(tx)? >= 8)
}

/// The run columns [`run_row`] reads, as this database has them.
pub(super) fn run_cols(tx: &Tx<'_>) -> DbResult<&'static str> {
    Ok(if has_run_lags(tx)? {
        RUN_COLS
    } else {
        RUN_COLS_V7
    })
}

pub(crate) fn run_row(r: &Row<'_>) -> DbResult<RunRow> {
    Ok(RunRow {
        run_id: text_or_empty(r, 0)?,
        job_key: text_or_empty(r, 1)?,
        scheduled_at: super::rows::ts_req(r, 2, "exactly_runs.scheduled_at")?,
        owner: text_or_empty(r, 3)?,
        fencing_token: int(r, 4)?.unwrap_or(0),
        started_at: super::rows::ts_req(r, 5, "exactly_runs.started_at")?,
        ended_at: super::rows::ts(r, 6, "exactly_runs.ended_at")?,
        outcome: text(r, 7)?.map(RunOutcome::from),
        duration_ms: int(r, 8)?,
        exit_code: int(r, 9)?,
        start_lag_ms: int(r, 10)?,
    })
}

impl Store {
    /// Every event about one effect, oldest first.
    pub fn effect_events(&mut self, key: &str) -> Result<Vec<EventRow>> {
        self.read(|tx| {
            tx.rows(
                &format!(
                    "SELECT {EVENT_COLS} FROM exactly_events WHERE effect_key = ?1 \
                          ORDER BY id LIMIT 1000"
                ),
                args![key],
                event_row,
            )
        })
    }

    /// One run and its stored output (stdout and stderr interleaved as they arrived; while the
    /// run lasts, what it printed so far).
    pub fn run_output(&mut self, run_id: &str) -> Result<Option<(RunRow, String)>> {
        self.read(|tx| {
            let cols = run_cols(tx)?;
            tx.one(
                &format!("SELECT {cols}, log FROM exactly_runs WHERE run_id = ?1"),
                args![run_id],
                |r| Ok((run_row(r)?, text(r, 11)?.unwrap_or_default())),
            )
            .optional()
        })
    }

    /// The slot a run was for (None: no such run, e.g. an `exactly effect` outside a scheduler).
    pub fn run_slot(&mut self, run_id: &str) -> Result<Option<String>> {
        self.read(|tx| {
            tx.one(
                "SELECT scheduled_at FROM exactly_runs WHERE run_id = ?1",
                args![run_id],
                |r| text(r, 0),
            )
            .optional()
            .map(Option::flatten)
        })
    }

    /// The first run of a job that started after `after` (None: its latest run whose recorded
    /// start has come: one decided ahead of its slot has not started yet).
    pub fn run_after(&mut self, job: &str, after: Option<&str>) -> Result<Option<RunRow>> {
        let now = self.now_text();
        self.read(|tx| {
            let cols = run_cols(tx)?;
            match after {
                None => tx
                    .one(
                        &format!(
                            "SELECT {cols} FROM exactly_runs WHERE job_key = ?1
                               AND started_at <= ?2 ORDER BY started_at DESC LIMIT 1"
                        ),
                        args![job, tx.now(&now)],
                        run_row,
                    )
                    .optional(),
                Some(t) => tx
                    .one(
                        &format!(
                            "SELECT {cols} FROM exactly_runs WHERE job_key = ?1 AND started_at > ?2
                         ORDER BY started_at LIMIT 1"
                        ),
                        args![job, t],
                        run_row,
                    )
                    .optional(),
            }
        })
    }

    /// The most recent runs of a job, newest first.
    pub fn recent_runs(&mut self, job: &str, limit: usize) -> Result<Vec<RunRow>> {
        self.read(|tx| {
            let cols = run_cols(tx)?;
            let rows = tx.rows(
                &format!(
                    "SELECT {cols} FROM exactly_runs WHERE job_key = ?1 \
                     ORDER BY started_at DESC LIMIT ?2"
                ),
                args![job, limit as i64],
                run_row,
            );
            rows
        })
    }

    /// `submitted`/`unknown` rows of one job (through the open-effects index).
    pub fn open_effects_of(&mut self, job: &str) -> Result<Vec<super::LedgerRow>> {
        self.read(|tx| {
            tx.rows(
                &format!(
                    "SELECT {} FROM effect_ledger WHERE job_key = ?1 AND {JOB_OPEN} \
                     ORDER BY updated_at",
                    super::ledger_rows::LEDGER_COLS
                ),
                args![job],
                super::ledger_rows::ledger_row,
            )
        })
    }

    /// Every job with an open (`submitted`/`unknown`) effect: few, through the open-effects
    /// index. A scheduler asks once per batch of firings instead of once per run.
    pub fn jobs_with_open_effects(&mut self) -> Result<std::collections::HashSet<String>> {
        self.read(|tx| {
            let jobs: Vec<Option<String>> = tx.rows(
                &format!("SELECT DISTINCT job_key FROM effect_ledger WHERE {JOB_OPEN}"),
                args![],
                |r| text(r, 0),
            )?;
            Ok(jobs.into_iter().flatten().collect())
        })
    }
}

/// What `exactly effects` lists: the database's schema version and clock, and the rows.
pub struct InState {
    pub schema_version: i64,
    pub now: String,
    pub rows: Vec<super::LedgerRow>,
}

impl Store {
    /// Ledger rows in one state (of one job, if given), the oldest change first. The open
    /// states go through their index; `done` and `cancelled` rows are in none, so listing them
    /// reads the whole ledger (an operator's question, not a scheduler's).
    pub fn effects_in_state(
        &mut self,
        state: &exactly_words::state::EffectState,
        job: Option<&str>,
        caller_now: &str,
    ) -> Result<InState> {
        let open = matches!(
            state,
            exactly_words::state::EffectState::Claimed
                | exactly_words::state::EffectState::Submitted
                | exactly_words::state::EffectState::Unknown
        );
        // The partial index is used only when its own term is repeated (see JOB_OPEN).
        let term = if open {
            concat!(open_term!(), " AND ")
        } else {
            ""
        };
        let by_job = if job.is_some() {
            " AND job_key = ?2"
        } else {
            ""
        };
        let sql = format!(
            "SELECT {} FROM effect_ledger WHERE {term}state = ?1{by_job} \
             ORDER BY updated_at, effect_key",
            super::ledger_rows::LEDGER_COLS
        );
        self.read(|tx| {
            let rows = match job {
                Some(job) => tx.rows(
                    &sql,
                    args![state.as_str(), job],
                    super::ledger_rows::ledger_row,
                )?,
                None => tx.rows(&sql, args![state.as_str()], super::ledger_rows::ledger_row)?,
            };
            // The listing's order and ages are this column's: a row whose change time is not
            // a time is refused here, not shown as changed just now.
            for r in &rows {
                super::rows::time_in("effect_ledger.updated_at", &r.updated_at)?;
            }
            Ok(InState {
                schema_version: super::prepare::version(tx)?,
                now: tx.now(caller_now).to_string(),
                rows,
            })
        })
    }
}

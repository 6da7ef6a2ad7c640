//! The rows `exactly doctor` judges, beside the snapshot's own ([`super::rows::Reading`]): read
//! in the same transaction (`checklist_read.rs`), handed to the library's `checklist` module.
use super::job::JobRecord;
use super::rows::Reading;
use std::collections::BTreeMap;

/// Everything the checklist judges, from one read transaction.
#[derive(Debug, Clone, Default)]
pub struct ChecklistReading {
    /// The snapshot's rows (jobs with their run figures, open unknowns, approvals).
    pub reading: Reading,
    /// The registry: each job's settings as its jobs file wrote them (`far_side` among them).
    pub registered: Vec<JobRecord>,
    /// Per job key (every key the ledger, the leases or the registry names).
    pub jobs: BTreeMap<String, JobEvidence>,
    /// Per job and action: how the ledger's rows of it were written and settled.
    pub actions: Vec<ActionFacts>,
    /// `done` rows of every (job, action, target) done more than once.
    pub repeats: Vec<DoneRow>,
    /// The newest `exactly chaos` runs recorded in this database, newest first.
    pub chaos_runs: Vec<ChaosRunRow>,
}

/// What the ledger, the leases, the runs, the events and the counters say of one job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobEvidence {
    /// The token of its lease row; None: no lease row.
    pub lease_token: Option<i64>,
    /// The lease its newest hold outside a scheduler asked for (ms).
    pub hold_lease_ms: Option<i64>,
    /// The highest token on any of its ledger rows.
    pub ledger_max_token: Option<i64>,
    /// Its ledger rows.
    pub rows: u64,
    /// Its ledger rows written without a fencing token (the seed's SQL, another program).
    pub rows_without_token: u64,
    /// Runs that started with a lower token than a run that started before them.
    pub runs_token_backwards: u64,
    /// `claimed` rows whose lease is gone: reserved, then abandoned.
    pub claimed_leaked: u64,
    /// Duplicates suppressed, all time (its counter).
    pub suppressed: u64,
    /// Fenced writes, all time (its counter).
    pub fenced: u64,
    /// Fenced writes in the last 24 hours, and in the 24 hours before.
    pub fenced_24h: u64,
    /// Fenced writes in the 24 hours before the last 24.
    pub fenced_prev_24h: u64,
    /// Leases taken over from a holder, all time (its counter).
    pub takeovers: u64,
    /// Attempts that met an earlier attempt still in flight, in the last 7 days.
    pub retries_in_flight: u64,
    /// Runs ended, all time (its counters).
    pub runs_ended: u64,
    /// Approvals consumed (the counter) beyond the approvals that are consumed: reuses.
    pub approvals_reused: u64,
    /// Approved approvals still unused after a run or hold of the job ended after the decision.
    pub approved_unused_after_run: u64,
}

/// How one action's rows were written and settled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActionFacts {
    /// The job its rows name.
    pub job_key: String,
    /// The action (None: rows written without one, by the seed's SQL).
    pub action_id: Option<String>,
    /// Its rows.
    pub rows: u64,
    /// Rows that recorded an observe command.
    pub with_observer: u64,
    /// Rows an observer gave a verdict on.
    pub observer_verdicts: u64,
    /// Rows a person resolved.
    pub resolved_by_hand: u64,
    /// Rows with per-field input digests (schema 9 on).
    pub with_fields: u64,
    /// Rows whose inputs hold a value marked `run:` (the run's id).
    pub run_marked: u64,
}

/// One `done` row of a target done more than once.
#[derive(Debug, Clone, PartialEq)]
pub struct DoneRow {
    /// Its job.
    pub job_key: String,
    /// Its action.
    pub action_id: String,
    /// Its target.
    pub target_id: String,
    /// Its effect key.
    pub effect_key: exactly_words::EffectKey,
    /// The token that wrote it.
    pub fencing_token: Option<i64>,
    /// When it was claimed.
    pub created_at: exactly_words::time::Ts,
    /// Its inputs' names and digests (`key::input_fields`); None before schema 9.
    pub input_fields: Option<String>,
}

/// One `exactly chaos` run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChaosRunRow {
    /// When it ended.
    pub at: exactly_words::time::Ts,
    /// The scenarios it ran, comma-separated.
    pub scenarios: String,
    /// Iterations per scenario.
    pub iterations: i64,
    /// Duplicate effects it observed (must be 0).
    pub duplicates: i64,
    /// Effects it lost (must be 0).
    pub lost: i64,
    /// Whether it passed.
    pub passed: bool,
}

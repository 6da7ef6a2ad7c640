//! What a probe reads and writes (`effect::probe`): a job's latest `done` effect, the job's
//! count of suppressed duplicates, and the event that records the probe's result. The attempt
//! itself goes through the ledger's own transitions (`ledger.rs`).
use super::db::{args, Optional};
use super::ledger_rows::{ledger_row, LedgerRow, LEDGER_COLS};
use super::{int, record_event, NewEvent, Store};
use exactly_words::state::EventKind;
use exactly_words::time::Ts;
use exactly_words::Result;

/// What a probe event records.
#[derive(Debug, Clone, Copy)]
pub struct ProbeEvent<'a> {
    /// The effect attempted again.
    pub key: &'a str,
    /// Its job.
    pub job: &'a str,
    /// The job's fencing token the attempt carried.
    pub token: i64,
    /// Who probed.
    pub actor: &'a str,
    /// The result, in words.
    pub detail: &'a str,
}

impl Store {
    /// The job's `done` effect that changed last, if any. It reads the job's rows (the partial
    /// index holds only open ones): a probe is a person's occasional act, not a hot path.
    pub fn latest_done_effect(&mut self, job: &str) -> Result<Option<LedgerRow>> {
        let sql = format!(
            "SELECT {LEDGER_COLS} FROM effect_ledger WHERE job_key = ?1 AND state = 'done' \
             ORDER BY updated_at DESC, effect_key DESC LIMIT 1"
        );
        self.read(|tx| tx.one(&sql, args![job], ledger_row).optional())
    }

    /// The job's all-time count of suppressed duplicates: the counter `status`, `metrics` and
    /// the dashboard show for the job.
    pub fn suppressed_of(&mut self, job: &str) -> Result<u64> {
        self.read(|tx| {
            let n = tx
                .one(
                    "SELECT n FROM exactly_counters WHERE kind = ?1 AND job_key = ?2",
                    args![EventKind::DuplicateSuppressed, job],
                    |r| int(r, 0),
                )
                .optional()?
                .flatten();
            Ok(n.unwrap_or(0).max(0) as u64)
        })
    }

    /// Records a probe and its result (an event of kind `probe`).
    pub fn record_probe(&mut self, p: &ProbeEvent<'_>, now: Ts) -> Result<()> {
        let now = exactly_words::time::fmt(now);
        self.write(|tx| {
            let now = tx.now(&now);
            record_event(
                tx,
                &NewEvent::new(EventKind::Probe, now)
                    .job(p.job)
                    .effect(p.key)
                    .token(p.token)
                    .actor(p.actor)
                    .detail(p.detail),
            )
        })
    }
}

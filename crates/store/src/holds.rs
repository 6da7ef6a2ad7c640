//! Holds of a job's lease claimed outside a scheduler (`exactly lease claim`, the library): one
//! row per token with the lease asked for, its renewals and its release, so the snapshot can
//! judge a lease nobody renews by how long its holders keep it. A scheduler's runs are not
//! here: their leases are renewed by heartbeat and measured with the run (`exactly_runs`).
use super::db::{args, DbResult, Tx};
use super::{int, text_or_empty, Store};
use exactly_words::Result;
use std::collections::BTreeMap;

/// Holds kept per job (the newest tokens).
const KEPT: i64 = 500;

impl Store {
    /// A claim won outside a scheduler: token `token` of `job` holds a lease of `lease_ms`.
    pub fn hold_claimed(&mut self, job: &str, token: i64, lease_ms: i64, now: &str) -> Result<()> {
        self.write(|tx| {
            let now = tx.now(now);
            tx.exec(
                "INSERT INTO exactly_holds (job_key, fencing_token, lease_ms, claimed_at)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (job_key, fencing_token) DO NOTHING",
                args![job, token, lease_ms, now],
            )?;
            tx.exec(
                "DELETE FROM exactly_holds WHERE job_key = ?1 AND fencing_token <= ?2",
                args![job, token - KEPT],
            )?;
            Ok(())
        })
    }

    /// The holder of `token` renewed its lease.
    pub fn hold_renewed(&mut self, job: &str, token: i64) -> Result<()> {
        self.write(|tx| {
            tx.exec(
                "UPDATE exactly_holds SET renewals = renewals + 1
                 WHERE job_key = ?1 AND fencing_token = ?2",
                args![job, token],
            )?;
            Ok(())
        })
    }

    /// The holder of `token` released its lease.
    pub fn hold_released(&mut self, job: &str, token: i64, now: &str) -> Result<()> {
        self.write(|tx| {
            let now = tx.now(now);
            tx.exec(
                "UPDATE exactly_holds SET released_at = ?3
                 WHERE job_key = ?1 AND fencing_token = ?2 AND released_at IS NULL",
                args![job, token, now],
            )?;
            Ok(())
        })
    }
}

/// Per job: the durations (ms, claim to release) of its holds claimed since `oldest` that were
/// never renewed, newest first, and the lease its newest such hold asked for. Empty on a
/// database from before the table (read read-only).
pub(super) fn unrenewed_holds(
    tx: &Tx<'_>,
    oldest: &str,
) -> DbResult<BTreeMap<String, (Vec<i64>, i64)>> {
    let mut out: BTreeMap<String, (Vec<i64>, i64)> = BTreeMap::new();
    if !super::prepare::has_table(tx, "exactly_holds")? {
        return Ok(out);
    }
    // A hold never released whose holder was still acting under its token later (a write
    // refused as fenced, an effect recorded) held at least until its last event: a holder
    // taken over mid-work is the hold that outlived its lease, counted with that lower bound.
    // One never released and never heard from again crashed, or holds still: not measured.
    let rows = tx.rows(
        "SELECT h.job_key, h.lease_ms, h.claimed_at, coalesce(h.released_at,
                (SELECT max(e.at) FROM exactly_events e
                 WHERE e.job_key = h.job_key AND e.fencing_token = h.fencing_token))
         FROM exactly_holds h
         WHERE h.claimed_at >= ?1 AND h.renewals = 0
         ORDER BY h.fencing_token DESC",
        args![oldest],
        |r| {
            Ok((
                text_or_empty(r, 0)?,
                int(r, 1)?,
                super::rows::ts_req(r, 2, "exactly_holds.claimed_at")?,
                // The release, or the holder's last event (the coalesce above).
                super::rows::ts(r, 3, "exactly_holds.released_at")?,
            ))
        },
    )?;
    for (job, lease, from, to) in rows {
        let Some(to) = to else {
            continue;
        };
        let e = out
            .entry(job)
            .or_insert_with(|| (Vec::new(), lease.unwrap_or(0)));
        if e.0.len() < super::RUN_WINDOW {
            e.0.push((to - from).num_milliseconds().max(0));
        }
    }
    Ok(out)
}

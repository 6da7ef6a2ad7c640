//! The lease aggregate: the seed's claim, renewal and release, and the fencing check every
//! write for a job makes (a higher token exists: refused and counted).
use super::db::{args, Arg, DbError, DbResult, Optional, ToArg, Tx};
use super::{int, record_event, text_or_empty, NewEvent, Store, RELEASED};
use exactly_words::state::EventKind;
use exactly_words::time::Ts;
use exactly_words::Result;

/// The current (highest) fencing token of a job, if it ever had a lease.
pub(super) fn current_token(tx: &Tx<'_>, job: &str) -> DbResult<Option<i64>> {
    tx.one(
        "SELECT max(fencing_token) FROM job_lease WHERE job_key = ?1",
        args![job],
        |r| r.get(0),
    )
}

pub(super) fn fenced(
    tx: &Tx<'_>,
    job: &str,
    key: Option<&str>,
    token: i64,
    what: &str,
    now: &str,
) -> DbResult<()> {
    let now = tx.now(now);
    let mut ev = NewEvent::new(EventKind::FencedWrite, now)
        .job(job)
        .token(token)
        .detail(what);
    ev.effect_key = key;
    record_event(tx, &ev)
}

/// The seed's claim inside the caller's transaction (the runner claims a firing's lease and
/// records the firing in one transaction).
pub(crate) fn claim_lease_tx(
    tx: &Tx<'_>,
    job: &str,
    owner: &str,
    until: &str,
    now: &str,
) -> DbResult<LeaseClaim> {
    // The database's clock decides who holds the lease (the server's, on PostgreSQL).
    let until = &tx.later(until);
    let now = tx.now(now);
    let prev: Option<(String, i64, String)> = tx
        .one(
            "SELECT owner, fencing_token, lease_until FROM job_lease WHERE job_key = ?1",
            args![job],
            |r| {
                Ok((
                    text_or_empty(r, 0)?,
                    int(r, 1)?.unwrap_or(0),
                    text_or_empty(r, 2)?,
                ))
            },
        )
        .optional()?;
    // An expired lease is taken over only once the clock-skew margin has passed too: its
    // holder's clock may be behind ours (a released lease is before every margin).
    let steal_before = exactly_words::time::minus_skew(now);
    // On PostgreSQL a job's first token starts above the last failover's raise
    // (`pg_timeline`): the old primary may have handed out tokens for a job the promoted
    // server never heard of.
    let sql = if tx.is_pg() { CLAIM_PG } else { CLAIM };
    let won: Option<i64> = tx
        .one(sql, args![job, owner, until, now, steal_before], |r| {
            r.get(0)
        })
        .optional()?;
    match (won, prev) {
        (Some(token), Some((prev_owner, prev_token, prev_until))) => {
            let stolen = prev_until.as_str() != RELEASED;
            if stolen {
                let detail =
                    format!("from {prev_owner} (token {prev_token}, lease until {prev_until})");
                record_event(
                    tx,
                    &NewEvent::new(EventKind::LeaseStolen, now)
                        .job(job)
                        .token(token)
                        .actor(owner)
                        .detail(&detail),
                )?;
            }
            Ok(LeaseClaim::Won {
                token,
                stolen_from: stolen.then_some((prev_owner, prev_token)),
            })
        }
        (Some(token), None) => Ok(LeaseClaim::Won {
            token,
            stolen_from: None,
        }),
        // The claim was a no-op: the row we read first, in this same transaction, still holds.
        (None, Some((owner, token, until))) => Ok(LeaseClaim::Held {
            owner,
            token,
            until: crate::rows::time_in("job_lease.lease_until", &until)?,
        }),
        (None, None) => Err(DbError::NoRows),
    }
}

/// The seed's claim: insert, or take over a lease that ended before `?5`.
const CLAIM: &str = "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
     VALUES (?1, ?2, (SELECT coalesce(max(fencing_token), 0) + 1 FROM job_lease \
         WHERE job_key = ?1), ?3, ?4)
     ON CONFLICT(job_key) DO UPDATE SET owner = excluded.owner,
        fencing_token = excluded.fencing_token, lease_until = excluded.lease_until
     WHERE job_lease.lease_until < ?5
     RETURNING fencing_token";

/// [`CLAIM`] on PostgreSQL: a new job's token starts above the floor the last failover set.
const CLAIM_PG: &str = "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, \
         created_at)
     VALUES (?1, ?2, (SELECT greatest(coalesce(max(fencing_token), 0),
         (SELECT coalesce(max(value), 0) FROM exactly_meta WHERE name = 'token_floor')) + 1
         FROM job_lease WHERE job_key = ?1), ?3, ?4)
     ON CONFLICT(job_key) DO UPDATE SET owner = excluded.owner,
        fencing_token = excluded.fencing_token, lease_until = excluded.lease_until
     WHERE job_lease.lease_until < ?5
     RETURNING fencing_token";

/// The seed's conditional lease write: `0 rows => you were fenced` (counted as a fenced write).
/// With `only_held`, a released lease is not touched (renewing it would re-take it).
pub(super) fn set_lease_until(
    tx: &Tx<'_>,
    job: &str,
    token: i64,
    until: &str,
    only_held: bool,
    what: &str,
    now: &str,
) -> DbResult<bool> {
    let until = &tx.later(until);
    let now = tx.now(now);
    let ok = tx
        .one(
            "UPDATE job_lease SET lease_until = ?2 WHERE job_key = ?1 AND fencing_token = ?3
               AND (NOT ?5 OR lease_until <> ?4) RETURNING fencing_token",
            args![job, until, token, RELEASED, only_held],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if !ok {
        fenced(tx, job, None, token, what, now)?;
    }
    Ok(ok)
}

/// Whether a claim of the job's lease would win now: it was never claimed, was released, or
/// ended before the clock-skew margin (the test `claim_lease_tx` makes in its upsert).
pub(super) fn takeable(tx: &Tx<'_>, job: &str, now: &str) -> DbResult<bool> {
    let now = tx.now(now);
    tx.one(
        "SELECT NOT EXISTS (SELECT 1 FROM job_lease WHERE job_key = ?1 AND lease_until >= ?2)",
        args![job, exactly_words::time::minus_skew(now)],
        |r| r.get(0),
    )
}

/// The lease row of a job, if it was ever claimed.
fn lease_row(tx: &Tx<'_>, job: &str) -> DbResult<Option<LeaseRow>> {
    tx.one(
        "SELECT job_key, owner, fencing_token, lease_until FROM job_lease WHERE job_key = ?1",
        args![job],
        |r| {
            Ok(LeaseRow {
                job_key: text_or_empty(r, 0)?,
                owner: text_or_empty(r, 1)?,
                fencing_token: int(r, 2)?.unwrap_or(0),
                lease_until: super::rows::ts_req(r, 3, "job_lease.lease_until")?,
            })
        },
    )
    .optional()
}

/// The answer to a lease claim.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseClaim {
    Won {
        token: i64,
        stolen_from: Option<(String, i64)>,
    },
    Held {
        owner: String,
        token: i64,
        until: Ts,
    },
}

/// The current lease row of a job.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LeaseRow {
    /// The job the lease is for.
    pub job_key: String,
    /// Who holds (or last held) it.
    pub owner: String,
    /// The newest fencing token issued for the job.
    pub fencing_token: i64,
    /// When the lease ends; past it, anyone may claim the job ([`RELEASED`](super::RELEASED)
    /// once released). Read as a time at the door: a bad value is the row's corruption.
    #[serde(serialize_with = "super::rows::ser_ts")]
    pub lease_until: Ts,
}

/// Most leases renewed by one statement.
const RENEW_CHUNK: usize = 200;

impl Store {
    /// The seed's claim, in one statement: insert, or steal an expired lease; the token is one
    /// more than the job's last, so it never goes backwards. `RETURNING` says whether we won.
    pub fn claim_lease(
        &mut self,
        job: &str,
        owner: &str,
        until: &str,
        now: &str,
    ) -> Result<LeaseClaim> {
        if let Some(claim) = self.fast_claim(job, owner, until)? {
            return Ok(claim);
        }
        self.write(|tx| claim_lease_tx(tx, job, owner, until, now))
    }

    /// Extends a lease we hold; `false` means we were fenced (counted). A released lease is
    /// not renewed: it is no longer held.
    pub fn renew_lease(&mut self, job: &str, token: i64, until: &str, now: &str) -> Result<bool> {
        let what = "lease renew refused";
        if let Some(ok) = self.fast_set_lease(job, token, until, true, what)? {
            return Ok(ok);
        }
        self.write(|tx| set_lease_until(tx, job, token, until, true, what, now))
    }

    /// Renews many leases in one write (a scheduler's heartbeat for all its runs): for each
    /// (job, token, until), Some(true) renewed, Some(false) a newer token holds the job (a
    /// fenced write, recorded), None the lease was released meanwhile (its run ended: nothing
    /// to renew, nothing recorded).
    pub fn renew_leases(
        &mut self,
        leases: &[(&str, i64, String)],
        now: &str,
    ) -> Result<Vec<Option<bool>>> {
        if let Some(out) = self.fast_renew_many(leases)? {
            return Ok(out);
        }
        self.write_cas(|tx| {
            // One statement per chunk: hundreds of renewals in a few round trips.
            let mut renewed = std::collections::HashSet::new();
            for chunk in leases.chunks(RENEW_CHUNK) {
                let untils: Vec<String> = chunk.iter().map(|(_, _, u)| tx.later(u)).collect();
                let mut sql = String::from("UPDATE job_lease SET lease_until = v.until FROM (");
                let mut args: Vec<Arg<'_>> = Vec::with_capacity(chunk.len() * 3 + 1);
                for (i, ((job, token, _), until)) in chunk.iter().zip(&untils).enumerate() {
                    if i > 0 {
                        sql.push_str(" UNION ALL ");
                    }
                    let n = i * 3;
                    sql.push_str(&format!(
                        "SELECT CAST(?{} AS TEXT) AS job, CAST(?{} AS BIGINT) AS token, \
                         CAST(?{} AS TEXT) AS until",
                        n + 1,
                        n + 2,
                        n + 3
                    ));
                    args.push((*job).to_arg());
                    args.push(token.to_arg());
                    args.push(until.to_arg());
                }
                sql.push_str(&format!(
                    ") AS v WHERE job_lease.job_key = v.job AND job_lease.fencing_token = v.token
                       AND job_lease.lease_until <> ?{} RETURNING job_lease.job_key, \
                           job_lease.fencing_token",
                    chunk.len() * 3 + 1
                ));
                args.push(RELEASED.to_arg());
                for (job, token) in tx.rows(&sql, &args, |r| {
                    Ok((text_or_empty(r, 0)?, int(r, 1)?.unwrap_or(0)))
                })? {
                    renewed.insert((job, token));
                }
            }
            let mut out = Vec::with_capacity(leases.len());
            for (job, token, _) in leases {
                if renewed.contains(&(job.to_string(), *token)) {
                    out.push(Some(true));
                    continue;
                }
                let newer: bool = tx.one(
                    "SELECT EXISTS (SELECT 1 FROM job_lease WHERE job_key = ?1 \
                     AND fencing_token > ?2)",
                    args![job, token],
                    |r| r.get(0),
                )?;
                if newer {
                    fenced(tx, job, None, *token, "lease renew refused", now)?;
                    out.push(Some(false));
                } else {
                    out.push(None);
                }
            }
            Ok(out)
        })
    }

    /// Ends a lease we hold, keeping its token so the next claim counts on from it.
    pub fn release_lease(&mut self, job: &str, token: i64, now: &str) -> Result<bool> {
        let what = "lease release refused";
        if let Some(ok) = self.fast_set_lease(job, token, RELEASED, false, what)? {
            return Ok(ok);
        }
        self.write(|tx| {
            set_lease_until(
                tx,
                job,
                token,
                RELEASED,
                false,
                "lease release refused",
                now,
            )
        })
    }

    /// The lease row and the time it has left on the database's clock (the server's on
    /// PostgreSQL, `now` on SQLite).
    pub fn lease_left(
        &mut self,
        job: &str,
        now: &str,
    ) -> Result<Option<(LeaseRow, chrono::Duration)>> {
        self.read(|tx| {
            let Some(r) = lease_row(tx, job)? else {
                return Ok(None);
            };
            // A bad lease_until is the row's corruption, said as such (by `lease_row`): read as
            // "no time left" it passed for a lease run out, which the runner and the effect
            // then believed.
            let until = r.lease_until;
            let now = tx.now(now);
            let now = exactly_words::time::parse(now)
                .ok_or_else(|| DbError::Other(format!("the clock's time {now:?} is unreadable")))?;
            Ok(Some((r, until - now)))
        })
    }

    pub fn lease(&mut self, job: &str) -> Result<Option<LeaseRow>> {
        self.read(|tx| lease_row(tx, job))
    }
}

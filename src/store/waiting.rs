//! What waits to start for a job whose lease is free: queued firings, and firings to resume
//! (their run died, or a retry is due). A scheduler asks each tick, before any write.
use super::db::{args, Optional};
use super::firing::{start_firing, Started};
use super::job::paused;
use super::{text_or_empty, Store};
use crate::Result;

/// What waits to start for a job (both false while its lease is live).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Waiting {
    /// A firing is queued.
    pub queued: bool,
    /// A firing is to be resumed: its run died, or it waits for a retry.
    pub resumable: bool,
}

impl Store {
    /// What waits to start for a job whose lease is free: queued firings (see
    /// [`Store::start_queued`]) and firings to resume (see [`Store::resume_firing`]). One cheap
    /// read per scheduler tick before any write.
    pub(crate) fn waiting(&mut self, job: &str, now: &str) -> Result<Waiting> {
        self.read(|tx| {
            let now = tx.now(now);
            tx.one(
                "SELECT NOT EXISTS (SELECT 1 FROM job_lease WHERE job_key = ?1 \
                     AND lease_until > ?2),
                    EXISTS (SELECT 1 FROM exactly_firings WHERE job_key = ?1 AND state = 'queued'),
                    EXISTS (SELECT 1 FROM exactly_firings WHERE job_key = ?1 AND state IN \
                        ('running', 'retry'))",
                args![job, now],
                |r| {
                    let free: bool = r.get(0)?;
                    Ok(Waiting {
                        queued: free && r.get::<bool>(1)?,
                        resumable: free && r.get::<bool>(2)?,
                    })
                },
            )
        })
    }

    /// [`Store::waiting`] for every registered job in one read (a scheduler asks each tick):
    /// the jobs with something waiting, each probed through its own index entries, so the
    /// cost follows the number of jobs, not of firings.
    pub(crate) fn waiting_jobs(&mut self, now: &str) -> Result<Vec<(String, Waiting)>> {
        self.read(|tx| {
            let now = tx.now(now);
            let rows = tx.rows(
                "SELECT job_key, queued, resumable FROM (
                   SELECT j.job_key,
                     EXISTS (SELECT 1 FROM exactly_firings f WHERE f.job_key = j.job_key \
                         AND f.state = 'queued') AS queued,
                     EXISTS (SELECT 1 FROM exactly_firings f WHERE f.job_key = j.job_key \
                         AND f.state IN ('running', 'retry')) AS resumable
                   FROM exactly_jobs j
                   WHERE NOT EXISTS (SELECT 1 FROM job_lease l WHERE l.job_key = j.job_key \
                       AND l.lease_until > ?1)) AS w
                 WHERE queued OR resumable",
                args![now],
                |r| {
                    Ok((
                        text_or_empty(r, 0)?,
                        Waiting {
                            queued: r.get(1)?,
                            resumable: r.get(2)?,
                        },
                    ))
                },
            );
            rows
        })
    }

    /// Starts the oldest queued firing of a job if its lease can be won (and it is not paused).
    pub(crate) fn start_queued(
        &mut self,
        job: &str,
        owner: &str,
        lease_until: &str,
        now: &str,
    ) -> Result<Option<Started>> {
        self.write(|tx| {
            let now = tx.now(now);
            if paused(tx, job)?.is_some() {
                return Ok(None);
            }
            let slot: Option<String> = tx
                .one(
                    "SELECT scheduled_at FROM exactly_firings WHERE job_key = ?1 \
                         AND state = 'queued'
                     ORDER BY scheduled_at LIMIT 1",
                    args![job],
                    |r| text_or_empty(r, 0),
                )
                .optional()?;
            let Some(slot) = slot else { return Ok(None) };
            start_firing(tx, job, &slot, owner, lease_until, now)
        })
    }
}

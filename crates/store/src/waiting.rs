//! What waits to start for a job whose lease is free: queued firings, and firings to resume
//! (their run died, or a retry is due). A scheduler asks each tick, before any write.
use super::db::{args, DbResult, Optional, Tx};
use super::firing_rows::{start_firing, FireRequest, Started, EFFECT_NEVER_HAPPENED, FAILED_RETRY};
use super::job::paused;
use super::{text, text_or_empty, Store};
use exactly_words::time::Ts;
use exactly_words::Result;

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
    pub fn waiting(&mut self, job: &str, now: &str) -> Result<Waiting> {
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
    pub fn waiting_jobs(&mut self, now: &str) -> Result<Vec<(String, Waiting)>> {
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
    pub fn start_queued(
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
            // A bad slot is the row's corruption, said: the queue never stalls behind it.
            let slot = tx
                .one(
                    "SELECT scheduled_at FROM exactly_firings WHERE job_key = ?1 \
                         AND state = 'queued'
                     ORDER BY scheduled_at LIMIT 1",
                    args![job],
                    |r| super::rows::slot(r, 0, "exactly_firings.scheduled_at"),
                )
                .optional()?;
            let Some(slot) = slot else { return Ok(None) };
            start_firing(tx, job, slot, owner, lease_until, now)
        })
    }
}

/// The job's oldest firing that waits for its lease (queued, to be run again, or `running` with
/// its run dead), when the lease is free to take: (lease holder, token, the firing in words).
/// A `running` firing under a lease still live is a live run, decided as such by the claim.
pub(super) fn waiting_before(
    tx: &Tx<'_>,
    f: &FireRequest<'_>,
) -> DbResult<Option<(String, i64, String)>> {
    let first: Option<(Ts, String, Option<String>, Option<String>)> = tx
        .one(
            "SELECT scheduled_at, state, owner, detail FROM exactly_firings
             WHERE state IN ('queued', 'retry', 'running') AND job_key = ?1 AND scheduled_at <> ?2
             ORDER BY scheduled_at LIMIT 1",
            args![f.job, f.slot],
            |r| {
                Ok((
                    super::rows::ts_req(r, 0, "exactly_firings.scheduled_at")?,
                    text_or_empty(r, 1)?,
                    text(r, 2)?,
                    text(r, 3)?,
                ))
            },
        )
        .optional()?;
    // Most firings find none, and pay one index probe. A lease the claim could not take is a
    // live run's: decided as such by the claim.
    let Some((slot, state, owner, detail)) = first else {
        return Ok(None);
    };
    let slot = exactly_words::time::fmt(slot);
    if !super::lease::takeable(tx, f.job, f.now)? {
        return Ok(None);
    }
    let owner = owner.unwrap_or_else(|| "-".to_string());
    let token = super::lease::current_token(tx, f.job)?.unwrap_or(0);
    let what = match state.as_str() {
        "queued" => format!("the firing at {slot}, queued earlier,"),
        // A firing goes again for one of four reasons, each said as it is.
        "retry" => {
            let d = detail.unwrap_or_default();
            let why = if d.starts_with(FAILED_RETRY) {
                "whose run failed and waits for its retry"
            } else if d.starts_with(super::approval::APPROVAL_CAME) {
                "whose effect was approved and waits for a scheduler to send it"
            } else if d.starts_with(EFFECT_NEVER_HAPPENED) {
                "whose effect never happened"
            } else if d == exactly_words::state::RunOutcome::Killed.to_string() {
                "whose run was killed before it finished"
            } else {
                "which goes again"
            };
            format!("the firing at {slot}, {why},")
        }
        _ => format!("the firing at {slot}, whose run by {owner} lost its lease,"),
    };
    Ok(Some((owner, token, what)))
}

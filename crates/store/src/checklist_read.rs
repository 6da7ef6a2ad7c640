//! `exactly doctor`'s read: the snapshot's rows and the checklist's own, in one transaction;
//! and the record of each `exactly chaos` run it judges the kill test by. Unlike the
//! dashboard's poll, some of these walk the whole ledger or the event log (grouped counts):
//! a doctor's question, asked now and then, not every second.
use super::checklist_rows::{ActionFacts, ChaosRunRow, ChecklistReading, DoneRow, JobEvidence};

/// Facts per job key, as the checklist's reading gathers them.
type Jobs = std::collections::BTreeMap<String, JobEvidence>;
use super::db::{args, DbResult, Tx};
use super::read::{reading_in, LEAKED};
use super::{int, text, text_or_empty, Store};
use exactly_words::time::{self, Ts};
use exactly_words::Result;

/// The most `done` rows of repeated targets read (the newest targets' are kept).
const REPEATS_READ: usize = 20_000;
/// The newest events read for retries that met a send in flight (rule 6).
const EVENTS_READ: u64 = 200_000;
/// The `exactly chaos` runs read, newest first.
const CHAOS_READ: usize = 10;

fn n(r: &super::db::Row<'_>, i: usize) -> DbResult<u64> {
    Ok(int(r, i)?.unwrap_or(0).max(0) as u64)
}

impl Store {
    /// Everything `exactly doctor` judges, in one read transaction, as at `now`.
    pub fn checklist_reading(
        &mut self,
        now: Ts,
        dead_after: std::time::Duration,
    ) -> Result<ChecklistReading> {
        let caller_now = time::fmt(now);
        let db = self.path.clone();
        // The dashboard's kept run windows, brought up to date, rather than a second copy of
        // them (100,000 runs, 11 MB on the bench's ledger) read afresh for each judgement.
        let mut kept = self.take_kept();
        let out = self.read(|tx| {
            let reading = reading_in(tx, &caller_now, dead_after, &db, &mut kept)?;
            let now = reading.taken_at;
            let mut out = ChecklistReading {
                registered: super::job::registered_in(tx)?,
                ..ChecklistReading::default()
            };
            facts(tx, &time::fmt(now), now, &mut out)?;
            out.reading = reading;
            Ok(out)
        });
        // A failed read may have left the cache half-synced: start it afresh next time.
        if out.is_ok() {
            self.kept = Some(kept);
        }
        out
    }

    /// Records a run of `exactly chaos` (its end is now, on the database's clock).
    pub fn record_chaos_run(&mut self, run: &ChaosRunRow, now: &str) -> Result<()> {
        self.write(|tx| {
            let now = tx.now(now);
            tx.exec(
                "INSERT INTO exactly_chaos_runs
                   (at, scenarios, iterations, duplicates, lost, passed)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                args![
                    now,
                    run.scenarios,
                    run.iterations,
                    run.duplicates,
                    run.lost,
                    i64::from(run.passed)
                ],
            )?;
            Ok(())
        })
    }
}

fn facts(tx: &Tx<'_>, now_s: &str, now: Ts, out: &mut ChecklistReading) -> DbResult<()> {
    let v9 = super::prepare::version(tx)? >= 9;
    token_facts(tx, now_s, &mut out.jobs)?;
    counter_facts(tx, now, &mut out.jobs)?;
    approval_facts(tx, &mut out.jobs)?;
    ledger_facts(tx, v9, out)?;
    if super::prepare::has_table(tx, "exactly_chaos_runs")? {
        out.chaos_runs = tx.rows(
            &format!(
                "SELECT at, scenarios, iterations, duplicates, lost, passed
                 FROM exactly_chaos_runs ORDER BY id DESC LIMIT {CHAOS_READ}"
            ),
            &[],
            |r| {
                Ok(ChaosRunRow {
                    at: super::rows::ts_req(r, 0, "exactly_chaos_runs.at")?,
                    scenarios: text_or_empty(r, 1)?,
                    iterations: int(r, 2)?.unwrap_or(0),
                    duplicates: int(r, 3)?.unwrap_or(0),
                    lost: int(r, 4)?.unwrap_or(0),
                    passed: int(r, 5)?.unwrap_or(0) != 0,
                })
            },
        )?;
    }
    Ok(())
}

/// Rule 1's and rule 10's leak: each job's lease token, its ledger's tokens, runs whose token
/// went backwards, and claims never submitted.
fn token_facts(tx: &Tx<'_>, now_s: &str, jobs: &mut Jobs) -> DbResult<()> {
    for (job, token) in tx.rows("SELECT job_key, fencing_token FROM job_lease", &[], |r| {
        Ok((text_or_empty(r, 0)?, int(r, 1)?))
    })? {
        jobs.entry(job).or_default().lease_token = token;
    }
    for (job, rows, max, untokened) in tx.rows(
        "SELECT job_key, count(*), max(fencing_token),
           CAST(coalesce(sum(CASE WHEN fencing_token IS NULL THEN 1 ELSE 0 END), 0) AS BIGINT)
         FROM effect_ledger GROUP BY job_key",
        &[],
        |r| Ok((text_or_empty(r, 0)?, n(r, 1)?, int(r, 2)?, n(r, 3)?)),
    )? {
        let f = jobs.entry(job).or_default();
        f.rows = rows;
        f.ledger_max_token = max;
        f.rows_without_token = untokened;
    }
    for (job, back) in tx.rows(
        "SELECT job_key, count(*) FROM (
           SELECT job_key, fencing_token, max(fencing_token) OVER (PARTITION BY job_key
             ORDER BY started_at, run_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prior
           FROM exactly_runs) w
         WHERE fencing_token < prior GROUP BY job_key",
        &[],
        |r| Ok((text_or_empty(r, 0)?, n(r, 1)?)),
    )? {
        jobs.entry(job).or_default().runs_token_backwards = back;
    }
    for (job, leaked) in tx.rows(
        &format!("SELECT e.job_key, count(*) {LEAKED} GROUP BY e.job_key"),
        args![now_s],
        |r| Ok((text_or_empty(r, 0)?, n(r, 1)?)),
    )? {
        jobs.entry(job).or_default().claimed_leaked = leaked;
    }
    Ok(())
}

/// The counters (suppressed, fenced, takeovers, runs ended), fenced writes in the last two
/// days, retries that met a send in flight, and approvals consumed twice.
fn counter_facts(tx: &Tx<'_>, now: Ts, jobs: &mut Jobs) -> DbResult<()> {
    let day_ago = time::fmt(now - chrono::Duration::hours(24));
    let two_days_ago = time::fmt(now - chrono::Duration::hours(48));
    for (kind, job, count) in tx.rows(
        "SELECT kind, job_key, n FROM exactly_counters
         WHERE kind IN ('duplicate_suppressed', 'fenced_write', 'lease_stolen')
            OR kind LIKE 'run_ended:%'",
        &[],
        |r| Ok((text_or_empty(r, 0)?, text_or_empty(r, 1)?, n(r, 2)?)),
    )? {
        if job.is_empty() {
            continue;
        }
        let f = jobs.entry(job).or_default();
        match kind.as_str() {
            "duplicate_suppressed" => f.suppressed += count,
            "fenced_write" => f.fenced += count,
            "lease_stolen" => f.takeovers += count,
            _ => f.runs_ended += count,
        }
    }
    for (job, last, before) in tx.rows(
        "SELECT coalesce(job_key, ''),
           CAST(coalesce(sum(CASE WHEN at >= ?2 THEN 1 ELSE 0 END), 0) AS BIGINT),
           CAST(coalesce(sum(CASE WHEN at < ?2 THEN 1 ELSE 0 END), 0) AS BIGINT)
         FROM exactly_events
         WHERE kind IN ('duplicate_suppressed', 'fenced_write') AND kind = 'fenced_write'
           AND at >= ?1
         GROUP BY coalesce(job_key, '')",
        args![two_days_ago, day_ago],
        |r| Ok((text_or_empty(r, 0)?, n(r, 1)?, n(r, 2)?)),
    )? {
        if let Some(f) = jobs.get_mut(&job) {
            f.fenced_24h = last;
            f.fenced_prev_24h = before;
        }
    }
    let week_ago = time::fmt(now - chrono::Duration::days(7));
    for (job, n) in tx.rows(
        // Among the newest events only (ids follow time): `kind` alone has no index.
        &format!(
            "SELECT coalesce(job_key, ''), count(*) FROM exactly_events
             WHERE id > (SELECT coalesce(max(id), 0) FROM exactly_events) - {EVENTS_READ}
               AND kind = 'retry_in_flight' AND at >= ?1 GROUP BY coalesce(job_key, '')"
        ),
        args![week_ago],
        |r| Ok((text_or_empty(r, 0)?, n(r, 1)?)),
    )? {
        jobs.entry(job).or_default().retries_in_flight = n;
    }
    for (job, reused) in tx.rows(
        // From the approvals (few) through the events' key index: `kind` alone has no index,
        // and a scan of a million events took 1.5 s.
        "SELECT coalesce(job_key, ''), count(*) FROM (
           SELECT job_key, effect_key FROM exactly_events
           WHERE effect_key IN (SELECT effect_key FROM exactly_approvals)
             AND kind = 'approval_consumed'
           GROUP BY job_key, effect_key HAVING count(*) > 1) r
         GROUP BY coalesce(job_key, '')",
        &[],
        |r| Ok((text_or_empty(r, 0)?, n(r, 1)?)),
    )? {
        jobs.entry(job).or_default().approvals_reused = reused;
    }
    Ok(())
}

/// The lease length a job's holds claimed, and approvals approved but unused after a run.
fn approval_facts(tx: &Tx<'_>, jobs: &mut Jobs) -> DbResult<()> {
    let has_holds = super::prepare::has_table(tx, "exactly_holds")?;
    if has_holds {
        for (job, lease) in tx.rows(
            "SELECT h.job_key, h.lease_ms FROM exactly_holds h
             WHERE h.fencing_token = (SELECT max(fencing_token) FROM exactly_holds
                                      WHERE job_key = h.job_key)",
            &[],
            |r| Ok((text_or_empty(r, 0)?, int(r, 1)?)),
        )? {
            jobs.entry(job).or_default().hold_lease_ms = lease;
        }
    }
    let holds = if has_holds {
        "OR EXISTS (SELECT 1 FROM exactly_holds h WHERE h.job_key = a.job_key
                    AND h.released_at > a.decided_at)"
    } else {
        ""
    };
    for (job, unused) in tx.rows(
        &format!(
            "SELECT a.job_key, count(*) FROM exactly_approvals a
             WHERE a.state = 'approved' AND a.decided_at IS NOT NULL
               AND (EXISTS (SELECT 1 FROM exactly_runs r WHERE r.job_key = a.job_key
                            AND r.ended_at > a.decided_at) {holds})
             GROUP BY a.job_key"
        ),
        &[],
        |r| Ok((text_or_empty(r, 0)?, n(r, 1)?)),
    )? {
        jobs.entry(job).or_default().approved_unused_after_run = unused;
    }
    Ok(())
}

/// Per action: how its rows were written and settled; and the `done` rows of targets done
/// more than once (rule 3's repeats).
fn ledger_facts(tx: &Tx<'_>, v9: bool, out: &mut ChecklistReading) -> DbResult<()> {
    let fields = if v9 {
        "input_fields"
    } else {
        "CAST(NULL AS TEXT)"
    };
    out.actions = tx.rows(
        &format!(
            "SELECT job_key, action_id, count(*),
               CAST(coalesce(sum(CASE WHEN observe_cmd IS NOT NULL THEN 1 ELSE 0 END), 0)
                 AS BIGINT),
               CAST(coalesce(sum(CASE WHEN verdict_at IS NOT NULL THEN 1 ELSE 0 END), 0)
                 AS BIGINT),
               CAST(coalesce(sum(CASE WHEN resolved_by IS NOT NULL THEN 1 ELSE 0 END), 0)
                 AS BIGINT),
               CAST(coalesce(sum(CASE WHEN {fields} IS NOT NULL THEN 1 ELSE 0 END), 0)
                 AS BIGINT),
               CAST(coalesce(sum(CASE WHEN {fields} LIKE '%\"run:%' THEN 1 ELSE 0 END), 0)
                 AS BIGINT)
             FROM effect_ledger GROUP BY job_key, action_id ORDER BY job_key, action_id"
        ),
        &[],
        |r| {
            Ok(ActionFacts {
                job_key: text_or_empty(r, 0)?,
                action_id: text(r, 1)?,
                rows: n(r, 2)?,
                with_observer: n(r, 3)?,
                observer_verdicts: n(r, 4)?,
                resolved_by_hand: n(r, 5)?,
                with_fields: n(r, 6)?,
                run_marked: n(r, 7)?,
            })
        },
    )?;
    out.repeats = tx.rows(
        &format!(
            "SELECT e.job_key, e.action_id, e.target_id, e.effect_key, e.fencing_token,
               e.created_at, {fields}
             FROM effect_ledger e JOIN (
               SELECT job_key, action_id, target_id, max(created_at) AS newest
               FROM effect_ledger
               WHERE state = 'done' AND action_id IS NOT NULL AND target_id IS NOT NULL
               GROUP BY job_key, action_id, target_id HAVING count(*) > 1) d
             ON d.job_key = e.job_key AND d.action_id = e.action_id
               AND d.target_id = e.target_id
             WHERE e.state = 'done'
             ORDER BY d.newest DESC, e.job_key, e.action_id, e.target_id, e.created_at
             LIMIT {REPEATS_READ}"
        ),
        &[],
        |r| {
            Ok(DoneRow {
                job_key: text_or_empty(r, 0)?,
                action_id: text_or_empty(r, 1)?,
                target_id: text_or_empty(r, 2)?,
                effect_key: exactly_words::EffectKey::from(text_or_empty(r, 3)?),
                fencing_token: int(r, 4)?,
                created_at: super::rows::ts_req(r, 5, "effect_ledger.created_at")?,
                input_fields: text(r, 6)?,
            })
        },
    )?;
    Ok(())
}

//! An effect's two commits on PostgreSQL, `submitted` (with its reservation) and `done`, each as
//! one statement: the lease check, the ledger write and its event in data-modifying CTEs of a
//! single `WITH … SELECT`, prepared once per connection and sent outside any transaction (it
//! commits on its own). They answer what the PL/pgSQL functions `exactly_begin_effect` and
//! `exactly_finish_effect` (`pg_functions`) answer, with the same rows, states and events, and
//! `fallback` (having written nothing) where those do; the functions stay installed for the
//! processes of an older exactly. One statement instead of a function of several: the server
//! plans it once per connection and runs one executor instead of one per PL/pgSQL step, which is
//! most of what a transition cost it beyond a bare insert (see `docs/performance.md`).
//!
//! Safe by locks, as the functions are (READ COMMITTED): the CTE `l` takes a share lock on the
//! job's lease row before any write of the statement is made (every write reads from it), which
//! a claim's `FOR UPDATE` waits for; a claim that committed first is seen by the lock (it
//! follows the row to its newest version), so a stale token writes nothing but its fenced event.
//! The token check and the write it guards are one statement, so one transaction.
use exactly_words::state::EventKind;

/// An instant as the store writes it (`Tx::now`'s format).
const TS: &str = r#"'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'"#;

/// `exactly_begin_effect` as one statement; the parameters and the answer's columns
/// (`outcome`, `at`, `until`) are the function's. ?1 key, ?2 job, ?3 run, ?4 token, ?5 terms,
/// ?6 action, ?7 target, ?8 digest, ?9 observe, ?10 submit, ?11 attempt, ?12 sender,
/// ?13 min_until, ?14 fields.
pub(crate) fn begin() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        r#"WITH n AS (SELECT to_char(now() AT TIME ZONE 'UTC', %TS%) AS at),
       l AS (SELECT fencing_token AS token, NULLIF(lease_until, '%RELEASED%') AS until
             FROM job_lease WHERE job_key = ?2 FOR SHARE),
       ok AS (SELECT l.until,
                CASE WHEN ?10 AND l.until COLLATE "C" >= ?13
                       AND NOT EXISTS (SELECT 1 FROM exactly_approvals WHERE effect_key = ?1)
                     THEN 'submitted' ELSE 'claimed' END AS state
              FROM l WHERE l.token = ?4),
       i AS (INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
               terms_shown, created_at, updated_at, action_id, target_id, input_digest,
               observe_cmd, attempt, version, sender, sender_until, input_fields)
             SELECT ?1, ?2, ?3, ?4, ok.state, ?5, n.at, n.at, ?6, ?7, ?8, ?9,
               CASE WHEN ok.state = 'submitted' THEN ?11 END, 1,
               CASE WHEN ok.state = 'submitted' THEN ?12 END,
               CASE WHEN ok.state = 'submitted' THEN ok.until END, ?14
             FROM ok, n
             ON CONFLICT (effect_key) DO NOTHING
             RETURNING state),
       fe AS (INSERT INTO exactly_events (at, kind, job_key, effect_key, fencing_token, actor,
                detail)
              SELECT n.at, '%FENCED%', ?2, ?1, ?4, NULL, 'effect claim refused' FROM n
              WHERE NOT EXISTS (SELECT 1 FROM ok)),
       fc AS (INSERT INTO exactly_counters (kind, job_key, n)
              SELECT '%FENCED%', coalesce(?2, ''), 1 WHERE NOT EXISTS (SELECT 1 FROM ok)
              ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + 1)
     SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM ok) THEN 'fenced'
                 ELSE coalesce((SELECT state FROM i), 'fallback') END,
            (SELECT at FROM n), (SELECT until FROM ok)"#
            .replace("%TS%", TS)
            .replace("%RELEASED%", super::RELEASED)
            .replace("%FENCED%", EventKind::FencedWrite.as_str())
    })
}

/// `exactly_finish_effect` as one statement; the parameters and the answer's columns
/// (`outcome`, `at`) are the function's. ?1 key, ?2 job, ?3 token, ?4 state, ?5 answer, ?6 raw,
/// ?7 total, ?8 seen state, ?9 seen version, ?10 seen updated_at, ?11 event kind, ?12 detail.
pub(crate) fn finish() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        r#"WITH n AS (SELECT to_char(now() AT TIME ZONE 'UTC', %TS%) AS at),
       l AS (SELECT fencing_token FROM job_lease WHERE job_key = ?2 FOR SHARE),
       u AS (UPDATE effect_ledger SET state = ?4, response = ?5, updated_at = (SELECT at FROM n),
               version = coalesce(version, 0) + 1, response_raw = ?6, response_total = ?7
             WHERE effect_key = ?1 AND fencing_token = ?3 AND state = ?8
               AND coalesce(version, 0) = ?9 AND updated_at = ?10
               AND ?3 = (SELECT max(fencing_token) FROM l)
             RETURNING effect_key),
       e AS (INSERT INTO exactly_events (at, kind, job_key, effect_key, fencing_token, actor,
               detail)
             SELECT n.at, ?11, ?2, ?1, ?3, NULL, ?12 FROM u, n),
       c AS (INSERT INTO exactly_counters (kind, job_key, n)
             SELECT ?11, coalesce(?2, ''), 1 FROM u WHERE ?11 <> '%DONE%'
             ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + 1)
     SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN 'ok' ELSE 'fallback' END, (SELECT at FROM n)"#
            .replace("%TS%", TS)
            .replace("%DONE%", EventKind::EffectDone.as_str())
    })
}

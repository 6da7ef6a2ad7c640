//! An effect's two commits on PostgreSQL, `submitted` (with its reservation) and `done`, each as
//! one statement: the lease check and the ledger write (and, at the end, its event) in a single
//! statement, prepared once per connection and sent outside any transaction (it commits on its
//! own). They write the rows, states and events the PL/pgSQL functions `exactly_begin_effect`
//! and `exactly_finish_effect` (`pg_functions`) write in their common case, and answer no row
//! (having written nothing) for every other case — a fenced token, a key already taken, a row
//! changed since it was seen — which the transaction beside them then decides and records, as
//! after a function's `fallback`. The functions stay installed for the processes of an older
//! exactly.
//!
//! Lean on purpose: the server's cost of a transition beyond a bare insert is mostly its
//! executor's start (a node, a projection, an opened relation per part of the plan), so the
//! common case is one plain `INSERT … SELECT` and one `UPDATE` feeding the event's `INSERT`,
//! with nothing in the plan for the rare cases (see *Two commits, lean* in
//! `docs/performance.md`).
//!
//! Safe by locks, as the functions are (READ COMMITTED): the lease row is share-locked, with our
//! token as the condition, before the statement's write is made (the write reads from it), which
//! a claim's `FOR UPDATE` waits for; a claim that committed first is seen by the lock (it
//! follows the row to its newest version and checks the token there), so a stale token locks
//! and writes nothing. The token check and the write it guards are one statement, so one
//! transaction.
use exactly_words::state::EventKind;

/// An instant as the store writes it (`Tx::now`'s format).
const TS: &str = r#"'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'"#;

/// `exactly_begin_effect`'s common case as one statement: our row inserted `claimed`, or
/// `submitted` when asked and no approval row and enough lease stand in the way. Its one row
/// (`state`, `created_at`: the server's now, `sender_until`: the lease's end when submitted);
/// no row: fenced, or the key is taken. ?1 key, ?2 job, ?3 run, ?4 token, ?5 terms, ?6 action,
/// ?7 target, ?8 digest, ?9 observe, ?10 submit, ?11 attempt, ?12 sender, ?13 min_until,
/// ?14 fields.
pub(crate) fn begin() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        r#"INSERT INTO effect_ledger AS e (effect_key, job_key, run_id, fencing_token, state,
         terms_shown, created_at, updated_at, action_id, target_id, input_digest, observe_cmd,
         attempt, version, sender, sender_until, input_fields)
       SELECT ?1, ?2, ?3, ?4, s.state, ?5, s.at, s.at, ?6, ?7, ?8, ?9,
         CASE WHEN s.state = 'submitted' THEN ?11 END, 1,
         CASE WHEN s.state = 'submitted' THEN ?12 END,
         CASE WHEN s.state = 'submitted' THEN s.until END, ?14
       FROM (SELECT to_char(now() AT TIME ZONE 'UTC', %TS%) AS at,
               NULLIF(lease_until, '%RELEASED%') AS until,
               CASE WHEN ?10 AND NULLIF(lease_until, '%RELEASED%') COLLATE "C" >= ?13
                      AND NOT EXISTS (SELECT 1 FROM exactly_approvals WHERE effect_key = ?1)
                    THEN 'submitted' ELSE 'claimed' END AS state
             FROM job_lease WHERE job_key = ?2 AND fencing_token = ?4 FOR SHARE) AS s
       ON CONFLICT (effect_key) DO NOTHING
       RETURNING e.state, e.created_at, e.sender_until"#
            .replace("%TS%", TS)
            .replace("%RELEASED%", super::RELEASED)
    })
}

/// `exactly_finish_effect`'s common case for `done` as one statement: the compare-and-set and
/// its event (a `done` moves no counter). Its one row (`at`: the server's now); no row: it did
/// not apply. ?1 key, ?2 job, ?3 token, ?4 state, ?5 answer, ?6 raw, ?7 total, ?8 seen state,
/// ?9 seen version, ?10 seen updated_at, ?11 event kind, ?12 detail.
pub(crate) fn finish_done() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        r#"WITH u AS (UPDATE effect_ledger SET state = ?4, response = ?5,
               updated_at = to_char(now() AT TIME ZONE 'UTC', %TS%),
               version = coalesce(version, 0) + 1, response_raw = ?6, response_total = ?7
             WHERE effect_key = ?1 AND fencing_token = ?3 AND state = ?8
               AND coalesce(version, 0) = ?9 AND updated_at = ?10
               AND EXISTS (SELECT 1 FROM job_lease WHERE job_key = ?2 AND fencing_token = ?3
                           FOR SHARE)
             RETURNING updated_at)
     INSERT INTO exactly_events (at, kind, job_key, effect_key, fencing_token, actor, detail)
     SELECT u.updated_at, ?11, ?2, ?1, ?3, NULL, ?12 FROM u
     RETURNING at"#
            .replace("%TS%", TS)
    })
}

/// `exactly_finish_effect` as one statement, for `unknown` (whose event moves a counter); the
/// parameters are [`finish_done`]'s, the answer's columns (`outcome`, `at`) the function's. ?1 key, ?2 job, ?3 token, ?4 state, ?5 answer, ?6 raw,
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

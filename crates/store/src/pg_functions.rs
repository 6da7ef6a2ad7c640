//! The ledger's and the lease's hot transitions as PL/pgSQL functions, so each is one round trip
//! on PostgreSQL: one autocommit `SELECT` of a function instead of BEGIN, a few statements and
//! COMMIT. Each does what the Rust transaction beside it (`ledger.rs`, `lease.rs`) does in its
//! common case, with the same rows, states and events, and answers `fallback` (having written
//! nothing) for every other case, which the Rust transaction then runs as before.
//!
//! They run at the server's default isolation (usually READ COMMITTED), so they are safe by
//! locks rather than by SERIALIZABLE: a transition takes a share lock on its job's lease row
//! first, which a claim's row lock waits for, so no token can change under it; each ledger
//! write is a compare-and-set on the row version it names; a claim locks the lease row (or
//! inserts it with `ON CONFLICT`). Under a stricter server default a serialization failure is
//! retried by the caller, as a transaction is.
use exactly_words::state::EventKind;

/// The version of the functions below, kept in `exactly_meta` (name `pg_functions`) apart from
/// the shared schema version: a database made by an older exactly gets them on its next open
/// by a writer, without a schema change SQLite would have to follow.
pub(crate) const VERSION: i64 = 3;

/// The statements that (re)create the functions, in order.
pub(crate) fn statements() -> Vec<String> {
    let words = |sql: &str| {
        sql.replace("%TS%", TS)
            .replace("%RELEASED%", super::RELEASED)
            .replace("%FENCED%", EventKind::FencedWrite.as_str())
            .replace("%STOLEN%", EventKind::LeaseStolen.as_str())
    };
    FUNCTIONS.iter().map(|f| words(f)).collect()
}

/// An instant as the store writes it (`Tx::now`'s format).
const TS: &str = r#"'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'"#;

const FUNCTIONS: &[&str] = &[
    // `record_event`: the event and its all-time counter.
    "CREATE OR REPLACE FUNCTION exactly_event(p_at text, p_kind text, p_job text, p_effect text,
       p_token bigint, p_actor text, p_detail text) RETURNS void LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     BEGIN
       INSERT INTO exactly_events (at, kind, job_key, effect_key, fencing_token, actor, detail)
       VALUES (p_at, p_kind, p_job, p_effect, p_token, p_actor, p_detail);
       INSERT INTO exactly_counters (kind, job_key, n) VALUES (p_kind, coalesce(p_job, ''), 1)
       ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + 1;
     END $$",
    // `Store::begin_tx`: fenced, or our row inserted `claimed` (or `submitted` when asked and
    // no approval row and enough lease stand in the way); a taken key is `fallback`.
    "CREATE OR REPLACE FUNCTION exactly_begin_effect(p_key text, p_job text, p_run text,
       p_token bigint, p_terms text, p_action text, p_target text, p_digest text, p_observe text,
       p_submit boolean, p_attempt text, p_sender text, p_min_until text, p_fields text)
     RETURNS TABLE (o_outcome text, o_at text, o_until text) LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     DECLARE
       v_now text := to_char(now() AT TIME ZONE 'UTC', %TS%);
       v_token bigint;
       v_until text;
       v_state text := 'claimed';
     BEGIN
       SELECT fencing_token, lease_until INTO v_token, v_until
       FROM job_lease WHERE job_key = p_job FOR SHARE;
       IF v_token IS DISTINCT FROM p_token THEN
         PERFORM exactly_event(v_now, '%FENCED%', p_job, p_key, p_token, NULL, \
             'effect claim refused');
         RETURN QUERY SELECT 'fenced', v_now, NULL::text;
         RETURN;
       END IF;
       IF v_until = '%RELEASED%' THEN
         v_until := NULL;
       END IF;
       IF p_submit AND v_until COLLATE \"C\" >= p_min_until
          AND NOT EXISTS (SELECT 1 FROM exactly_approvals WHERE effect_key = p_key) THEN
         v_state := 'submitted';
       END IF;
       INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, terms_shown,
         created_at, updated_at, action_id, target_id, input_digest, observe_cmd, attempt,
         version, sender, sender_until, input_fields)
       SELECT p_key, p_job, p_run, p_token, v_state, p_terms, v_now, v_now, p_action, p_target,
         p_digest, p_observe, s.attempt, 1, s.sender, s.until, p_fields
       FROM (SELECT CASE WHEN v_state = 'submitted' THEN p_attempt END AS attempt,
                    CASE WHEN v_state = 'submitted' THEN p_sender END AS sender,
                    CASE WHEN v_state = 'submitted' THEN v_until END AS until) AS s
       ON CONFLICT (effect_key) DO NOTHING;
       IF NOT FOUND THEN
         RETURN QUERY SELECT 'fallback', v_now, NULL::text;
         RETURN;
       END IF;
       RETURN QUERY SELECT v_state, v_now, v_until;
     END $$",
    // `Store::submit_effect_on` on a row seen `claimed` with no approval row for its key: fenced,
    // lease ending, or the compare-and-set to `submitted`; anything else is `fallback`.
    "CREATE OR REPLACE FUNCTION exactly_submit_effect(p_key text, p_job text, p_run text,
       p_token bigint, p_attempt text, p_sender text, p_min_until text, p_state text,
       p_version bigint, p_updated text)
     RETURNS TABLE (o_outcome text, o_at text, o_until text, o_version bigint) LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     DECLARE
       v_now text := to_char(now() AT TIME ZONE 'UTC', %TS%);
       v_token bigint;
       v_until text;
       v_version bigint;
     BEGIN
       SELECT fencing_token, lease_until INTO v_token, v_until
       FROM job_lease WHERE job_key = p_job FOR SHARE;
       IF v_token IS DISTINCT FROM p_token THEN
         PERFORM exactly_event(v_now, '%FENCED%', p_job, p_key, p_token, NULL, 'submit refused');
         RETURN QUERY SELECT 'fenced', v_now, NULL::text, NULL::bigint;
         RETURN;
       END IF;
       IF v_until = '%RELEASED%' THEN
         v_until := NULL;
       END IF;
       IF v_until IS NULL OR v_until COLLATE \"C\" < p_min_until THEN
         RETURN QUERY SELECT 'lease_ending', v_now, v_until, NULL::bigint;
         RETURN;
       END IF;
       IF p_state <> 'claimed'
          OR EXISTS (SELECT 1 FROM exactly_approvals WHERE effect_key = p_key) THEN
         RETURN QUERY SELECT 'fallback', v_now, NULL::text, NULL::bigint;
         RETURN;
       END IF;
       UPDATE effect_ledger SET state = 'submitted', job_key = p_job, run_id = p_run,
         fencing_token = p_token, attempt = p_attempt, updated_at = v_now,
         version = coalesce(version, 0) + 1, sender = p_sender, sender_until = v_until
       WHERE effect_key = p_key AND state = p_state AND coalesce(version, 0) = p_version
         AND updated_at = p_updated
       RETURNING coalesce(version, 0) INTO v_version;
       IF NOT FOUND THEN
         RETURN QUERY SELECT 'fallback', v_now, NULL::text, NULL::bigint;
         RETURN;
       END IF;
       RETURN QUERY SELECT 'won', v_now, v_until, v_version;
     END $$",
    // `Store::finish_effect_on` on a row seen `submitted`: the compare-and-set and its event, or
    // `fallback` (a retry meeting its own write, or a fenced write: the transaction decides).
    "CREATE OR REPLACE FUNCTION exactly_finish_effect(p_key text, p_job text, p_token bigint,
       p_state text, p_answer text, p_raw bytea, p_total bigint, p_seen_state text,
       p_seen_version bigint, p_seen_updated text, p_kind text, p_detail text)
     RETURNS TABLE (o_outcome text, o_at text) LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     DECLARE
       v_now text := to_char(now() AT TIME ZONE 'UTC', %TS%);
     BEGIN
       PERFORM 1 FROM job_lease WHERE job_key = p_job FOR SHARE;
       UPDATE effect_ledger SET state = p_state, response = p_answer, updated_at = v_now,
         version = coalesce(version, 0) + 1, response_raw = p_raw, response_total = p_total
       WHERE effect_key = p_key AND fencing_token = p_token AND state = p_seen_state
         AND coalesce(version, 0) = p_seen_version AND updated_at = p_seen_updated
         AND p_token = (SELECT max(fencing_token) FROM job_lease WHERE job_key = p_job);
       IF NOT FOUND THEN
         RETURN QUERY SELECT 'fallback', v_now;
         RETURN;
       END IF;
       PERFORM exactly_event(v_now, p_kind, p_job, p_key, p_token, NULL, p_detail);
       RETURN QUERY SELECT 'ok', v_now;
     END $$",
    // `claim_lease_tx`: insert, steal an expired lease (past the skew margin), or say who
    // holds it.
    "CREATE OR REPLACE FUNCTION exactly_claim_lease(p_job text, p_owner text, p_until text,
       p_skew_ms bigint)
     RETURNS TABLE (o_won boolean, o_token bigint, o_owner text, o_until text, o_at text)
     LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
     DECLARE
       v_now text := to_char(now() AT TIME ZONE 'UTC', %TS%);
       v_steal_before text :=
         to_char((now() - p_skew_ms * interval '1 millisecond') AT TIME ZONE 'UTC', %TS%);
       v_owner text;
       v_token bigint;
       v_until text;
       v_tries integer := 0;
       -- A new job's first token: above the last failover's raise (`pg_timeline`).
       v_first bigint := coalesce((SELECT max(value) FROM exactly_meta
                                   WHERE name = 'token_floor'), 0) + 1;
     BEGIN
       LOOP
         -- Under a stricter isolation the row another claim inserted stays out of sight: the
         -- caller runs the claim again, as after a serialization failure.
         v_tries := v_tries + 1;
         IF v_tries > 3 THEN
           RAISE EXCEPTION 'lease of % claimed concurrently', p_job
             USING ERRCODE = 'serialization_failure';
         END IF;
         SELECT owner, fencing_token, lease_until INTO v_owner, v_token, v_until
         FROM job_lease WHERE job_key = p_job FOR UPDATE;
         IF NOT FOUND THEN
           INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
           VALUES (p_job, p_owner, v_first, p_until, v_now) ON CONFLICT (job_key) DO NOTHING;
           IF FOUND THEN
             RETURN QUERY SELECT true, v_first, NULL::text, NULL::text, v_now;
             RETURN;
           END IF;
           -- Another claim inserted it first: its row is there to lock now.
           CONTINUE;
         END IF;
         IF v_until COLLATE \"C\" >= v_steal_before THEN
           RETURN QUERY SELECT false, v_token, v_owner, v_until, v_now;
           RETURN;
         END IF;
         UPDATE job_lease SET owner = p_owner, fencing_token = v_token + 1, lease_until = p_until
         WHERE job_key = p_job;
         IF v_until <> '%RELEASED%' THEN
           PERFORM exactly_event(v_now, '%STOLEN%', p_job, NULL, v_token + 1, p_owner,
             format('from %s (token %s, lease until %s)', v_owner, v_token, v_until));
           RETURN QUERY SELECT true, v_token + 1, v_owner, NULL::text, v_now;
           RETURN;
         END IF;
         RETURN QUERY SELECT true, v_token + 1, NULL::text, NULL::text, v_now;
         RETURN;
       END LOOP;
     END $$",
    // `set_lease_until`: a renewal or release under our token, else a fenced write.
    "CREATE OR REPLACE FUNCTION exactly_set_lease(p_job text, p_token bigint, p_until text,
       p_only_held boolean, p_what text)
     RETURNS TABLE (o_ok boolean, o_at text) LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     DECLARE
       v_now text := to_char(now() AT TIME ZONE 'UTC', %TS%);
     BEGIN
       UPDATE job_lease SET lease_until = p_until WHERE job_key = p_job AND fencing_token = p_token
         AND (NOT p_only_held OR lease_until <> '%RELEASED%');
       IF FOUND THEN
         RETURN QUERY SELECT true, v_now;
         RETURN;
       END IF;
       PERFORM exactly_event(v_now, '%FENCED%', p_job, NULL, p_token, NULL, p_what);
       RETURN QUERY SELECT false, v_now;
     END $$",
    // `Store::renew_leases`: for each (job, token, until) in order, 1 renewed, 0 fenced (a
    // newer token holds the job: recorded), NULL released meanwhile.
    "CREATE OR REPLACE FUNCTION exactly_renew_leases(p_jobs text[], p_tokens bigint[],
       p_untils text[])
     RETURNS TABLE (o_result integer, o_at text) LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     DECLARE
       v_now text := to_char(now() AT TIME ZONE 'UTC', %TS%);
       v_renewed bigint[];
     BEGIN
       WITH v AS (
         SELECT * FROM unnest(p_jobs, p_tokens, p_untils) WITH ORDINALITY AS v (job, \
             token, until, i)
       ), u AS (
         UPDATE job_lease SET lease_until = v.until FROM v
         WHERE job_lease.job_key = v.job AND job_lease.fencing_token = v.token
           AND job_lease.lease_until <> '%RELEASED%'
         RETURNING job_lease.job_key, job_lease.fencing_token
       )
       SELECT coalesce(array_agg(v.i), '{}') INTO v_renewed FROM v
       WHERE EXISTS (SELECT 1 FROM u WHERE u.job_key = v.job AND u.fencing_token = v.token);
       FOR i IN 1 .. coalesce(array_length(p_jobs, 1), 0) LOOP
         IF i = ANY (v_renewed) THEN
           RETURN QUERY SELECT 1, v_now;
         ELSIF EXISTS (SELECT 1 FROM job_lease WHERE job_key = p_jobs[i]
                       AND fencing_token > p_tokens[i]) THEN
           PERFORM exactly_event(v_now, '%FENCED%', p_jobs[i], NULL, p_tokens[i], NULL,
             'lease renew refused');
           RETURN QUERY SELECT 0, v_now;
         ELSE
           RETURN QUERY SELECT NULL::integer, v_now;
         END IF;
       END LOOP;
     END $$",
];

use super::*;

/// The `pg` part: the write ratio, the claim race and the dashboard's poll against the
/// PostgreSQL database at `url`, each in fresh schemas of its own that it drops.
pub(crate) fn pg(plan: &Plan, url: &str, out: &mut Map<String, Value>) -> Res<()> {
    let mut c = pg_connect(url)?;
    let setting = |c: &mut postgres::Client, name: &str| -> Res<String> {
        Ok(c.query_one("SELECT current_setting($1)", &[&name])?.get(0))
    };
    out.insert(
        "pg_server".into(),
        json!({
            "url": redact(url),
            "version": setting(&mut c, "server_version")?,
            "synchronous_commit": setting(&mut c, "synchronous_commit")?,
            "fsync": setting(&mut c, "fsync")?,
        }),
    );
    drop(c);
    eprintln!("bench: pg_write_ratio …");
    pg_write_ratio(plan, url, out)?;
    eprintln!("bench: pg_claim_contention …");
    let schema = PgSchema::create(url, "claims")?;
    drop(Store::open(&schema.url)?);
    let figures = race(plan, &schema.url, || {
        let row = pg_connect(&schema.url)?.query_one(
            "SELECT fencing_token FROM job_lease WHERE job_key = 'race'",
            &[],
        )?;
        Ok(row.get(0))
    })?;
    drop(schema);
    let double = figures["double_grants"].as_u64().unwrap_or(u64::MAX);
    if double != 0 {
        eprintln!("bench: WARNING: {double} double grants on PostgreSQL (must be 0)");
    }
    out.insert("pg_claims_per_s".into(), figures["claims_per_s"].clone());
    eprintln!("bench: pg_claims_per_s_library …");
    pg_library_claims(plan, url, out)?;
    out.insert("pg_double_grants".into(), json!(double));
    out.insert("pg_claim_contention".into(), figures);
    eprintln!("bench: pg poll fixtures …");
    // One fixture at a time: the small one is dropped before the large one is filled.
    let mut ms = [0.0; 2];
    for (m, &n) in ms.iter_mut().zip(&plan.poll_sizes) {
        let schema = pg_fixture(plan, url, n)?;
        *m = poll_ms(plan, &schema.url)?;
    }
    out.insert("pg_poll_ms_10k".into(), json!(round(ms[0], 3)));
    out.insert("pg_poll_ms_1m".into(), json!(round(ms[1], 3)));
    out.insert("pg_poll_ratio".into(), json!(round(ms[1] / ms[0], 3)));
    out.insert(
        "pg_poll_sizes".into(),
        json!({"small": plan.poll_sizes[0], "large": plan.poll_sizes[1],
               "jobs": plan.poll_jobs, "runs": plan.poll_runs}),
    );
    Ok(())
}

/// A schema of its own in the bench's PostgreSQL database, dropped (CASCADE) with this value.
pub(crate) struct PgSchema {
    name: String,
    /// The URL with this schema as its search_path: what `--db` and `Store::open` are given.
    pub(crate) url: String,
    base: String,
}

impl PgSchema {
    pub(crate) fn create(base: &str, what: &str) -> Res<PgSchema> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos();
        let name = format!(
            "exactly_bench_{what}_{}_{}_{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        pg_connect(base)?
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .map_err(|e| format!("CREATE SCHEMA {name} in {}: {e}", redact(base)))?;
        Ok(PgSchema {
            url: with_search_path(base, &name)?,
            name,
            base: base.to_string(),
        })
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        // The store's pooled connections to the schema sit idle (no transaction, no lock); a
        // claimer left running may not: wait a while for its lock, then leave the schema with a
        // warning rather than hang.
        let sql = format!(
            "SET lock_timeout = '20s'; DROP SCHEMA IF EXISTS {} CASCADE",
            self.name
        );
        if let Err(e) = pg_connect(&self.base).and_then(|mut c| Ok(c.batch_execute(&sql)?)) {
            eprintln!("bench: WARNING: schema {} not dropped: {e}", self.name);
        }
    }
}

pub(crate) fn pg_connect(url: &str) -> Res<postgres::Client> {
    postgres::Client::connect(url, postgres::NoTls)
        .map_err(|e| format!("connecting to {}: {e}", redact(url)).into())
}

/// `url` with `options=-csearch_path=SCHEMA` (URL-encoded) added to its query.
pub(crate) fn with_search_path(url: &str, schema: &str) -> Res<String> {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    if query.split('&').any(|kv| kv.starts_with("options=")) {
        return Err(format!(
            "EXACTLY_BENCH_PG {} has options= already: the bench adds its own (search_path)",
            redact(url)
        )
        .into());
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    Ok(format!("{url}{sep}options=-csearch_path%3D{schema}"))
}

/// The URL with its password hidden, for messages and the summary.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if s + 3 < at => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

/// `write_ratio` on PostgreSQL: effect lifecycles through the library (a fresh schema each
/// round) against bare single-row commits on the same server, rounds interleaved.
pub(crate) fn pg_write_ratio(plan: &Plan, url: &str, out: &mut Map<String, Value>) -> Res<()> {
    let bare_schema = PgSchema::create(url, "bare")?;
    let mut c = pg_connect(&bare_schema.url)?;
    let (mut bare, mut life) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        bare.push(pg_bare_commits(&mut c, plan.write_secs / 3.0)?);
        let schema = PgSchema::create(url, "ledger")?;
        let (mut store, ctx) = ledger_with_lease(&schema.url)?;
        life.push(lifecycles_for(&mut store, &ctx, plan.write_secs / 3.0)?);
    }
    let bare_s = median(&mut bare);
    let life_s = median(&mut life);
    out.insert("pg_write_ratio".into(), json!(round(life_s / bare_s, 3)));
    out.insert("pg_lifecycles_per_s".into(), json!(round(life_s, 0)));
    out.insert("pg_bare_commits_per_s".into(), json!(round(bare_s, 0)));
    pg_write_counts(plan, url, out)
}

/// The server's marks around a measured stretch: its committed transactions (this database's,
/// whoever else uses it), its WAL position and its full-page images (the whole cluster's).
struct Marks {
    xacts: i64,
    lsn: i64,
    fpi: i64,
}

fn marks(c: &mut postgres::Client) -> Res<Marks> {
    // A fresh reading, not the snapshot of this session's last one.
    c.batch_execute("SELECT pg_stat_clear_snapshot()")?;
    let r = c.query_one(
        "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
                (pg_current_wal_lsn() - '0/0')::bigint, (SELECT wal_fpi FROM pg_stat_wal)",
        &[],
    )?;
    Ok(Marks {
        xacts: r.get(0),
        lsn: r.get(1),
        fpi: r.get(2),
    })
}

/// WAL records and bytes between `from` and `to` (LSNs as bytes) of the transactions that
/// touched `schema`'s relations (each of its relations written by this bench alone), and any
/// record of a page of them: what the measured writes cost, without the rest of the cluster's
/// WAL. Needs the `pg_walinspect` extension in the database (PostgreSQL 15+; made by a
/// superuser): None without it.
fn own_wal(c: &mut postgres::Client, schema: &str, from: i64, to: i64) -> Res<Option<(i64, i64)>> {
    let installed = c
        .query_opt(
            "SELECT 1 FROM pg_extension WHERE extname = 'pg_walinspect'",
            &[],
        )?
        .is_some();
    if !installed {
        return Ok(None);
    }
    let r = c.query_one(
        "WITH rel AS (
           SELECT '/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/'
                  || pg_relation_filenode(oid) || ' ' AS tag
           FROM pg_class WHERE relnamespace = $1::text::regnamespace AND pg_relation_filenode(oid) > 0),
         r AS (SELECT * FROM pg_get_wal_records_info(
                 ('0/0'::pg_lsn + $2::text::numeric), ('0/0'::pg_lsn + $3::text::numeric))),
         touched AS (SELECT r.* FROM r WHERE EXISTS
                       (SELECT 1 FROM rel WHERE strpos(r.block_ref || ' ', rel.tag) > 0)),
         ours AS (SELECT * FROM r WHERE xid <> 0 AND xid IN (SELECT xid FROM touched)
                  UNION SELECT * FROM touched)
         SELECT count(*)::bigint, coalesce(sum(record_length), 0)::bigint FROM ours",
        &[&schema, &from.to_string(), &to.to_string()],
    )?;
    Ok(Some((r.get(0), r.get(1))))
}

/// Per lifecycle (as `pg_write_ratio` runs them) and per bare commit, what does not depend on
/// the machine's load: round trips, statements, prepares and commits on the wire (counted by a
/// relay between client and server, `tests/support/pg_wire.rs`), and the server's own count of
/// transactions, its WAL bytes and full-page images over the same stretch. The server's counts
/// include whatever else ran on it meanwhile (transactions: on this database; WAL: anywhere,
/// `*_all`); the WAL bytes reported are the measured writes' own where `pg_walinspect` tells
/// them apart ([`own_wal`], `wal_own` says which).
pub(crate) fn pg_write_counts(plan: &Plan, url: &str, out: &mut Map<String, Value>) -> Res<()> {
    let n: u64 = if plan.smoke { 50 } else { 1_000 };
    // Backends report their transactions at most every ~10 s once idle (PostgreSQL 15).
    let flush = Duration::from_secs(if plan.smoke { 1 } else { 11 });
    let mut stats = pg_connect(url)?;
    let per = |v: i64| json!(round(v as f64 / n as f64, 2));
    let wire = |c: pg_wire::Counts| {
        json!({"round_trips": round(c.round_trips as f64 / n as f64, 2),
               "statements": round(c.statements as f64 / n as f64, 2),
               "parses": round(c.parses as f64 / n as f64, 2),
               "commits": round(c.commits as f64 / n as f64, 2),
               "rollbacks": round(c.rollbacks as f64 / n as f64, 2)})
    };

    let schema = PgSchema::create(url, "counts")?;
    let relay = pg_wire::Relay::start(&schema.url)?;
    let (mut store, ctx) = ledger_with_lease(&relay.url)?;
    // The statements prepared and the pages allocated first, as in a ledger long in use.
    for i in 0..20 {
        lifecycle(&mut store, &ctx, i)?;
    }
    std::thread::sleep(flush);
    let (before, w0) = (marks(&mut stats)?, relay.counts());
    for i in 20..20 + n {
        lifecycle(&mut store, &ctx, i)?;
    }
    let (w, wal) = (relay.counts() - w0, marks(&mut stats)?);
    std::thread::sleep(flush);
    let after = marks(&mut stats)?;
    let life = (
        w,
        wal.lsn - before.lsn,
        wal.fpi - before.fpi,
        after.xacts - before.xacts,
    );
    let life_own = own_wal(&mut stats, &schema.name, before.lsn, wal.lsn)?;
    drop(store);

    let bare_schema = PgSchema::create(url, "counts_bare")?;
    let bare_relay = pg_wire::Relay::start(&bare_schema.url)?;
    let mut c = pg_connect(&bare_relay.url)?;
    pg_bare_table(&mut c)?;
    let insert = c.prepare("INSERT INTO t (k, v) VALUES ($1, $2)")?;
    for i in 0..20u64 {
        c.execute(
            &insert,
            &[&format!("w{i:031x}"), &"2026-11-30T00:00:00.000Z"],
        )?;
    }
    std::thread::sleep(flush);
    let (before, w0) = (marks(&mut stats)?, bare_relay.counts());
    for i in 0..n {
        c.execute(
            &insert,
            &[&format!("{i:032x}"), &"2026-11-30T00:00:00.000Z"],
        )?;
    }
    let (w, wal) = (bare_relay.counts() - w0, marks(&mut stats)?);
    std::thread::sleep(flush);
    let after = marks(&mut stats)?;
    let bare = (
        w,
        wal.lsn - before.lsn,
        wal.fpi - before.fpi,
        after.xacts - before.xacts,
    );
    let bare_own = own_wal(&mut stats, &bare_schema.name, before.lsn, wal.lsn)?;

    // Our own records when they can be told apart (pg_walinspect), else the server's whole WAL
    // over the stretch.
    let own = |o: Option<(i64, i64)>, all: i64| per(o.map_or(all, |(_, bytes)| bytes));
    let records = |o: Option<(i64, i64)>| o.map(|(records, _)| per(records));
    let rt = |c: pg_wire::Counts| per(c.round_trips as i64);
    out.insert("pg_round_trips_per_lifecycle".into(), rt(life.0));
    out.insert("pg_round_trips_per_bare_commit".into(), rt(bare.0));
    out.insert("pg_xacts_per_lifecycle".into(), per(life.0.commits as i64));
    out.insert(
        "pg_xacts_per_bare_commit".into(),
        per(bare.0.commits as i64),
    );
    out.insert("pg_wal_bytes_per_lifecycle".into(), own(life_own, life.1));
    out.insert("pg_wal_bytes_per_bare_commit".into(), own(bare_own, bare.1));
    out.insert(
        "pg_write_counts".into(),
        json!({"n": n, "wal_own": life_own.is_some(),
               "lifecycle": {"wire": wire(life.0), "server_xacts": per(life.3),
                             "wal_records": records(life_own),
                             "wal_bytes_all": per(life.1), "wal_fpi_all": per(life.2)},
               "bare_commit": {"wire": wire(bare.0), "server_xacts": per(bare.3),
                               "wal_records": records(bare_own),
                               "wal_bytes_all": per(bare.1), "wal_fpi_all": per(bare.2)}}),
    );
    Ok(())
}

/// Won lease claims per second from one long-lived process: one store, a new job each claim
/// (each an insert of its lease row, as a scheduler's first claim of a job is), through
/// `exactly::lease::claim`. Each claim is a durable commit, so the server's commit rate bounds
/// it: bare commits are measured in rounds interleaved with it, and the ratio kept beside it.
pub(crate) fn pg_library_claims(plan: &Plan, url: &str, out: &mut Map<String, Value>) -> Res<()> {
    let schema = PgSchema::create(url, "libclaims")?;
    let bare_schema = PgSchema::create(url, "libclaims_bare")?;
    let mut c = pg_connect(&bare_schema.url)?;
    let mut store = Store::open(&schema.url)?;
    let lease_for = Duration::from_secs(60);
    let secs = plan.claim_secs / 3.0;
    let (mut bare, mut claims) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    for _ in 0..3 {
        bare.push(pg_bare_commits(&mut c, secs)?);
        let start = Instant::now();
        let first = n;
        while start.elapsed().as_secs_f64() < secs {
            match lease::claim(&mut store, &format!("job-{n}").into(), "bench", lease_for)? {
                lease::Claim::Won { .. } => n += 1,
                other => return Err(format!("claim {n} of a new job: {other:?}").into()),
            }
        }
        claims.push((n - first) as f64 / start.elapsed().as_secs_f64());
    }
    let (claims, bare) = (median(&mut claims), median(&mut bare));
    out.insert("pg_claims_per_s_library".into(), json!(round(claims, 0)));
    out.insert(
        "pg_claims_library".into(),
        json!({"claims_per_s": round(claims, 0), "bare_commits_per_s": round(bare, 0),
               "ratio_to_bare": round(claims / bare, 3), "threads": 1}),
    );
    Ok(())
}

/// Bare single-row commits per second on PostgreSQL: a fresh table with a unique text key, one
/// INSERT per autocommit statement over one connection, the server's synchronous_commit.
pub(crate) fn pg_bare_commits(c: &mut postgres::Client, secs: f64) -> Res<f64> {
    pg_bare_table(c)?;
    let insert = c.prepare("INSERT INTO t (k, v) VALUES ($1, $2)")?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        c.execute(
            &insert,
            &[&format!("{n:032x}"), &"2026-11-30T00:00:00.000Z"],
        )?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// The bare commits' table, made anew: a unique text key, as the ledger's.
fn pg_bare_table(c: &mut postgres::Client) -> Res<()> {
    c.batch_execute(
        "DROP TABLE IF EXISTS t;
         CREATE TABLE t (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                         k TEXT NOT NULL UNIQUE, v TEXT)",
    )?;
    Ok(())
}

/// The poll fixture of `n` effects on PostgreSQL, the same rows as [`fill`] writes on SQLite (the
/// same keys, states, times relative to now, runs, firings, events and counters), in a fresh
/// schema made by `exactly init` and filled with `INSERT … SELECT … FROM generate_series` in one
/// transaction, then vacuumed and analysed. Built anew on every run; dropped with the value.
pub(crate) fn pg_fixture(plan: &Plan, base: &str, n: u64) -> Res<PgSchema> {
    let t = Instant::now();
    let schema = PgSchema::create(base, &format!("poll{n}"))?;
    let o = Command::new(exe())
        .args(["--db", &schema.url, "init"])
        .stdin(Stdio::null())
        .output()?;
    if !o.status.success() {
        return Err(format!(
            "exactly init on PostgreSQL failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )
        .into());
    }
    let mut c = pg_connect(&schema.url)?;
    c.batch_execute(&pg_fill_sql(plan, n))?;
    // What autovacuum would do to a live ledger soon after these inserts (and would otherwise
    // start in the middle of the polls): visibility map and statistics.
    c.batch_execute("VACUUM (ANALYZE)")?;
    let events: i64 = c
        .query_one("SELECT count(*) FROM exactly_events", &[])?
        .get(0);
    eprintln!(
        "bench: built PostgreSQL fixture of {n} effects ({events} events) in {:.1?} (schema {})",
        t.elapsed(),
        schema.name
    );
    Ok(schema)
}

/// The SQL that fills a fresh schema as [`fill`] fills a SQLite file (see there for the shape).
/// Times are the server's `now()` less the same offsets, in exactly's text format.
pub(crate) fn pg_fill_sql(plan: &Plan, n: u64) -> String {
    let jobs = plan.poll_jobs;
    let runs = plan.poll_runs;
    let month_ms = 30 * 24 * 3600 * 1000i64;
    let span_ms = 3 * 24 * 3600 * 1000i64;
    let ts = |at: &str| {
        format!("to_char(({at}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')")
    };
    let ago = |ms: &str| ts(&format!("now() - ({ms}) * interval '1 millisecond'"));
    let job =
        |j: &str| format!("'job-' || lpad(({j})::text, greatest(4, length(({j})::text)), '0')");
    // `format!("{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15))`, as fill's keys.
    let x = "(i::numeric * 11400714819323198485 % 18446744073709551616)";
    let key = format!(
        "repeat('0', 16) || lpad(to_hex(floor({x} / 4294967296)::bigint), 8, '0')
           || lpad(to_hex(({x} % 4294967296)::bigint), 8, '0')"
    );
    // Effect i's key, job, time and state, over the effects `series` names.
    let effects = |series: &str| {
        format!(
            "(SELECT i, {key} AS key, {job} AS job, {at} AS at,
                CASE WHEN i % 10000 <= 4 THEN 'unknown' WHEN i % 10000 <= 6 THEN 'claimed'
                     WHEN i % 10000 <= 8 THEN 'submitted' ELSE 'done' END AS state
             FROM {series} AS i)",
            job = job(&format!("i % {jobs}")),
            at = ago(&format!("({n} - i) * {month_ms} / {n}")),
        )
    };
    let all = format!("generate_series(0::bigint, {}::bigint)", n - 1);
    let per_job = (n / jobs).max(1) as i64;
    let runs_per_job = (runs / jobs).max(1) as i64;
    format!(
        "BEGIN;
         SET LOCAL synchronous_commit = off;
         INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, lease_ms, overlap,
           command, command_digest, catchup_s, source, owner, updated_at)
         SELECT {jk}, 'every 5m', 300, 60, 60000, 'coalesce', '[\"run\",\"' || j || '\"]',
           '[\"run\",\"' || j || '\"]', 60, 'bench.toml', 'bench', {now}
         FROM generate_series(0::bigint, {jobs_1}::bigint) AS j ORDER BY j;
         INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
         SELECT {jk}, 'bench', 100 + j,
           CASE WHEN j % 10 = 0 THEN {in_a_minute} ELSE '{released}' END, {month_ago}
         FROM generate_series(0::bigint, {jobs_1}::bigint) AS j ORDER BY j;
         INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
           response, created_at, updated_at, action_id, target_id, input_digest, attempt, version)
         SELECT key, job, 'run-' || i, 1, state, CASE WHEN state = 'done' THEN 'ok 200' END,
           at, at, 'send', 'customer-' || i, key, 'bench:1', 3
         FROM {all_effects} AS f ORDER BY i;
         INSERT INTO exactly_approvals (effect_key, job_key, terms_shown, state, requested_at)
         SELECT key, job, 'pay 10 EUR', 'pending', at FROM {approvals} AS f ORDER BY i;
         INSERT INTO exactly_events (at, kind, job_key, effect_key, fencing_token, detail)
         SELECT f.at, e.kind, f.job, f.key, 1, e.detail
         FROM {all_effects} AS f
         CROSS JOIN LATERAL (VALUES
           (0, CASE WHEN f.state = 'done' THEN 'effect_done' ELSE 'effect_unknown' END, 'ok 200'),
           (1, 'duplicate_suppressed', 'already done')) AS e (k, kind, detail)
         WHERE f.state IN ('done', 'unknown') AND (e.k = 0 OR f.i % 100 = 0)
         ORDER BY f.i, e.k;
         INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token,
           started_at, ended_at, outcome, duration_ms, exit_code, log)
         SELECT 'run-' || job || '-' || r, job, {scheduled}, 'bench', 100 + j, {started}, {ended},
           CASE WHEN r % 50 = 0 THEN 'failed' ELSE 'ok' END, dur,
           CASE WHEN r % 50 = 0 THEN 1 ELSE 0 END, 'done'
         FROM (SELECT r, r % {jobs} AS j, {rjob} AS job,
                 {span_ms} - r * {span_ms} / {runs} AS at_ms, 200 + r * 7919 % 5000 AS dur
               FROM generate_series(0::bigint, {runs_1}::bigint) AS r) AS s
         ORDER BY r;
         INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, owner, run_id,
           created_at, updated_at)
         SELECT job_key, scheduled_at, 'schedule', 'done', 'bench', run_id, scheduled_at,
           scheduled_at
         FROM exactly_runs ORDER BY rowid;
         INSERT INTO exactly_counters (kind, job_key, n)
         SELECT c.kind, {jk}, c.n
         FROM generate_series(0::bigint, {jobs_1}::bigint) AS j
         CROSS JOIN (VALUES ('effect_done', {per_job}), ('duplicate_suppressed', {dups}),
           ('run_ended:ok', {runs_per_job}), ('run_ended:failed', {failed})) AS c (kind, n)
         ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + excluded.n;
         COMMIT;",
        jk = job("j"),
        jobs_1 = jobs - 1,
        now = ago("0"),
        in_a_minute = ts("now() + interval '1 minute'"),
        released = lease::RELEASED,
        month_ago = ago(&month_ms.to_string()),
        all_effects = effects(&all),
        approvals = effects(&format!(
            "generate_series(9::bigint, {}::bigint, 10000)",
            n - 1
        )),
        scheduled = ago("at_ms"),
        started = ago("at_ms - 40"),
        ended = ago("at_ms - 40 - dur"),
        rjob = job(&format!("r % {jobs}")),
        runs_1 = runs - 1,
        dups = per_job / 100,
        failed = runs_per_job / 50,
    )
}

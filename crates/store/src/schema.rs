//! The schema: every table, index and trigger we own or adopt, and its version. Opening a
//! database against it is `prepare.rs`.

/// Stored in `PRAGMA user_version`. A database with a higher number is refused.
pub const SCHEMA_VERSION: i64 = 10;

/// Every table we own or adopt, with the columns that identify it as ours (a table of the same
/// name without them belongs to something else) and the columns we add when adopting.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    pub(crate) create: &'static str,
    pub(super) required: &'static [&'static str],
    pub(crate) added: &'static [(&'static str, &'static str)],
}

pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "job_lease",
        create: "CREATE TABLE job_lease (job_key TEXT PRIMARY KEY, owner TEXT NOT NULL,
            fencing_token INTEGER NOT NULL, lease_until TEXT NOT NULL, created_at TEXT NOT NULL)",
        required: &["job_key", "owner", "fencing_token", "lease_until"],
        added: &[],
    },
    Table {
        name: "effect_ledger",
        create: "CREATE TABLE effect_ledger (effect_key TEXT PRIMARY KEY, job_key TEXT NOT NULL,
            run_id TEXT NOT NULL, fencing_token INTEGER, state TEXT NOT NULL,
            terms_shown TEXT, response TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL)",
        required: &["effect_key", "job_key", "state"],
        // The seed's columns come first; these are ours, all nullable so the seed's own INSERT
        // statements from other programs keep working.
        added: &[
            ("fencing_token", "INTEGER"),
            ("action_id", "TEXT"),
            ("target_id", "TEXT"),
            ("input_digest", "TEXT"),
            ("observe_cmd", "TEXT"),
            ("attempt", "TEXT"),
            ("verdict", "TEXT"),
            ("verdict_at", "TEXT"),
            ("resolved_by", "TEXT"),
            ("resolved_at", "TEXT"),
            ("resolution_note", "TEXT"),
            ("evidence", "TEXT"),
            // The command's stdout as bytes (up to the response cap), and how many bytes it
            // wrote in all: more than kept means the response was cut.
            ("response_raw", "BLOB"),
            ("response_total", "INTEGER"),
            // Bumped by every transition we make, so a compare-and-set can name the row version
            // it read. NULL (a row written with the seed's SQL) counts as 0.
            ("version", "INTEGER"),
            // Who moved the row to `submitted` (`sender::Identity`: host identity, pid and
            // start time, process group) and until when its lease let it send, on the
            // database's clock (moved on as the lease is renewed): a retry judges the send over
            // by these, whatever later happens to the job's lease.
            ("sender", "TEXT"),
            ("sender_until", "TEXT"),
            // Schema 9: each input's name with a short digest of its value, and whether the
            // value looked like the attempt (the run id, a time near it) or the firing's slot
            // (`key::input_fields`): `exactly doctor` tells a key made from the run from one
            // made from the facts. NULL: written before version 9 or with the seed's SQL.
            ("input_fields", "TEXT"),
        ],
    },
    Table {
        name: "exactly_approvals",
        create:
            "CREATE TABLE exactly_approvals (effect_key TEXT PRIMARY KEY, job_key TEXT NOT NULL,
            terms_shown TEXT, state TEXT NOT NULL, requested_at TEXT NOT NULL, decided_by TEXT,
            decided_at TEXT, note TEXT, consumed_at TEXT, consumed_token INTEGER)",
        required: &["effect_key", "job_key", "state", "requested_at"],
        added: &[],
    },
    Table {
        name: "exactly_events",
        create:
            // Without AUTOINCREMENT (from 2026-12-07; older files keep theirs): it wrote the
            // `sqlite_sequence` page in every commit with an event, a page of each effect's
            // `done`. An id is still never handed out twice: new rows take the highest id + 1,
            // and retention never removes the newest event (`retention.rs`).
            "CREATE TABLE exactly_events (id INTEGER PRIMARY KEY, at TEXT NOT NULL,
            kind TEXT NOT NULL, job_key TEXT, effect_key TEXT, fencing_token INTEGER, actor TEXT,
            detail TEXT)",
        required: &["id", "at", "kind"],
        added: &[],
    },
    Table {
        name: "exactly_counters",
        create: "CREATE TABLE exactly_counters (kind TEXT NOT NULL, job_key TEXT NOT NULL,
            n INTEGER NOT NULL, PRIMARY KEY (kind, job_key))",
        required: &["kind", "job_key", "n"],
        added: &[],
    },
    Table {
        name: "exactly_jobs",
        create: "CREATE TABLE exactly_jobs (job_key TEXT PRIMARY KEY, schedule TEXT, timezone TEXT,
            interval_s INTEGER, lease_s INTEGER, overlap TEXT, queue_cap INTEGER,
            command_digest TEXT, command TEXT, observe_cmd TEXT, catchup_s INTEGER,
            paused INTEGER NOT NULL DEFAULT 0, pause_note TEXT, paused_by TEXT, paused_at TEXT,
            retired INTEGER NOT NULL DEFAULT 0, source TEXT, owner TEXT, updated_at TEXT NOT NULL)",
        required: &["job_key", "interval_s", "lease_s", "overlap"],
        added: &[
            ("lease_ms", "INTEGER"),
            ("timeout_ms", "INTEGER"),
            ("observe_timeout_ms", "INTEGER"),
            // A cron job's daylight-saving policy (`dst_repeated`, `dst_skipped`); NULL: the
            // defaults, once and next (also for a job registered before version 6).
            ("dst_repeated", "TEXT"),
            ("dst_skipped", "TEXT"),
            // What decides what fires, digested: the newest registration wins (schema 6).
            ("definition_digest", "TEXT"),
            // The live scheduler whose different definition the newest registration replaced.
            ("conflict_owner", "TEXT"),
            ("conflict_source", "TEXT"),
            // The jobs file's `keep_runs`: newest runs kept per job (schema 6).
            ("keep_runs", "INTEGER"),
            // The jobs file's `far_side` (`dedupes` | `fences`): what the far side is declared
            // to do with the effect key or the token (schema 9). NULL: not declared.
            ("far_side", "TEXT"),
        ],
    },
    Table {
        name: "exactly_runs",
        create: "CREATE TABLE exactly_runs (run_id TEXT PRIMARY KEY, job_key TEXT NOT NULL,
            scheduled_at TEXT NOT NULL, owner TEXT NOT NULL, fencing_token INTEGER NOT NULL,
            started_at TEXT NOT NULL, ended_at TEXT, outcome TEXT, duration_ms INTEGER,
            exit_code INTEGER, log TEXT)",
        required: &["run_id", "job_key", "started_at", "duration_ms"],
        // Schema 8: `duration_ms` is the command's own (its start to the run's end); the
        // scheduler's start lag (recorded start to the command's start) and the longest the
        // run's lease went without a renewal are their own figures. NULL: not measured (a run
        // whose command never started, or one recorded before version 8).
        added: &[("start_lag_ms", "INTEGER"), ("renewal_gap_ms", "INTEGER")],
    },
    Table {
        name: "exactly_firings",
        create: "CREATE TABLE exactly_firings (job_key TEXT NOT NULL, scheduled_at TEXT NOT NULL,
            kind TEXT NOT NULL, state TEXT NOT NULL, owner TEXT, run_id TEXT,
            created_at TEXT NOT NULL, updated_at TEXT NOT NULL, detail TEXT,
            PRIMARY KEY (job_key, scheduled_at))",
        required: &["job_key", "scheduled_at", "state"],
        added: &[],
    },
    // Each `exactly run` records itself and beats every 2 s, so a reader can tell a dead
    // scheduler from an idle one (new in schema version 2).
    Table {
        name: "exactly_schedulers",
        create: "CREATE TABLE exactly_schedulers (owner TEXT PRIMARY KEY, host TEXT NOT NULL,
            pid INTEGER NOT NULL, started_at TEXT NOT NULL, heartbeat_at TEXT NOT NULL,
            ended_at TEXT, source TEXT)",
        required: &["owner", "heartbeat_at"],
        // The machine behind `host` (boot id and pid namespace): two schedulers that share a
        // host name on two machines are told apart, and shown (schema version 5).
        added: &[("host_id", "TEXT")],
    },
    // Each hold of a job's lease claimed outside a scheduler (`exactly lease claim`, the
    // library): the lease it asked for, whether its holder renewed it, and when it let go, so
    // `status` can tell a holder that outlasts a lease nobody renews (schema version 8).
    Table {
        name: "exactly_holds",
        create: "CREATE TABLE exactly_holds (job_key TEXT NOT NULL, fencing_token INTEGER NOT NULL,
            lease_ms INTEGER, claimed_at TEXT NOT NULL, renewals INTEGER NOT NULL DEFAULT 0,
            released_at TEXT, PRIMARY KEY (job_key, fencing_token))",
        required: &["job_key", "fencing_token", "claimed_at"],
        added: &[],
    },
    // Each `exactly chaos` run against this database's name (`--db`, `$EXACTLY_DB`, the
    // default): when, which scenarios, how many iterations, and what it found, so `exactly
    // doctor` can say when the kill test last ran (schema version 9).
    Table {
        name: "exactly_chaos_runs",
        create: "CREATE TABLE exactly_chaos_runs (id INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL, scenarios TEXT NOT NULL, iterations INTEGER NOT NULL,
            duplicates INTEGER NOT NULL, lost INTEGER NOT NULL, passed INTEGER NOT NULL)",
        required: &["id", "at", "scenarios"],
        added: &[],
    },
];

/// The tables a database must hold for a read command to call it exactly's: those of schema
/// version 1. Later tables may be missing (a database not yet opened by a newer writer); the
/// readers treat them as empty.
pub(crate) const CORE_TABLES: &[&str] = &[
    "job_lease",
    "effect_ledger",
    "exactly_approvals",
    "exactly_events",
    "exactly_counters",
    "exactly_jobs",
    "exactly_runs",
    "exactly_firings",
];

/// Indexes of earlier versions that a newer one replaced: each costs every write to its table.
pub(super) const DROPPED_INDEXES: &[&str] = &[
    // Replaced by exactly_firings_by_state (schema version 3).
    "DROP INDEX IF EXISTS exactly_firings_state",
    // Replaced by effect_ledger_open (schema version 4): they held every done row, so each
    // effect's finish rewrote two index pages that no reader of done rows needed.
    "DROP INDEX IF EXISTS effect_ledger_state",
    "DROP INDEX IF EXISTS effect_ledger_job",
    // Retention walks old events by id instead (schema version 4).
    "DROP INDEX IF EXISTS exactly_events_at",
    // Replaced by exactly_events_windowed (schema version 4): it held every event.
    "DROP INDEX IF EXISTS exactly_events_kind_at",
];

/// Indexes whose definition changed, with the schema version that changed it: a database of an
/// older version has the old one dropped before `INDEXES` makes the new one.
pub(super) const REDEFINED_INDEXES: &[(i64, &str)] = &[
    // Its term, `state IN (…three…)`, became `open_term!`'s `OR`s (schema version 10).
    (10, "DROP INDEX IF EXISTS effect_ledger_open"),
];

pub(crate) const INDEXES: &[&str] = &[
    // Only the open rows: what the dashboard, the in-flight checks and the per-job lists look
    // for. A finished effect leaves it, so the index stays as small as the open work and a
    // lifecycle writes one index page less at its start and two less at its end. A query uses
    // it only when it repeats its term (`open_term!`) exactly (SQLite's rule for partial
    // indexes); the store's plan test checks each one does.
    concat!(
        "CREATE INDEX IF NOT EXISTS effect_ledger_open ON effect_ledger (state, job_key, \
         updated_at) WHERE ",
        open_term!()
    ),
    // The last-24h counts of the two kinds the dashboard shows by window; other events (an
    // effect's end, a run's) stay out of it. Queries repeat the term (see effect_ledger_open).
    "CREATE INDEX IF NOT EXISTS exactly_events_windowed ON exactly_events (kind, at)
       WHERE kind IN ('duplicate_suppressed', 'fenced_write')",
    // The last day's host-name clashes (the dashboard's and status's warning): rare rows.
    "CREATE INDEX IF NOT EXISTS exactly_events_host_clash ON exactly_events (at)
       WHERE kind = 'host_clash'",
    "CREATE INDEX IF NOT EXISTS exactly_events_effect ON exactly_events (effect_key, id)",
    "CREATE INDEX IF NOT EXISTS exactly_events_job ON exactly_events (job_key, id)",
    "CREATE INDEX IF NOT EXISTS exactly_approvals_state ON exactly_approvals (state, requested_at)",
    "CREATE INDEX IF NOT EXISTS exactly_runs_job ON exactly_runs (job_key, started_at)",
    // State first: a job's firings in one state are still one range, and the few firings
    // waiting or stuck across all jobs are one short range too (the dashboard's poll).
    "CREATE INDEX IF NOT EXISTS exactly_firings_by_state ON exactly_firings (state, \
     job_key, scheduled_at)",
    // Retention deletes by age.
    "CREATE INDEX IF NOT EXISTS exactly_runs_started ON exactly_runs (started_at)",
    "CREATE INDEX IF NOT EXISTS exactly_firings_created ON exactly_firings (created_at)",
];

/// The all-time count of runs per job and outcome lives in `exactly_counters` (kind
/// `run_ended:<outcome>`), raised by triggers so every writer of `exactly_runs` counts and
/// pruning old runs (`exactly gc`) leaves the totals equal. An outcome is counted once: when it
/// is first set.
pub(crate) const RUN_ENDED: &str = "run_ended:";

/// The counters of run durations: `run_duration:le:<ms>` for the smallest bucket of
/// [`super::rows::RUN_BUCKETS_MS`] that holds the run (`le:inf` past the last), and
/// `run_duration:sum_ms`. Kept per bucket, not cumulative: a run raises one row.
pub(crate) const RUN_DURATION: &str = "run_duration:";

/// The bucket word of a duration column, as SQL (the same on both databases).
macro_rules! duration_bucket {
    ($col:literal) => {
        concat!(
            "CASE WHEN ",
            $col,
            " <= 100 THEN '100' WHEN ",
            $col,
            " <= 500 THEN '500' WHEN ",
            $col,
            " <= 1000 THEN '1000' WHEN ",
            $col,
            " <= 5000 THEN '5000' WHEN ",
            $col,
            " <= 15000 THEN '15000' WHEN ",
            $col,
            " <= 30000 THEN '30000' WHEN ",
            $col,
            " <= 60000 THEN '60000' WHEN ",
            $col,
            " <= 300000 THEN '300000' WHEN ",
            $col,
            " <= 900000 THEN '900000' WHEN ",
            $col,
            " <= 1800000 THEN '1800000' WHEN ",
            $col,
            " <= 3600000 THEN '3600000' WHEN ",
            $col,
            " <= 7200000 THEN '7200000' WHEN ",
            $col,
            " <= 21600000 THEN '21600000' WHEN ",
            $col,
            " <= 86400000 THEN '86400000' ",
            "ELSE 'inf' END"
        )
    };
}
pub(crate) use duration_bucket;

/// What a run's end adds to the duration counters (the body of SQLite's trigger and of
/// PostgreSQL's trigger function).
macro_rules! count_duration {
    () => {
        concat!(
            "INSERT INTO exactly_counters (kind, job_key, n) VALUES ('run_duration:le:' || ",
            $crate::schema::duration_bucket!("NEW.duration_ms"),
            ", NEW.job_key, 1)
             ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + 1;
             INSERT INTO exactly_counters (kind, job_key, n) VALUES \
                 ('run_duration:sum_ms', NEW.job_key,
               CASE WHEN NEW.duration_ms > 0 THEN NEW.duration_ms ELSE 0 END)
             ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + excluded.n;"
        )
    };
}
pub(crate) use count_duration;

/// Runs ended before the duration counters existed, counted once when they are created.
pub(crate) const SEED_DURATIONS: &str = concat!(
    "INSERT INTO exactly_counters (kind, job_key, n)
     SELECT kind, job_key, sum(n) FROM (
       SELECT 'run_duration:le:' || ",
    duration_bucket!("duration_ms"),
    " AS kind, job_key, 1 AS n FROM exactly_runs
         WHERE outcome IS NOT NULL AND duration_ms IS NOT NULL
       UNION ALL
       SELECT 'run_duration:sum_ms' AS kind, job_key,
         CASE WHEN duration_ms > 0 THEN duration_ms ELSE 0 END AS n FROM exactly_runs
         WHERE outcome IS NOT NULL AND duration_ms IS NOT NULL
     ) AS d WHERE true GROUP BY kind, job_key
     ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + excluded.n"
);
pub(super) const TRIGGERS: &[(&str, &str)] = &[
    (
        "exactly_runs_ended_insert",
        "CREATE TRIGGER exactly_runs_ended_insert AFTER INSERT ON exactly_runs
         WHEN NEW.outcome IS NOT NULL BEGIN
           INSERT INTO exactly_counters (kind, job_key, n) VALUES ('run_ended:' || NEW.outcome, \
               NEW.job_key, 1)
           ON CONFLICT(kind, job_key) DO UPDATE SET n = n + 1;
         END",
    ),
    (
        "exactly_runs_ended_update",
        "CREATE TRIGGER exactly_runs_ended_update AFTER UPDATE OF outcome ON exactly_runs
         WHEN OLD.outcome IS NULL AND NEW.outcome IS NOT NULL BEGIN
           INSERT INTO exactly_counters (kind, job_key, n) VALUES ('run_ended:' || NEW.outcome, \
               NEW.job_key, 1)
           ON CONFLICT(kind, job_key) DO UPDATE SET n = n + 1;
         END",
    ),
    // Deletions counted (schema version 4), so a dashboard that keeps runs and firings between
    // polls learns that rows went away (gc, another program) from one counter, not a count(*).
    (
        "exactly_runs_deleted",
        "CREATE TRIGGER exactly_runs_deleted AFTER DELETE ON exactly_runs BEGIN
           INSERT INTO exactly_counters (kind, job_key, n) VALUES ('deleted:exactly_runs', '', 1)
           ON CONFLICT(kind, job_key) DO UPDATE SET n = n + 1;
         END",
    ),
    // Run durations as all-time bucket counters (schema version 7), so the metrics'
    // histogram never goes down when `gc` or `keep_runs` prune runs.
    (
        "exactly_runs_duration_insert",
        concat!(
            "CREATE TRIGGER exactly_runs_duration_insert AFTER INSERT ON exactly_runs
             WHEN NEW.outcome IS NOT NULL AND NEW.duration_ms IS NOT NULL BEGIN ",
            count_duration!(),
            " END"
        ),
    ),
    (
        "exactly_runs_duration_update",
        concat!(
            "CREATE TRIGGER exactly_runs_duration_update AFTER UPDATE OF outcome ON exactly_runs
             WHEN OLD.outcome IS NULL AND NEW.outcome IS NOT NULL \
                 AND NEW.duration_ms IS NOT NULL BEGIN ",
            count_duration!(),
            " END"
        ),
    ),
    (
        "exactly_firings_deleted",
        "CREATE TRIGGER exactly_firings_deleted AFTER DELETE ON exactly_firings BEGIN
           INSERT INTO exactly_counters (kind, job_key, n) VALUES ('deleted:exactly_firings', '', 1)
           ON CONFLICT(kind, job_key) DO UPDATE SET n = n + 1;
         END",
    ),
];

#[cfg(test)]
mod tests {
    /// The SQL's buckets are the domain's: one `<= ms THEN 'ms'` per bound, in order.
    #[test]
    fn the_duration_buckets_in_sql_are_the_snapshots() {
        let sql = duration_bucket!("d");
        let words: Vec<i64> = sql
            .split("THEN '")
            .skip(1)
            .filter_map(|w| w.split('\'').next()?.parse().ok())
            .collect();
        assert_eq!(words, super::super::rows::RUN_BUCKETS_MS);
        for ms in super::super::rows::RUN_BUCKETS_MS {
            assert!(sql.contains(&format!("d <= {ms} THEN '{ms}'")), "{ms}");
        }
    }
}

//! Schema creation, adoption of the seed's tables, and refusal of foreign or newer databases.
use super::Store;
use crate::{Error, Result};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

/// Stored in `PRAGMA user_version`. A database with a higher number is refused.
pub const SCHEMA_VERSION: i64 = 7;

/// Every table we own or adopt, with the columns that identify it as ours (a table of the same
/// name without them belongs to something else) and the columns we add when adopting.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    pub(crate) create: &'static str,
    required: &'static [&'static str],
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
            "CREATE TABLE exactly_events (id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL,
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
        ],
    },
    Table {
        name: "exactly_runs",
        create: "CREATE TABLE exactly_runs (run_id TEXT PRIMARY KEY, job_key TEXT NOT NULL,
            scheduled_at TEXT NOT NULL, owner TEXT NOT NULL, fencing_token INTEGER NOT NULL,
            started_at TEXT NOT NULL, ended_at TEXT, outcome TEXT, duration_ms INTEGER,
            exit_code INTEGER, log TEXT)",
        required: &["run_id", "job_key", "started_at", "duration_ms"],
        added: &[],
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
const DROPPED_INDEXES: &[&str] = &[
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

pub(crate) const INDEXES: &[&str] = &[
    // Only the open rows: what the dashboard, the in-flight checks and the per-job lists look
    // for. A finished effect leaves it, so the index stays as small as the open work and a
    // lifecycle writes one index page less at its start and two less at its end. A query uses
    // it only when it repeats the term `state IN ('claimed', 'submitted', 'unknown')` exactly
    // (SQLite's rule for partial indexes); the store's plan test checks each one does.
    "CREATE INDEX IF NOT EXISTS effect_ledger_open ON effect_ledger (state, job_key, updated_at)
       WHERE state IN ('claimed', 'submitted', 'unknown')",
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
            $crate::store::schema::duration_bucket!("NEW.duration_ms"),
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
const TRIGGERS: &[(&str, &str)] = &[
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

pub(super) fn has_trigger(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// [`has_trigger`] inside a store transaction. PostgreSQL's schema is created whole, its
/// triggers included, so there the answer is yes.
pub(super) fn has_trigger_tx(tx: &super::db::Tx<'_>, name: &str) -> super::db::DbResult<bool> {
    if tx.is_pg() {
        return Ok(true);
    }
    let n = tx.one(
        "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name = ?1",
        super::db::args![name],
        |r| r.get::<i64>(0),
    )?;
    Ok(n > 0)
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({table})"))?;
    let cols = stmt
        .query_map([], |r| r.get::<_, String>(1))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(cols)
}

/// Checks the file, then creates or adopts the schema. Nothing is written to a database that is
/// refused: every check runs before the first write (WAL mode included, which rewrites the header).
pub(super) fn prepare(store: &mut Store) -> Result<()> {
    // Several processes opening a brand-new file at once: switching to WAL needs a moment of
    // exclusive access, and SQLite answers BUSY there without waiting on the busy handler.
    // Retry within the busy timeout.
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(store.busy_ms);
    loop {
        match prepare_once(store) {
            Err(Prep::Busy(e)) if std::time::Instant::now() < deadline => {
                drop(e);
                std::thread::sleep(std::time::Duration::from_millis(
                    10 + rand::random::<u64>() % 40,
                ));
            }
            Err(Prep::Busy(e)) => return Err(store.err(e.into())),
            Err(Prep::Fatal(e)) => return Err(e),
            Ok(()) => return Ok(()),
        }
    }
}

enum Prep {
    Busy(rusqlite::Error),
    Fatal(Error),
}

impl Prep {
    fn from(store: &Store, e: rusqlite::Error) -> Prep {
        match &e {
            rusqlite::Error::SqliteFailure(f, _)
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) =>
            {
                Prep::Busy(e)
            }
            _ => Prep::Fatal(store.err(e.into())),
        }
    }
}

fn prepare_once(store: &mut Store) -> std::result::Result<(), Prep> {
    let version: i64 = store
        .lite()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| Prep::from(store, e))?;
    if version > SCHEMA_VERSION {
        return Err(Prep::Fatal(super::errors::too_new(&store.path, version)));
    }
    // SQLite's schema cookie changes with every change to the schema: a database this process
    // already checked at this cookie needs no second look (a scheduler opens one per run).
    let cookie = |store: &Store| -> std::result::Result<(String, i64), Prep> {
        let c: i64 = store
            .lite()
            .query_row("PRAGMA schema_version", [], |r| r.get(0))
            .map_err(|e| Prep::from(store, e))?;
        Ok((store.path.clone(), c))
    };
    let seen = cookie(store)?;
    if version == SCHEMA_VERSION && CHECKED.lock().contains(&seen) {
        return set_pragmas(store);
    }
    check_foreign(store).map_err(Prep::Fatal)?;
    let unique = key_is_unique(store).map_err(Prep::Fatal)?;
    if version < SCHEMA_VERSION || !unique || !all_present(store).map_err(Prep::Fatal)? {
        store
            .lite()
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| Prep::from(store, e))?;
        create(store, unique)?;
    }
    set_pragmas(store)?;
    let checked = cookie(store)?;
    let mut done = CHECKED.lock();
    if !done.contains(&checked) {
        done.push(checked);
    }
    Ok(())
}

/// Databases (path, schema cookie) this process found complete and current.
static CHECKED: parking_lot::Mutex<Vec<(String, i64)>> = parking_lot::const_mutex(Vec::new());

fn set_pragmas(store: &mut Store) -> std::result::Result<(), Prep> {
    for (k, v) in [("synchronous", "FULL"), ("foreign_keys", "OFF")] {
        store
            .lite()
            .pragma_update(None, k, v)
            .map_err(|e| Prep::from(store, e))?;
    }
    Ok(())
}

fn all_present(store: &Store) -> Result<bool> {
    for t in TABLES {
        let cols = columns(store.lite(), t.name).map_err(|e| store.err(e.into()))?;
        if cols.is_empty() || t.added.iter().any(|(c, _)| !cols.iter().any(|x| x == c)) {
            return Ok(false);
        }
    }
    for (name, _) in TRIGGERS {
        if !has_trigger(store.lite(), name).map_err(|e| store.err(e.into()))? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The unique index added to an adopted `effect_ledger` that lacks one: the unique violation
/// is the ledger's guard against a second send.
const UNIQUE_KEY: &str =
    "CREATE UNIQUE INDEX IF NOT EXISTS effect_ledger_key ON effect_ledger (effect_key)";

/// Whether `effect_ledger` (if present) has a unique constraint on `effect_key` alone. Without
/// one, a duplicated key already stored is refused here, before anything is written.
fn key_is_unique(store: &Store) -> Result<bool> {
    let conn = store.lite();
    let q = || -> rusqlite::Result<Option<bool>> {
        if columns(conn, "effect_ledger")?.is_empty() {
            return Ok(None);
        }
        let mut list = conn.prepare("PRAGMA index_list(effect_ledger)")?;
        let unique: Vec<String> = list
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(4)?,
                ))
            })?
            .filter_map(|r| match r {
                Ok((name, 1, 0)) => Some(Ok(name)),
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<rusqlite::Result<_>>()?;
        for name in unique {
            let mut info = conn.prepare(&format!(
                "PRAGMA index_info(\"{}\")",
                name.replace('"', "\"\"")
            ))?;
            let cols = info
                .query_map([], |r| r.get::<_, Option<String>>(2))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            if cols == [Some("effect_key".to_string())] {
                return Ok(Some(true));
            }
        }
        Ok(Some(false))
    };
    match q().map_err(|e| store.err(e.into()))? {
        None | Some(true) => Ok(true),
        Some(false) => {
            let dup: Option<String> = conn
                .query_row(
                    "SELECT effect_key FROM effect_ledger \
                     GROUP BY effect_key HAVING count(*) > 1 LIMIT 1",
                    [],
                    |r| {
                        use rusqlite::types::ValueRef;
                        Ok(match r.get_ref(0)? {
                            ValueRef::Text(b) | ValueRef::Blob(b) => {
                                Some(String::from_utf8_lossy(b).into_owned())
                            }
                            _ => None,
                        })
                    },
                )
                .optional()
                .map_err(|e| store.err(e.into()))?
                .flatten();
            match dup {
                Some(k) => Err(Error::Store(format!(
                    "database {} has an effect_ledger without a unique effect_key, and effect key \
                     {} appears more than once; refusing to adopt it \
                     (remove the duplicate rows first)",
                    store.path,
                    crate::sanitize::inert(&k)
                ))),
                None => Ok(false),
            }
        }
    }
}

fn check_foreign(store: &Store) -> Result<()> {
    for t in TABLES {
        let cols = columns(store.lite(), t.name).map_err(|e| store.err(e.into()))?;
        if let Some(msg) = foreign(t, &cols) {
            return Err(Error::Foreign {
                message: format!("database {} {msg}", store.path),
            });
        }
    }
    Ok(())
}

/// Why `t`, found with columns `cols`, is another program's table (None: ours, or absent).
pub(crate) fn foreign(t: &Table, cols: &[String]) -> Option<String> {
    if cols.is_empty() {
        return None;
    }
    t.required
        .iter()
        .find(|c| !cols.iter().any(|x| x == *c))
        .map(|missing| {
            format!(
                "has a table {} that is not exactly's (no column {missing}); refusing to touch it",
                t.name
            )
        })
}

fn create(store: &mut Store, unique: bool) -> std::result::Result<(), Prep> {
    let result = (|| {
        let tx = store
            .lite_mut()
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        for t in TABLES {
            if columns(&tx, t.name)?.is_empty() {
                // Then fall through: the added columns are not in the seed's CREATE.
                tx.execute(t.create, [])?;
            }
            let cols = columns(&tx, t.name)?;
            for (col, ty) in t.added {
                if !cols.iter().any(|x| x == col) {
                    tx.execute(&format!("ALTER TABLE {} ADD COLUMN {col} {ty}", t.name), [])?;
                }
            }
        }
        if !unique {
            tx.execute(UNIQUE_KEY, [])?;
        }
        for ix in DROPPED_INDEXES.iter().chain(INDEXES) {
            tx.execute(ix, [])?;
        }
        if !has_trigger(&tx, TRIGGERS[0].0)? {
            // Runs ended before the counters existed are counted once, here.
            tx.execute(
                "INSERT INTO exactly_counters (kind, job_key, n)
                 SELECT 'run_ended:' || outcome, job_key, count(*) FROM exactly_runs
                 WHERE outcome IS NOT NULL GROUP BY outcome, job_key
                 ON CONFLICT(kind, job_key) DO UPDATE SET n = n + excluded.n",
                [],
            )?;
        }
        if !has_trigger(&tx, "exactly_runs_duration_insert")? {
            tx.execute(SEED_DURATIONS, [])?;
        }
        for (name, sql) in TRIGGERS {
            if !has_trigger(&tx, name)? {
                tx.execute(sql, [])?;
            }
        }
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit()
    })();
    result.map_err(|e| Prep::from(store, e))
}

/// Checks a database opened read-only: not newer than us, and holding exactly's tables (none of
/// them foreign). Writes nothing.
pub(super) fn check_read_only(store: &Store) -> Result<()> {
    let version: i64 = store
        .lite()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| store.err(e.into()))?;
    let mut missing = None;
    for t in CORE_TABLES {
        if columns(store.lite(), t)
            .map_err(|e| store.err(e.into()))?
            .is_empty()
        {
            missing = Some(*t);
            break;
        }
    }
    let path = &store.path;
    match (missing, version > SCHEMA_VERSION) {
        // Another application's file often has its own user_version: say both.
        (Some(t), true) => Err(Error::Foreign {
            message: format!(
                "database {path} is not exactly's: it has no exactly tables (no {t}), and its \
                 schema version {version} is newer than this exactly understands ({SCHEMA_VERSION})"
            ),
        }),
        (None, true) => Err(super::errors::too_new(path, version)),
        (Some(t), false) => {
            check_foreign(store)?;
            Err(Error::Store(format!(
                "database {path} has no exactly tables (no {t}); read commands never create them \
                 (exactly init does)"
            )))
        }
        (None, false) => check_foreign(store),
    }
}

/// Whether `table` exists (a read-only reader of an older database may lack a newer table).
pub(crate) fn has_table(tx: &super::db::Tx<'_>, table: &str) -> super::db::DbResult<bool> {
    if tx.is_pg() {
        return super::pg::has_table(tx, table);
    }
    let n = tx.one(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        super::db::args![table],
        |r| r.get::<i64>(0),
    )?;
    Ok(n > 0)
}

/// The schema version this database says it has.
pub(crate) fn version(tx: &super::db::Tx<'_>) -> super::db::DbResult<i64> {
    if tx.is_pg() {
        return super::pg::version(tx);
    }
    tx.one("PRAGMA user_version", &[], |r| r.get::<i64>(0))
}

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

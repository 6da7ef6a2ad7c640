//! Opening a database: creating the schema (`schema.rs` defines it), adopting the seed's tables,
//! and refusing foreign, newer or unwritable databases.
use super::schema::{
    Table, CORE_TABLES, DROPPED_INDEXES, INDEXES, REDEFINED_INDEXES, SCHEMA_VERSION,
    SEED_DURATIONS, TABLES, TRIGGERS,
};
use super::Store;
use exactly_words::{Error, Result};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

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
pub(super) const UNIQUE_KEY: &str =
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
                Some(k) => Err(Error::corrupt(format!(
                    "database {} has an effect_ledger without a unique effect_key, and effect key \
                     {} appears more than once; refusing to adopt it \
                     (remove the duplicate rows first)",
                    store.path,
                    exactly_words::sanitize::inert(&k)
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
        // Read in this transaction: another process may have upgraded the file meanwhile.
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        for (since, drop) in REDEFINED_INDEXES {
            if version < *since {
                tx.execute(drop, [])?;
            }
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
        exactly_words::fault::point(exactly_words::fault::Point::SchemaCreate);
        tx.commit()
    })();
    result.map_err(|e| Prep::from(store, e))
}

/// How long a reader looks again at a database with no tables at all: one another process is
/// creating has none until its creating transaction commits, a few milliseconds later.
const BEING_CREATED_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Checks a database opened read-only: not newer than us, and holding exactly's tables (none of
/// them foreign). Writes nothing. A database with no tables at all is looked at again for up to
/// [`BEING_CREATED_WAIT`]: a scheduler starting on a new path creates it as we read.
pub(super) fn check_read_only(store: &Store) -> Result<()> {
    let deadline = std::time::Instant::now() + BEING_CREATED_WAIT;
    loop {
        let checked = check_read_only_once(store);
        if checked.is_ok() || std::time::Instant::now() >= deadline || !schema_is_empty(store)? {
            return checked;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
}

/// Whether the database holds no table, index or trigger at all.
fn schema_is_empty(store: &Store) -> Result<bool> {
    let n: i64 = store
        .lite()
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
        .map_err(|e| store.err(e.into()))?;
    Ok(n == 0)
}

fn check_read_only_once(store: &Store) -> Result<()> {
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
            Err(Error::not_found(
                exactly_words::Missing::Tables,
                format!(
                    "database {path} has no exactly tables (no {t}); read commands never create \
                     them (exactly init does)"
                ),
            ))
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

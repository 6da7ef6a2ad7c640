//! The schema on PostgreSQL: the tables SQLite's schema is made from, in PostgreSQL's types, its
//! own version row and PL/pgSQL triggers; adoption and refusal of foreign or newer databases.
use super::db::{DbError, DbResult, Optional, Tx};
use super::pg::PgStore;

/// The schema on PostgreSQL: the same tables, columns and indexes as on SQLite (the types said
/// in PostgreSQL's words), a version row in `exactly_meta`, and the counters' triggers as
/// PL/pgSQL. Created under an advisory lock, so processes opening a new database at once do not
/// race each other's `CREATE`. Then the transitions' functions (`install_functions`); true when
/// they are there to call.
pub(crate) fn prepare(store: &PgStore) -> DbResult<bool> {
    // A current database (the usual case: every command opens one) needs neither the lock nor
    // a look at the catalog: its version rows say it was made whole by us.
    let (schema, functions) = store.read(&mut |tx| Ok((version(tx)?, functions_version(tx)?)))?;
    if schema != super::SCHEMA_VERSION {
        create(store)?;
        // The timeline from the start, so that the first failover is one (`pg_timeline`).
        store.call(
            &mut |c| super::pg_timeline::check(c, true).map(drop),
            &|_: &()| false,
        )?;
    }
    if functions == super::pg_functions::VERSION {
        return Ok(true);
    }
    install_functions(store)
}

/// Installs (or replaces older) transitions' functions. False, and the store keeps to its
/// transactions, when a newer exactly installed its own or this role may not create functions
/// (a worker role granted only the tables, on a database an older exactly made).
fn install_functions(store: &PgStore) -> DbResult<bool> {
    let wanted = super::pg_functions::VERSION;
    // READ COMMITTED, so the version read after the lock is what the lock's last holder wrote.
    let installed = store.transact(
        super::pg::READ_COMMITTED,
        &mut |tx| {
            tx.one("SELECT pg_advisory_xact_lock(7203115)", &[], |_| Ok(()))?;
            let found = functions_version(tx)?;
            if found >= wanted {
                return Ok(found == wanted);
            }
            for sql in super::pg_functions::statements() {
                tx.exec(&sql, &[])?;
            }
            tx.exec(
                "INSERT INTO exactly_meta (name, value) VALUES ('pg_functions', ?1)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                super::db::args![wanted],
            )?;
            Ok(true)
        },
        false,
    );
    match installed {
        Err(e) if e.sqlstate() == Some("42501") => Ok(false),
        other => other,
    }
}

/// The version of the transitions' functions installed; 0 for none.
fn functions_version(tx: &Tx<'_>) -> DbResult<i64> {
    if !has_table(tx, "exactly_meta")? {
        return Ok(0);
    }
    Ok(tx
        .one(
            "SELECT value FROM exactly_meta WHERE name = 'pg_functions'",
            &[],
            |r| r.get::<i64>(0),
        )
        .optional()?
        .unwrap_or(0))
}

/// Creates or upgrades the tables, indexes and triggers, and writes the schema version.
fn create(store: &PgStore) -> DbResult<()> {
    store.write(&mut |tx| {
        tx.one("SELECT pg_advisory_xact_lock(7203114)", &[], |_| Ok(()))?;
        let version = known_version(tx)?;
        check_foreign(tx)?;
        if version == super::SCHEMA_VERSION {
            return Ok(());
        }
        for t in super::schema::TABLES {
            tx.exec(&pg_type(t.create), &[])?;
            for (col, ty) in t.added {
                tx.exec(
                    &format!(
                        "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {col} {}",
                        t.name,
                        pg_type(ty)
                    ),
                    &[],
                )?;
            }
        }
        // An adopted `effect_ledger` without a unique key on `effect_key` gets one, as on
        // SQLite: the unique violation is the ledger's guard against a second send. A key
        // stored twice fails the index, and the whole adoption with it (nothing is changed).
        if !effect_key_is_unique(tx)? {
            tx.exec(super::prepare::UNIQUE_KEY, &[])?;
        }
        if version < 7 {
            // The duration counters start with the runs already ended (schema version 7).
            tx.exec(super::schema::SEED_DURATIONS, &[])?;
        }
        for sql in PG_ONLY {
            tx.exec(sql, &[])?;
        }
        for (since, drop) in super::schema::REDEFINED_INDEXES {
            if version < *since {
                tx.exec(drop, &[])?;
            }
        }
        for ix in super::schema::INDEXES {
            tx.exec(ix, &[])?;
        }
        tx.exec(
            "INSERT INTO exactly_meta (name, value) VALUES ('schema_version', ?1)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            super::db::args![super::SCHEMA_VERSION],
        )?;
        // The instance a holder's memory of fencing tokens knows this database by.
        super::instance::record_instance(tx)?;
        Ok(())
    })
}

/// Whether `effect_ledger` has a unique index (or a primary key) on `effect_key` alone, whole
/// (not partial, not an expression).
fn effect_key_is_unique(tx: &Tx<'_>) -> DbResult<bool> {
    tx.one(
        "SELECT EXISTS (SELECT 1 FROM pg_index i
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
           WHERE i.indrelid = to_regclass('effect_ledger') AND i.indisunique
             AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL
             AND a.attname = 'effect_key')",
        &[],
        |r| r.get::<bool>(0),
    )
}

/// SQLite's column types in PostgreSQL's words.
fn pg_type(sql: &str) -> String {
    sql.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ")
        .replace(
            "INTEGER PRIMARY KEY AUTOINCREMENT",
            "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
        )
        // SQLite's events hand out ids without AUTOINCREMENT's page; PostgreSQL's identity
        // never repeats one either way.
        .replace(
            "(id INTEGER PRIMARY KEY,",
            "(id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,",
        )
        .replace("INTEGER", "BIGINT")
        .replace("BLOB", "BYTEA")
}

/// What PostgreSQL needs besides the shared tables: the version row's table, a `rowid` for the
/// two tables a dashboard follows by insertion order (SQLite has one built in), and the triggers
/// that keep `exactly_counters` (as SQLite's do).
const PG_ONLY: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS exactly_meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    "ALTER TABLE exactly_runs ADD COLUMN IF NOT EXISTS rowid BIGINT GENERATED BY \
     DEFAULT AS IDENTITY",
    "CREATE UNIQUE INDEX IF NOT EXISTS exactly_runs_rowid ON exactly_runs (rowid)",
    "ALTER TABLE exactly_firings ADD COLUMN IF NOT EXISTS rowid BIGINT GENERATED BY \
     DEFAULT AS IDENTITY",
    "CREATE UNIQUE INDEX IF NOT EXISTS exactly_firings_rowid ON exactly_firings (rowid)",
    concat!(
        "CREATE OR REPLACE FUNCTION exactly_count_run_ended() RETURNS trigger LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     BEGIN
       IF NEW.outcome IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.outcome IS NULL) THEN
         INSERT INTO exactly_counters (kind, job_key, n) VALUES ('run_ended:' || NEW.outcome, \
             NEW.job_key, 1)
         ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + 1;
         IF NEW.duration_ms IS NOT NULL THEN ",
        super::schema::count_duration!(),
        " END IF;
       END IF;
       RETURN NULL;
     END $$"
    ),
    "CREATE OR REPLACE FUNCTION exactly_count_deleted() RETURNS trigger LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     BEGIN
       INSERT INTO exactly_counters (kind, job_key, n) VALUES ('deleted:' || TG_TABLE_NAME, '', 1)
       ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + 1;
       RETURN NULL;
     END $$",
    "DROP TRIGGER IF EXISTS exactly_runs_ended ON exactly_runs",
    "CREATE TRIGGER exactly_runs_ended AFTER INSERT OR UPDATE OF outcome ON exactly_runs
     FOR EACH ROW EXECUTE FUNCTION exactly_count_run_ended()",
    "DROP TRIGGER IF EXISTS exactly_runs_deleted ON exactly_runs",
    "CREATE TRIGGER exactly_runs_deleted AFTER DELETE ON exactly_runs
     FOR EACH ROW EXECUTE FUNCTION exactly_count_deleted()",
    "DROP TRIGGER IF EXISTS exactly_firings_deleted ON exactly_firings",
    "CREATE TRIGGER exactly_firings_deleted AFTER DELETE ON exactly_firings
     FOR EACH ROW EXECUTE FUNCTION exactly_count_deleted()",
];

/// [`version`], refused when newer than this build understands.
fn known_version(tx: &Tx<'_>) -> DbResult<i64> {
    let version = version(tx)?;
    if version > super::SCHEMA_VERSION {
        return Err(DbError::TooNew(version));
    }
    Ok(version)
}

/// The schema version stored in `exactly_meta`; 0 for a database without it.
pub(crate) fn version(tx: &Tx<'_>) -> DbResult<i64> {
    if !has_table(tx, "exactly_meta")? {
        return Ok(0);
    }
    Ok(tx
        .one(
            "SELECT value FROM exactly_meta WHERE name = 'schema_version'",
            &[],
            |r| r.get::<i64>(0),
        )
        .optional()?
        .unwrap_or(0))
}

/// The columns of `table` in the connection's schema (none: no such table).
pub(crate) fn columns(tx: &Tx<'_>, table: &str) -> DbResult<Vec<String>> {
    tx.rows(
        "SELECT column_name::text FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = ?1 ORDER BY ordinal_position",
        super::db::args![table],
        |r| r.get::<String>(0),
    )
}

fn check_foreign(tx: &Tx<'_>) -> DbResult<()> {
    for t in super::schema::TABLES {
        let cols = columns(tx, t.name)?;
        if let Some(msg) = super::prepare::foreign(t, &cols) {
            return Err(DbError::Foreign(msg));
        }
    }
    Ok(())
}

/// Whether the database holds exactly's tables (a read that writes nothing).
pub(crate) fn has_schema(store: &PgStore) -> DbResult<bool> {
    store.read(&mut |tx| has_table(tx, "job_lease"))
}

/// Whether `table` exists in the connection's schema: one catalog lookup (the dashboard asks
/// each poll), not a walk of `information_schema`.
pub(crate) fn has_table(tx: &Tx<'_>, table: &str) -> DbResult<bool> {
    tx.one(
        "SELECT to_regclass(?1) IS NOT NULL",
        super::db::args![table],
        |r| r.get::<bool>(0),
    )
}

/// Checks a database opened read-only: exactly's tables present, the schema not newer.
pub(crate) fn check_read_only(store: &PgStore) -> DbResult<()> {
    store.read(&mut |tx| {
        known_version(tx)?;
        check_foreign(tx)?;
        for t in super::schema::CORE_TABLES {
            if !has_table(tx, t)? {
                return Err(DbError::Other(format!(
                    "no exactly tables (no {t}); read commands never create them \
                     (exactly init does)"
                )));
            }
        }
        Ok(())
    })
}

//! The PostgreSQL backend: `--db postgres://…`. The store's operations are the same as on
//! SQLite (see [`super::db`]); what differs lives here: the connection pool, the statement cache,
//! how parameters and columns convert, transactions (`SERIALIZABLE`, retried on a serialization
//! failure or deadlock), the server's clock, and the schema.
use super::db::{Arg, DbError, DbResult, Optional, Tx, Value};
use crate::{Error, Result};
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Statement};
use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Duration;

/// Whether `--db` names a PostgreSQL database.
pub fn is_url(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// The URL with its password replaced by `***`: what messages and the dashboard show.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.split_once('@') {
        Some((a, h)) if !a.contains('/') => (a, h),
        _ => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// One connection and the statements prepared on it (a statement is parsed and planned once per
/// connection, as rusqlite's statement cache does on SQLite).
pub(crate) struct PgConn {
    client: Client,
    stmts: HashMap<String, Statement>,
    /// Set when a transaction could not be rolled back: the pool must not hand it out again.
    broken: bool,
}

impl PgConn {
    fn prepare(&mut self, sql: &str) -> DbResult<Statement> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let stmt = self.client.prepare(&placeholders(sql))?;
        if self.stmts.len() >= 256 {
            self.stmts.clear();
        }
        self.stmts.insert(sql.to_string(), stmt.clone());
        Ok(stmt)
    }

    pub(crate) fn exec(&mut self, sql: &str, args: &[Arg<'_>]) -> DbResult<usize> {
        let (stmt, bound) = self.bound(sql, args)?;
        Ok(self.client.execute(&stmt, &refs(&bound))? as usize)
    }

    pub(crate) fn query(&mut self, sql: &str, args: &[Arg<'_>]) -> DbResult<Vec<postgres::Row>> {
        let (stmt, bound) = self.bound(sql, args)?;
        Ok(self.client.query(&stmt, &refs(&bound))?)
    }

    /// The statement for `sql` and its parameters, converted.
    fn bound(&mut self, sql: &str, args: &[Arg<'_>]) -> DbResult<(Statement, Params)> {
        let stmt = self.prepare(sql)?;
        let bound = bind(&stmt, args)?;
        Ok((stmt, bound))
    }

    /// Runs statements that take no parameters (a transaction's start and end, the schema).
    fn batch(&mut self, sql: &str) -> DbResult<()> {
        Ok(self.client.batch_execute(sql)?)
    }

    /// Starts a transaction and reads the server's clock in the same round trip.
    fn begin(&mut self, how: &str) -> DbResult<String> {
        let msgs = self.client.simple_query(&format!(
            "BEGIN {how}; SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        ))?;
        msgs.iter()
            .find_map(|m| match m {
                postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                _ => None,
            })
            .ok_or_else(|| DbError::Other("the server did not say the time".into()))
    }
}

/// SQLite's `?N` placeholders as PostgreSQL's `$N` (outside quoted text and names).
fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '?' => {
                out.push('$');
                continue;
            }
            None => {}
        }
        out.push(c);
    }
    out
}

/// A statement's parameters as the client passes them.
type Params = Vec<Box<dyn ToSql + Sync>>;

fn refs(p: &Params) -> Vec<&(dyn ToSql + Sync)> {
    p.iter().map(|b| b.as_ref()).collect()
}

/// Each parameter converted to the type the server inferred for its placeholder.
fn bind(stmt: &Statement, args: &[Arg<'_>]) -> DbResult<Params> {
    let types = stmt.params();
    if types.len() > args.len() {
        return Err(DbError::Other(format!(
            "statement takes {} parameters, given {}",
            types.len(),
            args.len()
        )));
    }
    types
        .iter()
        .zip(args)
        .map(|(ty, a)| convert(ty, a))
        .collect()
}

fn convert(ty: &Type, a: &Arg<'_>) -> DbResult<Box<dyn ToSql + Sync>> {
    let bad = || DbError::Other(format!("cannot pass {a:?} as {ty}"));
    let int = || -> DbResult<Option<i64>> {
        match a {
            Arg::Null => Ok(None),
            Arg::Int(i) => Ok(Some(*i)),
            Arg::Text(s) => s.trim().parse().map(Some).map_err(|_| bad()),
            Arg::Bytes(_) => Err(bad()),
        }
    };
    Ok(match *ty {
        Type::INT8 => Box::new(int()?),
        Type::INT4 => Box::new(
            int()?
                .map(|i| i32::try_from(i).map_err(|_| bad()))
                .transpose()?,
        ),
        Type::INT2 => Box::new(
            int()?
                .map(|i| i16::try_from(i).map_err(|_| bad()))
                .transpose()?,
        ),
        Type::BOOL => Box::new(int()?.map(|i| i != 0)),
        Type::FLOAT8 | Type::FLOAT4 => {
            let f = match a {
                Arg::Null => None,
                Arg::Int(i) => Some(*i as f64),
                _ => return Err(bad()),
            };
            if *ty == Type::FLOAT4 {
                Box::new(f.map(|f| f as f32))
            } else {
                Box::new(f)
            }
        }
        Type::BYTEA => Box::new(match a {
            Arg::Null => None,
            Arg::Bytes(b) => Some(b.to_vec()),
            Arg::Text(s) => Some(s.as_bytes().to_vec()),
            _ => return Err(bad()),
        }),
        // PostgreSQL's text holds no NUL byte: it is stored as U+FFFD (a command's exact bytes
        // are kept in `response_raw`, a bytea).
        _ => Box::new(match a {
            Arg::Null => None,
            Arg::Text(s) if s.contains('\0') => Some(s.replace('\0', "\u{FFFD}")),
            Arg::Text(s) => Some(s.to_string()),
            Arg::Int(i) => Some(i.to_string()),
            Arg::Bytes(b) => Some(String::from_utf8_lossy(b).replace('\0', "\u{FFFD}")),
        }),
    })
}

/// Column `i` of a PostgreSQL row as a [`Value`].
pub(crate) fn value(r: &postgres::Row, i: usize) -> DbResult<Value<'_>> {
    let col = r
        .columns()
        .get(i)
        .ok_or_else(|| DbError::Other(format!("no column {i}")))?;
    let ty = col.type_();
    let v = match *ty {
        Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Type::INT4 => r
            .try_get::<_, Option<i32>>(i)?
            .map(|n| Value::Int(n.into())),
        Type::INT2 => r
            .try_get::<_, Option<i16>>(i)?
            .map(|n| Value::Int(n.into())),
        Type::BOOL => r
            .try_get::<_, Option<bool>>(i)?
            .map(|b| Value::Int(b.into())),
        Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map(Value::Real),
        Type::FLOAT4 => r
            .try_get::<_, Option<f32>>(i)?
            .map(|f| Value::Real(f.into())),
        Type::BYTEA => r
            .try_get::<_, Option<&[u8]>>(i)?
            .map(|b| Value::Text(Cow::Borrowed(b))),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => r
            .try_get::<_, Option<&str>>(i)?
            .map(|s| Value::Text(Cow::Borrowed(s.as_bytes()))),
        _ => {
            return Err(DbError::Other(format!(
                "column {} has type {ty}, which the store does not read",
                col.name()
            )))
        }
    };
    Ok(v.unwrap_or(Value::Null))
}

/// Opens connections for the pool: each with the lock wait the busy timeout allows.
struct Manager {
    config: postgres::Config,
    lock_ms: u64,
    /// Set when the URL says `sslmode=require`.
    #[cfg(feature = "tls")]
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

/// Why a connection could not be made, with every cause (a TLS failure says which check failed).
#[derive(Debug)]
struct ConnectError(String);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectError {}

impl From<postgres::Error> for ConnectError {
    fn from(e: postgres::Error) -> Self {
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            let more = c.to_string();
            if !text.contains(&more) {
                text = format!("{text}: {more}");
            }
            cause = c.source();
        }
        ConnectError(text)
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = ConnectError;

    fn connect(&self) -> std::result::Result<PgConn, ConnectError> {
        #[cfg(feature = "tls")]
        let mut client = match &self.tls {
            Some(tls) => self.config.connect(tls.clone())?,
            None => self.config.connect(NoTls)?,
        };
        #[cfg(not(feature = "tls"))]
        let mut client = self.config.connect(NoTls)?;
        client.batch_execute(&format!(
            "SET lock_timeout = {}; SET idle_in_transaction_session_timeout = 60000; SET statement_timeout = {STATEMENT_TIMEOUT_MS}",
            self.lock_ms
        ))?;
        Ok(PgConn {
            client,
            stmts: HashMap::new(),
            broken: false,
        })
    }

    fn is_valid(&self, conn: &mut PgConn) -> std::result::Result<(), ConnectError> {
        Ok(conn.client.simple_query("").map(|_| ())?)
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.broken || conn.client.is_closed()
    }
}

/// A process's pools, one per database URL: a scheduler's runs and a dashboard's polls share a
/// few connections instead of opening one per store.
static POOLS: parking_lot::Mutex<Vec<(String, r2d2::Pool<Manager>)>> =
    parking_lot::const_mutex(Vec::new());

/// The connections a process keeps to one database at most.
const POOL_SIZE: u32 = 8;

/// A PostgreSQL database behind a [`super::Store`].
pub(crate) struct PgStore {
    pool: r2d2::Pool<Manager>,
    /// The URL without its password.
    pub(crate) shown: String,
}

/// The longest any statement may run (the server cancels it): a stalled server is an error
/// the caller sees, not a wait without end.
const STATEMENT_TIMEOUT_MS: u64 = 30_000;

impl PgStore {
    pub(crate) fn connect(url: &str, busy_ms: u64) -> Result<PgStore> {
        let shown = redact(url);
        let mut pools = POOLS.lock();
        if let Some((_, p)) = pools.iter().find(|(u, _)| u == url) {
            return Ok(PgStore {
                pool: p.clone(),
                shown,
            });
        }
        let mut config: postgres::Config = url
            .parse()
            .map_err(|e| Error::Usage(format!("database URL {shown}: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        // A partition must not hang a read forever: the kernel gives up on a connection whose
        // peer stopped answering (keepalives), and no statement runs past its limit. (The lease
        // is enforced by a local deadline whatever a read does: see `wrapped`.)
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        if config.get_application_name().is_none() {
            config.application_name("exactly");
        }
        let require_tls = config.get_ssl_mode() == postgres::config::SslMode::Require;
        #[cfg(not(feature = "tls"))]
        if require_tls {
            return Err(Error::Usage(format!(
                "database URL {shown} asks for sslmode=require, and this build has no TLS (build with --features tls)"
            )));
        }
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_millis(busy_ms.max(1000)))
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(Manager {
                config,
                lock_ms: busy_ms,
                #[cfg(feature = "tls")]
                tls: if require_tls {
                    Some(tls_connector().map_err(|e| {
                        Error::Usage(format!("database URL {shown} asks for TLS: {e}"))
                    })?)
                } else {
                    None
                },
            });
        pools.push((url.to_string(), pool.clone()));
        Ok(PgStore { pool, shown })
    }

    /// A connection from the pool (a new one if none is idle; waits up to the busy timeout
    /// for an unreachable server).
    fn conn(&self) -> DbResult<r2d2::PooledConnection<Manager>> {
        self.pool.get().map_err(|e| {
            DbError::Other(format!(
                "cannot connect: {}",
                e.to_string()
                    .trim_start_matches("timed out waiting for connection: ")
                    .replace('\n', " ")
            ))
        })
    }

    /// Runs `f` in a `SERIALIZABLE` transaction and commits it: PostgreSQL then answers as if
    /// the transactions ran one at a time, as SQLite's single writer does. A serialization
    /// failure or a deadlock rolls back and runs `f` again (it only reads and writes the
    /// database, so running it again is safe); any other error rolls back and is returned.
    pub(crate) fn write<T>(&self, f: &mut dyn FnMut(&Tx<'_>) -> DbResult<T>) -> DbResult<T> {
        self.transact(WRITE, f, false)
    }

    /// Runs `f` in a read-only transaction that sees one snapshot.
    pub(crate) fn read<T>(&self, f: &mut dyn FnMut(&Tx<'_>) -> DbResult<T>) -> DbResult<T> {
        self.transact("ISOLATION LEVEL REPEATABLE READ READ ONLY", f, false)
    }

    /// Runs `f` in a transaction `how`; with `lose_reply`, the connection is cut once COMMIT
    /// has succeeded and its error returned, as when the reply to COMMIT is lost on the way
    /// (the fault point `finish_reply_lost`).
    pub(crate) fn transact<T>(
        &self,
        how: &str,
        f: &mut dyn FnMut(&Tx<'_>) -> DbResult<T>,
        lose_reply: bool,
    ) -> DbResult<T> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut conn = self.conn()?;
            let result = (|| {
                let now = conn.begin(how)?;
                // This host's clock beside the server's, to move the instants a caller computed
                // on ours ("now + the lease") onto the server's (see `Tx::later`). Read after the
                // server's answer, so a lease moved over is never longer than asked for.
                let here = crate::time::now();
                let shift = crate::time::parse(&now).map_or(chrono::Duration::zero(), |n| n - here);
                let out = {
                    let tx = Tx::pg(&mut conn, now, shift);
                    f(&tx)?
                };
                conn.batch("COMMIT")?;
                if lose_reply {
                    crate::fault::point("finish_reply_lost");
                    return Err(cut(&mut conn));
                }
                Ok(out)
            })();
            let Err(e) = result else {
                return result;
            };
            // Whatever failed (the clock's read after BEGIN, a statement, COMMIT), no transaction
            // may stay open on a connection the pool hands out again. (After a failed COMMIT,
            // PostgreSQL has already ended it; this ROLLBACK only warns.)
            if conn.batch("ROLLBACK").is_err() {
                conn.broken = true;
            }
            if !(retryable(&e) && attempt < MAX_TRIES) {
                return Err(e);
            }
            let ms = 1 + rand::random::<u64>() % (2 * u64::from(attempt.min(10)));
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
}

/// A write transaction: `SERIALIZABLE`.
pub(crate) const WRITE: &str = "ISOLATION LEVEL SERIALIZABLE";

/// Ends this connection's backend from the server's side and returns the error the client gets
/// for it: what a caller sees when the connection drops before a reply arrives.
fn cut(conn: &mut PgConn) -> DbError {
    match conn
        .client
        .simple_query("SELECT pg_terminate_backend(pg_backend_pid())")
    {
        Err(e) => e.into(),
        Ok(_) => DbError::Other("the connection was cut after COMMIT".into()),
    }
}

/// TLS as `sslmode=require` asks for it, and more: the server's certificate must chain to the
/// web PKI's roots or to the CA in `PGSSLROOTCERT` (libpq's variable) and name the host.
#[cfg(feature = "tls")]
fn tls_connector() -> std::result::Result<tokio_postgres_rustls::MakeRustlsConnect, String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = std::env::var_os("PGSSLROOTCERT").filter(|p| !p.is_empty()) {
        let shown = std::path::Path::new(&path).display().to_string();
        let certs = CertificateDer::pem_file_iter(&path)
            .map_err(|e| format!("cannot read PGSSLROOTCERT {shown}: {e}"))?;
        for cert in certs {
            let cert = cert.map_err(|e| format!("PGSSLROOTCERT {shown}: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("PGSSLROOTCERT {shown}: {e}"))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// How many times a transaction is run before a serialization failure is the answer.
const MAX_TRIES: u32 = 30;

/// Serialization failure and deadlock: the server rolled the transaction back, and running it
/// again is the documented answer.
fn retryable(e: &DbError) -> bool {
    matches!(e.sqlstate(), Some("40001") | Some("40P01"))
}

/// A PostgreSQL error as one sentence naming the database.
pub(crate) fn error(shown: &str, busy_ms: u64, e: DbError) -> Error {
    match e.sqlstate() {
        Some("55P03") => Error::Busy(format!(
            "database {shown} is locked: another transaction held a lock longer than the busy timeout ({busy_ms} ms)"
        )),
        Some(code @ ("40001" | "40P01")) => Error::Busy(format!(
            "database {shown} is busy: concurrent writers kept conflicting ({code}), {MAX_TRIES} tries in a row"
        )),
        Some("25006") | Some("42501") => Error::Store(format!(
            "database {shown} is read-only for this role: {}",
            e.to_string().replace('\n', " ")
        )),
        _ => Error::Store(format!(
            "database {shown}: {}",
            e.to_string().replace('\n', " ")
        )),
    }
}

/// The schema on PostgreSQL: the same tables, columns and indexes as on SQLite (the types said
/// in PostgreSQL's words), a version row in `exactly_meta`, and the counters' triggers as
/// PL/pgSQL. Created under an advisory lock, so processes opening a new database at once do not
/// race each other's `CREATE`.
pub(crate) fn prepare(store: &PgStore) -> DbResult<()> {
    // A current database (the usual case: every command opens one) needs neither the lock nor
    // a look at the catalog: its version row says it was made whole by us.
    if store.read(&mut |tx| version(tx))? == super::SCHEMA_VERSION {
        return Ok(());
    }
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
        for sql in PG_ONLY {
            tx.exec(sql, &[])?;
        }
        for ix in super::schema::INDEXES {
            tx.exec(ix, &[])?;
        }
        tx.exec(
            "INSERT INTO exactly_meta (name, value) VALUES ('schema_version', ?1)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            super::db::args![super::SCHEMA_VERSION],
        )?;
        Ok(())
    })
}

/// SQLite's column types in PostgreSQL's words.
fn pg_type(sql: &str) -> String {
    sql.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ")
        .replace(
            "INTEGER PRIMARY KEY AUTOINCREMENT",
            "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
        )
        .replace("INTEGER", "BIGINT")
        .replace("BLOB", "BYTEA")
}

/// What PostgreSQL needs besides the shared tables: the version row's table, a `rowid` for the
/// two tables a dashboard follows by insertion order (SQLite has one built in), and the triggers
/// that keep `exactly_counters` (as SQLite's do).
const PG_ONLY: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS exactly_meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    "ALTER TABLE exactly_runs ADD COLUMN IF NOT EXISTS rowid BIGINT GENERATED BY DEFAULT AS IDENTITY",
    "CREATE UNIQUE INDEX IF NOT EXISTS exactly_runs_rowid ON exactly_runs (rowid)",
    "ALTER TABLE exactly_firings ADD COLUMN IF NOT EXISTS rowid BIGINT GENERATED BY DEFAULT AS IDENTITY",
    "CREATE UNIQUE INDEX IF NOT EXISTS exactly_firings_rowid ON exactly_firings (rowid)",
    "CREATE OR REPLACE FUNCTION exactly_count_run_ended() RETURNS trigger LANGUAGE plpgsql
     SET search_path FROM CURRENT AS $$
     BEGIN
       IF NEW.outcome IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.outcome IS NULL) THEN
         INSERT INTO exactly_counters (kind, job_key, n) VALUES ('run_ended:' || NEW.outcome, NEW.job_key, 1)
         ON CONFLICT (kind, job_key) DO UPDATE SET n = exactly_counters.n + 1;
       END IF;
       RETURN NULL;
     END $$",
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
        return Err(DbError::Other(format!(
            "schema version {version}, newer than this exactly understands ({}); upgrade exactly",
            super::SCHEMA_VERSION
        )));
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
        if let Some(msg) = super::schema::foreign(t, &cols) {
            return Err(DbError::Other(msg));
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
                    "no exactly tables (no {t}); read commands never create them (exactly init does)"
                )));
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(
            placeholders("SELECT ?1, '?2', \"a?\" FROM t WHERE x = ?12"),
            "SELECT $1, '?2', \"a?\" FROM t WHERE x = $12"
        );
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db?x=1"),
            "postgres://u:***@h:5432/db?x=1"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
    }
}

//! The PostgreSQL backend: `--db postgres://…`. The store's operations are the same as on
//! SQLite (see [`super::db`]); what differs lives here: the connection pool, the statement cache,
//! how parameters and columns convert, transactions (`SERIALIZABLE`, retried on a serialization
//! failure or deadlock) and the server's clock. Its schema is `pg_schema.rs`.
use super::db::{DbError, DbResult, Tx};
use exactly_words::{Error, Result};
use postgres::NoTls;
use std::collections::HashMap;
use std::time::Duration;

use super::pg_conn::server_now;
pub(crate) use super::pg_conn::{PgConn, READ_COMMITTED, WRITE};
pub(crate) use super::pg_schema::{check_read_only, has_schema, has_table, prepare, version};

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

/// Opens connections for the pool: each with the lock wait the busy timeout allows.
struct Manager {
    config: postgres::Config,
    lock_ms: u64,
    /// Until when (Unix ms) the window after an asynchronous failover lasts, as the newest
    /// connection found it: shared with every store of the pool.
    window: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Set once a store of this process opened the database to write: until then a connection
    /// that finds a failover only notes it (a read command changes nothing), and the first
    /// writer's connection records and guards it.
    writer: std::sync::Arc<std::sync::atomic::AtomicBool>,
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
        let sync_wait_cut = super::pg_sync::flag();
        let mut config = self.config.clone();
        let flag = sync_wait_cut.clone();
        config.notice_callback(move |notice| {
            if super::pg_sync::is_cut(notice.message()) {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        #[cfg(feature = "tls")]
        let mut client = match &self.tls {
            Some(tls) => config.connect(tls.clone())?,
            None => config.connect(NoTls)?,
        };
        #[cfg(not(feature = "tls"))]
        let mut client = config.connect(NoTls)?;
        // The settings and a first reading of the server's clock (see `PgConn::shift`) in one
        // round trip.
        let now = server_now(
            &mut client,
            &format!(
                "SET lock_timeout = {}; SET idle_in_transaction_session_timeout = 60000; \
                 SET statement_timeout = {STATEMENT_TIMEOUT_MS}; ",
                self.lock_ms
            ),
        )
        .map_err(|e| match e {
            DbError::Pg(e) => ConnectError::from(e),
            e => ConnectError(e.to_string()),
        })?;
        let mut conn = PgConn {
            client,
            stmts: HashMap::new(),
            broken: false,
            shift: chrono::Duration::zero(),
            seen: Default::default(),
            sync_wait_cut,
            cancel: None,
            used: std::time::Instant::now(),
        };
        conn.saw_clock(&now);
        // The server's timeline against the one recorded: a failover is guarded before this
        // connection serves anything.
        let may_write = self.writer.load(std::sync::atomic::Ordering::Relaxed);
        conn.seen = super::pg_timeline::check(&mut conn, may_write).map_err(|e| match e {
            DbError::Pg(e) => ConnectError::from(e),
            e => ConnectError(e.to_string()),
        })?;
        conn.cancel = conn.seen.sync.then(|| conn.client.cancel_token());
        if !conn.seen.standby {
            self.window.store(
                conn.seen.window_until_ms,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        Ok(conn)
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
type Window = std::sync::Arc<std::sync::atomic::AtomicI64>;
type Writer = std::sync::Arc<std::sync::atomic::AtomicBool>;
/// A pool and what its stores share: the URL, the pool, the failover window, the writer flag.
type Pooled = (String, r2d2::Pool<Manager>, Window, Writer);
static POOLS: parking_lot::Mutex<Vec<Pooled>> = parking_lot::const_mutex(Vec::new());

/// The connections a process keeps to one database at most.
const POOL_SIZE: u32 = 8;

/// How long a pooled connection may sit idle before it is checked on its next use
/// (`PgStore::conn`).
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// A PostgreSQL database behind a [`super::Store`].
pub(crate) struct PgStore {
    pool: r2d2::Pool<Manager>,
    /// The pool's failover window (see `Manager::window`).
    window: Window,
    /// The pool's writer flag (see `Manager::writer`).
    writer: Writer,
    /// The transitions' functions (`pg_functions`) are installed at this build's version: the
    /// store calls them instead of running a transaction.
    pub(crate) fast: bool,
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
        if let Some((_, p, w, wr)) = pools.iter().find(|(u, _, _, _)| u == url) {
            return Ok(PgStore {
                pool: p.clone(),
                window: w.clone(),
                writer: wr.clone(),
                fast: false,
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
                "database URL {shown} asks for sslmode=require, and this build has no TLS \
                 (build with --features tls)"
            )));
        }
        let window = Window::default();
        let writer = Writer::default();
        let pool = r2d2::Pool::builder()
            .max_size(POOL_SIZE)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(Duration::from_millis(busy_ms.max(1000)))
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(Manager {
                config,
                lock_ms: busy_ms,
                window: window.clone(),
                writer: writer.clone(),
                #[cfg(feature = "tls")]
                tls: if require_tls {
                    Some(tls_connector(&shown)?)
                } else {
                    None
                },
            });
        pools.push((
            url.to_string(),
            pool.clone(),
            window.clone(),
            writer.clone(),
        ));
        Ok(PgStore {
            pool,
            window,
            writer,
            fast: false,
            shown,
        })
    }

    /// Says this process writes the database: its connections from now on record and guard a
    /// failover they find (`pg_timeline`).
    pub(crate) fn writes(&self) {
        self.writer
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the window after an asynchronous failover is open (see `pg_timeline`): an
    /// effect without a row is then checked before it is sent.
    fn may_write(&self) -> bool {
        self.writer.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn failover_window_closed(&self) {
        self.window.store(0, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn failover_window(&self, now: exactly_words::time::Ts) -> bool {
        let until = self.window.load(std::sync::atomic::Ordering::Relaxed);
        until > 0 && now.timestamp_millis() < until
    }

    /// A connection from the pool (a new one if none is idle; waits up to the busy timeout
    /// for an unreachable server).
    ///
    /// A connection idle longer than [`IDLE_CHECK`] is checked with an empty query first (the
    /// pool does not check each one it hands out: a round trip per transaction): one whose
    /// server went away meanwhile (restarted, failed over) is dropped and another taken, so a
    /// long-running process's first write after a failover reaches the promoted server instead
    /// of failing on the dead one.
    fn conn(&self) -> DbResult<r2d2::PooledConnection<Manager>> {
        for _ in 0..=POOL_SIZE {
            let mut conn = self.pool.get().map_err(|e| {
                DbError::Other(format!(
                    "cannot connect: {}",
                    e.to_string()
                        .trim_start_matches("timed out waiting for connection: ")
                        .replace('\n', " ")
                ))
            })?;
            if conn.used.elapsed() >= IDLE_CHECK && conn.client.simple_query("").is_err() {
                conn.broken = true;
                continue;
            }
            conn.used = std::time::Instant::now();
            return Ok(conn);
        }
        Err(DbError::Other(
            "cannot connect: every connection the pool gave was closed by the server".into(),
        ))
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
        self.transact_tries(how, f, lose_reply, MAX_TRIES)
    }

    /// [`PgStore::transact`], run at most `tries` times: a caller that can make its transaction
    /// smaller gives up on a conflicting one sooner (see [`conflicted`]).
    pub(crate) fn transact_tries<T>(
        &self,
        how: &str,
        f: &mut dyn FnMut(&Tx<'_>) -> DbResult<T>,
        lose_reply: bool,
        tries: u32,
    ) -> DbResult<T> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut conn = self.conn()?;
            if !how.contains("READ ONLY") {
                writable(&mut conn, self.may_write())?;
            }
            // Once COMMIT is sent the transaction is over, whatever it answers (a serialization
            // failure at COMMIT rolls it back): no ROLLBACK after it, which would be a round
            // trip and a transaction of its own on the server for nothing.
            let mut ended = false;
            let result = (|| {
                let now = conn.begin(how)?;
                // This host's clock beside the server's, to move the instants a caller computed
                // on ours ("now + the lease") onto the server's (see `Tx::later`). Read after the
                // server's answer, so a lease moved over is never longer than asked for.
                let here = exactly_words::time::now();
                let shift =
                    exactly_words::time::parse(&now).map_or(chrono::Duration::zero(), |n| n - here);
                let out = {
                    let tx = Tx::pg(&mut conn, now, shift);
                    f(&tx)?
                };
                {
                    let _watch = super::pg_sync::watch(conn.cancel.clone());
                    ended = true;
                    conn.batch("COMMIT")?;
                }
                super::pg_sync::check(&conn.sync_wait_cut)?;
                if lose_reply {
                    exactly_words::fault::point(exactly_words::fault::Point::FinishReplyLost);
                    return Err(cut(&mut conn));
                }
                Ok(out)
            })();
            let Err(e) = result else {
                return result;
            };
            // Whatever failed before COMMIT (the clock's read after BEGIN, a statement), no
            // transaction may stay open on a connection the pool hands out again. (After a
            // failed COMMIT PostgreSQL has already ended it; a lost connection is seen closed.)
            if !ended && conn.batch("ROLLBACK").is_err() {
                conn.broken = true;
            }
            // After COMMIT, only a serialization failure or deadlock leaves the session idle
            // and whole. Any other end (no answer, or the server ending the session, 57P01,
            // as the fault point `finish_reply_lost` does) leaves a connection not to reuse.
            if ended && !retryable(&e) {
                conn.broken = true;
            }
            if !(retryable(&e) && attempt < tries) {
                return Err(e);
            }
            let ms = 1 + rand::random::<u64>() % (2 * u64::from(attempt.min(10)));
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
}

impl PgStore {
    /// Runs `f` outside any transaction: each statement it sends commits on its own, so one
    /// call of a function (`pg_functions`) is one round trip. Retried as [`PgStore::transact`]
    /// retries (under a SERIALIZABLE server default a statement may fail for serialization);
    /// when `lose_reply` says so of its answer, the connection is cut after it
    /// (`finish_reply_lost`).
    pub(crate) fn call<T>(
        &self,
        f: &mut dyn FnMut(&mut PgConn) -> DbResult<T>,
        lose_reply: &dyn Fn(&T) -> bool,
    ) -> DbResult<T> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut conn = self.conn()?;
            writable(&mut conn, self.may_write())?;
            let result = {
                let _watch = super::pg_sync::watch(conn.cancel.clone());
                f(&mut conn)
            };
            let result =
                result.and_then(|out| super::pg_sync::check(&conn.sync_wait_cut).map(|()| out));
            if result.as_ref().is_ok_and(lose_reply) {
                exactly_words::fault::point(exactly_words::fault::Point::FinishReplyLost);
                conn.broken = true;
                return Err(cut(&mut conn));
            }
            let Err(e) = result else {
                return result;
            };
            // A connection that failed mid-call may be dead: the pool must not hand it out
            // again (a transaction learns this from its ROLLBACK).
            if conn.client.simple_query("").is_err() {
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

/// Refuses a write on a connection made to a standby, unless the server was promoted since
/// (then the timeline is checked, as on a new connection, before the write); a connection that
/// found a failover it could not record (made for a read) records and guards it first.
fn writable(conn: &mut PgConn, may_write: bool) -> DbResult<()> {
    if !conn.seen.standby && !conn.seen.pending {
        return Ok(());
    }
    conn.seen = super::pg_timeline::check(conn, may_write)?;
    if conn.seen.standby {
        return Err(DbError::Other(super::pg_timeline::STANDBY.into()));
    }
    Ok(())
}

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
fn tls_connector(shown: &str) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let refused = |why: String| Error::Usage(format!("database URL {shown} asks for TLS: {why}"));
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(path) = std::env::var_os("PGSSLROOTCERT").filter(|p| !p.is_empty()) {
        let file = std::path::Path::new(&path).display().to_string();
        let certs = CertificateDer::pem_file_iter(&path)
            .map_err(|e| refused(format!("cannot read PGSSLROOTCERT {file}: {e}")))?;
        for cert in certs {
            let cert = cert.map_err(|e| refused(format!("PGSSLROOTCERT {file}: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| refused(format!("PGSSLROOTCERT {file}: {e}")))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| refused(e.to_string()))?
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

/// Whether `e` is a transaction that kept conflicting with concurrent ones (see [`retryable`]):
/// the server answered, so it is no outage, and a smaller transaction may pass.
pub(crate) fn conflicted(e: &DbError) -> bool {
    retryable(e)
}

/// A PostgreSQL error as one sentence naming the database.
pub(crate) fn error(shown: &str, busy_ms: u64, e: DbError) -> Error {
    if let Some(refused) = e.refusal(shown) {
        return refused;
    }
    let text = e.to_string().replace('\n', " ");
    let source = match e {
        DbError::Pg(source) => source,
        _ => return Error::Store(format!("database {shown}: {text}")),
    };
    let busy = |message: String, source: postgres::Error| Error::Busy {
        message,
        source: Some(source.into()),
    };
    match source.code().map(|c| c.code().to_string()).as_deref() {
        Some("55P03") => busy(
            format!(
                "database {shown} is locked: \
                 another transaction held a lock longer than the busy timeout ({busy_ms} ms)"
            ),
            source,
        ),
        Some(code @ ("40001" | "40P01")) => {
            let message = format!(
                "database {shown} is busy: concurrent writers kept conflicting ({code}), \
                 {MAX_TRIES} tries in a row"
            );
            busy(message, source)
        }
        Some("25006") | Some("42501") => Error::Postgres {
            message: format!("database {shown} is read-only for this role: {text}"),
            source,
        },
        _ => Error::Postgres {
            message: format!("database {shown}: {text}"),
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::pg_types::placeholders;
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

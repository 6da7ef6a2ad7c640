//! The store: the only code that speaks SQL.
//!
//! Two databases behind the same operations, each written once against [`db::Tx`]:
//! - a SQLite file in WAL mode with a busy timeout; every write transaction is `BEGIN IMMEDIATE`
//!   (a deferred transaction that upgrades to a write gets `SQLITE_BUSY` at once, ignoring the
//!   busy timeout) and `synchronous=FULL`, so a committed lease claim or `submitted` survives
//!   power loss; reads are short transactions so WAL checkpoints are never starved;
//! - a PostgreSQL server (`postgres://…`, [`pg`]): `SERIALIZABLE` write transactions run again on
//!   a serialization failure, and every instant written or compared is the server's clock. The
//!   hot transitions' common cases are one call each of a server-side function (`pg_fast`,
//!   `pg_functions`): one round trip instead of a transaction's several.
//!
//! Callers see only [`Store`]'s methods.
// `pub` only on what the crate root reaches, the surface the library may name; all else is
// `pub(crate)`, so a glance at an item says whether anything outside the store can use it.
#![warn(unreachable_pub)]

/// The open-effects index's own term (`effect_ledger_open`, schema.rs), for a query to repeat
/// word for word (SQLite uses a partial index only for a query that repeats its term); with a
/// table alias, `open_term!("e")`. Written as `OR`s rather than `state IN ('claimed',
/// 'submitted', 'unknown')`: for a constant list of more than two values SQLite builds an
/// ephemeral b-tree each time a statement tests it, and every write of a ledger row tests the
/// index's term (three b-trees built and dropped in each effect's lifecycle, schema 9).
macro_rules! open_term {
    () => {
        "(state = 'claimed' OR state = 'submitted' OR state = 'unknown')"
    };
    ($t:literal) => {
        concat!(
            "(",
            $t,
            ".state = 'claimed' OR ",
            $t,
            ".state = 'submitted' OR ",
            $t,
            ".state = 'unknown')"
        )
    };
}
mod approval;
mod checklist_read;
mod checklist_rows;
mod clock;
pub mod db;
mod db_values;
mod describe;
mod detail;
mod errors;
mod firing;
mod firing_rows;
mod gate;
mod holds;
mod instance;
mod job;
mod jobs_read;
mod lease;
mod notify;
mod paths;
mod paused_rows;
pub use notify::NotifyEnd;
use paths::xdg_default;
pub use paths::{default_path, xdg_state_dir};
mod ledger;
mod ledger_outcome;
mod ledger_rows;
pub mod pg;
mod pg_conn;
mod pg_fast;
mod pg_functions;
mod pg_schema;
mod pg_single;
mod pg_sync;
pub use pg_sync::bound_by as sync_wait_bound;
mod pg_timeline;
mod pg_types;
mod read;
mod resume;
pub use resume::{ResumeTimes, Resumer};
mod prepare;
mod probe;
pub use probe::ProbeEvent;
mod retention;
pub mod rows;
mod run;
mod schedulers;
mod schema;
mod settle;
mod share;
mod waiting;
mod windows;

pub use approval::{Already, ApprovalRow, Decided};
pub use checklist_rows::{ActionFacts, ChaosRunRow, ChecklistReading, DoneRow, JobEvidence};
pub use firing::{
    AfterFailure, DueFate, DueRequest, FailureRules, FireRequest, Fired, Resumed, RunOwner, Started,
};
pub use job::{JobRecord, Registered};
pub use lease::{LeaseClaim, LeaseRow};
#[cfg(feature = "proof")]
pub use ledger::switch_guard_off_for_proof;
pub use ledger::SUBMIT_MIN_LEFT;
pub use ledger_rows::{
    Begin, Granted, LedgerRow, NewEffect, Observed, Resolution, Resolved, Seen, SendEnd, Sending,
    SentBy, Settlement, Submission, Submit, Verdict,
};
use prepare::has_table;
pub use read::OPEN_SHOWN;
pub use retention::Pruned;
pub use run::{EffectCounts, RunEnd};
pub use schedulers::{Outage, SchedulerReg};
pub use schema::SCHEMA_VERSION;
pub use waiting::Waiting;
pub use windows::{RUN_WINDOW, RUN_WINDOW_DAYS};

use db::{args, DbError, DbResult, Row, Tx};
use errors::{cannot_create_side_files, lite_error, open_error};
use exactly_words::state::EventKind;
use exactly_words::{Error, Result};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::time::Duration;

/// `lease_until` of a released lease: before every real instant, so the next claim takes it.
pub const RELEASED: &str = "1970-01-01T00:00:00.000Z";

/// An open database, SQLite or PostgreSQL: leases, the effect ledger, approvals, firings,
/// runs and events. Opened by `exactly::open` or [`Store::open`]; used through the library's
/// domain modules.
pub struct Store {
    conn: Conn,
    path: String,
    busy_ms: u64,
    /// The recent runs and latest firing per job, kept between polls so a dashboard reads only
    /// what changed.
    kept: Option<windows::Kept>,
    /// This connection's writes go before the process's other writers (see [`Store::write`]).
    writes_first: gate::Lane,
    /// The next write's commit reply is lost (the fault point `finish_reply_lost`).
    lose_reply: bool,
    /// The instant a caller pinned this handle's clock to (`src/clock.rs`); None: the system's.
    pub(crate) pinned_now: Option<exactly_words::time::Ts>,
    /// How this handle was opened, for another handle on the same database.
    opener: StoreOpener,
}

/// How to open another handle on the database a [`Store`] was opened on ([`Store::opener`]):
/// its path or URL exactly as given (a PostgreSQL password included, never shown) and its
/// access. A thread that needs a handle of its own (the lease watcher in `src/wrapped/mod.rs`)
/// opens one from it, not from [`Store::path`], which hides the password.
#[derive(Clone)]
pub struct StoreOpener {
    at: String,
    access: Access,
    /// A PostgreSQL database this process already prepared to write (schema current, and
    /// whether the transitions' functions are installed): another handle on its pool is not
    /// checked again, as the first handle is not either for as long as it lives.
    prepared: Option<bool>,
}

impl StoreOpener {
    /// Opens another handle on the same database, as the first was opened.
    pub fn open(&self) -> Result<Store> {
        if let (Some(fast), Access::Write) = (self.prepared, self.access) {
            let mut db = pg::PgStore::connect(&self.at, busy_timeout_ms())?;
            db.writes();
            db.fast = fast;
            let (shown, busy_ms) = (db.shown.clone(), busy_timeout_ms());
            return Ok(Store::with_conn(Conn::Pg(db), shown, busy_ms, self.clone()));
        }
        Store::open_at(&self.at, self.access)
    }

    /// The same database opened with `access` instead: a dashboard that reads through a
    /// read-only handle writes an operator's confirmed action through one opened to write.
    pub fn with_access(self, access: Access) -> StoreOpener {
        let prepared = self.prepared.filter(|_| access == self.access);
        StoreOpener {
            access,
            prepared,
            ..self
        }
    }

    /// The database's path or URL as it may be shown (a password replaced by `***`).
    pub(crate) fn shown(&self) -> String {
        pg::redact(&self.at)
    }
}

impl std::fmt::Debug for StoreOpener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOpener")
            .field("at", &self.shown())
            .field("access", &self.access)
            .finish()
    }
}

/// The database behind a store: a SQLite file, or a PostgreSQL server.
enum Conn {
    Lite(Connection),
    Pg(pg::PgStore),
}

fn busy_timeout_ms() -> u64 {
    std::env::var("EXACTLY_BUSY_TIMEOUT_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000)
}

/// Refuses a database nobody else can see: a lease or a ledger row in a throwaway database
/// guards nothing (an empty path and `:memory:` are private, temporary databases in SQLite).
pub(crate) fn check_shareable(path: &str) -> Result<()> {
    let lower = path.to_ascii_lowercase();
    if path.trim().is_empty() {
        return Err(Error::Usage(
            "the database path is empty; give a file path (--db PATH or EXACTLY_DB)".to_string(),
        ));
    }
    if lower == ":memory:" || lower.starts_with("file::memory:") || lower.contains("mode=memory") {
        return Err(Error::Usage(format!(
            "database {} is in memory: a lease or ledger there is seen by no other process; \
             give a file path",
            exactly_words::sanitize::inert(path)
        )));
    }
    Ok(())
}

/// How a database is opened: to write (creating or adopting the schema), or to read only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// To write: the schema is created, or an existing one adopted.
    Write,
    /// To read only: nothing is created or changed.
    ReadOnly,
}

impl Store {
    /// The one place a database is opened: every command, the runner, the dashboard and the
    /// library's [`Store::open`]/[`Store::open_read_only`] come through here.
    pub fn open_at(path: &str, access: Access) -> Result<Store> {
        if pg::is_url(path) {
            return Store::open_pg(path, access);
        }
        match access {
            Access::Write => Store::open_writer(path),
            Access::ReadOnly => Store::open_reader(path),
        }
    }

    /// Opens (creating or adopting the schema as needed) the database at `path`.
    pub fn open(path: &str) -> Result<Store> {
        Store::open_at(path, Access::Write)
    }

    /// Opens an existing database for reading only: never creates the file, a table or a byte
    /// in it, and refuses a missing file or one without exactly's tables.
    pub fn open_read_only(path: &str) -> Result<Store> {
        Store::open_at(path, Access::ReadOnly)
    }

    fn open_pg(url: &str, access: Access) -> Result<Store> {
        let busy_ms = busy_timeout_ms();
        let mut db = pg::PgStore::connect(url, busy_ms)?;
        if access == Access::Write {
            db.writes();
        }
        let shown = db.shown.clone();
        let checked = match access {
            Access::Write => pg::prepare(&db).map(|fast| db.fast = fast),
            Access::ReadOnly => pg::check_read_only(&db),
        };
        checked.map_err(|e| pg::error(&shown, busy_ms, e))?;
        let prepared = (access == Access::Write).then_some(db.fast);
        Ok(Store::with_conn(
            Conn::Pg(db),
            shown,
            busy_ms,
            StoreOpener {
                at: url.to_string(),
                access,
                prepared,
            },
        ))
    }

    /// A handle on `conn` as opened, nothing kept yet, no lane or fault or pinned clock set.
    fn with_conn(conn: Conn, path: String, busy_ms: u64, opener: StoreOpener) -> Store {
        Store {
            conn,
            path,
            busy_ms,
            kept: None,
            writes_first: gate::Lane::Others,
            lose_reply: false,
            pinned_now: None,
            opener,
        }
    }

    /// A handle on an opened SQLite file at `path`, with the busy timeout set.
    fn on_sqlite(conn: Connection, path: &str, access: Access) -> Result<Store> {
        let busy_ms = busy_timeout_ms();
        let opener = StoreOpener {
            at: path.to_string(),
            access,
            prepared: None,
        };
        let store = Store::with_conn(Conn::Lite(conn), path.to_string(), busy_ms, opener);
        store
            .lite()
            .busy_timeout(Duration::from_millis(busy_ms))
            .map_err(|e| store.err(e.into()))?;
        Ok(store)
    }

    /// Whether a database exists at `db`: the file, or exactly's tables on the PostgreSQL server
    /// (asked without creating or changing anything).
    pub fn exists_at(db: &str) -> Result<bool> {
        if !pg::is_url(db) {
            return Ok(std::path::Path::new(db).exists());
        }
        let busy_ms = busy_timeout_ms();
        let store = pg::PgStore::connect(db, busy_ms)?;
        pg::has_schema(&store).map_err(|e| pg::error(&store.shown, busy_ms, e))
    }

    /// Whether this process may write the database: the file's permissions on SQLite, the
    /// role's privileges on PostgreSQL (a viewer's role may only read).
    pub fn can_write(&mut self) -> bool {
        if !self.is_pg() {
            return writable(&self.path);
        }
        self.read(|tx| {
            tx.one(
                "SELECT has_table_privilege('effect_ledger', 'UPDATE')",
                &[],
                |r| r.get::<bool>(0),
            )
        })
        .unwrap_or(false)
    }

    /// Whether this store is on PostgreSQL.
    pub(crate) fn is_pg(&self) -> bool {
        matches!(self.conn, Conn::Pg(_))
    }

    /// The SQLite connection (the SQLite-only code: its schema, its pragmas).
    pub(crate) fn lite(&self) -> &Connection {
        match &self.conn {
            Conn::Lite(c) => c,
            Conn::Pg(_) => unreachable!("SQLite-only code called on a PostgreSQL store"),
        }
    }

    fn lite_mut(&mut self) -> &mut Connection {
        match &mut self.conn {
            Conn::Lite(c) => c,
            Conn::Pg(_) => unreachable!("SQLite-only code called on a PostgreSQL store"),
        }
    }

    fn open_writer(path: &str) -> Result<Store> {
        refuse_unusable(path)?;
        // The XDG default's folder is ours to create (0700: a ledger is private by default);
        // any other path's folder must exist, so a typo does not become a new database.
        if xdg_default().as_deref() == Some(path) {
            if let Some(dir) = std::path::Path::new(path).parent() {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| Error::io(format!("cannot create {}: {e}", dir.display()), e))?;
            }
        }
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        if db::may_create() {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(path, e))?;
        let mut store = Store::on_sqlite(conn, path, Access::Write)?;
        store.lite().set_prepared_statement_cache_capacity(64);
        prepare::prepare(&mut store)?;
        Ok(store)
    }

    /// The reader behind [`Access::ReadOnly`] (`status`, `metrics`, `top`, `logs`).
    ///
    /// SQLite's rules for read-only WAL readers: a reader of a WAL database needs the `-wal` and
    /// `-shm` files and creates them when missing (and, being read-only, cannot remove them). So
    /// a WAL file with no `-wal` beside it (all its content is in the main file) is first checked
    /// through an `immutable` connection, which creates nothing: a foreign WAL database is
    /// refused before anything is created next to it. Only exactly's own database may get the
    /// two (empty) side files a writer would create anyway.
    fn open_reader(path: &str) -> Result<Store> {
        refuse_unusable(path)?;
        let file = std::path::Path::new(path);
        if !file.exists() {
            return Err(Error::not_found(
                exactly_words::Missing::Database,
                format!(
                    "database {path} does not exist (read commands never create one; exactly init does)"
                ),
            ));
        }
        if !file.is_file() {
            return Err(Error::Store(format!("database {path} is not a file")));
        }
        let header = read_header(path)?;
        if !header.is_empty() && !header.starts_with(b"SQLite format 3\0") {
            return Err(Error::Foreign {
                message: format!("{path} is not a SQLite database"),
            });
        }
        let wal_mode = header.get(18) == Some(&2);
        let wal_exists = std::path::Path::new(&format!("{path}-wal")).exists();
        if wal_mode && !wal_exists {
            let probe = Store::connect_read_only(path, true)?;
            prepare::check_read_only(&probe)?;
        }
        match Store::connect_read_only(path, false)
            .and_then(|s| prepare::check_read_only(&s).map(|()| s))
        {
            Ok(store) => Ok(store),
            // A reader of a WAL database needs `-shm`; in a folder we may not write, SQLite cannot
            // create it. With no `-wal` file the main file holds everything: read it as immutable.
            Err(e) if wal_mode && !wal_exists && cannot_create_side_files(&e) => {
                let store = Store::connect_read_only(path, true)?;
                prepare::check_read_only(&store)?;
                Ok(store)
            }
            Err(e) => Err(e),
        }
    }

    fn connect_read_only(path: &str, immutable: bool) -> Result<Store> {
        let (target, flags) = if immutable {
            (
                format!("file:{}?immutable=1", uri_escape(path)),
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX
                    | OpenFlags::SQLITE_OPEN_URI,
            )
        } else {
            // No URI flag: the path is a path, whatever characters it holds.
            (
                path.to_string(),
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
        };
        let conn = Connection::open_with_flags(&target, flags).map_err(|e| open_error(path, e))?;
        Store::on_sqlite(conn, path, Access::ReadOnly)
    }

    /// Puts this connection's writes before the other writers of this process: a scheduler's
    /// firings, since a firing decided late is a run started late, while a run's end or a lease
    /// renewal recorded a few milliseconds later changes nothing.
    pub fn writes_first(&mut self) {
        self.writes_first = gate::Lane::Firings;
    }

    /// Puts this connection's writes before every other writer of the process: the lease
    /// renewals that keep running commands alive.
    pub fn renewals_first(&mut self) {
        self.writes_first = gate::Lane::Renewals;
    }

    /// Puts this connection's next writes before (true) or among (false) the process's others:
    /// a run's lease confirmation and its end go before gc, output and the like, after the
    /// scheduler's firings and the lease renewals.
    pub fn set_writes_first(&mut self, on: bool) {
        self.writes_first = if on {
            gate::Lane::Ends
        } else {
            gate::Lane::Others
        };
    }

    /// The next write commits and then fails as if the server's reply to COMMIT never arrived
    /// (a fault point, see [`exactly_words::fault`]): on PostgreSQL the connection is cut after the
    /// commit and its error returned; on SQLite, where no reply travels, the same error case is
    /// returned after the commit. The caller's retry then meets its own committed write.
    pub(crate) fn lose_next_reply(&mut self) {
        self.lose_reply = true;
    }

    /// The database's path or URL, as it was opened (a PostgreSQL password shown as `***`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How to open another handle on this database, exactly as this one was opened (a
    /// PostgreSQL URL's password included).
    pub fn opener(&self) -> StoreOpener {
        self.opener.clone()
    }

    /// The database's own identity, whatever its spelling: a SQLite file's device and inode
    /// (`/x/db`, `/x/./db` and a link to it are one), a PostgreSQL cluster's system identifier
    /// with the database and schema. Runs' commands carry it (`EXACTLY_DB_ID`), so what a run
    /// left behind is found by identity, never by the string a scheduler was given.
    pub fn identity(&mut self) -> Result<String> {
        if let Conn::Lite(_) = self.conn {
            return file_identity(&self.path);
        }
        self.read(|tx| {
            tx.one(
                "SELECT (SELECT system_identifier::text FROM pg_control_system())
                   || ':' || current_database() || ':' || current_schema()",
                args![],
                |r| r.get::<String>(0),
            )
        })
        .map(|id| format!("pg:{id}"))
    }

    /// Turns a database error into one clear sentence naming the database.
    pub(crate) fn err(&self, e: DbError) -> Error {
        let path = &self.path;
        let e = match e {
            DbError::Lite(e) => e,
            DbError::NoRows => rusqlite::Error::QueryReturnedNoRows,
            e @ DbError::Pg(_) => return pg::error(path, self.busy_ms, e),
            e => {
                return e
                    .refusal(path)
                    .unwrap_or_else(|| Error::Store(e.to_string()))
            }
        };
        lite_error(path, self.busy_ms, e)
    }

    /// Runs `f` in a write transaction and commits it: `BEGIN IMMEDIATE` on SQLite, a
    /// `SERIALIZABLE` transaction on PostgreSQL (which may run `f` again after a serialization
    /// failure, so `f` only reads and writes the database).
    pub fn write<T>(&mut self, mut f: impl FnMut(&Tx<'_>) -> DbResult<T>) -> Result<T> {
        let lose_reply = std::mem::take(&mut self.lose_reply);
        let conn = match &mut self.conn {
            Conn::Pg(db) => {
                let r = db.transact(pg::WRITE, &mut f, lose_reply);
                return r.map_err(|e| self.err(e));
            }
            Conn::Lite(c) => c,
        };
        // One writer at a time within this process, queued on a lock that wakes the next
        // waiter the moment it is free: SQLite's busy handler polls with sleeps growing to
        // 100 ms, so a scheduler racing its own hundred runs for the write lock would lose for
        // seconds. Other processes still meet the busy timeout inside SQLite.
        let Some(_turn) = gate::Turn::take(self.writes_first, Duration::from_millis(self.busy_ms))
        else {
            return Err(Error::Busy {
                message: format!(
                    "database {} is locked: \
                     another writer of this process held it longer than the busy timeout ({} ms)",
                    self.path, self.busy_ms
                ),
                source: None,
            });
        };
        let result = (|| {
            let tx = db::LiteWrite::begin(conn)?;
            let out = f(&Tx::lite(tx.0))?;
            tx.commit()?;
            if lose_reply {
                exactly_words::fault::point(exactly_words::fault::Point::FinishReplyLost);
                return Err(DbError::Other(
                    "the reply to COMMIT was lost (fault point finish_reply_lost)".into(),
                ));
            }
            Ok(out)
        })();
        result.map_err(|e| self.err(e))
    }

    /// [`Store::write`], run at most `tries` times on PostgreSQL: `None` when every try failed
    /// for conflicting with concurrent transactions (40001, 40P01), which is no outage (the
    /// server answered) and where a smaller transaction may pass. SQLite has one writer at a
    /// time, so nothing conflicts there: as [`Store::write`].
    pub(crate) fn write_or_conflict<T>(
        &mut self,
        tries: u32,
        mut f: impl FnMut(&Tx<'_>) -> DbResult<T>,
    ) -> Result<Option<T>> {
        if let Conn::Pg(db) = &mut self.conn {
            let lose_reply = std::mem::take(&mut self.lose_reply);
            return match db.transact_tries(pg::WRITE, &mut f, lose_reply, tries.max(1)) {
                Ok(out) => Ok(Some(out)),
                Err(e) if pg::conflicted(&e) => Ok(None),
                Err(e) => Err(self.err(e)),
            };
        }
        self.write(f).map(Some)
    }

    /// [`Store::write`] for writes that are each a compare-and-set on one row (a lease renewal
    /// names its token): on PostgreSQL at `READ COMMITTED`, where such an update re-reads the row
    /// it waited for, so hundreds of them in one transaction never fail for serialization.
    pub(crate) fn write_cas<T>(&mut self, mut f: impl FnMut(&Tx<'_>) -> DbResult<T>) -> Result<T> {
        if let Conn::Pg(db) = &mut self.conn {
            let r = db.transact(pg::READ_COMMITTED, &mut f, false);
            return r.map_err(|e| self.err(e));
        }
        self.write(f)
    }

    /// Runs `f` in a short read transaction (one consistent view, no write lock).
    pub(crate) fn read<T>(&mut self, mut f: impl FnMut(&Tx<'_>) -> DbResult<T>) -> Result<T> {
        let conn = match &mut self.conn {
            Conn::Pg(db) => {
                let r = db.read(&mut f);
                return r.map_err(|e| self.err(e));
            }
            Conn::Lite(c) => c,
        };
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
            let out = f(&Tx::lite(&tx))?;
            tx.finish()?;
            Ok(out)
        })();
        result.map_err(|e| self.err(e))
    }
}

/// A SQLite file's identity (see [`Store::identity`]).
fn file_identity(path: &str) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|e| Error::io(format!("database {path}: {e}"), e))?;
    Ok(format!("sqlite:{}:{}", m.dev(), m.ino()))
}

/// The identity of the database `db` names, opening no SQLite connection: a process that holds
/// the file open for writing must not open and close a second one beside it only to ask (the
/// close of a connection that takes no locks drops the process's locks on the file).
pub fn identity_of(db: &str) -> Result<String> {
    if pg::is_url(db) {
        return Store::open_at(db, Access::ReadOnly)?.identity();
    }
    file_identity(db)
}

/// Paths no command accepts: an empty path or an in-memory database (it would vanish with the
/// process).
fn refuse_unusable(path: &str) -> Result<()> {
    check_shareable(path)
}

/// The first 100 bytes (SQLite's header), or fewer for a shorter file.
fn read_header(path: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("cannot open database {path}: {e}"), e))?;
    let mut buf = Vec::with_capacity(100);
    f.by_ref()
        .take(100)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(format!("cannot read database {path}: {e}"), e))?;
    Ok(buf)
}

/// Escapes a path for a `file:` URI.
fn uri_escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

/// Reads a TEXT column without failing on invalid UTF-8 or an unexpected type: what another
/// program wrote into the ledger must never crash a reader.
pub(crate) fn text(row: &Row<'_>, idx: usize) -> DbResult<Option<String>> {
    use db::Value;
    Ok(match row.value(idx)? {
        Value::Null => None,
        Value::Text(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Value::Int(i) => Some(i.to_string()),
        Value::Real(f) => Some(f.to_string()),
    })
}

pub(crate) fn text_or_empty(row: &Row<'_>, idx: usize) -> DbResult<String> {
    Ok(text(row, idx)?.unwrap_or_default())
}

/// Reads an INTEGER column leniently (NULL or non-numeric text becomes None).
pub(crate) fn int(row: &Row<'_>, idx: usize) -> DbResult<Option<i64>> {
    use db::Value;
    Ok(match row.value(idx)? {
        Value::Int(i) => Some(i),
        Value::Real(f) => Some(f as i64),
        Value::Text(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        Value::Null => None,
    })
}

/// Event kinds without an all-time counter: no reader asks for one (`status`, `metrics`, the
/// dashboard and `exactly doctor` read the counters of suppressed, fenced, missed, … and the
/// ledger's own rows for what is done), and an effect's `done` is the one event every
/// lifecycle writes: its counter was a page of its own in each lifecycle's last commit.
const UNCOUNTED: &[EventKind] = &[EventKind::EffectDone];

/// Appends one event and bumps its all-time counter (but for the kinds in `UNCOUNTED`),
/// inside the caller's transaction.
pub fn record_event(tx: &Tx<'_>, ev: &NewEvent<'_>) -> DbResult<()> {
    let at = tx.now(ev.at);
    tx.exec(
        "INSERT INTO exactly_events (at, kind, job_key, effect_key, fencing_token, actor, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        args![
            at,
            &ev.kind,
            ev.job_key,
            ev.effect_key,
            ev.token,
            ev.actor,
            ev.detail
        ],
    )?;
    if UNCOUNTED.contains(&ev.kind) {
        return Ok(());
    }
    tx.exec(
        "INSERT INTO exactly_counters (kind, job_key, n) VALUES (?1, ?2, 1)
         ON CONFLICT(kind, job_key) DO UPDATE SET n = exactly_counters.n + 1",
        args![&ev.kind, ev.job_key.unwrap_or("")],
    )?;
    Ok(())
}

/// An event about to be appended.
#[derive(Debug, Default, Clone)]
pub struct NewEvent<'a> {
    /// When it happened: the caller's `now` (the store reads no clock).
    pub(crate) at: &'a str,
    pub(crate) kind: EventKind,
    pub(crate) job_key: Option<&'a str>,
    pub(crate) effect_key: Option<&'a str>,
    pub(crate) token: Option<i64>,
    pub(crate) actor: Option<&'a str>,
    pub(crate) detail: Option<&'a str>,
}

impl<'a> NewEvent<'a> {
    pub fn new(kind: EventKind, at: &'a str) -> Self {
        NewEvent {
            at,
            kind,
            ..Default::default()
        }
    }
    pub fn job(mut self, job: &'a str) -> Self {
        self.job_key = Some(job);
        self
    }
    pub(crate) fn effect(mut self, key: &'a str) -> Self {
        self.effect_key = Some(key);
        self
    }
    pub(crate) fn token(mut self, token: i64) -> Self {
        self.token = Some(token);
        self
    }
    pub(crate) fn actor(mut self, actor: &'a str) -> Self {
        self.actor = Some(actor);
        self
    }
    pub(crate) fn detail(mut self, detail: &'a str) -> Self {
        self.detail = Some(detail);
        self
    }
}

/// Reads a state column leniently (see [`text`]): NULL reads as the empty word.
pub(crate) fn word<T: From<String>>(row: &Row<'_>, idx: usize) -> DbResult<T> {
    Ok(T::from(text(row, idx)?.unwrap_or_default()))
}

/// Whether this process may write the database at `path`: the file, and its folder or both of
/// WAL's side files (a writer needs `-wal` and `-shm`). Asked of the OS (`access`), so it
/// follows the real uid, groups and ACLs.
pub fn writable(path: &str) -> bool {
    let can_write = |p: &std::path::Path| {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
            // SAFETY: a NUL-terminated path; access only reads it.
            .map(|c| unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0)
            .unwrap_or(false)
    };
    let file = std::path::Path::new(path);
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let side = |suffix: &str| std::path::PathBuf::from(format!("{path}{suffix}"));
    can_write(file) && (can_write(dir) || (can_write(&side("-wal")) && can_write(&side("-shm"))))
}

#[cfg(test)]
mod opener_tests {
    use super::*;

    /// The lease watcher opens its own handle from the opener: it must reach the database the
    /// first handle did, a PostgreSQL URL's password included, and never show that password.
    #[test]
    fn the_opener_keeps_the_url_as_given_and_shows_no_password() {
        let url = "postgres://exactly:s3cret@127.0.0.1:5432/exactly";
        let o = StoreOpener {
            at: url.to_string(),
            access: Access::Write,
            prepared: None,
        };
        assert_eq!(o.at, url, "the password is kept for the connection");
        assert!(!format!("{o:?}").contains("s3cret"), "{o:?}");
        assert!(!o.shown().contains("s3cret"), "{}", o.shown());

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.db").display().to_string();
        let store = Store::open(&path).expect("open");
        let again = store.opener().open().expect("open again");
        assert_eq!(again.path(), store.path());
        let reader = Store::open_read_only(&path).expect("read only");
        assert_eq!(reader.opener().access, Access::ReadOnly);
    }
}

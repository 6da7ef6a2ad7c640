//! One way for the store's operations to speak SQL to either database: a transaction ([`Tx`])
//! that runs a statement with [`Arg`]s and hands back [`Row`]s, on SQLite (rusqlite) or
//! PostgreSQL (the `postgres` client). The operations are written once; where the two dialects
//! differ, an operation asks [`Tx::is_pg`] and says both.
use std::borrow::Cow;
use std::cell::RefCell;

/// A statement's parameter.
#[derive(Debug, Clone)]
pub(crate) enum Arg<'a> {
    Null,
    Int(i64),
    Text(Cow<'a, str>),
    Bytes(&'a [u8]),
}

/// A value passed as a statement's parameter, borrowed (so a closure that may run again, as a
/// retried PostgreSQL transaction does, still has it).
pub(crate) trait ToArg {
    fn to_arg(&self) -> Arg<'_>;
}

impl ToArg for str {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(Cow::Borrowed(self))
    }
}
impl ToArg for String {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(Cow::Borrowed(self.as_str()))
    }
}
impl ToArg for [u8] {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Bytes(self)
    }
}
impl ToArg for Vec<u8> {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Bytes(self)
    }
}
impl ToArg for i64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(*self)
    }
}
impl ToArg for i32 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::from(*self))
    }
}
impl ToArg for u32 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::from(*self))
    }
}
impl ToArg for bool {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::from(*self))
    }
}
impl<T: ToArg> ToArg for Option<T> {
    fn to_arg(&self) -> Arg<'_> {
        self.as_ref().map_or(Arg::Null, ToArg::to_arg)
    }
}
impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Arg<'_> {
        (**self).to_arg()
    }
}

// The words of each state go into the database as text.
macro_rules! word_arg {
    ($($t:ty),*) => {$(
        impl ToArg for $t {
            fn to_arg(&self) -> Arg<'_> {
                Arg::Text(Cow::Borrowed(self.as_str()))
            }
        }
    )*};
}
word_arg!(
    crate::state::EffectState,
    crate::state::ApprovalState,
    crate::state::FiringState,
    crate::state::FiringKind,
    crate::state::RunOutcome,
    crate::state::EventKind
);

/// `args![a, b, …]`: a statement's parameters, in order (`?1`, `?2`, …), each borrowed.
macro_rules! args {
    ($($x:expr),* $(,)?) => {
        &[$($crate::store::db::ToArg::to_arg(&$x)),*][..]
    };
}
pub(crate) use args;

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        Ok(match self {
            Arg::Null => ToSqlOutput::Owned(Value::Null),
            Arg::Int(i) => ToSqlOutput::Owned(Value::Integer(*i)),
            Arg::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Arg::Bytes(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        })
    }
}

/// What went wrong speaking to the database.
#[derive(Debug)]
pub(crate) enum DbError {
    Lite(rusqlite::Error),
    Pg(postgres::Error),
    /// A statement expected to return a row returned none.
    NoRows,
    /// A value the store cannot use (a column of a type it does not read, a bad parameter).
    Other(String),
    /// The database's schema version, newer than this build understands.
    TooNew(i64),
    /// A table of another application under one of exactly's names (the sentence says which).
    Foreign(String),
    /// A value in a row that is not what its column holds (a time that is not a time): the
    /// sentence names the column and the value.
    Corrupt(String),
}

pub(crate) type DbResult<T> = Result<T, DbError>;

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::QueryReturnedNoRows => DbError::NoRows,
            e => DbError::Lite(e),
        }
    }
}
impl From<postgres::Error> for DbError {
    fn from(e: postgres::Error) -> Self {
        DbError::Pg(e)
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DbError::Lite(e) => write!(f, "{e}"),
            DbError::Pg(e) => match e.as_db_error() {
                Some(d) => write!(f, "{} ({})", d.message(), d.code().code()),
                None => write!(f, "{e}"),
            },
            DbError::NoRows => write!(f, "query returned no rows"),
            DbError::Other(s) | DbError::Foreign(s) | DbError::Corrupt(s) => write!(f, "{s}"),
            DbError::TooNew(v) => write!(
                f,
                "schema version {v}, newer than this exactly understands ({}); upgrade exactly",
                super::SCHEMA_VERSION
            ),
        }
    }
}

impl DbError {
    /// The error that is not the database client's, as one sentence naming the database
    /// `shown`; `None` for the client's own errors (each backend says those).
    pub(crate) fn refusal(&self, shown: &str) -> Option<crate::Error> {
        let message = format!("database {shown}: {}", self.to_string().replace('\n', " "));
        Some(match self {
            DbError::Other(_) => crate::Error::Store(message),
            DbError::Foreign(_) => crate::Error::Foreign { message },
            DbError::Corrupt(_) => crate::Error::Corrupt {
                message,
                source: None,
            },
            DbError::TooNew(found) => crate::Error::TooNew {
                message,
                found: *found,
                understood: super::SCHEMA_VERSION,
            },
            DbError::Lite(_) | DbError::Pg(_) | DbError::NoRows => return None,
        })
    }

    /// PostgreSQL's SQLSTATE, if the server sent one.
    pub(crate) fn sqlstate(&self) -> Option<&str> {
        match self {
            DbError::Pg(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }
}

/// `.optional()` on a statement that may find nothing.
pub(crate) trait Optional<T> {
    fn optional(self) -> DbResult<Option<T>>;
}
impl<T> Optional<T> for DbResult<T> {
    fn optional(self) -> DbResult<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(DbError::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// One value read from a row, whichever database it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'r> {
    Null,
    Int(i64),
    Real(f64),
    Text(Cow<'r, [u8]>),
}

/// A row of a result.
pub(crate) enum Row<'r> {
    Lite(&'r rusqlite::Row<'r>),
    Pg(&'r postgres::Row),
}

impl Row<'_> {
    /// Column `i` as it is stored.
    pub(crate) fn value(&self, i: usize) -> DbResult<Value<'_>> {
        match self {
            Row::Lite(r) => {
                use rusqlite::types::ValueRef;
                Ok(match r.get_ref(i)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::Int(n),
                    ValueRef::Real(f) => Value::Real(f),
                    ValueRef::Text(b) | ValueRef::Blob(b) => Value::Text(Cow::Borrowed(b)),
                })
            }
            Row::Pg(r) => super::pg::value(r, i),
        }
    }

    /// Column `i` as a `T` (strict: a NULL read as `i64` is an error, as in rusqlite).
    pub(crate) fn get<T: FromValue>(&self, i: usize) -> DbResult<T> {
        T::from_value(self.value(i)?)
    }
}

/// A Rust value read from a column.
pub(crate) trait FromValue: Sized {
    fn from_value(v: Value<'_>) -> DbResult<Self>;
}
impl FromValue for i64 {
    fn from_value(v: Value<'_>) -> DbResult<Self> {
        match v {
            Value::Int(i) => Ok(i),
            other => Err(DbError::Other(format!(
                "expected an integer, found {other:?}"
            ))),
        }
    }
}
impl FromValue for bool {
    fn from_value(v: Value<'_>) -> DbResult<Self> {
        Ok(i64::from_value(v)? != 0)
    }
}
impl FromValue for String {
    fn from_value(v: Value<'_>) -> DbResult<Self> {
        match v {
            Value::Text(b) => String::from_utf8(b.into_owned())
                .map_err(|e| DbError::Other(format!("invalid UTF-8 text: {e}"))),
            other => Err(DbError::Other(format!("expected text, found {other:?}"))),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: Value<'_>) -> DbResult<Self> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// A transaction on either database. Every store operation runs its statements through one.
pub(crate) struct Tx<'t> {
    inner: Inner<'t>,
}

enum Inner<'t> {
    Lite(&'t rusqlite::Connection),
    Pg {
        conn: RefCell<&'t mut super::pg::PgConn>,
        /// The server's clock at the start of this transaction (`now()`, which PostgreSQL keeps
        /// fixed for the whole transaction), as the store writes instants.
        now: String,
        /// The server's clock less this host's, read together at the transaction's start.
        shift: chrono::Duration,
    },
}

impl<'t> Tx<'t> {
    pub(crate) fn lite(conn: &'t rusqlite::Connection) -> Tx<'t> {
        Tx {
            inner: Inner::Lite(conn),
        }
    }

    pub(crate) fn pg(
        conn: &'t mut super::pg::PgConn,
        now: String,
        shift: chrono::Duration,
    ) -> Tx<'t> {
        Tx {
            inner: Inner::Pg {
                conn: RefCell::new(conn),
                now,
                shift,
            },
        }
    }

    /// Whether this is PostgreSQL (for the few statements the two dialects say differently).
    pub(crate) fn is_pg(&self) -> bool {
        matches!(self.inner, Inner::Pg { .. })
    }

    /// The instant this transaction acts at. On SQLite, the caller's `now` (every process on
    /// the host shares its clock). On PostgreSQL, the server's clock, whatever the client's says:
    /// leases and effects on several hosts are judged by one clock.
    pub(crate) fn now<'a>(&'a self, caller: &'a str) -> &'a str {
        match &self.inner {
            Inner::Lite(_) => caller,
            Inner::Pg { now, .. } => now,
        }
    }

    /// An instant the caller computed on this host's clock as "now + d" (a lease's end), moved
    /// to this transaction's clock: the server's now + d on PostgreSQL (a little less: the time
    /// between the caller reading its clock and the transaction starting), unchanged on SQLite.
    /// A released lease (before every instant) stays as it is.
    pub(crate) fn later(&self, at: &str) -> String {
        match &self.inner {
            Inner::Pg { shift, .. } if at != super::RELEASED => match crate::time::parse(at) {
                Some(t) => crate::time::fmt(t + *shift),
                None => at.to_string(),
            },
            _ => at.to_string(),
        }
    }

    /// Runs a statement; the number of rows it changed.
    pub(crate) fn exec(&self, sql: &str, args: &[Arg<'_>]) -> DbResult<usize> {
        match &self.inner {
            Inner::Lite(c) => Ok(c
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(args.iter()))?),
            Inner::Pg { conn, .. } => conn.borrow_mut().exec(sql, args),
        }
    }

    /// Calls `f` on each row `sql` returns, in order.
    pub(crate) fn each(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        mut f: impl FnMut(&Row<'_>) -> DbResult<()>,
    ) -> DbResult<()> {
        match &self.inner {
            Inner::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args.iter()))?;
                while let Some(r) = rows.next()? {
                    f(&Row::Lite(r))?;
                }
                Ok(())
            }
            Inner::Pg { conn, .. } => {
                let rows = conn.borrow_mut().query(sql, args)?;
                for r in &rows {
                    f(&Row::Pg(r))?;
                }
                Ok(())
            }
        }
    }

    /// Every row `sql` returns, each read by `f`.
    pub(crate) fn rows<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        mut f: impl FnMut(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Vec<T>> {
        let mut out = Vec::new();
        self.each(sql, args, |r| {
            out.push(f(r)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// The first row `sql` returns, read by `f`; [`DbError::NoRows`] when there is none (see
    /// [`Optional::optional`]).
    pub(crate) fn one<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        f: impl FnOnce(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<T> {
        match &self.inner {
            Inner::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args.iter()))?;
                match rows.next()? {
                    Some(r) => f(&Row::Lite(r)),
                    None => Err(DbError::NoRows),
                }
            }
            Inner::Pg { conn, .. } => {
                let rows = conn.borrow_mut().query(sql, args)?;
                match rows.first() {
                    Some(r) => f(&Row::Pg(r)),
                    None => Err(DbError::NoRows),
                }
            }
        }
    }
}

/// A SQLite write transaction begun and ended by cached statements: rusqlite's `Transaction`
/// parses `BEGIN IMMEDIATE` and `COMMIT` anew each time, two parses in every write. Rolled back
/// when dropped uncommitted (an error, a failed `COMMIT`, a panic).
pub(crate) struct LiteWrite<'c>(pub(crate) &'c rusqlite::Connection, bool);

impl<'c> LiteWrite<'c> {
    pub(crate) fn begin(conn: &'c rusqlite::Connection) -> rusqlite::Result<LiteWrite<'c>> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(LiteWrite(conn, false))
    }

    pub(crate) fn commit(mut self) -> rusqlite::Result<()> {
        self.0.prepare_cached("COMMIT")?.execute([])?;
        self.1 = true;
        Ok(())
    }
}

impl Drop for LiteWrite<'_> {
    fn drop(&mut self) {
        if !self.1 && !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

/// Set in a scheduler's process once its database is open: from then on a SQLite database is
/// opened without creating it, so a run (or the heartbeat) whose file was deleted fails
/// instead of starting a fresh, empty database where the old one was.
static NO_NEW_DATABASES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, this process opens only existing SQLite databases.
pub(crate) fn refuse_new_databases() {
    NO_NEW_DATABASES.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether opening a SQLite database may create its file.
pub(crate) fn may_create() -> bool {
    !NO_NEW_DATABASES.load(std::sync::atomic::Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::super::{record_event, NewEvent, Store};
    use super::DbError;
    use crate::state::EventKind;

    /// A write that fails after writing, or panics, leaves nothing behind and the connection
    /// ready for the next write (the guard rolls back, as rusqlite's `Transaction` did).
    #[test]
    fn a_failed_or_panicking_write_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("w.db").to_str().unwrap()).unwrap();
        let count = |store: &mut Store| {
            store
                .read(|tx| {
                    tx.one("SELECT count(*) FROM exactly_events", args![], |r| {
                        r.get::<i64>(0)
                    })
                })
                .unwrap()
        };
        let failed = store.write(|tx| {
            record_event(
                tx,
                &NewEvent::new(EventKind::JobPaused, "2026-01-01T00:00:00.000Z"),
            )?;
            Err::<(), _>(DbError::Other("stop here".into()))
        });
        assert!(failed.is_err());
        assert_eq!(count(&mut store), 0);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = store.write(|tx| -> super::DbResult<()> {
                record_event(
                    tx,
                    &NewEvent::new(EventKind::JobPaused, "2026-01-01T00:00:00.000Z"),
                )?;
                panic!("mid-write");
            });
        }));
        assert!(panicked.is_err());
        assert_eq!(count(&mut store), 0);
        store
            .write(|tx| {
                record_event(
                    tx,
                    &NewEvent::new(EventKind::JobPaused, "2026-01-01T00:00:00.000Z"),
                )
            })
            .unwrap();
        assert_eq!(count(&mut store), 1);
    }
}

//! The values a statement takes and gives on either database: [`Arg`]s in, [`Row`]s of
//! [`Value`]s out, and the store's own error ([`DbError`]). Below the transaction (`db.rs`) and
//! the PostgreSQL connection (`pg_conn.rs`), which both speak them.
use postgres::types::Type;
use std::borrow::Cow;

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
    exactly_words::state::EffectState,
    exactly_words::state::ApprovalState,
    exactly_words::state::FiringState,
    exactly_words::state::FiringKind,
    exactly_words::state::RunOutcome,
    exactly_words::state::EventKind
);

/// `args![a, b, …]`: a statement's parameters, in order (`?1`, `?2`, …), each borrowed.
macro_rules! args {
    ($($x:expr),* $(,)?) => {
        &[$($crate::db::ToArg::to_arg(&$x)),*][..]
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
pub enum DbError {
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
    pub(crate) fn refusal(&self, shown: &str) -> Option<exactly_words::Error> {
        let message = format!("database {shown}: {}", self.to_string().replace('\n', " "));
        Some(match self {
            DbError::Other(_) => exactly_words::Error::Store(message),
            DbError::Foreign(_) => exactly_words::Error::Foreign { message },
            DbError::Corrupt(_) => exactly_words::Error::Corrupt {
                message,
                source: None,
            },
            DbError::TooNew(found) => exactly_words::Error::TooNew {
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
            Row::Pg(r) => value(r, i),
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

//! The library's errors: what happened, each with the error beneath it when there is one, and
//! the one mapping of each to the process's exit code ([`Error::exit_code`]).
//!
//! Each variant's text is the whole one-line message the command line prints (`exactly: …`);
//! the error beneath it, when there is one, is kept as [`std::error::Error::source`], so a caller
//! decides by variant and by the source's own code, never by reading the message.

/// Errors that are not outcomes: bad input, a database that cannot be used, a tool missing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad usage or input (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The database refused an operation for a reason of its own state, with no error beneath
    /// it and no variant of its own (exit 1).
    #[error("{0}")]
    Store(String),
    /// Something a command needs is not there: `what` says which, for a caller to branch on
    /// (exit 1; a job named that is not there is bad usage, exit 2).
    #[error("{message}")]
    NotFound {
        /// What is missing.
        what: Missing,
        /// The one-line message the command line prints.
        message: String,
    },
    /// SQLite failed (exit 1).
    #[error("{message}")]
    Sqlite {
        /// The one-line message the command line prints.
        message: String,
        /// The client's error beneath it.
        #[source]
        source: rusqlite::Error,
    },
    /// PostgreSQL failed, or could not be reached (exit 1).
    #[error("{message}")]
    Postgres {
        /// The one-line message the command line prints.
        message: String,
        /// The client's error beneath it.
        #[source]
        source: postgres::Error,
    },
    /// Another process held the database's lock past the busy timeout, or concurrent writers
    /// kept conflicting: worth retrying (exit 1).
    #[error("{message}")]
    Busy {
        /// The one-line message the command line prints.
        message: String,
        /// The client's error beneath it.
        #[source]
        source: Option<DbSource>,
    },
    /// The file is a damaged database, or a row holds what it must not (exit 1).
    #[error("{message}")]
    Corrupt {
        /// The one-line message the command line prints.
        message: String,
        /// The client's error beneath it.
        #[source]
        source: Option<rusqlite::Error>,
    },
    /// The database is not exactly's: not a SQLite file, or tables of another application under
    /// exactly's names (exit 1).
    #[error("{message}")]
    Foreign {
        /// The one-line message the command line prints.
        message: String,
    },
    /// The database's schema is newer than this exactly understands (exit 1).
    #[error("{message}")]
    TooNew {
        /// The one-line message the command line prints.
        message: String,
        /// The schema version the database has.
        found: i64,
        /// The newest schema version this build understands.
        understood: i64,
    },
    /// A file or a process could not be used (exit 1).
    #[error("{message}")]
    Io {
        /// The one-line message the command line prints.
        message: String,
        /// The client's error beneath it.
        #[source]
        source: std::io::Error,
    },
    /// Something this machine lacks (a tool, a library such as libfaketime): not the caller's
    /// mistake (exit 1).
    #[error("{0}")]
    Environment(String),
}

/// What an [`Error::NotFound`] found missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missing {
    /// The database file (a read command never creates one).
    Database,
    /// exactly's tables in a database that exists.
    Tables,
    /// A run, by its id, or any run of a job.
    Run,
    /// A job, by its name: none is registered (or, for `doctor`, checked) under it. Naming a
    /// job that is not there is bad usage, so this one exits 2 as it always has.
    Job,
}

/// The database client's error beneath an [`Error::Busy`].
#[derive(Debug, thiserror::Error)]
pub enum DbSource {
    /// SQLite's.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL's.
    #[error(transparent)]
    Postgres(#[from] postgres::Error),
}

impl Error {
    /// The process's exit code for this error: the one place errors meet the exit code table
    /// (`exactly --help`, "EXIT STATUS"): 2 for bad usage or input, 1 for every other error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_)
            | Error::NotFound {
                what: Missing::Job, ..
            } => 2,
            Error::Store(_)
            | Error::NotFound { .. }
            | Error::Sqlite { .. }
            | Error::Postgres { .. }
            | Error::Busy { .. }
            | Error::Corrupt { .. }
            | Error::Foreign { .. }
            | Error::TooNew { .. }
            | Error::Io { .. }
            | Error::Environment(_) => 1,
        }
    }

    /// Whether another process held a lock past the busy timeout (worth retrying).
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// What is missing, when this error says something a command needs is not there.
    pub fn missing(&self) -> Option<Missing> {
        match self {
            Error::NotFound { what, .. } => Some(*what),
            _ => None,
        }
    }

    /// A [`Error::NotFound`]: `what` is missing, as `message` says.
    pub fn not_found(what: Missing, message: impl Into<String>) -> Error {
        Error::NotFound {
            what,
            message: message.into(),
        }
    }

    /// A row or file that holds what it must not, with no client error beneath it.
    pub fn corrupt(message: impl Into<String>) -> Error {
        Error::Corrupt {
            message: message.into(),
            source: None,
        }
    }

    /// An I/O error with the sentence that says what was being done.
    pub fn io(message: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            message: message.into(),
            source,
        }
    }

    /// A SQLite error with the sentence that says what was being done.
    pub fn sqlite(message: impl Into<String>, source: rusqlite::Error) -> Error {
        Error::Sqlite {
            message: message.into(),
            source,
        }
    }

    /// SQLite's own code for the failure beneath this error, if SQLite failed.
    pub fn sqlite_code(&self) -> Option<rusqlite::ErrorCode> {
        let source = match self {
            Error::Sqlite { source, .. } => source,
            Error::Corrupt {
                source: Some(source),
                ..
            } => source,
            Error::Busy {
                source: Some(DbSource::Sqlite(source)),
                ..
            } => source,
            _ => return None,
        };
        source.sqlite_error_code()
    }
}

/// An I/O error met with no more to say: its own text is the message.
impl From<std::io::Error> for Error {
    fn from(source: std::io::Error) -> Self {
        Error::Io {
            message: source.to_string(),
            source,
        }
    }
}

/// The library's result: its error is [`Error`] unless said otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    fn lite_failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn each_variant_has_its_exit_code() {
        let io = || std::io::Error::other("disk gone");
        let cases: Vec<(Error, i32)> = vec![
            (Error::Usage("bad".into()), 2),
            (Error::Store("no such job".into()), 1),
            (Error::not_found(Missing::Run, "no run r1"), 1),
            (Error::not_found(Missing::Job, "no job named j"), 2),
            (Error::sqlite("database x: boom", lite_failure(1)), 1),
            (
                Error::Busy {
                    message: "locked".into(),
                    source: None,
                },
                1,
            ),
            (
                Error::Corrupt {
                    message: "corrupt".into(),
                    source: None,
                },
                1,
            ),
            (
                Error::Foreign {
                    message: "not ours".into(),
                },
                1,
            ),
            (
                Error::TooNew {
                    message: "newer".into(),
                    found: 99,
                    understood: 1,
                },
                1,
            ),
            (Error::io("cannot read x", io()), 1),
            (Error::from(io()), 1),
            (Error::Environment("libfaketime not found".into()), 1),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_code(), code, "{e:?}");
        }
    }

    #[test]
    fn the_message_is_the_sentence_and_the_source_is_kept() {
        let e = Error::sqlite(
            "database x is read-only",
            lite_failure(rusqlite::ffi::SQLITE_READONLY),
        );
        assert_eq!(e.to_string(), "database x is read-only");
        let source = e.source().expect("a source");
        assert!(
            source.downcast_ref::<rusqlite::Error>().is_some(),
            "{source:?}"
        );
        assert_eq!(e.sqlite_code(), Some(rusqlite::ErrorCode::ReadOnly));
        let io = Error::io("cannot read x: gone", std::io::Error::other("gone"));
        assert!(io.source().is_some());
        assert_eq!(Error::Usage("u".into()).sqlite_code(), None);
    }
}

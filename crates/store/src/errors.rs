//! The store's errors as the library's [`Error`]s: a SQLite error's kind read from its code,
//! never from its text.
use super::SCHEMA_VERSION;
use exactly_words::Error;
use rusqlite::ErrorCode;

/// A SQLite error's text on one line.
fn brief(e: &rusqlite::Error) -> String {
    e.to_string().replace('\n', " ")
}

/// A SQLite error as one sentence naming the database, of the kind its code says.
pub(super) fn lite_error(path: &str, busy_ms: u64, e: rusqlite::Error) -> Error {
    let message = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            return Error::Busy {
                message: format!(
                    "database {path} is locked: \
                     another process held a write lock longer than the busy timeout ({busy_ms} ms)"
                ),
                source: Some(e.into()),
            }
        }
        Some(ErrorCode::NotADatabase) => {
            return Error::Foreign {
                message: format!("{path} is not a SQLite database"),
            }
        }
        Some(ErrorCode::DatabaseCorrupt) => {
            return Error::Corrupt {
                message: format!("database {path} is corrupt (malformed disk image)"),
                source: Some(e),
            }
        }
        Some(ErrorCode::ReadOnly) => format!("database {path} is read-only"),
        Some(ErrorCode::DiskFull) => format!("disk full writing {path}"),
        _ => format!("database {path}: {}", brief(&e)),
    };
    Error::sqlite(message, e)
}

/// SQLite's failure to open the database `path`, as one sentence (see [`lite_error`]).
pub(super) fn open_error(path: &str, e: rusqlite::Error) -> Error {
    Error::sqlite(format!("cannot open database {path}: {}", brief(&e)), e)
}

/// Whether opening failed because SQLite could not create or open the `-wal`/`-shm` files:
/// SQLite's own code, `SQLITE_CANTOPEN` or `SQLITE_READONLY`.
pub(super) fn cannot_create_side_files(e: &Error) -> bool {
    matches!(
        e.sqlite_code(),
        Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly)
    )
}

/// A SQLite database whose schema version `found` is newer than this build's.
pub(super) fn too_new(path: &str, found: i64) -> Error {
    Error::TooNew {
        message: format!(
            "database {path} has schema version {found}, newer than this exactly understands \
             ({SCHEMA_VERSION}); upgrade exactly"
        ),
        found,
        understood: SCHEMA_VERSION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// SQLite's own failure to open a file (`SQLITE_CANTOPEN`), as a reader of a WAL database
    /// meets it when it cannot create `-shm`: the read-only fallback is chosen by that code, and
    /// the same words in a message of another kind choose nothing.
    #[test]
    fn side_files_are_judged_by_sqlites_code_not_the_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("missing").join("exactly.db");
        let path = path.to_str().expect("utf8");
        let e = super::super::Store::connect_read_only(path, false)
            .err()
            .expect("no such folder");
        assert_eq!(e.sqlite_code(), Some(ErrorCode::CannotOpen), "{e:?}");
        assert!(cannot_create_side_files(&e), "{e}");
        let source = e.source().expect("the rusqlite error beneath");
        assert!(
            source.downcast_ref::<rusqlite::Error>().is_some(),
            "{source:?}"
        );
        assert!(e.to_string().starts_with("cannot open database "), "{e}");
        let read_only = lite_error(
            "x.db",
            100,
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
                None,
            ),
        );
        assert_eq!(read_only.to_string(), "database x.db is read-only");
        assert!(cannot_create_side_files(&read_only));
        let words = Error::Store("database x.db: unable to open, is read-only".into());
        assert!(!cannot_create_side_files(&words));
    }

    #[test]
    fn a_busy_corrupt_or_foreign_file_is_its_own_kind() {
        let failure = |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        let busy = lite_error("x.db", 5, failure(rusqlite::ffi::SQLITE_BUSY));
        assert!(busy.is_busy(), "{busy:?}");
        assert_eq!(busy.sqlite_code(), Some(ErrorCode::DatabaseBusy));
        let corrupt = lite_error("x.db", 5, failure(rusqlite::ffi::SQLITE_CORRUPT));
        assert!(matches!(corrupt, Error::Corrupt { .. }), "{corrupt:?}");
        let foreign = lite_error("x.db", 5, failure(rusqlite::ffi::SQLITE_NOTADB));
        assert_eq!(foreign.to_string(), "x.db is not a SQLite database");
        assert!(matches!(
            too_new("x.db", 99),
            Error::TooNew { found: 99, .. }
        ));
    }
}

//! A stored time that is not a time, read where it used to be guessed: each read says it is
//! the database's corruption, naming the column and the value, in one line.
use crate::store::Store;
use exactly_words::Error;

/// Sorts like a time (so a `WHERE at < ?` still finds it), parses as none: month 13.
const BAD: &str = "2026-13-01T00:00:00.000Z";

/// A fresh database at `dir`, its raw connection for rows written by hand, and its path.
fn fresh(dir: &tempfile::TempDir) -> (rusqlite::Connection, String) {
    let path = dir.path().join("bad.db");
    let path = path.to_str().unwrap().to_string();
    drop(Store::open(&path).unwrap());
    (rusqlite::Connection::open(&path).unwrap(), path)
}

/// `got` is the one-line corruption of `column`.
fn assert_corrupt<T: std::fmt::Debug>(got: exactly_words::Result<T>, column: &str) {
    match got {
        Err(Error::Corrupt { message, .. }) => {
            assert!(
                message.ends_with(&format!("{column} holds \"{BAD}\", not a time")),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
        other => panic!("a bad {column} read as {other:?}"),
    }
}

/// The approval's age was 0 and the dashboard and the notifier used the text as found.
#[test]
fn a_bad_requested_at_is_corrupt_not_age_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, path) = fresh(&dir);
    raw.execute(
        "INSERT INTO exactly_approvals (effect_key, job_key, state, requested_at) \
         VALUES ('k', 'j', 'pending', ?1)",
        [BAD],
    )
    .unwrap();
    let mut store = Store::open_read_only(&path).unwrap();
    let read = store.reading(
        exactly_words::time::now(),
        crate::jobs::SCHEDULER_DEAD_AFTER,
    );
    assert_corrupt(read, "exactly_approvals.requested_at");
}

/// The lease's time left was zero: a lease read as run out, by the runner's and the effect's
/// checks of it.
#[test]
fn a_bad_lease_until_is_corrupt_not_no_time_left() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, path) = fresh(&dir);
    raw.execute(
        "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at) \
         VALUES ('j', 'me', 1, ?1, '2026-01-01T00:00:00.000Z')",
        [BAD],
    )
    .unwrap();
    let mut store = Store::open(&path).unwrap();
    let left = crate::lease::get_with_left(&mut store, &exactly_words::JobName::from("j"));
    assert_corrupt(left, "job_lease.lease_until");
}

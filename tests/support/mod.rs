//! The one support module of the integration tests: the binary under test, SQL read straight
//! from a real database file (errors propagate: a typo or a locked database fails the test, it
//! never reads as 0), and the helpers of each family of tests (`cli`, `runner`, `tui`).
#![allow(dead_code)]
pub mod cli;
pub mod runner;
pub mod tui;

use std::path::Path;
use std::time::Duration;

/// The binary under test: this build's, or `EXACTLY_TEST_BIN` (to run a test against another
/// build, e.g. the code before a fix, and see it fail).
pub fn bin() -> String {
    std::env::var("EXACTLY_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_exactly").to_string())
}

/// A connection to the database file, waiting for writers rather than failing at once.
pub fn conn(db: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(db).expect("open db");
    c.busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    c
}

/// The one integer `sql` selects. Any SQL error fails the test.
pub fn count(db: &Path, sql: &str) -> i64 {
    conn(db)
        .query_row(sql, [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The first column of every row `sql` selects, as text. Any SQL error fails the test.
pub fn strings(db: &Path, sql: &str) -> Vec<String> {
    let c = conn(db);
    let mut stmt = c.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows
}

/// A file's text; a file not written yet reads as empty, any other read error fails the test.
pub fn read_or_empty(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => panic!("reading {}: {e}", path.display()),
    }
}

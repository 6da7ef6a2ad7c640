//! The one support module of the integration tests: the binary under test, SQL read straight
//! from a real database, a SQLite file or a PostgreSQL schema (errors propagate: a typo or a
//! locked database fails the test, it never reads as 0), which of the two a test's sites use
//! (`backend`, `on_both_backends!`), and the helpers of each family of tests (`cli`,
//! `runner`; the dashboard's are in `src/tui/tests/`).
#![allow(dead_code)]
pub mod backend;
pub mod cli;
pub mod cluster;
pub mod http;
pub mod pair;
pub mod pg_wire;
pub mod runner;

use std::path::Path;
use std::time::{Duration, Instant};

/// The binary under test: this build's, or `EXACTLY_TEST_BIN` (to run a test against another
/// build, e.g. the code before a fix, and see it fail).
pub fn bin() -> String {
    std::env::var("EXACTLY_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_exactly").to_string())
}

/// The PostgreSQL URL `db` holds, if it is one (else it is a SQLite file).
pub fn pg_url_of(db: &Path) -> Option<&str> {
    db.to_str().filter(|s| backend::is_pg(s))
}

/// A connection to the database file, waiting for writers rather than failing at once.
/// SQLite only: a test that needs it is SQLite-only (outside `on_both_backends!`).
pub fn conn(db: &Path) -> rusqlite::Connection {
    if let Some(url) = pg_url_of(db) {
        panic!(
            "a SQLite connection to the PostgreSQL database {}: keep this test SQLite-only \
             (outside on_both_backends!) or use support::execute/count/strings",
            backend::redact(url)
        );
    }
    let c = rusqlite::Connection::open(db).expect("open db");
    c.busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    c
}

/// Runs `sql` (one or more statements, no parameters) on either backend. Any error fails the
/// test.
pub fn execute(db: &Path, sql: &str) {
    match pg_url_of(db) {
        Some(url) => backend::with_client(url, |c| c.batch_execute(sql))
            .unwrap_or_else(|e| panic!("{sql}: {}", pg::describe(&e))),
        None => conn(db)
            .execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}")),
    }
}

/// The one integer `sql` selects. Any SQL error fails the test.
pub fn count(db: &Path, sql: &str) -> i64 {
    if let Some(url) = pg_url_of(db) {
        return pg::count(url, sql).unwrap_or_else(|e| panic!("{sql}: {}", e.message));
    }
    conn(db)
        .query_row(sql, [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The first column of every row `sql` selects, as text. Any SQL error fails the test.
pub fn strings(db: &Path, sql: &str) -> Vec<String> {
    if let Some(url) = pg_url_of(db) {
        return pg::strings(url, sql).unwrap_or_else(|e| panic!("{sql}: {}", e.message));
    }
    let c = conn(db);
    let mut stmt = c.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows
}

/// How often [`wait_for`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// Waits until `cond` holds, looking every 20 ms; fails the test naming `what` (what was
/// awaited: "the command to write sh.pid") once `within` has passed without it. For something
/// that will happen (a file written, a row's state, a process gone): a fixed sleep is only for
/// letting time pass on purpose (a lease's ttl, a window in which nothing may happen).
pub fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    wait_for_some(what, within, || cond().then_some(()));
}

/// [`wait_for`] a value: the first `Some` that `get` gives.
pub fn wait_for_some<T>(what: &str, within: Duration, get: impl FnMut() -> Option<T>) -> T {
    poll(POLL, within, get)
        .unwrap_or_else(|| panic!("timed out after {within:?} waiting for {what}"))
}

/// The first `Some` that `get` gives, asked every `every`; None if `within` passes first (`get`
/// is asked once more past the deadline). The one loop the waits of the tests share.
pub fn poll<T>(every: Duration, within: Duration, mut get: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        let past = Instant::now() >= deadline;
        if let Some(v) = get() {
            return Some(v);
        }
        if past {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// A file's text; a file not written yet reads as empty, any other read error fails the test.
pub fn read_or_empty(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => panic!("reading {}: {e}", path.display()),
    }
}

/// `exactly effect` under a claimed lease, built one way for every test: `--job J --token T
/// --action A --target X`, then inputs and flags, then `-- sh -c SCRIPT`.
#[derive(Debug, Clone)]
pub struct EffectArgs(Vec<String>);

/// The arguments of `exactly effect` for `job` under `token`, acting `action` on `target`.
pub fn effect_args(job: &str, token: impl ToString, action: &str, target: &str) -> EffectArgs {
    let token = token.to_string();
    EffectArgs(
        [
            "effect",
            "--job",
            job,
            "--token",
            token.trim(),
            "--action",
            action,
            "--target",
            target,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    )
}

impl EffectArgs {
    /// `--input k=v`.
    pub fn input(self, kv: &str) -> EffectArgs {
        self.arg("--input").arg(kv)
    }
    /// `--observe CMD`.
    pub fn observe(self, cmd: &str) -> EffectArgs {
        self.arg("--observe").arg(cmd)
    }
    /// Any other flag or value, as is.
    pub fn arg(mut self, a: &str) -> EffectArgs {
        self.0.push(a.to_string());
        self
    }
    /// The wrapped command, `sh -c script`: the whole argument list.
    pub fn sh(self, script: &str) -> Vec<String> {
        self.arg("--").arg("sh").arg("-c").arg(script).0
    }
}

/// `&str`s of owned arguments, for helpers that take `&[&str]`.
pub fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// SQL read through the `postgres` crate: a column is read by its type (`int2`/`int4`/`int8`
/// as integers, `text`/`varchar`/`bpchar`/`name` as text); any other type (a `sum` is
/// `numeric`) is read again as the text the server sends for it, then parsed where an integer
/// is wanted. A NULL, no row, or a value that is not an integer is an error, as on SQLite.
pub mod pg {
    use super::backend;
    use ::postgres::types::Type;
    use ::postgres::{Client, SimpleQueryMessage, Statement};

    /// Why a read failed; `undefined_table` when a table it names does not exist.
    #[derive(Debug)]
    pub struct ReadError {
        pub undefined_table: bool,
        pub message: String,
    }

    impl From<::postgres::Error> for ReadError {
        fn from(e: ::postgres::Error) -> ReadError {
            ReadError {
                undefined_table: e.code() == Some(&::postgres::error::SqlState::UNDEFINED_TABLE),
                message: describe(&e),
            }
        }
    }

    fn fail(message: impl Into<String>) -> ReadError {
        ReadError {
            undefined_table: false,
            message: message.into(),
        }
    }

    /// An error with the server's message (the crate's own Display is only "db error").
    pub fn describe(e: &::postgres::Error) -> String {
        match e.as_db_error() {
            Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
            None => e.to_string(),
        }
    }

    /// The first column of each row, as the text the server sends (simple query protocol).
    fn texts(c: &mut Client, sql: &str) -> Result<Vec<Option<String>>, ReadError> {
        Ok(c.simple_query(sql)?
            .into_iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_string)),
                _ => None,
            })
            .collect())
    }

    /// The statement and the type of its first column.
    fn prepare(c: &mut Client, sql: &str) -> Result<(Statement, Type), ReadError> {
        let stmt = c.prepare(sql)?;
        let ty = match stmt.columns().first() {
            Some(col) => col.type_().clone(),
            None => return Err(fail("selects no column")),
        };
        Ok((stmt, ty))
    }

    pub fn count(url: &str, sql: &str) -> Result<i64, ReadError> {
        backend::with_client(url, |c| {
            let (stmt, ty) = prepare(c, sql)?;
            let first: Option<i64> = match ty {
                Type::INT8 | Type::INT4 | Type::INT2 => {
                    let rows = c.query(&stmt, &[])?;
                    let row = rows.first().ok_or_else(|| fail("no row"))?;
                    match ty {
                        Type::INT8 => row.try_get::<_, Option<i64>>(0)?,
                        Type::INT4 => row.try_get::<_, Option<i32>>(0)?.map(i64::from),
                        _ => row.try_get::<_, Option<i16>>(0)?.map(i64::from),
                    }
                }
                _ => {
                    let rows = texts(c, sql)?;
                    let first = rows.into_iter().next().ok_or_else(|| fail("no row"))?;
                    match first {
                        None => None,
                        Some(t) => Some(
                            t.parse::<i64>()
                                .map_err(|_| fail(format!("{t:?} (a {ty}) is not an integer")))?,
                        ),
                    }
                }
            };
            first.ok_or_else(|| fail("NULL where an integer was selected"))
        })
    }

    pub fn strings(url: &str, sql: &str) -> Result<Vec<String>, ReadError> {
        backend::with_client(url, |c| {
            let (stmt, ty) = prepare(c, sql)?;
            let values: Vec<Option<String>> = match ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => c
                    .query(&stmt, &[])?
                    .iter()
                    .map(|r| r.try_get::<_, Option<String>>(0))
                    .collect::<Result<_, _>>()?,
                Type::INT8 | Type::INT4 | Type::INT2 => c
                    .query(&stmt, &[])?
                    .iter()
                    .map(|r| {
                        Ok(match ty {
                            Type::INT8 => r.try_get::<_, Option<i64>>(0)?,
                            Type::INT4 => r.try_get::<_, Option<i32>>(0)?.map(i64::from),
                            _ => r.try_get::<_, Option<i16>>(0)?.map(i64::from),
                        }
                        .map(|n| n.to_string()))
                    })
                    .collect::<Result<_, ::postgres::Error>>()?,
                _ => texts(c, sql)?,
            };
            values
                .into_iter()
                .map(|v| v.ok_or_else(|| fail("NULL where text was selected")))
                .collect()
        })
    }
}

/// Runs `cmd` with its clock `offset` off ours (`"+1h"`): libfaketime preloaded into the process
/// (Debian package faketime; `.ci/run` installs it, and a test that needs it fails without it).
pub fn skew_clock(cmd: &mut std::process::Command, offset: &str) {
    let lib = [
        "/usr/lib/x86_64-linux-gnu/faketime",
        "/usr/lib/aarch64-linux-gnu/faketime",
        "/usr/lib/faketime",
    ]
    .iter()
    .map(|d| Path::new(d).join("libfaketimeMT.so.1"))
    .find(|p| p.exists())
    .expect("libfaketimeMT.so.1 (Debian package faketime)");
    // Without FAKETIME_NO_CACHE, libfaketime caches its offset and may read the spec late.
    cmd.env("LD_PRELOAD", lib)
        .env("FAKETIME", offset)
        .env("FAKETIME_NO_CACHE", "1");
}

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

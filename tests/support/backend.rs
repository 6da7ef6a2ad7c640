//! Which database a test's sites use: SQLite (a file in the test's temp dir, the default) or
//! PostgreSQL (a fresh schema in the `EXACTLY_TEST_PG` database, or in a throwaway cluster this
//! test binary starts (`cluster.rs`), dropped with the site).
//!
//! A test file puts its tests in [`on_both_backends!`](crate::on_both_backends): each test then
//! runs twice, as `sqlite::NAME` and `postgres::NAME`. The backend is a thread-local set by
//! those generated functions; `cli::Env::new` and `runner::Site::new` read it. A site made on
//! another thread than the test's own (a thread the test spawns) is SQLite.
//!
//! Without `EXACTLY_TEST_PG` the tests start a throwaway cluster where `build.rs` found the
//! server's binaries; where it found none (and `CI` is not set) `build.rs` sets
//! `cfg(exactly_no_pg)` and every `postgres::` test is ignored, saying why. A PostgreSQL test
//! never passes without running: on CI, or run with `--include-ignored`, it fails instead.
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where a site's database lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

thread_local! {
    static CURRENT: Cell<Backend> = const { Cell::new(Backend::Sqlite) };
}

/// The backend the sites made on this thread use.
pub fn current() -> Backend {
    CURRENT.with(Cell::get)
}

/// Sets this thread's backend until the guard is dropped (then the one before comes back, so a
/// test outside the macro that runs after a `postgres::` test on the same thread, as with
/// `--test-threads=1`, is SQLite again).
#[must_use = "the backend is set only while the guard lives"]
pub struct Using(Backend);

pub fn using(b: Backend) -> Using {
    Using(CURRENT.with(|c| c.replace(b)))
}

impl Drop for Using {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// Held by a test whose two variants must not run at once (a load test timed against 2 cores):
/// `sqlite::NAME` and `postgres::NAME` then run one after the other.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    // A variant that failed holding it must not fail the other.
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `EXACTLY_TEST_PG`, when set (and not empty).
fn pg_env() -> Option<String> {
    std::env::var("EXACTLY_TEST_PG")
        .ok()
        .filter(|u| !u.trim().is_empty())
}

/// The PostgreSQL database the tests make their schemas in: `EXACTLY_TEST_PG`, else the
/// throwaway cluster of this test binary (started on the first call); None, saying why on
/// stderr, when there is neither.
pub fn pg_url() -> Option<String> {
    pg_env().or_else(|| match super::cluster::get() {
        Ok(c) => Some(c.url.clone()),
        Err(why) => {
            eprintln!("no PostgreSQL for the tests: {why}");
            None
        }
    })
}

/// The CA of the test server's TLS certificate: `EXACTLY_TEST_PG_CA` with `EXACTLY_TEST_PG`,
/// else the throwaway cluster's.
pub fn pg_ca() -> Option<String> {
    if pg_env().is_some() {
        return std::env::var("EXACTLY_TEST_PG_CA")
            .ok()
            .filter(|c| !c.is_empty());
    }
    super::cluster::get()
        .ok()
        .map(|c| c.ca.display().to_string())
}

/// True on CI: `CI` set, not empty and not "false".
pub fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && !v.eq_ignore_ascii_case("false"))
}

/// The start of a `postgres::` test: the guard that makes its sites PostgreSQL. Without a
/// server the test fails (where there is none it is ignored at build time, `cfg(exactly_no_pg)`,
/// so this runs only on CI or with `--include-ignored`): it never passes without running.
pub fn enter_postgres() -> Using {
    if pg_url().is_none() {
        panic!(
            "no PostgreSQL for this test (CI: {}): set EXACTLY_TEST_PG=postgres://user:pass@host:port/db \
             or install the PostgreSQL server (see CONTRIBUTING.md, .ci/run)",
            on_ci()
        );
    }
    using(Backend::Postgres)
}

/// Whether a `--db` string names a PostgreSQL database.
pub fn is_pg(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// `url` with `options=-csearch_path=SCHEMA` (URL-encoded) added to its query.
pub fn with_search_path(url: &str, schema: &str) -> String {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    assert!(
        !query.split('&').any(|kv| kv.starts_with("options=")),
        "EXACTLY_TEST_PG already has options=: the tests add their own (search_path): {url}"
    );
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-csearch_path%3D{schema}")
}

/// A schema of its own in the `EXACTLY_TEST_PG` database, dropped (CASCADE) with this value.
/// `EXACTLY_TEST_PG_KEEP=1` keeps it (its URL is printed) to look at after a test.
#[derive(Debug)]
pub struct PgSchema {
    pub name: String,
    /// The database string a site gives `--db`: the URL with the schema as its search_path.
    pub url: String,
    base: String,
}

impl PgSchema {
    pub fn create() -> PgSchema {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let base = pg_url().expect("a PostgreSQL site needs EXACTLY_TEST_PG");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let name = format!(
            "t_{}_{}_{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        )
        .to_lowercase();
        connect(&base)
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .unwrap_or_else(|e| panic!("CREATE SCHEMA {name} in {}: {e}", redact(&base)));
        let url = with_search_path(&base, &name);
        PgSchema { name, url, base }
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        forget_client(&self.url);
        if std::env::var_os("EXACTLY_TEST_PG_KEEP").is_some() {
            eprintln!("kept schema {} ({})", self.name, redact(&self.url));
            return;
        }
        // A process the test left behind may still hold a lock in the schema: wait a while for
        // it, then leave the schema rather than hang (a drop must not panic either).
        let sql = format!(
            "SET lock_timeout = '20s'; DROP SCHEMA IF EXISTS {} CASCADE",
            self.name
        );
        match ::postgres::Client::connect(&self.base, ::postgres::NoTls)
            .and_then(|mut c| c.batch_execute(&sql))
        {
            Ok(()) => {}
            Err(e) => eprintln!("warning: schema {} not dropped: {e}", self.name),
        }
    }
}

/// The URL with its password hidden, for messages (as the binary shows it).
pub fn redact(url: &str) -> String {
    exactly::shown_db(url)
}

/// A new connection to `url`, or the test fails saying which database.
pub fn connect(url: &str) -> ::postgres::Client {
    ::postgres::Client::connect(url, ::postgres::NoTls)
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", redact(url)))
}

/// One idle connection per database URL (tests poll the database every 50 ms). A static, never
/// dropped: a connection is closed when its schema is dropped, or at the process's end.
static CLIENTS: Mutex<Option<HashMap<String, ::postgres::Client>>> = Mutex::new(None);

fn clients() -> std::sync::MutexGuard<'static, Option<HashMap<String, ::postgres::Client>>> {
    // A test that panicked while holding the lock left the map as it was: still usable.
    CLIENTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` with an idle connection to `url` (a new one if there is none, or it closed); two
/// threads at once get two connections.
pub fn with_client<T>(url: &str, f: impl FnOnce(&mut ::postgres::Client) -> T) -> T {
    let idle = clients().get_or_insert_with(HashMap::new).remove(url);
    let mut client = idle
        .filter(|c| !c.is_closed())
        .unwrap_or_else(|| connect(url));
    let out = f(&mut client);
    clients()
        .get_or_insert_with(HashMap::new)
        .insert(url.to_string(), client);
    out
}

fn forget_client(url: &str) {
    let idle = clients().as_mut().and_then(|m| m.remove(url));
    drop(idle);
}

/// Wraps the tests of a file so that each runs on both backends: `sqlite::NAME` and
/// `postgres::NAME`. The file's other items stay outside (each module has `use super::*;`).
/// A file has one such block (its modules are named `sqlite` and `postgres`: inside them the
/// crate is `::postgres`). rustfmt leaves the block's contents as they are written. A test that
/// only makes sense on SQLite (a SQLite file's bytes, its write lock) stays outside the block,
/// with a comment saying why.
///
/// ```ignore
/// on_both_backends! {
///     #[test]
///     fn a() { let env = Env::new(); /* … */ }
///
///     /// Doc comments and attributes such as #[ignore] are kept.
///     #[test]
///     #[ignore]
///     fn b() { /* … */ }
/// }
/// ```
#[macro_export]
macro_rules! on_both_backends {
    ($($(#[$meta:meta])* fn $name:ident() $body:block)*) => {
        mod sqlite {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$meta])*
                fn $name() {
                    let _backend = $crate::support::backend::using(
                        $crate::support::backend::Backend::Sqlite,
                    );
                    $body
                }
            )*
        }
        mod postgres {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$meta])*
                #[cfg_attr(
                    exactly_no_pg,
                    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
                )]
                fn $name() {
                    let _backend = $crate::support::backend::enter_postgres();
                    $body
                }
            )*
        }
    };
}

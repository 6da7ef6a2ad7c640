//! The database as the command line names it: where `--db` points, opening it, and what can be
//! asked of a database before or without opening it. Re-exported at the crate's root
//! (`exactly::open`, `exactly::db_path`, …).
use exactly_store::{self as store, Access, Store};
use exactly_words::Result;

/// Where the database is: `--db`, else `$EXACTLY_DB`, else `./exactly.db` if it exists, else the
/// XDG state folder (`$XDG_STATE_HOME/exactly/exactly.db`).
pub fn db_path(flag: Option<&str>) -> String {
    store::default_path(flag)
}

/// exactly's XDG state folder (`$XDG_STATE_HOME/exactly`, else `~/.local/state/exactly`), where
/// the default database and the CLI's token memory live; None without `XDG_STATE_HOME` or `HOME`.
pub fn state_dir() -> Option<std::path::PathBuf> {
    store::xdg_state_dir()
}

/// Whether this process may write the database at `path` (asked of the OS): a dashboard on a
/// database it may not write watches read-only.
pub fn writable(path: &str) -> bool {
    store::writable(path)
}

/// The dashboard's ledger and event queries with the database's plan for each (the plan tests
/// check that none scans the ledger).
#[doc(hidden)]
pub fn read_plans(db: &str) -> Result<Vec<(String, Vec<String>)>> {
    open(Some(db), Access::ReadOnly)?.plans()
}

/// A `--db` string as messages show it: a URL's password replaced by `***`.
pub fn shown_db(db: &str) -> String {
    store::pg::redact(db)
}

/// The database's own identity, whatever its spelling (see [`Store::identity`]).
pub fn db_identity(db: &str) -> Result<String> {
    store::identity_of(&db_path(Some(db)))
}

/// From now on this process opens only existing SQLite databases: a scheduler whose database
/// was deleted must not go on with a fresh empty one.
pub fn refuse_new_databases() {
    store::db::refuse_new_databases()
}

/// Whether a database exists at `db` (a file, or exactly's tables on a server); creates nothing.
pub fn db_exists(db: &str) -> Result<bool> {
    Store::exists_at(db)
}

/// Whether `--db` names a database server (PostgreSQL) rather than a SQLite file.
pub fn is_server_db(db: &str) -> bool {
    store::pg::is_url(db)
}

/// Opens the database `--db` names (see [`db_path`]): the one way the CLI, the runner and the
/// dashboard open it.
pub fn open(db: Option<&str>, access: Access) -> Result<Store> {
    Store::open_at(&db_path(db), access)
}

/// The database `store` is open on as messages show it: its path or URL as it was opened, a
/// PostgreSQL password shown as `***`.
pub fn db_name(store: &Store) -> &str {
    store.path()
}

/// The identity of the database `store` is open on (see [`db_identity`]), asked on this
/// connection rather than a new one.
pub fn database_identity(store: &mut Store) -> Result<String> {
    store.identity()
}

/// Whether this process may write the database `store` is open on: the file's permissions on
/// SQLite, the role's privileges on PostgreSQL (a viewer's role may only read).
pub fn may_write(store: &mut Store) -> bool {
    store.can_write()
}

/// How to open another handle on the database `store` is open on, exactly as it was opened
/// (a PostgreSQL URL's password included), for a thread or a process that needs its own.
pub fn reopener(store: &Store) -> store::StoreOpener {
    store.opener()
}

//! `exactly` — exactly-once *effect* for scheduled jobs and agents.
//!
//! A second run of a job can do nothing new and cannot pretend it did:
//! - a [lease] per job, claimed in one atomic statement, with a monotonic fencing token;
//! - an [effect key](key::effect_key) derived from the facts acted on, not the run;
//! - an [effect ledger](effect) with four states, `unknown` among them, settled before any retry;
//! - [approvals](approval) stored against the effect key and consumed once;
//! - counters and a [`snapshot::Snapshot`] the dashboard, `status` and `metrics` render.
//!
//! ```no_run
//! use exactly::{effect, lease, JobName, Store};
//! use exactly::effect::{Effect, Failure, Observation, Spec};
//!
//! struct SendInvoice;
//! impl Effect for SendInvoice {
//!     fn perform(&mut self, effect_key: &str) -> Result<String, Failure> {
//!         // call the far side, passing effect_key as its idempotency key
//!         Ok(format!("sent {effect_key}"))
//!     }
//!     fn observe(&mut self, _effect_key: &str) -> Observation {
//!         // ask the far side whether it already has this effect
//!         Observation::NotHappened
//!     }
//! }
//!
//! # fn main() -> Result<(), exactly::Error> {
//! let mut store = Store::open("exactly.db")?;
//! let job = JobName::from("invoices");
//! let token = match lease::claim(
//!     &mut store,
//!     &job,
//!     "worker-1",
//!     std::time::Duration::from_secs(60),
//! )? {
//!     lease::Claim::Won { token } => token,
//!     lease::Claim::Held { .. } => return Ok(()), // someone else runs it
//! };
//! let ctx = effect::Ctx::new(&job, token);
//! let spec = Spec::new("send-invoice", "customer-42")
//!     .input("amount", "120.00")
//!     .input("month", "2026-11");
//! let outcome = effect::run(&mut store, &ctx, &spec, &mut SendInvoice)?;
//! println!("{outcome:?}");
//! lease::release(&mut store, &job, token)?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
pub mod approval;
pub mod checklist;
mod clock;
pub mod contain;
pub mod effect;
mod error;
pub mod fault;
pub mod firing;
pub mod health;
mod ids;
pub mod jobs;
pub mod json;
pub mod key;
pub mod lease;
pub mod metrics;
pub mod policy;
pub mod sanitize;
pub mod schedule;
pub mod sender;
pub mod snapshot;
pub mod state;
pub mod status;
pub(crate) mod store;
pub mod time;
pub mod wrapped;

/// The database handle: opaque; every operation on it is a library function in the domain
/// modules ([`lease`], [`effect`], [`approval`], [`jobs`], [`firing`], [`metrics`]).
pub use store::{sync_wait_bound, Access, Store, SCHEMA_VERSION};

pub use error::{DbSource, Error, Result};
pub use ids::{EffectKey, JobName, Token};

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

/// Who is acting, as every recorded decision stores it: the OS login user of our uid (and,
/// over SSH, the client address); when `EXACTLY_ACTOR` names someone else, that name first,
/// marked as claimed by the login user: `ceo (set by root)`. The environment can say anything,
/// so it never replaces what the OS says.
pub fn actor() -> String {
    actor_from(
        std::env::var("EXACTLY_ACTOR").ok().as_deref(),
        &os_user(),
        std::env::var("SSH_CLIENT").ok().as_deref(),
    )
}

/// [`actor`] from its parts: the claimed name, the OS user, `$SSH_CLIENT`.
pub fn actor_from(claimed: Option<&str>, os_user: &str, ssh_client: Option<&str>) -> String {
    let os = match ssh_client.and_then(|s| s.split_whitespace().next()) {
        Some(addr) => format!("{os_user}@{addr}"),
        None => os_user.to_string(),
    };
    match claimed.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) if c != os_user => format!("{c} (set by {os})"),
        _ => os,
    }
}

/// The login name of our real uid from the OS (`getpwuid_r`); `$USER` only when the uid has
/// no name (a container without /etc/passwd entry).
pub fn os_user() -> String {
    login_name().unwrap_or_else(user)
}

/// The login user: `$USER`, `$LOGNAME`, else the name of our uid.
pub fn user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(login_name)
        .unwrap_or_else(|| "unknown".to_string())
}

/// The login name of our uid, for when the environment does not say (cron, tmux, sudo -i).
fn login_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// The host identity recorded in attempt ids: `EXACTLY_HOST` (for containers that share a
/// database), else the host name. A sender's process is checked only on its own host.
pub fn host() -> String {
    std::env::var("EXACTLY_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(hostname)
}

/// This machine's name, for lease owners and attempt records.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".to_string()
    }
}

/// The boundary, checked: the dashboard, the command line, the runner and the chaos harness act
/// only through the library's operations, never the store itself, and open the database only
/// through [`open`].
#[cfg(test)]
mod boundary {
    use std::path::Path;

    fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    #[test]
    fn tui_cli_runner_and_chaos_never_name_the_store() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        for room in ["tui", "cli", "runner", "chaos"] {
            sources(&root.join(room), &mut files);
        }
        files.push(root.join("demo.rs"));
        // The dashboard's tests build fixture databases with SQL, as tests/ do.
        files.retain(|f| !f.components().any(|c| c.as_os_str() == "tests"));
        assert!(files.len() >= 20, "found only {} files", files.len());
        let mut found = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).expect("read source");
            for (i, line) in text.lines().enumerate() {
                // `store::` names the store's module; `Store::open…` opens a database apart
                // from `crate::open`; `rusqlite` is SQL.
                if ["store::", "Store::open", "rusqlite"]
                    .iter()
                    .any(|w| line.contains(w))
                {
                    found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "the store named outside the library:\n{}",
            found.join("\n")
        );
    }

    /// The store is the ground floor: its code names only the modules below it (the state
    /// words, times, policy, schedules, the sender's identity, keys, the identities (`ids`: the
    /// fencing token, a job's name), fault points, sanitizing),
    /// never the library's domain modules or the application above them. Its rows are its own
    /// (`store/rows.rs`); the snapshot is built from them.
    #[test]
    fn the_store_names_no_module_above_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut below: Vec<String> = vec![
            "store".into(),
            "Error".into(),
            "Result".into(),
            "Token".into(),
        ];
        below.extend(
            [
                "state", "time", "policy", "schedule", "sender", "key", "fault", "sanitize", "ids",
            ]
            .map(String::from),
        );
        let mut files = Vec::new();
        sources(&root.join("store"), &mut files);
        assert!(files.len() >= 10, "found only {} files", files.len());
        let mut found = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).expect("read source");
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in code.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for (at, _) in line.match_indices("crate::") {
                    let rest = &line[at + 7..];
                    // `crate::{a, b::C}` names each of a and b.
                    let named: Vec<&str> = match rest.strip_prefix('{') {
                        Some(group) => group.split([',', '}']).map(str::trim).collect(),
                        None => vec![rest],
                    };
                    for n in named {
                        let name: String = n
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        let is_fn = n[name.len()..].starts_with('(');
                        if !name.is_empty() && !is_fn && !below.contains(&name) {
                            found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                        }
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "the store names a module above it:\n{}",
            found.join("\n")
        );
    }

    /// Policy up, SQL down: the store decides nothing of the runner's, asks nobody who acts and
    /// reads no clock (every write's time comes from its caller, or on PostgreSQL the server).
    #[test]
    fn the_store_never_reaches_up() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src")
            .join("store");
        let mut files = Vec::new();
        sources(&root, &mut files);
        assert!(files.len() >= 10, "found only {} files", files.len());
        let mut found = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).expect("read source");
            // A file's unit tests (at its end) may read the clock; its code may not.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in code.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                // The one exception: the PostgreSQL backend reads this host's clock beside the
                // server's, only to measure how far apart they are (`Tx::later`); what it writes
                // is the server's time.
                let offset =
                    f.ends_with("pg.rs") && line.contains("let here = crate::time::now();");
                if [
                    "runner::",
                    "crate::actor()",
                    "hostname()",
                    "crate::host()",
                    "time::now",
                ]
                .iter()
                .any(|w| line.contains(w))
                    && !offset
                {
                    found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "the store reaches up:\n{}",
            found.join("\n")
        );
    }
}

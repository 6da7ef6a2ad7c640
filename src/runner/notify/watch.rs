//! `exactly watch JOBS.toml`: a host that runs no jobs evaluating only the file's `[[notify]]`
//! rules (`notifier.rs`), so a scheduler gone is told even when it was the only one.
use super::notifier::{serve, Notifier, EVERY};
use crate::runner::config::parse::parse;
use crate::runner::config::problem::Severity;
use crate::{lease, Access, Result};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// `exactly watch JOBS.toml`: only the file's `[[notify]]` rules, evaluated here, for a host
/// that runs no jobs (it notices a scheduler gone, which no dead scheduler can).
#[derive(clap::Args, Debug)]
pub(crate) struct WatchArgs {
    /// The jobs file whose [[notify]] tables to evaluate (its [[job]] tables are not run).
    pub jobs: String,
    /// This watcher's name in the notifiers' leases (default user@host:pid).
    #[arg(long)]
    pub owner: Option<String>,
}

pub(crate) fn watch_main(db: &Option<String>, a: WatchArgs) -> Result<i32> {
    let text = std::fs::read_to_string(&a.jobs).map_err(|e| {
        crate::Error::Usage(format!(
            "cannot read jobs file {}: {e}",
            crate::sanitize::inert(&a.jobs)
        ))
    })?;
    let loaded = parse(&text);
    // A watcher's file may hold only [[notify]] tables; every other error refuses it.
    let refused: Vec<_> = loaded
        .problems
        .iter()
        .filter(|p| p.severity == Severity::Error && p.what != "no jobs")
        .collect();
    if !refused.is_empty() {
        for p in &refused {
            eprintln!("{}", p.line(&a.jobs));
        }
        return Err(crate::Error::Usage(format!(
            "refusing to watch {}: {} problem(s) above (see exactly check)",
            crate::sanitize::inert(&a.jobs),
            refused.len()
        )));
    }
    if loaded.notify.is_empty() {
        return Err(crate::Error::Usage(format!(
            "{} has no [[notify]] tables: nothing to watch",
            crate::sanitize::inert(&a.jobs)
        )));
    }
    let db_path = crate::db_path(db.as_deref());
    // Fails now, not in the loop, when the database cannot be opened.
    drop(crate::open(Some(&db_path), Access::Write)?);
    let owner = a.owner.unwrap_or_else(lease::default_owner);
    let cwd = std::fs::canonicalize(&a.jobs)
        .ok()
        .and_then(|p| p.parent().map(std::path::Path::to_path_buf));
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, stop.clone())?;
    }
    tracing::info!(
        "watching: {} notifier(s), every {}s",
        loaded.notify.len(),
        EVERY.as_secs(),
    );
    let notifiers = loaded
        .notify
        .into_iter()
        .map(|n| Notifier::new(n, &owner, cwd.clone()))
        .collect();
    serve(&db_path, notifiers, &stop);
    Ok(0)
}

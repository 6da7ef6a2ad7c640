//! Reloading the jobs file (SIGHUP, `systemctl reload`): the file is checked exactly as
//! `exactly check` and `exactly run` check it; a file with errors changes nothing (one log
//! line says why), a good one is registered as `run` registers it (the newest registration of a
//! job wins, a job no longer in the file is retired), and what changed is logged and recorded
//! as a `jobs_reloaded` event.
use super::tick::Config;
use crate::runner::config::check::{canonical_source, problems};
use crate::runner::config::definitions::{self, registry_records};
use crate::runner::config::job::Job;
use crate::runner::config::problem::Problem;
use crate::runner::log;
use crate::sanitize::inert;
use crate::{jobs, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tracing::Level;

/// The jobs of the file as last loaded, by name, with their definition digests.
pub(super) struct FileJobs {
    digests: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
}

/// A reload that took: the file's jobs, and those new to the registry (no past to miss).
pub(super) struct Reloaded {
    pub jobs: Vec<Job>,
    pub fresh: Vec<String>,
}

impl FileJobs {
    pub(super) fn new(jobs: &[Job], cwd: Option<&Path>) -> FileJobs {
        FileJobs {
            digests: jobs
                .iter()
                .map(|j| (j.name.to_string(), definitions::digest(j, cwd)))
                .collect(),
            cwd: cwd.map(Path::to_path_buf),
        }
    }

    /// Reads, checks and registers the file again. None when it changes nothing: a file with
    /// errors (or one that cannot be read or registered) keeps the running jobs.
    pub(super) fn reload(&mut self, store: &mut Store, cfg: &Config) -> Option<Reloaded> {
        let file = inert(&cfg.source);
        let refused = |why: String| {
            tracing::error!("reload of {file} refused, the running jobs go on: {why}");
        };
        // The file is the one the scheduler started with: a path that now leads elsewhere (a
        // symlink swapped by a deploy) would move the jobs' folder and their shared identity.
        let (now_source, found) = canonical_source(&cfg.jobs_path);
        if found.is_some() && now_source != cfg.source {
            refused(format!(
                "{} now leads to {}: restart the scheduler to run another file",
                inert(&cfg.jobs_path),
                inert(&now_source)
            ));
            return None;
        }
        let (jobs, _retain, _, problems) = match problems(&Some(cfg.db.clone()), &cfg.source) {
            Ok(p) => p,
            Err(e) => {
                refused(e.to_string());
                return None;
            }
        };
        let errors: Vec<&Problem> = problems.iter().filter(|p| p.refuses_run()).collect();
        if let Some(first) = errors.first() {
            let more = match errors.len() {
                1 => String::new(),
                n => format!(" (and {} more: see exactly check)", n - 1),
            };
            refused(format!(
                "{}: {} — {}{more}",
                first.job, first.what, first.why
            ));
            return None;
        }
        // Its own earlier registration differs from a changed job: that is the change itself.
        let own = format!("registered by {} from", cfg.owner);
        for p in problems.iter().filter(|p| !p.what.contains(&own)) {
            let level = if p.rejects() {
                Level::WARN
            } else {
                Level::INFO
            };
            log::line(level, &p.job, &format!("{} — {}", p.what, p.why));
        }
        let cwd = self.cwd.as_deref();
        let regs = registry_records(&jobs, cwd);
        let registered = match jobs::register(store, &regs, &cfg.source, &cfg.owner) {
            Ok(r) => r,
            Err(e) => {
                refused(format!("cannot register its jobs: {e}"));
                return None;
            }
        };
        let digests: BTreeMap<String, String> = jobs
            .iter()
            .map(|j| (j.name.to_string(), definitions::digest(j, cwd)))
            .collect();
        let added: Vec<&str> = names(&digests, |n, _| !self.digests.contains_key(n));
        let removed: Vec<&str> = names(&self.digests, |n, _| !digests.contains_key(n));
        let changed: Vec<&str> = names(&digests, |n, d| {
            self.digests.get(n).is_some_and(|old| old != d)
        });
        let list = |v: &[&str]| match v.is_empty() {
            true => "none".to_string(),
            false => v.join(", "),
        };
        let detail = format!(
            "reloaded {file}: {} job(s); added {}; removed {}; changed {}",
            jobs.len(),
            list(&added),
            list(&removed),
            list(&changed)
        );
        tracing::info!("{}", detail);
        if let Err(e) = jobs::reloaded(store, &cfg.owner, &detail) {
            tracing::warn!("the reload could not be recorded: {e}");
        }
        self.digests = digests;
        Some(Reloaded {
            jobs,
            fresh: registered.fresh,
        })
    }
}

fn names(m: &BTreeMap<String, String>, keep: impl Fn(&str, &str) -> bool) -> Vec<&str> {
    m.iter()
        .filter(|(n, d)| keep(n, d))
        .map(|(n, _)| n.as_str())
        .collect()
}

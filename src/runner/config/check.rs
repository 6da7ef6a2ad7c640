//! Everything `exactly check` says of a jobs file: its parse problems, then the lint of its
//! valid jobs with the history and registry of the database if one exists, and its jobs'
//! failure policies in words. `exactly run` and a reload refuse a file on exactly these
//! problems, so the three never disagree.
use super::definitions;
use super::job::Job;
use super::lint::{lint, History};
use super::parse::parse;
use super::problem::{Problem, Severity};
use super::retry::{describe, interval_of};
use crate::jobs::{self, JobRecord};
use crate::sanitize::inert;
use crate::{time, Access, Error, Result, Store};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The text of the jobs file at `path`.
pub(crate) fn read_jobs_file(path: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::Usage(format!("cannot read jobs file {}: {e}", inert(path))))
}

/// The jobs file's path made canonical, and its folder (None when it cannot be resolved).
pub(crate) fn canonical_source(path: &str) -> (String, Option<PathBuf>) {
    match std::fs::canonicalize(path) {
        Ok(p) => (
            p.to_string_lossy().into_owned(),
            p.parent().map(Path::to_path_buf),
        ),
        Err(_) => (path.to_string(), None),
    }
}

/// A jobs file as `check` sees it: its valid jobs, `retain`, the number of its `[[notify]]`
/// tables, and its problems.
pub(crate) type Checked = (Vec<Job>, Option<Duration>, usize, Vec<Problem>);

/// Everything `check` says about a file: its parse problems, then the lint of its valid jobs
/// with the history and registry of the database if one exists (`check` never creates one).
/// `run` refuses the file on exactly these lines, so the two never disagree. Also the number of
/// its `[[notify]]` tables (a file of those alone is `watch`'s, and `check` passes it).
pub(crate) fn problems(db: &Option<String>, path: &str) -> Result<Checked> {
    let text = read_jobs_file(path)?;
    let mut loaded = parse(&text);
    let mut problems = std::mem::take(&mut loaded.problems);
    let db_path = crate::db_path(db.as_deref());
    let mut hist = BTreeMap::new();
    let (source, dir) = canonical_source(path);
    if crate::db_exists(&db_path)? {
        let mut store = crate::open(Some(&db_path), Access::Write)?;
        hist = history(&mut store, &loaded.jobs)?;
        let registered = jobs::records(&mut store)?;
        let dir = dir.as_deref();
        problems.extend(registry_duplicates(&registered, &loaded.jobs, &source, dir));
        let differs = |j| definitions::check_problem(j, dir, &registered);
        problems.extend(loaded.jobs.iter().filter_map(differs));
    }
    problems.extend(lint(&loaded.jobs, &hist, dir.as_deref()));
    loaded.place(&mut problems);
    Ok((loaded.jobs, loaded.retain, loaded.notify.len(), problems))
}

/// Run-time history per job from the database, for the lint.
fn history(store: &mut Store, jobs: &[Job]) -> Result<BTreeMap<String, History>> {
    let mut out = BTreeMap::new();
    for j in jobs {
        let d = jobs::run_durations(store, &j.name)?;
        if d.is_empty() {
            continue;
        }
        let (_, p99) = time::percentiles(&d);
        out.insert(
            j.name.to_string(),
            History {
                runs: d.len() as u64,
                p99_ms: p99,
            },
        );
    }
    Ok(out)
}

/// The same command (as resolved from each file's folder) registered under another name by
/// another jobs file.
fn registry_duplicates(
    registered: &[JobRecord],
    jobs: &[Job],
    source: &str,
    dir: Option<&Path>,
) -> Vec<Problem> {
    let mut out = Vec::new();
    for j in jobs {
        let digest = j.command_digest(dir);
        for r in registered {
            if r.retired
                || r.job_key == j.name
                || r.source.as_deref() == Some(source)
                || r.command_digest.as_deref() != Some(digest.as_str())
            {
                continue;
            }
            out.push(Problem {
                severity: Severity::Warning,
                at: None,
                job: j.name.to_string(),
                what: format!(
                    "same command as job {:?} of {}",
                    r.job_key,
                    r.source.as_deref().unwrap_or("another file")
                ),
                why: "one action registered under two names fires twice; \
                      the commonest duplicate and the hardest to see"
                    .into(),
            });
        }
    }
    out
}

/// `exactly check`'s line for each job with a failure policy: `FILE: JOB: policy — …`.
pub(crate) fn check_lines(jobs: &[Job], file: &str) -> Vec<String> {
    jobs.iter()
        .filter_map(|j| {
            let d = describe(&j.policy, interval_of(&j.schedule))?;
            Some(inert(&format!("{file}: {}: policy — {d}", j.name)))
        })
        .collect()
}

/// `exactly check --json`'s `policies`: each job with a failure policy, its settings in ms.
pub(crate) fn check_json(jobs: &[Job]) -> serde_json::Value {
    let ms = |d: Duration| d.as_millis() as u64;
    jobs.iter()
        .filter(|j| j.policy.is_set(interval_of(&j.schedule)))
        .map(|j| {
            let p = &j.policy;
            serde_json::json!({
                "job_key": j.name,
                "job": j.name,
                "retries": p.retries,
                "retry_backoff_ms": ms(p.retry_backoff),
                "retry_backoff_max_ms": ms(p.retry_backoff_max),
                "attempts": p.attempts(),
                "pause_after_failures": p.pause_after_failures,
                "jitter_ms": ms(p.jitter),
                "starting_deadline_ms": p.starting_deadline.map(ms),
            })
        })
        .collect()
}

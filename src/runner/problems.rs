//! The problem list behind `exactly check`: every problem is a line `file: job: what — why`.
//! Errors (found while parsing, `config.rs`) make a job unusable and `exactly run` refuses the
//! file; warnings are risks the scheduler cannot remove (lease against interval, a lease too
//! thin to ride out a stalled renewal, p99 against interval, one command under two names), found by [`lint`] over the valid jobs: `check` fails on
//! them only with `--strict`, and `run` logs them and runs.
use super::config::{Job, Overlap};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Advice: `check` prints it and still passes, `run` logs it.
    Note,
    /// A risk seen in the database's history of runs (the interval below the observed p99): as a warning; refusing it would also refuse the deploy of the fix for a job that
    /// got slow.
    Observed,
    /// A risk in the file as written: `check` fails on it only with `--strict`, `run` warns
    /// and runs (a refusal would also stop an unrelated, correct file from deploying).
    Warning,
    /// The job cannot be run as written: `check` fails, `run` refuses the file.
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub severity: Severity,
    /// The job's name, or `-` for the file itself.
    pub job: String,
    pub what: String,
    pub why: String,
    /// Where in the jobs file (`positions.rs`); None when nowhere in particular.
    pub at: Option<At>,
}

/// A problem's place in the jobs file: the line of the key it is about, else of its job's
/// `[[job]]` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    /// 1-based.
    pub line: usize,
    /// The key it is about, when it is about one.
    pub key: Option<String>,
}

impl Problem {
    pub(super) fn error(job: &str, what: impl Into<String>, why: impl Into<String>) -> Problem {
        Problem {
            severity: Severity::Error,
            job: job.to_string(),
            what: what.into(),
            why: why.into(),
            at: None,
        }
    }
    /// The same problem at `line` of the jobs file.
    pub(super) fn at_line(self, line: usize) -> Problem {
        Problem {
            at: Some(At { line, key: None }),
            ..self
        }
    }
    pub(super) fn note(job: &str, what: impl Into<String>, why: impl Into<String>) -> Problem {
        Problem {
            severity: Severity::Note,
            ..Problem::error(job, what, why)
        }
    }
    /// Whether `run` logs it as a WARN line (else INFO).
    pub fn rejects(&self) -> bool {
        self.severity != Severity::Note
    }
    /// Whether `run` refuses the file for it: errors only.
    pub fn refuses_run(&self) -> bool {
        self.severity == Severity::Error
    }
    pub(super) fn observed(job: &str, what: impl Into<String>, why: impl Into<String>) -> Problem {
        Problem {
            severity: Severity::Observed,
            ..Problem::error(job, what, why)
        }
    }
    pub(super) fn warning(job: &str, what: impl Into<String>, why: impl Into<String>) -> Problem {
        Problem {
            severity: Severity::Warning,
            ..Problem::error(job, what, why)
        }
    }
    /// How `check` words it: `error` (check fails, `run` refuses the file), `warning` (a risk:
    /// check fails only with --strict, `run` logs it and runs), `note` (advice).
    pub fn kind(&self) -> &'static str {
        match self.severity {
            Severity::Error => "error",
            Severity::Warning | Severity::Observed => "warning",
            Severity::Note => "note",
        }
    }
    /// The one-line form: `file:LINE: job: what — why` (`file: job: …` when it is nowhere in
    /// particular; `warning:` and `note:` marked).
    pub fn line(&self, file: &str) -> String {
        let tag = match self.kind() {
            "warning" => "warning: ",
            "note" => "note: ",
            _ => "",
        };
        let line = self
            .at
            .as_ref()
            .map(|a| format!(":{}", a.line))
            .unwrap_or_default();
        crate::sanitize::inert(&format!(
            "{file}{line}: {}: {tag}{} — {}",
            self.job, self.what, self.why
        ))
    }
}

/// The command as it runs from the jobs file's folder `dir` (a job's working directory), as
/// compared for "the same command under two names" and digested into the registry: a program
/// given as a path (`./run.sh`, `sub/x.sh`) and an argument naming a file in that folder
/// (`sh run.sh`) become absolute, canonical paths, so two folders' `./run.sh` are two
/// commands and `./x.sh` is `x.sh` as an argument; a bare program name (`python3`) stays, as
/// PATH finds it. Whitespace runs inside an argument are collapsed, so cosmetic differences do
/// not hide a duplicate.
pub fn resolved_command(argv: &[String], dir: Option<&Path>) -> Vec<String> {
    argv.iter()
        .enumerate()
        .map(|(i, a)| {
            let path = Path::new(a.as_str());
            let names_file = if i == 0 {
                a.contains('/')
            } else {
                !a.starts_with('-')
                    && path.is_relative()
                    && dir.is_some_and(|d| d.join(path).exists())
            };
            match dir {
                Some(d) if names_file => absolute(&d.join(path)),
                _ if names_file && path.is_absolute() => absolute(path),
                _ => a.split_whitespace().collect::<Vec<_>>().join(" "),
            }
        })
        .collect()
}

/// `p` canonical when it exists, else with `.` and `..` folded by hand.
fn absolute(p: &Path) -> String {
    let resolved = std::fs::canonicalize(p).unwrap_or_else(|_| {
        let mut out = PathBuf::new();
        for c in p.components() {
            match c {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir => {
                    out.pop();
                }
                c => out.push(c),
            }
        }
        out
    });
    resolved.to_string_lossy().into_owned()
}

/// What the database knows about a job, for the lint.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub runs: u64,
    pub p99_ms: Option<u64>,
}

/// Up to this many jobs sharing one command get a warning each; more get one line for them all
/// (1,000 jobs of one command are one warning, not 1,000).
const SAME_COMMAND_EACH: usize = 3;

/// The risks in a set of valid jobs of a file in folder `dir`: one command under two names,
/// lease ≥ interval, a lease too thin to ride out a stalled renewal, and, with history,
/// p99 > interval.
pub fn lint(jobs: &[Job], history: &BTreeMap<String, History>, dir: Option<&Path>) -> Vec<Problem> {
    let mut out = Vec::new();
    // Each command's jobs, in file order: one warning per duplicate, or one line for many.
    let mut by_command: BTreeMap<Vec<String>, Vec<&str>> = BTreeMap::new();
    for job in jobs {
        by_command
            .entry(resolved_command(&job.command, dir))
            .or_default()
            .push(&job.name);
    }
    let said = many_same_command(&by_command, &mut out);
    for job in jobs {
        if said.contains(&job.name.as_str()) {
            let key = resolved_command(&job.command, dir);
            let first = by_command.get(&key).and_then(|n| n.first()).copied();
            out.push(Problem::warning(
                &job.name,
                format!("same command as job {:?}", first.unwrap_or("?")),
                SAME_COMMAND_WHY,
            ));
        }
        lint_timing(job, &mut out);
        lint_history(job, history, &mut out);
    }
    out
}

const SAME_COMMAND_WHY: &str = "one action registered under two names fires twice; \
                                the commonest duplicate and the hardest to see";

/// One line for each command shared by more than [`SAME_COMMAND_EACH`] other jobs; returns the
/// jobs of the other shared commands, each warned of on its own.
fn many_same_command<'a>(
    by_command: &BTreeMap<Vec<String>, Vec<&'a str>>,
    out: &mut Vec<Problem>,
) -> Vec<&'a str> {
    let mut said: Vec<&str> = Vec::new();
    for names in by_command.values().filter(|n| n.len() > 1) {
        let (first, dups) = (names[0], &names[1..]);
        if dups.len() <= SAME_COMMAND_EACH {
            said.extend(dups.iter().copied());
            continue;
        }
        let shown: Vec<String> = dups.iter().take(5).map(|n| format!("{n:?}")).collect();
        out.push(Problem::warning(
            dups[0],
            format!(
                "same command as job {first:?} in {} other jobs: {}{}",
                dups.len(),
                shown.join(", "),
                if dups.len() > shown.len() {
                    ", …"
                } else {
                    ""
                }
            ),
            SAME_COMMAND_WHY,
        ));
    }
    said
}

fn human(d: Duration) -> String {
    crate::time::human_ms(d.as_millis() as u64)
}

/// A job's lease and timeout against its interval and the scheduler's heartbeat.
fn lint_timing(job: &Job, out: &mut Vec<Problem>) {
    let interval_s = job.schedule.interval_s();
    let interval = Duration::from_secs(interval_s.max(0) as u64);
    if interval_s > 0 && job.lease >= interval {
        out.push(Problem::warning(
            &job.name,
            format!("lease {} >= interval {}", human(job.lease), human(interval)),
            "a crashed run keeps the lease past the next firing, which it blocks",
        ));
    }
    if let (Some(t), Overlap::Coalesce) = (job.timeout, job.overlap) {
        if interval_s > 0 && t >= interval {
            out.push(Problem::warning(
                &job.name,
                format!("timeout {} >= interval {}", human(t), human(interval)),
                "under coalesce a run that hangs until its timeout drops every \
                 firing in between",
            ));
        }
    }
    // `exactly run` renews each run's lease by heartbeat, so a run longer than the lease
    // is normal: what can go wrong is a lease too short to ride out a stalled renewal
    // (the `lease<6s` of `status`, judged alike).
    let beats = crate::lease::SCHEDULER_BEAT * crate::lease::RENEWED_LEASE_MIN_BEATS;
    if crate::lease::renewal_margin_thin(job.lease, (interval_s > 0).then_some(interval)) {
        out.push(Problem::warning(
            &job.name,
            format!(
                "lease {} < {} scheduler heartbeats ({})",
                human(job.lease),
                crate::lease::RENEWED_LEASE_MIN_BEATS,
                human(beats)
            ),
            "a run's lease is renewed every third of it and the run is stopped when a \
             renewal is that late: a stall of under two heartbeats (a busy database, a \
             starved process) stops it; lengthen it, keeping it shorter than the interval",
        ));
    }
}

/// A job's runs so far: no timeout and nothing to size one by; p99 over the interval.
fn lint_history(job: &Job, history: &BTreeMap<String, History>, out: &mut Vec<Problem>) {
    let interval_s = job.schedule.interval_s();
    let interval = Duration::from_secs(interval_s.max(0) as u64);
    let p99 = history.get(job.name.as_str()).and_then(|h| h.p99_ms);
    if job.timeout.is_none() && p99.is_none() {
        out.push(Problem::note(
            &job.name,
            "no timeout",
            "with no run history to size it by, \
             a hung run holds the job until someone kills it; set timeout = \"…\"",
        ));
    }
    let Some(h) = history.get(job.name.as_str()) else {
        return;
    };
    let Some(p99) = h.p99_ms else { return };
    let p99d = Duration::from_millis(p99);
    if interval_s > 0 && p99d > interval {
        out.push(Problem::observed(
            &job.name,
            format!(
                "observed p99 {} > interval {}",
                human(p99d),
                human(interval)
            ),
            format!(
                "over {} recorded runs: \
                 a queue with an uncontrolled arrival rate, not a schedule",
                h.runs
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::resolved_command;

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_relative_program_is_its_folders() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for d in [&a, &b] {
            std::fs::write(d.path().join("run.sh"), "true").unwrap();
        }
        let ra = resolved_command(&argv(&["./run.sh"]), Some(a.path()));
        let rb = resolved_command(&argv(&["./run.sh"]), Some(b.path()));
        assert_ne!(ra, rb, "two folders' ./run.sh are two commands");
        assert!(
            ra[0].starts_with('/') && ra[0].ends_with("/run.sh"),
            "{ra:?}"
        );
        // One file, however it is spelled, is one command.
        let sub = resolved_command(&argv(&["sub/../run.sh"]), Some(a.path()));
        assert_eq!(sub, ra);
        let as_arg = resolved_command(&argv(&["sh", "run.sh"]), Some(a.path()));
        let as_arg_dot = resolved_command(&argv(&["sh", "./run.sh"]), Some(a.path()));
        assert_eq!(as_arg, as_arg_dot);
        assert_eq!(as_arg[1], ra[0]);
        // A bare name is found on PATH: it stays as written.
        let bare = resolved_command(&argv(&["python3", "-c", "print(1)"]), Some(a.path()));
        assert_eq!(bare, argv(&["python3", "-c", "print(1)"]));
    }

    /// 1,000 jobs of one command are one warning naming a few of them, not 1,000 lines; two
    /// jobs of one command still get one each.
    #[test]
    fn many_jobs_of_one_command_are_one_warning() {
        let mut file = String::new();
        for i in 0..1000 {
            file.push_str(&format!(
                "[[job]]\nname = \"j{i}\"\nevery = \"1m\"\nlease = \"10s\"\n\
                 overlap = \"coalesce\"\ncommand = [\"true\"]\n\n"
            ));
        }
        file.push_str(
            "[[job]]\nname = \"a\"\nevery = \"1m\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
             command = [\"false\"]\n\n[[job]]\nname = \"b\"\nevery = \"1m\"\nlease = \"10s\"\n\
             overlap = \"coalesce\"\ncommand = [\"false\"]\n",
        );
        let l = super::super::config::parse(&file);
        let p = super::lint(&l.jobs, &Default::default(), None);
        let same: Vec<&String> = p
            .iter()
            .filter(|p| p.what.starts_with("same command"))
            .map(|p| &p.what)
            .collect();
        assert_eq!(same.len(), 2, "{same:?}");
        assert!(
            same.iter().any(|w| w.starts_with(
                "same command as job \"j0\" in 999 other jobs: \"j1\", \"j2\", \"j3\", \"j4\", \"j5\", …"
            )),
            "{same:?}"
        );
        assert!(
            same.contains(&&"same command as job \"a\"".to_string()),
            "{same:?}"
        );
    }
}

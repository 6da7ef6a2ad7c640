//! A problem of a jobs file: every problem is a line `file: job: what — why`, an error (found
//! while parsing, `parse.rs`: the job is unusable and `exactly run` refuses the file) or a
//! warning (found by the lint, `lint.rs`). Also the command as a job's folder resolves it, which
//! the lint compares and the registry digests.
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Severity {
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
pub(crate) struct Problem {
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
pub(crate) struct At {
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
    pub(crate) fn rejects(&self) -> bool {
        self.severity != Severity::Note
    }
    /// Whether `run` refuses the file for it: errors only.
    pub(crate) fn refuses_run(&self) -> bool {
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
    pub(crate) fn kind(&self) -> &'static str {
        match self.severity {
            Severity::Error => "error",
            Severity::Warning | Severity::Observed => "warning",
            Severity::Note => "note",
        }
    }
    /// The one-line form: `file:LINE: job: what — why` (`file: job: …` when it is nowhere in
    /// particular; `warning:` and `note:` marked).
    pub(crate) fn line(&self, file: &str) -> String {
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
pub(crate) fn resolved_command(argv: &[String], dir: Option<&Path>) -> Vec<String> {
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
}

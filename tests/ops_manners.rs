//! The command line's manners, with the real binary: a closed pipe ends a command quietly, every
//! man page SEE ALSO names exists and has EXIT STATUS/ENVIRONMENT/FILES, `--help` gives the exit
//! codes, completion knows the jobs and effects of a real database, and every `--json` output
//! carries `schema_version` and one naming scheme.
mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;
use support::runner::{wait_until, Site};

/// How `exactly ARGS` ended with its stdout a pipe whose reader went away: closed before the
/// command wrote anything (`read_first` false, so the very first write meets it), or after one
/// line was read. Returns the exit status and stderr.
fn with_closed_pipe(
    db: &str,
    args: &[&str],
    read_first: bool,
) -> std::io::Result<(ExitStatus, String)> {
    let (reader, writer) = std::io::pipe()?;
    let reader = if read_first {
        Some(reader)
    } else {
        drop(reader);
        None
    };
    let child = Command::new(support::bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(r) = reader {
        let mut line = String::new();
        BufReader::new(r).read_line(&mut line)?;
        // The reader is dropped here: the rest of the output meets a closed pipe.
    }
    let out = child.wait_with_output()?;
    Ok((
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// A site whose database has a registered job `loud` with one run that printed a lot.
fn site_with_a_run() -> Site {
    let site = Site::new();
    site.write_jobs(
        "[[job]]\nname = \"loud\"\nevery = \"1h\"\nlease = \"1m\"\noverlap = \"coalesce\"\n\
         timeout = \"30s\"\ncommand = [\"sh\", \"-c\", \"seq 1 100000\"]\n",
    );
    let mut sched = site.start("registrar", "1s");
    assert!(
        wait_until(Duration::from_secs(20), || site
            .count("SELECT count(*) FROM exactly_jobs WHERE job_key = 'loud'")
            == 1),
        "the scheduler did not register the job: {}",
        site.log("registrar")
    );
    assert_eq!(sched.term(Duration::from_secs(20)), Some(0));
    let (code, out, err) = site.exactly(&["trigger", "loud"]);
    assert_eq!(code, 0, "{out}{err}");
    site
}

#[test]
fn a_closed_pipe_ends_every_printing_command_quietly() {
    let site = site_with_a_run();
    let jobs = site.jobs();
    let commands: Vec<Vec<&str>> = vec![
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["completions", "fish"],
        vec!["completions", "elvish"],
        vec!["completions", "powershell"],
        vec!["man"],
        vec!["--help"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["metrics"],
        vec!["metrics", "--openmetrics"],
        vec!["logs", "loud"],
        vec!["key", "--action", "a", "--target", "b"],
        vec!["check", &jobs],
        vec!["check", "--json", &jobs],
        vec!["gc", "--keep", "30d", "--dry-run"],
        vec!["trigger", "loud"],
    ];
    for args in &commands {
        for read_first in [false, true] {
            let (status, err) = with_closed_pipe(&site.db(), args, read_first).expect("spawn");
            let quiet = status.success() || status.signal() == Some(libc::SIGPIPE);
            // What a command says on stderr anyway (`logs`' run header) is fine; a panic or an
            // error about the pipe is not.
            let complaint = err.contains("panicked")
                || err.contains("exactly:")
                || err.to_lowercase().contains("broken pipe");
            assert!(
                quiet && !complaint,
                "exactly {args:?} (read a line first: {read_first}) ended {status:?}: {err}"
            );
        }
    }
}

//! The command line's manners, with the real binary: a closed pipe ends a command quietly, every
//! man page SEE ALSO names exists and has EXIT STATUS/ENVIRONMENT/FILES, `--help` gives the exit
//! codes, completion knows the jobs and effects of a real database, and every `--json` output
//! carries `schema_version` and one naming scheme.
use crate::on_both_backends;
use crate::support;

use std::io::{BufRead, BufReader};
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

/// The man page names a page points at (`exactly\-init(1)`, `\fBexactly\-jobs\fR(5)`).
fn page_refs(roff: &str) -> Vec<String> {
    let plain = roff
        .replace("\\fB", "")
        .replace("\\fR", "")
        .replace("\\-", "-");
    let mut out = Vec::new();
    for (i, _) in plain.match_indices("exactly") {
        let rest = &plain[i..];
        let name_len = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .unwrap_or(rest.len());
        let tail = &rest[name_len..];
        if let Some(section) = tail
            .strip_prefix('(')
            .and_then(|t| t.split_once(')'))
            .map(|(s, _)| s)
            .filter(|s| s.len() == 1 && s.chars().all(|c| c.is_ascii_digit()))
        {
            out.push(format!("{}.{section}", &rest[..name_len]));
        }
    }
    out
}

#[test]
fn every_man_page_a_page_points_at_exists_with_exit_status_environment_and_files() {
    let site = Site::new();
    let dir = site.path("man");
    let (code, out, err) = site.exactly(&["man", "--dir", dir.to_str().expect("utf8")]);
    assert_eq!(code, 0, "{out}{err}");
    let mut pages = std::collections::BTreeMap::new();
    for section in ["man1", "man5"] {
        for e in std::fs::read_dir(dir.join(section)).expect("man pages written") {
            let path = e.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            pages.insert(name, std::fs::read_to_string(&path).expect("page"));
        }
    }
    for must in [
        "exactly.1",
        "exactly-effect.1",
        "exactly-init.1",
        "exactly-lease-claim.1",
        "exactly-jobs.5",
    ] {
        assert!(pages.contains_key(must), "no {must}: {:?}", pages.keys());
    }
    for (name, text) in &pages {
        for section in ["EXIT STATUS", "ENVIRONMENT", "FILES", "SEE ALSO"] {
            assert!(
                text.contains(&format!(".SH \"{section}\"")),
                "{name} has no {section} section"
            );
        }
        for r in page_refs(text) {
            assert!(
                pages.contains_key(&r),
                "{name} points at {r}, which does not exist"
            );
        }
    }
    // exactly(1) points at every other page; chaos and far-side are test tools, not pages.
    let top_refs = page_refs(&pages["exactly.1"]);
    for name in pages.keys().filter(|n| *n != "exactly.1") {
        assert!(
            top_refs.contains(name),
            "exactly(1) does not point at {name}"
        );
    }
    assert!(!pages
        .keys()
        .any(|n| n.contains("chaos") || n.contains("far-side")));
    // The effect's page has the whole exit code table.
    let effect = &pages["exactly-effect.1"];
    let exit = &effect[effect.find(".SH \"EXIT STATUS\"").expect("exit status")..];
    for code in ["0", "1", "2", "3", "4", "5", "6", "7", "75"] {
        assert!(
            exit.contains(&format!("\\fB{code}\\fR\n")),
            "exit code {code} missing"
        );
    }
    // The jobs file's page: every key, with its type, default and an example.
    let jobs = &pages["exactly-jobs.5"];
    for key in [
        "retain",
        "name",
        "schedule",
        "every",
        "timezone",
        "lease",
        "overlap",
        "queue_cap",
        "catchup",
        "timeout",
        "observe_timeout",
        "command",
        "dst_repeated",
        "dst_skipped",
        "keep_runs",
        "retries",
        "retry_backoff",
        "retry_backoff_max",
        "pause_after_failures",
        "jitter",
        "starting_deadline",
        "ping",
        "hook",
        "webhook",
        "unknown_older_than",
        "approval_pending_longer_than",
        "failing_runs",
        "late_by",
        "scheduler_gone",
        "recovery",
    ] {
        let at = jobs
            .find(&format!(".TP\n\\fB{key}\\fR ("))
            .unwrap_or_else(|| panic!("exactly-jobs(5) does not document {key}"));
        let entry = &jobs[at..jobs[at + 4..]
            .find(".TP")
            .map_or(jobs.len(), |n| at + 4 + n)];
        assert!(
            entry.contains("Default:") && entry.contains("Example:"),
            "{entry}"
        );
    }
    // `exactly man` is still exactly(1); one page by its subcommand or name.
    for (args, page) in [
        (vec!["man"], "exactly.1"),
        (vec!["man", "effect"], "exactly-effect.1"),
        (vec!["man", "lease-claim"], "exactly-lease-claim.1"),
        (vec!["man", "exactly-jobs.5"], "exactly-jobs.5"),
    ] {
        let (code, out, err) = site.exactly(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert_eq!(out, pages[page], "{args:?}");
    }
    let (code, _, err) = site.exactly(&["man", "no-such-page"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn help_gives_the_exit_codes() {
    let site = Site::new();
    let (code, top, _) = site.exactly(&["--help"]);
    assert_eq!(code, 0);
    for line in [
        "0  done",
        "1  any other error",
        "2  bad usage or input",
        "3  fenced",
        "4  awaiting approval",
        "5  an unresolved earlier attempt",
        "6  unknown",
        "7  cancelled",
        "75  not sent",
    ] {
        assert!(top.contains(line), "--help lacks {line:?}:\n{top}");
    }
    for sub in [
        "effect", "status", "check", "run", "approve", "deny", "resolve", "trigger",
    ] {
        let (code, help, _) = site.exactly(&[sub, "--help"]);
        assert_eq!(code, 0);
        let exit = help
            .split_once("Exit status:")
            .unwrap_or_else(|| panic!("{sub} --help has no exit status:\n{help}"))
            .1;
        assert!(
            exit.contains("  0  ") && exit.contains("  2  "),
            "{sub}: {exit}"
        );
    }
    let (_, effect, _) = site.exactly(&["effect", "--help"]);
    assert!(effect.contains("75  not sent") && effect.contains("4  awaiting approval"));
    let (_, resolve, _) = site.exactly(&["resolve", "--help"]);
    assert!(resolve.contains("5  in flight"), "{resolve}");
}

/// What bash offers for a command line (`words`, the last one being completed), with the
/// completion script `exactly completions bash` printed.
fn bash_offers(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let program = r#"source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=()
_exactly_dynamic "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}""#;
    let out = Command::new("bash")
        .arg("-c")
        .arg(program)
        .arg("bash")
        .arg(script)
        .args(words)
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Keys named before the naming scheme, and the scheme's name each must have beside it.
const OLD_NAMES: &[(&str, &str)] = &[
    ("job", "job_key"),
    ("token", "fencing_token"),
    ("slot", "scheduled_at"),
    ("since", "since_at"),
    ("lease_until", "lease_expires_at"),
    ("until", "lease_expires_at"),
    ("from", "from_at"),
    ("to", "to_at"),
    ("horizon", "horizon_at"),
];

/// Every object below `v` that has an old key also has the scheme's (`dst` maps are keyed
/// by job names, not fields).
fn scheme_gaps(v: &serde_json::Value, path: &str, gaps: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(o) => {
            for (old, new) in OLD_NAMES {
                if o.contains_key(*old) && !o.contains_key(*new) {
                    gaps.push(format!("{path}: {old} without {new}"));
                }
            }
            for (k, x) in o.iter().filter(|(k, _)| *k != "dst") {
                scheme_gaps(x, &format!("{path}.{k}"), gaps);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                scheme_gaps(x, &format!("{path}[{i}]"), gaps);
            }
        }
        _ => {}
    }
}

/// The last whole hour's slot of an hourly job, as RFC 3339.
fn last_whole_hour() -> String {
    let now = chrono::Utc::now().timestamp();
    let slot = chrono::DateTime::from_timestamp(now / 3600 * 3600 - 3600, 0).expect("slot");
    slot.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

// On SQLite and on PostgreSQL: a closed pipe must not end a command that talks to a server
// (SIGPIPE's default applies to pipes only: sockets are written with MSG_NOSIGNAL), and the
// completion helper and the JSON read either database through the library.
on_both_backends! {
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
                // Exit 0, as the shell sees it (`exactly man | head` was 141: killed by SIGPIPE).
                let quiet = status.success();
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

    #[test]
    fn completion_offers_the_jobs_and_effects_of_a_real_database_not_the_test_tools() {
        let site = site_with_a_run();
        // A job known only by its lease (a cron wrapper's), and an effect awaiting approval.
        let token = site.claim("cron-only", "10m");
        let (code, _, err) = site.exactly(&[
            "effect",
            "--job",
            "cron-only",
            "--token",
            &token,
            "--action",
            "pay",
            "--target",
            "acme",
            "--needs-approval",
            "--",
            "true",
        ]);
        assert_eq!(code, 4, "{err}");
        let pending = site.strings("SELECT effect_key FROM exactly_approvals");
        assert_eq!(pending.len(), 1);

        let (code, jobs, err) = site.exactly(&["__complete", "jobs"]);
        assert_eq!(code, 0, "{err}");
        let jobs: Vec<&str> = jobs.lines().collect();
        assert!(
            jobs.contains(&"loud") && jobs.contains(&"cron-only"),
            "{jobs:?}"
        );
        let (code, effects, err) = site.exactly(&["__complete", "effects"]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            effects.lines().collect::<Vec<_>>(),
            vec![pending[0].as_str()]
        );
        // No database: nothing, and none is created.
        let missing = site.path("missing.db");
        let missing = missing.to_str().expect("utf8");
        let out = Command::new(support::bin())
            .args(["--db", missing, "__complete", "jobs"])
            .output()
            .expect("run exactly");
        assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty());
        assert!(!std::path::Path::new(missing).exists());

        for shell in ["bash", "zsh", "fish"] {
            let (code, script, err) = site.exactly(&["completions", shell]);
            assert_eq!(code, 0, "{err}");
            assert!(
                script.contains("__complete jobs") || script.contains("__complete $"),
                "{shell}"
            );
            assert!(
                script.contains("__complete"),
                "{shell} does not call the helper"
            );
            for tool in ["chaos", "far-side"] {
                assert!(
                    !script.contains(tool),
                    "{shell} completes the test tool {tool}"
                );
            }
        }
        let (_, zsh, _) = site.exactly(&["completions", "zsh"]);
        assert!(
            zsh.contains("':job -- The registered job to fire now:_exactly_jobs'"),
            "{zsh:.300}"
        );
        assert!(zsh.contains(":_exactly_effects'"));
        let (_, fish, _) = site.exactly(&["completions", "fish"]);
        assert!(fish.contains(
            "__fish_exactly_using_subcommand trigger\" -f -a \"(__fish_exactly_complete jobs)\""
        ));
        assert!(fish.contains("-l job") && fish.contains("(__fish_exactly_complete effects)"));

        // Real bash, as it completes a line.
        let (_, bash, _) = site.exactly(&["completions", "bash"]);
        let script = site.path("exactly.bash");
        std::fs::write(&script, bash).expect("write the script");
        let exe = support::bin();
        let db = site.db();
        let offers = |words: &[&str]| {
            let mut all = vec![exe.as_str(), "--db", db.as_str()];
            all.extend_from_slice(words);
            bash_offers(&script, &all)
        };
        assert_eq!(offers(&["trigger", ""]), vec!["cron-only", "loud"]);
        assert_eq!(offers(&["logs", "lo"]), vec!["loud"]);
        assert_eq!(
            offers(&["lease", "claim", "--job", ""]),
            vec!["cron-only", "loud"]
        );
        assert_eq!(offers(&["approve", ""]), pending);
        assert!(offers(&["trigger", "--owner", ""])
            .iter()
            .all(|o| o != "loud"));
        let commands = offers(&[""]);
        assert!(commands.iter().any(|c| c == "trigger"), "{commands:?}");
        assert!(!commands
            .iter()
            .any(|c| c == "chaos" || c == "far-side" || c.starts_with("__")));
    }

    #[test]
    fn every_json_output_carries_schema_version_and_one_naming_scheme() {
        let site = site_with_a_run();
        let jobs = site.jobs();
        let slot = last_whole_hour();
        let outputs: Vec<Vec<&str>> = vec![
            vec!["status", "--json"],
            vec!["check", "--json", &jobs],
            vec!["trigger", "--json", "loud"],
            vec!["backfill", "--json", "loud", "--from", &slot, "--to", &slot],
            vec!["gc", "--json", "--keep", "30d", "--dry-run"],
            vec![
                "chaos",
                "--json",
                "--iterations",
                "1",
                "--scenario",
                "kill-mid-effect",
            ],
        ];
        for args in &outputs {
            let (code, out, err) = site.exactly(args);
            assert_eq!(code, 0, "{args:?}: {err}");
            let v: serde_json::Value =
                serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"));
            assert!(
                v["schema_version"].is_i64(),
                "{args:?} has no schema_version: {out}"
            );
            assert!(v["json_schema_version"].is_i64(), "{args:?}: {out}");
            let mut gaps = Vec::new();
            scheme_gaps(&v, "", &mut gaps);
            assert!(gaps.is_empty(), "{args:?}: {gaps:?}");
        }
        // The old names are still there for scripts that read them.
        let (_, out, _) = site.exactly(&["trigger", "--json", "loud"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["job"], "loud");
        assert_eq!(v["job_key"], "loud");
        assert_eq!(v["slot"], v["scheduled_at"]);
        assert_eq!(v["run"]["token"], v["run"]["fencing_token"]);
        let (_, out, _) = site.exactly(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        let job = &v["jobs"][0];
        assert_eq!(job["lease_until"], job["lease_expires_at"]);
    }
}

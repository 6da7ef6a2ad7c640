//! What `--help` and the man pages say beyond each flag, written once: the exit codes (a
//! contract: docs/contract.md), the environment and the files. `--help` gets the exit codes
//! appended to each command's text ([`command`]); `man.rs` renders all three as sections.
use clap::CommandFactory;
use std::io::Write;

/// One exit code and what it means for a command.
pub(super) type Code = (&'static str, &'static str);

/// The table every command shares (docs/contract.md, "Exit codes"): 0 done/duplicate, 3 fenced, 4
/// awaiting approval, 5 unresolved earlier attempt, 6 unknown, 7 cancelled, 75 not sent, 2 bad
/// usage or input, 1 any other error.
pub(super) const TABLE: &[Code] = &[
    ("0", "done, or already done (a duplicate suppressed)"),
    ("1", "any other error (the database cannot be used, …)"),
    ("2", "bad usage or input (a jobs file with errors, too)"),
    (
        "3",
        "fenced: a newer lease holds the job (lease claim: another owner holds it); also: \
         the token is lower than one handed out for the job before (EXACTLY_TOKEN_MEMORY): \
         do not act",
    ),
    ("4", "awaiting approval"),
    (
        "5",
        "an unresolved earlier attempt (its sender may still be sending)",
    ),
    (
        "6",
        "unknown: the effect's outcome is not known; resolve it after checking the far side",
    ),
    ("7", "cancelled"),
    (
        "75",
        "not sent: the command promised nothing was sent (the claim is released)",
    ),
];

const GENERIC: &[Code] = &[
    ("0", "done"),
    ("1", "an error (the database cannot be used, …)"),
    ("2", "bad usage or input"),
];

/// The exit codes of the command at `path` (`effect`, `lease claim`; `` for the top level).
// A table of data, one arm per command: the exception to "no function over 100 lines",
// since splitting it would scatter the table.
pub(super) fn exit_codes(path: &str) -> &'static [Code] {
    match path {
        "" | "effect" => TABLE,
        "status" => &[
            ("0", "printed; with --check: OK"),
            (
                "1",
                "the database cannot be read (missing, locked, not exactly's); \
                 with --check: WARNING",
            ),
            ("2", "bad usage; with --check: CRITICAL"),
            ("3", "with --check: UNKNOWN, the database cannot be read"),
        ],
        "check" => &[
            ("0", "no errors (with --strict, no warnings either)"),
            (
                "1",
                "problems: an error (with --strict, a warning too), one line each",
            ),
            ("2", "bad usage, or the jobs file cannot be read"),
        ],
        "doctor" => &[
            ("0", "nothing fails (with --strict, nothing warns either)"),
            (
                "1",
                "a rule fails (with --strict, or warns), or the database cannot be read",
            ),
            (
                "2",
                "bad usage: no such job, or the jobs file cannot be read or has errors",
            ),
        ],
        "run" => &[
            (
                "0",
                "stopped by SIGTERM, SIGINT or SIGHUP, its commands given --grace",
            ),
            (
                "1",
                "the database kept failing for --give-up-after, or another error",
            ),
            (
                "2",
                "bad usage, or the jobs file has errors (refused; see exactly check)",
            ),
        ],
        "watch" => &[
            ("0", "stopped by SIGTERM, SIGINT or SIGHUP"),
            ("1", "the database cannot be opened, or another error"),
            (
                "2",
                "bad usage, or the jobs file has errors or no [[notify]] tables",
            ),
        ],
        "approve" => &[
            ("0", "approved (or approved already)"),
            ("1", "no such pending effect, or it was denied or cancelled"),
            ("2", "bad usage"),
        ],
        "deny" => &[
            ("0", "denied: the effect ends cancelled"),
            (
                "1",
                "no such effect, or it is no longer pending (it was not stopped)",
            ),
            ("2", "bad usage"),
        ],
        "resolve" => &[
            ("0", "resolved"),
            ("1", "no such open effect"),
            ("2", "bad usage"),
            (
                "5",
                "in flight: its sender may still be sending (check the far side, then --force)",
            ),
        ],
        "lease claim" => &[
            ("0", "claimed: the fencing token on stdout"),
            ("1", "an error (the database cannot be used, …)"),
            ("2", "bad usage"),
            (
                "3",
                "another owner holds the lease; or the token handed out is not above one \
                 handed out for the job before (a failover that lost commits): the lease was \
                 released, do not act",
            ),
        ],
        "lease renew" => &[
            ("0", "done"),
            ("1", "an error (the database cannot be used, …)"),
            ("2", "bad usage"),
            (
                "3",
                "fenced: the token no longer holds the job, or is lower than one handed out \
                 for it before (the database went back)",
            ),
        ],
        "lease release" => &[
            ("0", "done"),
            ("1", "an error (the database cannot be used, …)"),
            ("2", "bad usage"),
            ("3", "fenced: the token no longer holds the job"),
        ],
        "trigger" => &[
            ("0", "the run ended ok, or the firing was queued"),
            (
                "1",
                "the run failed (or timed out, or was killed), or another error",
            ),
            ("2", "bad usage, or no such registered job"),
            (
                "3",
                "not run: coalesced, saturated, missed, skipped (paused), a duplicate, or busy",
            ),
        ],
        "backfill" => &[
            ("0", "every slot ran ok, or was done or skipped already"),
            ("1", "a run failed, or another error"),
            ("2", "bad usage, or no such registered job"),
            ("3", "the job's lease stayed busy"),
        ],
        "probe" => &[
            (
                "0",
                "the duplicate was suppressed: dedupe works, and nothing was sent",
            ),
            (
                "1",
                "dedupe broken (nothing sent, the reservation released), nothing to probe, \
                 no verdict, or another error",
            ),
            ("2", "bad usage"),
        ],
        "mcp" => &[
            ("0", "the client disconnected; the lease was released"),
            ("1", "the database failed, or another error"),
            ("2", "bad usage, or a bad --config file"),
            ("3", "another gateway of the same --name holds its lease"),
        ],
        "key" => &[
            ("0", "the effect key printed"),
            (
                "2",
                "an ambiguous key: an empty action or target, a | in the action, …",
            ),
        ],
        _ => GENERIC,
    }
}

/// `Exit status:` and one line per code, for `--help`.
fn exit_help(path: &str) -> String {
    let mut s = String::from("Exit status:");
    for (code, what) in exit_codes(path) {
        s.push_str(&format!("\n  {code:>3}  {what}"));
    }
    s
}

/// The environment every command reads, and what `exactly run` and `exactly effect` give the
/// commands they start.
pub(super) const ENVIRONMENT: &[Code] = &[
    (
        "EXACTLY_DB",
        "the database when --db is not given: a SQLite file, \
                    or postgres://user:pass@host:port/db",
    ),
    (
        "XDG_STATE_HOME",
        "without --db and EXACTLY_DB, and no ./exactly.db: \
                        $XDG_STATE_HOME/exactly/exactly.db (default ~/.local/state)",
    ),
    (
        "EXACTLY_ACTOR",
        "a name stored beside the login user with each decision, as a claim: \"ceo \
                       (set by root)\"",
    ),
    (
        "EXACTLY_HOST",
        "the host in attempt ids (default the host name), \
                      for containers that share a database",
    ),
    (
        "EXACTLY_MAX_SKEW",
        "the clock skew tolerated between processes on one SQLite \
                          file (default 2s)",
    ),
    (
        "EXACTLY_BUSY_TIMEOUT_MS",
        "how long a SQLite writer waits for a lock (default 5000)",
    ),
    (
        "EXACTLY_SCHEDULER_DEAD_AFTER",
        "how long a silent scheduler counts as alive for \
                                      readers (default 10s)",
    ),
    (
        "RUST_LOG",
        "which log lines the long-running commands (exactly run, watch) write to stderr: \
                  default info; warn hides the INFO lines",
    ),
    (
        "EXACTLY_LOG_FORMAT",
        "json: each log line one JSON object (time, level, job, message), \
                            as exactly run --log-format json does; default text",
    ),
    (
        "PGSSLROOTCERT",
        "a CA file trusted for PostgreSQL over TLS (sslmode=require)",
    ),
    (
        "EXACTLY_FAILOVER_WINDOW",
        "after an asynchronous PostgreSQL failover, how long an effect without a row is \
         checked (observer, or exactly resolve) before it is sent (default: an hour, and longer \
         until every effect of the old timeline's last leases is accounted for; a length: that, \
         fixed; 0s: none)",
    ),
    (
        "EXACTLY_FAILOVER_GUARD",
        "off: a PostgreSQL failover is recorded, and fencing tokens are not raised nor effects \
         checked (the chaos self-check)",
    ),
    (
        "EXACTLY_SYNC_WAIT_MS",
        "how long a PostgreSQL commit may wait for a synchronous standby before it is \
         refused with that reason (default 30000; exactly run uses its --give-up-after)",
    ),
    (
        "EXACTLY_TOKEN_MEMORY",
        "where lease claim, lease renew, effect and mcp remember the highest fencing token \
         handed out per database and job (default $XDG_STATE_HOME/exactly/tokens); off: \
         nowhere",
    ),
    ("NO_COLOR", "top draws without colour"),
    (
        "EXACTLY_JOB, EXACTLY_FENCING_TOKEN",
        "given to each run's command; \
                                            exactly effect takes --job and --token from them",
    ),
    (
        "EXACTLY_RUN_ID, EXACTLY_SCHEDULED_AT, EXACTLY_DB_ID, EXACTLY_BIN",
        "given to each run's \
                                                                          command: its run, its \
                                                                          firing's slot \
                                                                          (fixed-width UTC), the \
                                                                          database's identity, \
                                                                          the exactly binary",
    ),
    (
        "EXACTLY_EFFECT_KEY",
        "given to the command exactly effect wraps, and to its observer: \
                            the far side's idempotency key",
    ),
];

/// The files exactly reads and writes.
pub(super) const FILES: &[Code] = &[
    (
        "./exactly.db",
        "the database, when it exists in the working folder and neither --db nor \
                      EXACTLY_DB is given",
    ),
    (
        "~/.local/state/exactly/exactly.db",
        "the default database \
                                           ($XDG_STATE_HOME/exactly/exactly.db), \
                                           its folder created 0700",
    ),
    (
        "~/.local/state/exactly/tokens",
        "the highest fencing token each job was handed per database, one JSON line each \
         ($XDG_STATE_HOME/exactly/tokens, or EXACTLY_TOKEN_MEMORY), changed under \
         tokens.lock: a claim handed one not above it is released and refused (exit 3)",
    ),
    (
        "DB-wal, DB-shm",
        "SQLite's side files beside a database file; \
                        a viewer needs to read them too",
    ),
    (
        "/etc/exactly/jobs.toml",
        "a jobs file, as the systemd unit names it (see exactly-jobs(5))",
    ),
    (
        "/var/lib/exactly/exactly.db",
        "the database of the systemd unit and the cron wrapper",
    ),
];

/// The command line as parsed and as `--help` shows it: every command's help ends with its
/// exit codes (the top level's with the whole table).
pub(super) fn command() -> clap::Command {
    let cmd = super::Cli::command();
    with_exit_codes(cmd, "")
}

fn with_exit_codes(mut cmd: clap::Command, path: &str) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let sub_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path} {name}")
        };
        cmd = cmd.mut_subcommand(&name, |s| with_exit_codes(s, &sub_path));
    }
    let text = match cmd.get_after_help() {
        Some(before) => format!("{before}\n\n{}", exit_help(path)),
        None => exit_help(path),
    };
    cmd.after_help(text)
}

/// A section of tagged paragraphs.
pub(super) fn section(w: &mut dyn Write, title: &str, items: &[Code]) -> std::io::Result<()> {
    writeln!(w, ".SH \"{title}\"")?;
    for (tag, text) in items {
        writeln!(w, ".TP\n\\fB{}\\fR\n{}", roff(tag), roff(text))?;
    }
    Ok(())
}

/// Text made safe for roff: backslashes and hyphens escaped, no line read as a request.
pub(super) fn roff(text: &str) -> String {
    let s = text.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

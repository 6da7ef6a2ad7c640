//! `exactly-jobs(5)`: the jobs file `exactly run` and `exactly check` read — every key with
//! its type, default and an example. A unit test keeps it in step with `runner::config`'s keys.
use super::manual::{roff, section};
use std::io::Write;

/// One key of the jobs file.
pub(super) struct KeyDoc {
    pub key: &'static str,
    pub kind: &'static str,
    pub default: &'static str,
    pub what: &'static str,
    pub example: &'static str,
}

/// The top-level keys (before the first `[[job]]`).
pub(super) const FILE_KEYS: &[KeyDoc] = &[KeyDoc {
    key: "retain",
    kind: "duration string, at least 1d",
    default: "off",
    what:
        "exactly run prunes runs, events and firings older than this, as exactly gc --keep does; \
         open effects, approvals, leases and all-time counters are kept",
    example: "retain = \"90d\"",
}];

/// The keys of a `[[job]]` table.
pub(super) const JOB_KEYS: &[KeyDoc] = &[
    KeyDoc {
        key: "name",
        kind: "string, at most 200 characters, no control or invisible characters",
        default: "required",
        what: "the job's identity in the ledger, the lease table and the registry; compared \
               without case and surrounding spaces, so two jobs may not differ only by those",
        example: "name = \"daily-digest\"",
    },
    KeyDoc {
        key: "schedule",
        kind: "cron expression string, 5 fields (or 6, seconds first)",
        default: "give schedule or every, not both",
        what: "when the job fires, on the wall clock of timezone; \
               an expression that never fires is refused",
        example: "schedule = \"0 7 * * *\"",
    },
    KeyDoc {
        key: "every",
        kind: "duration string, whole seconds, at least 1s",
        default: "give schedule or every, not both",
        what: "a fixed interval: the job fires at whole multiples of it since the Unix epoch, \
               so every scheduler agrees which firing is which",
        example: "every = \"20m\"",
    },
    KeyDoc {
        key: "timezone",
        kind: "IANA time zone name",
        default: "UTC",
        what: "the zone a cron schedule is read in (only with schedule)",
        example: "timezone = \"Europe/Berlin\"",
    },
    KeyDoc {
        key: "lease",
        kind: "duration string, at least 100ms",
        default: "required",
        what: "how long a run holds the job's lease, renewed every third of it while it runs \
               (a run may outlast it): longer than the worst-case run's pauses, at least 6s \
               (three scheduler heartbeats; shorter is warned about where the interval allows), \
               shorter than the interval",
        example: "lease = \"15m\"",
    },
    KeyDoc {
        key: "overlap",
        kind: "coalesce | queue | fail",
        default: "required",
        what: "a firing while a run is live: coalesce drops it (counted), \
               queue keeps at most queue_cap waiting, fail records a loud miss",
        example: "overlap = \"coalesce\"",
    },
    KeyDoc {
        key: "queue_cap",
        kind: "integer, 1 to 10000",
        default: "required with overlap = \"queue\", refused otherwise",
        what: "how many firings may wait behind a live run",
        example: "queue_cap = 3",
    },
    KeyDoc {
        key: "catchup",
        kind: "duration string",
        default: "0 (an outage's firings are not run)",
        what: "firings that fell due while no scheduler was alive (an outage) are still \
               fired when they are at most this old; older ones are not run, counted in the \
               outage's event, never as missed",
        example: "catchup = \"2h\"",
    },
    KeyDoc {
        key: "timeout",
        kind: "duration string, at least 100ms",
        default: "no limit",
        what: "a run past it is stopped, its process group killed: outcome timeout",
        example: "timeout = \"10m\"",
    },
    KeyDoc {
        key: "observe_timeout",
        kind: "duration string, at least 100ms",
        default: "30s",
        what: "an observer (exactly effect --observe) past it answers \"can't tell\"",
        example: "observe_timeout = \"30s\"",
    },
    KeyDoc {
        key: "command",
        kind: "array of strings (program, then arguments; no shell)",
        default: "required",
        what: "what a run executes, in the jobs file's folder (a relative path is relative to the \
               file), with EXACTLY_DB, EXACTLY_JOB, EXACTLY_FENCING_TOKEN, EXACTLY_RUN_ID, \
               EXACTLY_SCHEDULED_AT, EXACTLY_DB_ID and EXACTLY_BIN set; a command that exits 4 \
               while one of the job's effects waits for approval (exactly effect \
               --needs-approval) ends awaiting_approval, not failed: no failure is counted, its \
               firing waits, exactly approve runs it again within a scheduler tick (the \
               approved effect goes out in seconds) and exactly deny ends it denied",
        example: "command = [\"sh\", \"scripts/digest.sh\"]",
    },
    KeyDoc {
        key: "dst_repeated",
        kind: "once | both",
        default: "once",
        what: "a cron job in a zone with daylight saving time: \
               a wall time the clocks repeat fires once, or at both instants",
        example: "dst_repeated = \"once\"",
    },
    KeyDoc {
        key: "dst_skipped",
        kind: "next | skip",
        default: "next",
        what: "a cron job in a zone with daylight saving time: \
               a wall time the clocks skip fires at the next valid instant, or not at all",
        example: "dst_skipped = \"next\"",
    },
    KeyDoc {
        key: "keep_runs",
        kind: "integer, 1 to 1000000",
        default: "all (retain decides)",
        what: "keep only this many of the job's newest runs; all-time counts stay",
        example: "keep_runs = 100",
    },
    KeyDoc {
        key: "retries",
        kind: "integer, 0 or more",
        default: "0",
        what: "a run that ends failed or timeout runs again for the same slot (the same \
               EXACTLY_SCHEDULED_AT, so effect keys from the slot dedupe), under the lease, the \
               overlap policy and a new fencing token; a firing runs at most max(3, 1 + retries) \
               times, never twice at once",
        example: "retries = 2",
    },
    KeyDoc {
        key: "retry_backoff",
        kind: "duration string",
        default: "10s (only with retries)",
        what: "the wait before the first retry; it doubles for each further one, up to a quarter \
               shorter (a jitter every scheduler computes alike from job, slot and run)",
        example: "retry_backoff = \"30s\"",
    },
    KeyDoc {
        key: "retry_backoff_max",
        kind: "duration string, at least retry_backoff",
        default: "the job's interval",
        what: "the longest wait between retries",
        example: "retry_backoff_max = \"5m\"",
    },
    KeyDoc {
        key: "pause_after_failures",
        kind: "integer, 1 or more",
        default: "off",
        what: "after this many failed runs in a row (since the job was last resumed) the job is \
               paused as exactly pause does, the reason kept as the pause note; \
               exactly resume starts it again; a run waiting for approval is not a failure",
        example: "pause_after_failures = 6",
    },
    KeyDoc {
        key: "jitter",
        kind: "duration string, shorter than the interval",
        default: "off",
        what: "each firing starts 0..jitter after its slot, the delay a hash of job and slot, \
               so every scheduler waits the same and a fleet does not start at once",
        example: "jitter = \"1m\"",
    },
    KeyDoc {
        key: "starting_deadline",
        kind: "duration string, at least 100ms; not with catchup",
        default: "off",
        what: "a firing that cannot start within this of its slot (plus its jitter) \
               is recorded missed and never run, as Kubernetes CronJob's startingDeadlineSeconds",
        example: "starting_deadline = \"2m\"",
    },
    KeyDoc {
        key: "ping",
        kind: "http(s) URL",
        default: "none",
        what: "a dead man's switch (healthchecks.io): POST URL/start as a run starts, URL when it \
               ends ok, URL/log when it waits for approval (not a failure), URL/fail (body: \
               outcome, exit_code) otherwise, each with ?rid= (the run's id as a UUID); best \
               effort, off the run's path",
        example: "ping = \"https://hc-ping.com/<uuid>\"",
    },
    KeyDoc {
        key: "far_side",
        kind: "dedupes | fences",
        default: "not declared",
        what: "what the far side of the job's effects does, which the ledger cannot see: dedupes \
               (it keeps each EXACTLY_EFFECT_KEY once) or fences (it refuses a write whose \
               EXACTLY_FENCING_TOKEN is below one it saw); exactly doctor takes it as the \
               far side's guard where an effect has no observer",
        example: "far_side = \"dedupes\"",
    },
];

/// The keys of a `[[notify]]` table.
pub(super) const NOTIFY_KEYS: &[KeyDoc] = &[
    KeyDoc {
        key: "name",
        kind: "string",
        default: "required",
        what: "the notifier's identity: its notifications are effects of job exactly-notify:NAME, \
               sent under that lease (one sender at a time among every scheduler and watcher)",
        example: "name = \"ops\"",
    },
    KeyDoc {
        key: "hook",
        kind: "array of strings",
        default: "none (hook or webhook required)",
        what: "a command run in the file's folder with the notification as JSON on stdin and \
               EXACTLY_EFFECT_KEY set; exit 0 is delivered, 75 is nothing sent (tried again), \
               anything else or past 10s is unknown",
        example: "hook = [\"sh\", \"scripts/page.sh\"]",
    },
    KeyDoc {
        key: "webhook",
        kind: "http(s) URL",
        default: "none (hook or webhook required)",
        what: "POSTed the notification as JSON (a text field chat webhooks show, and rule, \
               subject, episode, state, effect_key) with the effect key as Idempotency-Key; 2xx is \
               delivered, a refused connection or a 4xx/5xx answer is tried again, \
               a timeout after sending is unknown",
        example: "webhook = \"https://hooks.slack.com/services/…\"",
    },
    KeyDoc {
        key: "unknown_older_than",
        kind: "duration string, at least 1s",
        default: "off",
        what: "rule: an effect unknown (or submitted by a dead sender) for longer than this; \
               one episode per effect",
        example: "unknown_older_than = \"1h\"",
    },
    KeyDoc {
        key: "approval_pending_longer_than",
        kind: "duration string, at least 1s",
        default: "off",
        what: "rule: an approval pending for longer than this; one episode per request",
        example: "approval_pending_longer_than = \"30m\"",
    },
    KeyDoc {
        key: "failing_runs",
        kind: "integer, 1 to 1000",
        default: "off",
        what:
            "rule: a job whose runs failed (failed or timeout) this many times since its last ok \
             run; one episode per streak, named by its first failed run",
        example: "failing_runs = 3",
    },
    KeyDoc {
        key: "late_by",
        kind: "duration string, at least 1s",
        default: "off",
        what:
            "rule: a job's next firing not fired this long after its time (no scheduler, a stuck \
               one), one episode per job and firing; and, at once, each firing a scheduler \
               recorded missed (overlap fail, a starting deadline, past catch-up), \
             told as rule firing_missed, never recovered",
        example: "late_by = \"5m\"",
    },
    KeyDoc {
        key: "scheduler_gone",
        kind: "boolean",
        default: "false",
        what: "rule: a scheduler that stopped beating without a clean stop, \
               noticed by another scheduler or exactly watch; one episode per scheduler start",
        example: "scheduler_gone = true",
    },
    KeyDoc {
        key: "recovery",
        kind: "boolean",
        default: "false",
        what: "also send a recovered notification (state recovered) when each episode ends",
        example: "recovery = true",
    },
];

const EXAMPLE: &str = r#"retain = "90d"

[[job]]
name = "daily-digest"
schedule = "0 7 * * *"
timezone = "Europe/Berlin"
lease = "15m"
overlap = "coalesce"
timeout = "10m"
command = ["sh", "scripts/digest.sh"]

[[job]]
name = "invoice-batch"
every = "1h"
lease = "20m"
overlap = "queue"
queue_cap = 2
command = ["sh", "scripts/invoice.sh"]
ping = "https://hc-ping.com/<uuid>"

[[notify]]
name = "ops"
webhook = "https://hooks.slack.com/services/<token>"
failing_runs = 3
unknown_older_than = "1h"
scheduler_gone = true
recovery = true"#;

fn keys(w: &mut dyn Write, title: &str, docs: &[KeyDoc]) -> std::io::Result<()> {
    writeln!(w, ".SH \"{title}\"")?;
    for d in docs {
        writeln!(
            w,
            ".TP\n\\fB{}\\fR ({})\n{}.\n.br\nDefault: {}. Example: \\fB{}\\fR",
            roff(d.key),
            roff(d.kind),
            roff(d.what),
            roff(d.default),
            roff(d.example)
        )?;
    }
    Ok(())
}

pub(super) fn render(w: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        w,
        ".TH exactly\\-jobs 5 \"\" \"exactly {}\" exactly",
        env!("CARGO_PKG_VERSION")
    )?;
    writeln!(
        w,
        ".SH NAME\nexactly\\-jobs \\- the jobs file of exactly run and exactly check"
    )?;
    writeln!(w, ".SH SYNOPSIS\n\\fBexactly run\\fR \\fIJOBS.toml\\fR")?;
    writeln!(
        w,
        ".SH DESCRIPTION\n{}",
        roff(
            "A TOML file: top-level keys, then one [[job]] table per job, and [[notify]] tables \
              saying who is told of what (exactly watch reads only those). Every key is checked: \
              an unknown key (a typo) is an error, and exactly check reports every problem at its \
              line. Each job's command runs in the file's folder, wherever the scheduler was \
              started. Durations are written like 90s, 15m, 1h, 2d (at most 100 years)."
        )
    )?;
    keys(w, "FILE KEYS", FILE_KEYS)?;
    keys(w, "JOB KEYS", JOB_KEYS)?;
    keys(w, "NOTIFY KEYS", NOTIFY_KEYS)?;
    writeln!(w, ".SH EXAMPLE\n.nf")?;
    for line in EXAMPLE.lines() {
        writeln!(w, "{}", roff(line))?;
    }
    writeln!(w, ".fi")?;
    section(
        w,
        "EXIT STATUS",
        &[
            (
                "0",
                "exactly check: the file has no errors; its last line says whether it is for \
                 exactly run (it has jobs) or exactly watch ([[notify]] tables alone)",
            ),
            (
                "1",
                "exactly check: problems, one line each (FILE:LINE: job: what — why)",
            ),
            (
                "2",
                "exactly run refuses a file with errors; either cannot read the file",
            ),
        ],
    )?;
    section(
        w,
        "ENVIRONMENT",
        &[
            (
                "EXACTLY_DB, EXACTLY_JOB, EXACTLY_FENCING_TOKEN",
                "given to each run's command: the \
                                                                database, the job, \
                                                                the run's fencing token",
            ),
            (
                "EXACTLY_RUN_ID, EXACTLY_SCHEDULED_AT",
                "given to each run's command: its run and its \
                                                      firing's slot (fixed-width UTC), \
                                                      a fact to key effects by",
            ),
            (
                "EXACTLY_DB_ID, EXACTLY_BIN",
                "given to each run's command: the database's identity, \
                                            the exactly binary that runs it",
            ),
        ],
    )?;
    section(
        w,
        "FILES",
        &[
            (
                "/etc/exactly/jobs.toml",
                "the jobs file of the systemd unit (assets/systemd/exactly-run.service)",
            ),
            (
                "assets/jobs.toml",
                "the sample in the source, with its scripts in assets/scripts",
            ),
        ],
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_key_of_the_jobs_file_is_documented() {
        for key in crate::runner::config::job::JOB_KEYS {
            assert!(
                super::JOB_KEYS.iter().any(|d| d.key == *key),
                "exactly-jobs(5) does not document {key}: add it to cli/man_jobs.rs"
            );
        }
        assert_eq!(
            super::JOB_KEYS.len(),
            crate::runner::config::job::JOB_KEYS.len()
        );
        let notify = crate::runner::config::notify_config::NOTIFY_KEYS;
        for key in notify {
            assert!(
                super::NOTIFY_KEYS.iter().any(|d| d.key == *key),
                "exactly-jobs(5) does not document [[notify]] {key}: add it to cli/man_jobs.rs"
            );
        }
        assert_eq!(super::NOTIFY_KEYS.len(), notify.len());
    }
}

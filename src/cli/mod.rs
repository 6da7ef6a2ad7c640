//! The `exactly` command line (docs/contract.md). Every error is one sentence on stderr.
//!
//! One file per group of subcommands; `run` starts the scheduler in `runner/`, `top` the
//! dashboard in `tui/`, `chaos` and `far-side` live in `chaos/`.
mod check;
mod complete;
mod controls;
mod decisions;
mod doctor;
mod effects;
mod gc;
mod leases;
mod logs;
mod man;
mod man_jobs;
mod manual;
mod mcp;
mod metrics;
mod ops;
mod pipe;
mod probe;
mod token_memory;

use crate::approval::{Already, Decided, Resolution, Resolved};
use crate::effect::{self, CommandEffect, Ctx, Outcome, Spec};
use crate::snapshot::Snapshot;
use crate::state::ApprovalState;
use crate::{approval, jobs, key, lease, sanitize::inert, time, Error, Result};
use crate::{Access, Store};
use clap::{Args, Parser, Subcommand};
use decisions::{decide, resolve_cmd};
pub(crate) use decisions::{DecideArgs, ResolveArgs};
use effects::effect_cmd;
pub(crate) use effects::EffectArgs;
use gc::gc_cmd;
pub(crate) use gc::GcArgs;
use leases::lease_cmd;
pub(crate) use leases::LeaseCmd;
use logs::logs_cmd;
pub(crate) use logs::LogsArgs;
use metrics::metrics_cmd;
pub(crate) use metrics::MetricsArgs;
use serde_json::{Map, Value};

#[derive(Parser, Debug)]
#[command(
    name = "exactly",
    version,
    about = "Exactly-once effect for scheduled jobs and agents"
)]
pub(crate) struct Cli {
    /// Database: a SQLite file path, or postgres://user:pass@host:port/db for several hosts.
    /// Default: $EXACTLY_DB, else ./exactly.db if it exists, else
    /// $XDG_STATE_HOME/exactly/exactly.db (~/.local/state/exactly/exactly.db).
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Cmd {
    /// Create the schema, or adopt the seed's tables in an existing database.
    #[command(after_help = "Example:\n  exactly --db /var/lib/exactly/exactly.db init")]
    Init,
    /// Print the effect key for an action, target and inputs.
    #[command(
        after_help = "Example:\n  exactly key --action send-invoice --target customer-42 \
                      --input month=2026-11"
    )]
    Key(KeyArgs),
    /// Claim, renew or release a job's lease.
    #[command(subcommand)]
    Lease(LeaseCmd),
    /// Run a command as an effect under the ledger's guard.
    #[command(
        after_help = "Example:\n  exactly effect --job invoices --token \"$TOKEN\" --action \
                      send-invoice --target customer-42 --input month=2026-11 -- \
                      ./send-invoice.sh 42"
    )]
    Effect(EffectArgs),
    /// Approve a pending effect.
    #[command(
        after_help = "Example:\n  exactly approve 536e1ca8140f4a0e9c4b6f0e1f6a7b2c --note \
                      \"checked with finance\""
    )]
    Approve(DecideArgs),
    /// Deny a pending effect (it ends cancelled).
    #[command(
        after_help = "Example:\n  exactly deny 536e1ca8140f4a0e9c4b6f0e1f6a7b2c --note \
                      \"wrong amount\""
    )]
    Deny(DecideArgs),
    /// Settle an unknown effect after checking the far side.
    #[command(
        after_help = "Example:\n  exactly resolve 93660c44eb1d4f26eb877b9e8990a2d6 --happened \
                      --evidence \"order 8812\""
    )]
    Resolve(ResolveArgs),
    /// Summary of counters, jobs, unknowns and approvals.
    #[command(after_help = "Example:\n  exactly status\n  exactly status --json | jq .totals")]
    Status(StatusArgs),
    /// Every job the database knows: schedule, next firing, last run, lease holder, state.
    #[command(
        after_help = "Example:\n  exactly jobs\n  exactly jobs --json | jq '.jobs[] | \
                      select(.failing)'"
    )]
    Jobs(ops::JobsArgs),
    /// The ledger's effects in one state (claimed, submitted, done, unknown, cancelled).
    #[command(
        after_help = "Example:\n  exactly effects --state unknown\n  exactly effects --state done \
                      --job invoices --json"
    )]
    Effects(ops::EffectsArgs),
    /// Prometheus metrics of the same numbers: printed once, or served over HTTP.
    #[command(after_help = "Examples:\n  exactly metrics > \
                      /var/lib/node_exporter/textfile/exactly.prom.$$ && mv \
                      /var/lib/node_exporter/textfile/exactly.prom.$$ \
                      /var/lib/node_exporter/textfile/exactly.prom\n  exactly metrics --listen \
                      127.0.0.1:9464   # Prometheus scrapes http://127.0.0.1:9464/metrics")]
    Metrics(MetricsArgs),
    /// Print a run's stored output (stdout and stderr as they arrived); the job's last run by
    /// default.
    #[command(
        after_help = "Example:\n  exactly logs nightly-report\n  exactly logs \
                      nightly-report --follow"
    )]
    Logs(LogsArgs),
    /// Attempt a job's latest done effect again on purpose, sending nothing: the ledger must
    /// suppress the duplicate, and the suppressed counter moves.
    #[command(after_help = "Example:\n  exactly probe invoices\n  exactly probe invoices --json")]
    Probe(probe::ProbeArgs),
    /// An MCP gateway: serves an MCP client on stdio and starts the real server; every tool
    /// call that is not read-only becomes an effect, sent once (docs/mcp.md).
    #[command(
        after_help = "Example:\n  exactly mcp --name mail --config mcp.toml -- python3 \
                      mail_server.py"
    )]
    Mcp(mcp::McpArgs),
    /// Prune history older than a horizon; open effects, approvals, leases and all-time
    /// counters are kept.
    #[command(after_help = "Example:\n  exactly gc --keep 30d --dry-run")]
    Gc(GcArgs),
    /// Run the jobs in a TOML file: leases, overlap policies, safe restarts.
    #[command(
        after_help = "Example:\n  exactly --db /var/lib/exactly/exactly.db run \
                      /etc/exactly/jobs.toml --grace 60s"
    )]
    Run(crate::runner::RunArgs),
    /// Evaluate only the [[notify]] rules of a jobs file (a host that runs no jobs).
    #[command(
        after_help = "Example:\n  exactly --db postgres://exactly@db/exactly watch \
                      /etc/exactly/jobs.toml"
    )]
    Watch(crate::runner::notify::watch::WatchArgs),
    /// Lint a jobs file.
    #[command(
        after_help = "Example:\n  exactly check jobs.toml && exactly run jobs.toml\n  exactly \
                      check --strict jobs.toml   # warnings fail too"
    )]
    Check(check::CheckArgs),
    /// Judge every job against the essay's ten rules, from what the ledger saw.
    ///
    /// For each job (and each action of effects outside any job), each rule ok, warn or fail,
    /// with one line of evidence and one of what to do: lease-token, lease-bounds,
    /// key-from-facts, far-side, token-on-writes, unknown-resolved, overlap-policy, kill-test,
    /// approvals-once, counters. How each is judged, and what the ledger cannot know:
    /// docs/checklist.md.
    #[command(
        after_help = "Example:\n  exactly doctor\n  exactly doctor --job daily-digest --file \
                      jobs.toml --json\n  exactly doctor --strict   # warnings fail too"
    )]
    Doctor(doctor::DoctorArgs),
    /// Fire a job now (its own firing, still under its lease and overlap policy).
    #[command(after_help = "Example:\n  exactly trigger daily-digest")]
    Trigger(controls::TriggerArgs),
    /// Pause a job: its firings are recorded as skipped.
    #[command(after_help = "Example:\n  exactly pause daily-digest --note \"vendor outage\"")]
    Pause(controls::PauseArgs),
    /// Resume a paused job.
    #[command(after_help = "Example:\n  exactly resume daily-digest")]
    Resume(controls::ResumeArgs),
    /// Fire a job for past slots; effects already done are suppressed by their keys.
    #[command(
        after_help = "Example:\n  exactly backfill daily-digest --from 2026-11-01T00:00:00Z --to \
                      2026-11-07T00:00:00Z"
    )]
    Backfill(controls::BackfillArgs),
    /// The live dashboard.
    #[command(
        after_help = "Example:\n  exactly top\n  ssh -t viewer@scheduler-1 'exactly --db \
                      /var/lib/exactly/exactly.db top --read-only --refresh 5s'"
    )]
    Top(crate::tui::TopArgs),
    /// A test tool: kill runs mid-effect many times and count duplicates (must be 0).
    /// Hidden from help, completions and man pages; it runs as before.
    #[command(
        hide = true,
        after_help = "Example:\n  exactly chaos --iterations 50 --scenario kill-mid-effect --json"
    )]
    Chaos(crate::chaos::ChaosArgs),
    /// A live simulated workload, shown in the dashboard.
    #[command(after_help = "Example:\n  exactly demo\n  exactly demo --no-ui --for 30s")]
    Demo(crate::demo::DemoArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  exactly completions bash > /etc/bash_completion.d/exactly\n  \
                      exactly completions zsh > \"${fpath[1]}/_exactly\"\n  exactly completions \
                      fish > ~/.config/fish/completions/exactly.fish"
    )]
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout: exactly(1), a subcommand's, or the jobs file's.
    #[command(
        after_help = "Examples:\n  exactly man --dir /usr/local/share/man && mandb   # every page: \
                      man exactly-effect, man 5 exactly-jobs\n  exactly man | man -l -\n  exactly \
                      man effect | man -l -\n  exactly man exactly-jobs.5 | man -l -"
    )]
    Man(man::ManArgs),
    /// The chaos harness's far side (a test double; not for users).
    #[command(subcommand, hide = true)]
    FarSide(crate::chaos::far_side::FarSideCmd),
    /// Completion's helper: the database's job names or effect keys, one a line.
    #[command(name = "__complete", hide = true)]
    Complete(complete::CompleteArgs),
}

/// The facts an effect key is derived from: `key` and `effect` take the same flags.
#[derive(Args, Debug)]
pub(crate) struct KeyFacts {
    /// What is done, e.g. send-invoice (part of the effect key; non-empty, no `|`).
    #[arg(long)]
    pub action: String,
    /// To whom or what it is done, e.g. customer-42 (part of the effect key; non-empty).
    #[arg(long)]
    pub target: String,
    /// A consequential input, k=v (part of the effect key; a string value). Repeatable.
    #[arg(long = "input", value_name = "K=V")]
    pub inputs: Vec<String>,
    /// Inputs as a JSON object, from a file or `-` for stdin.
    #[arg(long, value_name = "FILE|-")]
    pub input_json: Option<String>,
}

impl KeyFacts {
    /// The inputs, read, with the key's parts checked (an ambiguous key is refused, exit 2).
    pub(crate) fn inputs(&self) -> Result<Map<String, Value>> {
        let inputs = read_inputs(&self.inputs, self.input_json.as_deref())?;
        key::check(&self.action, &self.target, &inputs)?;
        Ok(inputs)
    }
}

#[derive(Args, Debug)]
pub(crate) struct KeyArgs {
    #[command(flatten)]
    pub key: KeyFacts,
}

#[derive(Args, Debug)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub(crate) struct StatusArgs {
    /// Print the whole snapshot as one JSON object (see docs/contract.md for its keys).
    #[arg(long)]
    pub json: bool,
    /// One line for a monitoring plugin (Nagios convention): exit 0 ok, 1 warning, 2 critical
    /// (docs/monitoring.md has the rules).
    #[arg(long, conflicts_with = "json")]
    pub check: bool,
}

/// Runs the CLI; returns the process exit code. Errors are printed as one line.
pub(crate) fn main() -> i32 {
    // A scheduler starting a run's command through this binary (see `runner::spawn::start`).
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args
        .first()
        .is_some_and(|a| a == crate::runner::spawn::EXEC_ARG)
    {
        return crate::runner::spawn::exec_command(&args[1..]);
    }
    if args
        .first()
        .is_some_and(|a| a == crate::runner::spawn::spawner::SPAWNER_ARG)
    {
        return crate::runner::spawn::spawner::process::spawner_main(&args[1..]);
    }
    crate::runner::spawn::SELF_EXEC.store(true, std::sync::atomic::Ordering::Relaxed);
    let cli = match manual::command()
        .try_get_matches()
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    pipe::end_quietly_on_closed_pipe(&cli.cmd);
    crate::runner::log::init(match &cli.cmd {
        Cmd::Run(a) => a.log_format,
        _ => crate::runner::log::LogFormat::from_env(),
    });
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("exactly: {}", inert(&e.to_string()));
            e.exit_code()
        }
    }
}

/// A flag's value refused by its parser (a job name, a duration) is one line and exit 2, as
/// every other bad input is; clap's other errors (a missing argument, `--help`) keep its own
/// output, which shows the usage they need. The value is made inert: clap echoes it raw.
fn usage_error(e: clap::Error) -> i32 {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        e.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        e.exit()
    }
    // Built from the error's parts: its rendering puts the raw value (a line feed and all)
    // inside the text.
    let part = |k| e.get(k).map(ToString::to_string);
    let mut line = match (
        part(ContextKind::InvalidArg),
        part(ContextKind::InvalidValue),
    ) {
        (Some(arg), Some(value)) => format!("invalid value '{}' for '{arg}'", inert(&value)),
        _ => "invalid value".to_string(),
    };
    if let Some(why) = std::error::Error::source(&e) {
        line.push_str(&format!(": {}", inert(&why.to_string())));
    }
    if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) {
        line.push_str(&format!(" [possible values: {}]", valid.join(", ")));
    }
    eprintln!("exactly: {line}");
    2
}

/// The database `--db` names, to write ([`crate::open`]).
fn open(db: &Option<String>) -> Result<Store> {
    crate::open(db.as_deref(), Access::Write)
}

/// For commands that only read: never creates or changes the file.
fn open_read_only(db: &Option<String>) -> Result<Store> {
    crate::open(db.as_deref(), Access::ReadOnly)
}

fn dispatch(cli: Cli) -> Result<i32> {
    let db = cli.db;
    match cli.cmd {
        Cmd::Init => {
            let s = open(&db)?;
            println!(
                "initialised {} (schema version {})",
                crate::db_name(&s),
                crate::SCHEMA_VERSION
            );
            Ok(0)
        }
        Cmd::Key(a) => {
            let inputs = a.key.inputs()?;
            let digest = key::input_digest(&inputs);
            println!("{}", key::effect_key(&a.key.action, &a.key.target, &digest));
            Ok(0)
        }
        Cmd::Lease(c) => lease_cmd(&db, c),
        Cmd::Effect(a) => effect_cmd(&db, a),
        Cmd::Approve(a) => decide(&db, a, true),
        Cmd::Deny(a) => decide(&db, a, false),
        Cmd::Resolve(a) => resolve_cmd(&db, a),
        Cmd::Status(a) if a.check => ops::status_check(&db),
        Cmd::Jobs(a) => ops::jobs_cmd(&db, a),
        Cmd::Effects(a) => ops::effects_cmd(&db, a),
        Cmd::Status(a) => {
            let snap = Snapshot::read(&mut open_read_only(&db)?)?;
            if a.json {
                println!("{}", with_containment(snap.to_json()));
            } else {
                print!("{}", snap.to_text());
                // What holds the commands this machine starts (docs/containment.md).
                println!("containment here: {}", crate::contain::describe());
            }
            Ok(0)
        }
        Cmd::Metrics(a) => metrics_cmd(&db, a),
        Cmd::Logs(a) => logs_cmd(&db, a),
        Cmd::Probe(a) => probe::probe_cmd(&db, a),
        Cmd::Mcp(a) => mcp::mcp_cmd(&db, a),
        Cmd::Gc(a) => gc_cmd(&db, a),
        Cmd::Run(a) => crate::runner::run_main(&db, a),
        Cmd::Watch(a) => crate::runner::notify::watch::watch_main(&db, a),
        Cmd::Check(a) => check::check_main(&db, a),
        Cmd::Doctor(a) => doctor::doctor_main(&db, a),
        Cmd::Trigger(a) => controls::trigger_main(&db, a),
        Cmd::Pause(a) => controls::pause_main(&db, a),
        Cmd::Resume(a) => controls::resume_main(&db, a),
        Cmd::Backfill(a) => controls::backfill_main(&db, a),
        Cmd::Top(a) => crate::tui::top_main(&db, a),
        Cmd::Chaos(a) => crate::chaos::chaos_main(&db, a),
        Cmd::Demo(a) => crate::demo::demo_main(&db, a),
        Cmd::Completions(a) => {
            let script = complete::script(a.shell, &manual::command());
            std::io::Write::write_all(&mut std::io::stdout().lock(), &script)?;
            Ok(0)
        }
        Cmd::Complete(a) => complete::complete_main(&db, a),
        Cmd::Man(a) => man::man_main(a),
        Cmd::FarSide(c) => crate::chaos::far_side::far_side_main(c),
    }
}

/// Reads `--input k=v` pairs and `--input-json FILE|-` into one object (pairs win on conflict).
pub(crate) fn read_inputs(pairs: &[String], json: Option<&str>) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    if let Some(src) = json {
        let text = if src == "-" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
            s
        } else {
            std::fs::read_to_string(src).map_err(|e| {
                Error::Usage(format!("cannot read --input-json {}: {e}", inert(src)))
            })?
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => map = m,
            Ok(_) => return Err(Error::Usage("--input-json must hold a JSON object".into())),
            Err(e) => return Err(Error::Usage(format!("--input-json is not valid JSON: {e}"))),
        }
    }
    map.extend(key::parse_inputs(pairs)?);
    Ok(map)
}

/// `status --json` with `containment`: how this machine holds what its senders and runs start
/// (`cgroup-v2`, `cgroup-v1` or `cookie`) and where its cgroups are made.
fn with_containment(json: String) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(&json) else {
        return json;
    };
    if let Some(o) = v.as_object_mut() {
        let sub = crate::contain::subtree();
        o.insert(
            "containment".into(),
            serde_json::json!({
                "here": sub.map_or("cookie", |s| s.kind.word()),
                "cgroup": sub.map(|s| s.dir.display().to_string()),
            }),
        );
    }
    crate::json::render(v)
}

/// `--token`'s parser: a fencing token, as `lease claim` printed it.
fn fencing_token(s: &str) -> std::result::Result<crate::Token, std::num::ParseIntError> {
    s.parse::<i64>().map(crate::Token::from)
}

#[cfg(test)]
mod tests {
    /// Every flag and argument of every subcommand says what it is for, and every subcommand's
    /// `--help` shows an example.
    #[test]
    fn every_argument_has_help_and_every_command_an_example() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                if help.trim().is_empty() {
                    missing.push(format!("{path}: argument {id} has no help"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.is_hide_set() || sub.get_name() == "help" {
                    continue;
                }
                let p = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() {
                    missing.push(format!("{p}: no description"));
                }
                // A command with subcommands shows them; each leaf shows an example.
                if !sub.has_subcommands() {
                    let after = sub
                        .get_after_help()
                        .map(|h| h.to_string())
                        .unwrap_or_default();
                    if !after.contains("exactly ") {
                        missing.push(format!("{p}: no example in --help"));
                    }
                }
                walk(sub, &p, missing);
            }
        }
        let cmd = <super::Cli as clap::CommandFactory>::command();
        let mut missing = Vec::new();
        walk(&cmd, "exactly", &mut missing);
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }
}

//! The `exactly` command line (DESIGN.md's contract). Every error is one sentence on stderr.
use crate::effect::{self, CommandAction, Ctx, Outcome, Spec};
use crate::metrics::Snapshot;
use crate::store::{self, Decided, Resolution, Resolved, Store};
use crate::wrapped::LeaseWatch;
use crate::{approval, key, lease, sanitize::inert, time, Error, Result};
use clap::{Args, Parser, Subcommand};
use serde_json::{Map, Value};

#[derive(Parser, Debug)]
#[command(
    name = "exactly",
    version,
    about = "Exactly-once effect for scheduled jobs and agents"
)]
pub struct Cli {
    /// Database: a SQLite file path. Default: $EXACTLY_DB, else ./exactly.db if it exists,
    /// else $XDG_STATE_HOME/exactly/exactly.db (~/.local/state/exactly/exactly.db).
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub db: Option<String>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Create the schema, or adopt the seed's tables in an existing database.
    #[command(after_help = "Example:\n  exactly --db /var/lib/exactly/exactly.db init")]
    Init,
    /// Print the effect key for an action, target and inputs.
    #[command(
        after_help = "Example:\n  exactly key --action send-invoice --target customer-42 --input month=2026-11"
    )]
    Key(KeyArgs),
    /// Claim, renew or release a job's lease.
    #[command(subcommand)]
    Lease(LeaseCmd),
    /// Run a command as an effect under the ledger's guard.
    #[command(
        after_help = "Example:\n  exactly effect --job invoices --token \"$TOKEN\" --action send-invoice --target customer-42 --input month=2026-11 -- ./send-invoice.sh 42"
    )]
    Effect(EffectArgs),
    /// Approve a pending effect.
    #[command(
        after_help = "Example:\n  exactly approve 536e1ca8140f4a0e9c4b6f0e1f6a7b2c --note \"checked with finance\""
    )]
    Approve(DecideArgs),
    /// Deny a pending effect (it ends cancelled).
    #[command(
        after_help = "Example:\n  exactly deny 536e1ca8140f4a0e9c4b6f0e1f6a7b2c --note \"wrong amount\""
    )]
    Deny(DecideArgs),
    /// Settle an unknown effect after checking the far side.
    #[command(
        after_help = "Example:\n  exactly resolve 93660c44eb1d4f26eb877b9e8990a2d6 --happened --evidence \"order 8812\""
    )]
    Resolve(ResolveArgs),
    /// Summary of counters, jobs, unknowns and approvals.
    #[command(after_help = "Example:\n  exactly status\n  exactly status --json | jq .totals")]
    Status(StatusArgs),
    /// Prometheus metrics of the same numbers: printed once, or served over HTTP.
    #[command(
        after_help = "Examples:\n  exactly metrics > /var/lib/node_exporter/textfile/exactly.prom.$$ && mv /var/lib/node_exporter/textfile/exactly.prom.$$ /var/lib/node_exporter/textfile/exactly.prom\n  exactly metrics --listen 127.0.0.1:9464   # Prometheus scrapes http://127.0.0.1:9464/metrics"
    )]
    Metrics(MetricsArgs),
    /// Print a run's stored output (stdout and stderr as they arrived); the job's last run by
    /// default.
    #[command(
        after_help = "Example:\n  exactly logs nightly-report\n  exactly logs nightly-report --follow"
    )]
    Logs(LogsArgs),
    /// Prune history older than a horizon; open effects, approvals, leases and all-time
    /// counters are kept.
    #[command(after_help = "Example:\n  exactly gc --keep 30d --dry-run")]
    Gc(GcArgs),
    /// Run the jobs in a TOML file: leases, overlap policies, safe restarts.
    #[command(
        after_help = "Example:\n  exactly --db /var/lib/exactly/exactly.db run /etc/exactly/jobs.toml --grace 60s"
    )]
    Run(crate::runner::RunArgs),
    /// Lint a jobs file.
    #[command(
        after_help = "Example:\n  exactly check jobs.toml && exactly run jobs.toml\n  exactly check --strict jobs.toml   # warnings fail too"
    )]
    Check(crate::runner::CheckArgs),
    /// Fire a job now (its own firing, still under its lease and overlap policy).
    #[command(after_help = "Example:\n  exactly trigger daily-digest")]
    Trigger(crate::runner::TriggerArgs),
    /// Pause a job: its firings are recorded as skipped.
    #[command(after_help = "Example:\n  exactly pause daily-digest --note \"vendor outage\"")]
    Pause(crate::runner::PauseArgs),
    /// Resume a paused job.
    #[command(after_help = "Example:\n  exactly resume daily-digest")]
    Resume(crate::runner::ResumeArgs),
    /// Fire a job for past slots; effects already done are suppressed by their keys.
    #[command(
        after_help = "Example:\n  exactly backfill daily-digest --from 2026-11-01T00:00:00Z --to 2026-11-07T00:00:00Z"
    )]
    Backfill(crate::runner::BackfillArgs),
    /// The live dashboard.
    #[command(
        after_help = "Example:\n  exactly top\n  ssh -t viewer@scheduler-1 'exactly --db /var/lib/exactly/exactly.db top --read-only --refresh 5s'"
    )]
    Top(crate::tui::TopArgs),
    /// Kill runs mid-effect many times and count duplicates (must be 0).
    #[command(
        after_help = "Example:\n  exactly chaos --iterations 50 --scenario kill-mid-effect --json"
    )]
    Chaos(crate::chaos::ChaosArgs),
    /// A live simulated workload, shown in the dashboard.
    #[command(after_help = "Example:\n  exactly demo\n  exactly demo --no-ui --for 30s")]
    Demo(crate::demo::DemoArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  exactly completions bash > /etc/bash_completion.d/exactly\n  exactly completions zsh > \"${fpath[1]}/_exactly\"\n  exactly completions fish > ~/.config/fish/completions/exactly.fish"
    )]
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout.
    #[command(
        after_help = "Examples:\n  exactly man > /usr/local/share/man/man1/exactly.1 && mandb\n  exactly man | man -l -"
    )]
    Man,
    /// The chaos harness's far side (a test double; not for users).
    #[command(subcommand, hide = true)]
    FarSide(crate::chaos::far_side::FarSideCmd),
}

#[derive(Args, Debug)]
pub struct KeyArgs {
    /// What is done, e.g. send-invoice (non-empty, no `|`).
    #[arg(long)]
    pub action: String,
    /// To whom or what it is done, e.g. customer-42 (non-empty).
    #[arg(long)]
    pub target: String,
    /// A consequential input, k=v (a string value). Repeatable.
    #[arg(long = "input", value_name = "K=V")]
    pub inputs: Vec<String>,
    /// Inputs as a JSON object, from a file or `-` for stdin.
    #[arg(long, value_name = "FILE|-")]
    pub input_json: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum LeaseCmd {
    /// Claim the lease; prints the fencing token. Exit 3 when a live lease is held.
    #[command(
        after_help = "Example:\n  TOKEN=$(exactly lease claim --job daily-digest --for 15m)"
    )]
    Claim {
        /// The job whose lease to claim (its name: no control characters, at most 200).
        #[arg(long, value_parser = lease::job_name)]
        job: String,
        /// How long the lease lasts unless renewed, e.g. 15m (longer than the worst run).
        #[arg(long = "for", value_name = "DUR")]
        dur: String,
        /// Who holds it, shown to others (default user@host:pid).
        #[arg(long)]
        owner: Option<String>,
    },
    /// Extend a lease you hold. Exit 3 when fenced.
    #[command(
        after_help = "Example:\n  exactly lease renew --job daily-digest --token \"$TOKEN\" --for 15m"
    )]
    Renew {
        /// The job whose lease to extend.
        #[arg(long)]
        job: String,
        /// The fencing token `lease claim` printed.
        #[arg(long)]
        token: i64,
        /// The new duration from now, e.g. 15m.
        #[arg(long = "for", value_name = "DUR")]
        dur: String,
    },
    /// Release a lease you hold. Exit 3 when fenced.
    #[command(
        after_help = "Example:\n  exactly lease release --job daily-digest --token \"$TOKEN\""
    )]
    Release {
        /// The job whose lease to release.
        #[arg(long)]
        job: String,
        /// The fencing token `lease claim` printed.
        #[arg(long)]
        token: i64,
    },
}

#[derive(Args, Debug)]
pub struct EffectArgs {
    /// The job the effect belongs to (under `exactly run`: $EXACTLY_JOB).
    #[arg(long, env = "EXACTLY_JOB", value_parser = lease::job_name)]
    pub job: String,
    /// The fencing token from `lease claim` (under `exactly run`: $EXACTLY_FENCING_TOKEN).
    #[arg(long, env = "EXACTLY_FENCING_TOKEN")]
    pub token: i64,
    /// This run's id, recorded with the effect (under `exactly run`: $EXACTLY_RUN_ID).
    #[arg(long, env = "EXACTLY_RUN_ID")]
    pub run_id: Option<String>,
    /// What is done, e.g. send-invoice (part of the effect key; no `|`).
    #[arg(long)]
    pub action: String,
    /// To whom or what it is done, e.g. customer-42 (part of the effect key).
    #[arg(long)]
    pub target: String,
    /// A consequential input, k=v (part of the effect key). Repeatable.
    #[arg(long = "input", value_name = "K=V")]
    pub inputs: Vec<String>,
    /// Inputs as a JSON object, from a file or `-` for stdin.
    #[arg(long, value_name = "FILE|-")]
    pub input_json: Option<String>,
    /// The terms a person approves (shown in the dashboard).
    #[arg(long)]
    pub terms: Option<String>,
    /// Wait for a person's approval before sending (exit 4 until approved).
    #[arg(long)]
    pub needs_approval: bool,
    /// A shell command that tells whether the effect happened: exit 0 yes, 1 no, other unknown.
    #[arg(long, value_name = "CMD")]
    pub observe: Option<String>,
    /// The command that performs the effect.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct DecideArgs {
    /// The effect key (as `exactly status` and `exactly top` show it).
    pub key: String,
    /// Why, recorded with the decision.
    #[arg(long)]
    pub note: Option<String>,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("how").required(true).args(["happened", "not_happened", "cancel"])))]
pub struct ResolveArgs {
    /// The effect key (as `exactly status` and `exactly top` show it).
    pub key: String,
    /// The far side shows the effect: it becomes done.
    #[arg(long)]
    pub happened: bool,
    /// The far side does not show it: a retry may send it.
    #[arg(long)]
    pub not_happened: bool,
    /// Never retry: it becomes cancelled.
    #[arg(long)]
    pub cancel: bool,
    /// Why, recorded with the resolution.
    #[arg(long)]
    pub note: Option<String>,
    /// What proves it, e.g. the far side's order id.
    #[arg(long)]
    pub evidence: Option<String>,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The job whose runs to print.
    pub job: String,
    /// A run id (as `exactly status --json` and `exactly top` show them).
    #[arg(long = "run", value_name = "RUN_ID")]
    pub run: Option<String>,
    /// Keep printing: the run's new output while it lasts, then each next run of the job, until
    /// interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Keep this much history (at least 1d), e.g. 30d.
    #[arg(long, value_name = "DUR")]
    pub keep: String,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also delete done and cancelled effects (and their settled approvals) older than the
    /// horizon. They are the dedupe memory: a backfill across the horizon sends again.
    #[arg(long)]
    pub effects: bool,
    /// Print what was (or would be) deleted as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct MetricsArgs {
    /// Serve /metrics over HTTP on this address (e.g. 127.0.0.1:9464) until interrupted; each
    /// scrape reads a fresh snapshot.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Print OpenMetrics text (with `# EOF`) instead of the Prometheus text format.
    #[arg(long)]
    pub openmetrics: bool,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print the whole snapshot as one JSON object (see README for its keys).
    #[arg(long)]
    pub json: bool,
}

/// Runs the CLI; returns the process exit code. Errors are printed as one line.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("exactly: {}", inert(&e.to_string()));
            e.exit_code()
        }
    }
}

pub fn open(db: &Option<String>) -> Result<Store> {
    Store::open(&store::default_path(db.as_deref()))
}

/// For commands that only read: never creates or changes the file.
pub fn open_read_only(db: &Option<String>) -> Result<Store> {
    Store::open_read_only(&store::default_path(db.as_deref()))
}

fn dispatch(cli: Cli) -> Result<i32> {
    let db = cli.db;
    match cli.cmd {
        Cmd::Init => {
            let s = open(&db)?;
            println!(
                "initialised {} (schema version {})",
                s.path(),
                store::SCHEMA_VERSION
            );
            Ok(0)
        }
        Cmd::Key(a) => {
            let inputs = read_inputs(&a.inputs, a.input_json.as_deref())?;
            key::check(&a.action, &a.target, &inputs)?;
            let digest = key::input_digest(&inputs);
            println!("{}", key::effect_key(&a.action, &a.target, &digest));
            Ok(0)
        }
        Cmd::Lease(c) => lease_cmd(&db, c),
        Cmd::Effect(a) => effect_cmd(&db, a),
        Cmd::Approve(a) => decide(&db, a, true),
        Cmd::Deny(a) => decide(&db, a, false),
        Cmd::Resolve(a) => resolve_cmd(&db, a),
        Cmd::Status(a) => {
            let snap = Snapshot::read(&mut open_read_only(&db)?)?;
            if a.json {
                println!("{}", snap.to_json());
            } else {
                print!("{}", snap.to_text());
            }
            Ok(0)
        }
        Cmd::Metrics(a) => metrics_cmd(&db, a),
        Cmd::Logs(a) => logs_cmd(&db, a),
        Cmd::Gc(a) => gc_cmd(&db, a),
        Cmd::Run(a) => crate::runner::run_main(&db, a),
        Cmd::Check(a) => crate::runner::check_main(&db, a),
        Cmd::Trigger(a) => crate::runner::trigger_main(&db, a),
        Cmd::Pause(a) => crate::runner::pause_main(&db, a),
        Cmd::Resume(a) => crate::runner::resume_main(&db, a),
        Cmd::Backfill(a) => crate::runner::backfill_main(&db, a),
        Cmd::Top(a) => crate::tui::top_main(&db, a),
        Cmd::Chaos(a) => crate::chaos::chaos_main(&db, a),
        Cmd::Demo(a) => crate::demo::demo_main(&db, a),
        Cmd::Completions(a) => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut cmd, "exactly", &mut std::io::stdout());
            Ok(0)
        }
        Cmd::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?;
            Ok(0)
        }
        Cmd::FarSide(c) => crate::chaos::far_side::far_side_main(c),
    }
}

/// Reads `--input k=v` pairs and `--input-json FILE|-` into one object (pairs win on conflict).
pub fn read_inputs(pairs: &[String], json: Option<&str>) -> Result<Map<String, Value>> {
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

fn lease_cmd(db: &Option<String>, c: LeaseCmd) -> Result<i32> {
    match c {
        LeaseCmd::Claim { job, dur, owner } => {
            let dur = time::parse_duration(&dur)?;
            let owner = owner.unwrap_or_else(lease::default_owner);
            match lease::claim(&mut open(db)?, &job, &owner, dur)? {
                lease::Claim::Won { token } => {
                    println!("{token}");
                    Ok(0)
                }
                lease::Claim::Held {
                    owner,
                    token,
                    until,
                } => {
                    eprintln!(
                        "exactly: job {} is leased by {} (token {token}) until {}",
                        inert(&job),
                        inert(&owner),
                        inert(&until)
                    );
                    Ok(3)
                }
            }
        }
        LeaseCmd::Renew { job, token, dur } => {
            let dur = time::parse_duration(&dur)?;
            if lease::renew(&mut open(db)?, &job, token, dur)? {
                Ok(0)
            } else {
                eprintln!(
                    "exactly: fenced: token {token} no longer holds job {}",
                    inert(&job)
                );
                Ok(3)
            }
        }
        LeaseCmd::Release { job, token } => {
            if lease::release(&mut open(db)?, &job, token)? {
                Ok(0)
            } else {
                eprintln!(
                    "exactly: fenced: token {token} no longer holds job {}",
                    inert(&job)
                );
                Ok(3)
            }
        }
    }
}

fn effect_cmd(db: &Option<String>, a: EffectArgs) -> Result<i32> {
    let inputs = read_inputs(&a.inputs, a.input_json.as_deref())?;
    key::check(&a.action, &a.target, &inputs)?;
    let mut store = open(db)?;
    let mut ctx = Ctx::new(&a.job, a.token);
    if let Some(r) = &a.run_id {
        ctx = ctx.with_run_id(r);
    }
    let spec = Spec {
        action: a.action,
        target: a.target,
        inputs,
        terms: a.terms,
        needs_approval: a.needs_approval,
        observe_cmd: a.observe.clone(),
    };
    // An observer recorded by an earlier attempt settles its effect when none is given now.
    let observe_cmd = match a.observe {
        Some(o) => Some(o),
        None => store.effect(&spec.key())?.and_then(|r| r.observe_cmd),
    };
    let mut action = CommandAction::new(a.command);
    action.observe_cmd = observe_cmd;
    action.lease = Some(LeaseWatch {
        db: store.path().to_string(),
        job: ctx.job.clone(),
        token: ctx.token,
    });
    let out = effect::run(&mut store, &ctx, &spec, &mut action)?;
    if let Outcome::DuplicateSuppressed { key, response } = &out {
        replay(&mut store, key, response.as_deref())?;
    }
    report(&out);
    if let (Outcome::Done { .. }, Some(o)) = (&out, action.output.as_ref().filter(|o| o.cut())) {
        eprintln!(
            "exactly: the response kept with effect {} was cut to its first {} of {} bytes",
            inert(out.key()),
            o.kept.len(),
            o.total
        );
    }
    Ok(out.exit_code())
}

/// A duplicate prints what the first attempt's command wrote, as it was stored: the bytes when
/// they were kept, else the response text (written by an observer or another program).
fn replay(store: &mut Store, key: &str, response: Option<&str>) -> Result<()> {
    use std::io::Write;
    let row = store.effect(key)?;
    let mut stdout = std::io::stdout().lock();
    // A closed stdout is the reader's choice; the outcome stands.
    match row.as_ref().and_then(|r| r.response_raw.as_ref()) {
        Some(raw) => {
            let _ = stdout.write_all(raw);
            let total = row.as_ref().and_then(|r| r.response_total).unwrap_or(0);
            if total > raw.len() as i64 {
                eprintln!(
                    "exactly: the stored response was cut: {} of {total} bytes are replayed",
                    raw.len()
                );
            }
        }
        None => {
            if let Some(r) = response.filter(|r| !r.is_empty()) {
                let _ = writeln!(stdout, "{r}");
            }
        }
    }
    let _ = stdout.flush();
    Ok(())
}

/// One line on stderr saying how the attempt ended; the response on stdout.
fn report(out: &Outcome) {
    let k = inert(out.key());
    match out {
        // The command's output already reached stdout as it was written.
        Outcome::Done { .. } => {}
        Outcome::DuplicateSuppressed { .. } => {
            eprintln!("exactly: duplicate suppressed: effect {k} is already done");
        }
        Outcome::Unrecorded { ran, reason, .. } => eprintln!(
            "exactly: the command ran ({}), but its result could not be recorded ({}); effect {k} stays submitted: check the far side, then exactly resolve {k}",
            inert(ran),
            inert(reason)
        ),
        Outcome::Fenced { .. } => {
            eprintln!("exactly: fenced: the token is not the job's current fencing token (its lease was taken over, or never claimed); effect {k} not written")
        }
        Outcome::AwaitingApproval { .. } => {
            eprintln!("exactly: effect {k} awaits approval (exactly approve {k})")
        }
        Outcome::Unresolved { state, reason, .. } => eprintln!(
            "exactly: effect {k} is {} from an earlier attempt: {}",
            inert(state),
            inert(reason)
        ),
        Outcome::Unknown { reason, .. } => eprintln!(
            "exactly: effect {k} is unknown ({}); check the far side, then exactly resolve {k}",
            inert(reason)
        ),
        Outcome::Cancelled { .. } => eprintln!("exactly: effect {k} is cancelled; not sent"),
        Outcome::LeaseEnding { until, .. } => eprintln!(
            "exactly: effect {k} not sent: less than {} of the lease is left (it ends {}); renew the lease and try again",
            crate::time::human_ms(store::SUBMIT_MIN_LEFT.as_millis() as u64),
            inert(until.as_deref().unwrap_or("now: it was released or taken over"))
        ),
        Outcome::NotSent { reason, .. } => {
            eprintln!(
                "exactly: effect {k} not sent ({}); claim released",
                inert(reason)
            )
        }
    }
}

fn decide(db: &Option<String>, a: DecideArgs, approve: bool) -> Result<i32> {
    let mut store = open(db)?;
    let by = crate::actor();
    let verb = if approve { "approved" } else { "denied" };
    let r = if approve {
        approval::approve(&mut store, &a.key, &by, a.note.as_deref())?
    } else {
        approval::deny(&mut store, &a.key, &by, a.note.as_deref())?
    };
    Ok(match r {
        Decided::Done => {
            println!("{verb} {} by {}", inert(&a.key), inert(&by));
            0
        }
        Decided::Already { state, by, at } => {
            eprintln!(
                "exactly: effect {} was already {} by {} at {}",
                inert(&a.key),
                inert(&state),
                inert(by.as_deref().unwrap_or("someone")),
                inert(at.as_deref().unwrap_or("?"))
            );
            // Denying what is no longer pending fails: the caller must learn it was not stopped.
            if approve && (state == verb || state == "consumed") {
                0
            } else {
                1
            }
        }
        Decided::NotFound => {
            eprintln!(
                "exactly: no approval was requested for effect {}",
                inert(&a.key)
            );
            1
        }
    })
}

fn resolve_cmd(db: &Option<String>, a: ResolveArgs) -> Result<i32> {
    let how = if a.happened {
        Resolution::Happened
    } else if a.not_happened {
        Resolution::NotHappened
    } else {
        Resolution::Cancel
    };
    let mut store = open(db)?;
    let by = crate::actor();
    match approval::resolve(
        &mut store,
        &a.key,
        how,
        &by,
        a.note.as_deref(),
        a.evidence.as_deref(),
    )? {
        Resolved::Done { from } => {
            println!(
                "resolved {}: {} → {} by {}",
                inert(&a.key),
                inert(&from),
                how.target_state(),
                inert(&by)
            );
            Ok(0)
        }
        Resolved::NotOpen { state, by } => {
            let who = by
                .map(|b| format!(" (resolved by {})", inert(&b)))
                .unwrap_or_default();
            eprintln!(
                "exactly: effect {} is {}{who}; nothing to resolve",
                inert(&a.key),
                inert(&state)
            );
            Ok(1)
        }
        Resolved::NotFound => {
            eprintln!("exactly: no effect {} in the ledger", inert(&a.key));
            Ok(1)
        }
    }
}

const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

fn metrics_cmd(db: &Option<String>, a: MetricsArgs) -> Result<i32> {
    let render = |openmetrics: bool| -> Result<String> {
        let snap = Snapshot::read(&mut open_read_only(db)?)?;
        Ok(if openmetrics {
            snap.to_openmetrics()
        } else {
            snap.to_prometheus()
        })
    };
    let Some(addr) = a.listen else {
        print!("{}", render(a.openmetrics)?);
        return Ok(0);
    };
    // Refuse a database that cannot be read before listening, not at the first scrape.
    render(false)?;
    let server = tiny_http::Server::http(addr.as_str())
        .map_err(|e| Error::Usage(format!("cannot listen on {}: {e}", inert(&addr))))?;
    eprintln!("exactly: serving http://{}/metrics", inert(&addr));
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("");
        let reply = if path != "/metrics" {
            tiny_http::Response::from_string("not found; try /metrics\n").with_status_code(404)
        } else {
            // Prometheus asks for OpenMetrics in Accept when it wants it.
            let om = req.headers().iter().any(|h| {
                h.field.equiv("Accept") && h.value.as_str().contains("application/openmetrics-text")
            });
            match render(om) {
                Ok(body) => {
                    let ct = if om { OPENMETRICS_TYPE } else { TEXT_TYPE };
                    let mut r = tiny_http::Response::from_string(body);
                    if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", ct) {
                        r = r.with_header(h);
                    }
                    r
                }
                // A scrape that fails says why; the next scrape tries again.
                Err(e) => tiny_http::Response::from_string(format!("exactly: {e}\n"))
                    .with_status_code(503),
            }
        };
        if let Err(e) = req.respond(reply) {
            eprintln!("exactly: metrics: could not answer a scrape: {e}");
        }
    }
    Ok(0)
}

/// Smallest `gc --keep`: the dashboard's 24-hour window is read from the events.
const GC_MIN_KEEP: std::time::Duration = std::time::Duration::from_secs(86_400);

fn gc_cmd(db: &Option<String>, a: GcArgs) -> Result<i32> {
    let keep = time::parse_duration(&a.keep)?;
    if keep < GC_MIN_KEEP {
        return Err(Error::Usage(format!(
            "--keep {} is shorter than 1d: the last 24 hours are what status and top show",
            inert(&a.keep)
        )));
    }
    let horizon =
        time::fmt(time::now() - chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::MAX));
    // Pruning a file that is not there is a typo, not a request for a new database.
    let path = store::default_path(db.as_deref());
    if !std::path::Path::new(&path).exists() {
        return Err(Error::Store(format!(
            "database {} does not exist",
            inert(&path)
        )));
    }
    let mut store = Store::open(&path)?;
    let p = store.prune(&horizon, a.effects, a.dry_run)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p).unwrap_or_default());
        return Ok(0);
    }
    let verb = if a.dry_run { "would delete" } else { "deleted" };
    let effects = if a.effects {
        format!(
            ", {} done/cancelled effect(s), {} settled approval(s)",
            p.effects, p.approvals
        )
    } else {
        String::new()
    };
    println!(
        "{verb} {} run(s), {} firing(s), {} event(s), {} silent scheduler(s){effects} older than {horizon}",
        p.runs, p.firings, p.events, p.schedulers
    );
    Ok(0)
}

/// How often `logs --follow` looks for new output.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(300);

fn logs_cmd(db: &Option<String>, a: LogsArgs) -> Result<i32> {
    let mut store = open_read_only(db)?;
    let job = a.job.as_str();
    let mut run = match &a.run {
        Some(id) => match store.run_output(id)? {
            Some((r, _)) if r.job_key == job => r,
            Some((r, _)) => {
                return Err(Error::Store(format!(
                    "run {} is of job {}, not {}",
                    inert(id),
                    inert(&r.job_key),
                    inert(job)
                )))
            }
            None => return Err(Error::Store(format!("no run {}", inert(id)))),
        },
        None => match store.run_after(job, None)? {
            Some(r) => r,
            None if a.follow => {
                eprintln!("exactly: job {} has no runs yet; waiting", inert(job));
                loop {
                    std::thread::sleep(FOLLOW_POLL);
                    if let Some(r) = store.run_after(job, None)? {
                        break r;
                    }
                }
            }
            None => return Err(Error::Store(format!("job {} has no runs", inert(job)))),
        },
    };
    let mut out = std::io::stdout();
    loop {
        print_run(&mut store, &mut out, &run, a.follow)?;
        if !a.follow {
            return Ok(0);
        }
        // The next run of the job, whenever it starts.
        run = loop {
            if let Some(r) = store.run_after(job, Some(&run.started_at))? {
                break r;
            }
            std::thread::sleep(FOLLOW_POLL);
        };
    }
}

/// Prints one run: a header on stderr, its output on stdout, each line made inert. Following,
/// prints new output as the run stores it until the run ends. Returns whether it ended.
fn print_run(
    store: &mut Store,
    out: &mut impl std::io::Write,
    run: &crate::metrics::RunRow,
    follow: bool,
) -> Result<bool> {
    eprintln!(
        "== run {} of job {} (slot {}, started {}, owner {}) ==",
        inert(&run.run_id),
        inert(&run.job_key),
        inert(&run.scheduled_at),
        inert(&run.started_at),
        inert(&run.owner)
    );
    // What was printed of the stored text so far.
    let mut shown = String::new();
    loop {
        let Some((row, log)) = store.run_output(&run.run_id)? else {
            return Err(Error::Store(format!(
                "run {} is gone (pruned?)",
                inert(&run.run_id)
            )));
        };
        let ended = row.ended_at.is_some();
        // A stored log keeps head and tail of long output: when the text so far is no longer a
        // prefix of what is stored, what was skipped is said, and printing resumes at its end.
        if !log.starts_with(&shown) {
            writeln!(out, "[… output before this was not kept …]")?;
            shown.clear();
        }
        let fresh = &log[shown.len()..];
        // While the run lasts, whole lines only (the rest may still be arriving).
        let upto = if ended {
            fresh.len()
        } else {
            fresh.rfind('\n').map(|i| i + 1).unwrap_or(0)
        };
        for line in fresh[..upto].split_inclusive('\n') {
            writeln!(
                out,
                "{}",
                crate::sanitize::inert(line.trim_end_matches('\n'))
            )?;
        }
        out.flush()?;
        shown.push_str(&fresh[..upto]);
        if ended || !follow {
            let how = match (&row.outcome, row.exit_code, row.duration_ms) {
                (Some(o), code, d) => format!(
                    "{}{}{}",
                    inert(o),
                    code.map(|c| format!(" (exit {c})")).unwrap_or_default(),
                    d.map(|d| format!(" in {}", time::human_ms(d.max(0) as u64)))
                        .unwrap_or_default()
                ),
                (None, _, _) if ended => "ended".into(),
                (None, _, _) => "still running (or its scheduler died); output so far".into(),
            };
            eprintln!("== run {}: {how} ==", inert(&row.run_id));
            return Ok(ended);
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

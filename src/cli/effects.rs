//! `exactly effect … -- CMD`: one effect attempt, its outcome reported once.
use super::*;

#[derive(Args, Debug)]
pub(crate) struct EffectArgs {
    /// The job the effect belongs to (under `exactly run`: $EXACTLY_JOB).
    #[arg(long, env = "EXACTLY_JOB", value_parser = lease::job_name)]
    pub job: crate::JobName,
    /// The fencing token from `lease claim` (under `exactly run`: $EXACTLY_FENCING_TOKEN).
    #[arg(long, env = "EXACTLY_FENCING_TOKEN", value_parser = fencing_token)]
    pub token: crate::Token,
    /// This run's id, recorded with the effect (under `exactly run`: $EXACTLY_RUN_ID).
    #[arg(long, env = "EXACTLY_RUN_ID")]
    pub run_id: Option<String>,
    #[command(flatten)]
    pub key: KeyFacts,
    /// The terms a person approves (shown in the dashboard).
    #[arg(long)]
    pub terms: Option<String>,
    /// Wait for a person's approval before sending (exit 4 until approved).
    #[arg(long)]
    pub needs_approval: bool,
    /// A shell command that tells whether the effect happened: exit 0 yes, 1 no, other unknown.
    #[arg(long, value_name = "CMD")]
    pub observe: Option<String>,
    /// How long the observer may take (at least 100ms); past it, it is killed with its process
    /// group and its verdict is "can't tell" (exit 5, the effect stays open).
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = observe_timeout)]
    pub observe_timeout: std::time::Duration,
    /// A suppressed duplicate prints nothing (no replayed answer, no "duplicate suppressed"
    /// line): cron mails nothing for a second copy that did nothing. Exit codes are unchanged.
    #[arg(long)]
    pub quiet: bool,
    /// The command that performs the effect.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// The shortest `--observe-timeout`, as the jobs file's `observe_timeout`.
const OBSERVE_TIMEOUT_MIN: std::time::Duration = std::time::Duration::from_millis(100);

/// `--observe-timeout`'s parser: a duration of at least [`OBSERVE_TIMEOUT_MIN`].
fn observe_timeout(s: &str) -> std::result::Result<std::time::Duration, String> {
    let d = time::parse_duration(s).map_err(|e| e.to_string())?;
    if d < OBSERVE_TIMEOUT_MIN {
        return Err(format!("{} is shorter than 100ms", inert(s)));
    }
    Ok(d)
}

pub(super) fn effect_cmd(db: &Option<String>, a: EffectArgs) -> Result<i32> {
    let inputs = a.key.inputs()?;
    let mut store = open(db)?;
    // A token below one handed out for the job before (this user's token memory) is stale, or
    // the database went back: nothing runs under it.
    if let token_memory::Seen::Below { highest, file } =
        token_memory::handed(&mut store, &a.job, a.token.get())
    {
        eprintln!(
            "{}",
            leases::lower_than_seen(&a.job, a.token.get(), highest, &file)
        );
        return Ok(3);
    }
    let mut ctx = Ctx::new(&a.job, a.token);
    if let Some(r) = &a.run_id {
        ctx = ctx.with_run_id(r);
    }
    let spec = Spec {
        action: a.key.action,
        target: a.key.target,
        inputs,
        terms: a.terms,
        needs_approval: a.needs_approval,
        observe_cmd: a.observe.clone(),
    };
    // An observer recorded by an earlier attempt settles its effect when none is given now.
    let observe_cmd = match a.observe {
        Some(o) => Some(o),
        None => effect::get(&mut store, &spec.key())?
            .and_then(|r| r.observe_cmd)
            .filter(|c| effect::observer_is_command(c)),
    };
    let mut action = CommandEffect::new(a.command);
    action.observe_cmd = observe_cmd;
    action.observe_timeout = a.observe_timeout;
    // The job, token, run and key reach the command from the attempt it sends for
    // (`Effect::acting_for`): one copy of each, not a second kept here.
    action.lease = Some(crate::reopener(&store));
    // A grandchild that leaves the command's group comes back to us, and ends with it.
    crate::wrapped::become_subreaper();
    // A duplicate replays the row the attempt found done: the ledger row is read once.
    let (out, found) = effect::run_found(&mut store, &ctx, &spec, &mut action)?;
    // Sent under the token (the ledger checked it at `submitted`): the memory keeps it.
    if matches!(out, Outcome::Done { .. } | Outcome::NotSent { .. }) {
        token_memory::accepted(&mut store, &a.job, a.token.get());
    }
    let silent = a.quiet && matches!(out, Outcome::DuplicateSuppressed { .. });
    if let Outcome::DuplicateSuppressed { response, .. } = &out {
        if !silent {
            replay(found.as_ref(), response.as_deref());
        }
    }
    if !silent {
        report(&out);
    }
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
/// they were kept (on `row`, the `done` row the attempt found), else the response text (written
/// by an observer or another program).
pub(super) fn replay(row: Option<&effect::LedgerRow>, response: Option<&str>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    // A closed stdout is the reader's choice; the outcome stands.
    match row.and_then(|r| r.response_raw.as_ref()) {
        Some(raw) => {
            let _ = stdout.write_all(raw);
            let total = row.and_then(|r| r.response_total).unwrap_or(0);
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
}

/// One line on stderr saying how the attempt ended; the response on stdout.
pub(super) fn report(out: &Outcome) {
    let k = inert(out.key());
    match out {
        // The command's output already reached stdout as it was written.
        Outcome::Done { .. } => {}
        Outcome::DuplicateSuppressed { .. } => {
            eprintln!("exactly: duplicate suppressed: effect {k} is already done");
        }
        Outcome::Unrecorded { ran, reason, .. } => eprintln!(
            "exactly: the command ran ({}), but its result could not be recorded ({}); \
             effect {k} stays submitted: check the far side, then exactly resolve {k}",
            inert(ran),
            inert(reason)
        ),
        Outcome::Fenced { ran: None, .. } => {
            eprintln!(
                "exactly: fenced: the token is not the job's current fencing token \
                       (its lease was taken over, or never claimed); effect {k} not written"
            )
        }
        Outcome::Fenced { ran: Some(ran), .. } => eprintln!(
            "exactly: fenced after the command ran ({}): a newer token took the job's lease, so \
             its result was not written; effect {k} stays submitted. Only a far side that \
             refuses a stale EXACTLY_FENCING_TOKEN kept a late send out: check it, then \
             exactly resolve {k}",
            inert(ran)
        ),
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
            "exactly: effect {k} not sent: less than {} of the lease is left (it ends {}); \
             renew the lease and try again",
            time::human_ms(effect::SUBMIT_MIN_LEFT.as_millis() as u64),
            until.map_or("now: it was released or taken over".to_string(), time::fmt)
        ),
        Outcome::NotSent { reason, .. } => {
            eprintln!(
                "exactly: effect {k} not sent ({}); claim released",
                inert(reason)
            )
        }
    }
}

//! `exactly approve|deny|resolve`: a person's decisions.
use super::*;

#[derive(Args, Debug)]
pub(crate) struct DecideArgs {
    /// The effect key (as `exactly status` and `exactly top` show it).
    pub key: crate::EffectKey,
    /// Why, recorded with the decision.
    #[arg(long)]
    pub note: Option<String>,
}

#[derive(Args, Debug)]
#[command(group(
    clap::ArgGroup::new("how")
        .required(true)
        .args(["happened", "not_happened", "cancel"])
))]
pub(crate) struct ResolveArgs {
    /// The effect key (as `exactly status` and `exactly top` show it).
    pub key: crate::EffectKey,
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
    /// Resolve even while its sender may still be sending (its process alive, or its lease
    /// live): only after checking the far side, or a retry may send it twice.
    #[arg(long)]
    pub force: bool,
}

pub(super) fn decide(db: &Option<String>, a: DecideArgs, approve: bool) -> Result<i32> {
    let mut store = open(db)?;
    let by = crate::actor();
    let r = if approve {
        approval::approve(&mut store, &a.key, &by, a.note.as_deref())?
    } else {
        approval::deny(&mut store, &a.key, &by, a.note.as_deref())?
    };
    let words = r.describe(&a.key, approve);
    Ok(match r {
        Decided::Done => {
            println!("{words} by {}", inert(&by));
            0
        }
        Decided::Already { state, .. } => {
            eprintln!("exactly: {words}");
            // Denying what is no longer pending fails: the caller must learn it was not stopped.
            if approve
                && matches!(
                    state,
                    Already::Approval(ApprovalState::Approved | ApprovalState::Consumed)
                )
            {
                0
            } else {
                1
            }
        }
        Decided::NotFound => {
            eprintln!("exactly: {words}");
            1
        }
    })
}

pub(super) fn resolve_cmd(db: &Option<String>, a: ResolveArgs) -> Result<i32> {
    let how = if a.happened {
        Resolution::Happened
    } else if a.not_happened {
        Resolution::NotHappened
    } else {
        Resolution::Cancel
    };
    let mut store = open(db)?;
    let by = crate::actor();
    let r = approval::resolve(
        &mut store,
        &a.key,
        how,
        &by,
        a.note.as_deref(),
        a.evidence.as_deref(),
        a.force,
    )?;
    let words = r.describe(&a.key, how);
    Ok(match r {
        Resolved::Done { forced, .. } => {
            if let Some(s) = forced {
                eprintln!("exactly: forced while in flight: {}", s.describe());
            }
            println!("{words} by {}", inert(&by));
            0
        }
        // As `exactly effect` answers an earlier attempt that may still be sending.
        Resolved::InFlight(_) => {
            eprintln!("exactly: {words}");
            5
        }
        _ => {
            eprintln!("exactly: {words}");
            1
        }
    })
}

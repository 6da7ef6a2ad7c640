//! `exactly lease claim|renew|release|show`.
use super::token_memory::{self, Seen};
use super::*;

#[derive(Subcommand, Debug)]
pub(crate) enum LeaseCmd {
    /// Claim the lease; prints the fencing token. Exit 3 when a live lease is held, or when
    /// the token is not above one handed out for the job before (released: do not act).
    #[command(
        after_help = "Example:\n  TOKEN=$(exactly lease claim --job daily-digest --for 15m)"
    )]
    Claim {
        /// The job whose lease to claim (its name: no control characters, at most 200).
        #[arg(long, value_parser = lease::job_name)]
        job: crate::JobName,
        /// How long the lease lasts unless renewed, e.g. 15m (longer than the worst run).
        #[arg(long = "for", value_name = "DUR", value_parser = duration)]
        dur: std::time::Duration,
        /// Who holds it, shown to others (default user@host:pid).
        #[arg(long)]
        owner: Option<String>,
    },
    /// Extend a lease you hold. Exit 3 when fenced (or the token is lower than one seen).
    #[command(
        after_help = "Example:\n  exactly lease renew --job daily-digest --token \
                      \"$TOKEN\" --for 15m"
    )]
    Renew {
        /// The job whose lease to extend.
        #[arg(long)]
        job: crate::JobName,
        /// The fencing token `lease claim` printed.
        #[arg(long, value_parser = fencing_token)]
        token: crate::Token,
        /// The new duration from now, e.g. 15m.
        #[arg(long = "for", value_name = "DUR", value_parser = duration)]
        dur: std::time::Duration,
    },
    /// Release a lease you hold. Exit 3 when fenced.
    #[command(
        after_help = "Example:\n  exactly lease release --job daily-digest --token \"$TOKEN\""
    )]
    Release {
        /// The job whose lease to release.
        #[arg(long)]
        job: crate::JobName,
        /// The fencing token `lease claim` printed.
        #[arg(long, value_parser = fencing_token)]
        token: crate::Token,
    },
}

/// `--for`'s parser: a duration.
fn duration(s: &str) -> std::result::Result<std::time::Duration, String> {
    time::parse_duration(s).map_err(|e| e.to_string())
}

pub(super) fn lease_cmd(db: &Option<String>, c: LeaseCmd) -> Result<i32> {
    match c {
        LeaseCmd::Claim { job, dur, owner } => {
            let owner = owner.unwrap_or_else(lease::default_owner);
            let mut store = open(db)?;
            match lease::claim(&mut store, &job, &owner, dur)? {
                lease::Claim::Won { token } => {
                    if let Seen::Below { highest, file } =
                        token_memory::claimed(&mut store, &job, token.get())
                    {
                        return refuse_claim(&mut store, &job, token, highest, &file);
                    }
                    // A figure for `status`: failing to record it never fails the claim won.
                    if let Err(e) = lease::hold::claimed(&mut store, &job, token, dur) {
                        tracing::debug!("the hold of {job} was not recorded: {e}");
                    }
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
                        time::fmt(until)
                    );
                    Ok(3)
                }
            }
        }
        LeaseCmd::Renew { job, token, dur } => {
            let mut store = open(db)?;
            if let Seen::Below { highest, file } =
                token_memory::handed(&mut store, &job, token.get())
            {
                eprintln!("{}", lower_than_seen(&job, token.get(), highest, &file));
                return Ok(3);
            }
            if lease::renew(&mut store, &job, token, dur)? {
                if let Err(e) = lease::hold::renewed(&mut store, &job, token) {
                    tracing::debug!("the renewal of {job} was not recorded: {e}");
                }
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
            let mut store = open(db)?;
            if lease::release(&mut store, &job, token)? {
                if let Err(e) = lease::hold::released(&mut store, &job, token) {
                    tracing::debug!("the release of {job} was not recorded: {e}");
                }
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

/// A claim handed a token not above one this user was handed before for the job (the token
/// memory): the lease is released at once, and the claim refused as fenced (exit 3: do not act).
pub(super) fn refuse_claim(
    store: &mut Store,
    job: &crate::JobName,
    token: crate::Token,
    highest: i64,
    file: &std::path::Path,
) -> Result<i32> {
    let released = match lease::release(store, job, token) {
        Ok(true) => "the lease was released".to_string(),
        Ok(false) => "the lease was taken meanwhile".to_string(),
        Err(e) => format!("the lease could not be released ({e}) and lapses at its end"),
    };
    eprintln!(
        "exactly: refused: job {} was handed fencing token {token}, not above {highest} handed \
         out for it before (remembered in {}): the database went back, most likely a failover \
         that lost its last commits; {released}; do not act on it",
        inert(job),
        inert(&file.display().to_string())
    );
    Ok(3)
}

/// The line a command handed a token below the remembered one says before it stops.
pub(super) fn lower_than_seen(
    job: &crate::JobName,
    token: i64,
    highest: i64,
    file: &std::path::Path,
) -> String {
    format!(
        "exactly: refused: fencing token {token} of job {} is lower than {highest}, handed out \
         for it before (remembered in {}), and the database still takes it: the database went \
         back, most likely a failover that lost its last commits; not acting on it",
        inert(job),
        inert(&file.display().to_string())
    )
}

//! The lease: one row per job, claimed atomically, with a fencing token that only goes up.
//!
//! Choose the duration longer than the worst-case run (so a live run is not stolen from) and
//! shorter than the interval (so a crashed run does not block the next firing).
use crate::store::{LeaseClaim, Store};
use crate::{time, Result};
use std::time::Duration;

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// We hold the lease; carry this token into every write.
    Won { token: i64 },
    /// A live lease is held by someone else.
    Held {
        owner: String,
        token: i64,
        until: String,
    },
}

/// Claims `job`'s lease for `dur`: inserts it, or steals it only if expired.
pub fn claim(store: &mut Store, job: &str, owner: &str, dur: Duration) -> Result<Claim> {
    let now = time::now();
    let until = time::fmt(time::add(now, dur));
    Ok(
        match store.claim_lease(job, owner, &until, &time::fmt(now))? {
            LeaseClaim::Won { token, .. } => Claim::Won { token },
            LeaseClaim::Held {
                owner,
                token,
                until,
            } => Claim::Held {
                owner,
                token,
                until,
            },
        },
    )
}

/// Extends the lease; `Ok(false)` means a higher token exists: we were fenced and must stop.
pub fn renew(store: &mut Store, job: &str, token: i64, dur: Duration) -> Result<bool> {
    let until = time::fmt(time::add(time::now(), dur));
    store.renew_lease(job, token, &until)
}

/// Releases the lease, keeping the token so the next claim counts on from it.
/// `Ok(false)` means we were fenced.
pub fn release(store: &mut Store, job: &str, token: i64) -> Result<bool> {
    store.release_lease(job, token)
}

/// A default owner name: `user@host:pid`.
pub fn default_owner() -> String {
    format!(
        "{}@{}:{}",
        crate::user(),
        crate::hostname(),
        std::process::id()
    )
}

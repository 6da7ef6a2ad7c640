//! The lease: one row per job, claimed atomically, with a fencing token that only goes up.
//!
//! A lease nobody renews (a cron wrapper's `lease claim`, a library claim): choose it longer
//! than the worst-case run (so a live run is not stolen from) and shorter than the interval (so
//! a crashed run does not block the next firing). A lease `exactly run` holds for a run is
//! renewed by heartbeat (every [`RENEWALS_PER_LEASE`]th of it): a run may outlast it; choose it
//! shorter than the interval and at least [`RENEWED_LEASE_MIN_BEATS`] scheduler heartbeats.
use crate::store::LeaseClaim;
use crate::store::Store;
pub use crate::store::{LeaseRow, RELEASED};
use exactly_words::{time, JobName, Result, Token};
use std::time::Duration;

/// A scheduler renews each run's lease when a third of it has passed since the last renewal.
pub const RENEWALS_PER_LEASE: u32 = 3;
/// How far before its lease's end (on its scheduler's clock) a run's command is stopped: the
/// watchdog's SIGTERM, its grace before SIGKILL, and a margin.
pub const STOP_MARGIN: Duration = Duration::from_millis(600);
/// How often a scheduler beats (its row in `exactly_schedulers`).
pub const SCHEDULER_BEAT: Duration = Duration::from_secs(2);
/// A lease a scheduler renews shorter than this many of its heartbeats (6 s) leaves a run less
/// than two heartbeats of stalled renewal (a lease of `L` is renewed every `L/3`, and its
/// command is stopped once `L` less the stop margin passes without one: 3.4 s of delay at 6 s)
/// before it is stopped: an ordinary stall (a busy database, a starved process) stops it. (A job
/// firing every 6 s or less cannot have such a lease shorter than its interval: `status` says
/// its late renewals instead.)
pub const RENEWED_LEASE_MIN_BEATS: u32 = 3;

/// Whether a lease a scheduler renews is too thin to ride out a stall: under
/// [`RENEWED_LEASE_MIN_BEATS`] heartbeats, where the interval (if any) leaves room for one that
/// long. With firings that close together no lease has both, and a warning nobody can act on
/// hides the others. `status` (the `lease<6s` warning) and `check` judge by this alone.
pub fn renewal_margin_thin(lease: Duration, interval: Option<Duration>) -> bool {
    let min = SCHEDULER_BEAT * RENEWED_LEASE_MIN_BEATS;
    lease < min && interval.is_none_or(|iv| iv > min)
}

/// The stop margin for a lease: [`STOP_MARGIN`], but never more than a quarter of a short one.
pub fn stop_margin(lease: Duration) -> Duration {
    STOP_MARGIN.min(lease / 4)
}

/// How long a renewed lease may go without a renewal before its run's command is stopped.
pub fn unrenewed_for_at_most(lease: Duration) -> Duration {
    lease.saturating_sub(stop_margin(lease))
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// We hold the lease; carry this token into every write.
    Won {
        /// The fencing token of our lease.
        token: Token,
    },
    /// A live lease is held by someone else.
    Held {
        /// Who holds it.
        owner: String,
        /// The fencing token of the lease held.
        token: Token,
        /// When the holder's lease ends.
        until: time::Ts,
    },
}

/// Longest job name, in characters: names are labels in metrics and columns on screens.
pub const JOB_NAME_MAX: usize = 200;

/// Why `name` cannot name a job: empty, longer than [`JOB_NAME_MAX`], or holding a control or
/// bidi-override character (two names differing only by those would look the same in every
/// view, and a terminal would obey them).
pub fn job_name_problem(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        return Some("a job name must not be empty".into());
    }
    let n = name.chars().count();
    if n > JOB_NAME_MAX {
        return Some(format!(
            "a job name is at most {JOB_NAME_MAX} characters (this one has {n})"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || exactly_words::sanitize::is_bidi(*c))
    {
        return Some(format!(
            "a job name must not contain control characters (found U+{:04X})",
            c as u32
        ));
    }
    None
}

/// Why a text names no job: the one clear reason, as a person reads it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct BadJobName {
    /// The reason, one line.
    pub why: String,
}

/// `name` as a job name, or the one clear reason it is not one (a clap value parser too).
/// The name is normalised as a jobs file's is (`jobs::normalize_name`): `"a "` finds job `a`.
pub fn job_name(name: &str) -> std::result::Result<JobName, BadJobName> {
    let name = crate::jobs::normalize_name(name);
    match crate::jobs::name_problem(&name).or_else(|| job_name_problem(&name)) {
        Some(why) => Err(BadJobName { why }),
        None => Ok(name.into()),
    }
}

/// The shortest lease accepted (as in jobs files): shorter, no heartbeat could keep it.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// Refuses a lease duration below [`MIN_LEASE`] or above [`time::MAX_DURATION`].
pub fn check_duration(dur: Duration) -> Result<()> {
    if dur < MIN_LEASE {
        return Err(exactly_words::Error::Usage(format!(
            "a lease of {} is shorter than 100ms; no heartbeat can keep it",
            time::human_ms(dur.as_millis() as u64)
        )));
    }
    if dur > time::MAX_DURATION {
        return Err(exactly_words::Error::Usage(
            "a lease longer than 100y is refused (timestamps keep a 4-digit year)".to_string(),
        ));
    }
    Ok(())
}

/// Claims `job`'s lease for `dur`: inserts it, or steals it only if expired (and the clock-skew
/// margin, [`time::max_skew`], has passed too).
///
/// The owner and the job were both `&str`, and swapped they claimed a lease for a job named
/// after the worker. Now the swap does not compile:
/// ```compile_fail
/// # fn f(store: &mut exactly::Store) -> exactly::Result<exactly::lease::Claim> {
/// let dur = std::time::Duration::from_secs(60);
/// exactly::lease::claim(store, "worker-1", "invoices", dur) // expected `&JobName`
/// # }
/// ```
/// ```
/// # fn f(store: &mut exactly::Store) -> exactly::Result<exactly::lease::Claim> {
/// let dur = std::time::Duration::from_secs(60);
/// exactly::lease::claim(store, &exactly::JobName::from("invoices"), "worker-1", dur)
/// # }
/// ```
pub fn claim(store: &mut Store, job: &JobName, owner: &str, dur: Duration) -> Result<Claim> {
    if let Some(why) = job_name_problem(job) {
        return Err(exactly_words::Error::Usage(why));
    }
    check_duration(dur)?;
    let now = store.now();
    claim_until(store, job, owner, time::add(now, dur), now)
}

/// The highest fencing token this process was handed per database and job: a holder that is
/// handed a lower one (the database went back: a failover that lost commits, the guard off)
/// stops that job's work instead of acting on it.
static SEEN: parking_lot::Mutex<Vec<(String, String, i64)>> = parking_lot::const_mutex(Vec::new());

/// Notes that this process was handed `token` for `job` on database `db`; `Err` with the higher
/// token it was handed before, when this one is lower (said on stderr too).
pub fn saw_token(db: &str, job: &str, token: i64) -> std::result::Result<(), i64> {
    note_token(db, job, token, false)
}

/// [`saw_token`] for a token every earlier one must be below: a scheduler's run's, each from a
/// claim of its own (its run id is the job and the token), so one equal to a token handed before
/// was handed out twice (the database went back to just after it).
pub fn saw_new_token(db: &str, job: &str, token: i64) -> std::result::Result<(), i64> {
    note_token(db, job, token, true)
}

fn note_token(db: &str, job: &str, token: i64, new: bool) -> std::result::Result<(), i64> {
    let mut seen = SEEN.lock();
    match seen.iter_mut().find(|(d, j, _)| d == db && j == job) {
        Some((_, _, prev)) if *prev > token || (new && *prev == token) => {
            let prev = *prev;
            drop(seen);
            let how = if prev == token {
                "was handed to this process before".to_string()
            } else {
                format!("is lower than {prev}, handed to this process before")
            };
            eprintln!(
                "exactly: job {}: fencing token {token} {how}: the database went back (a \
                 failover that lost commits?); the job's work stops here",
                exactly_words::sanitize::inert(job)
            );
            Err(prev)
        }
        Some((_, _, prev)) => {
            *prev = token;
            Ok(())
        }
        None => {
            seen.push((db.to_string(), job.to_string(), token));
            Ok(())
        }
    }
}

/// Claims `job`'s lease until `until`, as at `now` (the caller's clock: [`claim`] passes the
/// real one; a test or a simulation passes its own).
pub fn claim_until(
    store: &mut Store,
    job: &JobName,
    owner: &str,
    until: time::Ts,
    now: time::Ts,
) -> Result<Claim> {
    if let Some(why) = job_name_problem(job) {
        return Err(exactly_words::Error::Usage(why));
    }
    Ok(
        match store.claim_lease(job, owner, &time::fmt(until), &time::fmt(now))? {
            LeaseClaim::Won { token, .. } => {
                if let Err(prev) = saw_token(store.path(), job, token) {
                    return Err(exactly_words::Error::Store(format!(
                        "job {}: the database handed out fencing token {token}, lower than \
                         {prev} handed to this process before: not acting on it",
                        exactly_words::sanitize::inert(job)
                    )));
                }
                Claim::Won {
                    token: token.into(),
                }
            }
            LeaseClaim::Held {
                owner,
                token,
                until,
            } => Claim::Held {
                owner,
                token: token.into(),
                until,
            },
        },
    )
}

/// Extends the lease; `Ok(false)` means a higher token exists: we were fenced and must stop.
pub fn renew(store: &mut Store, job: &JobName, token: Token, dur: Duration) -> Result<bool> {
    check_duration(dur)?;
    renew_until(store, job, token, time::add(store.now(), dur))
}

/// Extends (or shortens: a past `until` lets the lease lapse) the lease to `until`;
/// `Ok(false)` means a higher token exists.
pub fn renew_until(
    store: &mut Store,
    job: &JobName,
    token: Token,
    until: time::Ts,
) -> Result<bool> {
    let now = store.now_text();
    store.renew_lease(job, token.get(), &time::fmt(until), &now)
}

/// Renews many leases in one write, each by its own duration: Some(true) renewed, Some(false)
/// fenced (a newer token), None released meanwhile.
pub fn renew_many(
    store: &mut Store,
    leases: &[(&JobName, Token, Duration)],
) -> Result<Vec<Option<bool>>> {
    let now = store.now();
    let rows: Vec<(&str, i64, String)> = leases
        .iter()
        .map(|(job, token, dur)| (job.as_str(), token.get(), time::fmt(time::add(now, *dur))))
        .collect();
    store.renew_leases(&rows, &time::fmt(now))
}

/// Puts the writes of `store` before every other writer of this process: a renewer's, since a
/// renewal that waits behind firings, ends or output lets the leases of running commands lapse.
pub fn renewer_first(store: &mut Store) {
    store.renewals_first();
}

/// Which database handed out the fencing tokens seen on `store`, as a key for a holder's memory
/// of them: the same for a PostgreSQL primary and its promoted standby, another for a database
/// dropped and made again under the same name (or a SQLite file deleted and made again).
pub fn token_source(store: &mut Store) -> Result<String> {
    store.holder_identity()
}

/// Releases the lease, keeping the token so the next claim counts on from it.
/// `Ok(false)` means we were fenced.
///
/// A number is not a token: a row id or a count passed where the token goes does not compile.
/// ```compile_fail
/// # fn f(store: &mut exactly::Store, job: &exactly::JobName) -> exactly::Result<bool> {
/// let run_id: i64 = 41;
/// exactly::lease::release(store, job, run_id) // expected `Token`, found `i64`
/// # }
/// ```
/// ```
/// # fn f(store: &mut exactly::Store, job: &exactly::JobName) -> exactly::Result<bool> {
/// exactly::lease::release(store, job, exactly::Token::from(41))
/// # }
/// ```
pub fn release(store: &mut Store, job: &JobName, token: Token) -> Result<bool> {
    let now = store.now_text();
    store.release_lease(job, token.get(), &now)
}

/// A hold of a lease nobody renews for it, as `status` measures it: who claims a lease outside
/// a scheduler (`exactly lease claim`, a cron wrapper) records the claim, each renewal and the
/// release, so `status` can compare how long holders keep the lease with its length (a
/// `p99>lease` warning). Each is a write of its own after the lease's, so a claim, renewal or
/// release stays one statement; a program that does not record its holds is not measured.
pub mod hold {
    use crate::store::Store;
    use exactly_words::{time, JobName, Result, Token};
    use std::time::Duration;

    /// `token` won `job`'s lease for `dur`, now.
    pub fn claimed(store: &mut Store, job: &JobName, token: Token, dur: Duration) -> Result<()> {
        let ms = i64::try_from(dur.as_millis()).unwrap_or(i64::MAX);
        let now = time::fmt(store.now());
        store.hold_claimed(job, token.get(), ms, &now)
    }

    /// `token`'s holder renewed `job`'s lease.
    pub fn renewed(store: &mut Store, job: &JobName, token: Token) -> Result<()> {
        store.hold_renewed(job, token.get())
    }

    /// `token`'s holder released `job`'s lease, now.
    pub fn released(store: &mut Store, job: &JobName, token: Token) -> Result<()> {
        let now = store.now_text();
        store.hold_released(job, token.get(), &now)
    }
}

/// The job's lease row, if it was ever claimed.
pub fn get(store: &mut Store, job: &JobName) -> Result<Option<LeaseRow>> {
    store.lease(job)
}

/// The job's lease row and how long it has left, measured on the database's clock (on
/// PostgreSQL the server's, whatever this host's says; negative once it ended). A caller that
/// must stop when the lease ends counts this down on its own monotonic clock.
pub fn get_with_left(
    store: &mut Store,
    job: &JobName,
) -> Result<Option<(LeaseRow, chrono::Duration)>> {
    store.lease_left(job, &store.now_text())
}

/// The instant (on this host's monotonic clock) at which a lease with `left` to run ends.
pub fn ends_at(left: chrono::Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    match left.to_std() {
        Ok(d) => now
            .checked_add(d)
            .unwrap_or(now + Duration::from_secs(86_400 * 365)),
        // Already ended.
        Err(_) => now,
    }
}

/// A default owner name: `user@host:pid` (the host as in attempt ids: `EXACTLY_HOST`, else
/// the host name).
pub fn default_owner() -> String {
    format!(
        "{}@{}:{}",
        exactly_words::user(),
        exactly_words::host(),
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A holder handed a token lower than one it was handed before for the job (the database
    /// went back) refuses it: the claim is an error, nothing runs under it.
    #[test]
    fn a_token_lower_than_one_seen_before_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db").display().to_string();
        crate::database::open(Some(&db), crate::store::Access::Write).unwrap();
        let job = JobName::from("went-back");
        let dur = Duration::from_millis(100);
        let won = || {
            claim(
                &mut crate::database::open(Some(&db), crate::store::Access::Write)?,
                &job,
                "a",
                dur,
            )
        };
        assert!(matches!(won().unwrap(), Claim::Won { .. }));
        std::thread::sleep(Duration::from_millis(2300));
        assert!(matches!(won().unwrap(), Claim::Won { .. }));
        // The database loses its last claims, as after a failover without the guard.
        let raw = rusqlite::Connection::open(&db).unwrap();
        raw.execute(
            "UPDATE job_lease SET fencing_token = 0, lease_until = ?1",
            [RELEASED],
        )
        .unwrap();
        let e = won().expect_err("a lower token must be refused");
        assert!(e.to_string().contains("lower than 2"), "{e}");
    }

    /// A scheduler's run's token is a claim of its own: one equal to an earlier run's was handed
    /// out twice and is refused as a lower one is; a claim's check lets it through.
    #[test]
    fn a_run_s_token_equal_to_one_seen_before_is_refused() {
        let db = "equal-token-test";
        assert_eq!(saw_new_token(db, "j", 6), Ok(()));
        assert_eq!(saw_token(db, "j", 6), Ok(()));
        assert_eq!(saw_new_token(db, "j", 6), Err(6));
        assert_eq!(saw_new_token(db, "j", 5), Err(6));
        assert_eq!(saw_new_token(db, "j", 7), Ok(()));
    }
}

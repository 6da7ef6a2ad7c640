//! Scale-out: the schedulers of one jobs file on one database split its jobs instead of all
//! contending for every firing. Each job belongs to one live scheduler of the file, chosen by
//! rendezvous (highest-random-weight) hashing of the job's name over their owners, so a
//! scheduler joining or dying moves only its own share. Membership comes from the heartbeats
//! (alive: younger than `jobs::scheduler_dead_after`), read every [`READ_EVERY`].
//!
//! While views of membership disagree (a scheduler joins, or died and is not yet called dead),
//! a job could belong to nobody in anybody's view. So every scheduler also watches the jobs it
//! does not own: a slot still unrecorded [`NET_AFTER`] after it fell due (longer while its own
//! bursts run late), or a queued or interrupted firing left waiting that long, it fires itself.
//! Firing twice is impossible either way: a firing is the row (job, slot), and the loser of a race
//! records a duplicate. A scheduler alone owns every job and watches nothing, as before scale-out.
use crate::{jobs, Store};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often membership is read: about once a second, not per firing.
pub(super) const READ_EVERY: Duration = Duration::from_secs(1);
/// How long after a slot fell due another scheduler's job is fired here if nothing recorded
/// it: well past an owner's usual lag, well inside the shortest window a late slot still runs
/// in (`LATE_OK`, 2 s, with no catch-up). Longer while this scheduler's own bursts are decided
/// late (see [`Share::net_after`]).
pub(super) const NET_AFTER: Duration = Duration::from_secs(1);
/// The longest wait: past it a slot without catch-up is missed whoever decides it.
const NET_MAX: Duration = Duration::from_secs(5);
/// How long an own burst's lag is remembered.
const LAG_KEPT: Duration = Duration::from_secs(15);

/// A job's weight for a scheduler: the first 8 bytes of SHA-256 of both names (stable across
/// processes, versions and machines, unlike std's hasher).
fn weight(owner: &str, job: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(owner.as_bytes());
    h.update([0]);
    h.update(job.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_be_bytes(b)
}

/// The member a job belongs to: the highest weight (ties, never seen in practice, by name).
pub(super) fn owner_of<'a>(members: &'a [String], job: &str) -> Option<&'a str> {
    members
        .iter()
        .max_by(|a, b| (weight(a, job), a.as_str()).cmp(&(weight(b, job), b.as_str())))
        .map(String::as_str)
}

/// One scheduler's view of the schedulers it shares its file with.
pub(super) struct Share {
    me: String,
    source: String,
    /// Live owners of the same file, this one always among them, sorted.
    members: Vec<String>,
    next_read: Instant,
    /// The last share logged: (jobs owned, jobs, members).
    said: Option<(usize, usize, usize)>,
    /// Since when each job has been seen with a firing waiting for its free lease.
    waiting_since: HashMap<String, Instant>,
    /// The largest recent lag of this scheduler's own bursts, and when it was seen.
    own_lag: Option<(Duration, Instant)>,
}

impl Share {
    pub(super) fn new(me: &str, source: &str) -> Share {
        Share {
            me: me.to_string(),
            source: source.to_string(),
            members: vec![me.to_string()],
            next_read: Instant::now(),
            said: None,
            waiting_since: HashMap::new(),
            own_lag: None,
        }
    }

    /// Whether this scheduler is the only live owner of its jobs file it knows of: no other's
    /// transactions to conflict with.
    pub(super) fn alone(&self) -> bool {
        self.members.len() <= 1
    }

    /// Reads membership when [`READ_EVERY`] has passed; true when it changed. A failed read
    /// keeps the last view (the safety net covers what it gets wrong).
    pub(super) fn refresh(&mut self, store: &mut Store) -> bool {
        if Instant::now() < self.next_read {
            return false;
        }
        self.next_read = Instant::now() + READ_EVERY;
        let mut members = match jobs::live_schedulers(store, &self.source) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("share: cannot read the schedulers: {e}");
                return false;
            }
        };
        // Itself always: its own heartbeat may lag behind its loop.
        if !members.contains(&self.me) {
            members.push(self.me.clone());
        }
        members.sort();
        if members == self.members {
            return false;
        }
        self.members = members;
        true
    }

    /// Whether the job is this scheduler's to fire on time.
    pub(super) fn mine(&self, job: &str) -> bool {
        self.members.len() == 1 || owner_of(&self.members, job) == Some(self.me.as_str())
    }

    /// Logs the share when it changed: `share: N of M jobs, K live schedulers`.
    pub(super) fn say(&mut self, mine: usize, jobs: usize) {
        let now = (mine, jobs, self.members.len());
        if self.said == Some(now) {
            return;
        }
        // Alone from the start: nothing is split, nothing to say.
        if self.said.is_none() && now.2 == 1 {
            self.said = Some(now);
            return;
        }
        self.said = Some(now);
        tracing::info!(
            "share: {mine} of {jobs} jobs, {} live schedulers ({})",
            now.2,
            self.members.join(", "),
        );
    }

    /// Notes how late this scheduler decided its own last burst (from its oldest slot).
    pub(super) fn own_lag(&mut self, lag: Duration) {
        self.own_lag = match self.own_lag {
            Some((l, at)) if l >= lag && at.elapsed() < LAG_KEPT => Some((l, at)),
            _ => Some((lag, Instant::now())),
        };
    }

    /// How long another's slot or waiting firing is left to its owner: [`NET_AFTER`], or twice
    /// this scheduler's own recent lag, up to [`NET_MAX`]. The shares are about equal, so an
    /// owner alive but loaded is about as late as this one; firing its slots for it would only
    /// add duplicates to the load. A dead owner's slots still go after about a second, as the
    /// survivors' own bursts are on time.
    pub(super) fn net_after(&self) -> Duration {
        let lag = self
            .own_lag
            .filter(|(_, at)| at.elapsed() < LAG_KEPT)
            .map_or(Duration::ZERO, |(l, _)| l);
        (lag * 2).clamp(NET_AFTER, NET_MAX)
    }

    /// Notes the jobs seen this tick with a firing waiting for its free lease (the others are
    /// forgotten: their wait is over).
    pub(super) fn waiting(&mut self, jobs: &[&str]) {
        let now = Instant::now();
        self.waiting_since.retain(|j, _| jobs.contains(&j.as_str()));
        for j in jobs {
            self.waiting_since.entry(j.to_string()).or_insert(now);
        }
    }

    /// Whether this scheduler starts a job's waiting firing: its own job at once, another's once
    /// it has waited [`NET_AFTER`] (its owner would have started it by then).
    pub(super) fn may_start_waiting(&self, job: &str, mine: bool) -> bool {
        mine || self
            .waiting_since
            .get(job)
            .is_some_and(|t| t.elapsed() >= self.net_after())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_net_waits_twice_the_own_lag_within_bounds() {
        let mut s = Share::new("a", "f");
        assert_eq!(s.net_after(), NET_AFTER);
        s.own_lag(Duration::from_millis(200));
        assert_eq!(s.net_after(), NET_AFTER);
        s.own_lag(Duration::from_millis(1500));
        assert_eq!(s.net_after(), Duration::from_secs(3));
        // A smaller lag soon after does not shorten the wait: the worst recent burst counts.
        s.own_lag(Duration::from_millis(100));
        assert_eq!(s.net_after(), Duration::from_secs(3));
        s.own_lag(Duration::from_secs(9));
        assert_eq!(s.net_after(), NET_MAX);
        assert!(s.mine("any job"), "alone, every job is its own");
    }

    #[test]
    fn rendezvous_moves_only_the_leavers_jobs() {
        let three: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        let two: Vec<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
        let jobs: Vec<String> = (0..3000).map(|i| format!("job-{i}")).collect();
        let mut per = HashMap::new();
        for j in &jobs {
            let o3 = owner_of(&three, j).expect("an owner");
            *per.entry(o3).or_insert(0) += 1;
            let o2 = owner_of(&two, j).expect("an owner");
            // A job of a survivor stays with it when c leaves.
            if o3 != "c" {
                assert_eq!(o3, o2, "{j}");
            }
        }
        for o in ["a", "b", "c"] {
            let n = per[o];
            assert!((800..1200).contains(&n), "{o} got {n} of 3000");
        }
    }
}

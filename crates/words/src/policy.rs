//! The rules every layer agrees on, below the store: what a firing does while a run is live
//! ([`Overlap`]), how many runs one firing gets ([`MAX_ATTEMPTS`]), how a failed firing goes
//! again ([`RetryRules`]), what an approval allows ([`gate`]) and how long a stopped command may
//! still act ([`stop_margin`]). The store applies them inside its transactions; the layers
//! above choose them. Nothing here reads the database or a clock.
use crate::state::ApprovalState;
use std::time::Duration;

/// How many runs one firing gets, however they end (killed, died with their scheduler, an
/// effect that never happened): counted from the runs table, so across restarts and schedulers.
pub const MAX_ATTEMPTS: i64 = 3;

/// Whether a firing that has had `runs` runs is used up: it ends `gave_up`, never a fourth run.
pub fn used_up(runs: i64) -> bool {
    runs >= MAX_ATTEMPTS
}

/// What a job does when a firing comes while a run is live (the seed's three policies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// Drop the firing (recorded): only the latest state matters.
    Coalesce,
    /// Keep at most `cap` firings waiting, persisted; record saturation.
    Queue {
        /// How many firings may wait at most.
        cap: u32,
    },
    /// Record a loud miss: a missed firing is a real miss.
    Fail,
}

/// What the far side of a job's effects is declared to do (the jobs file's `far_side`): the
/// ledger cannot see it, so the operator says it and `exactly doctor` takes their word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FarSide {
    /// It keeps each effect key (`EXACTLY_EFFECT_KEY`) once: a second send is a no-op there.
    Dedupes,
    /// It refuses a write whose fencing token (`EXACTLY_FENCING_TOKEN`) is below one it saw.
    Fences,
}

impl FarSide {
    /// The word the jobs file and the registry use.
    pub fn name(self) -> &'static str {
        match self {
            FarSide::Dedupes => "dedupes",
            FarSide::Fences => "fences",
        }
    }
    /// The declaration from its word; None for any other word.
    pub fn parse(word: &str) -> Option<FarSide> {
        match word {
            "dedupes" => Some(FarSide::Dedupes),
            "fences" => Some(FarSide::Fences),
            _ => None,
        }
    }
}

/// A firing's fate while a run is live: [`Overlap::decide`] on the queue's depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhileLive {
    /// Dropped, recorded `coalesced`.
    Coalesce,
    /// Waits, at this depth (counting itself).
    Queue {
        /// Its place in the queue, counting itself.
        depth: u64,
        /// How many firings may wait at most.
        cap: u32,
    },
    /// Dropped: the queue is full.
    Saturated {
        /// How many firings may wait at most.
        cap: u32,
    },
    /// A loud miss, recorded `missed`.
    Missed,
}

/// JSON shows the policy by its name, as the jobs file spells it (`status --json`'s `overlap`).
impl serde::Serialize for Overlap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl Overlap {
    /// The policy as the jobs file and the registry spell it.
    pub fn name(self) -> &'static str {
        match self {
            Overlap::Coalesce => "coalesce",
            Overlap::Queue { .. } => "queue",
            Overlap::Fail => "fail",
        }
    }
    /// The queue's cap, for the `queue` policy.
    pub fn cap(self) -> Option<u32> {
        match self {
            Overlap::Queue { cap } => Some(cap),
            _ => None,
        }
    }
    /// Rebuilds the policy from its registry form.
    pub fn from_registry(name: &str, cap: Option<i64>) -> Option<Overlap> {
        match name {
            "coalesce" => Some(Overlap::Coalesce),
            "fail" => Some(Overlap::Fail),
            "queue" => Some(Overlap::Queue {
                cap: cap.unwrap_or(1).clamp(0, u32::MAX as i64) as u32,
            }),
            _ => None,
        }
    }
    /// What a firing does while a run is live, with `queued` firings already waiting.
    pub fn decide(self, queued: u64) -> WhileLive {
        match self {
            Overlap::Coalesce => WhileLive::Coalesce,
            Overlap::Queue { cap } if queued < u64::from(cap) => WhileLive::Queue {
                depth: queued + 1,
                cap,
            },
            Overlap::Queue { cap } => WhileLive::Saturated { cap },
            Overlap::Fail => WhileLive::Missed,
        }
    }
}

/// How a job's failed firings go again (`retries` in the jobs file): at most `attempts` runs a
/// firing, each retry `backoff(slot, runs so far)` after the last run ended.
pub struct RetryRules<'a> {
    /// Most runs one firing gets.
    pub attempts: i64,
    /// How long after its last run a firing of this slot, with this many runs so far, goes again.
    pub backoff: &'a dyn Fn(&str, i64) -> Duration,
    /// The slot whose backoff the caller has already waited out on its monotonic clock: it goes
    /// now, whatever the wall clock (stepped back or forward since) says of its last run's end.
    pub held: Option<&'a str>,
}

/// What an effect's approval says about sending it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Ask a person first: the approval is requested, nothing is sent.
    Ask,
    /// Send; `consume`: the approval this send uses up (in the same transaction).
    Send {
        /// Whether this send uses up an approval.
        consume: bool,
    },
    /// Denied: the effect is cancelled, never sent.
    Cancel,
    /// Asked and not decided yet: wait for a person.
    Wait,
}

/// The approval rule, before any send: once anyone asked for approval of a key it binds every
/// caller (whatever its own flags), an approval is used up by the one send it allows, a denial
/// cancels. `approval` is the key's approval state, if one was ever asked for.
pub fn gate(approval: Option<ApprovalState>, needs_approval: bool) -> Gate {
    match approval {
        None if needs_approval => Gate::Ask,
        None | Some(ApprovalState::Consumed) => Gate::Send { consume: false },
        Some(ApprovalState::Approved) => Gate::Send { consume: true },
        Some(ApprovalState::Denied) => Gate::Cancel,
        Some(_) => Gate::Wait,
    }
}

/// How often the lease is re-read while the command runs.
pub const LEASE_POLL: Duration = Duration::from_millis(200);
/// How long a stopped command has between `SIGTERM` and `SIGKILL`.
pub const STOP_GRACE: Duration = Duration::from_millis(500);
/// How long after its lease's end a stopped sender may still be sending: the deadline timer
/// fires on a poll of the loop that watches the command, which then waits out its grace before
/// SIGKILL.
pub fn stop_margin() -> Duration {
    LEASE_POLL + STOP_GRACE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_decides_from_the_queue_depth() {
        assert_eq!(Overlap::Coalesce.decide(5), WhileLive::Coalesce);
        assert_eq!(Overlap::Fail.decide(0), WhileLive::Missed);
        let q = Overlap::Queue { cap: 2 };
        assert_eq!(q.decide(0), WhileLive::Queue { depth: 1, cap: 2 });
        assert_eq!(q.decide(1), WhileLive::Queue { depth: 2, cap: 2 });
        assert_eq!(q.decide(2), WhileLive::Saturated { cap: 2 });
        assert_eq!(
            Overlap::Queue { cap: 0 }.decide(0),
            WhileLive::Saturated { cap: 0 }
        );
        assert!(!used_up(2) && used_up(3));
    }

    #[test]
    fn the_gate_binds_every_caller_once_asked() {
        assert_eq!(gate(None, false), Gate::Send { consume: false });
        assert_eq!(gate(None, true), Gate::Ask);
        for asked in [false, true] {
            let pending = Some(ApprovalState::Pending);
            assert_eq!(gate(pending, asked), Gate::Wait);
            let approved = Some(ApprovalState::Approved);
            assert_eq!(gate(approved, asked), Gate::Send { consume: true });
            assert_eq!(gate(Some(ApprovalState::Denied), asked), Gate::Cancel);
            let used = Some(ApprovalState::Consumed);
            assert_eq!(gate(used, asked), Gate::Send { consume: false });
        }
    }
}

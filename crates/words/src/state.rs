//! The states a row can be in, as types: an effect, an approval, a firing, a run's outcome and
//! an event's kind. Each is written as text in the database (the words are the contract in
//! docs/contract.md, "States"); a word this build does not know (another writer's, a newer
//! version's) is kept as `Other`, never a crash. The SQL in `store/` is the only other place these
//! words appear.
use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

/// Declares an enum of database words with `as_str`, `parse` (unknown words kept as `Other`),
/// `FromStr`, `Display`, serde as the word, order by word, and comparisons with `&str`.
macro_rules! words {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident => $word:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $var,)*
            /// A word this build does not know, kept as written.
            Other(String),
        }

        impl $name {
            /// Every word this build knows, in declaration order.
            pub const KNOWN: &'static [&'static str] = &[$($word,)*];

            /// The word as written in the database.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$var => $word,)*
                    $name::Other(s) => s,
                }
            }

            /// The value a database word stands for; a word this build does not know is kept.
            pub fn parse(word: &str) -> $name {
                match word {
                    $($word => $name::$var,)*
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl Default for $name {
            /// An empty word: what a row with no value reads as.
            fn default() -> $name {
                $name::Other(String::new())
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &$name) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $name {
            /// By word, so a map keyed by these reads in the order of its words; a known word
            /// sorts before an `Other` spelling the same word (kept consistent with `Eq`).
            fn cmp(&self, other: &$name) -> std::cmp::Ordering {
                let other_word = |v: &$name| matches!(v, $name::Other(_));
                self.as_str()
                    .cmp(other.as_str())
                    .then_with(|| other_word(self).cmp(&other_word(other)))
            }
        }

        impl FromStr for $name {
            type Err = Infallible;
            fn from_str(s: &str) -> Result<$name, Infallible> {
                Ok($name::parse(s))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> $name {
                $name::parse(s)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> $name {
                $name::parse(&s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }
    };
}

words! {
    /// An effect's state in the ledger (docs/contract.md, "States").
    EffectState {
        /// Reserved, nothing sent.
        Claimed => "claimed",
        /// Durably recorded before the request left.
        Submitted => "submitted",
        /// Happened (sent and answered, or so settled): never sent again.
        Done => "done",
        /// Lost mid-effect: never retried until a resolver settles it.
        Unknown => "unknown",
        /// Denied, or resolved "never retry": never sent.
        Cancelled => "cancelled",
    }
}

impl EffectState {
    /// Open: sent or maybe sent, not settled (a resolver may settle it).
    pub fn is_open(&self) -> bool {
        matches!(self, EffectState::Submitted | EffectState::Unknown)
    }
}

words! {
    /// An approval's state.
    ApprovalState {
        /// Requested, waiting for a person's decision.
        Pending => "pending",
        /// Approved, not yet used: the next send may go.
        Approved => "approved",
        /// Denied: the effect is cancelled.
        Denied => "denied",
        /// Approved and used by the send it allowed.
        Consumed => "consumed",
    }
}

/// Why a firing was fired: its schedule (on time, or caught up late), a person (`trigger`),
/// or a backfill of past slots. Written to the firing's row; only this build writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FiringKind {
    /// The schedule's slot, on time.
    Scheduled,
    /// The schedule's slot, fired late within the catch-up window.
    Catchup,
    /// `exactly trigger` ("run now").
    Manual,
    /// `exactly backfill`: a past slot fired on purpose.
    Backfill,
}

impl FiringKind {
    /// The kind's word, as the firing's row and the log say it.
    pub fn as_str(self) -> &'static str {
        match self {
            FiringKind::Scheduled => "scheduled",
            FiringKind::Catchup => "catchup",
            FiringKind::Manual => "manual",
            FiringKind::Backfill => "backfill",
        }
    }
}

impl fmt::Display for FiringKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

words! {
    /// A firing's state (one row per job and scheduled instant).
    FiringState {
        /// Waiting for the live run to end (overlap policy `queue`).
        Queued => "queued",
        /// Its run is under way.
        Running => "running",
        /// Its run ended.
        Ran => "ran",
        /// Its run ended badly and it will run again (at most three runs a firing).
        Retry => "retry",
        /// It used up its runs without finishing: never run again.
        GaveUp => "gave_up",
        /// Never run: overlap policy `fail` met a live run, it came too late, or it never started.
        Missed => "missed",
        /// Dropped because a run was live (overlap policy `coalesce`).
        Coalesced => "coalesced",
        /// Dropped because the queue was full (overlap policy `queue`).
        Saturated => "saturated",
        /// Not run: the job was paused.
        Skipped => "skipped",
        /// Its run died and it was too old to resume: given up.
        Interrupted => "interrupted",
        /// Its run stopped at an effect waiting for approval: `exactly approve` fires it again
        /// at once (state `retry`, no backoff), `exactly deny` ends it `denied`.
        AwaitingApproval => "awaiting_approval",
        /// The approval its run waited for was denied: never run again.
        Denied => "denied",
    }
}

impl FiringState {
    /// A firing that never ran: a backfill may run it.
    pub fn never_ran(&self) -> bool {
        matches!(
            self,
            FiringState::Missed
                | FiringState::Coalesced
                | FiringState::Saturated
                | FiringState::Skipped
        )
    }
}

words! {
    /// How a run ended.
    RunOutcome {
        /// Its command exited 0: its work is done.
        Ok => "ok",
        /// Its command exited non-zero, died of a signal, or could not start.
        Failed => "failed",
        /// Killed at shutdown after the grace period.
        Killed => "killed",
        /// Stopped because it ran past its job's `timeout`.
        Timeout => "timeout",
        /// Its lease renewal or release was refused: a newer token holds the job.
        Fenced => "fenced",
        /// Not run because another run was live.
        Overlap => "overlap",
        /// Its command never started: its lease could not be confirmed in time (an overloaded
        /// or unreachable database). Its firing is recorded missed, with the reason.
        NotStarted => "not_started",
        /// Its command stopped at an effect that waits for a person's approval (`exactly
        /// effect --needs-approval` exited 4 while the job's approval is pending): not a
        /// failure. Its firing waits (`awaiting_approval`) until the approval is decided.
        AwaitingApproval => "awaiting_approval",
    }
}

words! {
    /// An event's kind (the counters and the dashboard's stream use these names).
    EventKind {
        /// An effect not sent again: the ledger already held its effect key.
        DuplicateSuppressed => "duplicate_suppressed",
        /// A write refused: a higher fencing token holds the job.
        FencedWrite => "fenced_write",
        /// An expired lease taken over from its holder.
        LeaseStolen => "lease_stolen",
        /// An effect asked a person for approval.
        ApprovalRequested => "approval_requested",
        /// A person approved an effect.
        ApprovalGranted => "approval_granted",
        /// A person denied an effect: it is cancelled.
        ApprovalDenied => "approval_denied",
        /// An approval used up by the send it allowed.
        ApprovalConsumed => "approval_consumed",
        /// A person settled an open effect.
        Resolved => "resolved",
        /// An observer's verdict recorded on an open effect.
        ObserverVerdict => "observer_verdict",
        /// An observer's verdict about a row version that has since moved: discarded.
        StaleVerdict => "stale_verdict",
        /// An effect sent and recorded `done`.
        EffectDone => "effect_done",
        /// An effect became `unknown`: sent, its answer lost.
        EffectUnknown => "effect_unknown",
        /// An effect's reservation released: nothing was sent.
        EffectReleased => "effect_released",
        /// A job paused, by a person or its failure policy.
        JobPaused => "job_paused",
        /// A paused job resumed.
        JobResumed => "job_resumed",
        /// A job no longer in its jobs file: it stops firing.
        JobRetired => "job_retired",
        /// A scheduler reloaded its jobs file (SIGHUP): the detail names the jobs added,
        /// removed and changed.
        JobsReloaded => "jobs_reloaded",
        /// A registration replaced another live scheduler's different definition of a job:
        /// the newest wins, the other stops firing it.
        DefinitionConflict => "definition_conflict",
        /// The same firing (job, scheduled instant) fired again: not run.
        FiringDuplicate => "firing_duplicate",
        /// A firing dropped because a run was live (overlap = coalesce).
        FiringCoalesced => "firing_coalesced",
        /// A firing dropped because the queue was full (overlap = queue).
        QueueSaturated => "queue_saturated",
        /// A real miss: overlap = fail with a live run, or no scheduler ran it within catch-up.
        FiringMissed => "firing_missed",
        /// A firing run again: its run died, or it failed and has runs left.
        FiringResumed => "firing_resumed",
        /// A firing skipped because its job is paused.
        FiringSkippedPaused => "firing_skipped_paused",
        /// A run whose lease renewal (or release) was refused: a newer token holds the job.
        RunFenced => "run_fenced",
        /// A run ended `failed`.
        RunFailed => "run_failed",
        /// A run killed at shutdown after the grace period.
        RunKilled => "run_killed",
        /// A run stopped because it ran past its job's `timeout`.
        RunTimeout => "run_timeout",
        /// A firing that used up its runs (three) without finishing: not run again.
        FiringGaveUp => "firing_gave_up",
        /// Two machines (boot id or pid namespace) go by one host name: their senders are
        /// judged by deadline, never by pid.
        HostClash => "host_clash",
        /// A notification (`[[notify]]`) delivered: its hook exited 0 or its webhook said 2xx.
        NotifySent => "notify_sent",
        /// A notification not delivered (tried again at the next evaluation) or lost (unknown).
        NotifyFailed => "notify_failed",
        /// A scheduler's watchdog process (which stops runs at their lease deadline) died or
        /// stopped and was replaced; the detail names the old and new pids and the runs re-armed.
        WatchdogRestarted => "watchdog_restarted",
        /// No scheduler of a jobs file was alive for a while (found by the next one to start):
        /// one per outage, its detail says from when to when and how long. The slots that fell
        /// due meanwhile are caught up within each job's catch-up window; the others are the
        /// outage's, never counted as `firing_missed`.
        SchedulerOutage => "scheduler_outage",
        /// A probe (`exactly probe`, the dashboard's `P`): a job's latest `done` effect attempted
        /// again on purpose, sending nothing; the detail says what the ledger did (`suppressed`,
        /// `dedupe broken`, or why there was no verdict).
        Probe => "probe",
        /// An attempt met an earlier attempt of its effect still `submitted` (in flight) and
        /// sent nothing (exit 5): the retry waited for the send to be settled first.
        RetryInFlight => "retry_in_flight",
        /// The PostgreSQL server's timeline changed since the database last recorded it: a
        /// standby was promoted (a failover). The detail says from which timeline to which,
        /// whether replication was synchronous, and what the guard did (fencing tokens raised,
        /// effects without a row checked before they are sent).
        Failover => "failover",
    }
}

/// Run outcomes that count as the job failing (not a deploy's kill, not a lost lease).
pub const FAILING_OUTCOMES: &[&str] = &["failed", "timeout"];

impl RunOutcome {
    /// Whether this outcome counts as the job failing ([`FAILING_OUTCOMES`]).
    pub fn is_failure(&self) -> bool {
        is_failure(self.as_str())
    }
}

/// Whether an outcome counts as the job failing.
pub fn is_failure(outcome: &str) -> bool {
    FAILING_OUTCOMES.contains(&outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_word_round_trips_and_unknown_words_are_kept() {
        for w in EffectState::KNOWN {
            let s = EffectState::parse(w);
            assert!(!matches!(s, EffectState::Other(_)), "{w}");
            assert_eq!(s.as_str(), *w);
        }
        for w in EventKind::KNOWN {
            assert_eq!(EventKind::parse(w).to_string(), *w);
        }
        for w in FiringState::KNOWN {
            assert_eq!(
                w.parse::<FiringState>().map(|s| s.to_string()),
                Ok(w.to_string())
            );
        }
        let odd = EffectState::parse("archived\u{1b}[2J");
        assert_eq!(odd, EffectState::Other("archived\u{1b}[2J".into()));
        assert_eq!(odd.as_str(), "archived\u{1b}[2J");
        assert_eq!(ApprovalState::parse(""), ApprovalState::default());
        assert_eq!(
            serde_json::to_string(&RunOutcome::parse("ok")).expect("json"),
            "\"ok\""
        );
        assert!(EffectState::Done == "done" && "unknown" == EffectState::Unknown);
    }

    #[test]
    fn words_sort_by_word_and_a_known_word_before_its_other_spelling() {
        let mut v = [
            RunOutcome::Timeout,
            RunOutcome::Other("ok".into()),
            RunOutcome::parse("zz"),
            RunOutcome::Ok,
            RunOutcome::AwaitingApproval,
            RunOutcome::Failed,
        ];
        v.sort();
        let words: Vec<&str> = v.iter().map(RunOutcome::as_str).collect();
        assert_eq!(
            words,
            ["awaiting_approval", "failed", "ok", "ok", "timeout", "zz"]
        );
        assert_eq!(v[2], RunOutcome::Ok);
        assert_eq!(v[3], RunOutcome::Other("ok".into()));
    }
}

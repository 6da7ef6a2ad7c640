//! Store facts in words: a firing's fate, an approval's decision, a resolution, who may still be
//! sending. The CLI, the dashboard and the scheduler's log print them; the store writes some into
//! events. Here, beside the types, because a type's own methods live in the crate that defines it.
use crate::{Decided, Fired, Resolution, Resolved, Sending};
use exactly_words::sanitize::inert;
use exactly_words::state::FiringKind;

impl Fired {
    /// How loud a firing's fate is in the scheduler's log: a miss is an error, a saturated
    /// queue a warning.
    pub fn level(&self) -> &'static str {
        match self {
            Fired::Missed { .. } => "ERROR",
            Fired::Saturated { .. } => "WARN",
            _ => "INFO",
        }
    }

    /// The firing's fate in one word, as JSON's `result` says it.
    pub fn verdict(&self) -> &'static str {
        match self {
            Fired::Started(_) => "started",
            Fired::Duplicate { .. } => "duplicate",
            Fired::Skipped { .. } => "skipped",
            Fired::Coalesced { .. } => "coalesced",
            Fired::Queued { .. } => "queued",
            Fired::Saturated { .. } => "saturated",
            Fired::Missed { .. } => "missed",
            Fired::Busy { .. } => "busy",
        }
    }

    /// What became of the `kind` firing at `slot`, in words: the scheduler's log line and the
    /// event a paused skip records.
    pub fn describe(&self, kind: FiringKind, slot: &str) -> String {
        match self {
            Fired::Started(s) => format!(
                "{kind} firing at {slot} started run {} (token {}){}",
                s.run_id,
                s.token,
                s.stolen_from
                    .as_ref()
                    .map(|(o, t)| format!(", lease taken over from {o} (token {t})"))
                    .unwrap_or_default()
            ),
            Fired::Duplicate { state, owner } => format!(
                "{kind} firing at {slot} is a duplicate (already {state} by {}): not run",
                owner.as_deref().unwrap_or("someone")
            ),
            Fired::Skipped { note, by } => format!(
                "{kind} firing at {slot} skipped: paused by {}{}",
                by.as_deref().unwrap_or("someone"),
                note.as_deref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            ),
            Fired::Coalesced {
                waiting: Some(w), ..
            } => format!("{kind} firing at {slot} coalesced: {w} goes first"),
            Fired::Coalesced { holder, token, .. } => {
                format!(
                    "{kind} firing at {slot} coalesced: a run is live ({holder}, token {token})"
                )
            }
            Fired::Queued {
                depth,
                cap,
                waiting: Some(w),
            } => format!("{kind} firing at {slot} queued behind {w} ({depth} of {cap})"),
            Fired::Queued { depth, cap, .. } => {
                format!("{kind} firing at {slot} queued behind a live run ({depth} of {cap})")
            }
            Fired::Saturated { cap } => {
                format!("{kind} firing at {slot} dropped: queue saturated ({cap} waiting)")
            }
            Fired::Missed {
                waiting: Some(w), ..
            } => format!("{kind} firing at {slot} MISSED: overlap = fail and {w} goes first"),
            Fired::Missed { holder, token, .. } => format!(
                "{kind} firing at {slot} MISSED: overlap = fail and a run is live \
                 ({holder}, token {token})"
            ),
            Fired::Busy { holder, until } => {
                let until = exactly_words::time::fmt(*until);
                format!("{kind} firing at {slot} not started: lease held by {holder} until {until}")
            }
        }
    }
}

// Each outcome is worded here once; the CLI and the dashboard add who acted (`by …`, `as …`).

impl Decided {
    /// The decision in words: `approved KEY` / `denied KEY`, or why nothing changed.
    pub fn describe(&self, key: &str, approve: bool) -> String {
        let k = inert(key);
        match self {
            Decided::Done => format!("{} {k}", if approve { "approved" } else { "denied" }),
            Decided::Already { state, by, at } => format!(
                "effect {k} was already {} by {} at {}",
                inert(state.as_str()),
                inert(by.as_deref().unwrap_or("someone")),
                at.map_or_else(|| "?".to_string(), exactly_words::time::fmt)
            ),
            Decided::NotFound => format!("no approval was requested for effect {k}"),
        }
    }
}

impl Sending {
    /// Who may still be sending, and until when: `attempt web-1:4242 may still be sending
    /// until 2026-…Z`, or `attempt web-1:4242 is still running on this host (lease until …)`.
    pub fn describe(&self) -> String {
        let who = inert(self.attempt.as_deref().unwrap_or("(unrecorded)"));
        let until = self.until.map(exactly_words::time::fmt);
        match (self.running, until) {
            (false, Some(u)) => format!("attempt {who} may still be sending until {u}"),
            (true, Some(u)) => {
                format!("attempt {who} is still running on this host (lease until {u})")
            }
            (_, None) => format!("attempt {who} is still running on this host"),
        }
    }
}

impl Resolved {
    /// The resolution in words: `resolved KEY: FROM → TO`, or why nothing changed.
    pub fn describe(&self, key: &str, how: Resolution) -> String {
        let k = inert(key);
        match self {
            Resolved::Done { from, .. } => format!(
                "resolved {k}: {} → {}",
                inert(from.as_str()),
                how.target_state()
            ),
            Resolved::InFlight(s) => format!(
                "effect {k} is in flight: {}; check the far side, then resolve with --force",
                s.describe()
            ),
            Resolved::NotOpen { state, by } => format!(
                "effect {k} is already {}{}; nothing to resolve",
                inert(state.as_str()),
                by.as_deref()
                    .map(|b| format!(" (resolved by {})", inert(b)))
                    .unwrap_or_default()
            ),
            Resolved::Fenced => {
                format!("effect {k}: a newer lease token holds its job; nothing to resolve")
            }
            Resolved::NotFound => format!("no effect {k} in the ledger"),
        }
    }
}

//! Approvals belong to the effect key, not the run: requested with the terms shown, decided by a
//! named operator, consumed exactly once in the transaction that moves the effect to `submitted`.
use crate::store::Store;
pub use crate::store::{Already, ApprovalRow, Decided, Resolution, Resolved, Sending, Settlement};
use exactly_words::sanitize::inert;
use exactly_words::{EffectKey, Result};

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
                inert(at.as_deref().unwrap_or("?"))
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
        let until = self.until.as_deref().map(inert);
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

/// The approval of an effect, if one was requested (the effect detail shows it).
pub fn get(store: &mut Store, key: &EffectKey) -> Result<Option<ApprovalRow>> {
    store.approval(key)
}

/// Approves a pending effect. Of two operators approving at once, one wins; the other gets
/// `Decided::Already` with who decided.
///
/// An approval names the effect and who decides; swapped, they no longer compile:
/// ```compile_fail
/// # fn f(
/// #     store: &mut exactly::Store,
/// #     key: &str,
/// # ) -> exactly::Result<exactly::approval::Decided> {
/// exactly::approval::approve(store, "alice", key, None) // expected `&EffectKey`
/// # }
/// ```
/// ```
/// # fn f(
/// #     store: &mut exactly::Store,
/// #     key: &str,
/// # ) -> exactly::Result<exactly::approval::Decided> {
/// exactly::approval::approve(store, &exactly::EffectKey::from(key), "alice", None)
/// # }
/// ```
pub fn approve(
    store: &mut Store,
    key: &EffectKey,
    by: &str,
    note: Option<&str>,
) -> Result<Decided> {
    let now = store.now_text();
    store.decide_approval(key, true, by, note, &now)
}

/// Denies a pending effect; it ends `cancelled` and is never sent.
pub fn deny(store: &mut Store, key: &EffectKey, by: &str, note: Option<&str>) -> Result<Decided> {
    let now = store.now_text();
    store.decide_approval(key, false, by, note, &now)
}

/// Settles an effect after checking the far side: happened → `done`, did not happen →
/// `claimed` (a retry may send), cancel → `cancelled`. A `submitted` effect whose sender may
/// still be sending (as an observer's verdict judges it: its process alive on this host, or
/// its lease live) is left alone, [`Resolved::InFlight`], unless `force`: releasing a live
/// sender lets a retry send it twice, and cancelling it records what the far side may get.
pub fn resolve(
    store: &mut Store,
    key: &EffectKey,
    how: Resolution,
    by: &str,
    note: Option<&str>,
    evidence: Option<&str>,
    force: bool,
) -> Result<Resolved> {
    let now = store.now();
    let settlement = Settlement {
        how,
        by,
        note,
        evidence,
        force,
    };
    // The process is looked at here, outside the store (as an attempt does before its
    // verdict); the store judges it with the lease in the resolution's own transaction.
    let row = store
        .effect(key)?
        .filter(|r| r.state == exactly_words::state::EffectState::Submitted);
    let attempt = row.as_ref().and_then(|r| r.attempt.clone());
    let sender = match &row {
        Some(r) => crate::effect::sender(r),
        None => exactly_words::sender::Sender::Unknown,
    };
    store.resolve_effect(key, &settlement, (attempt.as_deref(), sender), now)
}

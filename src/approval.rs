//! Approvals belong to the effect key, not the run: requested with the terms shown, decided by a
//! named operator, consumed exactly once in the transaction that moves the effect to `submitted`.
use crate::sanitize::inert;
pub use crate::store::{Already, ApprovalRow, Decided, Resolution, Resolved};
use crate::{Result, Store};

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

impl Resolved {
    /// The resolution in words: `resolved KEY: FROM → TO`, or why nothing changed.
    pub fn describe(&self, key: &str, how: Resolution) -> String {
        let k = inert(key);
        match self {
            Resolved::Done { from } => format!(
                "resolved {k}: {} → {}",
                inert(from.as_str()),
                how.target_state()
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
pub fn get(store: &mut Store, key: &str) -> Result<Option<ApprovalRow>> {
    store.approval(key)
}

/// Approves a pending effect. Of two operators approving at once, one wins; the other gets
/// `Decided::Already` with who decided.
pub fn approve(store: &mut Store, key: &str, by: &str, note: Option<&str>) -> Result<Decided> {
    store.decide_approval(key, true, by, note, &crate::time::now_text())
}

/// Denies a pending effect; it ends `cancelled` and is never sent.
pub fn deny(store: &mut Store, key: &str, by: &str, note: Option<&str>) -> Result<Decided> {
    store.decide_approval(key, false, by, note, &crate::time::now_text())
}

/// Settles an effect after checking the far side: happened → `done`, did not happen →
/// `claimed` (a retry may send), cancel → `cancelled`.
pub fn resolve(
    store: &mut Store,
    key: &str,
    how: Resolution,
    by: &str,
    note: Option<&str>,
    evidence: Option<&str>,
) -> Result<Resolved> {
    store.resolve_effect(key, how, by, note, evidence, crate::time::now())
}

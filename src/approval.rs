//! Approvals belong to the effect key, not the run: requested with the terms shown, decided by a
//! named operator, consumed exactly once in the transaction that moves the effect to `submitted`.
pub use crate::store::{Already, ApprovalRow, Decided, Resolution, Resolved};
use crate::{Result, Store};

/// The approval of an effect, if one was requested (the effect detail shows it).
pub fn get(store: &mut Store, key: &str) -> Result<Option<ApprovalRow>> {
    store.approval(key)
}

/// Approves a pending effect. Of two operators approving at once, one wins; the other gets
/// `Decided::Already` with who decided.
pub fn approve(store: &mut Store, key: &str, by: &str, note: Option<&str>) -> Result<Decided> {
    store.decide_approval(key, true, by, note)
}

/// Denies a pending effect; it ends `cancelled` and is never sent.
pub fn deny(store: &mut Store, key: &str, by: &str, note: Option<&str>) -> Result<Decided> {
    store.decide_approval(key, false, by, note)
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
    store.resolve_effect(key, how, by, note, evidence)
}

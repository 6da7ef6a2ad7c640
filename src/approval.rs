//! Approvals belong to the effect key, not the run: requested with the terms shown, decided by a
//! named operator, consumed exactly once in the transaction that moves the effect to `submitted`.
use crate::store::Store;
pub use crate::store::{Already, ApprovalRow, Decided, Resolution, Resolved, Sending, Settlement};
use exactly_words::{EffectKey, Result};

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

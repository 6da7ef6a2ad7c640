//! Asking the person at the agent's client to approve a held call (MCP elicitation), beside
//! `exactly approve`: an accept approves through the same call `exactly approve` makes (by
//! [`ACTOR`]), a decline denies; whichever decides first wins, the other finds it decided.
use crate::sanitize::inert;
use crate::EffectKey;
use rmcp::model::ServerRequest;
use rmcp::service::{Peer, RoleServer};
use serde_json::json;

/// Who decided, in the approval's row, when the person at the client answered.
pub(crate) const ACTOR: &str = "mcp-client";

/// What the person at the client said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Approve the call.
    Approve,
    /// Deny it.
    Deny,
}

/// Asks the client's person whether to approve `key`'s call, whose `terms` are shown inert.
/// `None`: they dismissed it, or the client could not ask (the call stays pending).
pub(crate) async fn ask(peer: &Peer<RoleServer>, key: &EffectKey, terms: &str) -> Option<Answer> {
    let message = format!(
        "Approve this call, once? {} (effect {}). Accept approves it; decline denies it.",
        inert(terms),
        inert(key.as_str())
    );
    let request: ServerRequest = serde_json::from_value(json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {}},
        },
    }))
    .ok()?;
    let answer = peer.send_request(request).await.ok()?;
    // The answer as JSON: whichever result type it was read as, its `action` says.
    let answer = serde_json::to_value(&answer).ok()?;
    let action = answer.get("action")?.clone();
    match action.as_str()? {
        "accept" => Some(Answer::Approve),
        "decline" => Some(Answer::Deny),
        _ => None,
    }
}

//! A guarded `tools/call` as an effect: `perform` calls the server (the effect key in `_meta`),
//! `observe` calls the rule's observer tool; the attempt's outcome becomes the agent's result.
use super::config::{fill, Observe};
use super::upstream::{CallError, Upstream};
use super::{META_KEY, META_OUTCOME};
use crate::effect::{Effect, Failure, Observation, Outcome};
use crate::sanitize::inert;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// One guarded call, performed from a blocking thread of the gateway's runtime.
pub(crate) struct ToolEffect {
    /// The runtime the server is reached on.
    pub rt: tokio::runtime::Handle,
    /// The server.
    pub upstream: Arc<Upstream>,
    /// The tool called.
    pub tool: String,
    /// Its arguments, as the agent gave them.
    pub args: Map<String, Value>,
    /// The agent's `_meta` (its progress token, to relay the server's progress to; its
    /// envelope), sent on with the call.
    pub meta: rmcp::model::RequestMetaObject,
    /// The longest the call may take.
    pub timeout: Duration,
    /// The observer, if the file names one.
    pub observe: Option<Observe>,
    /// The server's last answer, kept when it is not recorded as the effect's (an error).
    pub last: Option<CallToolResult>,
}

impl Effect for ToolEffect {
    fn perform(&mut self, effect_key: &str) -> Result<String, Failure> {
        let call = self.upstream.call_tool(
            &self.tool,
            self.args.clone(),
            Some(effect_key),
            &self.meta,
            self.timeout,
        );
        match self.rt.block_on(call) {
            // A tool error may have acted before it failed: not known to be done, not known
            // to be unsent. It is `unknown` until the observer (or a person) says.
            Ok(r) if r.is_error == Some(true) => {
                self.last = Some(r);
                Err(Failure::Lost("the tool answered with an error".into()))
            }
            Ok(r) => serde_json::to_string(&r)
                .map_err(|e| Failure::Lost(format!("its result is not JSON: {e}"))),
            Err(CallError::NotSent(why)) => Err(Failure::NotSent(why)),
            Err(CallError::Refused(e)) => Err(Failure::NotSent(format!(
                "the server refused the call: {}",
                e.message
            ))),
            Err(CallError::Lost(why)) => Err(Failure::Lost(why)),
        }
    }

    fn observe(&mut self, effect_key: &str) -> Observation {
        let Some(o) = self.observe.clone() else {
            return Observation::CantTell(format!(
                "tool {} has no observer in mcp.toml",
                inert(&self.tool)
            ));
        };
        let args = o.arguments_for(effect_key, &self.args);
        let found = fill(&o.found, effect_key, &self.args);
        let call = self
            .upstream
            .call_tool(&o.tool, args, None, &self.meta, self.timeout);
        match self.rt.block_on(call) {
            Ok(r) if r.is_error == Some(true) => Observation::CantTell(format!(
                "the observer {} answered with an error",
                inert(&o.tool)
            )),
            Ok(r) => {
                let text = serde_json::to_string(&r).unwrap_or_default();
                let seen = text.contains(&found)
                    || r.content
                        .iter()
                        .any(|c| c.as_text().is_some_and(|t| t.text.contains(&found)));
                if seen {
                    // Its own answer was lost with the attempt that sent it: what stands in for
                    // it is flagged an error, as a result with no structured content must be for
                    // a tool that declares an output schema.
                    let note = format!(
                        "exactly: this call already happened (its observer {} found it); it \
                         was not sent again, and its original answer was lost",
                        o.tool
                    );
                    Observation::Happened(Some(
                        serde_json::to_string(&CallToolResult::error(vec![ContentBlock::text(
                            note,
                        )]))
                        .unwrap_or_default(),
                    ))
                } else {
                    Observation::NotHappened
                }
            }
            Err(CallError::NotSent(w)) | Err(CallError::Lost(w)) => {
                Observation::CantTell(format!("the observer {} failed: {w}", inert(&o.tool)))
            }
            Err(CallError::Refused(e)) => Observation::CantTell(format!(
                "the observer {} was refused: {}",
                inert(&o.tool),
                e.message
            )),
        }
    }
}

/// The word `_meta["exactly/outcome"]` holds for an outcome.
pub(crate) fn outcome_word(out: &Outcome) -> &'static str {
    match out {
        Outcome::Done { .. } => "done",
        Outcome::DuplicateSuppressed { .. } => "duplicate_suppressed",
        Outcome::Fenced { .. } => "fenced",
        Outcome::AwaitingApproval { .. } => "awaiting_approval",
        Outcome::Unresolved { .. } => "in_flight",
        Outcome::Unknown { .. } => "unknown",
        Outcome::Cancelled { .. } => "cancelled",
        Outcome::NotSent { .. } => "not_sent",
        Outcome::Unrecorded { .. } => "unrecorded",
        Outcome::LeaseEnding { .. } => "lease_ending",
    }
}

/// What the agent is answered: the server's result for a call done now or earlier, else a tool
/// error that says in words what happened and what to do; `_meta` names the effect and outcome.
pub(crate) fn answer(out: &Outcome, last: Option<CallToolResult>) -> CallToolResult {
    let k = out.key().to_string();
    let error = |text: String| CallToolResult::error(vec![ContentBlock::text(text)]);
    let recorded = |resp: Option<&String>, fallback: &str| {
        resp.and_then(|r| serde_json::from_str::<CallToolResult>(r).ok())
            .unwrap_or_else(|| {
                let text = resp
                    .filter(|r| !r.is_empty())
                    .map_or(fallback, |r| r.as_str());
                CallToolResult::success(vec![ContentBlock::text(text.to_string())])
            })
    };
    let mut r = match out {
        Outcome::Done { response, .. } => recorded(Some(response), ""),
        Outcome::DuplicateSuppressed { response, .. } => recorded(
            response.as_ref(),
            "exactly: this call was already made; it was not sent again",
        ),
        Outcome::AwaitingApproval { .. } => error(format!(
            "exactly: this call awaits a person's approval (effect {k}); nothing was sent. \
             Tell your user: `exactly approve {k}` (or the dashboard, `exactly top`) lets it \
             go; call again with the same arguments once it is approved."
        )),
        Outcome::Unresolved { reason, .. } => error(format!(
            "exactly: not sent: an earlier attempt of this call (effect {k}) is still open: {}. \
             Call again later; do not change the arguments to get around it.",
            inert(reason)
        )),
        Outcome::Unknown { reason, .. } => {
            let note = format!(
                "exactly: whether this call took effect is unknown (effect {k}: {}). Calling \
                 again with the same arguments asks the server first and does not send it twice.",
                inert(reason)
            );
            match last {
                Some(mut l) => {
                    l.content.push(ContentBlock::text(note));
                    l
                }
                None => error(note),
            }
        }
        Outcome::Cancelled { .. } => error(format!(
            "exactly: this call was denied or cancelled (effect {k}); it will not be sent."
        )),
        Outcome::NotSent { reason, .. } => error(format!(
            "exactly: not sent ({}); calling again may send it (effect {k}).",
            inert(reason)
        )),
        Outcome::Fenced { .. } => error(format!(
            "exactly: this gateway's fencing token is no longer the lease's (another gateway \
             took the lease over, or the database failed over and raised every token); effect \
             {k} was not written. Restart the gateway."
        )),
        Outcome::LeaseEnding { .. } => error(format!(
            "exactly: not sent: the gateway's lease is ending (effect {k}); call again."
        )),
        Outcome::Unrecorded { ran, reason, .. } => error(format!(
            "exactly: the call ran ({}) but its result could not be recorded ({}); effect {k} \
             stays open until checked.",
            inert(ran),
            inert(reason)
        )),
    };
    let mut meta = r.meta.take().unwrap_or_default();
    meta.0
        .insert(META_OUTCOME.into(), Value::String(outcome_word(out).into()));
    meta.0.insert(META_KEY.into(), Value::String(k));
    r.meta = Some(meta);
    r
}

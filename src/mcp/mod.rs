//! `exactly mcp`: a gateway between an MCP client and the MCP server it starts (docs/mcp.md).
//! Everything passes through except `tools/call` of a guarded tool, which is an effect of the
//! gateway's job: its key from the tool, the target argument and the other arguments, as
//! `exactly key` makes it.
//!
//! Rooms: `config.rs` the gateway's file; this file which calls are guarded and the key of
//! one; `call.rs` a guarded call as an [`crate::effect::Effect`] and what the agent is answered;
//! `gateway.rs` the two MCP sides (rmcp) and the pass-through.
pub(crate) mod call;
pub(crate) mod config;
pub(crate) mod elicit;
pub(crate) mod gateway;
pub(crate) mod http;
pub(crate) mod upstream;

pub(crate) use config::{Config, ToolRule};
pub(crate) use gateway::{serve, Options};

use crate::effect::Spec;
use serde_json::{Map, Value};
use std::time::Duration;

/// The `_meta` key the server finds the effect key under.
pub(crate) const META_EFFECT_KEY: &str = "EXACTLY_EFFECT_KEY";
/// The `_meta` key of a guarded call's result that says how the gateway answered it.
pub(crate) const META_OUTCOME: &str = "exactly/outcome";
/// The `_meta` key of a guarded call's result that names its effect.
pub(crate) const META_KEY: &str = "exactly/effect_key";

/// What the server says of a tool in `tools/list`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Hints {
    /// `readOnlyHint`.
    pub read_only: Option<bool>,
    /// `destructiveHint`.
    pub destructive: Option<bool>,
}

/// How calls of one tool are handled.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Whether a call is an effect (else it passes through).
    pub guarded: bool,
    /// Whether a person approves each call first.
    pub needs_approval: bool,
    /// How long a call awaiting approval is held open.
    pub wait: Option<Duration>,
    /// The longest a call may take.
    pub call_lease: Duration,
    /// The file's rule, if any.
    pub rule: Option<ToolRule>,
}

/// How `tool` is handled, from the file and the server's hints: guarded unless `readOnlyHint`
/// is true or the file says `guard = false`; approved first where the file says so, else where
/// `destructiveHint` is true (the protocol's default for it is true, but a default nobody
/// states would hold every call of every server: only a stated hint counts).
pub(crate) fn plan(cfg: &Config, tool: &str, hints: Hints) -> Plan {
    let rule = cfg.rule(tool).cloned();
    let guarded = rule
        .as_ref()
        .and_then(|r| r.guard)
        .unwrap_or(hints.read_only != Some(true));
    let needs_approval = guarded
        && rule
            .as_ref()
            .and_then(|r| r.needs_approval)
            .unwrap_or(hints.destructive == Some(true));
    Plan {
        guarded,
        needs_approval,
        wait: rule.as_ref().and_then(|r| r.approval_wait().ok().flatten()),
        call_lease: rule
            .as_ref()
            .and_then(|r| r.call_lease().ok())
            .unwrap_or(config::CALL_DEFAULT),
        rule,
    }
}

/// The note a guarded tool's description gets in `tools/list`.
pub(crate) fn note(plan: &Plan) -> Option<String> {
    if !plan.guarded {
        return None;
    }
    let rule = plan.rule.as_ref();
    let mut parts = vec![
        "exactly-once through `exactly mcp`: a repeat with the same arguments \
                          returns the first result and is not sent again"
            .to_string(),
    ];
    if let Some(t) = rule.and_then(|r| r.target.as_deref()) {
        parts.push(format!("acts on `{t}`"));
    }
    if let Some(r) = rule.filter(|r| !r.ignore.is_empty()) {
        parts.push(format!("ignoring {}", r.ignore.join(", ")));
    }
    if plan.needs_approval {
        parts.push("each call waits for a person's approval".into());
    }
    Some(format!("[{}]", parts.join("; ")))
}

/// The effect a call is: action = the tool, target = the value at the rule's `target` path
/// (a string as it is, anything else as canonical JSON; without a `target`, the gateway's
/// name), inputs = the other arguments less `ignore`. The terms a person approving sees hold
/// every argument.
pub(crate) fn facts(
    tool: &str,
    plan: &Plan,
    args: &Map<String, Value>,
    gateway: &str,
) -> crate::Result<Spec> {
    let rule = plan.rule.as_ref();
    let mut inputs = args.clone();
    let target = match rule.and_then(|r| r.target.as_deref()) {
        Some(path) => {
            let v = config::lookup(args, path).ok_or_else(|| {
                crate::Error::Usage(format!(
                    "the call has no argument `{path}`, which names what {tool} acts on"
                ))
            })?;
            let t = match v {
                Value::String(s) => s.clone(),
                other => serde_jcs::to_string(other).unwrap_or_default(),
            };
            config::remove(&mut inputs, path);
            t
        }
        None => gateway.to_string(),
    };
    for i in rule.map(|r| r.ignore.as_slice()).unwrap_or_default() {
        config::remove(&mut inputs, i);
    }
    let terms = format!(
        "MCP tool {tool} on {target} with {}",
        Value::Object(args.clone())
    );
    let spec = Spec {
        action: tool.to_string(),
        target,
        inputs,
        terms: Some(terms),
        needs_approval: plan.needs_approval,
        // Recorded so `doctor` sees the observer; never run as a command (the gateway asks it).
        observe_cmd: rule
            .and_then(|r| r.observe.as_ref())
            .map(|o| crate::effect::observer_elsewhere(&format!("mcp:{}", o.tool))),
    };
    spec.checked_key()?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_is_the_one_exactly_key_makes() {
        let cfg = Config::parse(
            "[[tool]]\nname = \"send_email\"\ntarget = \"to\"\nignore = [\"request_id\"]\n",
        )
        .expect("config");
        let p = plan(&cfg, "send_email", Hints::default());
        assert!(p.guarded && !p.needs_approval);
        let args = json!({"to": "bob@x", "subject": "hi", "body": "b", "request_id": "r1"});
        let spec = facts("send_email", &p, args.as_object().expect("obj"), "gw").expect("spec");
        let mut inputs = Map::new();
        inputs.insert("subject".into(), json!("hi"));
        inputs.insert("body".into(), json!("b"));
        let want =
            crate::key::effect_key("send_email", "bob@x", &crate::key::input_digest(&inputs));
        assert_eq!(spec.key(), want);
        let other = json!({"to": "bob@x", "subject": "hi", "body": "b", "request_id": "r2"});
        let again = facts("send_email", &p, other.as_object().expect("obj"), "gw").expect("spec");
        assert_eq!(
            again.key(),
            want,
            "an ignored argument does not change the key"
        );
        let missing = json!({"subject": "hi"});
        assert!(facts("send_email", &p, missing.as_object().expect("obj"), "gw").is_err());
    }

    #[test]
    fn the_observer_tool_is_recorded_inert() -> Result<(), String> {
        let cfg = Config::parse(
            "[[tool]]\nname = \"send\"\nobserve = { tool = \"list;touch x\\n$(id)\", found = \"k\" }\n",
        )
        .map_err(|e| e.to_string())?;
        let p = plan(&cfg, "send", Hints::default());
        let spec = facts("send", &p, &Map::new(), "gw").map_err(|e| e.to_string())?;
        let text = spec.observe_cmd.ok_or("no observer recorded")?;
        assert!(text.contains("mcp:list_touch_x___id_"), "{text}");
        assert!(!crate::effect::observer_is_command(&text), "{text}");
        // A shell given it anyway (an older scheduler) runs `exit 3`: cannot tell.
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let st = std::process::Command::new("sh")
            .args(["-c", &text])
            .current_dir(dir.path())
            .status()
            .map_err(|e| e.to_string())?;
        assert_eq!(st.code(), Some(3));
        assert!(!dir.path().join("x").exists());
        let none = Config::parse("[[tool]]\nname = \"send\"\n").map_err(|e| e.to_string())?;
        let spec = facts(
            "send",
            &plan(&none, "send", Hints::default()),
            &Map::new(),
            "gw",
        )
        .map_err(|e| e.to_string())?;
        assert!(spec.observe_cmd.is_none());
        Ok(())
    }

    #[test]
    fn hints_and_file_decide_what_is_guarded() {
        let cfg = Config::parse("[[tool]]\nname = \"ping\"\nguard = false\n").expect("config");
        let ro = Hints {
            read_only: Some(true),
            destructive: None,
        };
        let rm = Hints {
            read_only: None,
            destructive: Some(true),
        };
        assert!(!plan(&cfg, "list", ro).guarded);
        assert!(plan(&cfg, "send", Hints::default()).guarded);
        assert!(!plan(&cfg, "ping", Hints::default()).guarded);
        assert!(plan(&cfg, "drop", rm).needs_approval);
        assert!(note(&plan(&cfg, "drop", rm)).is_some_and(|n| n.contains("approval")));
    }
}

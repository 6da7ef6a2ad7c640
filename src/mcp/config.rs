//! `mcp.toml`: which tools of the server a gateway guards and how (docs/mcp.md). Unknown keys
//! are an error, as in the jobs file.
use crate::{time, Error, Result};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// The gateway's file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Config {
    /// The gateway's lease (default 60s), renewed a third of the way through.
    #[serde(default)]
    pub lease: Option<String>,
    /// How long a gateway waits for the lease a live gateway of the same name holds (default
    /// 0s: it refuses at once).
    #[serde(default)]
    pub wait_for_lease: Option<String>,
    /// The server reads an `Idempotency-Key` HTTP header (`--url`): each guarded call sends
    /// its effect key as one, unless its tool says `idempotency_header = false`.
    #[serde(default)]
    pub idempotency_header: Option<bool>,
    /// One entry per tool that is not guarded the default way.
    #[serde(default)]
    pub tool: Vec<ToolRule>,
}

/// How one tool is guarded (`[[tool]]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolRule {
    /// The tool's name, as the server lists it.
    pub name: String,
    /// false: passed through as if read-only. Default: guarded unless `readOnlyHint: true`.
    pub guard: Option<bool>,
    /// The argument path (`to`, `order.id`) that names what the tool acts on.
    pub target: Option<String>,
    /// Arguments that do not change the consequence: left out of the key.
    #[serde(default)]
    pub ignore: Vec<String>,
    /// A person approves each call first. Default: the tool's `destructiveHint`.
    pub needs_approval: Option<bool>,
    /// How long a call awaiting approval is held open (e.g. "5m"); default: answered at once.
    pub wait_for_approval: Option<String>,
    /// The read-only tool that tells whether a call happened.
    pub observe: Option<Observe>,
    /// How long one call may take before its answer counts as lost (default 60s).
    pub lease: Option<String>,
    /// The server reads this tool's effect key as an `Idempotency-Key` header (`--url`).
    pub idempotency_header: Option<bool>,
}

/// `observe = { tool, arguments, found }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Observe {
    /// A read-only tool of the same server.
    pub tool: String,
    /// Its arguments; string values may hold `{key}` and `{ARG}` placeholders.
    #[serde(default)]
    pub arguments: BTreeMap<String, toml::Value>,
    /// A text that, placeholders filled in, appears in its result when the call happened.
    pub found: String,
}

/// Default gateway lease.
pub(crate) const LEASE_DEFAULT: Duration = Duration::from_secs(60);
/// Default longest call.
pub(crate) const CALL_DEFAULT: Duration = Duration::from_secs(60);

impl Config {
    /// Reads and checks `path`; every problem is one line.
    pub(crate) fn load(path: &str) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Usage(format!("cannot read {}: {e}", crate::sanitize::inert(path)))
        })?;
        Config::parse(&text)
            .map_err(|e| Error::Usage(format!("{}: {e}", crate::sanitize::inert(path))))
    }

    /// Parses and checks a file's text.
    pub(crate) fn parse(text: &str) -> Result<Config> {
        let c: Config = toml::from_str(text).map_err(|e| {
            Error::Usage(
                e.message()
                    .lines()
                    .next()
                    .unwrap_or("invalid TOML")
                    .to_string()
                    + &e.span()
                        .map(|s| format!(" (at byte {})", s.start))
                        .unwrap_or_default(),
            )
        })?;
        c.gateway_lease()?;
        c.lease_wait()?;
        let mut seen = std::collections::HashSet::new();
        for t in &c.tool {
            if t.name.is_empty() {
                return Err(Error::Usage("a [[tool]] has an empty name".into()));
            }
            if !seen.insert(t.name.as_str()) {
                return Err(Error::Usage(format!(
                    "tool {:?} is listed twice",
                    crate::sanitize::inert(&t.name)
                )));
            }
            if t.name.contains('|') {
                return Err(Error::Usage(format!(
                    "tool {:?}: a name with '|' cannot be an effect's action",
                    crate::sanitize::inert(&t.name)
                )));
            }
            if let Some(p) = &t.target {
                if p.is_empty() || p.split('.').any(str::is_empty) {
                    return Err(Error::Usage(format!(
                        "tool {:?}: target {:?} is not an argument path (e.g. \"to\", \"order.id\")",
                        crate::sanitize::inert(&t.name),
                        crate::sanitize::inert(p)
                    )));
                }
            }
            t.call_lease()?;
            t.approval_wait()?;
            if let Some(o) = &t.observe {
                if o.tool.is_empty() || o.found.is_empty() {
                    return Err(Error::Usage(format!(
                        "tool {:?}: observe needs a tool and a non-empty found",
                        crate::sanitize::inert(&t.name)
                    )));
                }
            }
        }
        Ok(c)
    }

    /// The rule for `tool`, if the file has one.
    pub(crate) fn rule(&self, tool: &str) -> Option<&ToolRule> {
        self.tool.iter().find(|t| t.name == tool)
    }

    /// The gateway's lease.
    pub(crate) fn gateway_lease(&self) -> Result<Duration> {
        let d = match &self.lease {
            Some(s) => time::parse_duration(s)?,
            None => LEASE_DEFAULT,
        };
        crate::lease::check_duration(d)?;
        Ok(d)
    }

    /// How long to wait for a lease another gateway holds.
    pub(crate) fn lease_wait(&self) -> Result<Duration> {
        match &self.wait_for_lease {
            Some(s) => time::parse_duration(s),
            None => Ok(Duration::ZERO),
        }
    }
}

impl ToolRule {
    /// The longest a call may take.
    pub(crate) fn call_lease(&self) -> Result<Duration> {
        match &self.lease {
            Some(s) => time::parse_duration(s),
            None => Ok(CALL_DEFAULT),
        }
    }

    /// How long a call awaiting approval is held open.
    pub(crate) fn approval_wait(&self) -> Result<Option<Duration>> {
        self.wait_for_approval
            .as_deref()
            .map(time::parse_duration)
            .transpose()
    }
}

impl Observe {
    /// The observer's arguments with `{key}` and `{ARG}` filled in from the call.
    pub(crate) fn arguments_for(&self, key: &str, args: &Map<String, Value>) -> Map<String, Value> {
        self.arguments
            .iter()
            .map(|(k, v)| (k.clone(), fill_value(toml_to_json(v), key, args)))
            .collect()
    }
}

fn toml_to_json(v: &toml::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn fill_value(v: Value, key: &str, args: &Map<String, Value>) -> Value {
    match v {
        Value::String(s) => Value::String(fill(&s, key, args)),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| fill_value(x, key, args)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, x)| (k, fill_value(x, key, args)))
                .collect(),
        ),
        other => other,
    }
}

/// `text` with `{key}` replaced by the effect key and `{ARG}` by the call's argument `ARG` (a
/// string as it is, anything else as JSON). A placeholder naming no argument is left as it is.
pub(crate) fn fill(text: &str, key: &str, args: &Map<String, Value>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let name = &after[..close];
        let value = if name == "key" {
            Some(key.to_string())
        } else {
            lookup(args, name).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        match value {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[open..open + close + 2]),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The value at the dotted `path` of `args`.
pub(crate) fn lookup<'a>(args: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut cur = args.get(parts.next()?)?;
    for p in parts {
        cur = cur.as_object()?.get(p)?;
    }
    Some(cur)
}

/// `args` without the value at the dotted `path`.
pub(crate) fn remove(args: &mut Map<String, Value>, path: &str) {
    match path.split_once('.') {
        None => {
            args.remove(path);
        }
        Some((head, tail)) => {
            if let Some(Value::Object(o)) = args.get_mut(head) {
                remove(o, tail);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fills_key_and_arguments() {
        let args = json!({"to": "bob@x", "n": 3, "o": {"id": "A1"}});
        let args = args.as_object().expect("object");
        assert_eq!(
            fill("sent|{to}|{n}|{o.id}|{key}|{nope}", "K", args),
            "sent|bob@x|3|A1|K|{nope}"
        );
        assert_eq!(fill("open { brace", "K", args), "open { brace");
    }

    #[test]
    fn bad_files_are_one_line_errors() {
        for (text, want) in [
            ("[[tool]]\nname = \"a\"\nguard = \"yes\"\n", "invalid type"),
            ("[[tool]]\nname = \"a\"\nsurprise = 1\n", "unknown field"),
            (
                "[[tool]]\nname = \"a\"\nlease = \"soon\"\n",
                "invalid duration",
            ),
            (
                "[[tool]]\nname = \"a\"\n[[tool]]\nname = \"a\"\n",
                "listed twice",
            ),
            (
                "[[tool]]\nname = \"a\"\ntarget = \"x..y\"\n",
                "argument path",
            ),
            ("lease = \"1ms\"\n", "lease"),
        ] {
            let e = Config::parse(text).expect_err(text).to_string();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let ok = Config::parse(
            "[[tool]]\nname = \"send\"\ntarget = \"to\"\nignore = [\"ts\"]\n\
             wait_for_approval = \"5m\"\n\
             observe = { tool = \"list\", arguments = { q = \"{to}\" }, found = \"x\" }\n",
        )
        .expect("parses");
        assert_eq!(
            ok.rule("send").and_then(|r| r.target.as_deref()),
            Some("to")
        );
    }
}

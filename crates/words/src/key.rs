//! Effect identity (contract): the key comes from the fact acted on, not the run.
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of the inputs as RFC 8785 canonical JSON.
pub fn input_digest(inputs: &Map<String, Value>) -> String {
    // serde_jcs only fails on non-finite floats, which serde_json::Value cannot hold.
    let canonical = serde_jcs::to_string(inputs).unwrap_or_else(|_| "{}".to_string());
    hex(&Sha256::digest(canonical.as_bytes()))
}

/// First 32 hex chars of SHA-256 of `action_id|target_id|input_digest`.
pub fn effect_key(action_id: &str, target_id: &str, input_digest: &str) -> crate::EffectKey {
    let raw = format!("{action_id}|{target_id}|{input_digest}");
    let mut key = hex(&Sha256::digest(raw.as_bytes()));
    key.truncate(32);
    key.into()
}

/// What an input's value was found to be at the attempt that recorded it ([`input_fields`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldMark {
    /// A plain value: nothing ties it to the attempt.
    Fact,
    /// It holds the run's id: every run makes a new one.
    Run,
    /// A time within [`NEAR_ATTEMPT`] of the attempt (and not the firing's slot).
    Time,
    /// The firing's slot (`EXACTLY_SCHEDULED_AT`): a fact of the firing, the same on a retry.
    Slot,
}

impl FieldMark {
    /// The prefix it gets in `input_fields` (none for a plain value).
    fn prefix(self) -> &'static str {
        match self {
            FieldMark::Fact => "",
            FieldMark::Run => "run:",
            FieldMark::Time => "time:",
            FieldMark::Slot => "slot:",
        }
    }
}

/// How near the attempt a time in an input must be to count as taken from the attempt's clock.
pub const NEAR_ATTEMPT: std::time::Duration = std::time::Duration::from_secs(600);

/// Each input's name with a short digest of its value, as JSON (`{"amount":"3f2a…",
/// "at":"time:9c1d…"}`), for `exactly doctor`'s "keys from facts" rule: two effects on one
/// target whose inputs differ only in fields marked `run:` or `time:` were keyed by the attempt,
/// not the facts. A digest is the first 16 hex chars of SHA-256 of `action|target|name|value`
/// (the value as canonical JSON), comparable only within one action and target; values are
/// never stored. A value is marked `run:` when it holds `run_id`, `slot:` when it is `slot`, and
/// `time:` when it reads as a time within [`NEAR_ATTEMPT`] of `now`.
pub fn input_fields(
    action_id: &str,
    target_id: &str,
    inputs: &Map<String, Value>,
    run_id: &str,
    slot: Option<&str>,
    now: crate::time::Ts,
) -> String {
    let mut out = Map::new();
    for (name, value) in inputs {
        let canonical = serde_jcs::to_string(value).unwrap_or_default();
        let raw = format!("{action_id}|{target_id}|{name}|{canonical}");
        let mut d = hex(&Sha256::digest(raw.as_bytes()));
        d.truncate(16);
        let mark = field_mark(value, run_id, slot, now);
        out.insert(name.clone(), Value::String(format!("{}{d}", mark.prefix())));
    }
    Value::Object(out).to_string()
}

/// What `value` is to the attempt (see [`input_fields`]).
pub fn field_mark(
    value: &Value,
    run_id: &str,
    slot: Option<&str>,
    now: crate::time::Ts,
) -> FieldMark {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return FieldMark::Fact,
    };
    let text = text.trim();
    if run_id.len() >= 4 && text.contains(run_id) {
        return FieldMark::Run;
    }
    if slot.is_some_and(|s| !s.is_empty() && text == s) {
        return FieldMark::Slot;
    }
    let near = chrono::Duration::from_std(NEAR_ATTEMPT).unwrap_or_default();
    match time_in(text) {
        Some(t) if (t - now).abs() <= near => {
            if slot.and_then(crate::time::parse).is_some_and(|s| s == t) {
                FieldMark::Slot
            } else {
                FieldMark::Time
            }
        }
        _ => FieldMark::Fact,
    }
}

/// A time written as RFC 3339 or as Unix seconds or milliseconds (a plausible range only).
fn time_in(text: &str) -> Option<crate::time::Ts> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&chrono::Utc));
    }
    let n: f64 = text.parse().ok()?;
    // 2001-09-09 .. 2286-11-20 in seconds, the same span in milliseconds.
    let secs = if (1e9..1e10).contains(&n) {
        n
    } else if (1e12..1e13).contains(&n) {
        n / 1000.0
    } else {
        return None;
    };
    chrono::DateTime::from_timestamp(secs as i64, 0)
}

fn hex(bytes: &[u8]) -> String {
    // By table: a `format!` per byte was a visible share of an effect's CPU.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Refuses inputs whose joined string could be read two ways (docs/contract.md, "Effect key"): the
/// action must be non-empty and `|`-free, the target non-empty, every input key non-empty. Then
/// `action|target|digest` is unambiguous, the digest having a fixed width.
pub fn check(action_id: &str, target_id: &str, inputs: &Map<String, Value>) -> crate::Result<()> {
    let bad = |why: String| Err(crate::Error::Usage(why));
    if action_id.is_empty() {
        return bad("the action is empty; name what the effect does".into());
    }
    if action_id.contains('|') {
        return bad(format!(
            "the action {:?} contains '|', which would make effect keys ambiguous",
            crate::sanitize::inert(action_id)
        ));
    }
    if target_id.is_empty() {
        return bad("the target is empty; name what the effect acts on".into());
    }
    if inputs.keys().any(|k| k.is_empty()) {
        return bad("an input has an empty key".into());
    }
    Ok(())
}

/// Parses `k=v` pairs (string values) into an inputs object. A key given twice is refused:
/// which value was meant cannot be told.
pub fn parse_inputs(pairs: &[String]) -> crate::Result<Map<String, Value>> {
    let mut map = Map::new();
    for p in pairs {
        let Some((k, v)) = p.split_once('=') else {
            return Err(crate::Error::Usage(format!(
                "--input expects k=v, got {:?}",
                crate::sanitize::inert(p)
            )));
        };
        if k.is_empty() {
            return Err(crate::Error::Usage(format!(
                "--input {:?} has an empty key",
                crate::sanitize::inert(p)
            )));
        }
        if map
            .insert(k.to_string(), Value::String(v.to_string()))
            .is_some()
        {
            return Err(crate::Error::Usage(format!(
                "--input {:?} is given twice",
                crate::sanitize::inert(k)
            )));
        }
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_is_canonical() {
        let a: Map<String, Value> = serde_json::from_str(r#"{"b":"2","a":"1"}"#).unwrap();
        let b: Map<String, Value> = serde_json::from_str(r#"{"a":"1","b":"2"}"#).unwrap();
        assert_eq!(input_digest(&a), input_digest(&b));
        // sha256('{"a":"1","b":"2"}')
        assert_eq!(
            input_digest(&a),
            hex(&Sha256::digest(br#"{"a":"1","b":"2"}"#))
        );
        let k = effect_key("send", "bob", &input_digest(&a));
        assert_eq!(k.len(), 32);
    }

    /// A value is marked by what it was to the attempt: the run's id, the slot, a time near
    /// now; anything else (a month, an amount, a time long past) is a fact. Values are never
    /// in the record, and a digest is the same for the same action, target, name and value.
    #[test]
    fn input_fields_mark_the_attempts_values_and_keep_no_value() {
        use serde_json::json;
        let now = crate::time::parse("2026-12-06T03:00:00.000Z").expect("time");
        let slot = "2026-12-06T03:00:00.000Z";
        let mark = |v: Value| field_mark(&v, "run-42-abc", Some(slot), now);
        assert_eq!(mark(json!("2026-11")), FieldMark::Fact);
        assert_eq!(mark(json!("120.00")), FieldMark::Fact);
        assert_eq!(mark(json!("order for run-42-abc")), FieldMark::Run);
        assert_eq!(mark(json!(slot)), FieldMark::Slot);
        assert_eq!(mark(json!("2026-12-06T03:00:00Z")), FieldMark::Slot);
        assert_eq!(mark(json!("2026-12-06T03:04:10Z")), FieldMark::Time);
        assert_eq!(mark(json!(1_796_526_250)), FieldMark::Time);
        assert_eq!(mark(json!("1796526250123")), FieldMark::Time);
        assert_eq!(mark(json!("2026-12-01T03:00:00Z")), FieldMark::Fact);
        let mut inputs = Map::new();
        inputs.insert("amount".into(), json!("120.00"));
        inputs.insert("at".into(), json!("2026-12-06T03:01:00Z"));
        let f = input_fields("send", "bob", &inputs, "run-42-abc", Some(slot), now);
        assert!(!f.contains("120.00"), "{f}");
        let v: Value = serde_json::from_str(&f).expect("json");
        assert_eq!(v["amount"].as_str().map(str::len), Some(16), "{f}");
        assert!(
            v["at"].as_str().is_some_and(|s| s.starts_with("time:")),
            "{f}"
        );
        assert_eq!(f, input_fields("send", "bob", &inputs, "other", None, now));
        let other = input_fields("send", "carol", &inputs, "x", None, now);
        assert_ne!(
            v["amount"],
            serde_json::from_str::<Value>(&other).expect("json")["amount"]
        );
    }
}

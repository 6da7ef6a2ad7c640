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
}

//! What every `--json` output shares: `schema_version` (the database schema this exactly
//! writes; in `status --json` the one read), `json_schema_version` (the shape's version, up only
//! when a key is removed or changes meaning) and one naming scheme — `job_key`, `effect_key`,
//! `fencing_token`, seconds as `*_s`, milliseconds as `*_ms`, instants as `*_at`. A key named
//! otherwise before the scheme keeps its name, with the scheme's name beside it ([`ALIASES`]):
//! scripts that read the old one go on working.
use serde_json::{Map, Value};

/// Old key → the scheme's name for it, added beside it.
pub const ALIASES: &[(&str, &str)] = &[
    ("job", "job_key"),
    ("token", "fencing_token"),
    ("slot", "scheduled_at"),
    ("since", "since_at"),
    ("lease_until", "lease_expires_at"),
    ("until", "lease_expires_at"),
    ("from", "from_at"),
    ("to", "to_at"),
    ("horizon", "horizon_at"),
];

/// Adds the scheme's names beside the old keys of one object (not below it: maps keyed by a
/// job's name must not gain keys).
pub fn alias(v: &mut Value) {
    let Some(o) = v.as_object_mut() else { return };
    for (old, new) in ALIASES {
        if let (Some(x), false) = (o.get(*old).cloned(), o.contains_key(*new)) {
            o.insert((*new).to_string(), x);
        }
    }
}

/// [`alias`] on each object of the array at `key`.
pub fn alias_each(v: &mut Value, key: &str) {
    if let Some(items) = v.get_mut(key).and_then(Value::as_array_mut) {
        items.iter_mut().for_each(alias);
    }
}

/// The version of the `--json` outputs' shape: it goes up only when a key is removed or changes
/// meaning (keys are otherwise only added). `schema_version` is the database's.
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// Adds `schema_version` and `json_schema_version` to an output that has none.
pub fn versioned(v: &mut Value) {
    if let Some(o) = v.as_object_mut() {
        let mut head = Map::new();
        head.insert("schema_version".into(), crate::store::SCHEMA_VERSION.into());
        head.insert("json_schema_version".into(), JSON_SCHEMA_VERSION.into());
        for (k, x) in head {
            o.entry(k).or_insert(x);
        }
    }
}

/// The output as printed: versioned, pretty, every character visible.
pub fn render(mut v: Value) -> String {
    versioned(&mut v);
    exactly_words::sanitize::json_visible(serde_json::to_string_pretty(&v).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_names_stay_and_the_schemes_are_added() {
        let mut v =
            serde_json::json!({"job": "a", "slot": "t", "job_key": "kept", "dst": {"to": 1}});
        alias(&mut v);
        assert_eq!(v["job"], "a");
        assert_eq!(v["job_key"], "kept");
        assert_eq!(v["scheduled_at"], "t");
        assert!(v["dst"].get("to_at").is_none());
        let out: Value = serde_json::from_str(&render(v)).expect("json");
        assert_eq!(out["schema_version"], crate::store::SCHEMA_VERSION);
    }
}

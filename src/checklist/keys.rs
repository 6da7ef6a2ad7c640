//! Rule 3, keys from facts: targets done twice within one run or interval whose inputs differ
//! only in values taken from the attempt (`key::input_fields`' marks).
use super::rules::{plural, r, Ctx};
use super::{Rule, RuleResult};
use crate::store::{ActionFacts, DoneRow};
use exactly_words::key::FieldMark;
use std::collections::BTreeMap;

use super::Verdict::{Fail, Ok, Warn};

impl Ctx<'_> {
    /// 3. Keys from the facts, not the run.
    pub(super) fn key_from_facts(
        &self,
        jobs: &[&str],
        actions: &[&ActionFacts],
        interval_s: Option<i64>,
    ) -> RuleResult {
        let rule = Rule::KeyFromFacts;
        let names: Vec<&str> = actions
            .iter()
            .map(|a| a.action_id.as_deref().unwrap_or(""))
            .collect();
        let rows: u64 = actions.iter().map(|a| a.rows).sum();
        if rows == 0 {
            return r(rule, Ok, "no effects recorded".into(), "nothing to do");
        }
        let (keyed_by_run, found) = self.run_keyed_repeats(jobs, &names, interval_s);
        if let Some(first) = keyed_by_run {
            let more = if found > 1 {
                format!(" (+{} more)", found - 1)
            } else {
                String::new()
            };
            return r(
                rule,
                Fail,
                format!("keyed by the run: {first}{more}"),
                "key by the facts: drop the attempt's values from the inputs, or use \
                 EXACTLY_SCHEDULED_AT (the firing's slot)",
            );
        }
        let run_marked: u64 = actions.iter().map(|a| a.run_marked).sum();
        if run_marked > 0 {
            return r(
                rule,
                Warn,
                format!(
                    "{} hold the run's id in their inputs",
                    plural(run_marked, "effect")
                ),
                "a retry in a new run gets a new key: take the run id out of the inputs",
            );
        }
        let with_fields: u64 = actions.iter().map(|a| a.with_fields).sum();
        if with_fields == 0 {
            return r(
                rule,
                Warn,
                format!(
                    "{} without per-field inputs recorded (written before schema 9 or by \
                     other SQL): cannot judge",
                    plural(rows, "effect")
                ),
                "write effects through exactly (CLI, library, Python) so inputs are recorded",
            );
        }
        r(
            rule,
            Ok,
            format!(
                "{}: no target done twice in a run or interval with attempt-made inputs",
                plural(rows, "effect")
            ),
            "nothing to do",
        )
    }
    /// The first pair of one target done twice within one run (token) or one interval whose
    /// inputs differ only in attempt-made values, in words, and how many such pairs there are.
    fn run_keyed_repeats(
        &self,
        jobs: &[&str],
        names: &[&str],
        interval_s: Option<i64>,
    ) -> (Option<String>, u64) {
        // Targets done twice within one run (token) or one interval, differing only in
        // attempt-made values.
        let mut groups: BTreeMap<(&str, &str), Vec<&DoneRow>> = BTreeMap::new();
        for d in self
            .repeats
            .iter()
            .filter(|d| jobs.contains(&d.job_key.as_str()))
            .filter(|d| names.contains(&d.action_id.as_str()))
        {
            groups
                .entry((d.action_id.as_str(), d.target_id.as_str()))
                .or_default()
                .push(d);
        }
        let iv = interval_s.filter(|i| *i > 0).map(chrono::Duration::seconds);
        let mut keyed_by_run: Option<String> = None;
        let mut found = 0u64;
        for ((action, target), rows) in &groups {
            for pair in rows.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                let same_run = a.fencing_token.is_some() && a.fencing_token == b.fencing_token;
                let close = iv.is_some_and(|iv| (b.created_at - a.created_at).abs() < iv);
                if !same_run && !close {
                    continue;
                }
                let (Some(fa), Some(fb)) = (fields(&a.input_fields), fields(&b.input_fields))
                else {
                    continue;
                };
                let differ = differing(&fa, &fb);
                if !differ.is_empty()
                    && differ
                        .iter()
                        .all(|(_, m)| matches!(m, FieldMark::Run | FieldMark::Time))
                {
                    found += 1;
                    if keyed_by_run.is_none() {
                        let what = differ
                            .iter()
                            .map(|(n, m)| {
                                let kind = if *m == FieldMark::Run {
                                    "the run's id"
                                } else {
                                    "a time near the attempt"
                                };
                                format!("`{n}` ({kind})")
                            })
                            .collect::<Vec<_>>()
                            .join(", ");
                        let when = if same_run { "one run" } else { "one interval" };
                        keyed_by_run = Some(format!(
                            "{action} on {target}: done twice within {when}, inputs differ \
                             only in {what}"
                        ));
                    }
                }
            }
        }
        (keyed_by_run, found)
    }
}

/// An `input_fields` value read: each name with its digest and mark.
fn fields(raw: &Option<String>) -> Option<BTreeMap<String, (String, FieldMark)>> {
    let v: serde_json::Value = serde_json::from_str(raw.as_deref()?).ok()?;
    let mut out = BTreeMap::new();
    for (k, v) in v.as_object()? {
        let s = v.as_str()?;
        let (mark, d) = match s.split_once(':') {
            Some(("run", d)) => (FieldMark::Run, d),
            Some(("time", d)) => (FieldMark::Time, d),
            Some(("slot", d)) => (FieldMark::Slot, d),
            _ => (FieldMark::Fact, s),
        };
        out.insert(k.clone(), (d.to_string(), mark));
    }
    Some(out)
}

/// The names whose digests differ between two rows (or that one lacks), each with the mark
/// that makes it attempt-made if either row has one.
fn differing(
    a: &BTreeMap<String, (String, FieldMark)>,
    b: &BTreeMap<String, (String, FieldMark)>,
) -> Vec<(String, FieldMark)> {
    let mut out = Vec::new();
    for name in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
        let (x, y) = (a.get(name), b.get(name));
        if x.map(|v| &v.0) == y.map(|v| &v.0) {
            continue;
        }
        let marks = [x.map(|v| v.1), y.map(|v| v.1)];
        let mark = marks
            .into_iter()
            .flatten()
            .find(|m| matches!(m, FieldMark::Run | FieldMark::Time))
            .unwrap_or(FieldMark::Fact);
        out.push((name.clone(), mark));
    }
    out
}

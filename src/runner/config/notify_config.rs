//! The jobs file's `[[notify]]` tables: who is told (a hook command, a webhook) and of what
//! (the rules). Parsed beside `[[job]]` by `config::parse`; every mistake is a [`Problem`].
use super::problem::Problem;
use std::time::Duration;

pub(crate) const NOTIFY_KEYS: &[&str] = &[
    "name",
    "hook",
    "webhook",
    "unknown_older_than",
    "approval_pending_longer_than",
    "failing_runs",
    "late_by",
    "scheduler_gone",
    "recovery",
];

/// One valid `[[notify]]` table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Notify {
    pub name: String,
    /// Run with the notification as JSON on stdin.
    pub hook: Option<Vec<String>>,
    /// POSTed the notification as JSON (`text` for chat webhooks, and the structured fields).
    pub webhook: Option<String>,
    pub unknown_older_than: Option<Duration>,
    pub approval_pending_longer_than: Option<Duration>,
    pub failing_runs: Option<u32>,
    pub late_by: Option<Duration>,
    pub scheduler_gone: bool,
    /// Also say when each episode ends.
    pub recovery: bool,
}

impl Notify {
    /// The lease its notifiers share, and the job its notifications are recorded under.
    pub(crate) fn lease_job(&self) -> crate::JobName {
        format!("exactly-notify:{}", self.name).into()
    }
}

/// Parses the `notify` value of a jobs file (absent: none).
pub(crate) fn parse(value: Option<&toml::Value>, problems: &mut Vec<Problem>) -> Vec<Notify> {
    let tables = match value {
        None => return Vec::new(),
        Some(toml::Value::Array(a)) => a,
        Some(_) => {
            problems.push(Problem::error(
                "-",
                "notify is not an array of tables",
                "write each notifier as a [[notify]] table",
            ));
            return Vec::new();
        }
    };
    let mut out: Vec<Notify> = Vec::new();
    for (i, t) in tables.iter().enumerate() {
        let label = match t.get("name").and_then(toml::Value::as_str) {
            Some(n) if !n.trim().is_empty() => format!("notify {}", n.trim()),
            _ => format!("notify #{}", i + 1),
        };
        let Some(t) = t.as_table() else {
            problems.push(Problem::error(
                &label,
                "not a table",
                "write it as a [[notify]] table",
            ));
            continue;
        };
        if let Some(n) = one(&label, t, problems) {
            if out.iter().any(|o| o.name == n.name) {
                problems.push(Problem::error(
                    &label,
                    "name used twice",
                    "a notifier's name is its identity in the ledger",
                ));
            } else {
                out.push(n);
            }
        }
    }
    out
}

/// One `[[notify]]` table, or `None` with its problems pushed (in the order of its keys'
/// checks: unknown keys, name, hook, webhook, the rules).
fn one(label: &str, t: &toml::Table, problems: &mut Vec<Problem>) -> Option<Notify> {
    let before = problems.len();
    let mut bad = |what: String, why: &str| problems.push(Problem::error(label, what, why));
    for key in t.keys().filter(|k| !NOTIFY_KEYS.contains(&k.as_str())) {
        bad(
            format!("unknown key {key:?}"),
            &format!(
                "a typo must not be ignored (known keys: {})",
                NOTIFY_KEYS.join(", ")
            ),
        );
    }
    let name = name(t, &mut bad);
    let hook = hook(t, &mut bad);
    let webhook = text(t, "webhook", &mut bad).and_then(|w| match check_webhook(&w) {
        Ok(()) => Some(w),
        Err(why) => {
            bad("invalid webhook".into(), &why);
            None
        }
    });
    if hook.is_none() && webhook.is_none() && !t.contains_key("hook") && !t.contains_key("webhook")
    {
        bad(
            "no hook or webhook".into(),
            "give hook = [\"cmd\", …] or webhook = \"https://…\" (or both)",
        );
    }
    let unknown_older_than = duration(t, "unknown_older_than", &mut bad);
    let approval_pending_longer_than = duration(t, "approval_pending_longer_than", &mut bad);
    let late_by = duration(t, "late_by", &mut bad);
    let failing_runs = failing_runs(t, &mut bad);
    let scheduler_gone = flag(t, "scheduler_gone", &mut bad);
    let recovery = flag(t, "recovery", &mut bad);
    let rules = [
        unknown_older_than.is_some(),
        approval_pending_longer_than.is_some(),
        late_by.is_some(),
        failing_runs.is_some(),
        scheduler_gone,
    ];
    let rule_keys = [
        "unknown_older_than",
        "approval_pending_longer_than",
        "late_by",
        "failing_runs",
    ];
    if !rules.contains(&true) && !rule_keys.iter().any(|k| t.contains_key(*k)) {
        bad(
            "no rule".into(),
            "give at least one of unknown_older_than, approval_pending_longer_than, failing_runs, \
             late_by, scheduler_gone = true",
        );
    }
    if problems.len() > before {
        return None;
    }
    Some(Notify {
        name: name?,
        hook,
        webhook,
        unknown_older_than,
        approval_pending_longer_than,
        failing_runs,
        late_by,
        scheduler_gone,
        recovery,
    })
}

/// Where a table's checks say what is wrong: what, and why.
type Bad<'a> = dyn FnMut(String, &str) + 'a;

/// A string key's value (absent: `None`; another type is a problem).
fn text(t: &toml::Table, key: &str, bad: &mut Bad<'_>) -> Option<String> {
    match t.get(key) {
        None => None,
        Some(toml::Value::String(s)) => Some(s.clone()),
        Some(v) => {
            bad(
                format!("wrong type of value for {key}"),
                &format!("{key} = {v}: write a string"),
            );
            None
        }
    }
}

/// A duration key's value, at least 1s.
fn duration(t: &toml::Table, key: &str, bad: &mut Bad<'_>) -> Option<Duration> {
    let s = text(t, key, bad)?;
    match crate::time::parse_duration(&s) {
        Ok(d) if d >= Duration::from_secs(1) => Some(d),
        Ok(_) => {
            bad(
                format!("invalid {key}"),
                &format!("{key} = {s:?} is shorter than 1s"),
            );
            None
        }
        Err(e) => {
            bad(format!("invalid {key}"), &e.to_string());
            None
        }
    }
}

/// A boolean key's value (absent: false).
fn flag(t: &toml::Table, key: &str, bad: &mut Bad<'_>) -> bool {
    match t.get(key) {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(v) => {
            bad(
                format!("wrong type of value for {key}"),
                &format!("{key} = {v}: write true or false"),
            );
            false
        }
    }
}

/// The notifier's name, trimmed: required, and valid inside its lease's job name.
fn name(t: &toml::Table, bad: &mut Bad<'_>) -> Option<String> {
    let name = text(t, "name", bad).map(|n| n.trim().to_string());
    match name.as_deref() {
        None | Some("") => bad(
            "missing name".into(),
            "a notifier's name is its identity in the ledger",
        ),
        Some(n) => {
            if let Some(why) = crate::lease::job_name_problem(&format!("exactly-notify:{n}")) {
                bad("invalid name".into(), &why);
            }
        }
    }
    name
}

/// The hook's argv: an array of strings whose program is not blank.
fn hook(t: &toml::Table, bad: &mut Bad<'_>) -> Option<Vec<String>> {
    match t.get("hook") {
        None => None,
        Some(toml::Value::Array(a)) => {
            let argv: Option<Vec<String>> =
                a.iter().map(|v| v.as_str().map(str::to_string)).collect();
            match argv {
                Some(v) if v.first().is_some_and(|p| !p.trim().is_empty()) => Some(v),
                _ => {
                    bad(
                        "invalid hook".into(),
                        "give hook = [\"program\", \"arg\", …], strings only",
                    );
                    None
                }
            }
        }
        Some(v) => {
            bad(
                "wrong type of value for hook".into(),
                &format!("hook = {v}: write it as an array, e.g. hook = [\"notify-send\"]"),
            );
            None
        }
    }
}

/// `failing_runs`: a whole number from 1 to 1000.
fn failing_runs(t: &toml::Table, bad: &mut Bad<'_>) -> Option<u32> {
    match t.get("failing_runs") {
        None => None,
        Some(toml::Value::Integer(n)) if (1..=1000).contains(n) => Some(*n as u32),
        Some(v) => {
            bad(
                format!("invalid failing_runs {v}"),
                "failing_runs must be a whole number from 1 to 1000",
            );
            None
        }
    }
}

/// A webhook must be an absolute http(s) URL with a host (a query is fine: Discord's `?wait=`).
fn check_webhook(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("webhook = {url:?} is not an http:// or https:// URL"))?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "webhook = {url:?} holds spaces or control characters"
        ));
    }
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("webhook = {url:?} names no host"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> (Vec<Notify>, Vec<String>) {
        let doc: toml::Table = text.parse().expect("toml");
        let mut problems = Vec::new();
        let n = parse(doc.get("notify"), &mut problems);
        (n, problems.iter().map(|p| p.line("f")).collect())
    }

    #[test]
    fn a_notifier_parses_and_mistakes_are_problems() {
        let (n, p) = parsed(
            "[[notify]]\nname = \"ops\"\nwebhook = \"http://127.0.0.1:1/x\"\nfailing_runs = \
             3\nrecovery = true\n",
        );
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(n[0].failing_runs, Some(3));
        assert!(n[0].recovery);
        let (n, p) = parsed("[[notify]]\nname = \"ops\"\nwebhok = \"x\"\nlate_by = \"soon\"\n");
        assert!(n.is_empty());
        for want in [
            "unknown key \"webhok\"",
            "invalid late_by",
            "no hook or webhook",
        ] {
            assert!(p.iter().any(|l| l.contains(want)), "{want}: {p:?}");
        }
        let (_, p) = parsed("[[notify]]\nname = \"ops\"\nhook = [\"true\"]\n");
        assert!(p.iter().any(|l| l.contains("no rule")), "{p:?}");
        let (_, p) =
            parsed("[[notify]]\nname = \"ops\"\nwebhook = \"ftp://x\"\nscheduler_gone = true\n");
        assert!(p.iter().any(|l| l.contains("invalid webhook")), "{p:?}");
    }
}

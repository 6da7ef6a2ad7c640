//! The jobs file parsed: its `[[job]]` tables validated into [`Job`]s (`validate.rs`), its
//! `[[notify]]` tables (`notify_config.rs`), `retain`. Every mistake found on the way is a
//! [`Problem`] (`problem.rs`); errors make a job unusable and `exactly run` refuses the file.
use super::job::{Job, JOB_KEYS};
use super::notify_config::{self, Notify};
use super::positions::{self, Positions};
use super::problem::Problem;
use super::validate::{validate, RawJob};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// A parsed file: the valid jobs, and every problem found on the way.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub jobs: Vec<Job>,
    pub problems: Vec<Problem>,
    /// Where each key and job is in the file, and which table each valid job came from: for
    /// the lines of problems found later (`place`).
    pub positions: Positions,
    pub tables: BTreeMap<String, usize>,
    /// File-level `retain = "90d"`: `exactly run` prunes history older than this (off when
    /// absent), as `exactly gc --keep` does.
    pub retain: Option<Duration>,
    /// The `[[notify]]` tables (`notify_config.rs`): who is told of what.
    pub notify: Vec<Notify>,
}

impl Loaded {
    #[cfg(test)]
    pub(crate) fn has_errors(&self) -> bool {
        self.problems
            .iter()
            .any(|p| p.severity == super::problem::Severity::Error)
    }

    /// Gives problems found after parsing (the lint, the registry's) their lines.
    pub(crate) fn place(&self, problems: &mut [Problem]) {
        for p in problems.iter_mut() {
            match self.tables.get(&p.job) {
                Some(i) => self.positions.place_job(*i, p),
                None => self.positions.place_top(p),
            }
        }
    }
}

/// Parses the text of a jobs file. Never panics: malformed TOML is one problem.
pub(crate) fn parse(text: &str) -> Loaded {
    let mut out = Loaded {
        positions: Positions::read(text),
        ..Loaded::default()
    };
    let doc: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            out.problems.push(not_toml(text, &e));
            return out;
        }
    };
    top_level(&doc, &mut out);
    out.notify = notify_config::parse(doc.get("notify"), &mut out.problems);
    let tables = match doc.get("job") {
        None => {
            out.problems.push(Problem::error(
                "-",
                "no jobs",
                "the file has no [[job]] tables".to_string(),
            ));
            return out;
        }
        Some(toml::Value::Array(a)) => a.clone(),
        Some(_) => {
            out.problems.push(Problem::error(
                "-",
                "job is not an array of tables",
                "write each job as a [[job]] table".to_string(),
            ));
            return out;
        }
    };
    let mut seen: BTreeMap<String, (usize, String)> = BTreeMap::new();
    // Where each table's problems begin in the list, to give them the table's lines.
    let mut marks: Vec<(usize, usize)> = Vec::new();
    for (i, value) in tables.into_iter().enumerate() {
        marks.push((out.problems.len(), i));
        one_job(i, value, &mut seen, &mut out);
    }
    marks.push((out.problems.len(), usize::MAX));
    for w in marks.windows(2) {
        let ((start, i), (end, _)) = (w[0], w[1]);
        for p in &mut out.problems[start..end] {
            out.positions.place_job(i, p);
        }
    }
    for p in out.problems.iter_mut().filter(|p| p.job == "-") {
        out.positions.place_top(p);
    }
    out
}

/// Malformed TOML as one problem, at its line and column when the parser knows them.
fn not_toml(text: &str, e: &toml::de::Error) -> Problem {
    let place = e.span().map(|s| positions::line_col(text, s.start));
    let at = place
        .map(|(line, col)| format!(" at line {line}, column {col}"))
        .unwrap_or_default();
    let p = Problem::error(
        "-",
        format!("not valid TOML{at}"),
        e.message().trim().to_string(),
    );
    match place {
        Some((line, _)) => p.at_line(line),
        None => p,
    }
}

/// The file's own keys: `retain`, and any key that is not `retain`, `job` or `notify`.
fn top_level(doc: &toml::Table, out: &mut Loaded) {
    match doc.get("retain") {
        None => {}
        Some(toml::Value::String(r)) => match crate::time::parse_duration(r) {
            Ok(d) if d >= Duration::from_secs(86_400) => out.retain = Some(d),
            Ok(_) => out.problems.push(Problem::error(
                "-",
                format!("retain = {r:?} is shorter than 1d"),
                "the last 24 hours are what status and top show".to_string(),
            )),
            Err(e) => out.problems.push(Problem::error(
                "-",
                format!("retain = {r:?}"),
                e.to_string(),
            )),
        },
        Some(_) => out.problems.push(Problem::error(
            "-",
            "retain is not a duration",
            "write it as a string, e.g. retain = \"90d\"".to_string(),
        )),
    }
    for key in doc
        .keys()
        .filter(|k| !matches!(k.as_str(), "job" | "retain" | "notify"))
    {
        out.problems.push(Problem::error(
            "-",
            format!("unknown key {key:?}"),
            "a jobs file holds only retain, [[job]] and [[notify]] tables; \
             a typo must not be ignored"
                .to_string(),
        ));
    }
}

/// One `[[job]]` table (the `i`-th): its problems, and the job when it has none that stop
/// it. `seen` holds the names before it, to refuse a name used twice.
fn one_job(
    i: usize,
    value: toml::Value,
    seen: &mut BTreeMap<String, (usize, String)>,
    out: &mut Loaded,
) {
    let toml::Value::Table(mut table) = value else {
        out.problems.push(Problem::error(
            &format!("job #{}", i + 1),
            "not a table",
            "write each job as a [[job]] table".to_string(),
        ));
        return;
    };
    // The name as stored and compared (NFC, trimmed): `a` and `a ` are one job.
    let label = match table.get("name") {
        Some(toml::Value::String(s)) if !crate::jobs::normalize_name(s).is_empty() => {
            crate::jobs::normalize_name(s)
        }
        _ => format!("job #{}", i + 1),
    };
    let unknown: Vec<String> = table
        .keys()
        .filter(|k| !JOB_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    let wrong_type = wrong_types(&label, &mut table, &mut out.problems);
    for key in unknown {
        let hint = positions::closest(&key)
            .map(|k| format!("did you mean {k:?}? "))
            .unwrap_or_default();
        out.problems.push(Problem::error(
            &label,
            format!("unknown key {key:?}"),
            format!(
                "{hint}a typo must not be ignored (known keys: {})",
                JOB_KEYS.join(", ")
            ),
        ));
        table.remove(&key);
    }
    let raw = match RawJob::deserialize(toml::Value::Table(table)) {
        Ok(r) => r,
        Err(e) => {
            out.problems.push(Problem::error(
                &label,
                "wrong type of value",
                e.message().trim().to_string(),
            ));
            return;
        }
    };
    let first_check = out.problems.len();
    let written = raw.name.clone().unwrap_or_default();
    let duplicate = seen.insert(crate::jobs::name_key(&label), (i, written.clone()));
    if let Some((first, other)) = &duplicate {
        let what = if *other == written {
            "name used twice".to_string()
        } else {
            format!("name collides with job {other:?}")
        };
        out.problems.push(Problem::error(
            &label,
            what,
            format!(
                "jobs #{} and #{} share it (compared without case and surrounding spaces); \
                 a job's name is its identity in the ledger",
                first + 1,
                i + 1
            ),
        ));
    }
    let job = validate(&label, raw, &mut out.problems);
    // A key of the wrong type was reported as such, not again as missing.
    let mut n = 0;
    out.problems.retain(|p| {
        n += 1;
        n <= first_check || !absent_because_mistyped(p, &wrong_type)
    });
    if let (Some(job), true) = (job, duplicate.is_none()) {
        out.tables.insert(job.name.to_string(), i);
        out.jobs.push(job);
    }
}

/// Reports and removes each key whose value has the wrong type (one problem per key, naming
/// it), so the rest of the job is still checked. Returns the keys removed.
fn wrong_types(label: &str, table: &mut toml::Table, problems: &mut Vec<Problem>) -> Vec<String> {
    let mut wrong = Vec::new();
    for (key, value) in table.iter() {
        if !JOB_KEYS.contains(&key.as_str()) {
            continue;
        }
        let alone = toml::Table::from_iter([(key.clone(), value.clone())]);
        let Err(e) = RawJob::deserialize(toml::Value::Table(alone)) else {
            continue;
        };
        let hint = match (key.as_str(), value) {
            ("command", toml::Value::String(c)) if c.split_whitespace().count() > 1 => {
                format!("; write it as an array, e.g. command = [\"sh\", \"-c\", {c:?}]")
            }
            ("command", toml::Value::String(c)) => {
                format!("; write it as an array, e.g. command = [{c:?}]")
            }
            _ => String::new(),
        };
        problems.push(Problem::error(
            label,
            format!("wrong type of value for {key}"),
            format!("{key} = {value}: {}{hint}", e.message().trim()),
        ));
        wrong.push(key.clone());
    }
    for key in &wrong {
        table.remove(key);
    }
    wrong
}

/// Whether `p` only says that a key reported as mistyped is missing.
fn absent_because_mistyped(p: &Problem, mistyped: &[String]) -> bool {
    let absent =
        p.what.starts_with("missing ") || p.what.starts_with("no ") || p.what.contains(" without ");
    absent && positions::key_of(&p.what, mistyped.iter().map(String::as_str)).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::config::job::Overlap;
    use crate::runner::config::lint::lint;

    #[test]
    fn malformed_toml_is_one_problem() {
        let l = parse("[[job]]\nname = \"a\nlease = 3");
        assert_eq!(l.problems.len(), 1);
        assert!(
            l.problems[0].what.starts_with("not valid TOML at line"),
            "{:?}",
            l.problems
        );
    }

    #[test]
    fn typo_gets_a_hint() {
        let l = parse(
            "[[job]]\nname = \"a\"\nevery = \"1m\"\nlease = \"10s\"\noverlapp = \
             \"coalesce\"\ncommand = [\"true\"]\n",
        );
        let lines: Vec<String> = l.problems.iter().map(|p| p.line("f")).collect();
        assert!(
            lines.iter().any(|l| l.contains("unknown key \"overlapp\"")
                && l.contains("did you mean \"overlap\"")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("missing overlap policy")),
            "{lines:?}"
        );
    }

    #[test]
    fn clean_job_parses() {
        let l = parse(
            "[[job]]\nname = \"digest\"\nschedule = \"0 7 * * *\"\ntimezone = \
             \"Europe/Berlin\"\nlease = \"15m\"\noverlap = \"queue\"\nqueue_cap = 3\ntimeout = \
             \"10m\"\ncommand = [\"./digest.sh\"]\n",
        );
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        assert_eq!(l.jobs[0].overlap, Overlap::Queue { cap: 3 });
        assert!(lint(&l.jobs, &BTreeMap::new(), None).is_empty());
    }

    fn job(name: &str) -> String {
        format!(
            "[[job]]\nname = \"{name}\"\nevery = \"1m\"\nlease = \"10s\"\noverlap = \
             \"coalesce\"\ncommand = [\"./{}.sh\"]\n",
            name.len()
        )
    }

    #[test]
    fn names_are_normalised_and_collisions_are_errors() {
        let l = parse(&format!("{}{}", job("a "), job("\u{00a0}A")));
        let lines: Vec<String> = l.problems.iter().map(|p| p.line("f")).collect();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("name collides with job \"a \"")),
            "{lines:?}"
        );
        assert_eq!(l.jobs.len(), 1);
        assert_eq!(l.jobs[0].name, "a");
        // NFC: a decomposed é is the composed one.
        let l = parse(&job("caf\u{0065}\u{0301}"));
        assert_eq!(l.jobs[0].name, "caf\u{e9}");
        for bad in ["a\u{200b}b", "\u{feff}a", "a\u{2060}", "a\u{202e}b"] {
            let l = parse(&job(bad));
            assert!(l.jobs.is_empty(), "{bad:?}");
            assert!(
                l.problems.iter().any(|p| p.what == "invalid name"),
                "{bad:?}: {:?}",
                l.problems
            );
        }
    }
}

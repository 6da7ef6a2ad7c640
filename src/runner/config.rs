//! The jobs file: parsing and validation into [`Job`]s. Every mistake found on the way is a
//! [`Problem`] (`problems.rs`, which also holds the lint behind `exactly check`); errors make a
//! job unusable and `exactly run` refuses the file.
pub use super::problems::{lint, History, Problem, Severity};
use crate::schedule::Schedule;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

pub use crate::policy::Overlap;

/// A valid job from the file.
#[derive(Debug, Clone)]
pub struct Job {
    pub name: crate::JobName,
    pub schedule: Schedule,
    pub lease: Duration,
    pub overlap: Overlap,
    /// Firings missed by up to this much (while no scheduler ran) still run.
    pub catchup: Duration,
    /// A run past this is stopped (outcome `timeout`); None: no limit.
    pub timeout: Option<Duration>,
    /// An observer past this is "can't tell".
    pub observe_timeout: Duration,
    pub command: Vec<String>,
    /// Keep only this many of the job's newest runs (`keep_runs`); None: `retain` decides.
    pub keep_runs: Option<u32>,
    /// Retries, pause after failures, jitter, starting deadline (`policy.rs`).
    pub policy: super::policy::Policy,
    /// A dead man's switch (`ping`, healthchecks.io's convention): pinged as each run starts
    /// and ends (`ping.rs`).
    pub ping: Option<String>,
    /// What the far side does with the effect key or the token (`far_side`): declared, since
    /// it cannot be seen from here; `exactly doctor` reads it. None: not declared.
    pub far_side: Option<FarSide>,
}

pub use crate::policy::FarSide;

/// How long an observer may take when the jobs file does not say (`observe_timeout`).
pub const OBSERVE_TIMEOUT_DEFAULT: Duration = crate::effect::OBSERVE_TIMEOUT;

impl Job {
    /// Lowercase hex SHA-256 of the command as it runs from the jobs file's folder `dir`
    /// (see [`super::problems::resolved_command`]).
    pub fn command_digest(&self, dir: Option<&Path>) -> String {
        command_digest(&super::problems::resolved_command(&self.command, dir))
    }
}

pub fn command_digest(argv: &[String]) -> String {
    let json = serde_json::to_string(argv).unwrap_or_default();
    format!("{:x}", Sha256::digest(json.as_bytes()))
}

/// A parsed file: the valid jobs, and every problem found on the way.
#[derive(Debug, Default)]
pub struct Loaded {
    pub jobs: Vec<Job>,
    pub problems: Vec<Problem>,
    /// Where each key and job is in the file, and which table each valid job came from: for
    /// the lines of problems found later (`place`).
    pub positions: super::positions::Positions,
    pub tables: BTreeMap<String, usize>,
    /// File-level `retain = "90d"`: `exactly run` prunes history older than this (off when
    /// absent), as `exactly gc --keep` does.
    pub retain: Option<Duration>,
    /// The `[[notify]]` tables (`notify_config.rs`): who is told of what.
    pub notify: Vec<super::notify_config::Notify>,
}

impl Loaded {
    #[cfg(test)]
    pub fn has_errors(&self) -> bool {
        self.problems.iter().any(|p| p.severity == Severity::Error)
    }

    /// Gives problems found after parsing (the lint, the registry's) their lines.
    pub fn place(&self, problems: &mut [Problem]) {
        for p in problems.iter_mut() {
            match self.tables.get(&p.job) {
                Some(i) => self.positions.place_job(*i, p),
                None => self.positions.place_top(p),
            }
        }
    }
}

pub(crate) const JOB_KEYS: &[&str] = &[
    "name",
    "schedule",
    "every",
    "timezone",
    "lease",
    "overlap",
    "queue_cap",
    "catchup",
    "timeout",
    "observe_timeout",
    "command",
    "dst_repeated",
    "dst_skipped",
    "keep_runs",
    "retries",
    "retry_backoff",
    "retry_backoff_max",
    "pause_after_failures",
    "jitter",
    "starting_deadline",
    "ping",
    "far_side",
];

/// The typed form of one `[[job]]` table, after unknown keys were reported and removed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    name: Option<String>,
    schedule: Option<String>,
    every: Option<String>,
    timezone: Option<String>,
    lease: Option<String>,
    overlap: Option<String>,
    queue_cap: Option<i64>,
    catchup: Option<String>,
    timeout: Option<String>,
    observe_timeout: Option<String>,
    command: Option<Vec<String>>,
    dst_repeated: Option<String>,
    dst_skipped: Option<String>,
    keep_runs: Option<i64>,
    retries: Option<i64>,
    retry_backoff: Option<String>,
    retry_backoff_max: Option<String>,
    pause_after_failures: Option<i64>,
    jitter: Option<String>,
    starting_deadline: Option<String>,
    ping: Option<String>,
    far_side: Option<String>,
}

/// Parses the text of a jobs file. Never panics: malformed TOML is one problem.
pub fn parse(text: &str) -> Loaded {
    let mut out = Loaded {
        positions: super::positions::Positions::read(text),
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
    out.notify = super::notify_config::parse(doc.get("notify"), &mut out.problems);
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
    let place = e.span().map(|s| super::positions::line_col(text, s.start));
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
        let hint = super::positions::closest(&key)
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
    absent && super::positions::key_of(&p.what, mistyped.iter().map(String::as_str)).is_some()
}

fn validate(name: &str, mut raw: RawJob, problems: &mut Vec<Problem>) -> Option<Job> {
    let before = problems.len();
    let mut c = Checks { name, problems };
    c.check_name(&raw);
    let schedule = c.schedule_of(&raw);
    let lease = c.lease_of(&raw);
    let catchup = match raw.catchup.as_deref() {
        None => Some(Duration::ZERO),
        Some(v) => match crate::time::parse_duration(v) {
            Ok(d) => Some(d),
            Err(e) => c.refuse("invalid catchup", e.to_string()),
        },
    };
    let timeout = match raw.timeout.as_deref() {
        None => Some(None),
        Some(t) => c.limit("timeout", t).map(Some),
    };
    let observe_timeout = match raw.observe_timeout.as_deref() {
        None => Some(OBSERVE_TIMEOUT_DEFAULT),
        Some(t) => c.limit("observe_timeout", t),
    };
    let overlap = c.overlap_of(&raw);
    let command = c.command_of(raw.command.take());
    let cron_in_zone =
        raw.schedule.is_some() && raw.timezone.as_deref().is_some_and(|t| t != "UTC");
    let dst = super::dst::dst_policy(
        name,
        raw.dst_repeated.as_deref(),
        raw.dst_skipped.as_deref(),
        cron_in_zone,
        c.problems,
    );
    let keep_runs = c.keep_runs_of(&raw);
    let policy = c.policy_of(&raw, schedule.as_ref());
    let ping = match raw.ping.as_deref().map(super::ping::check_url) {
        None => Some(None),
        Some(Ok(url)) => Some(Some(url)),
        Some(Err(why)) => c.refuse("invalid ping", why),
    };
    let far_side = match raw.far_side.as_deref() {
        None => Some(None),
        Some(w) => match FarSide::parse(w) {
            Some(f) => Some(Some(f)),
            None => c.refuse(
                format!("invalid far_side {w:?}"),
                "choose dedupes (it keeps each EXACTLY_EFFECT_KEY once) or fences (it refuses \
                 a stale EXACTLY_FENCING_TOKEN)",
            ),
        },
    };
    if problems.len() > before {
        return None;
    }
    Some(Job {
        name: crate::JobName::from(name.to_string()),
        schedule: schedule?.with_dst(dst?),
        lease: lease?,
        overlap: overlap?,
        catchup: catchup?,
        timeout: timeout?,
        observe_timeout: observe_timeout?,
        command: command?,
        keep_runs: keep_runs?,
        policy: policy?,
        ping: ping?,
        far_side: far_side?,
    })
}

/// The checks of one job's table: each reports what it finds wrong under the job's name.
struct Checks<'a> {
    name: &'a str,
    problems: &'a mut Vec<Problem>,
}

impl Checks<'_> {
    /// Reports `what` (and `why`) as an error of the job.
    fn error(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.problems.push(Problem::error(self.name, what, why));
    }

    /// Reports an error of the job: the value is unusable (None).
    fn refuse<T>(&mut self, what: impl Into<String>, why: impl Into<String>) -> Option<T> {
        self.error(what, why);
        None
    }

    /// A job's name: given, and one the ledger and the lease table can hold.
    fn check_name(&mut self, raw: &RawJob) {
        if raw
            .name
            .as_deref()
            .map(crate::jobs::normalize_name)
            .unwrap_or_default()
            .is_empty()
        {
            self.error(
                "missing name",
                "a job's name is its identity in the ledger and the lease table",
            );
        } else if let Some(why) = raw
            .name
            .as_deref()
            .and_then(crate::jobs::name_problem)
            .or_else(|| crate::lease::job_name_problem(self.name))
        {
            self.error("invalid name", why);
        }
    }

    /// A job's schedule: a cron expression (in its time zone) or a fixed interval, one of them.
    fn schedule_of(&mut self, raw: &RawJob) -> Option<Schedule> {
        match (&raw.schedule, &raw.every) {
            (Some(_), Some(_)) => self.refuse(
                "both schedule and every",
                "give a cron schedule or a fixed interval, not both",
            ),
            (None, None) => self.refuse(
                "no schedule",
                "give schedule = \"CRON\" or every = \"DURATION\"",
            ),
            (Some(expr), None) => self.cron_of(expr, raw.timezone.as_deref()),
            (None, Some(every)) => {
                if raw.timezone.is_some() {
                    self.error(
                        "timezone with every",
                        "an interval fires at multiples of it since the Unix epoch; \
                         a time zone applies only to cron schedules",
                    );
                }
                match Schedule::every(every) {
                    Ok(s) => Some(s),
                    Err(why) => self.refuse("invalid every", why),
                }
            }
        }
    }

    /// A cron schedule in its time zone; a bad zone and a bad expression are both reported.
    fn cron_of(&mut self, expr: &str, zone: Option<&str>) -> Option<Schedule> {
        match Schedule::cron(expr, zone) {
            Ok(s) => Some(s),
            Err(why) => {
                let bad_zone = why.starts_with("unknown time zone");
                let what = if bad_zone {
                    "invalid timezone"
                } else {
                    "invalid cron schedule"
                };
                self.error(what, why);
                // A bad zone stops the parse before the expression: check that too.
                if let (true, Err(why)) = (bad_zone, Schedule::cron(expr, None)) {
                    self.error("invalid cron schedule", why);
                }
                None
            }
        }
    }

    /// A job's lease: given, and long enough for a heartbeat to keep.
    fn lease_of(&mut self, raw: &RawJob) -> Option<Duration> {
        let Some(l) = raw.lease.as_deref() else {
            self.error(
                "missing lease",
                "choose it: longer than the worst-case run, shorter than the interval",
            );
            return None;
        };
        match crate::time::parse_duration(l) {
            Ok(d) if d >= Duration::from_millis(100) => Some(d),
            Ok(_) => self.refuse(
                "invalid lease",
                format!("lease = {l:?} is shorter than 100ms; no heartbeat can keep it"),
            ),
            Err(e) => self.refuse("invalid lease", e.to_string()),
        }
    }

    /// A time limit (`timeout`, `observe_timeout`). A limit under 100ms leaves no room to
    /// start a process; every limit is bounded at 100y.
    fn limit(&mut self, key: &str, value: &str) -> Option<Duration> {
        match crate::time::parse_duration(value) {
            Ok(d) if d >= Duration::from_millis(100) => Some(d),
            Ok(_) => self.refuse(
                format!("invalid {key}"),
                format!("{key} = {value:?} is shorter than 100ms"),
            ),
            Err(e) => self.refuse(format!("invalid {key}"), e.to_string()),
        }
    }

    /// A job's overlap policy, chosen; a queue with its cap, and a cap only with a queue.
    fn overlap_of(&mut self, raw: &RawJob) -> Option<Overlap> {
        let overlap = match raw.overlap.as_deref() {
            None => self.refuse(
                "missing overlap policy",
                "choose coalesce, queue or fail; otherwise the platform decides by accident",
            ),
            Some("coalesce") => Some(Overlap::Coalesce),
            Some("fail") => Some(Overlap::Fail),
            Some("queue") => self.queue_of(raw.queue_cap),
            Some(other) => self.refuse(
                format!("invalid overlap {other:?}"),
                "choose coalesce, queue or fail",
            ),
        };
        if raw.queue_cap.is_some() && raw.overlap.as_deref().is_some_and(|o| o != "queue") {
            self.error(
                "queue_cap without overlap = \"queue\"",
                "only a queue has a cap; the value would be ignored",
            );
        }
        overlap
    }

    /// `overlap = "queue"` with its cap.
    fn queue_of(&mut self, cap: Option<i64>) -> Option<Overlap> {
        match cap {
            None => self.refuse(
                "overlap = \"queue\" without queue_cap",
                "a queue without a cap grows without limit",
            ),
            Some(c) if !(1..=10_000).contains(&c) => self.refuse(
                format!("invalid queue_cap {c}"),
                "queue_cap must be between 1 and 10000",
            ),
            Some(c) => Some(Overlap::Queue { cap: c as u32 }),
        }
    }

    /// A job's command: given, with a program.
    fn command_of(&mut self, command: Option<Vec<String>>) -> Option<Vec<String>> {
        match command {
            None => self.refuse(
                "missing command",
                "give command = [\"program\", \"arg\", …]",
            ),
            Some(c) if c.is_empty() || c[0].trim().is_empty() => {
                self.refuse("empty command", "give command = [\"program\", \"arg\", …]")
            }
            Some(c) => Some(c),
        }
    }

    /// `keep_runs`: None when absent (`retain` decides), else a count in range.
    fn keep_runs_of(&mut self, raw: &RawJob) -> Option<Option<u32>> {
        match raw.keep_runs {
            None => Some(None),
            Some(n) if (1..=1_000_000).contains(&n) => Some(Some(n as u32)),
            Some(n) => self.refuse(
                format!("invalid keep_runs {n}"),
                "keep_runs must be between 1 and 1000000 (the newest runs kept)",
            ),
        }
    }

    /// The failure and timing policy (`policy.rs`), checked against the schedule's interval.
    fn policy_of(
        &mut self,
        raw: &RawJob,
        schedule: Option<&Schedule>,
    ) -> Option<super::policy::Policy> {
        let raw_policy = super::policy::RawPolicy {
            retries: raw.retries,
            retry_backoff: raw.retry_backoff.as_deref(),
            retry_backoff_max: raw.retry_backoff_max.as_deref(),
            pause_after_failures: raw.pause_after_failures,
            jitter: raw.jitter.as_deref(),
            starting_deadline: raw.starting_deadline.as_deref(),
            catchup: raw.catchup.is_some(),
        };
        let interval = schedule.map(super::policy::interval_of);
        super::policy::validate(self.name, &raw_policy, interval, self.problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! The essay's checklist, judged from what the ledger saw: for each job (and each action of
//! effects outside any job), each of the ten rules `ok`, `warn` or `fail`, with one line of
//! evidence and one line of what to do. `exactly doctor` prints it; the dashboard and the
//! metrics can render the same [`Checklist`].
//!
//! [`check`] reads the database once ([`crate::Store`]'s checklist read: the snapshot's rows and
//! the checklist's own, in one transaction) and judges it (`judge`); `rules.rs` holds the ten
//! judgements. What the ledger cannot know (whether a command passes its token on, whether an
//! observer exists that never ran) is said in the evidence, never guessed: docs/checklist.md.
mod keys;
mod rules;

use crate::snapshot::{JobRow, Snapshot};
use crate::store::ChecklistReading;
use crate::store::Store;
use exactly_words::policy::{FarSide, Overlap};
use exactly_words::{JobName, Result};
use serde::Serialize;
use std::collections::BTreeSet;
use std::time::Duration;

/// Rule 10: a job whose duplicates-suppressed counter is still 0 after this many runs (or
/// claims of its lease) has a dedupe nobody has seen work: a warning.
pub const SUPPRESSED_ZERO_RUNS: u64 = 20;
/// Rule 9: an approval pending longer than this is a warning.
pub const PENDING_APPROVAL_AGE: Duration = Duration::from_secs(24 * 3600);
/// Rule 8: a kill test (`exactly chaos`) older than this is a warning.
pub const KILL_TEST_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Rule 6: an open unknown is a warning; one older than this is a failure.
pub const UNKNOWN_FAIL_AGE: Duration = Duration::from_secs(24 * 3600);
/// Rule 2: the lease suggested is the worst run (or hold) times this, when it fits under the
/// interval.
pub const LEASE_HEADROOM: f64 = 1.5;

/// The essay's ten rules, in its order. Each has a stable id ([`Rule::id`]) that JSON and
/// metrics labels use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// 1. A lease row per job, claimed atomically, with a monotonic fencing token.
    LeaseToken,
    /// 2. Lease longer than the worst-case run, shorter than the interval; long jobs split.
    LeaseBounds,
    /// 3. The key from action + target + digest of the consequential inputs, not the run.
    KeyFromFacts,
    /// 4. The far side dedupes, or the effect is observable after the fact.
    FarSide,
    /// 5. Every write carries the fencing token and is rejected when stale.
    TokenOnWrites,
    /// 6. Four states in the ledger, `unknown` resolved before any retry.
    UnknownResolved,
    /// 7. An explicit overlap policy, chosen rather than inherited.
    OverlapPolicy,
    /// 8. A kill-mid-effect test, run repeatedly.
    KillTest,
    /// 9. Approvals stored against the effect key and consumed once.
    ApprovalsOnce,
    /// 10. Duplicate-suppressed and fenced counters on a dashboard.
    Counters,
}

impl Rule {
    /// The ten, in the essay's order.
    pub const ALL: [Rule; 10] = [
        Rule::LeaseToken,
        Rule::LeaseBounds,
        Rule::KeyFromFacts,
        Rule::FarSide,
        Rule::TokenOnWrites,
        Rule::UnknownResolved,
        Rule::OverlapPolicy,
        Rule::KillTest,
        Rule::ApprovalsOnce,
        Rule::Counters,
    ];

    /// Its stable id (JSON's `rule`, a metric's `rule` label): never renamed.
    pub fn id(self) -> &'static str {
        match self {
            Rule::LeaseToken => "lease-token",
            Rule::LeaseBounds => "lease-bounds",
            Rule::KeyFromFacts => "key-from-facts",
            Rule::FarSide => "far-side",
            Rule::TokenOnWrites => "token-on-writes",
            Rule::UnknownResolved => "unknown-resolved",
            Rule::OverlapPolicy => "overlap-policy",
            Rule::KillTest => "kill-test",
            Rule::ApprovalsOnce => "approvals-once",
            Rule::Counters => "counters",
        }
    }

    /// Its number in the essay's checklist, 1 to 10.
    pub fn number(self) -> usize {
        Rule::ALL.iter().position(|r| *r == self).unwrap_or(0) + 1
    }

    /// The rule in a few words.
    pub fn title(self) -> &'static str {
        match self {
            Rule::LeaseToken => "a lease row, a monotonic token",
            Rule::LeaseBounds => "lease > worst run, < interval",
            Rule::KeyFromFacts => "keys from facts, not runs",
            Rule::FarSide => "far side dedupes, or observable",
            Rule::TokenOnWrites => "every write carries the token",
            Rule::UnknownResolved => "unknown resolved before retry",
            Rule::OverlapPolicy => "an explicit overlap policy",
            Rule::KillTest => "a kill test, run repeatedly",
            Rule::ApprovalsOnce => "approvals consumed once",
            Rule::Counters => "counters on a dashboard",
        }
    }

    /// The rule whose id is `id`.
    pub fn from_id(id: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id() == id)
    }
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

/// How a subject stands against a rule. Ordered: `Ok` < `Warn` < `Fail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    /// Kept, by what the ledger shows.
    Ok,
    /// Not shown broken, but not shown kept either, or a sign worth a look.
    Warn,
    /// Broken, by what the ledger shows.
    Fail,
}

impl Verdict {
    /// `ok`, `warn` or `fail`.
    pub fn id(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        }
    }
    /// 0, 1 or 2 (a metric's value).
    pub fn level(self) -> u8 {
        self as u8
    }
}

impl Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

/// One rule judged for one subject.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleResult {
    /// The rule.
    pub rule: Rule,
    /// How the subject stands.
    pub verdict: Verdict,
    /// What the judgement saw, in one line.
    pub evidence: String,
    /// What to do, in one line.
    pub fix: String,
}

impl RuleResult {
    fn new(rule: Rule, verdict: Verdict, evidence: String, fix: impl Into<String>) -> Self {
        RuleResult {
            rule,
            verdict,
            evidence,
            fix: fix.into(),
        }
    }
}

/// What is judged: a job, or the effects of one action written outside any job (no lease row
/// and no registration names their job key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SubjectName {
    /// A job: its lease's key.
    Job(String),
    /// An action whose effects name no job that exactly knows.
    Action(String),
}

impl SubjectName {
    /// The name alone.
    pub fn as_str(&self) -> &str {
        match self {
            SubjectName::Job(s) | SubjectName::Action(s) => s,
        }
    }
}

/// A subject with its ten results, in [`Rule::ALL`]'s order.
#[derive(Debug, Clone, PartialEq)]
pub struct Subject {
    /// The job or action judged.
    pub name: SubjectName,
    /// One result per rule, in the essay's order.
    pub rules: [RuleResult; 10],
}

impl Subject {
    /// Its result for `rule`.
    pub fn result(&self, rule: Rule) -> &RuleResult {
        &self.rules[rule.number() - 1]
    }
    /// Its worst verdict.
    pub fn worst(&self) -> Verdict {
        self.rules
            .iter()
            .map(|r| r.verdict)
            .max()
            .unwrap_or(Verdict::Ok)
    }
}

/// The whole checklist: every subject's results, as at `taken_at` (the database's clock).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Checklist {
    /// When it was read.
    pub taken_at: String,
    /// Jobs first (by name), then actions outside any job (by name).
    pub subjects: Vec<Subject>,
}

impl Checklist {
    /// Its worst verdict (`Ok` when it has no subject).
    pub fn worst(&self) -> Verdict {
        self.subjects
            .iter()
            .map(Subject::worst)
            .max()
            .unwrap_or(Verdict::Ok)
    }
    /// How many subjects fail at least one rule (the dashboard header's count).
    pub fn failing(&self) -> usize {
        self.subjects
            .iter()
            .filter(|s| s.worst() == Verdict::Fail)
            .count()
    }
    /// Every result as (subject, rule, verdict): a metric's samples
    /// (`exactly_checklist{exactly_job, rule}` = [`Verdict::level`]).
    pub fn results(&self) -> impl Iterator<Item = (&SubjectName, Rule, Verdict)> + '_ {
        self.subjects
            .iter()
            .flat_map(|s| s.rules.iter().map(move |r| (&s.name, r.rule, r.verdict)))
    }
    /// How many results have `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.subjects
            .iter()
            .flat_map(|s| s.rules.iter())
            .filter(|r| r.verdict == verdict)
            .count()
    }
    /// The JSON `exactly doctor --json` prints (with `schema_version`, [`crate::json::render`]):
    /// `jobs` [{`job_key`, `rules`}], `actions` [{`action`, `rules`}] for effects outside any
    /// job, and `totals` {`ok`, `warn`, `fail`}.
    pub fn to_json(&self) -> serde_json::Value {
        let mut jobs = Vec::new();
        let mut actions = Vec::new();
        for s in &self.subjects {
            match &s.name {
                SubjectName::Job(j) => {
                    jobs.push(serde_json::json!({"job_key": j, "rules": s.rules}));
                }
                SubjectName::Action(a) => {
                    actions.push(serde_json::json!({"action": a, "rules": s.rules}));
                }
            }
        }
        serde_json::json!({
            "taken_at": self.taken_at,
            "verdict": self.worst(),
            "totals": {
                "ok": self.count(Verdict::Ok),
                "warn": self.count(Verdict::Warn),
                "fail": self.count(Verdict::Fail),
            },
            "jobs": jobs,
            "actions": actions,
        })
    }
}

/// A job as a jobs file declares it (`exactly doctor --file`): what the file says beats what
/// the registry last recorded, and a job of the file that never ran is judged too.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// The job.
    pub job: JobName,
    /// Its overlap policy, as written.
    pub overlap: Overlap,
    /// What its far side is declared to do.
    pub far_side: Option<FarSide>,
    /// Its interval (s) and lease (ms), for a job with no registry row yet.
    pub interval_s: i64,
    /// Its lease (ms).
    pub lease_ms: i64,
}

/// What to judge: one job, or all; with the jobs file's declarations when given.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Judge only this job (or action outside any job).
    pub only: Option<String>,
    /// The jobs file's jobs (`--file`).
    pub declared: Vec<Declared>,
    /// The jobs file's name, as evidence shows it.
    pub file: Option<String>,
}

/// Reads the database once and judges every subject (see `judge`).
pub fn check(store: &mut Store, opts: &Options) -> Result<Checklist> {
    let now = store.now();
    let dead_after = crate::jobs::scheduler_dead_after();
    let reading = store.checklist_reading(now, dead_after)?;
    Ok(judge(reading, dead_after, opts))
}

/// A watcher judges again at most this often (the dashboard, the metrics server).
pub const JUDGE_AT_MOST_EVERY: Duration = Duration::from_secs(15);
/// A watcher spends at most 1/JUDGE_SHARE of its time judging: on a million-row ledger a
/// judgement walks the ledger for seconds, and one that took 2 s waits 100 s for the next.
pub const JUDGE_SHARE: u32 = 50;
/// With nothing committed, a watcher judges again after this long: the rules that time alone
/// moves (an unknown a day old, a kill test a month old) have thresholds of a day or more.
pub const JUDGE_STALE: Duration = Duration::from_secs(3600);

/// When a watcher that keeps showing the checklist (`exactly top`, `exactly metrics --listen`)
/// judges it again: see [`JUDGE_AT_MOST_EVERY`], [`JUDGE_SHARE`], [`JUDGE_STALE`].
#[derive(Debug, Default, Clone, Copy)]
pub struct Pace {
    /// When the last judgement began, and how long it took.
    last: Option<(std::time::Instant, Duration)>,
}

impl Pace {
    /// Whether to judge now; `changed`: something was committed since the last judgement
    /// (a watcher that cannot tell says true).
    pub fn due(&self, changed: bool) -> bool {
        let Some((at, took)) = self.last else {
            return true;
        };
        let since = at.elapsed();
        since >= JUDGE_AT_MOST_EVERY.max(took * JUDGE_SHARE) && (changed || since >= JUDGE_STALE)
    }

    /// Judges with [`check`] and remembers when and how long it took.
    pub fn check(&mut self, store: &mut Store, opts: &Options) -> Result<Checklist> {
        let started = std::time::Instant::now();
        let out = check(store, opts);
        self.last = Some((started, started.elapsed()));
        out
    }

    /// As if the last judgement began `ago` and took `took` (tests).
    #[doc(hidden)]
    pub fn judged_at(&mut self, ago: Duration, took: Duration) {
        self.last = std::time::Instant::now()
            .checked_sub(ago)
            .map(|at| (at, took));
    }
}

/// Records a run of `exactly chaos` (the kill test rule 8 looks for) in `store`.
pub fn record_kill_test(store: &mut Store, run: &KillTestRun) -> Result<()> {
    let at = store.now();
    let now = exactly_words::time::fmt(at);
    store.record_chaos_run(
        &crate::store::ChaosRunRow {
            at,
            scenarios: run.scenarios.join(","),
            iterations: i64::from(run.iterations),
            duplicates: run.duplicates as i64,
            lost: run.lost as i64,
            passed: run.passed,
        },
        &now,
    )
}

/// One run of the kill test (`exactly chaos`), as recorded for rule 8.
#[derive(Debug, Clone, Default)]
pub struct KillTestRun {
    /// The scenarios it ran.
    pub scenarios: Vec<String>,
    /// Iterations per scenario.
    pub iterations: u32,
    /// Duplicate effects observed (must be 0).
    pub duplicates: u64,
    /// Effects lost (must be 0).
    pub lost: u64,
    /// Whether it passed.
    pub passed: bool,
}

/// Judges every subject of `reading` against the ten rules.
fn judge(reading: ChecklistReading, dead_after: Duration, opts: &Options) -> Checklist {
    let ChecklistReading {
        reading,
        registered,
        jobs: facts,
        actions,
        repeats,
        chaos_runs,
    } = reading;
    let snap = Snapshot::from_reading(reading, &exactly_words::hostname(), dead_after);
    let now = snap.taken_at;
    // A job is what exactly knows as one: registered (not retired), or holding a lease row.
    let mut known: BTreeSet<String> = snap
        .jobs
        .iter()
        .filter(|j| !j.retired)
        .map(|j| j.job_key.clone())
        .collect();
    known.extend(
        facts
            .iter()
            .filter(|(_, f)| f.lease_token.is_some())
            .map(|(k, _)| k.clone()),
    );
    known.extend(opts.declared.iter().map(|d| d.job.to_string()));
    let outside: BTreeSet<String> = facts
        .keys()
        .filter(|k| !known.contains(*k) && !snap.jobs.iter().any(|j| &j.job_key == *k))
        .cloned()
        .collect();
    let ctx = rules::Ctx {
        now,
        snap: &snap,
        registered: &registered,
        actions: &actions,
        repeats: &repeats,
        chaos_runs: &chaos_runs,
        declared: &opts.declared,
        file: opts.file.as_deref(),
    };
    let mut subjects = Vec::new();
    for job in &known {
        if opts.only.as_deref().is_some_and(|o| o != job) {
            continue;
        }
        let row = snap.jobs.iter().find(|j| &j.job_key == job);
        let empty = JobRow {
            job_key: job.clone(),
            ..JobRow::default()
        };
        let f = facts.get(job).cloned().unwrap_or_default();
        subjects.push(Subject {
            name: SubjectName::Job(job.clone()),
            rules: ctx.job(row.unwrap_or(&empty), &f),
        });
    }
    // Effects outside any job, grouped by their action.
    let mut by_action: BTreeSet<String> = BTreeSet::new();
    for a in actions.iter().filter(|a| outside.contains(&a.job_key)) {
        by_action.insert(a.action_id.clone().unwrap_or_default());
    }
    for action in by_action {
        let shown = if action.is_empty() {
            "(no action)".to_string()
        } else {
            action.clone()
        };
        if opts.only.as_deref().is_some_and(|o| o != shown) {
            continue;
        }
        let mut f = crate::store::JobEvidence::default();
        let mut jobs = Vec::new();
        for a in actions.iter().filter(|a| {
            outside.contains(&a.job_key) && a.action_id.clone().unwrap_or_default() == action
        }) {
            jobs.push(a.job_key.clone());
            if let Some(jf) = facts.get(&a.job_key) {
                f.rows += jf.rows;
                f.rows_without_token += jf.rows_without_token;
                f.claimed_leaked += jf.claimed_leaked;
                f.suppressed += jf.suppressed;
                f.fenced += jf.fenced;
                f.approvals_reused += jf.approvals_reused;
                f.retries_in_flight += jf.retries_in_flight;
                f.approved_unused_after_run += jf.approved_unused_after_run;
            }
        }
        subjects.push(Subject {
            name: SubjectName::Action(shown),
            rules: ctx.action(&action, &jobs, &f),
        });
    }
    Checklist {
        taken_at: exactly_words::time::fmt(snap.taken_at),
        subjects,
    }
}

//! `exactly metrics`: the [`Snapshot`] as OpenMetrics and Prometheus text, through
//! prometheus-client. The model itself lives in `snapshot/`; `status.rs` renders it for a
//! person.
use crate::checklist::{Checklist, SubjectName};
use crate::snapshot::{JobRow, Snapshot, RUN_BUCKETS_MS};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge, info::Info};
use prometheus_client::registry::Registry;
use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;

impl Snapshot {
    /// The snapshot as a Prometheus registry (`prometheus-client`): it names, types and
    /// escapes every series (`METRICS`), so label values are the jobs' exact names.
    pub fn registry(&self) -> Registry {
        let mut r = Registry::default();
        for m in METRICS {
            let (name, help) = (m.name, m.help);
            match m.read {
                Read::Counter(f) => {
                    let c: Counter = Counter::default();
                    c.inc_by(f(self));
                    r.register(name, help, c);
                }
                Read::Gauge(f) => {
                    let g: Gauge = Gauge::default();
                    g.set(f(self));
                    r.register(name, help, g);
                }
                Read::JobCounter(f) => {
                    let fam = Family::<Labels, Counter>::default();
                    for j in &self.jobs {
                        fam.get_or_create(&job_label(j)).inc_by(f(j));
                    }
                    r.register(name, help, fam);
                }
                Read::JobGauge(f) => {
                    let fam = Family::<Labels, Gauge<f64, AtomicU64>>::default();
                    for j in &self.jobs {
                        if let Some(v) = f(j) {
                            fam.get_or_create(&job_label(j)).set(v);
                        }
                    }
                    r.register(name, help, fam);
                }
                Read::Own(register) => register(self, &mut r, name, help),
            }
        }
        r
    }

    /// OpenMetrics text (what `prometheus-client` encodes), ending in `# EOF`.
    pub fn to_openmetrics(&self) -> String {
        self.to_openmetrics_with(None)
    }

    /// OpenMetrics text with the ten rules' verdicts (`exactly_checklist`) when `checklist` is
    /// given.
    pub fn to_openmetrics_with(&self, checklist: Option<&Checklist>) -> String {
        let mut r = self.registry();
        if let Some(c) = checklist {
            register_checklist(c, &mut r);
        }
        let mut s = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &r);
        s
    }

    /// The Prometheus text format 0.0.4 (node_exporter's textfile collector reads only this):
    /// the same samples as [`Self::to_openmetrics`], with counter and info families named by
    /// their samples, no `# EOF`.
    pub fn to_prometheus(&self) -> String {
        openmetrics_to_text(&self.to_openmetrics())
    }

    /// [`Self::to_prometheus`] with the checklist's verdicts.
    pub fn to_prometheus_with(&self, checklist: Option<&Checklist>) -> String {
        openmetrics_to_text(&self.to_openmetrics_with(checklist))
    }
}

/// The metric of the ten rules: one series per subject and rule.
pub const CHECKLIST_METRIC: &str = "exactly_checklist";

/// The label naming an action whose effects name no job (a checklist subject of its own).
pub const ACTION_LABEL: &str = "exactly_action";

/// `exactly_checklist{exactly_job, rule}`: 0 ok, 1 warn, 2 fail, as `exactly doctor` judges
/// (rule ids in docs/checklist.md); actions outside any job are labelled `exactly_action`.
fn register_checklist(c: &Checklist, r: &mut Registry) {
    let fam = Family::<Labels, Gauge>::default();
    for s in &c.subjects {
        let who = match &s.name {
            SubjectName::Job(j) => (JOB_LABEL.to_string(), label_value(j)),
            SubjectName::Action(a) => (ACTION_LABEL.to_string(), label_value(a)),
        };
        for res in &s.rules {
            let labels = vec![who.clone(), ("rule".to_string(), res.rule.id().to_string())];
            fam.get_or_create(&labels)
                .set(i64::from(res.verdict.level()));
        }
    }
    r.register(
        CHECKLIST_METRIC,
        "The essay's checklist: each rule per job, 0 ok, 1 warn, 2 fail (exactly doctor)",
        fam,
    );
}

type Labels = Vec<(String, String)>;

/// The label naming a job. Not `job`: Prometheus sets `job` on every target it scrapes (and
/// would rename ours to `exported_job`).
pub const JOB_LABEL: &str = "exactly_job";

/// The outcomes the shipped alert rules compare: every job has these run counters, at 0 until
/// a run ends so.
pub const ALERTED_OUTCOMES: &[&str] = &["ok", "failed", "timeout"];

/// One metric: its name, its help, and how its value is read from the snapshot.
struct Metric {
    name: &'static str,
    help: &'static str,
    read: Read,
}

/// How a metric's value is read from the snapshot, and so its kind.
enum Read {
    /// A counter of the whole database. Counters are registered without `_total`: the encoder
    /// adds it to each sample.
    Counter(fn(&Snapshot) -> u64),
    /// A gauge of the whole database.
    Gauge(fn(&Snapshot) -> i64),
    /// A counter per job.
    JobCounter(fn(&JobRow) -> u64),
    /// A gauge per job; a job without a value has no series.
    JobGauge(fn(&JobRow) -> Option<f64>),
    /// A family of its own, registered under the name and help by the function.
    Own(fn(&Snapshot, &mut Registry, &str, &str)),
}

/// A count as a gauge's value.
fn n(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Milliseconds as seconds.
fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// Every metric, in the order the exposition lists them.
const METRICS: &[Metric] = &[
    Metric {
        name: "exactly_build",
        help: "The exactly version that rendered these metrics",
        read: Read::Own(build_info),
    },
    Metric {
        name: "exactly_duplicates_suppressed",
        help: "Attempts that found their effect already done",
        read: Read::Counter(|s| s.totals.duplicates_suppressed),
    },
    Metric {
        name: "exactly_fenced_writes",
        help: "Writes refused because a higher fencing token exists",
        read: Read::Counter(|s| s.totals.fenced_writes),
    },
    Metric {
        name: "exactly_missed_firings",
        help: "Firings missed under overlap policy fail or outside catch-up",
        read: Read::Counter(|s| s.missed_firings),
    },
    Metric {
        name: "exactly_claimed_never_submitted",
        help: "Effects reserved by a lease that expired or was superseded, never sent",
        read: Read::Gauge(|s| n(s.totals.claimed_never_submitted)),
    },
    Metric {
        name: "exactly_unknown_effects",
        help: "Effects that may or may not have happened",
        read: Read::Gauge(|s| n(s.totals.unknown)),
    },
    Metric {
        name: "exactly_oldest_unknown_age_seconds",
        help: "Age of the oldest unresolved effect",
        read: Read::Gauge(|s| s.oldest_unknown_s.unwrap_or(0)),
    },
    Metric {
        name: "exactly_pending_approvals",
        help: "Effects waiting for a person's approval",
        read: Read::Gauge(|s| n(s.totals.pending_approvals)),
    },
    Metric {
        name: "exactly_unused_approvals",
        help: "Approvals granted but not yet consumed",
        read: Read::Gauge(|s| n(s.totals.unused_approvals)),
    },
    Metric {
        name: "exactly_schedulers_alive",
        help: "Schedulers (exactly run) whose heartbeat is recent",
        read: Read::Gauge(|s| n(s.schedulers_alive)),
    },
    Metric {
        name: "exactly_failovers",
        help: "Times the PostgreSQL database failed over: its server's timeline changed (all time)",
        read: Read::Counter(|s| s.failovers),
    },
    Metric {
        name: "exactly_jobs_registered",
        help: "Jobs registered by a jobs file and not retired (paused ones included)",
        read: Read::Gauge(|s| crate::snapshot::Registered::of(&s.jobs).jobs as i64),
    },
    Metric {
        name: "exactly_oldest_pending_approval_age_seconds",
        help: "Age of the oldest approval still waiting for a person (0 when none waits)",
        read: Read::Gauge(|s| {
            s.pending_approvals
                .iter()
                .map(|a| a.age_s)
                .max()
                .unwrap_or(0)
        }),
    },
    Metric {
        name: "exactly_job_runs",
        help: "Runs ended, per job and outcome (all time)",
        read: Read::Own(job_runs),
    },
    Metric {
        name: "exactly_notifications",
        help: "Notifications ([[notify]]) per notifier, rule and outcome: sent, or failed (not \
               delivered, tried again; or lost, unknown) (all time)",
        read: Read::Own(notifications),
    },
    Metric {
        name: "exactly_job_run_duration_seconds",
        help: "Durations of the job's ended runs, all time (kept by counters: pruning runs \
               never lowers a bucket)",
        read: Read::Own(run_durations),
    },
    Metric {
        name: "exactly_job_duplicates_suppressed",
        help: "Duplicates suppressed per job",
        read: Read::JobCounter(|j| j.duplicates_suppressed),
    },
    Metric {
        name: "exactly_job_fenced_writes",
        help: "Fenced writes per job",
        read: Read::JobCounter(|j| j.fenced_writes),
    },
    Metric {
        name: "exactly_job_missed_firings",
        help: "Firings missed per job (recorded, and passed with no scheduler)",
        read: Read::JobCounter(|j| j.missed_firings),
    },
    Metric {
        name: "exactly_job_window_runs",
        help: "Runs in the duration window per job",
        read: Read::JobGauge(|j| Some(j.runs as f64)),
    },
    Metric {
        name: "exactly_job_run_p50_seconds",
        help: "Median run duration in the duration window",
        read: Read::JobGauge(|j| j.p50_ms.map(secs)),
    },
    Metric {
        name: "exactly_job_run_p99_seconds",
        help: "99th percentile run duration in the duration window",
        read: Read::JobGauge(|j| j.p99_ms.map(secs)),
    },
    Metric {
        name: "exactly_job_start_lag_p99_seconds",
        help: "99th percentile start lag (a run's recorded start to its command's start) in the \
               duration window",
        read: Read::JobGauge(|j| j.start_lag_p99_ms.map(secs)),
    },
    Metric {
        name: "exactly_job_interval_seconds",
        help: "Schedule interval",
        read: Read::JobGauge(|j| j.settings.interval_s.map(|v| v as f64)),
    },
    Metric {
        name: "exactly_job_lease_seconds",
        help: "Lease duration",
        read: Read::JobGauge(|j| j.settings.lease_ms.map(|v| secs(v.max(0) as u64))),
    },
    Metric {
        name: "exactly_job_fencing_token",
        help: "Current fencing token",
        read: Read::JobGauge(|j| j.fencing_token.map(|v| v as f64)),
    },
    Metric {
        name: "exactly_job_queue_depth",
        help: "Firings waiting under overlap policy queue",
        read: Read::JobGauge(|j| Some(j.queue_depth as f64)),
    },
    Metric {
        name: "exactly_job_runs_failed",
        help: "Runs in the duration window that ended failed or timeout",
        read: Read::JobGauge(|j| Some(j.runs_failed as f64)),
    },
    Metric {
        name: "exactly_job_last_success_timestamp_seconds",
        help: "When the job's latest ok run ended (Unix seconds); 0 when it never succeeded",
        read: Read::JobGauge(|j| Some(j.last_success_at.map(unix_of).unwrap_or(0.0))),
    },
    Metric {
        name: "exactly_job_last_run_timestamp_seconds",
        help: "When the job's latest run started (Unix seconds)",
        read: Read::JobGauge(|j| j.last_run.as_ref().map(|r| unix_of(r.started_at))),
    },
    Metric {
        name: "exactly_job_next_fire_timestamp_seconds",
        help: "The job's next firing (Unix seconds); in the past when nobody fired it",
        read: Read::JobGauge(|j| j.next_fire_at.map(unix_of)),
    },
    Metric {
        name: "exactly_job_failing",
        help: "1 while the job's failing episode is open (its newest run that failed or \
               succeeded failed; a run under way does not end it)",
        read: Read::JobGauge(|j| {
            Some(if j.failing_episode().is_some() {
                1.0
            } else {
                0.0
            })
        }),
    },
    Metric {
        name: "exactly_job_awaiting_approval",
        help: "1 while the job's newest run waits for a person's approval",
        read: Read::JobGauge(|j| {
            let waits = j.state() == crate::snapshot::JobState::AwaitingApproval;
            Some(if waits { 1.0 } else { 0.0 })
        }),
    },
    Metric {
        name: "exactly_job_paused",
        help: "1 when the job is paused",
        read: Read::JobGauge(|j| Some(if j.paused { 1.0 } else { 0.0 })),
    },
];

/// `exactly_build`: the version, as an info family.
fn build_info(_: &Snapshot, r: &mut Registry, name: &str, help: &str) {
    let version = ("version".to_string(), env!("CARGO_PKG_VERSION").to_string());
    r.register(name, help, Info::new(vec![version]));
}

/// Runs ended per job and outcome.
fn job_runs(s: &Snapshot, r: &mut Registry, name: &str, help: &str) {
    let runs = Family::<Labels, Counter>::default();
    for j in &s.jobs {
        // The outcomes alerts compare exist from the start (at 0), so a job that never
        // succeeded has an `ok` series that `increase()` can see stay flat.
        for outcome in ALERTED_OUTCOMES {
            runs.get_or_create(&run_labels(j, outcome)).inc_by(0);
        }
        for (outcome, count) in &j.runs_by_outcome {
            runs.get_or_create(&run_labels(j, outcome.as_str()))
                .inc_by(*count);
        }
    }
    r.register(name, help, runs);
}

/// Notifications per notifier, rule and outcome.
fn notifications(s: &Snapshot, r: &mut Registry, name: &str, help: &str) {
    let notes = Family::<Labels, Counter>::default();
    for n in &s.notifications {
        let labels = vec![
            (
                "notifier".to_string(),
                label_value(n.notifier.trim_start_matches("exactly-notify:")),
            ),
            ("rule".to_string(), label_value(&n.rule)),
            ("outcome".to_string(), label_value(&n.outcome)),
        ];
        notes.get_or_create(&labels).inc_by(n.count);
    }
    r.register(name, help, notes);
}

/// Each job's run-duration histogram.
fn run_durations(s: &Snapshot, r: &mut Registry, name: &str, help: &str) {
    let jobs = s.jobs.iter();
    let durations = jobs.map(|j| (job_label(j), run_histogram(j))).collect();
    r.register(name, help, RunDurations(durations));
}

fn job_label(j: &JobRow) -> Labels {
    vec![(JOB_LABEL.to_string(), label_value(&j.job_key))]
}

fn run_labels(j: &JobRow, outcome: &str) -> Labels {
    vec![
        (JOB_LABEL.to_string(), label_value(&j.job_key)),
        ("outcome".to_string(), label_value(outcome)),
    ]
}

/// One job's all-time run durations: `(upper bound s, runs in that bucket)`, not cumulative
/// (the encoder adds them up), the last bound infinity (written `+Inf`).
struct RunHistogram {
    sum_s: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

fn run_histogram(j: &JobRow) -> RunHistogram {
    let bounds = RUN_BUCKETS_MS
        .iter()
        .map(|ms| *ms as f64 / 1000.0)
        .chain([f64::INFINITY]);
    let buckets: Vec<(f64, u64)> = bounds
        .enumerate()
        .map(|(i, b)| (b, j.run_duration_counts.get(i).copied().unwrap_or(0)))
        .collect();
    RunHistogram {
        sum_s: j.run_duration_sum_ms as f64 / 1000.0,
        count: buckets.iter().map(|(_, n)| n).sum(),
        buckets,
    }
}

/// The run-duration histogram family from the store's counts (prometheus-client's `Histogram`
/// only observes values; these are counted already).
#[derive(Debug)]
struct RunDurations(Vec<(Labels, RunHistogram)>);

impl std::fmt::Debug for RunHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunHistogram({} runs)", self.count)
    }
}

impl EncodeMetric for RunDurations {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (labels, h) in &self.0 {
            encoder
                .encode_family(labels)?
                .encode_histogram::<NoLabelSet>(h.sum_s, h.count, &h.buckets, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A job's name as a label value: the name itself, except that a backslash is doubled and a
/// control or bidi character (only another program can write one; jobs files and the CLI
/// refuse them) is written `\u{1b}`. The mapping is one-to-one, so two jobs never share a
/// series, and nothing raw reaches a terminal that shows the metrics. (The exposition format
/// then escapes `\\`, `"` and line feeds once more, as it does for every value.)
pub fn label_value(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() || exactly_words::sanitize::is_bidi(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Rewrites OpenMetrics text as Prometheus text 0.0.4: a counter family `x` (samples `x_total`)
/// is described as `x_total`, an info family `x` as gauge `x_info`; `# UNIT` and `# EOF` go.
/// Samples and their escaping are the same in both formats.
pub fn openmetrics_to_text(om: &str) -> String {
    let mut types = std::collections::HashMap::new();
    for l in om.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            if let Some((name, typ)) = rest.split_once(' ') {
                types.insert(name.to_string(), typ.to_string());
            }
        }
    }
    let rename = |name: &str| match types.get(name).map(String::as_str) {
        Some("counter") => (format!("{name}_total"), "counter"),
        Some("info") => (format!("{name}_info"), "gauge"),
        Some(t) => (name.to_string(), t),
        None => (name.to_string(), "untyped"),
    };
    let mut out = String::with_capacity(om.len());
    for l in om.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = l.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let _ = writeln!(out, "# HELP {} {help}", rename(name).0);
        } else if let Some(rest) = l.strip_prefix("# TYPE ") {
            let name = rest.split_once(' ').map(|(n, _)| n).unwrap_or(rest);
            let (name, typ) = rename(name);
            let _ = writeln!(out, "# TYPE {name} {typ}");
        } else {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}

/// A ledger timestamp as Unix seconds with milliseconds.
/// An instant as Unix seconds, to the millisecond.
fn unix_of(t: exactly_words::time::Ts) -> f64 {
    t.timestamp_millis() as f64 / 1000.0
}

#[cfg(test)]
mod checklist_tests {
    use super::*;
    use crate::checklist::{Rule, RuleResult, Subject, Verdict};

    /// Each rule of each subject is one `exactly_checklist` series: 0 ok, 1 warn, 2 fail, a
    /// job by `exactly_job`, an action outside any job by `exactly_action`.
    #[test]
    fn the_checklist_is_one_series_per_subject_and_rule() {
        let subject = |name: SubjectName, fail: Rule| Subject {
            name,
            rules: Rule::ALL.map(|rule| RuleResult {
                rule,
                verdict: if rule == fail {
                    Verdict::Fail
                } else if rule == Rule::Counters {
                    Verdict::Warn
                } else {
                    Verdict::Ok
                },
                evidence: String::new(),
                fix: String::new(),
            }),
        };
        let c = Checklist {
            taken_at: String::new(),
            subjects: vec![
                subject(
                    SubjectName::Job("nightly \"b\"\n".into()),
                    Rule::KeyFromFacts,
                ),
                subject(SubjectName::Action("notify".into()), Rule::FarSide),
            ],
        };
        let text = Snapshot::default().to_prometheus_with(Some(&c));
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("exactly_checklist{"))
            .collect();
        assert_eq!(series.len(), 20, "{text}");
        for want in [
            r#"exactly_checklist{exactly_job="nightly \"b\"\\u{a}",rule="key-from-facts"} 2"#,
            r#"exactly_checklist{exactly_job="nightly \"b\"\\u{a}",rule="counters"} 1"#,
            r#"exactly_checklist{exactly_job="nightly \"b\"\\u{a}",rule="lease-token"} 0"#,
            r#"exactly_checklist{exactly_action="notify",rule="far-side"} 2"#,
        ] {
            assert!(series.contains(&want), "{want} in {text}");
        }
        assert!(!Snapshot::default()
            .to_prometheus()
            .contains("exactly_checklist"));
    }
}

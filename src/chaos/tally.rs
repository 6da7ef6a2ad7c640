//! What a chaos run observed: the [`Tally`] each scenario fills, summed over the run, and the
//! report `exactly chaos` prints (the table, or `--json`).
use super::{ChaosArgs, SCENARIOS};
use crate::sanitize::inert;
use serde::Serialize;
use std::collections::BTreeMap;

/// What one scenario (or the whole run) observed.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Tally {
    pub iterations: u64,
    /// Effects the workload meant to happen, each exactly once.
    pub intended_effects: u64,
    /// Requests the far side recorded.
    pub far_side_requests: u64,
    pub kills: BTreeMap<String, u64>,
    /// Processes paused (SIGSTOP, later SIGCONT) per what was paused.
    pub stops: BTreeMap<String, u64>,
    pub duplicate_effects: u64,
    pub lost_effects: u64,
    /// Effects left `submitted`/`unknown` by a kill or a lost answer, then settled by the observer.
    pub unknown_resolved: u64,
    pub unknown_unresolved: u64,
    /// Unresolved unknowns with no observer verdict saying why.
    pub unexplained_unknowns: u64,
    pub claimed_leaked: u64,
    pub fenced_writes: u64,
    pub duplicates_suppressed: u64,
    /// Writes by a run whose lease was stolen that the ledger accepted (must be 0).
    pub late_writes_accepted: u64,
    /// Effects that reached the far side after a caller asked for approval and before a person
    /// approved them, or after a person denied them (must be 0).
    pub unapproved_sends: u64,
    /// Interim "can't tell" verdicts that a later attempt settled.
    pub observer_cant_tell: u64,
    /// Scheduler strikes that landed while an effect was being sent.
    pub mid_effect_strikes: u64,
    /// Scheduler scenarios: how many firings had how many runs ({runs: firings}).
    pub runs_per_firing: BTreeMap<u64, u64>,
    /// The most runs one firing had (at most 3).
    pub max_runs_per_firing: u64,
    /// Firings that used up their 3 runs and were given up.
    pub firings_gave_up: u64,
    /// Times two runs of one firing were seen alive at once in the process table (must be 0).
    pub overlapping_copies: u64,
    /// Firings run again after a run the scheduler recorded `ok` (must be 0).
    pub double_runs: u64,
    /// Commands that booked their end but were stopped at their deadline as they finished
    /// (exit by SIGTERM): not done for the scheduler, so their firing went again. Counted apart:
    /// the ledger's effect keys, not the scheduler, keep such an effect once.
    pub ends_after_a_stop: u64,
    /// Runs whose command never started (the scheduler could not confirm its lease in time):
    /// recorded `not_started`, their firings missed. Degraded, never doubled.
    pub runs_not_started: u64,
    /// `host_clash` events recorded: a sender on another machine with our host name was seen.
    pub host_clash_events: u64,
    /// Dead senders whose pid an unrelated process took before the retry.
    pub pids_reused: u64,
    /// Retries that found a live sender of another user and answered "in flight".
    pub live_senders_in_flight: u64,
    /// Requests the far side refused (dedupe or fencing) in the scenarios that ask it to.
    pub far_side_refused: u64,
    /// `pause`: the duplicates a far side without dedupe or fencing would have acted on (the
    /// requests beyond the first for each effect). The documented limit, never hidden.
    pub pause_duplicates_without_dedupe: u64,
    /// Commands whose own stamps show them alive past their lease's deadline plus the stop
    /// margin (the escape scenarios; must be 0). A double fault's are counted in its entry.
    pub alive_past_deadline: u64,
    /// Double faults (every supervisor on the sender's host stopped or killed, another host
    /// taking over): only the far side can refuse the late request. Counted apart, per
    /// scenario, with and without the far side's fence.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub double_faults: BTreeMap<String, DoubleFault>,
    /// How the senders that settled the effects were held (`cgroup-v2`, `cgroup-v1`, `cookie`,
    /// …: the ledger row's record): `--no-cgroup` shows its fallback here.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub containment: BTreeMap<String, u64>,
    /// `observer-escape`: the longest a retry took, in milliseconds (bounded by its observe
    /// timeout plus a few seconds).
    #[serde(skip_serializing_if = "is_zero")]
    pub longest_retry_ms: u64,
    /// `clock-step`: the wall clock's steps under a running scheduler, per direction.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub clock_steps: BTreeMap<String, u64>,
    /// `clock-step`, `decide-ahead`: the job's runs, as its command counted them.
    pub job_runs: u64,
    /// `decide-ahead`: commands that started before their slot, by their own clock (must be 0).
    pub started_before_slot: u64,
    /// `decide-ahead`: slots decided ahead by a scheduler SIGKILLed before them that the next
    /// scheduler ran, once each.
    #[serde(skip_serializing_if = "is_zero")]
    pub ahead_resumed: u64,
    /// `failover`: fencing tokens a claim on the promoted server printed that a claim on the
    /// old primary had already printed for the job (must be 0).
    pub tokens_reissued: u64,
    /// `failover`: effects the promoted server's ledger had lost that were held for a person
    /// (no observer) instead of being sent again.
    pub held_for_person: u64,
    /// `failover`: `failover` events recorded by the promoted server.
    pub failovers_seen: u64,
    /// Why this scenario did not run (it did not pass either).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
    pub wall_ms: u64,
    /// Broken expectations and harness errors (each a failure, listed in `failures`).
    pub anomalies: u64,
    pub failures: Vec<String>,
    #[serde(skip)]
    pub(super) intents: Vec<(String, String)>,
    /// The scenario's far side dedupes or fences: its raw requests are counted apart.
    #[serde(skip)]
    pub(super) far_side_guarded: bool,
    /// Effect keys of double-fault iterations, with their scenario: audited apart.
    #[serde(skip)]
    pub(super) double_keys: BTreeMap<String, String>,
    /// `--fence`: the double faults' far side refuses stale fencing tokens.
    #[serde(skip)]
    pub(super) fenced: bool,
}

/// One scenario's double faults.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct DoubleFault {
    pub iterations: u64,
    /// Duplicates a far side without fencing acts on (with `--fence`: the stale requests it
    /// refused).
    pub unfenced_duplicates: u64,
    /// Duplicates that got past the far side's fence (null: run without `--fence`).
    pub fenced_duplicates: Option<u64>,
    /// Commands alive past their deadline: nothing on their host was left to stop them.
    pub alive_past_deadline: u64,
}

impl DoubleFault {
    fn add(&mut self, o: &DoubleFault) {
        self.iterations += o.iterations;
        self.unfenced_duplicates += o.unfenced_duplicates;
        self.fenced_duplicates = match (self.fenced_duplicates, o.fenced_duplicates) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.alive_past_deadline += o.alive_past_deadline;
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

const FAILURES_KEPT: usize = 20;

impl Tally {
    pub(crate) fn stop(&mut self, what: &str) {
        *self.stops.entry(what.to_string()).or_default() += 1;
    }
    pub(crate) fn clock_step(&mut self, way: &str) {
        *self.clock_steps.entry(way.to_string()).or_default() += 1;
    }
    pub(crate) fn kill(&mut self, point: &str) {
        *self.kills.entry(point.to_string()).or_default() += 1;
    }
    /// A broken expectation (an effect not fenced, not unknown when it must be, never settled)
    /// or a harness error: fails the run.
    pub(crate) fn anomaly(&mut self, what: String) {
        self.anomalies += 1;
        self.fail(what);
    }
    pub(crate) fn fail(&mut self, what: String) {
        if self.failures.len() < FAILURES_KEPT {
            self.failures.push(what);
        }
    }
    /// Records an effect the workload means to happen exactly once.
    pub(crate) fn intend(&mut self, key: &str, label: String) {
        self.intended_effects += 1;
        self.intents.push((key.to_string(), label));
    }
    pub(crate) fn ok(&self) -> bool {
        self.duplicate_effects == 0
            && self.tokens_reissued == 0
            && self.lost_effects == 0
            && self.claimed_leaked == 0
            && self.unexplained_unknowns == 0
            && self.late_writes_accepted == 0
            && self.unapproved_sends == 0
            && self.anomalies == 0
            && self.max_runs_per_firing <= 3
            && self.overlapping_copies == 0
            && self.double_runs == 0
            && self.started_before_slot == 0
            && self.alive_past_deadline == 0
    }
    pub(super) fn add(&mut self, o: &Tally) {
        self.iterations += o.iterations;
        self.intended_effects += o.intended_effects;
        self.far_side_requests += o.far_side_requests;
        for (k, n) in &o.kills {
            *self.kills.entry(k.clone()).or_default() += n;
        }
        self.duplicate_effects += o.duplicate_effects;
        for (k, n) in &o.stops {
            *self.stops.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.clock_steps {
            *self.clock_steps.entry(k.clone()).or_default() += n;
        }
        self.job_runs += o.job_runs;
        self.started_before_slot += o.started_before_slot;
        self.ahead_resumed += o.ahead_resumed;
        self.tokens_reissued += o.tokens_reissued;
        self.held_for_person += o.held_for_person;
        self.failovers_seen += o.failovers_seen;
        self.alive_past_deadline += o.alive_past_deadline;
        for (k, d) in &o.double_faults {
            self.double_faults.entry(k.clone()).or_default().add(d);
        }
        self.longest_retry_ms = self.longest_retry_ms.max(o.longest_retry_ms);
        for (k, n) in &o.containment {
            *self.containment.entry(k.clone()).or_default() += n;
        }
        self.host_clash_events += o.host_clash_events;
        self.pids_reused += o.pids_reused;
        self.live_senders_in_flight += o.live_senders_in_flight;
        self.far_side_refused += o.far_side_refused;
        self.pause_duplicates_without_dedupe += o.pause_duplicates_without_dedupe;
        for (k, n) in &o.runs_per_firing {
            *self.runs_per_firing.entry(*k).or_default() += n;
        }
        self.max_runs_per_firing = self.max_runs_per_firing.max(o.max_runs_per_firing);
        self.firings_gave_up += o.firings_gave_up;
        self.overlapping_copies += o.overlapping_copies;
        self.double_runs += o.double_runs;
        self.ends_after_a_stop += o.ends_after_a_stop;
        self.runs_not_started += o.runs_not_started;
        self.lost_effects += o.lost_effects;
        self.unknown_resolved += o.unknown_resolved;
        self.unknown_unresolved += o.unknown_unresolved;
        self.unexplained_unknowns += o.unexplained_unknowns;
        self.claimed_leaked += o.claimed_leaked;
        self.fenced_writes += o.fenced_writes;
        self.duplicates_suppressed += o.duplicates_suppressed;
        self.late_writes_accepted += o.late_writes_accepted;
        self.unapproved_sends += o.unapproved_sends;
        self.observer_cant_tell += o.observer_cant_tell;
        self.mid_effect_strikes += o.mid_effect_strikes;
        self.anomalies += o.anomalies;
        for f in &o.failures {
            self.fail(f.clone());
        }
    }
}

/// The whole run's result, as `--json` prints it.
#[derive(Debug, Serialize)]
pub(super) struct Report {
    pub(super) iterations_per_scenario: u32,
    pub(super) seed: u64,
    pub(super) guarded: bool,
    pub(super) db: String,
    #[serde(flatten)]
    pub(super) total: Tally,
    pub(super) ok: bool,
    /// Scenarios that could not run here, with why: not passed, not failed.
    pub(super) not_run: BTreeMap<String, String>,
    pub(super) scenarios: BTreeMap<String, Tally>,
}

fn secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

pub(super) fn table(r: &Report, a: &ChaosArgs) -> String {
    let mut s = scenario_rows(r, a);
    fault_lines(&mut s, r);
    use std::fmt::Write as _;
    for f in &r.total.failures {
        let _ = writeln!(s, "  ! {}", inert(f));
    }
    let _ = writeln!(s, "{}", verdict(r));
    for (name, why) in &r.not_run {
        let _ = writeln!(s, "NOT RUN (not passed): {name}: {}", inert(why));
    }
    s
}

/// The head line and a row per scenario, then the total's row and its kills and far side.
fn scenario_rows(r: &Report, a: &ChaosArgs) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "exactly chaos: {} iterations per scenario, seed {}{}",
        a.iterations,
        r.seed,
        if r.guarded {
            ""
        } else {
            ", UNGUARDED self-check (no ledger)"
        }
    );
    let _ = writeln!(
        s,
        "{:<24}{:>6}{:>7}{:>6}{:>6}{:>10}{:>10}{:>8}{:>8}{:>12}{:>9}",
        "scenario",
        "iters",
        "kills",
        "dups",
        "lost",
        "unk-res",
        "unk-open",
        "leaked",
        "fenced",
        "suppressed",
        "time"
    );
    let row = |s: &mut String, name: &str, t: &Tally| {
        let _ = writeln!(
            s,
            "{:<24}{:>6}{:>7}{:>6}{:>6}{:>10}{:>10}{:>8}{:>8}{:>12}{:>9}",
            name,
            t.iterations,
            t.kills.values().sum::<u64>(),
            t.duplicate_effects,
            t.lost_effects,
            t.unknown_resolved,
            t.unknown_unresolved,
            t.claimed_leaked,
            t.fenced_writes,
            t.duplicates_suppressed,
            secs(t.wall_ms)
        );
    };
    for name in SCENARIOS {
        match r.scenarios.get(*name) {
            Some(Tally {
                not_run: Some(why), ..
            }) => {
                let _ = writeln!(s, "{name:<24}NOT RUN: {}", inert(why));
            }
            Some(t) => row(&mut s, name, t),
            None => {}
        }
    }
    row(&mut s, "total", &r.total);
    let kills: Vec<String> = r
        .total
        .kills
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(s, "kills per point: {}", kills.join(", "));
    let _ = writeln!(
        s,
        "far side: {} requests for {} intended effects",
        r.total.far_side_requests, r.total.intended_effects
    );
    s
}

/// The scheduler's and the approvals' lines, when they ran, then each scenario's own.
fn fault_lines(s: &mut String, r: &Report) {
    use std::fmt::Write as _;
    if !r.total.runs_per_firing.is_empty() {
        let per: Vec<String> = r
            .total
            .runs_per_firing
            .iter()
            .map(|(runs, n)| format!("{n}×{runs}"))
            .collect();
        let _ = writeln!(
            *s,
            "scheduler: firings by runs {} (most {}), {} gave up, {} overlapping copies seen",
            per.join(", "),
            r.total.max_runs_per_firing,
            r.total.firings_gave_up,
            r.total.overlapping_copies
        );
    }
    if r.total.double_runs > 0
        || r.total.runs_not_started > 0
        || r.scenarios.contains_key("overload")
    {
        let _ = writeln!(
            *s,
            "runs: {} started, {} double runs (run again after an ok run), {} stopped at their \
             deadline as they finished (run again), {} never started \
             (recorded not_started, firing missed)",
            r.total.job_runs,
            r.total.double_runs,
            r.total.ends_after_a_stop,
            r.total.runs_not_started
        );
    }
    if r.scenarios.contains_key("decide-ahead") || r.total.started_before_slot > 0 {
        let _ =
            writeln!(
            *s,
            "decided ahead: {} slot(s) struck between decision and slot, {} of them run once by \
             the next scheduler; {} command(s) started before their slot (must be 0)",
            r.total.kills.get("scheduler_sigkill_before_slot").unwrap_or(&0),
            r.total.ahead_resumed,
            r.total.started_before_slot
        );
    }
    if r.scenarios.contains_key("approval-race") || r.total.unapproved_sends > 0 {
        let _ = writeln!(
            *s,
            "unapproved sends (before an approval or after a denial): {}",
            r.total.unapproved_sends
        );
    }
    if !r.total.stops.is_empty() {
        let stops: Vec<String> = r
            .total
            .stops
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(*s, "paused (SIGSTOP): {}", stops.join(", "));
    }
    scenario_lines(s, r);
}

/// The lines of the scenarios that count a fault of their own (failover, host clash, pid
/// reuse, another user, pause, escapes, double faults).
fn scenario_lines(s: &mut String, r: &Report) {
    use std::fmt::Write as _;
    if r.scenarios.contains_key("failover") {
        let _ = writeln!(
            *s,
            "failover: {} fencing token(s) handed out twice (must be 0), {} effect(s) held for a \
             person, {} failover event(s) recorded",
            r.total.tokens_reissued, r.total.held_for_person, r.total.failovers_seen
        );
    }
    if r.scenarios.contains_key("host-clash") {
        let _ = writeln!(
            *s,
            "host_clash events recorded: {}",
            r.total.host_clash_events
        );
    }
    if r.scenarios.contains_key("pid-reuse") {
        let _ = writeln!(
            *s,
            "dead senders' pids taken by another process: {}",
            r.total.pids_reused
        );
    }
    if r.scenarios.contains_key("other-user") {
        let _ = writeln!(
            *s,
            "another user's live sender answered in flight: {}",
            r.total.live_senders_in_flight
        );
    }
    if r.scenarios.contains_key("pause") {
        let _ = writeln!(
            *s,
            "pause: {} duplicates with the far side's dedupe/fencing ({} requests refused); \
             without it: {} (the documented limit)",
            r.scenarios.get("pause").map_or(0, |p| p.duplicate_effects),
            r.total.far_side_refused,
            r.total.pause_duplicates_without_dedupe
        );
    }
    if r.total.alive_past_deadline > 0
        || r.scenarios
            .keys()
            .any(|k| super::escape::NAMES.contains(&k.as_str()))
    {
        let _ = writeln!(
            *s,
            "commands alive past their lease's deadline (their own stamps): {}",
            r.total.alive_past_deadline
        );
    }
    for (name, d) in &r.total.double_faults {
        let _ = writeln!(
            *s,
            "double fault {name}: {} iterations, {} duplicates without the far side's fence, {} \
             with it, {} commands alive past their deadline",
            d.iterations,
            d.unfenced_duplicates,
            d.fenced_duplicates
                .map_or("not measured (no --fence)".to_string(), |n| n.to_string()),
            d.alive_past_deadline
        );
    }
    if r.total.late_writes_accepted > 0 {
        let _ = writeln!(
            *s,
            "late writes accepted after a stolen lease: {}",
            r.total.late_writes_accepted
        );
    }
}

/// The last line: PASS, UNGUARDED or FAIL with what failed.
fn verdict(r: &Report) -> String {
    let t = &r.total;
    if r.ok {
        format!(
            "PASS: 0 duplicate effects, 0 lost, 0 leaked; {} unknowns, all resolved",
            t.unknown_resolved
        )
    } else if !r.guarded {
        format!(
            "UNGUARDED: {} duplicate effects observed without the ledger \
             (the harness can see them)",
            t.duplicate_effects
        )
    } else {
        format!(
            "FAIL: {} duplicate, {} lost, {} leaked, {} unexplained unknown, {} late writes \
             accepted, {} unapproved sends, {} anomalies, {} most runs of a firing, \
             {} overlapping copies, {} double runs, {} alive past their deadline",
            t.duplicate_effects,
            t.lost_effects,
            t.claimed_leaked,
            t.unexplained_unknowns,
            t.late_writes_accepted,
            t.unapproved_sends,
            t.anomalies,
            t.max_runs_per_firing,
            t.overlapping_copies,
            t.double_runs,
            t.alive_past_deadline
        )
    }
}

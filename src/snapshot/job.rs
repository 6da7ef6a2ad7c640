//! One job as a person is shown it ([`JobRow`]), built from what the store read of it
//! ([`JobFacts`]): its state in a word, its next firing and the slots it missed, its warnings.
use crate::store::rows::{JobFacts, JobSettings, ParsedSchedule, Replaced, RunRow};
use exactly_words::schedule::DstShown;
use exactly_words::state::RunOutcome;
use exactly_words::time::{human_age, human_ms, Ts};
use serde::Serialize;
use std::collections::BTreeMap;

/// One job as the dashboard, `status` and the metrics show it: the store's [`JobFacts`], and
/// what the snapshot derives from them (next firing, missed slots, DST, warnings).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobRow {
    /// The job's name, the key of its lease.
    pub job_key: String,
    /// How it fires and holds its lease.
    #[serde(flatten)]
    pub settings: JobSettings,
    /// Its schedule as parsed at the store's door (zone and DST policy applied), or why this
    /// build cannot read it: what [`plan`] reads. Not part of the JSON.
    #[serde(skip)]
    pub schedule: Option<ParsedSchedule>,
    /// A cron job's daylight-saving policy in its zone; absent for other jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<DstShown>,
    /// Runs in the run window.
    pub runs: u64,
    /// Median run duration in the run window (ms): each run's command's own, from its start to
    /// the run's end (runs recorded before schema version 8: from the run's recorded start).
    pub p50_ms: Option<u64>,
    /// 99th-percentile run duration in the run window (ms).
    pub p99_ms: Option<u64>,
    /// Median start lag in the run window (ms): from a run's recorded start to its command's
    /// start, the scheduler's part, not in the durations (runs from schema 8 on).
    pub start_lag_p50_ms: Option<u64>,
    /// 99th-percentile start lag in the run window (ms).
    pub start_lag_p99_ms: Option<u64>,
    /// The longest any run's lease in the run window went without a renewal (ms).
    pub renewal_gap_max_ms: Option<u64>,
    /// Whether a scheduler registered the job (a jobs file): its runs' leases are renewed by
    /// heartbeat, so a run may outlast the lease. Otherwise its lease is held by a wrapper or
    /// a program (`lease claim`, the library) and renewed only if that holder does.
    pub lease_renewed: bool,
    /// For a lease nobody renews: the 99th-percentile time a holder held it (claim to
    /// release, holds without a renewal, in the run window, ms).
    pub hold_p99_ms: Option<u64>,
    /// For a lease nobody renews: the lease its newest such hold claimed (ms).
    pub hold_lease_ms: Option<u64>,
    /// The durations (ms) behind p50/p99: the job's runs in the duration window.
    #[serde(skip)]
    pub durations_ms: Vec<i64>,
    /// The newest fencing token issued for the job.
    pub fencing_token: Option<i64>,
    /// Who holds the lease; None when released.
    pub lease_owner: Option<String>,
    /// When the lease ends; past it, anyone may claim the job.
    #[serde(serialize_with = "crate::store::rows::ser_ts_opt")]
    pub lease_until: Option<Ts>,
    /// Seconds until the lease expires (negative: expired); None when released or never held.
    pub lease_left_s: Option<i64>,
    /// Its newest run waits for its slot (decided ahead): its lease is held, nothing runs yet.
    #[serde(skip)]
    pub run_pending: bool,
    /// Whether its firings are skipped until it is resumed.
    pub paused: bool,
    /// The note left with its latest pause.
    pub pause_note: Option<String>,
    /// Whether it was removed from the jobs file: it no longer fires.
    pub retired: bool,
    /// Firings queued, waiting for the live run to end.
    pub queue_depth: u64,
    /// Its newest run.
    pub last_run: Option<RunRow>,
    /// The next firing: after the latest slot fired (in the past when no scheduler fired it).
    #[serde(serialize_with = "crate::store::rows::ser_ts_opt")]
    pub next_fire_at: Option<Ts>,
    /// When the latest `ok` run ended.
    #[serde(serialize_with = "crate::store::rows::ser_ts_opt")]
    pub last_success_at: Option<Ts>,
    /// Runs in the run window that ended `failed` or `timeout`.
    pub runs_failed: u64,
    /// Its newest runs that failed, in a row (within the run window); `pause_after_failures`
    /// counts the same, since the job was last resumed.
    pub consecutive_failures: u64,
    /// Its finished runs that failed since its newest `ok` run (runs that say nothing of the
    /// job, and a run under way, neither count nor end it): a failing episode is open while
    /// this is above 0 (see [`JobRow::state`]).
    #[serde(skip)]
    pub failed_since_ok: u64,
    /// Why it is paused (the pause's note: the operator's, or the failure policy's); None when
    /// it is not paused.
    pub paused_reason: Option<String>,
    /// All-time runs per outcome (kept by counters, so pruning history keeps them), in the
    /// order of their words; an outcome word this build does not know is kept as
    /// [`RunOutcome::Other`].
    #[serde(serialize_with = "outcome_counts")]
    pub runs_by_outcome: BTreeMap<RunOutcome, u64>,
    /// All-time ended runs per duration bucket ([`RUN_BUCKETS_MS`](crate::snapshot::RUN_BUCKETS_MS), then one past the last),
    /// not cumulative, and their durations' sum: kept by counters, so they never go down.
    #[serde(skip)]
    pub run_duration_counts: Vec<u64>,
    /// The sum of all its ended runs' durations (ms), all time.
    #[serde(skip)]
    pub run_duration_sum_ms: u64,
    /// Firings missed: recorded by a scheduler, plus those passed since with no scheduler to
    /// run them (`missed_unrecorded`, counted by the reader).
    pub missed_firings: u64,
    /// Slots passed with no scheduler to fire them, not yet recorded as missed.
    pub missed_unrecorded: u64,
    /// Its effects not sent again because the ledger held their effect key.
    pub duplicates_suppressed: u64,
    /// Its writes refused because a higher fencing token held the job.
    pub fenced_writes: u64,
    /// Firings that used up their runs (three) without finishing.
    pub firings_gave_up: u64,
    /// Firings marked to run again (their run failed with retries left, or an observer found
    /// an effect never happened, or its approval came) that have not run yet.
    pub firings_need_retry: u64,
    /// One such firing's own reason (its firing row's detail).
    #[serde(skip)]
    pub retry_detail: Option<String>,
    /// What a person should look at, in sentences.
    pub warnings: Vec<String>,
    /// Each warning's reason in a word (`failing`, `p99>lease`, …), in the order of
    /// `warnings`: what a narrow screen shows in the row itself. Not part of the JSON.
    #[serde(skip)]
    pub warning_tags: Vec<&'static str>,
    /// Facts the store reads for [`plan`]: the latest slot fired (or the last
    /// run's), the catch-up window, the misses a scheduler recorded. Not part of the JSON.
    #[serde(skip)]
    pub last_slot: Option<Ts>,
    /// How long after its slot a firing may still start (s); later, it is missed.
    #[serde(skip)]
    pub catchup_s: i64,
    /// Firings a scheduler recorded missed.
    #[serde(skip)]
    pub missed_recorded: u64,
    /// A live scheduler's different definition the newest registration replaced (a warning
    /// while that scheduler is alive: `runner::definitions`).
    #[serde(skip)]
    pub replaced: Option<Replaced>,
}

/// What a job is doing, in one word: the one judgement `jobs`, `top`, `status`, `status
/// --check`, the metrics and the notifier all show ([`JobRow::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Removed from its jobs file: it no longer fires.
    Retired,
    /// Paused: its firings are skipped until it is resumed.
    Paused,
    /// A run is under way (it has no outcome yet), or a live lease is held on the job (a
    /// scheduler's run, a cron wrapper's `exactly lease claim`, a library claim).
    Running,
    /// Its newest run stopped at an effect that waits for a person's approval (outcome
    /// `awaiting_approval`): `exactly approve` sends it, `exactly deny` ends the firing.
    AwaitingApproval,
    /// Its newest finished run that failed or succeeded failed (`failed`, `timeout`): a
    /// failing episode is open.
    Failing,
    /// Its newest run ended and no failure is open.
    Ok,
    /// It never ran.
    Idle,
}

impl JobState {
    /// The word in JSON (`state`) and metrics: `retired`, `paused`, `running`,
    /// `awaiting_approval`, `failing`, `ok`, `idle`.
    pub fn word(self) -> &'static str {
        match self {
            JobState::Retired => "retired",
            JobState::Paused => "paused",
            JobState::Running => "running",
            JobState::AwaitingApproval => "awaiting_approval",
            JobState::Failing => "failing",
            JobState::Ok => "ok",
            JobState::Idle => "idle",
        }
    }

    /// The words a person reads (`jobs`, `top`, `status`): the JSON word, but `waiting for
    /// approval`.
    pub fn label(self) -> &'static str {
        match self {
            JobState::AwaitingApproval => "waiting for approval",
            s => s.word(),
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl Serialize for JobState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.word())
    }
}

impl JobRow {
    /// What the job is doing, in one word: retired, then paused, then running (its newest run
    /// has no outcome yet, or anyone holds a live lease on it — not one taken for a run that
    /// waits for its slot, decided ahead of it), then waiting for approval (its
    /// newest run's outcome), then failing (an episode is open: [`JobRow::failing_episode`]),
    /// then ok; idle when it never ran.
    pub fn state(&self) -> JobState {
        let outcome = self.last_run.as_ref().map(|r| r.outcome.as_ref());
        let leased = self.lease_owner.is_some()
            && self.lease_left_s.is_some_and(|l| l > 0)
            && !self.run_pending;
        if self.retired {
            JobState::Retired
        } else if self.paused {
            JobState::Paused
        } else if leased || matches!(outcome, Some(None)) {
            JobState::Running
        } else if matches!(outcome, Some(Some(RunOutcome::AwaitingApproval))) {
            JobState::AwaitingApproval
        } else if self.failing_episode().is_some() {
            JobState::Failing
        } else if outcome.is_some() {
            JobState::Ok
        } else {
            JobState::Idle
        }
    }

    /// The job's open failing episode: its newest finished run that failed or succeeded
    /// failed. A run under way, and runs that say nothing of the job (killed by a deploy,
    /// fenced, not started, waiting for approval), never end it; only a finished `ok` run
    /// does. Its key is the job and its last success before the failures (`never` when it
    /// never succeeded): read from the runs, so every reader and every scheduler, restarted
    /// or not, names one episode alike. `(key, failed runs since that success)`.
    pub fn failing_episode(&self) -> Option<(String, u64)> {
        if self.failed_since_ok == 0 || self.retired {
            return None;
        }
        let since = self
            .last_success_at
            .map_or_else(|| "never".to_string(), exactly_words::time::fmt);
        Some((
            format!("{}@after-ok:{since}", self.job_key),
            self.failed_since_ok,
        ))
    }
}

/// The one count of registered jobs every output gives (`status`, `status --check` and its
/// perfdata, `exactly_jobs_registered`): jobs a jobs file registered (they have a schedule) and
/// not retired, paused ones included, which are said apart: "2 jobs registered (1 paused)".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// Jobs with a schedule, not retired.
    pub jobs: usize,
    /// Of those, the paused.
    pub paused: usize,
}

impl Registered {
    /// The count of a snapshot's jobs.
    pub fn of(jobs: &[JobRow]) -> Registered {
        let live = jobs
            .iter()
            .filter(|j| j.settings.schedule.is_some() && !j.retired);
        let (mut n, mut paused) = (0, 0);
        for j in live {
            n += 1;
            paused += usize::from(j.paused);
        }
        Registered { jobs: n, paused }
    }

    /// "2 jobs registered, 1 paused", for a place already in parentheses.
    pub fn listed(&self) -> String {
        self.to_string().replace(" (", ", ").replace(')', "")
    }
}

impl std::fmt::Display for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = if self.jobs == 1 { "job" } else { "jobs" };
        write!(f, "{} {s} registered", self.jobs)?;
        if self.paused > 0 {
            write!(f, " ({} paused)", self.paused)?;
        }
        Ok(())
    }
}

/// When a job fires next: after the latest slot any scheduler fired (or the last run's), so a
/// job nobody fires shows a next firing in the past; and the slots past its catch-up window
/// that no scheduler fired, misses a scheduler will record when it starts again (a paused
/// job's are skipped, not missed). Read from the registry's schedule.
pub fn plan(j: &mut JobRow, now: Ts) {
    // A schedule this build cannot read fires nothing here either (`check` says why).
    let schedule = j
        .schedule
        .as_ref()
        .filter(|_| !j.retired)
        .map(ParsedSchedule::get);
    if let Some(Ok(schedule)) = schedule {
        let last_slot = j.last_slot;
        // A slot fired ahead of now (a clock since stepped back) is not where firing resumes:
        // the scheduler goes on from the new time (see runner/scheduler/clock_steps.rs).
        let next = schedule.next_after(last_slot.map_or(now, |l| l.min(now)));
        j.next_fire_at = next;
        if let (Some(last), false) = (last_slot, j.paused) {
            let grace = j.catchup_s.max(0) + exactly_words::schedule::LATE_OK.as_secs() as i64;
            let horizon = now - chrono::Duration::seconds(grace);
            j.missed_unrecorded = passed_slots(schedule, last, horizon);
        }
    }
    j.missed_firings = j.missed_recorded + j.missed_unrecorded;
}

/// Most slots counted as passed-unfired per job and poll (a minutely cron dead for a year).
const UNRECORDED_MAX: u64 = 1_000;

/// Slots in `(last, upto]`, counted up to [`UNRECORDED_MAX`].
fn passed_slots(schedule: &exactly_words::schedule::Schedule, last: Ts, upto: Ts) -> u64 {
    if let exactly_words::schedule::Schedule::Every { .. } = schedule {
        return schedule.slots(last, upto, 0).1;
    }
    let mut n = 0;
    let mut at = last;
    while let Some(next) = schedule.next_after(at) {
        if next > upto || n >= UNRECORDED_MAX {
            break;
        }
        n += 1;
        at = next;
    }
    n
}

/// The overlap forecast and a failing job, as warnings a person can act on, each with its
/// reason in a word (see [`JobRow::warning_tags`]).
pub fn job_warnings(j: &JobRow) -> Vec<(&'static str, String)> {
    let mut w = Vec::new();
    if let Some((_, failed)) = j.failing_episode() {
        let last = match &j.last_run {
            Some(r) if r.outcome.as_ref().is_some_and(|o| o.is_failure()) => format!(
                "last run {}{}",
                r.outcome_or_running(),
                r.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default()
            ),
            Some(r) => format!(
                "{failed} run(s) failed since its last success; its newest run is {}",
                r.outcome_or_running()
            ),
            None => format!("{failed} run(s) failed since its last success"),
        };
        w.push((
            "failing",
            format!(
                "{last}; {} of {} runs failed in the window",
                j.runs_failed, j.runs
            ),
        ));
    }
    if j.firings_gave_up > 0 {
        w.push((
            "gave up",
            format!(
                "{} firing(s) gave up after {} runs: check their effects by hand",
                j.firings_gave_up,
                exactly_words::policy::MAX_ATTEMPTS
            ),
        ));
    }
    if j.firings_need_retry > 0 {
        let why = j
            .retry_detail
            .as_deref()
            .map(exactly_words::sanitize::inert)
            .unwrap_or_else(|| "marked to run again".into());
        let then = if j.paused {
            format!(
                "the job is paused: they wait for `exactly resume {}`",
                exactly_words::sanitize::inert(&j.job_key)
            )
        } else {
            "a scheduler re-runs them".into()
        };
        w.push((
            "retry",
            format!(
                "{} firing(s) to run again ({why}); {then}",
                j.firings_need_retry
            ),
        ));
    }
    if let (Some(p99), Some(interval)) = (j.p99_ms, j.settings.interval_s) {
        if interval > 0 && p99 > (interval as u64) * 1000 {
            w.push((
                "p99>iv",
                format!(
                    "p99 {} > interval {}: a queue, not a schedule",
                    human_ms(p99),
                    human_age(interval)
                ),
            ));
        }
    }
    w.extend(lease_warnings(j));
    if let (Some(lease), Some(interval)) = (j.settings.lease_ms, j.settings.interval_s) {
        if interval > 0 && lease >= interval * 1000 {
            w.push((
                "lease>=iv",
                format!(
                    "lease {} >= interval {}: a crashed run blocks the next firing",
                    human_ms(lease as u64),
                    human_age(interval)
                ),
            ));
        }
    }
    w
}

/// What can happen to a job's lease, as warnings. A lease the scheduler renews (a job a jobs
/// file registered: `exactly run` renews each run's lease every third of it) is outlasted by
/// long runs as a matter of course: what is at risk is the renewal, so a late renewal (the
/// longest gap between renewals past half the lease: a renewal came a sixth of the lease or
/// more after it was due) and a lease too short to ride out a stall (where the interval leaves
/// room for a longer one) are said. A lease nobody
/// renews (a wrapper's or a program's `lease claim`) is taken from a holder that outlasts it:
/// its hold durations' p99 past the lease is said. (The lease against the interval is
/// [`job_warnings`]'s.)
pub fn lease_warnings(j: &JobRow) -> Vec<(&'static str, String)> {
    use crate::lease::{unrenewed_for_at_most, RENEWALS_PER_LEASE, RENEWED_LEASE_MIN_BEATS};
    use std::time::Duration;
    let mut w = Vec::new();
    if !j.lease_renewed {
        if let (Some(p99), Some(lease)) = (j.hold_p99_ms, j.hold_lease_ms) {
            if lease > 0 && p99 > lease {
                w.push((
                    "p99>lease",
                    format!(
                        "p99 hold {} > lease {}, which nothing renews: a live holder's job will \
                         be taken over",
                        human_ms(p99),
                        human_ms(lease)
                    ),
                ));
            }
        }
        return w;
    }
    let Some(lease) = j.settings.lease_ms.filter(|l| *l > 0) else {
        return w;
    };
    let lease = Duration::from_millis(lease as u64);
    let every = lease / RENEWALS_PER_LEASE;
    let stopped_at = unrenewed_for_at_most(lease);
    let ms = |d: Duration| human_ms(d.as_millis() as u64);
    let min = crate::lease::SCHEDULER_BEAT * RENEWED_LEASE_MIN_BEATS;
    let interval = j
        .settings
        .interval_s
        .map(|iv| Duration::from_secs(iv.max(0) as u64));
    if crate::lease::renewal_margin_thin(lease, interval) {
        w.push((
            "lease<6s",
            format!(
                "lease {} under {RENEWED_LEASE_MIN_BEATS} scheduler heartbeats ({}): renewed \
                 every {}, a run is stopped after {} without a renewal, so a stall of {} \
                 stops it: too little renewal margin",
                ms(lease),
                ms(min),
                ms(every),
                ms(stopped_at),
                ms(stopped_at.saturating_sub(every))
            ),
        ));
    }
    if let Some(gap) = j.renewal_gap_max_ms.map(Duration::from_millis) {
        if gap > lease / 2 {
            w.push((
                "renew gap",
                format!(
                    "a lease renewal came late: {} without one (due every {}; a run is \
                     stopped at {})",
                    ms(gap),
                    ms(every),
                    ms(stopped_at)
                ),
            ));
        }
    }
    w
}

impl JobRow {
    /// The job as shown at `now`: the store's facts, its next firing and the slots it missed
    /// ([`plan`]), and its warnings.
    pub fn of(facts: JobFacts, now: Ts) -> JobRow {
        let mut j = JobRow::from_facts(facts);
        j.derive(now);
        j
    }

    /// Derives what the facts say at `now`: the next firing, the slots missed, the warnings.
    pub fn derive(&mut self, now: Ts) {
        plan(self, now);
        (self.warning_tags, self.warnings) = job_warnings(self).into_iter().unzip();
    }

    /// The store's facts as a row, nothing derived yet (no next firing, no warnings).
    pub fn from_facts(f: JobFacts) -> JobRow {
        JobRow {
            job_key: f.job_key.into(),
            settings: f.settings,
            schedule: f.schedule,
            dst: f.dst,
            runs: f.runs,
            p50_ms: f.p50_ms,
            p99_ms: f.p99_ms,
            start_lag_p50_ms: f.start_lag_p50_ms,
            start_lag_p99_ms: f.start_lag_p99_ms,
            renewal_gap_max_ms: f.renewal_gap_max_ms,
            lease_renewed: f.lease_renewed,
            hold_p99_ms: f.hold_p99_ms,
            hold_lease_ms: f.hold_lease_ms,
            durations_ms: f.durations_ms,
            fencing_token: f.fencing_token,
            lease_owner: f.lease_owner,
            lease_until: f.lease_until,
            lease_left_s: f.lease_left_s,
            run_pending: f.run_pending,
            paused: f.paused,
            pause_note: f.pause_note,
            retired: f.retired,
            queue_depth: f.queue_depth,
            last_run: f.last_run,
            next_fire_at: None,
            last_success_at: f.last_success_at,
            runs_failed: f.runs_failed,
            consecutive_failures: f.consecutive_failures,
            failed_since_ok: f.failed_since_ok,
            paused_reason: f.paused_reason,
            runs_by_outcome: f.runs_by_outcome,
            run_duration_counts: f.run_duration_counts,
            run_duration_sum_ms: f.run_duration_sum_ms,
            missed_firings: 0,
            missed_unrecorded: 0,
            duplicates_suppressed: f.duplicates_suppressed,
            fenced_writes: f.fenced_writes,
            firings_gave_up: f.firings_gave_up,
            firings_need_retry: f.firings_need_retry,
            retry_detail: f.retry_detail,
            warnings: Vec::new(),
            warning_tags: Vec::new(),
            last_slot: f.last_slot,
            catchup_s: f.catchup_s,
            missed_recorded: f.missed_recorded,
            replaced: f.replaced,
        }
    }
}

/// The counts by outcome as the JSON has always shown them: an object, keyed by the word.
fn outcome_counts<S: serde::Serializer>(
    v: &BTreeMap<RunOutcome, u64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(v.len()))?;
    for (outcome, n) in v {
        m.serialize_entry(outcome.as_str(), n)?;
    }
    m.end()
}

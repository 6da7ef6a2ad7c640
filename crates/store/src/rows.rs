//! The rows the store reads for the snapshot and the detail views: plain values in the store's
//! own words. `exactly::snapshot` builds the `exactly::snapshot::Snapshot` from a [`Reading`]
//! and shows these rows to the library's users under its own name.
use super::ApprovalRow;
use exactly_words::policy::Overlap;
use exactly_words::schedule::DstShown;
use exactly_words::state::{ApprovalState, EffectState, EventKind, RunOutcome};
use exactly_words::time::Ts;
use exactly_words::EffectKey;
use serde::Serialize;
use std::collections::BTreeMap;

/// A time column read at the store's door: NULL is None, text that is not a time is
/// [`DbError::Corrupt`](super::db::DbError) naming the column and the value, never a guess.
pub(crate) fn ts(
    r: &super::db::Row<'_>,
    idx: usize,
    column: &'static str,
) -> super::db::DbResult<Option<Ts>> {
    super::text(r, idx)?
        .map(|t| time_in(column, &t))
        .transpose()
}

/// A time column that is never NULL (see [`ts`]).
pub(crate) fn ts_req(
    r: &super::db::Row<'_>,
    idx: usize,
    column: &'static str,
) -> super::db::DbResult<Ts> {
    time_in(column, &super::text_or_empty(r, idx)?)
}

/// A firing's slot, a key of its row (`(job_key, scheduled_at)`): a time in the fixed-width
/// form [`exactly_words::time::fmt`] writes, else [`DbError::Corrupt`](super::db::DbError). The
/// slot is written back with `fmt` to find its row again, so text in another form would
/// match no row and leave the firing undecided.
pub(crate) fn slot(
    r: &super::db::Row<'_>,
    idx: usize,
    column: &'static str,
) -> super::db::DbResult<Ts> {
    let text = super::text_or_empty(r, idx)?;
    let t = time_in(column, &text)?;
    if exactly_words::time::fmt(t) != text {
        return Err(super::db::DbError::Corrupt(format!(
            "{column} holds {:?}, not a slot in the fixed-width form",
            exactly_words::sanitize::inert_trunc(&text, 40)
        )));
    }
    Ok(t)
}

/// `text`, read from `column`, as a time; [`DbError::Corrupt`](super::db::DbError) if it is not.
pub(crate) fn time_in(column: &str, text: &str) -> super::db::DbResult<Ts> {
    exactly_words::time::parse(text).ok_or_else(|| {
        super::db::DbError::Corrupt(format!(
            "{column} holds {:?}, not a time",
            exactly_words::sanitize::inert_trunc(text, 40)
        ))
    })
}

/// Serializes a time in the fixed-width text every stored instant is written in
/// ([`exactly_words::time::fmt`]), as the JSON has always shown it.
pub fn ser_ts<S: serde::Serializer>(t: &Ts, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&exactly_words::time::fmt(*t))
}

/// [`ser_ts`] for a time that may be absent (`null`).
pub fn ser_ts_opt<S: serde::Serializer>(t: &Option<Ts>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => ser_ts(t, s),
        None => s.serialize_none(),
    }
}

/// Counters over one window (all time, or the last 24 h).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Window {
    /// Effects not sent again because the ledger already held their effect key.
    pub duplicates_suppressed: u64,
    /// Writes refused because a higher fencing token holds the job.
    pub fenced_writes: u64,
    /// `claimed` effects whose lease is gone: reserved, then abandoned, nothing sent.
    pub claimed_never_submitted: u64,
    /// Open effects: `unknown`, or `submitted` by a holder whose lease is gone.
    pub unknown: u64,
    /// Approvals waiting for a person's decision.
    pub pending_approvals: u64,
    /// Approvals granted but not yet consumed by a send.
    pub unused_approvals: u64,
}

/// Everything one short read transaction of the snapshot reads, as the store found it; the
/// snapshot derives from it what a person is told (warnings, next firings, missed slots).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// The database's clock when read (the server's, on PostgreSQL).
    pub taken_at: Ts,
    /// The database read, as its path or URL.
    pub db: String,
    /// `PRAGMA user_version` (or the schema table's version) of the database read.
    pub schema_version: i64,
    /// Every `exactly run` process that recorded itself.
    pub schedulers: Vec<SchedulerRow>,
    /// Counters over all time.
    pub totals: Window,
    /// Counters over the last 24 hours.
    pub last_24h: Window,
    /// Age in seconds of the oldest open effect.
    pub oldest_unknown_s: Option<i64>,
    /// Firings a scheduler recorded missed, all jobs, all time.
    pub missed_recorded: u64,
    /// Every job: registered, or known only by its lease.
    pub jobs: Vec<JobFacts>,
    /// Open effects, oldest first (at most a thousand).
    pub unknown: Vec<OpenEffect>,
    /// Approvals waiting for a decision, oldest first.
    pub pending_approvals: Vec<ApprovalView>,
    /// Approvals granted and not yet consumed, oldest first.
    pub unused_approvals: Vec<ApprovalView>,
    /// The newest events, most recent first.
    pub events: Vec<EventRow>,
    /// `host_clash` events in the last 24 h.
    pub host_clashes_24h: u64,
    /// `failover` events, all time.
    pub failovers: u64,
    /// The newest `failover` event: when, and its detail.
    pub last_failover: Option<(Ts, String)>,
    /// Notifications (`[[notify]]`) counted so far, per notifier, rule and outcome.
    pub notifications: Vec<NotificationCount>,
}

/// How many notifications of one notifier and rule ended one way (`sent`, `failed`), all time.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NotificationCount {
    /// The notifier's job, `exactly-notify:<name>`.
    pub notifier: String,
    /// The `[[notify]]` rule that fired the notification.
    pub rule: String,
    /// How it ended: `sent` or `failed`.
    pub outcome: String,
    /// How many notifications ended so.
    pub count: u64,
}

/// One `exactly run` process as it recorded itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedulerRow {
    /// The scheduler's name as lease owner (by default `user@host:pid`).
    pub owner: String,
    /// The host name it runs on.
    pub host: String,
    /// Its process id on that host.
    pub pid: i64,
    /// When it started.
    #[serde(serialize_with = "ser_ts")]
    pub started_at: Ts,
    /// Its latest heartbeat (every 2 s while it runs).
    #[serde(serialize_with = "ser_ts")]
    pub heartbeat_at: Ts,
    /// Set on a clean shutdown; a killed scheduler never sets it and just falls silent.
    #[serde(serialize_with = "ser_ts_opt")]
    pub ended_at: Option<Ts>,
    /// Whether it beat recently enough to count as running.
    pub alive: bool,
    /// The machine behind `host` (boot id / pid namespace); None from schedulers before it.
    pub host_id: Option<String>,
}

/// The upper bounds (ms) of the run-duration buckets the store counts, a tenth of a second to a
/// day (`store/schema.rs` words each one in SQL; a test there keeps the two equal).
pub const RUN_BUCKETS_MS: &[i64] = &[
    100, 500, 1_000, 5_000, 15_000, 30_000, 60_000, 300_000, 900_000, 1_800_000, 3_600_000,
    7_200_000, 21_600_000, 86_400_000,
];
/// How a job fires and holds its lease, as the registry keeps it: what its jobs file set, and
/// what `check`, `trigger`, `status` and the dashboard read back (a registry written by an
/// older version may lack some). The jobs file's typed form is the runner's `Job`, which says
/// its settings in this shape when it registers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobSettings {
    /// Its cron expression, when it fires on a calendar.
    pub schedule: Option<String>,
    /// The zone its cron schedule is read in (None: UTC).
    pub timezone: Option<String>,
    /// Seconds between firings, when it fires on an interval.
    pub interval_s: Option<i64>,
    /// How long each lease lasts, in whole seconds.
    pub lease_s: Option<i64>,
    /// The lease exactly (sub-second leases exist); `lease_s` is whole seconds.
    pub lease_ms: Option<i64>,
    /// Its overlap policy: what a firing does while a run is live (None: a word this build
    /// does not know).
    pub overlap: Option<Overlap>,
    /// How many firings may wait under the `queue` overlap policy.
    pub queue_cap: Option<i64>,
}

/// The registry's overlap word and queue cap as the policy (None: no word, or one this build
/// does not know).
pub(crate) fn overlap_of(word: Option<String>, cap: Option<i64>) -> Option<Overlap> {
    word.and_then(|w| Overlap::from_registry(&w, cap))
}

/// One job as the store reads it: its definition, lease, runs, firings and counters, typed
/// at the door. No view: the snapshot builds what a person is shown from it
/// (`exactly::snapshot::JobRow::of`: next firing, DST, warnings).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFacts {
    /// The job's name, the key of its lease.
    pub job_key: exactly_words::JobName,
    /// How it fires and holds its lease, as the registry keeps it.
    pub settings: JobSettings,
    /// Its schedule parsed (zone and DST policy applied), kept between polls; one this build
    /// cannot read is kept with the reason. None: no schedule.
    pub schedule: Option<ParsedSchedule>,
    /// A cron job's daylight-saving policy in its zone (the registry's `dst_repeated` and
    /// `dst_skipped`); None for other jobs.
    pub dst: Option<DstShown>,
    /// Runs in the run window.
    pub runs: u64,
    /// Median run duration in the run window (ms).
    pub p50_ms: Option<u64>,
    /// 99th-percentile run duration in the run window (ms).
    pub p99_ms: Option<u64>,
    /// Median start lag in the run window (ms).
    pub start_lag_p50_ms: Option<u64>,
    /// 99th-percentile start lag in the run window (ms).
    pub start_lag_p99_ms: Option<u64>,
    /// The longest any run's lease in the run window went without a renewal (ms).
    pub renewal_gap_max_ms: Option<u64>,
    /// Whether a scheduler registered the job (its runs' leases are renewed by heartbeat).
    pub lease_renewed: bool,
    /// For a lease nobody renews: the 99th-percentile hold (ms).
    pub hold_p99_ms: Option<u64>,
    /// For a lease nobody renews: the lease its newest such hold claimed (ms).
    pub hold_lease_ms: Option<u64>,
    /// The durations (ms) behind p50/p99.
    pub durations_ms: Vec<i64>,
    /// The newest fencing token issued for the job.
    pub fencing_token: Option<i64>,
    /// Who holds the lease; None when released.
    pub lease_owner: Option<String>,
    /// When the lease ends.
    pub lease_until: Option<Ts>,
    /// Seconds until the lease expires (negative: expired).
    pub lease_left_s: Option<i64>,
    /// Its newest run was decided ahead of its slot and waits for it: the lease is held, its
    /// command not started (read from the runs kept for the week; false for a job not there).
    pub run_pending: bool,
    /// Whether its firings are skipped until it is resumed.
    pub paused: bool,
    /// The note left with its latest pause.
    pub pause_note: Option<String>,
    /// Whether it was removed from the jobs file.
    pub retired: bool,
    /// Firings queued, waiting for the live run to end.
    pub queue_depth: u64,
    /// Its newest run.
    pub last_run: Option<RunRow>,
    /// When the latest `ok` run ended.
    pub last_success_at: Option<Ts>,
    /// Runs in the run window that ended `failed` or `timeout`.
    pub runs_failed: u64,
    /// Its newest runs that failed, in a row (within the run window).
    pub consecutive_failures: u64,
    /// Its finished runs that failed since its newest `ok` run.
    pub failed_since_ok: u64,
    /// Why it is paused; None when it is not paused.
    pub paused_reason: Option<String>,
    /// All-time runs per outcome, in the order of their words (an outcome word this build
    /// does not know kept as [`RunOutcome::Other`]).
    pub runs_by_outcome: BTreeMap<RunOutcome, u64>,
    /// All-time ended runs per duration bucket ([`RUN_BUCKETS_MS`], then one past the last).
    pub run_duration_counts: Vec<u64>,
    /// The sum of all its ended runs' durations (ms), all time.
    pub run_duration_sum_ms: u64,
    /// Its effects not sent again because the ledger held their effect key.
    pub duplicates_suppressed: u64,
    /// Its writes refused because a higher fencing token held the job.
    pub fenced_writes: u64,
    /// Firings that used up their runs without finishing.
    pub firings_gave_up: u64,
    /// Firings marked to run again that have not run yet.
    pub firings_need_retry: u64,
    /// One such firing's own reason (its firing row's detail).
    pub retry_detail: Option<String>,
    /// The latest slot fired (or the last run's).
    pub last_slot: Option<Ts>,
    /// How long after its slot a firing may still start (s).
    pub catchup_s: i64,
    /// Firings a scheduler recorded missed.
    pub missed_recorded: u64,
    /// A live scheduler's different definition the newest registration replaced (a warning
    /// while that scheduler is alive: `runner::config::definitions`).
    pub replaced: Option<Replaced>,
}

/// A registry schedule parsed at the store's door, with its zone and DST policy: parsed once
/// and kept between polls (`windows::Kept`), so a dashboard of 1,000 jobs does not parse them
/// every poll. One this build cannot read keeps the reason.
#[derive(Debug, Clone)]
pub struct ParsedSchedule {
    /// What it was parsed from: (schedule, zone, DST words).
    key: ScheduleKey,
    parsed: std::sync::Arc<
        Result<exactly_words::schedule::Schedule, exactly_words::schedule::ScheduleError>,
    >,
}

/// A registry schedule's words: its text, its zone, its DST policy's words.
pub(crate) type ScheduleKey = (String, Option<String>, Option<(&'static str, &'static str)>);

impl ParsedSchedule {
    /// Parses a registry schedule in its zone, under `dst` (a cron job's policy there).
    pub(crate) fn parse(schedule: &str, tz: Option<&str>, dst: Option<&DstShown>) -> Self {
        let parsed =
            exactly_words::schedule::Schedule::from_registry(schedule, tz).map(|s| match dst {
                Some(d) => s.with_dst(d.policy()),
                None => s,
            });
        ParsedSchedule {
            key: Self::key(schedule, tz, dst),
            parsed: std::sync::Arc::new(parsed),
        }
    }

    /// The words a schedule is parsed from, as a cache's key.
    pub(crate) fn key(schedule: &str, tz: Option<&str>, dst: Option<&DstShown>) -> ScheduleKey {
        (
            schedule.to_string(),
            tz.map(str::to_string),
            dst.map(|d| (d.repeated, d.skipped)),
        )
    }

    /// The schedule, or why this build cannot read it.
    pub fn get(
        &self,
    ) -> Result<&exactly_words::schedule::Schedule, &exactly_words::schedule::ScheduleError> {
        self.parsed.as_ref().as_ref()
    }
}

/// Two parsed schedules are equal when they were parsed from the same words.
impl PartialEq for ParsedSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

/// Whose definition of a job the newest registration (`by`, from `by_source`, `at`) replaced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replaced {
    /// The live scheduler whose definition was replaced.
    pub owner: String,
    /// Where that definition came from (its jobs file).
    pub source: Option<String>,
    /// The scheduler whose registration replaced it.
    pub by: Option<String>,
    /// Where the replacing definition came from.
    pub by_source: Option<String>,
    /// When it was replaced.
    pub at: Option<Ts>,
}

/// One run of a job's command.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunRow {
    /// The run's unique id.
    pub run_id: String,
    /// The job it ran.
    pub job_key: String,
    /// The slot its firing was scheduled for.
    #[serde(serialize_with = "ser_ts")]
    pub scheduled_at: Ts,
    /// The lease owner (scheduler) that ran it.
    pub owner: String,
    /// The fencing token of the lease it ran under.
    pub fencing_token: i64,
    /// When its command started.
    #[serde(serialize_with = "ser_ts")]
    pub started_at: Ts,
    /// When it ended; None while it runs (or if its scheduler died).
    #[serde(serialize_with = "ser_ts_opt")]
    pub ended_at: Option<Ts>,
    /// How it ended (`ok`, `failed`, `timeout`, …); None while it runs.
    pub outcome: Option<RunOutcome>,
    /// How long its command ran (ms): from the command's start to the run's end (runs
    /// before schema 8: from the recorded start).
    pub duration_ms: Option<i64>,
    /// From its recorded start to its command's start (ms): the scheduler's start lag.
    pub start_lag_ms: Option<i64>,
    /// Its command's exit code, when it exited.
    pub exit_code: Option<i64>,
}

impl RunRow {
    /// The outcome's word, or `running` while the run has none.
    pub fn outcome_or_running(&self) -> &str {
        self.outcome.as_ref().map_or("running", RunOutcome::as_str)
    }

    /// As [`Self::outcome_or_running`] at `now`, but `pending` for a run whose recorded start
    /// is still ahead: decided ahead of its slot, its command not started.
    pub fn outcome_at(&self, now: Ts) -> &str {
        match &self.outcome {
            None if self.started_at > now => "pending",
            _ => self.outcome_or_running(),
        }
    }

    /// Whether the run ended failing (`failed`, `timeout`).
    pub fn failed(&self) -> bool {
        self.outcome.as_ref().is_some_and(RunOutcome::is_failure)
    }
}

/// An open effect: sent or maybe sent, not settled; never retried until settled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpenEffect {
    /// The effect's key in the ledger.
    pub effect_key: EffectKey,
    /// The job that claimed it.
    pub job_key: String,
    /// Its ledger state: `unknown`, or `submitted` by a holder whose lease is gone.
    pub state: EffectState,
    /// When its row last changed.
    #[serde(serialize_with = "ser_ts")]
    pub since: Ts,
    /// Seconds since it last changed.
    pub age_s: i64,
    /// What the effect does, as a person approving or resolving it is shown.
    pub terms_shown: Option<String>,
    /// The observer's latest verdict (`happened`, `not happened`, `can't tell`).
    pub verdict: Option<String>,
    /// The fencing token it was claimed or submitted under.
    pub fencing_token: Option<i64>,
}

/// An approval as shown to a person.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalView {
    /// The effect key the approval is for.
    pub effect_key: EffectKey,
    /// The job whose effect needs it.
    pub job_key: String,
    /// What the effect does, as the approver is shown.
    pub terms_shown: Option<String>,
    /// `pending`, `approved`, `denied` or `consumed`.
    pub state: ApprovalState,
    /// When it was requested.
    #[serde(serialize_with = "ser_ts")]
    pub requested_at: Ts,
    /// Seconds since it was requested.
    pub age_s: i64,
    /// Who approved or denied it.
    pub decided_by: Option<String>,
}

impl ApprovalView {
    /// The view of an approval row, its age measured at `now`.
    pub(crate) fn from_row(a: ApprovalRow, now: Ts) -> Self {
        let age_s = exactly_words::time::age_s(a.requested_at, now);
        ApprovalView {
            effect_key: a.effect_key,
            job_key: a.job_key,
            terms_shown: a.terms_shown,
            state: a.state,
            requested_at: a.requested_at,
            age_s,
            decided_by: a.decided_by,
        }
    }
}

/// One recorded event.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventRow {
    /// The event's id, rising as events are recorded.
    pub id: i64,
    /// When it happened.
    #[serde(serialize_with = "ser_ts")]
    pub at: Ts,
    /// What happened (an `EventKind` word).
    pub kind: EventKind,
    /// The job it concerns.
    pub job_key: Option<String>,
    /// The effect it concerns.
    pub effect_key: Option<EffectKey>,
    /// The fencing token involved, if any.
    pub fencing_token: Option<i64>,
    /// Who acted.
    pub actor: Option<String>,
    /// What happened, in words.
    pub detail: Option<String>,
}

//! A job's failure policy, from its jobs-file keys: `retries` with exponential backoff
//! (`retry_backoff`, doubling each retry up to `retry_backoff_max` or the job's interval, with
//! jitter), `pause_after_failures`, `jitter` on each firing, and `starting_deadline`.
//!
//! Every random-looking delay here is a hash of the job and the slot (and the retry), never
//! a random number: two schedulers of one file agree on when a firing goes, and a restart
//! does not move it.
use super::problem::Problem;
use crate::firing::{AfterFailure, FailureRules, Started};
use crate::policy::MAX_ATTEMPTS;
use crate::schedule::fraction;
use crate::schedule::Schedule;
use crate::time;
use std::time::Duration;

/// `retry_backoff` when the jobs file does not say.
pub(crate) const RETRY_BACKOFF_DEFAULT: Duration = Duration::from_secs(10);
/// Most `retries`: a firing's runs are kept in the runs table, one row each.
const RETRIES_MAX: i64 = 100;

/// A job's failure policy (the defaults: no retry, no pause, no jitter, no deadline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    /// Runs a failed firing gets again (a run that ended `failed` or `timeout`).
    pub retries: u32,
    /// The first retry's wait; each next one waits twice as long, up to `retry_backoff_max`.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// After this many failed runs in a row the job is paused, as `exactly pause` does.
    pub pause_after_failures: Option<u32>,
    /// Each firing waits 0..jitter after its slot (see [`crate::schedule::jitter_for`]).
    pub jitter: Duration,
    /// A firing that cannot start this long after its slot (plus its jitter) is missed.
    pub starting_deadline: Option<Duration>,
}

impl Policy {
    /// The default policy of a job firing every `interval`.
    pub(crate) fn none(interval: Duration) -> Policy {
        Policy {
            retries: 0,
            retry_backoff: RETRY_BACKOFF_DEFAULT,
            retry_backoff_max: interval.max(Duration::from_secs(1)),
            pause_after_failures: None,
            jitter: Duration::ZERO,
            starting_deadline: None,
        }
    }

    /// Whether anything differs from the defaults (the definition digest names it only then,
    /// so a job without these keys keeps the digest it had before they existed).
    pub(crate) fn is_set(&self, interval: Duration) -> bool {
        *self != Policy::none(interval)
    }

    /// How many runs one firing gets: [`MAX_ATTEMPTS`] (resumes after a crash, an effect that
    /// never happened), or the first run and its retries when they are more.
    pub(crate) fn attempts(&self) -> i64 {
        MAX_ATTEMPTS.max(1 + i64::from(self.retries))
    }

    /// The wait before the retry that follows a firing's `runs`-th failed run: `retry_backoff`
    /// doubled per earlier retry, capped, then up to a quarter off (a hash of job, slot and
    /// run, so the herd of a shared outage spreads out while each wait still grows).
    pub(crate) fn backoff(&self, job: &str, slot: &str, runs: i64) -> Duration {
        let doublings = runs.clamp(1, 32) as u32 - 1;
        let full = self
            .retry_backoff
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.retry_backoff_max);
        let off = fraction(&[job, slot, &runs.to_string()]) * 0.25;
        full.mul_f64(1.0 - off)
    }
}

/// What a failed run of the job decides with its end: a retry while the firing has retries
/// left, a pause after `pause_after_failures` in a row (`by`: the scheduler). None when the
/// job has neither.
pub(crate) fn failure_rules(p: &Policy, by: &str) -> Option<FailureRules> {
    if p.retries == 0 && p.pause_after_failures.is_none() {
        return None;
    }
    Some(FailureRules {
        retry_below: 1 + i64::from(p.retries),
        pause_after: p.pause_after_failures.map(i64::from),
        by: by.to_string(),
    })
}

/// Says in the log what a failed run's end decided: when its firing goes again, or that its
/// job is now paused.
pub(crate) fn report(job: &str, p: &Policy, started: &Started, after: &AfterFailure) {
    if let Some(runs) = after.retry {
        let slot = time::fmt(started.slot);
        let wait = p.backoff(job, &slot, runs);
        tracing::warn!(
            job = %job,
            "firing at {} goes again in {} (run {} of at most {}: retries = {})",
            slot,
            time::human_ms(wait.as_millis() as u64),
            runs + 1,
            1 + p.retries,
            p.retries,
        );
    }
    if let Some(n) = after.paused {
        tracing::error!(
            job = %job,
            "PAUSED after {n} failed runs in a row (pause_after_failures = {}): \
             `exactly resume {job}` fires it again",
            p.pause_after_failures.unwrap_or(0),
        );
    }
}

/// A schedule's interval: the period, or a cron's typical gap (at least a second).
pub(crate) fn interval_of(s: &Schedule) -> Duration {
    match s {
        Schedule::Every { period } => *period,
        Schedule::Cron { .. } => Duration::from_secs(s.interval_s().max(1) as u64),
    }
}

/// The keys as written in one `[[job]]` table.
pub(crate) struct RawPolicy<'a> {
    pub retries: Option<i64>,
    pub retry_backoff: Option<&'a str>,
    pub retry_backoff_max: Option<&'a str>,
    pub pause_after_failures: Option<i64>,
    pub jitter: Option<&'a str>,
    pub starting_deadline: Option<&'a str>,
    /// Whether the job also has `catchup` (another word for how late a firing may start).
    pub catchup: bool,
}

/// Validates the policy keys of job `name`, whose schedule fires every `interval` (None: the
/// schedule is invalid); each mistake is a problem.
pub(crate) fn validate(
    name: &str,
    raw: &RawPolicy<'_>,
    interval: Option<Duration>,
    problems: &mut Vec<Problem>,
) -> Option<Policy> {
    let before = problems.len();
    let mut p = Policy::none(interval.unwrap_or(Duration::from_secs(1)));
    let mut duration = |key: &str, value: Option<&str>, min: Duration| -> Option<Duration> {
        let value = value?;
        match time::parse_duration(value) {
            Ok(d) if d >= min => Some(d),
            Ok(_) => {
                let min = time::human_ms(min.as_millis() as u64);
                problems.push(Problem::error(
                    name,
                    format!("invalid {key}"),
                    format!("{key} = {value:?} is shorter than {min}"),
                ));
                None
            }
            Err(e) => {
                problems.push(Problem::error(
                    name,
                    format!("invalid {key}"),
                    e.to_string(),
                ));
                None
            }
        }
    };
    let ms = Duration::from_millis;
    if let Some(d) = duration("retry_backoff", raw.retry_backoff, ms(10)) {
        p.retry_backoff = d;
    }
    if let Some(d) = duration("retry_backoff_max", raw.retry_backoff_max, ms(10)) {
        p.retry_backoff_max = d;
    }
    if let Some(d) = duration("jitter", raw.jitter, Duration::ZERO) {
        p.jitter = d;
    }
    p.starting_deadline = duration("starting_deadline", raw.starting_deadline, ms(100));
    match raw.retries {
        None => {}
        Some(n) if (0..=RETRIES_MAX).contains(&n) => p.retries = n as u32,
        Some(n) => problems.push(Problem::error(
            name,
            format!("invalid retries {n}"),
            format!("retries must be between 0 and {RETRIES_MAX}"),
        )),
    }
    match raw.pause_after_failures {
        None => {}
        Some(n) if (1..=1_000_000).contains(&n) => p.pause_after_failures = Some(n as u32),
        Some(n) => problems.push(Problem::error(
            name,
            format!("invalid pause_after_failures {n}"),
            "pause_after_failures must be between 1 and 1000000 (failed runs in a row)",
        )),
    }
    let no_retries = raw.retries.is_none_or(|n| n == 0);
    if no_retries && (raw.retry_backoff.is_some() || raw.retry_backoff_max.is_some()) {
        problems.push(Problem::error(
            name,
            "retry_backoff without retries",
            "a backoff only spaces retries; give retries = N, or the value would be ignored",
        ));
    }
    if raw.retry_backoff_max.is_some() && p.retry_backoff_max < p.retry_backoff {
        problems.push(Problem::error(
            name,
            "retry_backoff_max below retry_backoff",
            "the cap must be at least the first wait",
        ));
    }
    if raw.catchup && raw.starting_deadline.is_some() {
        problems.push(Problem::error(
            name,
            "both catchup and starting_deadline",
            "both say how late a firing may still start; give one",
        ));
    }
    if let Some(i) = interval.filter(|i| p.jitter >= *i) {
        problems.push(Problem::error(
            name,
            "jitter not shorter than the interval",
            format!(
                "jitter = {} would push a firing past the next one ({})",
                time::human_ms(p.jitter.as_millis() as u64),
                time::human_ms(i.as_millis() as u64)
            ),
        ));
    }
    (problems.len() == before).then_some(p)
}

/// The policy in words, for `exactly check`; None when it is the default.
pub(crate) fn describe(p: &Policy, interval: Duration) -> Option<String> {
    if !p.is_set(interval) {
        return None;
    }
    let h = |d: Duration| time::human_ms(d.as_millis() as u64);
    let mut parts = Vec::new();
    if p.retries > 0 {
        parts.push(format!(
            "retries {} (backoff {} doubling up to {}, at most {} runs a firing)",
            p.retries,
            h(p.retry_backoff),
            h(p.retry_backoff_max),
            p.attempts()
        ));
    }
    if let Some(n) = p.pause_after_failures {
        parts.push(format!("paused after {n} failed runs in a row"));
    }
    if !p.jitter.is_zero() {
        parts.push(format!("jitter 0..{}", h(p.jitter)));
    }
    if let Some(d) = p.starting_deadline {
        parts.push(format!("starting deadline {}", h(d)));
    }
    Some(parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::jitter_for;

    fn job(keys: &str) -> String {
        format!(
            "[[job]]\nname = \"a\"\nevery = \"1m\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
             command = [\"true\"]\n{keys}"
        )
    }

    #[test]
    fn the_keys_parse_into_a_policy_and_mistakes_are_errors() {
        let l = crate::runner::config::parse::parse(&job(
            "retries = 2\nretry_backoff = \"1s\"\npause_after_failures = 3\njitter = \
             \"10s\"\nstarting_deadline = \"30s\"\n",
        ));
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        let p = l.jobs[0].policy;
        assert_eq!((p.retries, p.attempts()), (2, 3));
        assert_eq!(
            p.retry_backoff_max,
            Duration::from_secs(60),
            "capped by the interval"
        );
        assert_eq!(p.pause_after_failures, Some(3));
        assert_eq!(p.starting_deadline, Some(Duration::from_secs(30)));
        let l = crate::runner::config::parse::parse(&job("retries = 1\n"));
        assert_eq!(l.jobs[0].policy.retry_backoff, RETRY_BACKOFF_DEFAULT);
        for (keys, what) in [
            ("retries = -1\n", "invalid retries -1"),
            ("retries = \"2\"\n", "wrong type of value for retries"),
            (
                "pause_after_failures = 0\n",
                "invalid pause_after_failures 0",
            ),
            ("jitter = \"1m\"\n", "jitter not shorter than the interval"),
            ("jitter = \"soon\"\n", "invalid jitter"),
            (
                "starting_deadline = \"10ms\"\n",
                "invalid starting_deadline",
            ),
            (
                "catchup = \"1h\"\nstarting_deadline = \"1m\"\n",
                "both catchup and starting_deadline",
            ),
            ("retry_backoff = \"1s\"\n", "retry_backoff without retries"),
            (
                "retries = 1\nretry_backoff = \"1m\"\nretry_backoff_max = \"1s\"\n",
                "retry_backoff_max below retry_backoff",
            ),
            ("retrys = 1\n", "unknown key \"retrys\""),
        ] {
            let l = crate::runner::config::parse::parse(&job(keys));
            assert!(l.has_errors(), "{keys}");
            assert!(
                l.problems.iter().any(|p| p.what == what),
                "{keys}: {:?}",
                l.problems
            );
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_jitter_stays_in_bounds() {
        let mut p = Policy::none(Duration::from_secs(60));
        p.retries = 5;
        p.retry_backoff = Duration::from_secs(1);
        p.retry_backoff_max = Duration::from_secs(5);
        let waits: Vec<Duration> = (1..=5).map(|n| p.backoff("j", "s", n)).collect();
        for (n, w) in waits.iter().enumerate() {
            let full = Duration::from_secs(1 << n).min(Duration::from_secs(5));
            assert!(*w <= full && *w >= full.mul_f64(0.75), "{n}: {w:?}");
        }
        assert!(waits[1] > waits[0] && waits[2] > waits[1]);
        assert_eq!(p.backoff("j", "s", 2), waits[1], "deterministic");
        assert_eq!(p.attempts(), 6);
        let j = Duration::from_millis(800);
        for s in 0..50 {
            let slot = format!("2026-01-01T00:00:{s:02}.000Z");
            let d = jitter_for("job", &slot, j);
            assert!(d < j);
            assert_eq!(d, jitter_for("job", &slot, j));
        }
        assert_ne!(
            jitter_for("job", "a", j),
            jitter_for("job", "b", j),
            "another slot, another delay"
        );
    }
}

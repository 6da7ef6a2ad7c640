//! When a job fires: cron expressions in a named time zone, or fixed intervals aligned to the
//! Unix epoch so every scheduler agrees which firing is which.
use crate::time::Ts;
use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use std::collections::VecDeque;
use std::time::Duration;

/// A job's schedule. A firing is identified by the job and one of these instants.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Fires at the whole multiples of the period since the Unix epoch.
    Every { period: Duration },
    /// A 5- or 6-field cron expression evaluated on the wall clock of `tz`.
    Cron {
        expr: String,
        cron: Box<Cron>,
        tz: Tz,
    },
}

/// How many slots a scan counts before giving up (a year of a minutely cron is 525,600).
const SCAN_LIMIT: u64 = 1_000_000;

impl Schedule {
    /// Parses `every = "20m"`: whole seconds, at least one.
    pub fn every(text: &str) -> Result<Schedule, String> {
        let period = crate::time::parse_duration(text).map_err(|e| e.to_string())?;
        if period < Duration::from_secs(1) || period.subsec_nanos() != 0 {
            return Err(format!(
                "every = {text:?} is not a whole number of seconds (at least 1s)"
            ));
        }
        Ok(Schedule::Every { period })
    }

    /// Parses a cron expression (5 fields, or 6 with seconds first) in a time zone (UTC when
    /// none is given). An expression that never fires is refused.
    pub fn cron(expr: &str, timezone: Option<&str>) -> Result<Schedule, String> {
        let tz = parse_tz(timezone.unwrap_or("UTC"))?;
        let cron = Cron::new(expr)
            .with_seconds_optional()
            .parse()
            .map_err(|e| format!("invalid cron expression {expr:?}: {e}"))?;
        let s = Schedule::Cron {
            expr: expr.to_string(),
            cron: Box::new(cron),
            tz,
        };
        if s.next_after(crate::time::now()).is_none() {
            return Err(format!("cron expression {expr:?} never fires"));
        }
        Ok(s)
    }

    /// Rebuilds a schedule from its registry form (see [`Schedule::describe`]).
    pub fn from_registry(schedule: &str, timezone: Option<&str>) -> Result<Schedule, String> {
        match schedule.strip_prefix("every ") {
            Some(d) => Schedule::every(d),
            None => Schedule::cron(schedule, timezone),
        }
    }

    /// The registry form: `every 20m` or the cron expression.
    pub fn describe(&self) -> String {
        match self {
            Schedule::Every { period } => {
                format!("every {}", humantime::format_duration(*period))
            }
            Schedule::Cron { expr, .. } => expr.clone(),
        }
    }

    pub fn timezone(&self) -> Option<String> {
        match self {
            Schedule::Every { .. } => None,
            Schedule::Cron { tz, .. } => Some(tz.name().to_string()),
        }
    }

    /// The first firing strictly after `t`.
    pub fn next_after(&self, t: Ts) -> Option<Ts> {
        match self {
            Schedule::Every { period } => {
                let p = period.as_millis() as i64;
                let ms = t.timestamp_millis();
                let next = (ms.div_euclid(p) + 1).checked_mul(p)?;
                Utc.timestamp_millis_opt(next).single()
            }
            Schedule::Cron { cron, tz, .. } => {
                // croner works on the naive wall clock and keeps sub-seconds it did not touch,
                // so start from a whole second.
                let whole = Utc.timestamp_opt(t.timestamp(), 0).single()?;
                let mut at: DateTime<Tz> = whole.with_timezone(tz);
                // In the repeated hour after a DST fall-back, croner answers the first
                // (earlier) instant of an ambiguous wall time, which already fired: step past
                // it. A wall time fires once, at its first instant; so in the hour's second
                // pass the next firing is the first wall time after the repeated hour, up to an
                // hour of a per-second cron's wall times away (a few milliseconds, once a year).
                for _ in 0..REPEATED_HOUR_STEPS {
                    let next = cron.find_next_occurrence(&at, false).ok()?;
                    let utc = next.with_timezone(&Utc);
                    if utc > t {
                        return Some(utc);
                    }
                    at = next;
                }
                None
            }
        }
    }

    /// The slots in `(after, upto]`: the latest `keep` of them, oldest first, and how many
    /// there are in all (a count that stops at a million).
    pub fn slots(&self, after: Ts, upto: Ts, keep: usize) -> (Vec<Ts>, u64) {
        if upto <= after {
            return (Vec::new(), 0);
        }
        if let Schedule::Every { period } = self {
            // Arithmetic, so a month-long gap in a 1-second job costs nothing.
            let p = period.as_millis() as i64;
            let first = after.timestamp_millis().div_euclid(p) + 1;
            let last = upto.timestamp_millis().div_euclid(p);
            if last < first {
                return (Vec::new(), 0);
            }
            let total = (last - first + 1) as u64;
            let from = (last - keep as i64 + 1).max(first);
            let kept = (from..=last)
                .filter_map(|i| Utc.timestamp_millis_opt(i * p).single())
                .collect();
            return (kept, total);
        }
        let mut kept = VecDeque::with_capacity(keep.min(1024));
        let mut total = 0u64;
        let mut cursor = after;
        while let Some(next) = self.next_after(cursor) {
            if next > upto || total >= SCAN_LIMIT {
                break;
            }
            total += 1;
            if keep > 0 {
                if kept.len() == keep {
                    kept.pop_front();
                }
                kept.push_back(next);
            }
            cursor = next;
        }
        (kept.into(), total)
    }

    /// The typical gap between firings in seconds: the period, or for cron the median gap
    /// over the next 50 firings.
    pub fn interval_s(&self) -> i64 {
        match self {
            Schedule::Every { period } => period.as_secs() as i64,
            Schedule::Cron { .. } => {
                let mut gaps = Vec::new();
                let mut prev = self.next_after(crate::time::now());
                while let Some(p) = prev {
                    if gaps.len() >= 50 {
                        break;
                    }
                    let next = self.next_after(p);
                    if let Some(n) = next {
                        gaps.push((n - p).num_seconds());
                    }
                    prev = next;
                }
                if gaps.is_empty() {
                    // A single future firing: no gap to speak of.
                    return 0;
                }
                gaps.sort_unstable();
                gaps[gaps.len() / 2]
            }
        }
    }
}

pub fn parse_tz(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>()
        .map_err(|_| format!("unknown time zone {name:?} (use an IANA name such as Europe/Berlin)"))
}

/// Wall times a search may step past in the repeated hour after a DST fall-back: an hour of a
/// per-second cron's, and a margin (a zone whose clocks go back more than an hour is not known).
const REPEATED_HOUR_STEPS: usize = 2 * 3600 + 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sub_hourly_cron_in_the_repeated_hour_fires_next_after_it() {
        // 2026-10-25: Berlin's clocks go back at 01:00 UTC (03:00 CEST → 02:00 CET); 01:05 UTC
        // is 02:05 CET, the second pass of 02:05, whose first pass (00:05 UTC) already fired.
        for expr in ["*/5 * * * *", "* * * * *", "* * * * * *", "30 2 * * *"] {
            let s = Schedule::cron(expr, Some("Europe/Berlin")).unwrap();
            let next = s
                .next_after(utc("2026-10-25T01:05:00.000Z"))
                .map(crate::time::fmt);
            let want = match expr {
                // Once a day at 02:30: the first pass fired it; tomorrow's 02:30 CET.
                "30 2 * * *" => "2026-10-26T01:30:00.000Z",
                // 03:00 CET, the first wall time after the repeated hour.
                _ => "2026-10-25T02:00:00.000Z",
            };
            assert_eq!(next.as_deref(), Some(want), "{expr}");
        }
    }

    fn utc(s: &str) -> Ts {
        crate::time::parse(s).expect("test timestamp")
    }

    fn fmt_all(v: &[Ts]) -> Vec<String> {
        v.iter().map(|t| crate::time::fmt(*t)).collect()
    }

    #[test]
    fn every_is_aligned_to_the_epoch() {
        let s = Schedule::every("20m").unwrap();
        let t = utc("2026-03-01T10:07:13.250Z");
        assert_eq!(
            crate::time::fmt(s.next_after(t).unwrap()),
            "2026-03-01T10:20:00.000Z"
        );
        let (slots, n) = s.slots(
            utc("2026-03-01T10:00:00.000Z"),
            utc("2026-03-01T11:00:00.000Z"),
            10,
        );
        assert_eq!(n, 3);
        assert_eq!(
            fmt_all(&slots),
            [
                "2026-03-01T10:20:00.000Z",
                "2026-03-01T10:40:00.000Z",
                "2026-03-01T11:00:00.000Z"
            ]
        );
        let (slots, n) = s.slots(
            utc("2026-01-01T00:00:00.000Z"),
            utc("2026-02-01T00:00:00.000Z"),
            2,
        );
        assert_eq!((slots.len(), n), (2, 31 * 24 * 3));
        assert!(Schedule::every("500ms").is_err());
        assert!(Schedule::every("soon").is_err());
    }

    #[test]
    fn cron_fall_back_fires_once_per_wall_clock_time() {
        // America/New_York leaves DST on 2026-11-01: 01:00–01:59 happens twice.
        let s = Schedule::cron("30 1 * * *", Some("America/New_York")).unwrap();
        let (slots, n) = s.slots(
            utc("2026-10-30T12:00:00.000Z"),
            utc("2026-11-03T12:00:00.000Z"),
            10,
        );
        assert_eq!(n, 4);
        assert_eq!(
            fmt_all(&slots),
            [
                "2026-10-31T05:30:00.000Z", // 01:30 EDT
                "2026-11-01T05:30:00.000Z", // 01:30 EDT, the first of the two 01:30s
                "2026-11-02T06:30:00.000Z", // 01:30 EST
                "2026-11-03T06:30:00.000Z",
            ]
        );
        // Starting inside the repeated hour, after the first 01:30: the second is not a new one.
        let t = utc("2026-11-01T06:10:00.000Z"); // 01:10 EST
        assert_eq!(
            crate::time::fmt(s.next_after(t).unwrap()),
            "2026-11-02T06:30:00.000Z"
        );
        // Hourly: each wall-clock hour once, the repeated 01:00 not twice.
        let h = Schedule::cron("0 * * * *", Some("America/New_York")).unwrap();
        let (slots, _) = h.slots(
            utc("2026-11-01T03:30:00.000Z"),
            utc("2026-11-01T08:30:00.000Z"),
            10,
        );
        assert_eq!(
            fmt_all(&slots),
            [
                "2026-11-01T04:00:00.000Z", // 00:00 EDT
                "2026-11-01T05:00:00.000Z", // 01:00 EDT
                "2026-11-01T07:00:00.000Z", // 02:00 EST
                "2026-11-01T08:00:00.000Z", // 03:00 EST
            ]
        );
    }

    #[test]
    fn cron_spring_forward_fires_once_for_the_missing_hour() {
        // Europe/Berlin enters DST on 2026-03-29: 02:00–02:59 does not exist.
        let s = Schedule::cron("30 2 * * *", Some("Europe/Berlin")).unwrap();
        let (slots, n) = s.slots(
            utc("2026-03-27T12:00:00.000Z"),
            utc("2026-03-30T12:00:00.000Z"),
            10,
        );
        assert_eq!(n, 3);
        assert_eq!(
            fmt_all(&slots),
            [
                "2026-03-28T01:30:00.000Z", // 02:30 CET
                "2026-03-29T01:00:00.000Z", // 03:00 CEST: the skipped 02:30, once
                "2026-03-30T00:30:00.000Z", // 02:30 CEST
            ]
        );
    }

    #[test]
    fn cron_with_seconds_and_interval() {
        let s = Schedule::cron("*/10 * * * * *", None).unwrap();
        let t = utc("2026-03-01T10:00:03.500Z");
        assert_eq!(
            crate::time::fmt(s.next_after(t).unwrap()),
            "2026-03-01T10:00:10.000Z"
        );
        assert_eq!(s.interval_s(), 10);
        assert_eq!(
            Schedule::cron("0 7 * * *", Some("Europe/Berlin"))
                .unwrap()
                .interval_s(),
            86400
        );
        assert!(Schedule::cron("61 * * * *", None).is_err());
        assert!(Schedule::cron("0 7 * * *", Some("Mars/Olympus")).is_err());
        assert!(Schedule::cron("0 0 30 2 *", None).is_err());
    }
}

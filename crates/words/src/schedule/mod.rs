//! When a job fires: cron expressions in a named time zone, or fixed intervals aligned to the
//! Unix epoch so every scheduler agrees which firing is which.
use crate::time::Ts;
use chrono::{DateTime, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::time::Duration;

mod dst;
pub use dst::{
    dst_shown, skipped_reason, skipped_slots, Dst, DstShown, Repeated, Skipped, SKIPPED_REASON,
};

/// A firing this late is still on time (scheduling jitter, a quick restart); later than this
/// plus the job's catch-up window, it is a miss.
pub const LATE_OK: Duration = Duration::from_secs(2);

/// A job's schedule. A firing is identified by the job and one of these instants.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// Fires at the whole multiples of the period since the Unix epoch.
    Every {
        /// The time between slots: whole seconds, at least one.
        period: Duration,
    },
    /// A 5- or 6-field cron expression evaluated on the wall clock of `tz`.
    Cron {
        /// The expression as written.
        expr: String,
        /// The expression parsed.
        cron: Box<Cron>,
        /// The zone whose wall clock it is read on.
        tz: Tz,
        /// What its slots in a repeated or skipped hour do when the zone's clocks change.
        dst: Dst,
    },
}

/// Why a schedule, or a time zone, is refused: each message is the one line a person reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The name is no IANA time zone (the name as given).
    #[error("unknown time zone {0:?} (use an IANA name such as Europe/Berlin)")]
    Zone(String),
    /// The expression (a cron expression or an interval) is refused, and why.
    #[error("{0}")]
    Expression(String),
}

impl From<ScheduleError> for String {
    fn from(e: ScheduleError) -> String {
        e.to_string()
    }
}

/// How many slots a scan counts before giving up (a year of a minutely cron is 525,600).
const SCAN_LIMIT: u64 = 1_000_000;

impl Schedule {
    /// Parses `every = "20m"`: whole seconds, at least one.
    pub fn every(text: &str) -> Result<Schedule, ScheduleError> {
        let period = crate::time::parse_duration(text)
            .map_err(|e| ScheduleError::Expression(e.to_string()))?;
        if period < Duration::from_secs(1) || period.subsec_nanos() != 0 {
            return Err(ScheduleError::Expression(format!(
                "every = {text:?} is not a whole number of seconds (at least 1s)"
            )));
        }
        Ok(Schedule::Every { period })
    }

    /// Parses a cron expression (5 fields, or 6 with seconds first) in a time zone (UTC when
    /// none is given). An expression that never fires is refused.
    pub fn cron(expr: &str, timezone: Option<&str>) -> Result<Schedule, ScheduleError> {
        let tz = parse_tz(timezone.unwrap_or("UTC"))?;
        let cron = Cron::new(expr)
            .with_seconds_optional()
            .parse()
            .map_err(|e| {
                ScheduleError::Expression(format!("invalid cron expression {expr:?}: {e}"))
            })?;
        let s = Schedule::Cron {
            expr: expr.to_string(),
            cron: Box::new(cron),
            tz,
            dst: Dst::default(),
        };
        if s.next_after(crate::time::now()).is_none() {
            return Err(ScheduleError::Expression(format!(
                "cron expression {expr:?} never fires"
            )));
        }
        Ok(s)
    }

    /// The same schedule under a daylight-saving policy (no effect on `every`).
    pub fn with_dst(self, policy: Dst) -> Schedule {
        match self {
            Schedule::Cron { expr, cron, tz, .. } => Schedule::Cron {
                expr,
                cron,
                tz,
                dst: policy,
            },
            every => every,
        }
    }

    /// The daylight-saving policy of a cron schedule in a zone other than UTC (None: the
    /// schedule has no DST nights).
    pub fn dst(&self) -> Option<Dst> {
        match self {
            Schedule::Cron { tz, dst, .. } if *tz != chrono_tz::UTC => Some(*dst),
            _ => None,
        }
    }

    /// Rebuilds a schedule from its registry form (see [`Schedule::describe`]).
    pub fn from_registry(
        schedule: &str,
        timezone: Option<&str>,
    ) -> Result<Schedule, ScheduleError> {
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

    /// The zone of a cron schedule, by its IANA name; None for an interval.
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
            Schedule::Cron { cron, tz, dst, .. } => {
                let first = next_wall_time(cron, tz, *dst, t)?;
                if dst.repeated == Repeated::Both {
                    if let Some(second) = second_pass_before(cron, tz, t, first) {
                        return Some(second);
                    }
                }
                Some(first)
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

/// The first firing after `t` of a cron in `tz`, walking its wall times: a wall time in the
/// repeated hour counts at its first instant (and, under [`Repeated::Both`], at its second when
/// `t` is inside the repeated hour); one in the skipped hour at the instant croner moves it to,
/// the end of the gap (or not at all under [`Skipped::Skip`]).
fn next_wall_time(cron: &Cron, tz: &Tz, dst: Dst, t: Ts) -> Option<Ts> {
    // croner works on the naive wall clock and keeps sub-seconds it did not touch, so start
    // from a whole second.
    let whole = Utc.timestamp_opt(t.timestamp(), 0).single()?;
    let mut at: DateTime<Tz> = whole.with_timezone(tz);
    // In the repeated hour after a DST fall-back, croner answers the first (earlier) instant of
    // an ambiguous wall time, which already fired: step past it. In the hour's second pass the
    // next firing may be the first wall time after the repeated hour, up to an hour of a
    // per-second cron's wall times away (a few milliseconds, once a year).
    for _ in 0..REPEATED_HOUR_STEPS {
        let next = cron.find_next_occurrence(&at, false).ok()?;
        at = next;
        // A wall time the spring-forward gap swallowed comes back moved to the gap's end,
        // where the pattern does not match it.
        if dst.skipped == Skipped::Skip && !cron.is_time_matching(&next).unwrap_or(true) {
            continue;
        }
        let utc = next.with_timezone(&Utc);
        if utc > t {
            return Some(utc);
        }
        if dst.repeated == Repeated::Both {
            if let LocalResult::Ambiguous(_, later) = tz.from_local_datetime(&next.naive_local()) {
                let later = later.with_timezone(&Utc);
                if later > t {
                    return Some(later);
                }
            }
        }
    }
    None
}

/// Under [`Repeated::Both`], from before a fall-back: the first second-pass instant of a
/// repeated wall time in `(t, first)`, if the clocks go back between the two.
fn second_pass_before(cron: &Cron, tz: &Tz, t: Ts, first: Ts) -> Option<Ts> {
    let offset = |u: Ts| {
        tz.offset_from_utc_datetime(&u.naive_utc())
            .fix()
            .local_minus_utc()
    };
    let (before, after) = (offset(t), offset(first));
    if after >= before {
        return None;
    }
    // The instant the clocks went back: the first second with the later offset.
    let (mut lo, mut hi) = (t.timestamp(), first.timestamp());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let m = Utc.timestamp_opt(mid, 0).single()?;
        if offset(m) == before {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let back = Utc.timestamp_opt(hi, 0).single()?.naive_utc();
    let wall = |off: i32| back + chrono::Duration::seconds(i64::from(off));
    // The repeated wall times: [the fall-back instant on the new offset, on the old one).
    let (from, to): (NaiveDateTime, NaiveDateTime) = (wall(after), wall(before));
    let mut at = tz
        .from_local_datetime(&(from - chrono::Duration::seconds(1)))
        .earliest()?;
    for _ in 0..REPEATED_HOUR_STEPS {
        let next = cron.find_next_occurrence(&at, false).ok()?;
        let w = next.naive_local();
        if w >= to {
            return None;
        }
        let second = Utc.from_utc_datetime(&(w - chrono::Duration::seconds(i64::from(after))));
        if second > t && second < first {
            return Some(second);
        }
        at = next;
    }
    None
}

/// The time zone an IANA name (`Europe/Berlin`) names, or why it names none.
pub fn parse_tz(name: &str) -> Result<Tz, ScheduleError> {
    name.parse::<Tz>()
        .map_err(|_| ScheduleError::Zone(name.to_string()))
}

/// Wall times a search may step past in the repeated hour after a DST fall-back: an hour of a
/// per-second cron's, and a margin (a zone whose clocks go back more than an hour is not known).
const REPEATED_HOUR_STEPS: usize = 2 * 3600 + 8;

/// The delay of the firing of `job` at `slot` within `0..jitter`: the same in every scheduler.
pub fn jitter_for(job: &str, slot: &str, jitter: Duration) -> Duration {
    if jitter.is_zero() {
        return Duration::ZERO;
    }
    jitter.mul_f64(fraction(&[job, slot]))
}

/// A number in 0..1 from SHA-256 of the parts (stable across processes and machines).
pub fn fraction(parts: &[&str]) -> f64 {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    // 53 bits: exactly representable, strictly below 1.
    (u64::from_be_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
}

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

    /// One firing as docs/operations.md shows it: Berlin wall time and zone, then UTC.
    fn both_clocks(t: Ts) -> String {
        let tz = parse_tz("Europe/Berlin").expect("zone");
        format!(
            "{} ({}Z)",
            t.with_timezone(&tz).format("%H:%M %Z"),
            t.format("%H:%M")
        )
    }

    /// Firings in a night's window, runs of a fixed gap written as one range.
    fn night(expr: &str, dst: Dst, from: &str, to: &str) -> String {
        let s = Schedule::cron(expr, Some("Europe/Berlin"))
            .expect("cron")
            .with_dst(dst);
        let (slots, _) = s.slots(utc(from), utc(to), 1000);
        let tz = parse_tz("Europe/Berlin").expect("zone");
        let offset = |t: Ts| t.with_timezone(&tz).offset().fix();
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < slots.len() {
            let gap = slots.get(i + 1).map(|n| *n - slots[i]);
            let mut j = i;
            // A run ends where the gap or the zone's offset changes.
            while j + 1 < slots.len()
                && Some(slots[j + 1] - slots[j]) == gap
                && offset(slots[j + 1]) == offset(slots[i])
            {
                j += 1;
            }
            if j >= i + 2 {
                let every = gap.map(|g| g.num_minutes()).unwrap_or(0);
                parts.push(format!(
                    "{} … {} every {every} min",
                    both_clocks(slots[i]),
                    both_clocks(slots[j])
                ));
                i = j + 1;
            } else {
                parts.push(both_clocks(slots[i]));
                i += 1;
            }
        }
        if parts.is_empty() {
            return "nothing".into();
        }
        parts.join("; ")
    }

    /// docs/operations.md's table (section "Daylight saving time"), from the code.
    fn dst_table() -> String {
        let mut out = String::from(
            "| Night (Europe/Berlin) | Expression | Policy | Fires (Berlin time, then UTC) |\n\
             |---|---|---|---|\n",
        );
        let exprs = ["0 2 * * *", "30 2 * * *", "*/30 * * * *", "*/5 * * * *"];
        // 01:30 to 03:30 local, both ends included.
        let spring = ("2026-03-29T00:29:00.000Z", "2026-03-29T01:30:00.000Z");
        let fall = ("2026-10-24T23:29:00.000Z", "2026-10-25T02:30:00.000Z");
        for expr in exprs {
            for skipped in [Skipped::Next, Skipped::Skip] {
                let dst = Dst {
                    skipped,
                    ..Dst::default()
                };
                out += &format!(
                    "| spring, 2026-03-29 01:30–03:30 | `{expr}` | \
                     `dst_skipped = \"{}\"` | {} |\n",
                    skipped.name(),
                    night(expr, dst, spring.0, spring.1)
                );
            }
        }
        for expr in exprs {
            for repeated in [Repeated::Once, Repeated::Both] {
                let dst = Dst {
                    repeated,
                    ..Dst::default()
                };
                out += &format!(
                    "| fall, 2026-10-25 01:30–03:30 | `{expr}` | \
                     `dst_repeated = \"{}\"` | {} |\n",
                    repeated.name(),
                    night(expr, dst, fall.0, fall.1)
                );
            }
        }
        out
    }

    #[test]
    fn the_docs_show_the_dst_table_the_code_makes() {
        let table = dst_table();
        let doc = include_str!("../../../../docs/operations.md");
        assert!(
            doc.contains(&table),
            "docs/operations.md's table in \"Daylight saving time\" differs from the code's; \
             it is:\n{table}"
        );
    }

    #[test]
    fn dst_policies_on_berlins_nights() {
        let at = |expr: &str, dst: Dst, from: &str, to: &str| {
            let s = Schedule::cron(expr, Some("Europe/Berlin"))
                .unwrap()
                .with_dst(dst);
            fmt_all(&s.slots(utc(from), utc(to), 100).0)
        };
        let once = Dst::default();
        let both = Dst {
            repeated: Repeated::Both,
            ..once
        };
        let skip = Dst {
            skipped: Skipped::Skip,
            ..once
        };
        let (f0, f1) = ("2026-10-24T23:30:00.000Z", "2026-10-25T02:30:00.000Z");
        // Fall: 02:00 and 02:30 happen twice (00:xx UTC in CEST, then 01:xx UTC in CET).
        assert_eq!(at("0 2 * * *", once, f0, f1), ["2026-10-25T00:00:00.000Z"]);
        assert_eq!(
            at("0 2 * * *", both, f0, f1),
            ["2026-10-25T00:00:00.000Z", "2026-10-25T01:00:00.000Z"]
        );
        assert_eq!(
            at("30 2 * * *", both, f0, f1),
            ["2026-10-25T00:30:00.000Z", "2026-10-25T01:30:00.000Z"]
        );
        let half = at("*/30 * * * *", both, f0, f1);
        assert_eq!(half.len(), 6, "{half:?}"); // every 30 min of 3 real hours
        assert_eq!(
            at("*/30 * * * *", once, f0, f1).len(),
            4,
            "the repeated hour once"
        );
        assert_eq!(at("*/5 * * * *", both, f0, f1).len(), 36);
        assert_eq!(at("*/5 * * * *", once, f0, f1).len(), 24);
        // Starting inside the second pass, "both" fires the rest of it.
        let s = Schedule::cron("*/5 * * * *", Some("Europe/Berlin"))
            .unwrap()
            .with_dst(both);
        assert_eq!(
            s.next_after(utc("2026-10-25T01:07:00.000Z"))
                .map(crate::time::fmt)
                .as_deref(),
            Some("2026-10-25T01:10:00.000Z")
        );
        // Spring: 02:00–02:59 never happens; "next" fires once at 03:00 CEST, "skip" not at all.
        let (s0, s1) = ("2026-03-29T00:30:00.000Z", "2026-03-29T01:30:00.000Z");
        assert_eq!(at("30 2 * * *", once, s0, s1), ["2026-03-29T01:00:00.000Z"]);
        assert!(at("30 2 * * *", skip, s0, s1).is_empty());
        assert_eq!(at("0 2 * * *", once, s0, s1), ["2026-03-29T01:00:00.000Z"]);
        assert!(at("0 2 * * *", skip, s0, s1).is_empty());
        // 03:00 CEST is a slot of its own for these: the swallowed ones add nothing to it.
        assert_eq!(
            at("*/30 * * * *", skip, s0, s1),
            at("*/30 * * * *", once, s0, s1)
        );
        assert_eq!(
            at("*/5 * * * *", skip, s0, s1),
            at("*/5 * * * *", once, s0, s1)
        );
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

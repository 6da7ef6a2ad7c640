//! Fixed-width UTC text timestamps: `YYYY-MM-DDTHH:MM:SS.mmmZ`, so text order is time order.
use chrono::{DateTime, SubsecRound, TimeZone, Utc};
use std::time::Duration;

/// An instant, in UTC.
pub type Ts = DateTime<Utc>;

/// The fixed-width form every stored instant is written in: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub const FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";

/// Now, truncated to milliseconds so that a value survives a round trip through text.
pub fn now() -> Ts {
    Utc::now().trunc_subsecs(3)
}

/// `ts` in the fixed-width form ([`FORMAT`]).
pub fn fmt(ts: Ts) -> String {
    // The same text as FORMAT for the 4-digit years every duration is bounded to, without
    // parsing a format string on each of the ledger's writes.
    ts.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Now, in the fixed-width form ([`FORMAT`]).
pub fn now_text() -> String {
    fmt(now())
}

/// Parses our fixed-width form, and (for input from people) any RFC 3339 instant.
pub fn parse(s: &str) -> Option<Ts> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.fZ")
        .ok()
        .map(|n| Utc.from_utc_datetime(&n))
}

/// `ts + d`, with `d` bounded at [`MAX_DURATION`]: a duration read back from a database an
/// older version wrote can neither overflow nor leave the fixed width.
pub fn add(ts: Ts, d: Duration) -> Ts {
    let d = d.min(MAX_DURATION);
    ts + chrono::Duration::milliseconds(d.as_millis() as i64)
}

/// The longest duration accepted anywhere (lease, interval, timeout, catch-up, retention):
/// longer than any schedule needs, short enough that now + it keeps a 4-digit year, so every
/// timestamp stays fixed-width and text order stays time order.
// 100 years of 365.25 days, as humantime counts them.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

/// Parses a human duration: `90s`, `15m`, `1h`, `1h30m`, `500ms`; at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> crate::Result<Duration> {
    let d = humantime::parse_duration(s.trim()).map_err(|e| {
        crate::Error::Usage(format!(
            "invalid duration {:?}: {e} (use e.g. 90s, 15m, 1h)",
            crate::sanitize::inert(s)
        ))
    })?;
    if d > MAX_DURATION {
        return Err(crate::Error::Usage(format!(
            "duration {:?} is too long (at most 100y)",
            crate::sanitize::inert(s)
        )));
    }
    Ok(d)
}

/// The documented default of [`max_skew`].
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(2);

/// The most two clocks writing one database may disagree (`EXACTLY_MAX_SKEW`, default 2s). On
/// one SQLite file there is no server clock, so, like Chubby's lock-delay, nobody takes over an
/// expired lease, or settles the send made under it, until this margin has passed too.
pub fn max_skew() -> Duration {
    std::env::var("EXACTLY_MAX_SKEW")
        .ok()
        .and_then(|s| parse_duration(&s).ok())
        .unwrap_or(DEFAULT_MAX_SKEW)
}

/// `ts` minus the clock-skew margin, as text: a lease ending before it has surely expired on
/// every clock within the margin.
pub fn minus_skew(ts: &str) -> String {
    match parse(ts) {
        Some(t) => fmt(t - chrono::Duration::milliseconds(max_skew().as_millis() as i64)),
        None => ts.to_string(),
    }
}

/// `ts` minus `d`, as text (unchanged when it does not parse).
pub fn minus(ts: &str, d: Duration) -> String {
    match parse(ts) {
        Some(t) => fmt(t - chrono::Duration::milliseconds(d.as_millis() as i64)),
        None => ts.to_string(),
    }
}

/// Seconds between two instants, never negative.
pub fn age_s(since: Ts, now: Ts) -> i64 {
    (now - since).num_seconds().max(0)
}

/// A compact human age: `42s`, `3m12s`, `2h05m`, `3d04h`.
pub fn human_age(secs: i64) -> String {
    let s = secs.max(0);
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{:02}h", s / 86400, (s % 86400) / 3600)
    }
}

/// A compact duration from milliseconds: `850ms`, `1.2s`, `3m05s`.
pub fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        human_age((ms / 1000) as i64)
    }
}

/// Percentiles of run durations (ms) with hdrhistogram; None when there are no runs.
pub fn percentiles(durations_ms: &[i64]) -> (Option<u64>, Option<u64>) {
    let Ok(mut h) = hdrhistogram::Histogram::<u64>::new(3) else {
        return (None, None);
    };
    for &d in durations_ms {
        let _ = h.record(d.max(0) as u64);
    }
    if h.is_empty() {
        return (None, None);
    }
    (
        Some(h.value_at_quantile(0.50)),
        Some(h.value_at_quantile(0.99)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fmt_writes_exactly_format() {
        for (y, ms) in [(1, 0), (1970, 1), (2026, 999), (9999, 500)] {
            let t = Utc.with_ymd_and_hms(y, 12, 31, 23, 59, 58).unwrap()
                + chrono::Duration::milliseconds(ms);
            assert_eq!(fmt(t), t.format(FORMAT).to_string());
        }
    }

    #[test]
    fn round_trip_is_fixed_width() {
        let t = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(fmt(t), "2026-01-02T03:04:05.000Z");
        assert_eq!(parse(&fmt(t)), Some(t));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn absurd_durations_are_refused_and_the_longest_keeps_a_four_digit_year() {
        for s in ["8000y", "300000y", "400000y", "101y"] {
            assert!(parse_duration(s).is_err(), "{s}");
        }
        let far = add(now(), parse_duration("100y").unwrap());
        assert_eq!(fmt(far).len(), "2026-01-02T03:04:05.000Z".len());
    }
}

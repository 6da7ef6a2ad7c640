//! Daylight-saving policies of cron jobs in a time zone (`dst_repeated`, `dst_skipped` in the
//! jobs file): their values, how the jobs file and the registry spell them, and how `status`
//! shows them. [`super::Schedule`] applies them.

/// What a cron job does on the nights its zone's clocks change (`dst_repeated`, `dst_skipped`
/// in the jobs file). Only a cron `schedule` with a `timezone` has such nights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dst {
    /// What a slot in the repeated hour does.
    pub repeated: Repeated,
    /// What a slot in the skipped hour does.
    pub skipped: Skipped,
}

/// A wall time that happens twice (the hour repeated when clocks go back).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Repeated {
    /// Fires at the first occurrence only.
    #[default]
    Once,
    /// Fires at both occurrences.
    Both,
}

/// A wall time that never happens (the hour skipped when clocks go forward).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Skipped {
    /// Fires at the next valid instant (the end of the skipped hour), once.
    #[default]
    Next,
    /// Not fired.
    Skip,
}

impl Dst {
    /// A registered job's policy from the registry's `dst_repeated` and `dst_skipped` (the
    /// defaults where the registry has none).
    pub fn from_registry(repeated: Option<&str>, skipped: Option<&str>) -> Dst {
        Dst {
            repeated: repeated.and_then(Repeated::parse).unwrap_or_default(),
            skipped: skipped.and_then(Skipped::parse).unwrap_or_default(),
        }
    }
}

impl Repeated {
    /// The policy the jobs file's word (`once`, `both`) names.
    pub fn parse(text: &str) -> Option<Repeated> {
        match text {
            "once" => Some(Repeated::Once),
            "both" => Some(Repeated::Both),
            _ => None,
        }
    }
    /// The policy's word, as the jobs file and the registry spell it.
    pub fn name(self) -> &'static str {
        match self {
            Repeated::Once => "once",
            Repeated::Both => "both",
        }
    }
}

impl Skipped {
    /// The policy the jobs file's word (`next`, `skip`) names.
    pub fn parse(text: &str) -> Option<Skipped> {
        match text {
            "next" => Some(Skipped::Next),
            "skip" => Some(Skipped::Skip),
            _ => None,
        }
    }
    /// The policy's word, as the jobs file and the registry spell it.
    pub fn name(self) -> &'static str {
        match self {
            Skipped::Next => "next",
            Skipped::Skip => "skip",
        }
    }
}

/// A job's daylight-saving policy as `status` shows it (`dst` {`repeated`, `skipped`}).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DstShown {
    /// `once` or `both`.
    pub repeated: &'static str,
    /// `next` or `skip`.
    pub skipped: &'static str,
}

impl DstShown {
    /// The policy these words name.
    pub fn policy(&self) -> Dst {
        Dst {
            repeated: Repeated::parse(self.repeated).unwrap_or_default(),
            skipped: Skipped::parse(self.skipped).unwrap_or_default(),
        }
    }
}

/// The policy of a registered job, for a cron schedule in a zone other than UTC only (NULL
/// columns, from a registry before they existed, are the defaults).
pub fn dst_shown(
    schedule: Option<&str>,
    timezone: Option<&str>,
    repeated: Option<String>,
    skipped: Option<String>,
) -> Option<DstShown> {
    let cron = schedule.is_some_and(|s| !s.starts_with("every "));
    if !cron || timezone.is_none_or(|tz| tz == "UTC") {
        return None;
    }
    let repeated = repeated
        .as_deref()
        .and_then(Repeated::parse)
        .unwrap_or_default();
    let skipped = skipped
        .as_deref()
        .and_then(Skipped::parse)
        .unwrap_or_default();
    Some(DstShown {
        repeated: repeated.name(),
        skipped: skipped.name(),
    })
}

/// Why a firing left out by `dst_skipped = "skip"` is recorded missed.
pub const SKIPPED_REASON: &str =
    "its wall time fell in the hour the clocks skipped (dst_skipped = \"skip\")";

/// Why the firing at `slot` (an instant [`skipped_slots`] named) was left out, with the gap's
/// real length in its zone: "the hour the clocks skipped" in Berlin, "the 30 minutes the clocks
/// skipped" on Lord Howe Island.
pub fn skipped_reason(schedule: &super::Schedule, slot: crate::time::Ts) -> String {
    use chrono::{Offset, TimeZone};
    let gap = schedule
        .timezone()
        .and_then(|z| super::parse_tz(&z).ok())
        .map(|tz| {
            let off = |t: crate::time::Ts| {
                tz.offset_from_utc_datetime(&t.naive_utc())
                    .fix()
                    .local_minus_utc() as i64
            };
            off(slot) - off(slot - chrono::Duration::seconds(1))
        })
        .filter(|g| *g > 0)
        .unwrap_or(3600);
    let span = match (gap / 3600, gap % 3600 / 60) {
        (1, 0) => "hour".to_string(),
        (h, 0) => format!("{h} hours"),
        (0, m) => format!("{m} minutes"),
        (h, m) => format!("{h} h {m} min"),
    };
    format!("its wall time fell in the {span} the clocks skipped (dst_skipped = \"skip\")")
}

/// The instants in (`after`, `upto`] at which a cron job with `dst_skipped = "skip"` did not
/// fire but the default policy would have (the end of a skipped hour): the scheduler records
/// them missed, with [`SKIPPED_REASON`]. Empty for every other job.
pub fn skipped_slots(
    schedule: &super::Schedule,
    after: crate::time::Ts,
    upto: crate::time::Ts,
) -> Vec<crate::time::Ts> {
    let Some(d) = schedule.dst().filter(|d| d.skipped == Skipped::Skip) else {
        return Vec::new();
    };
    let next = schedule.clone().with_dst(Dst {
        skipped: Skipped::Next,
        ..d
    });
    let (would, _) = next.slots(after, upto, 100);
    let (did, _) = schedule.slots(after, upto, 100);
    would.into_iter().filter(|s| !did.contains(s)).collect()
}

#[cfg(test)]
mod skipped_tests {
    use super::*;
    use crate::schedule::Schedule;

    fn utc(s: &str) -> crate::time::Ts {
        crate::time::parse(s).expect("instant")
    }

    /// Lord Howe Island moves its clocks 30 minutes: the reason says so, not "the hour".
    #[test]
    fn the_reason_gives_the_gap_its_real_length() {
        let skip = Dst {
            skipped: Skipped::Skip,
            ..Dst::default()
        };
        // 4 October 2026, 02:00 local (+10:30) becomes 02:30 (+11).
        let s = Schedule::cron("15 2 * * *", Some("Australia/Lord_Howe"))
            .expect("cron")
            .with_dst(skip);
        let left_out = skipped_slots(
            &s,
            utc("2026-10-03T14:00:00.000Z"),
            utc("2026-10-03T17:00:00.000Z"),
        );
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        let why = skipped_reason(&s, left_out[0]);
        assert!(
            why.contains("the 30 minutes the clocks skipped"),
            "Lord Howe: {why}"
        );
        let b = Schedule::cron("30 2 * * *", Some("Europe/Berlin"))
            .expect("cron")
            .with_dst(skip);
        let left_out = skipped_slots(
            &b,
            utc("2026-03-28T23:00:00.000Z"),
            utc("2026-03-29T03:00:00.000Z"),
        );
        let why = skipped_reason(&b, left_out[0]);
        assert!(why.contains("the hour the clocks skipped"), "Berlin: {why}");
    }

    #[test]
    fn a_skip_policy_names_the_firings_it_left_out_on_the_spring_night() {
        let skip = Dst {
            skipped: Skipped::Skip,
            ..Dst::default()
        };
        let (from, to) = (
            utc("2026-03-28T23:00:00.000Z"),
            utc("2026-03-29T03:00:00.000Z"),
        );
        for expr in ["0 2 * * *", "30 2 * * *"] {
            let s = Schedule::cron(expr, Some("Europe/Berlin"))
                .expect("cron")
                .with_dst(skip);
            let left_out: Vec<String> = skipped_slots(&s, from, to)
                .into_iter()
                .map(crate::time::fmt)
                .collect();
            assert_eq!(left_out, ["2026-03-29T01:00:00.000Z"], "{expr}");
            // The default policy leaves nothing out.
            let next = Schedule::cron(expr, Some("Europe/Berlin")).expect("cron");
            assert!(skipped_slots(&next, from, to).is_empty(), "{expr}");
        }
        // A sub-hourly cron fires at the end of the gap anyway: nothing left out.
        let s = Schedule::cron("*/30 * * * *", Some("Europe/Berlin"))
            .expect("cron")
            .with_dst(skip);
        assert!(skipped_slots(&s, from, to).is_empty());
        // Other nights: nothing.
        let s = Schedule::cron("0 2 * * *", Some("Europe/Berlin"))
            .expect("cron")
            .with_dst(skip);
        let (a, b) = (
            utc("2026-04-01T00:00:00.000Z"),
            utc("2026-04-05T00:00:00.000Z"),
        );
        assert!(skipped_slots(&s, a, b).is_empty());
    }
}

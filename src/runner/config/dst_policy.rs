//! The jobs file's daylight-saving keys (`dst_repeated`, `dst_skipped`): how `check` reads
//! them and shows them. The policies themselves are [`crate::schedule::Dst`].
use super::job::Job;
use super::problem::Problem;
use crate::schedule::{Dst, Repeated, Skipped};

/// Reads `dst_repeated` and `dst_skipped` from a job's table: each one of its two words, and
/// only beside a cron `schedule` with a `timezone` (an interval, or a cron in UTC, has no
/// daylight-saving nights: a key there would be a promise nothing keeps).
pub(super) fn dst_policy(
    job: &str,
    repeated: Option<&str>,
    skipped: Option<&str>,
    cron_in_zone: bool,
    problems: &mut Vec<Problem>,
) -> Option<Dst> {
    let before = problems.len();
    let mut dst = Dst::default();
    if let Some(r) = repeated {
        match Repeated::parse(r) {
            Some(v) => dst.repeated = v,
            None => problems.push(Problem::error(
                job,
                format!("invalid dst_repeated {r:?}"),
                "choose once (a wall time in the repeated hour fires at its first occurrence) \
                 or both (at each)",
            )),
        }
    }
    if let Some(k) = skipped {
        match Skipped::parse(k) {
            Some(v) => dst.skipped = v,
            None => problems.push(Problem::error(
                job,
                format!("invalid dst_skipped {k:?}"),
                "choose next (a wall time in the skipped hour fires when the hour ends) \
                 or skip (not at all)",
            )),
        }
    }
    if (repeated.is_some() || skipped.is_some()) && !cron_in_zone {
        problems.push(Problem::error(
            job,
            "dst_repeated/dst_skipped without a cron schedule in a time zone",
            "only a cron schedule with a timezone (other than UTC) has daylight-saving nights; \
             an interval counts real seconds",
        ));
    }
    (problems.len() == before).then_some(dst)
}

/// `check --json`'s `dst`: each job with daylight-saving nights, and what it does on them.
pub(crate) fn dst_of(jobs: &[Job]) -> serde_json::Map<String, serde_json::Value> {
    jobs.iter()
        .filter_map(|j| {
            let d = j.schedule.dst()?;
            let v = serde_json::json!({
                "timezone": j.schedule.timezone(),
                "repeated": d.repeated.name(),
                "skipped": d.skipped.name(),
            });
            Some((j.name.to_string(), v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dst_keys_in_the_jobs_file() {
        let job = |extra: &str, when: &str| {
            crate::runner::config::parse::parse(&format!(
                "[[job]]\nname = \"n\"\n{when}\nlease = \"1m\"\noverlap = \
                 \"coalesce\"\n{extra}\ncommand = [\"true\"]\n"
            ))
        };
        let berlin = "schedule = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"";
        let l = job("dst_repeated = \"both\"\ndst_skipped = \"skip\"", berlin);
        assert!(l.problems.is_empty(), "{:?}", l.problems);
        let want = Dst {
            repeated: Repeated::Both,
            skipped: Skipped::Skip,
        };
        assert_eq!(l.jobs[0].schedule.dst(), Some(want));
        let l = job("dst_repeated = \"twice\"", berlin);
        assert!(
            l.problems
                .iter()
                .any(|p| p.what == "invalid dst_repeated \"twice\""),
            "{:?}",
            l.problems
        );
        let l = job("dst_skipped = \"skip\"", "every = \"5m\"");
        assert!(
            l.problems
                .iter()
                .any(|p| p.what.starts_with("dst_repeated/dst_skipped without")),
            "{:?}",
            l.problems
        );
        let l = job("dst_skiped = \"skip\"", berlin);
        assert!(
            l.problems
                .iter()
                .any(|p| p.why.contains("did you mean \"dst_skipped\"")),
            "{:?}",
            l.problems
        );
    }
}

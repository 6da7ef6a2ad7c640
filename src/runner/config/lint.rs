//! The lint behind `exactly check`: warnings are risks the scheduler cannot remove (lease
//! against interval, a lease too thin to ride out a stalled renewal, p99 against interval, one
//! command under two names), found by [`lint`] over the valid jobs: `check` fails on them only
//! with `--strict`, and `run` logs them and runs.
use super::job::{Job, Overlap};
use super::problem::{resolved_command, Problem};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// What the database knows about a job, for the lint.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    pub runs: u64,
    pub p99_ms: Option<u64>,
}

/// Up to this many jobs sharing one command get a warning each; more get one line for them all
/// (1,000 jobs of one command are one warning, not 1,000).
const SAME_COMMAND_EACH: usize = 3;

/// The risks in a set of valid jobs of a file in folder `dir`: one command under two names,
/// lease ≥ interval, a lease too thin to ride out a stalled renewal, and, with history,
/// p99 > interval.
pub(crate) fn lint(
    jobs: &[Job],
    history: &BTreeMap<String, History>,
    dir: Option<&Path>,
) -> Vec<Problem> {
    let mut out = Vec::new();
    // Each command's jobs, in file order: one warning per duplicate, or one line for many.
    let mut by_command: BTreeMap<Vec<String>, Vec<&str>> = BTreeMap::new();
    for job in jobs {
        by_command
            .entry(resolved_command(&job.command, dir))
            .or_default()
            .push(&job.name);
    }
    let said = many_same_command(&by_command, &mut out);
    for job in jobs {
        if said.contains(&job.name.as_str()) {
            let key = resolved_command(&job.command, dir);
            let first = by_command.get(&key).and_then(|n| n.first()).copied();
            out.push(Problem::warning(
                &job.name,
                format!("same command as job {:?}", first.unwrap_or("?")),
                SAME_COMMAND_WHY,
            ));
        }
        lint_timing(job, &mut out);
        lint_history(job, history, &mut out);
    }
    out
}

const SAME_COMMAND_WHY: &str = "one action registered under two names fires twice; \
                                the commonest duplicate and the hardest to see";

/// One line for each command shared by more than [`SAME_COMMAND_EACH`] other jobs; returns the
/// jobs of the other shared commands, each warned of on its own.
fn many_same_command<'a>(
    by_command: &BTreeMap<Vec<String>, Vec<&'a str>>,
    out: &mut Vec<Problem>,
) -> Vec<&'a str> {
    let mut said: Vec<&str> = Vec::new();
    for names in by_command.values().filter(|n| n.len() > 1) {
        let (first, dups) = (names[0], &names[1..]);
        if dups.len() <= SAME_COMMAND_EACH {
            said.extend(dups.iter().copied());
            continue;
        }
        let shown: Vec<String> = dups.iter().take(5).map(|n| format!("{n:?}")).collect();
        out.push(Problem::warning(
            dups[0],
            format!(
                "same command as job {first:?} in {} other jobs: {}{}",
                dups.len(),
                shown.join(", "),
                if dups.len() > shown.len() {
                    ", …"
                } else {
                    ""
                }
            ),
            SAME_COMMAND_WHY,
        ));
    }
    said
}

fn human(d: Duration) -> String {
    crate::time::human_ms(d.as_millis() as u64)
}

/// A job's lease and timeout against its interval and the scheduler's heartbeat.
fn lint_timing(job: &Job, out: &mut Vec<Problem>) {
    let interval_s = job.schedule.interval_s();
    let interval = Duration::from_secs(interval_s.max(0) as u64);
    if interval_s > 0 && job.lease >= interval {
        out.push(Problem::warning(
            &job.name,
            format!("lease {} >= interval {}", human(job.lease), human(interval)),
            "a crashed run keeps the lease past the next firing, which it blocks",
        ));
    }
    if let (Some(t), Overlap::Coalesce) = (job.timeout, job.overlap) {
        if interval_s > 0 && t >= interval {
            out.push(Problem::warning(
                &job.name,
                format!("timeout {} >= interval {}", human(t), human(interval)),
                "under coalesce a run that hangs until its timeout drops every \
                 firing in between",
            ));
        }
    }
    // `exactly run` renews each run's lease by heartbeat, so a run longer than the lease
    // is normal: what can go wrong is a lease too short to ride out a stalled renewal
    // (the `lease<6s` of `status`, judged alike).
    let beats = crate::lease::SCHEDULER_BEAT * crate::lease::RENEWED_LEASE_MIN_BEATS;
    if crate::lease::renewal_margin_thin(job.lease, (interval_s > 0).then_some(interval)) {
        out.push(Problem::warning(
            &job.name,
            format!(
                "lease {} < {} scheduler heartbeats ({})",
                human(job.lease),
                crate::lease::RENEWED_LEASE_MIN_BEATS,
                human(beats)
            ),
            "a run's lease is renewed every third of it and the run is stopped when a \
             renewal is that late: a stall of under two heartbeats (a busy database, a \
             starved process) stops it; lengthen it, keeping it shorter than the interval",
        ));
    }
}

/// A job's runs so far: no timeout and nothing to size one by; p99 over the interval.
fn lint_history(job: &Job, history: &BTreeMap<String, History>, out: &mut Vec<Problem>) {
    let interval_s = job.schedule.interval_s();
    let interval = Duration::from_secs(interval_s.max(0) as u64);
    let p99 = history.get(job.name.as_str()).and_then(|h| h.p99_ms);
    if job.timeout.is_none() && p99.is_none() {
        out.push(Problem::note(
            &job.name,
            "no timeout",
            "with no run history to size it by, \
             a hung run holds the job until someone kills it; set timeout = \"…\"",
        ));
    }
    let Some(h) = history.get(job.name.as_str()) else {
        return;
    };
    let Some(p99) = h.p99_ms else { return };
    let p99d = Duration::from_millis(p99);
    if interval_s > 0 && p99d > interval {
        out.push(Problem::observed(
            &job.name,
            format!(
                "observed p99 {} > interval {}",
                human(p99d),
                human(interval)
            ),
            format!(
                "over {} recorded runs: \
                 a queue with an uncontrolled arrival rate, not a schedule",
                h.runs
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    /// 1,000 jobs of one command are one warning naming a few of them, not 1,000 lines; two
    /// jobs of one command still get one each.
    #[test]
    fn many_jobs_of_one_command_are_one_warning() {
        let mut file = String::new();
        for i in 0..1000 {
            file.push_str(&format!(
                "[[job]]\nname = \"j{i}\"\nevery = \"1m\"\nlease = \"10s\"\n\
                 overlap = \"coalesce\"\ncommand = [\"true\"]\n\n"
            ));
        }
        file.push_str(
            "[[job]]\nname = \"a\"\nevery = \"1m\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
             command = [\"false\"]\n\n[[job]]\nname = \"b\"\nevery = \"1m\"\nlease = \"10s\"\n\
             overlap = \"coalesce\"\ncommand = [\"false\"]\n",
        );
        let l = crate::runner::config::parse::parse(&file);
        let p = super::lint(&l.jobs, &Default::default(), None);
        let same: Vec<&String> = p
            .iter()
            .filter(|p| p.what.starts_with("same command"))
            .map(|p| &p.what)
            .collect();
        assert_eq!(same.len(), 2, "{same:?}");
        assert!(
            same.iter().any(|w| w.starts_with(
                "same command as job \"j0\" in 999 other jobs: \"j1\", \"j2\", \"j3\", \"j4\", \"j5\", …"
            )),
            "{same:?}"
        );
        assert!(
            same.contains(&&"same command as job \"a\"".to_string()),
            "{same:?}"
        );
    }
}

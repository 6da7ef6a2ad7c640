//! `exactly logs`: a job's stored run output.
use super::*;
use exactly::Missing;

#[derive(Args, Debug)]
pub(crate) struct LogsArgs {
    /// The job whose runs to print.
    pub job: crate::JobName,
    /// A run id (as `exactly status --json` and `exactly top` show them).
    #[arg(long = "run", value_name = "RUN_ID")]
    pub run: Option<String>,
    /// Keep printing: the run's new output while it lasts, then each next run of the job, until
    /// interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// How often `logs --follow` looks for new output.
pub(super) const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(300);

pub(super) fn logs_cmd(db: &Option<String>, a: LogsArgs) -> Result<i32> {
    let mut store = open_read_only(db)?;
    let job = &a.job;
    let mut run = match &a.run {
        Some(id) => match jobs::run_output(&mut store, id)? {
            Some((r, _)) if r.job_key == *job => r,
            Some((r, _)) => {
                return Err(Error::Store(format!(
                    "run {} is of job {}, not {}",
                    inert(id),
                    inert(&r.job_key),
                    inert(job)
                )))
            }
            None => {
                return Err(Error::not_found(
                    Missing::Run,
                    format!("no run {}", inert(id)),
                ))
            }
        },
        None => match jobs::run_after(&mut store, job, None)? {
            Some(r) => r,
            None if a.follow => {
                eprintln!("exactly: job {} has no runs yet; waiting", inert(job));
                loop {
                    std::thread::sleep(FOLLOW_POLL);
                    if let Some(r) = jobs::run_after(&mut store, job, None)? {
                        break r;
                    }
                }
            }
            None => {
                return Err(Error::not_found(
                    Missing::Run,
                    format!("job {} has no runs", inert(job)),
                ))
            }
        },
    };
    let mut out = std::io::stdout();
    loop {
        print_run(&mut store, &mut out, &run, a.follow)?;
        if !a.follow {
            return Ok(0);
        }
        // The next run of the job, whenever it starts.
        run = loop {
            if let Some(r) = jobs::run_after(&mut store, job, Some(&time::fmt(run.started_at)))? {
                break r;
            }
            std::thread::sleep(FOLLOW_POLL);
        };
    }
}

/// Prints one run: a header on stderr, its output on stdout, each line made inert. Following,
/// prints new output as the run stores it until the run ends. Returns whether it ended.
pub(super) fn print_run(
    store: &mut Store,
    out: &mut impl std::io::Write,
    run: &crate::snapshot::RunRow,
    follow: bool,
) -> Result<bool> {
    eprintln!(
        "== run {} of job {} (slot {}, started {}, owner {}) ==",
        inert(&run.run_id),
        inert(&run.job_key),
        time::fmt(run.scheduled_at),
        time::fmt(run.started_at),
        inert(&run.owner)
    );
    // What was printed of the stored text so far.
    let mut shown = String::new();
    loop {
        let Some((row, log)) = jobs::run_output(store, &run.run_id)? else {
            return Err(Error::not_found(
                Missing::Run,
                format!("run {} is gone (pruned?)", inert(&run.run_id)),
            ));
        };
        let ended = row.ended_at.is_some();
        // A stored log keeps head and tail of long output: when the text so far is no longer a
        // prefix of what is stored, what was skipped is said, and printing resumes at its end.
        if !log.starts_with(&shown) {
            writeln!(out, "[… output before this was not kept …]")?;
            shown.clear();
        }
        let fresh = &log[shown.len()..];
        // While the run lasts, whole lines only (the rest may still be arriving).
        let upto = if ended {
            fresh.len()
        } else {
            fresh.rfind('\n').map(|i| i + 1).unwrap_or(0)
        };
        for line in fresh[..upto].split_inclusive('\n') {
            writeln!(out, "{}", inert(line.trim_end_matches('\n')))?;
        }
        out.flush()?;
        shown.push_str(&fresh[..upto]);
        if ended || !follow {
            let how = match (&row.outcome, row.exit_code, row.duration_ms) {
                (Some(o), code, d) => format!(
                    "{}{}{}",
                    inert(o.as_str()),
                    code.map(|c| format!(" (exit {c})")).unwrap_or_default(),
                    d.map(|d| format!(" in {}", time::human_ms(d.max(0) as u64)))
                        .unwrap_or_default()
                ),
                (None, _, _) if ended => "ended".into(),
                (None, _, _) => "still running (or its scheduler died); output so far".into(),
            };
            eprintln!("== run {}: {how} ==", inert(&row.run_id));
            return Ok(ended);
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

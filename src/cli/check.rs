//! `exactly check`: the jobs file's problems, the same list `run` refuses on.
use crate::runner;
use crate::sanitize::inert;
use crate::Result;
use clap::Args;

#[derive(Args, Debug)]
pub(crate) struct CheckArgs {
    /// The jobs file to lint.
    pub jobs: String,
    /// Exit 1 for warnings too (errors always exit 1).
    #[arg(long)]
    pub strict: bool,
    /// Print the problems as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn check_main(db: &Option<String>, a: CheckArgs) -> Result<i32> {
    let (jobs, _, notify, mut problems) = runner::problems(db, &a.jobs)?;
    // A file of [[notify]] tables alone is `exactly watch`'s, which runs it: not a problem here.
    let for_watch = jobs.is_empty() && notify > 0 && problems.iter().any(|p| p.what == "no jobs");
    if for_watch {
        problems.retain(|p| p.what != "no jobs");
    }
    let command = if for_watch { "watch" } else { "run" };
    let count = |s: &str| problems.iter().filter(|p| p.kind() == s).count();
    let (errors, warnings, notes) = (count("error"), count("warning"), count("note"));
    // Errors fail the check (and `run` refuses them); warnings (risks `run` logs and runs
    // anyway) only with --strict; notes never.
    let code = i32::from(errors > 0 || (a.strict && warnings > 0));
    if a.json {
        let v = serde_json::json!({
            "file": a.jobs,
            "jobs": jobs.len(),
            "notify": notify,
            "for": command,
            "errors": errors,
            "warnings": warnings,
            "notes": notes,
            "strict": a.strict,
            "ok": code == 0,
            "dst": runner::config::dst_policy::dst_of(&jobs),
            "policies": runner::config::check::check_json(&jobs),
            "problems": problems.iter().map(|p| serde_json::json!({
                "severity": p.kind(),
                "job": p.job,
                "job_key": p.job,
                "line": p.at.as_ref().map(|at| at.line),
                "key": p.at.as_ref().and_then(|at| at.key.clone()),
                "what": p.what,
                "why": p.why,
            })).collect::<Vec<_>>(),
        });
        println!("{}", crate::json::render(v));
        return Ok(code);
    }
    for p in &problems {
        println!("{}", p.line(&a.jobs));
    }
    if code != 0 {
        return Ok(code);
    }
    for line in runner::config::check::check_lines(&jobs, &a.jobs) {
        println!("{line}");
    }
    let what = format!(
        "{} jobs, {notify} notify; for exactly {command}",
        jobs.len()
    );
    if warnings > 0 {
        println!(
            "{}: ok with {warnings} warning(s) ({what}; --strict fails on warnings)",
            inert(&a.jobs)
        );
    } else {
        println!("{}: ok ({what})", inert(&a.jobs));
    }
    Ok(0)
}

//! `exactly doctor`: the essay's ten rules judged for every job from what the ledger saw
//! ([`crate::checklist`]), as text readable at 80 columns or as JSON.
use crate::checklist::{self, Checklist, Declared, Options, SubjectName, Verdict};
use crate::sanitize::inert;
use crate::{Error, Result};
use clap::Args;
use std::fmt::Write as _;

#[derive(Args, Debug)]
pub(crate) struct DoctorArgs {
    /// Judge only this job (or action outside any job).
    #[arg(long)]
    pub job: Option<String>,
    /// The jobs file: its far_side and overlap declarations, and its jobs that never ran.
    #[arg(long, value_name = "JOBS")]
    pub file: Option<String>,
    /// Print the checklist as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Exit 1 for warnings too (failures always exit 1).
    #[arg(long)]
    pub strict: bool,
}

/// Text is wrapped to this width.
const WIDTH: usize = 80;

pub(super) fn doctor_main(db: &Option<String>, a: DoctorArgs) -> Result<i32> {
    let mut opts = Options {
        only: a.job.clone(),
        ..Options::default()
    };
    if let Some(path) = &a.file {
        let text = crate::runner::read_jobs_file(path)?;
        let loaded = crate::runner::config::parse(&text);
        if let Some(p) = loaded
            .problems
            .iter()
            .find(|p| p.severity == crate::runner::config::Severity::Error)
        {
            return Err(Error::Usage(format!(
                "the jobs file {} has errors (see exactly check): {}",
                inert(path),
                inert(&p.what)
            )));
        }
        opts.declared = loaded
            .jobs
            .iter()
            .map(|j| Declared {
                job: j.name.clone(),
                overlap: j.overlap,
                far_side: j.far_side,
                interval_s: j.schedule.interval_s(),
                lease_ms: j.lease.as_millis() as i64,
            })
            .collect();
        opts.file = Some(path.clone());
    }
    let mut store = crate::open(db.as_deref(), crate::Access::ReadOnly)?;
    let list = checklist::check(&mut store, &opts)?;
    if let Some(only) = &a.job {
        if list.subjects.is_empty() {
            return Err(Error::not_found(
                exactly::Missing::Job,
                format!(
                    "no job or action {} in {}",
                    inert(only),
                    inert(&crate::shown_db(crate::db_name(&store)))
                ),
            ));
        }
    }
    let worst = list.worst();
    let code = i32::from(worst == Verdict::Fail || (a.strict && worst == Verdict::Warn));
    if a.json {
        let mut v = list.to_json();
        if let Some(o) = v.as_object_mut() {
            o.insert("strict".into(), a.strict.into());
            o.insert("ok".into(), (code == 0).into());
        }
        println!("{}", crate::json::render(v));
    } else {
        print!("{}", text(&list));
    }
    Ok(code)
}

/// The checklist as text: a block per subject, a line per rule, its evidence and (unless ok)
/// its fix below, each wrapped to [`WIDTH`]; every outside string made inert.
pub(super) fn text(list: &Checklist) -> String {
    let mut s = String::new();
    let jobs = list
        .subjects
        .iter()
        .filter(|x| matches!(x.name, SubjectName::Job(_)))
        .count();
    let actions = list.subjects.len() - jobs;
    let _ = writeln!(
        s,
        "exactly doctor: {jobs} job(s), {actions} action(s) outside any job: {} fail, {} warn, \
         {} ok",
        list.count(Verdict::Fail),
        list.count(Verdict::Warn),
        list.count(Verdict::Ok)
    );
    for subject in &list.subjects {
        let (what, name) = match &subject.name {
            SubjectName::Job(j) => ("job", j),
            SubjectName::Action(a) => ("action outside any job", a),
        };
        let _ = writeln!(s, "\n{what} {}", inert(name));
        for r in &subject.rules {
            let mark = match r.verdict {
                Verdict::Ok => "ok  ",
                Verdict::Warn => "WARN",
                Verdict::Fail => "FAIL",
            };
            let _ = writeln!(
                s,
                "  {mark} {:>2} {}: {}",
                r.rule.number(),
                r.rule.id(),
                r.rule.title()
            );
            wrap(&mut s, "          ", &inert(&r.evidence));
            if r.verdict != Verdict::Ok {
                wrap(&mut s, "          ", &format!("fix: {}", inert(&r.fix)));
            }
        }
    }
    if list.subjects.is_empty() {
        s.push_str("nothing to judge: no job, lease or effect recorded\n");
    }
    s
}

/// `text` at `indent`, broken between words so no line passes [`WIDTH`] columns (a word
/// longer than a line stands alone).
fn wrap(out: &mut String, indent: &str, text: &str) {
    let room = WIDTH.saturating_sub(indent.len()).max(20);
    let mut line = String::new();
    let mut cols = 0;
    for word in text.split_whitespace() {
        let w = unicode_width::UnicodeWidthStr::width(word);
        if cols > 0 && cols + 1 + w > room {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
            cols = 0;
        }
        if cols > 0 {
            line.push(' ');
            cols += 1;
        }
        line.push_str(word);
        cols += w;
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
}

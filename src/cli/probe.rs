//! `exactly probe JOB`: the job's latest `done` effect attempted again on purpose, sending
//! nothing, so that the suppressed counter is seen to move (`effect::probe`).
use super::*;
use crate::effect::{ProbeVerdict, Probed};

#[derive(Args, Debug)]
pub(crate) struct ProbeArgs {
    /// The job whose latest done effect to attempt again.
    pub job: crate::JobName,
    /// Print the result as one JSON object (`schema_version`, `job_key`, `effect_key`,
    /// `verdict`, …).
    #[arg(long)]
    pub json: bool,
}

pub(super) fn probe_cmd(db: &Option<String>, a: ProbeArgs) -> Result<i32> {
    let mut store = open(db)?;
    let by = crate::actor();
    let probed = effect::probe(&mut store, &a.job, &by)?;
    if a.json {
        println!("{}", crate::json::render(to_json(&probed, &a.job, &by)));
    } else if probed.suppressed() {
        println!("{}", probed.describe());
    } else {
        eprintln!("exactly: {}", probed.describe());
    }
    Ok(probed.exit_code())
}

/// The result as `--json` prints it.
fn to_json(p: &Probed, job: &crate::JobName, by: &str) -> Value {
    let mut v = serde_json::json!({
        "job_key": job.to_string(),
        "actor": by,
        "sent": false,
        "message": p.describe(),
    });
    let o = v.as_object_mut().expect("an object");
    match p {
        Probed::Nothing(why) => {
            o.insert("verdict".into(), "nothing_to_probe".into());
            o.insert("reason".into(), why.clone().into());
        }
        Probed::Ran(r) => {
            let (word, reason, left) = match &r.verdict {
                ProbeVerdict::Suppressed => ("suppressed", None, None),
                ProbeVerdict::DedupeBroken { how, left } => {
                    ("dedupe_broken", Some(how.clone()), left.clone())
                }
                ProbeVerdict::NoVerdict(why) => ("no_verdict", Some(why.clone()), None),
            };
            o.insert("verdict".into(), word.into());
            o.insert("reason".into(), reason.into());
            o.insert("left_reserved".into(), left.into());
            o.insert("effect_key".into(), r.effect_key.to_string().into());
            o.insert("done_at".into(), r.done_at.clone().into());
            o.insert("fencing_token".into(), r.token.get().into());
            o.insert("suppressed_before".into(), r.suppressed_before.into());
            o.insert("suppressed_after".into(), r.suppressed_after.into());
        }
    }
    v
}

//! The operator's listings: `exactly jobs`, `exactly effects --state S`, and `status --check`.
//! Each reads through the library (`Snapshot::read`, `effect::in_state`) and only renders.
use super::*;
// `jobs --json` and `effects --json` share `status --json`'s shape version.
use crate::json::JSON_SCHEMA_VERSION;
use crate::sanitize::inert_trunc;
use crate::state::EffectState;
use crate::time::human_age;
use serde_json::json;

#[derive(Args, Debug)]
pub(crate) struct JobsArgs {
    /// Print the jobs as one JSON object (`schema_version`, `jobs`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub(crate) struct EffectsArgs {
    /// The ledger state to list.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(EffectState::KNOWN))]
    pub state: String,
    /// Only this job's effects.
    #[arg(long)]
    pub job: Option<String>,
    /// Print the effects as one JSON object (`schema_version`, `effects`).
    #[arg(long)]
    pub json: bool,
}

pub(super) fn jobs_cmd(db: &Option<String>, a: JobsArgs) -> Result<i32> {
    let snap = Snapshot::read(&mut open_read_only(db)?)?;
    if a.json {
        let jobs: Vec<Value> = snap
            .jobs
            .iter()
            .map(|j| {
                json!({
                    "job_key": j.job_key,
                    "schedule": j.settings.schedule,
                    "timezone": j.settings.timezone,
                    "interval_s": j.settings.interval_s,
                    "lease_ms": j.settings.lease_ms,
                    "overlap": j.settings.overlap,
                    "next_fire_at": if j.paused { None } else { j.next_fire_at.map(time::fmt) },
                    "last_run": j.last_run,
                    "last_success_at": j.last_success_at.map(time::fmt),
                    "lease_owner": j.lease_owner,
                    "lease_until": j.lease_until.map(time::fmt),
                    "fencing_token": j.fencing_token,
                    "paused": j.paused,
                    "pause_note": j.pause_note,
                    "retired": j.retired,
                    "failing": j.failing_episode().is_some(),
                    "state": j.state(),
                    "runs_failed": j.runs_failed,
                    "missed_firings": j.missed_firings,
                    "queue_depth": j.queue_depth,
                    "warnings": j.warnings,
                })
            })
            .collect();
        let v = json!({
            "schema_version": snap.schema_version,
            "json_schema_version": JSON_SCHEMA_VERSION,
            "taken_at": time::fmt(snap.taken_at),
            "jobs": jobs,
        });
        println!(
            "{}",
            crate::sanitize::json_visible(serde_json::to_string_pretty(&v).unwrap_or_default())
        );
        return Ok(0);
    }
    if snap.jobs.is_empty() {
        println!("no jobs in {}", inert(&snap.db));
        return Ok(0);
    }
    let now = Some(snap.taken_at);
    println!(
        "{:<24} {:<20} {:<14} {:<18} {:<20} LEASE",
        "JOB", "SCHEDULE", "NEXT", "LAST", "STATE"
    );
    for j in &snap.jobs {
        let schedule = match (&j.settings.schedule, &j.settings.timezone) {
            (Some(s), Some(tz)) => format!("{s} {tz}"),
            (Some(s), None) => s.clone(),
            _ => "-".into(),
        };
        let next = match (j.next_fire_at, now) {
            _ if j.paused || j.retired => "-".to_string(),
            (Some(t), Some(now)) if t >= now => {
                format!("in {}", human_age((t - now).num_seconds()))
            }
            (Some(t), Some(now)) => format!("late {}", human_age((now - t).num_seconds())),
            _ => "-".into(),
        };
        let last = match (&j.last_run, now) {
            (Some(r), Some(now)) => format!(
                "{} {} ago",
                r.outcome_or_running(),
                human_age(time::age_s(r.started_at, now))
            ),
            _ => "-".into(),
        };
        let lease = match (&j.lease_owner, j.lease_left_s) {
            (Some(o), Some(left)) if left > 0 => format!("{} {}", o, human_age(left)),
            _ => "free".into(),
        };
        println!(
            "{:<24} {:<20} {:<14} {:<18} {:<20} {}",
            inert_trunc(&j.job_key, 24),
            inert_trunc(&schedule, 20),
            next,
            inert_trunc(&last, 18),
            j.state().label(),
            inert_trunc(&lease, 28),
        );
    }
    Ok(0)
}

pub(super) fn effects_cmd(db: &Option<String>, a: EffectsArgs) -> Result<i32> {
    let state = EffectState::parse(&a.state);
    let mut store = open_read_only(db)?;
    let (schema_version, now, rows) = effect::in_state(&mut store, &state, a.job.as_deref())?;
    // The store refused a row whose `updated_at` is not a time; never an age of 0 for one.
    let ages = rows
        .iter()
        .map(|r| {
            time::parse(&r.updated_at)
                .map(|t| time::age_s(t, now))
                .ok_or_else(|| {
                    Error::corrupt(format!(
                        "effect_ledger.updated_at holds {:?}, not a time",
                        inert_trunc(&r.updated_at, 40)
                    ))
                })
        })
        .collect::<Result<Vec<i64>>>()?;
    if a.json {
        let effects: Vec<Value> = rows
            .iter()
            .zip(&ages)
            .map(|(r, age)| {
                json!({
                    "effect_key": r.effect_key,
                    "job_key": r.job_key,
                    "state": r.state,
                    "since": r.updated_at,
                    "age_s": age,
                    "created_at": time::fmt(r.created_at),
                    "run_id": r.run_id,
                    "fencing_token": r.fencing_token,
                    "terms_shown": r.terms_shown,
                    "verdict": r.verdict,
                    "resolved_by": r.resolved_by,
                    "resolved_at": r.resolved_at.map(time::fmt),
                    "attempt": r.attempt,
                    "containment": r.sender.as_deref().and_then(crate::sender::containment_of),
                })
            })
            .collect();
        let v = json!({
            "schema_version": schema_version,
            "json_schema_version": JSON_SCHEMA_VERSION,
            "taken_at": time::fmt(now),
            "state": state,
            "job_key": a.job,
            "effects": effects,
        });
        println!(
            "{}",
            crate::sanitize::json_visible(serde_json::to_string_pretty(&v).unwrap_or_default())
        );
        return Ok(0);
    }
    if rows.is_empty() {
        println!("no {state} effects");
        return Ok(0);
    }
    println!(
        "{:<32}  {:<20} {:<9} {:>8}  TERMS",
        "EFFECT KEY", "JOB", "STATE", "AGE"
    );
    for (r, age) in rows.iter().zip(ages) {
        println!(
            "{:<32}  {:<20} {:<9} {:>8}  {}",
            inert(&r.effect_key),
            inert_trunc(&r.job_key, 20),
            r.state,
            human_age(age),
            inert_trunc(r.terms_shown.as_deref().unwrap_or(""), 60)
        );
    }
    Ok(0)
}

/// `status --check`: one line on stdout, exit 0/1/2; a database that cannot be read is the
/// plugins' UNKNOWN (exit 3), also said on stdout, where a monitoring system looks.
pub(super) fn status_check(db: &Option<String>) -> Result<i32> {
    let snap = match open_read_only(db).and_then(|mut s| Snapshot::read(&mut s)) {
        Ok(snap) => snap,
        Err(e) => {
            println!("EXACTLY UNKNOWN - {}", inert(&e.to_string()));
            return Ok(3);
        }
    };
    let health = crate::health::check(&snap);
    println!("{}", health.line());
    Ok(health.exit_code())
}

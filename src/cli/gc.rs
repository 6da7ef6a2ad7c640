//! `exactly gc`: retention.
use super::*;

#[derive(Args, Debug)]
pub(crate) struct GcArgs {
    /// Keep this much history (at least 1d), e.g. 30d.
    #[arg(long, value_name = "DUR", value_parser = keep)]
    pub keep: std::time::Duration,
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also delete done effects (and their consumed approvals) older than the horizon. They
    /// are the dedupe memory: a backfill across the horizon sends again. Denied and cancelled
    /// effects and undecided approvals are kept: they are a person's word on the key.
    #[arg(long)]
    pub effects: bool,
    /// Print what was (or would be) deleted as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Smallest `gc --keep`: the dashboard's 24-hour window is read from the events.
pub(super) const GC_MIN_KEEP: std::time::Duration = std::time::Duration::from_secs(86_400);

/// `--keep`'s parser: a duration of at least [`GC_MIN_KEEP`].
fn keep(s: &str) -> std::result::Result<std::time::Duration, String> {
    let d = time::parse_duration(s).map_err(|e| e.to_string())?;
    if d < GC_MIN_KEEP {
        return Err(format!(
            "{} is shorter than 1d: the last 24 hours are what status and top show",
            inert(s)
        ));
    }
    Ok(d)
}

pub(super) fn gc_cmd(db: &Option<String>, a: GcArgs) -> Result<i32> {
    let keep = a.keep;
    let horizon = time::now() - chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::MAX);
    // Pruning a file that is not there is a typo, not a request for a new database.
    let path = crate::db_path(db.as_deref());
    if !crate::db_exists(&path)? {
        return Err(Error::not_found(
            exactly::Missing::Database,
            format!("database {} does not exist", inert(&path)),
        ));
    }
    let mut store = crate::open(Some(&path), Access::Write)?;
    let p = jobs::prune(&mut store, horizon, a.effects, a.dry_run)?;
    if a.json {
        let mut v = serde_json::to_value(&p).unwrap_or_default();
        crate::json::alias(&mut v);
        println!("{}", crate::json::render(v));
        return Ok(0);
    }
    let verb = if a.dry_run { "would delete" } else { "deleted" };
    let effects = if a.effects {
        format!(
            ", {} done effect(s), {} consumed approval(s)",
            p.effects, p.approvals
        )
    } else {
        String::new()
    };
    println!(
        "{verb} {} run(s), {} firing(s), {} event(s), \
         {} silent scheduler(s){effects} older than {horizon}",
        p.runs, p.firings, p.events, p.schedulers
    );
    Ok(0)
}

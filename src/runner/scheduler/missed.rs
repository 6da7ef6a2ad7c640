//! Slots no scheduler ran in time: recorded missed, each with why.
use super::db_health::{self, Health};
use super::tick::{Config, JobState};
use crate::firing;
use crate::jobs::Outage;
use crate::runner::config::job::Job;
use crate::time::{self, Ts};
use crate::{Result, Store};
use std::time::Duration;

/// Most missed slots recorded row by row in one go; beyond that they are only counted.
const MISSED_ROWS: usize = 1000;

/// The slots of an outage (no scheduler alive when they fell due) left behind their catch-up
/// window on a tick, over every job: said in one line, not one per job.
#[derive(Default)]
pub(super) struct Passed {
    slots: u64,
    jobs: u64,
}

impl Passed {
    pub(super) fn add(&mut self, n: u64) {
        if n > 0 {
            self.slots += n;
            self.jobs += 1;
        }
    }
    pub(super) fn say(&self, outage: Option<&Outage>) {
        let Some(o) = outage.filter(|_| self.slots > 0) else {
            return;
        };
        let len = (o.to - o.from).num_milliseconds().max(0) as u64;
        tracing::warn!(
            "outage: no scheduler was alive for {} (from {} to {}): {} firing(s) of {} job(s) \
             fell due then, past their catch-up window: not run (recorded as the outage, \
             not as missed)",
            time::human_ms(len),
            time::fmt(o.from),
            time::fmt(o.to),
            self.slots,
            self.jobs
        );
    }
}

/// Until when a slot decided late may still run: a slot that fell due while this scheduler
/// was alive (`alive_since`), decided past its catch-up window because the scheduler was
/// starved or frozen, runs late until its next slot falls due, as a catch-up whose run records
/// its lag, rather than being recorded missed. None: its window is the catch-up window as
/// before (a slot from before this scheduler's start, or one that fell due while the database
/// was unavailable: missed with that reason), or its own `starting_deadline`, which means what
/// it says.
pub(super) fn runs_late_until(job: &Job, slot: Ts, alive_since: Ts, health: &Health) -> Option<Ts> {
    if job.policy.starting_deadline.is_some()
        || slot < alive_since
        || health.why_missed(slot) == db_health::DB_UNAVAILABLE
    {
        return None;
    }
    job.schedule.next_after(slot)
}

/// Records the slots of a job that fell behind its catch-up window as missed, each with why
/// (no scheduler ran it, or the database was unavailable when it fell due). Another's job waits
/// for the safety net (`net`, then a second for its probe) as well: its owner decides its slots
/// meanwhile, and a write per job and slot here would only find them recorded. Those that fell
/// due while no scheduler was alive (the outage this scheduler's start ended) are the outage's:
/// not recorded one by one, never missed; returns how many.
pub(super) fn record_behind(
    store: &mut Store,
    cfg: &Config,
    st: &mut JobState,
    now: Ts,
    health: &Health,
    net: Duration,
) -> Result<u64> {
    let mut outage_slots = 0;
    let job = &st.job;
    // A firing its DST policy left out is a miss that says why, not a silence.
    let left_out_at = crate::schedule::skipped_slots(&job.schedule, st.dst_seen, now);
    let left_out: Vec<String> = left_out_at.iter().copied().map(time::fmt).collect();
    if let Some(first) = left_out_at.first() {
        let n = left_out.len() as u64;
        // The gap's real length in its zone (30 minutes on Lord Howe Island).
        let reason = &crate::schedule::skipped_reason(&job.schedule, *first);
        if firing::record_missed(store, &job.name, &left_out, n, &cfg.owner, reason)? > 0 {
            tracing::info!(job = %job.name, "firing at {} not run: {reason}", left_out.join(", "));
        }
    }
    st.dst_seen = now;
    // Past its start window (and the most its jitter delays it), a slot is surely missed.
    let mut wait = job.start_window() + job.policy.jitter;
    if !st.mine {
        wait = wait.max(net + super::share::NET_AFTER);
    }
    let mut horizon = now - chrono::Duration::milliseconds(wait.as_millis() as i64);
    // The latest slot behind the window may still run late, before its next one is due.
    let (latest, _) = job.schedule.slots(st.cursor, horizon, 1);
    if let Some(&slot) = latest.last() {
        if runs_late_until(job, slot, cfg.alive_since, health).is_some_and(|next| now < next) {
            horizon = slot - chrono::Duration::milliseconds(1);
        }
    }
    if st.cursor < horizon {
        let (mut slots, mut total) = job.schedule.slots(st.cursor, horizon, MISSED_ROWS);
        // The outage's slots (the latest ones: it ended at this scheduler's start).
        if let Some(o) = &cfg.outage {
            let before = slots.partition_point(|s| *s <= o.from);
            let after = slots.partition_point(|s| *s <= o.to);
            let unlisted = total.saturating_sub(slots.len() as u64);
            // Those older than the rows listed are older still: in it when it began before them.
            let older = match slots.first() {
                Some(first) if o.from < *first && before == 0 => unlisted,
                _ => 0,
            };
            outage_slots = (after - before) as u64 + older;
            slots.drain(before..after);
            total = total.saturating_sub(outage_slots);
        }
        // The slots are oldest first; those beyond the rows recorded are older still.
        let split = slots.partition_point(|s| health.why_missed(*s) != db_health::DB_UNAVAILABLE);
        let unrecorded = total.saturating_sub(slots.len() as u64);
        let parts = [
            (
                &slots[..split],
                unrecorded + split as u64,
                db_health::NOT_RUN,
            ),
            (
                &slots[split..],
                (slots.len() - split) as u64,
                db_health::DB_UNAVAILABLE,
            ),
        ];
        for (part, total, reason) in parts {
            if total == 0 {
                continue;
            }
            let part: Vec<String> = part.iter().copied().map(time::fmt).collect();
            let n = firing::record_missed(store, &job.name, &part, total, &cfg.owner, reason)?;
            if n > 0 {
                let window = match job.policy.starting_deadline {
                    Some(_) => "their starting_deadline",
                    None => "the catch-up window",
                };
                let why = if reason == db_health::NOT_RUN {
                    format!("no scheduler ran them within {window}")
                } else {
                    format!("the database was unavailable when they fell due (outside {window})")
                };
                let last = part.last().map(String::as_str).unwrap_or("?");
                tracing::error!(job = %job.name, "{n} firing(s) up to {last} missed: {why}");
            }
        }
        st.handled(horizon);
    }
    Ok(outage_slots)
}

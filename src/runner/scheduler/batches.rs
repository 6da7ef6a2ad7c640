//! Firing due slots: every job's slots gathered (with other schedulers' left unrecorded),
//! decided in batches of one transaction each, and the runs won started once all are decided.
//! A job's next slot due within [`decide_ahead`] is decided ahead of it the same way, where
//! nothing could make deciding it then differ from deciding it at the slot: its lease claimed
//! from the slot on, its run's thread and cage made, its command started at the slot. A burst
//! due together is then only its commands' starts when it falls due.
use super::db_health::Health;
use super::missed::runs_late_until;
use super::share::Share;
use super::tick::{decide_ahead, live_here, spawn, start_waiting, How, JobState, Tick};
use crate::firing::{self, DueFate, DueRequest, FireRequest, Fired, Started, Waiting};
use crate::runner::config::job::Job;
use crate::runner::log;
use crate::runner::run::execute::report;
use crate::schedule::LATE_OK;
use crate::state::FiringKind;
use crate::time::{self, Ts};
use crate::{Error, Result, Store};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tracing::Level;

/// Most firings decided in one transaction on SQLite: a burst of 500 due at one instant is
/// decided in one commit of about 10 ms (it was 32 to a transaction, so that runs' writes got
/// the lock between batches; the write lanes, see `store/gate.rs`, now put firings before runs'
/// ends).
const FIRE_BATCH: usize = 512;

/// Most firings decided in one transaction on PostgreSQL while other schedulers share the jobs
/// file. A SERIALIZABLE transaction's reads take predicate locks, and past
/// `max_pred_locks_per_relation` (32 rows or pages of one table by default) they become one lock
/// on the whole table, with which every other scheduler's batch conflicts: three schedulers'
/// batches of 500 failed one another until taken for an outage. A commit per 32 firings costs
/// 0.03 transactions a firing more than one per 500. A scheduler alone keeps [`FIRE_BATCH`]:
/// 1,500 due at once took 47 transactions at 32 each, its last firing decided 3 s late.
const PG_FIRE_BATCH: usize = 32;

/// Tries of a batch of more than one firing that keeps conflicting with other writers (40001)
/// before it is halved and tried again: a conflict storm is met with smaller transactions, and
/// only a single firing failing every one of the store's tries counts as the database failing.
const CONFLICT_TRIES: u32 = 3;

/// Fires every job's due slots, oldest first, at most [`FIRE_BATCH`] firings to a transaction
/// ([`PG_FIRE_BATCH`] on PostgreSQL shared with other schedulers; halved while they conflict,
/// grown back as they commit),
/// each job once per batch, so a job's second slot sees the run its first one won, and starts
/// the runs won once every batch is decided.
pub(super) fn fire_due(
    t: &mut Tick<'_>,
    states: &mut [JobState],
    pending: Vec<(usize, Waiting)>,
    share: &mut Share,
) {
    let now = time::now();
    let soon = time::add(now, decide_ahead());
    let mut due: Vec<(Ts, usize)> = Vec::new();
    let mut ahead: Vec<(Ts, usize)> = Vec::new();
    for (i, st) in states.iter().enumerate() {
        // A job whose missed slots are not recorded yet fires none (they go first, next tick,
        // in one write), so an outage's slots are not decided one transaction each.
        if !st.mine || st.behind {
            continue;
        }
        if st.next_due.is_some_and(|n| n <= now) {
            due.extend(st.due_by(now).into_iter().map(|s| (s, i)));
        } else if let Some(next) = st
            .next
            .filter(|_| may_decide_ahead(t, st, i, &pending, soon))
        {
            ahead.push((next, i));
        }
    }
    // How late its own burst is decided tells how late the others' are (see `share`); slots
    // already late (a catch-up) say nothing about it.
    let on_time = now - chrono::Duration::from_std(LATE_OK).unwrap_or(chrono::Duration::zero());
    let oldest = due.iter().map(|d| d.0).filter(|s| *s >= on_time).min();
    if let Err(e) = unrecorded(t.store, states, now, share.net_after(), &mut due) {
        t.health.failed("-", &e);
    }
    // Stable: a job's slots keep their order. The slots not due yet go after every due one.
    due.sort_by_key(|&(slot, _)| slot);
    ahead.sort_by_key(|&(slot, _)| slot);
    let ahead_of: HashSet<usize> = ahead.iter().map(|&(_, i)| i).collect();
    due.extend(ahead);
    if due.is_empty() {
        return;
    }
    let most = if crate::is_server_db(&t.cfg.db) && !share.alone() {
        PG_FIRE_BATCH
    } else {
        FIRE_BATCH
    };
    fire_batches(t, states, (&due, &ahead_of), pending, most);
    if let Some(lag) = oldest.and_then(|s| (time::now() - s).to_std().ok()) {
        share.own_lag(lag);
    }
}

/// Whether a job's next slot, not due yet, is decided ahead of it this tick: it falls due
/// within [`decide_ahead`] of now (`soon`), and nothing is known to stand in its way here (a
/// run of it live, a firing of it waiting or backing off, an earlier try ahead of this slot).
/// The store checks the rest in the transaction (see `DueRequest::ahead`): where deciding it now
/// could differ from deciding it at its slot, it is decided at its slot.
fn may_decide_ahead(
    t: &Tick<'_>,
    st: &JobState,
    i: usize,
    pending: &[(usize, Waiting)],
    soon: Ts,
) -> bool {
    st.next_due.is_some_and(|n| n <= soon)
        && st.ahead_tried != st.next
        && st.retry_after.is_none()
        && !pending.iter().any(|(p, _)| *p == i)
        && !live_here(t.runs, &st.job.name)
}

/// Other schedulers' slots still unrecorded `net` after they fell due join `due` (their owner
/// died or does not count itself their owner yet); those recorded are handled. One read.
fn unrecorded(
    store: &mut Store,
    states: &mut [JobState],
    now: Ts,
    net: Duration,
    due: &mut Vec<(Ts, usize)>,
) -> Result<()> {
    let upto = now - chrono::Duration::from_std(net).unwrap_or(chrono::Duration::zero());
    let mut watched: Vec<(usize, Vec<Ts>)> = Vec::new();
    for (i, st) in states.iter().enumerate() {
        if !st.mine && !st.behind && st.next_due.is_some_and(|n| n <= upto) {
            watched.push((i, st.due_by(upto)));
        }
    }
    if watched.is_empty() {
        return Ok(());
    }
    let texts: Vec<(usize, Vec<String>)> = watched
        .iter()
        .map(|(i, slots)| (*i, slots.iter().copied().map(time::fmt).collect()))
        .collect();
    let probe: Vec<(&str, &str)> = texts
        .iter()
        .flat_map(|(i, slots)| {
            let name = states[*i].job.name.as_str();
            slots.iter().map(move |s| (name, s.as_str()))
        })
        .collect();
    let recorded = firing::recorded(store, &probe)?;
    drop(probe);
    let mut fired = 0;
    for ((i, slots), (_, texts)) in watched.into_iter().zip(&texts) {
        let st = &mut states[i];
        let mut left = false;
        for (slot, text) in slots.into_iter().zip(texts) {
            if !recorded.contains(&(st.job.name.to_string(), text.clone())) {
                due.push((slot, i));
                left = true;
                fired += 1;
            } else if !left {
                // Recorded by its owner, in order: done here. One after a slot left
                // unrecorded is passed when that one fires.
                st.handled(slot);
            }
        }
    }
    if fired > 0 {
        tracing::warn!(
            "share: {fired} firing(s) \
             of other schedulers' jobs unrecorded {} after they fell due: fired here",
            time::human_ms(net.as_millis() as u64),
        );
    }
    Ok(())
}

/// A batch's firing, as decided: the job's index, its slot (as a time and as text), its lease's
/// end, whether it is on time or a catch-up, and — decided ahead of it — its instant (the slot
/// plus its jitter) as a time and as text.
type Part = (usize, Ts, String, String, FiringKind, Option<(Ts, String)>);

/// A run won by a firing of this tick, not yet handed to its thread: its job's index, the run,
/// what it must do before its command, when its lease's term began on this host's monotonic
/// clock (the write asking for it was sent; or its slot, decided ahead), and when its command
/// may start (None: at once).
struct Won {
    i: usize,
    started: Started,
    how: How,
    granted: Instant,
    start_at: Option<Instant>,
}

/// What this tick's batches decided so far.
#[derive(Default)]
struct Decided {
    /// Jobs whose firing failed, left for the next tick: their later slots must not pass it.
    failed: HashSet<usize>,
    /// The runs won, in the order decided.
    won: Vec<Won>,
    /// The jobs of `won`: their runs are live for the overlap policy (see [`decide`]).
    live: HashSet<usize>,
}

/// Fires `due` in batches (see [`fire_due`]), each batch's waiting firings first, then starts
/// the runs won. Every batch is decided before any run is handed over: a burst's runs start
/// hundreds of processes, which on a small machine held up the next batch's decision for as
/// long as its commands took to start (a second at 2,000 due at once), while all the batches
/// take tens of milliseconds alone.
fn fire_batches(
    t: &mut Tick<'_>,
    states: &mut [JobState],
    (due, ahead): (&[(Ts, usize)], &HashSet<usize>),
    mut pending: Vec<(usize, Waiting)>,
    most: usize,
) {
    let mut d = Decided::default();
    let mut size = most;
    let mut pos = 0;
    let mut k = 0;
    while pos < due.len() {
        let from = pos;
        let batch = next_batch(due, &mut pos, &d.failed, size);
        if batch.is_empty() {
            break;
        }
        k += 1;
        let asked = Instant::now();
        // A job's waiting firing goes before its new one (see `fire_loop.rs`): tried again at the very
        // instant the new one is decided at, so a lease the one cannot take the other cannot
        // either (the new one is then coalesced or queued behind it, as if the tick came later).
        let now = time::now();
        start_pending(t, states, &batch, &mut pending, now);
        let parts = batch_parts(states, &batch, now, ahead);
        let decided = match decide(t, states, &parts, now, &d.live) {
            BatchFate::Fates(decided) => decided,
            // Nothing of it was decided: the same firings again, fewer to a transaction (each
            // judged anew by its lateness then).
            BatchFate::Conflicted => {
                size = (batch.len() / 2).max(1);
                pos = from;
                continue;
            }
            // A locked database: this batch and the rest go again next tick; those decided
            // start.
            BatchFate::Busy => break,
        };
        let committed = asked.elapsed();
        size = (size * 2).min(most);
        let open = open_effects(t, &decided);
        let oldest = parts.first().map(|p| p.1);
        let n = parts.len();
        for (part, fired) in parts.into_iter().zip(decided) {
            // A run decided ahead: its lease's term, and its command, begin at its instant,
            // as far from `asked` as it was from `now` (read just after: never later).
            let start_at = part
                .5
                .as_ref()
                .map(|(at, _)| asked + (*at - now).to_std().unwrap_or(Duration::ZERO));
            let granted = start_at.unwrap_or(asked);
            settle(
                t,
                states,
                part,
                fired,
                open.as_ref(),
                (granted, start_at),
                &mut d,
            );
        }
        say_batch(k, n, oldest, now, committed);
    }
    hand_over(t, states, d.won, k);
}

/// Hands each run won to a thread of its own, which starts its command, in the order decided.
fn hand_over(t: &mut Tick<'_>, states: &[JobState], won: Vec<Won>, batches: usize) {
    if won.is_empty() {
        return;
    }
    let began = Instant::now();
    let n = won.len();
    for w in won {
        let job = &states[w.i].job;
        t.runs.push(spawn(
            t.cfg,
            job,
            w.started,
            w.how,
            t.kill,
            (w.granted, w.start_at),
        ));
    }
    tracing::debug!(
        "{n} run(s) of {batches} batch(es) handed over in {} ms",
        began.elapsed().as_millis()
    );
}

/// Where a batch's time went, at debug level: how late after its oldest slot it was begun,
/// and how long its waiting firings and its transaction took.
fn say_batch(k: usize, n: usize, oldest: Option<Ts>, begun: Ts, committed: Duration) {
    let late = oldest.map_or(0, |s| (begun - s).num_milliseconds());
    tracing::debug!(
        "fire batch {k}: {n} firing(s), begun {late} ms after its oldest slot, decided in {} ms",
        committed.as_millis(),
    );
}

/// The next batch from `pos` on: at most `size` firings, each job once, none of a job whose
/// firing failed this tick.
fn next_batch(
    due: &[(Ts, usize)],
    pos: &mut usize,
    failed: &HashSet<usize>,
    size: usize,
) -> Vec<(Ts, usize)> {
    let mut seen = HashSet::new();
    let mut batch = Vec::new();
    while let Some(&(slot, i)) = due.get(*pos) {
        if failed.contains(&i) {
            *pos += 1;
            continue;
        }
        if batch.len() >= size || !seen.insert(i) {
            break;
        }
        batch.push((slot, i));
        *pos += 1;
    }
    batch
}

/// Tries the batch's jobs' waiting firings (left over from this tick's first try) at `now`.
fn start_pending(
    t: &mut Tick<'_>,
    states: &mut [JobState],
    batch: &[(Ts, usize)],
    pending: &mut Vec<(usize, Waiting)>,
    now: Ts,
) {
    for &(_, i) in batch {
        if let Some(k) = pending.iter().position(|(p, _)| *p == i) {
            let (_, w) = pending.swap_remove(k);
            let st = &mut states[i];
            if let Err(e) = start_waiting(t, st, w, now) {
                t.health.failed(&states[i].job.name, &e);
            }
        }
    }
}

/// Each firing of the batch as decided at `now`: late past [`LATE_OK`] is a catch-up; one of
/// the jobs `ahead`, not due yet, is decided ahead of its instant, its lease counted from it.
fn batch_parts(
    states: &[JobState],
    batch: &[(Ts, usize)],
    now: Ts,
    ahead: &HashSet<usize>,
) -> Vec<Part> {
    batch
        .iter()
        .map(|&(slot, i)| {
            let due_at = states[i].job.due_at(slot);
            let late = (now - due_at).num_milliseconds() > LATE_OK.as_millis() as i64;
            let kind = if late {
                FiringKind::Catchup
            } else {
                FiringKind::Scheduled
            };
            let early = (ahead.contains(&i) && due_at > now).then(|| (due_at, time::fmt(due_at)));
            let from = early.as_ref().map_or(now, |(at, _)| *at);
            let until = time::fmt(time::add(from, states[i].job.lease));
            (i, slot, time::fmt(slot), until, kind, early)
        })
        .collect()
}

/// A slot's catch-up window, counted from the slot: its jitter, then its start window.
fn catchup_window(job: &Job, slot: Ts) -> Duration {
    job.start_window() + (job.due_at(slot) - slot).to_std().unwrap_or(Duration::ZERO)
}

/// How late after its slot a firing may be decided and still run: its jitter, then its start
/// window; or, a slot this scheduler was alive for, until its next slot (see
/// `missed::runs_late_until`).
fn window(job: &Job, slot: Ts, alive_since: Ts, health: &Health) -> Duration {
    let window = catchup_window(job, slot);
    match runs_late_until(job, slot, alive_since, health) {
        Some(next) => window.max((next - slot).to_std().unwrap_or(Duration::ZERO)),
        None => window,
    }
}

/// What became of a batch's transaction.
enum BatchFate {
    /// Each firing's fate, in the batch's order.
    Fates(Vec<Result<DueFate>>),
    /// It kept conflicting with other writers' transactions: nothing decided, and a smaller
    /// batch may pass.
    Conflicted,
    /// The database is locked or failing: the whole batch goes again next tick.
    Busy,
}

/// Decides the batch's firings in one transaction. A job in `won` has a run decided this tick,
/// not started yet: live all the same, so its next slot meets the overlap policy, not a second
/// run.
fn decide(
    t: &mut Tick<'_>,
    states: &[JobState],
    parts: &[Part],
    now: Ts,
    won: &HashSet<usize>,
) -> BatchFate {
    let now_text = time::fmt(now);
    // Each slot's lateness is judged when its transaction holds the database: one that
    // waited past its window for a lock or a server is missed, not run later still.
    let requests: Vec<DueRequest<'_>> = parts
        .iter()
        .map(|(i, slot_ts, slot, until, kind, early)| DueRequest {
            fire: FireRequest {
                job: &states[*i].job.name,
                slot,
                kind: *kind,
                owner: &t.cfg.owner,
                lease_until: until,
                now: &now_text,
                overlap: states[*i].job.overlap,
                live_here: won.contains(i) || live_here(t.runs, &states[*i].job.name),
            },
            window: window(&states[*i].job, *slot_ts, t.cfg.alive_since, t.health),
            reason: t.health.why_missed(*slot_ts),
            ahead: early.as_ref().map(|(_, text)| text.as_str()),
        })
        .collect();
    // A single firing has no smaller batch to fall back on: the store's every try is its.
    let fired = match requests.len() {
        1 => firing::fire_due(t.store, &requests).map(Some),
        _ => firing::fire_due_or_conflict(t.store, &requests, CONFLICT_TRIES),
    };
    let decided = match fired {
        Ok(Some(fired)) => fired.into_iter().map(Ok).collect(),
        Ok(None) => return BatchFate::Conflicted,
        // A locked database: the whole batch goes again next tick.
        Err(e @ Error::Busy { .. }) => {
            t.health.failed("-", &e);
            return BatchFate::Busy;
        }
        // Anything else may be one job's row: decide each alone, so it holds up no other.
        Err(_) => requests
            .iter()
            .map(|r| firing::fire_due(t.store, std::slice::from_ref(r)).map(|mut d| d.remove(0)))
            .collect::<Vec<_>>(),
    };
    say_run_late(states, parts, &decided);
    BatchFate::Fates(decided)
}

/// Says how many of the batch's firings ran though decided past their catch-up window (a
/// slot this scheduler was alive for, before its next one: see `window`), and the latest lag:
/// each is recorded as a catch-up, its run's start minus its slot its lag.
fn say_run_late(states: &[JobState], parts: &[Part], decided: &[Result<DueFate>]) {
    let now = time::now();
    let mut late = parts.iter().zip(decided).filter_map(|((i, slot, ..), d)| {
        let lag = (now - *slot).to_std().unwrap_or(Duration::ZERO);
        let started = matches!(d, Ok(DueFate::Fired(Fired::Started(_))));
        (started && lag > catchup_window(&states[*i].job, *slot)).then_some(lag)
    });
    let Some(first) = late.next() else {
        return;
    };
    let (n, most) = late.fold((1, first), |(n, m), l| (n + 1, m.max(l)));
    tracing::warn!(
        "{n} firing(s) decided up to {} late, past their catch-up window (this scheduler \
         starved or frozen): run late, before their next slot, as catch-ups",
        time::human_ms(most.as_millis() as u64),
    );
}

/// The jobs with open effects, asked once for the batch once its leases are granted (no effect
/// can be begun under an older token after that): only their runs wait for observers before
/// the command. Unknown (a failed read, or no run started): every run asks for itself.
fn open_effects(t: &mut Tick<'_>, decided: &[Result<DueFate>]) -> Option<HashSet<String>> {
    let started = decided
        .iter()
        .any(|d| matches!(d, Ok(DueFate::Fired(Fired::Started(_)))));
    if started {
        crate::effect::jobs_with_open(t.store).ok()
    } else {
        None
    }
}

/// Acts on one decided firing: logs it, keeps its run to start, or leaves the job for the
/// next tick.
fn settle(
    t: &mut Tick<'_>,
    states: &mut [JobState],
    part: Part,
    fired: Result<DueFate>,
    open: Option<&HashSet<String>>,
    (granted, start_at): (Instant, Option<Instant>),
    d: &mut Decided,
) {
    let (i, slot, slot_text, _, kind, _) = part;
    let st = &mut states[i];
    match fired {
        Ok(DueFate::Fired(fired)) => {
            st.handled(slot);
            let ahead = start_at.is_some();
            if let Some((started, how)) = fired_here(st, kind, slot_text, fired, open, ahead) {
                d.won.push(Won {
                    i,
                    started,
                    how,
                    granted,
                    start_at,
                });
                d.live.insert(i);
            }
        }
        // Something stood in its way: decided at its slot, as any other.
        Ok(DueFate::NotYet) => st.ahead_tried = Some(slot),
        Ok(DueFate::Late { late_ms, skipped }) => {
            st.handled(slot);
            // Its other late slots go next tick, in one write, with record_behind.
            d.failed.insert(i);
            say_late(t, st, slot, &slot_text, late_ms, skipped);
        }
        Err(e) => {
            d.failed.insert(i);
            t.health.failed(&st.job.name, &e);
        }
    }
}

/// A firing won or skipped: a paused job's skipped firings are counted (the first logged), a
/// started one's run is returned, to be handed over. One decided `ahead` of its slot says its
/// command waits for it.
fn fired_here(
    st: &mut JobState,
    kind: FiringKind,
    slot_text: String,
    fired: Fired,
    open: Option<&HashSet<String>>,
    ahead: bool,
) -> Option<(Started, How)> {
    // A paused job's skipped firings: the first logged, the rest counted.
    if matches!(fired, Fired::Skipped { .. }) {
        if st.skipped.0 == 0 {
            report(&st.job.name, kind, &slot_text, &fired);
        }
        st.skipped = (st.skipped.0 + 1, slot_text);
        return None;
    }
    if st.skipped.0 > 0 {
        let (n, last) = std::mem::take(&mut st.skipped);
        log::line(
            Level::INFO,
            &st.job.name,
            &format!("{n} firing(s) skipped while paused, the last at {last}"),
        );
    }
    if ahead && matches!(fired, Fired::Started(_)) {
        let said = fired.describe(kind, &slot_text);
        log::line(
            Level::INFO,
            &st.job.name,
            &format!("{said}, decided ahead: its command starts at its slot"),
        );
    } else {
        report(&st.job.name, kind, &slot_text, &fired);
    }
    let Fired::Started(started) = fired else {
        return None;
    };
    let settle = open.is_none_or(|o| o.contains(st.job.name.as_str()));
    let how = How {
        resumed: false,
        settle,
    };
    Some((started, how))
}

/// A firing decided too late (past its starting deadline or catch-up window): missed, or
/// skipped if its job is paused.
fn say_late(t: &Tick<'_>, st: &JobState, slot: Ts, slot_text: &str, late_ms: i64, skipped: bool) {
    let (level, what) = match skipped {
        true => (Level::INFO, "skipped (paused)"),
        false => (Level::ERROR, "MISSED"),
    };
    let late = time::human_ms(late_ms.max(0) as u64);
    let reason = t.health.why_missed(slot);
    log::line(
        level,
        &st.job.name,
        &format!(
            "firing at {slot_text} {what}: {late} late when decided, \
             past its {} ({reason})",
            if st.job.policy.starting_deadline.is_some() {
                "starting_deadline"
            } else {
                "catch-up window"
            }
        ),
    );
}

//! The notifier: every [`EVERY`] it reads a [`Snapshot`], finds the conditions each
//! `[[notify]]` table's rules name, and sends one notification per (rule, subject, episode)
//! through the effect ledger, so a restart or a second scheduler never sends it twice (the
//! second attempt is "duplicate suppressed"). The notifiers of one name share a lease
//! (`exactly-notify:<name>`): only its holder sends, under its fencing token. `exactly run`
//! runs it on a thread of its own with its own connection; `exactly watch` runs only it.
use super::send::{Hook, Webhook};
use crate::effect::{self, Ctx, Effect, Outcome, Spec};
use crate::runner::config::notify_config::Notify;
use crate::snapshot::Snapshot;
use crate::state::EffectState;
use crate::{jobs, lease, time, Access, Result, Store};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the rules are evaluated.
pub(crate) const EVERY: Duration = Duration::from_secs(2);
/// The notifier's lease: renewed every evaluation, so another takes over this long after one
/// dies.
const LEASE: Duration = Duration::from_secs(6);

/// One occurrence of a condition a rule names.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Condition {
    pub rule: &'static str,
    /// What it is about: a job, an effect key, a scheduler's owner.
    pub subject: String,
    /// Which occurrence: a new one is a new notification.
    pub episode: String,
    pub text: String,
}

/// The conditions `n`'s rules find in `snap`.
pub(crate) fn conditions(n: &Notify, snap: &Snapshot) -> Vec<Condition> {
    let mut out = Vec::new();
    if let Some(limit) = n.unknown_older_than {
        unknown_older_than(limit, snap, &mut out);
    }
    if let Some(limit) = n.approval_pending_longer_than {
        approval_pending(limit, snap, &mut out);
    }
    if let Some(streak) = n.failing_runs {
        failing_runs(streak, snap, &mut out);
    }
    if let Some(late) = n.late_by {
        late_by(late, snap, &mut out);
    }
    if n.late_by.is_some() {
        missed(snap, &mut out);
    }
    if n.scheduler_gone {
        scheduler_gone(snap, &mut out);
    }
    out
}

/// `unknown_older_than`: effects left unknown that long (not a notification's own).
fn unknown_older_than(limit: Duration, snap: &Snapshot, out: &mut Vec<Condition>) {
    // A notification itself lost is left to the operator: paging about it would go the
    // way the lost one went.
    for e in snap
        .unknown
        .iter()
        .filter(|e| e.age_s >= limit.as_secs() as i64 && !e.job_key.starts_with("exactly-notify:"))
    {
        out.push(Condition {
            rule: "unknown_older_than",
            subject: e.effect_key.to_string(),
            episode: e.effect_key.to_string(),
            text: format!(
                "effect {} of job {} has been {} for {}",
                e.effect_key,
                e.job_key,
                e.state,
                time::human_age(e.age_s)
            ),
        });
    }
}

/// `approval_pending_longer_than`: approvals asked for that long ago and still pending.
fn approval_pending(limit: Duration, snap: &Snapshot, out: &mut Vec<Condition>) {
    for a in snap
        .pending_approvals
        .iter()
        .filter(|a| a.age_s >= limit.as_secs() as i64)
    {
        out.push(Condition {
            rule: "approval_pending_longer_than",
            subject: a.effect_key.to_string(),
            // The text stored (the fixed width, which `fmt` gives back), as before it was a time.
            episode: format!("{}@{}", a.effect_key, time::fmt(a.requested_at)),
            text: format!(
                "effect {} of job {} has waited for an approval for {}",
                a.effect_key,
                a.job_key,
                time::human_age(a.age_s)
            ),
        });
    }
}

/// `failing_runs`: jobs whose current failing episode is at least `streak` runs long.
fn failing_runs(streak: u32, snap: &Snapshot, out: &mut Vec<Condition>) {
    // The episode is the snapshot's judgement (`JobRow::failing_episode`): a run under
    // way never ends it, and its key comes from the runs, so a restarted scheduler names
    // the same one.
    for j in snap.jobs.iter().filter(|j| !j.retired) {
        let Some((episode, len)) = j.failing_episode() else {
            continue;
        };
        if len < u64::from(streak) {
            continue;
        }
        let since = j
            .last_success_at
            .map_or_else(|| "it first ran".to_string(), time::fmt);
        out.push(Condition {
            rule: "failing_runs",
            subject: j.job_key.clone(),
            episode,
            text: format!(
                "job {} failed {len} runs in a row (since its last success, at {since})",
                j.job_key
            ),
        });
    }
}

/// `late_by`: jobs whose next firing is that late and has not run.
fn late_by(late: Duration, snap: &Snapshot, out: &mut Vec<Condition>) {
    let now = snap.taken_at;
    for j in snap.jobs.iter().filter(|j| !j.retired && !j.paused) {
        let Some(at) = j.next_fire_at else {
            continue;
        };
        let due = time::fmt(at);
        let by = now - at;
        if by.to_std().is_ok_and(|by| by >= late) {
            out.push(Condition {
                rule: "late_by",
                subject: j.job_key.clone(),
                episode: format!("{}@{due}", j.job_key),
                text: format!(
                    "job {}'s firing at {due} has not run: {} late",
                    j.job_key,
                    time::human_age(by.num_seconds())
                ),
            });
        }
    }
}

/// With `late_by`: firings a scheduler recorded missed.
fn missed(snap: &Snapshot, out: &mut Vec<Condition>) {
    // A firing a scheduler recorded missed (overlap fail, a starting deadline, past its
    // catch-up window) will never run: told at once, each miss its own episode, and with
    // nothing to recover from.
    for e in snap
        .events
        .iter()
        .filter(|e| e.kind == crate::state::EventKind::FiringMissed.as_str())
    {
        let Some(job) = e
            .job_key
            .as_deref()
            .filter(|j| !j.starts_with("exactly-notify:"))
        else {
            continue;
        };
        out.push(Condition {
            rule: MISSED,
            subject: job.to_string(),
            episode: format!("{job}@missed#{}", e.id),
            text: format!(
                "job {job}'s firing was missed at {}: {}",
                time::fmt(e.at),
                e.detail.as_deref().unwrap_or("recorded missed")
            ),
        });
    }
}

/// `scheduler_gone`: schedulers that stopped beating without a clean stop.
fn scheduler_gone(snap: &Snapshot, out: &mut Vec<Condition>) {
    for s in snap
        .schedulers
        .iter()
        .filter(|s| !s.alive && s.ended_at.is_none())
    {
        out.push(Condition {
            rule: "scheduler_gone",
            subject: s.owner.clone(),
            episode: format!("{}@{}", s.owner, time::fmt(s.started_at)),
            text: format!(
                "scheduler {} on {} (pid {}) stopped beating at {} without a clean stop",
                s.owner,
                s.host,
                s.pid,
                time::fmt(s.heartbeat_at)
            ),
        });
    }
}

/// One notifier's state between evaluations.
pub(crate) struct Notifier {
    pub notify: Notify,
    pub owner: String,
    pub cwd: Option<PathBuf>,
    token: Option<crate::Token>,
    /// Keys whose attempt ended (sent, suppressed, cancelled): not tried again by this process.
    settled: HashSet<String>,
    /// Keys left open (`unknown`, `submitted`): tried again only once an operator resolved
    /// them as not happened (their row is then `claimed`), never while open.
    open: HashSet<String>,
    /// The conditions found at the last evaluation, by (rule, subject, episode): those gone
    /// since get a recovery message.
    active: BTreeMap<(String, String, String), Condition>,
    /// Whether the ledger was read for episodes a former notifier sent and never recovered.
    resumed: bool,
}

impl Notifier {
    pub(crate) fn new(notify: Notify, owner: &str, cwd: Option<PathBuf>) -> Notifier {
        Notifier {
            notify,
            owner: owner.to_string(),
            cwd,
            token: None,
            settled: HashSet::new(),
            open: HashSet::new(),
            active: BTreeMap::new(),
            resumed: false,
        }
    }

    /// Holds the notifier's lease (claims or renews it): whether this process may send.
    fn hold(&mut self, store: &mut Store) -> Result<bool> {
        let job = self.notify.lease_job();
        if let Some(t) = self.token {
            if lease::renew(store, &job, t, LEASE)? {
                return Ok(true);
            }
            self.token = None;
        }
        match lease::claim(store, &job, &self.owner, LEASE)? {
            lease::Claim::Won { token } => {
                self.token = Some(token);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// One evaluation: find the conditions, send what is due.
    pub(crate) fn evaluate(&mut self, store: &mut Store, snap: &Snapshot) -> Result<()> {
        let found = conditions(&self.notify, snap);
        let mine = self.hold(store)?;
        if mine && !self.resumed {
            self.resume(store)?;
            self.resumed = true;
        }
        let now: BTreeMap<_, _> = found
            .into_iter()
            .map(|c| {
                (
                    (c.rule.to_string(), c.subject.clone(), c.episode.clone()),
                    c,
                )
            })
            .collect();
        let gone: Vec<Condition> = self
            .active
            .iter()
            .filter(|(k, _)| !now.contains_key(*k))
            .map(|(_, c)| c.clone())
            .collect();
        self.active = now;
        if !mine {
            return Ok(());
        }
        for c in self.active.values().cloned().collect::<Vec<_>>() {
            self.send(store, &c, "firing")?;
        }
        // A missed firing is an event, not a state: it has no end to tell.
        for c in gone.into_iter().filter(|c| c.rule != MISSED) {
            if self.notify.recovery && !self.send(store, &c, "recovered")? {
                // Not delivered: kept, so the next evaluation tries again.
                let key = (c.rule.to_string(), c.subject.clone(), c.episode.clone());
                self.active.entry(key).or_insert(c);
            }
        }
        Ok(())
    }

    /// Episodes this notifier's name sent as firing and never recovered, from the ledger (a
    /// restart keeps them): kept as active, so their end is told.
    fn resume(&mut self, store: &mut Store) -> Result<()> {
        if !self.notify.recovery {
            return Ok(());
        }
        let (_, _, rows) =
            effect::in_state(store, &EffectState::Done, Some(&self.notify.lease_job()))?;
        for r in rows {
            let Some(seen) = r
                .response
                .as_deref()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            else {
                continue;
            };
            let field = |k: &str| {
                seen.get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            let Some(rule) = RULES.iter().find(|r| **r == field("rule")) else {
                continue;
            };
            if field("state") != "firing" {
                continue;
            }
            let c = Condition {
                rule,
                subject: field("subject"),
                episode: field("episode"),
                text: field("text"),
            };
            let recovered = self.spec(&c, "recovered", channel_of(&seen)).key();
            if effect::get(store, &recovered)?.is_some_and(|r| r.state == EffectState::Done) {
                continue;
            }
            let key = (c.rule.to_string(), c.subject.clone(), c.episode.clone());
            self.active.entry(key).or_insert(c);
        }
        Ok(())
    }

    fn spec(&self, c: &Condition, state: &str, channel: &str) -> Spec {
        Spec::new(&format!("notify:{}", self.notify.name), &c.subject)
            .input("rule", c.rule)
            .input("episode", c.episode.as_str())
            .input("state", state)
            .input("channel", channel)
    }

    /// Sends `c` as `state` on every channel not yet settled. Whether every channel is settled.
    fn send(&mut self, store: &mut Store, c: &Condition, state: &str) -> Result<bool> {
        let Some(token) = self.token else {
            return Ok(false);
        };
        let job = self.notify.lease_job();
        let ctx = Ctx::new(&job, token).with_run_id(&format!("notify-{}", self.owner));
        let mut all = true;
        for channel in ["hook", "webhook"] {
            let spec = self.spec(c, state, channel);
            let key = spec.key();
            if self.settled.contains(key.as_str()) || self.still_open(store, &key)? {
                continue;
            }
            let body = body(&self.notify.name, c, state, &key);
            let hook = self.notify.hook.clone();
            let outcome = match (channel, &hook, &self.notify.webhook) {
                ("hook", Some(argv), _) => {
                    let mut h = Hook {
                        argv,
                        body: body.to_string(),
                        cwd: self.cwd.as_deref(),
                    };
                    send_through_ledger(store, &ctx, &spec, &mut h, &body)?
                }
                ("webhook", _, Some(url)) => {
                    let mut w = Webhook {
                        url,
                        body: body.to_string(),
                    };
                    send_through_ledger(store, &ctx, &spec, &mut w, &body)?
                }
                _ => continue,
            };
            if !self.ended(store, c, state, &key, outcome)? {
                all = false;
            }
        }
        Ok(all)
    }

    /// Whether `key` is a notification left open (unknown) that nobody resolved yet: a read,
    /// not an attempt, which would ask its observer and record a verdict every evaluation.
    fn still_open(&mut self, store: &mut Store, key: &str) -> Result<bool> {
        if !self.open.contains(key) {
            return Ok(false);
        }
        let open = effect::get(store, &crate::EffectKey::from(key))?
            .is_some_and(|r| matches!(r.state, EffectState::Unknown | EffectState::Submitted));
        if !open {
            self.open.remove(key);
        }
        Ok(open)
    }

    /// Logs and records what became of one attempt. Whether it is settled.
    fn ended(
        &mut self,
        store: &mut Store,
        c: &Condition,
        state: &str,
        key: &str,
        o: Outcome,
    ) -> Result<bool> {
        let name = self.notify.name.clone();
        let job = self.notify.lease_job();
        let what = format!("{state} {}: {}", c.rule, c.text);
        let detail = format!(
            "rule={} subject={} episode={} state={state}",
            c.rule, c.subject, c.episode
        );
        let record = |store: &mut Store, sent: bool| {
            let end = jobs::NotifyEnd {
                sent,
                job: &job,
                effect_key: key,
                rule: c.rule,
                detail: &detail,
            };
            jobs::notification_ended(store, &end)
        };
        let settled = match &o {
            Outcome::Done { .. } => {
                tracing::info!(job = %job, "notified {name}: {what}");
                record(store, true)?;
                true
            }
            Outcome::DuplicateSuppressed { .. } => {
                tracing::info!(
                    job = %job,
                    "{name} was already notified (duplicate suppressed): {what}"
                );
                true
            }
            Outcome::NotSent { reason, .. } => {
                tracing::warn!(
                    job = %job,
                    "could not notify {name} ({reason}); tried again in {}s: {what}",
                    EVERY.as_secs(),
                );
                record(store, false)?;
                false
            }
            Outcome::Unknown { reason, .. } => {
                tracing::warn!(
                    job = %job,
                    "notification {key} to {name} lost ({reason}): unknown until resolved \
                     (exactly resolve); not sent again: {what}"
                );
                record(store, false)?;
                self.open.insert(key.to_string());
                return Ok(true);
            }
            Outcome::Unresolved { reason, .. } => {
                tracing::warn!(
                    job = %job,
                    "notification {key} to {name} is open ({reason}): {what}"
                );
                self.open.insert(key.to_string());
                return Ok(true);
            }
            Outcome::Fenced { .. } | Outcome::LeaseEnding { .. } => {
                self.token = None;
                false
            }
            other => {
                tracing::warn!(job = %job, "notification {key} to {name}: {other:?}");
                true
            }
        };
        if settled {
            self.settled.insert(key.to_string());
        }
        Ok(settled)
    }
}

/// The rule a recorded missed firing is told under (asked for by `late_by`).
const MISSED: &str = "firing_missed";

/// The rules whose episodes end (and so are read back after a restart, to tell their end).
const RULES: &[&str] = &[
    "unknown_older_than",
    "approval_pending_longer_than",
    "failing_runs",
    "late_by",
    "scheduler_gone",
];

fn channel_of(seen: &serde_json::Value) -> &str {
    seen.get("channel")
        .and_then(|v| v.as_str())
        .unwrap_or("webhook")
}

/// The notification as sent (a hook's stdin, a webhook's body) and as recorded as the effect's
/// response (so a restart knows which episodes it told of).
fn body(name: &str, c: &Condition, state: &str, key: &str) -> serde_json::Value {
    let head = match state {
        "recovered" => "RECOVERED",
        _ => "FIRING",
    };
    json!({
        "text": format!("[exactly {name}] {head} {}: {}", c.rule, c.text),
        "notifier": name,
        "rule": c.rule,
        "subject": c.subject,
        "episode": c.episode,
        "state": state,
        "effect_key": key,
        "host": crate::host(),
    })
}

/// Sends through the ledger; a delivered notification's response is its body and channel.
fn send_through_ledger(
    store: &mut Store,
    ctx: &Ctx,
    spec: &Spec,
    e: &mut dyn Effect,
    body: &serde_json::Value,
) -> Result<Outcome> {
    let mut recorded = Recorded {
        inner: e,
        body: body.clone(),
        channel: spec.inputs.get("channel").cloned(),
    };
    effect::run(store, ctx, spec, &mut recorded)
}

/// Records the body (and channel) as the response, so [`Notifier::resume`] can read it back.
struct Recorded<'a> {
    inner: &'a mut dyn Effect,
    body: serde_json::Value,
    channel: Option<serde_json::Value>,
}

impl Effect for Recorded<'_> {
    fn perform(&mut self, key: &str) -> std::result::Result<String, effect::Failure> {
        let answer = self.inner.perform(key)?;
        let mut b = self.body.clone();
        b["answer"] = answer.into();
        b["channel"] = self.channel.clone().unwrap_or_default();
        Ok(b.to_string())
    }
    fn observe(&mut self, key: &str) -> effect::Observation {
        self.inner.observe(key)
    }
}

/// Evaluates `notifiers` every [`EVERY`] until `stop`, on a connection of its own. A database
/// error is logged and the next evaluation tries again.
pub(crate) fn serve(db: &str, mut notifiers: Vec<Notifier>, stop: &AtomicBool) {
    let mut store: Option<Store> = None;
    while !stop.load(Ordering::SeqCst) {
        if store.is_none() {
            match crate::open(Some(db), Access::Write) {
                Ok(s) => store = Some(s),
                Err(e) => tracing::warn!("notifier cannot open the database: {e}"),
            }
        }
        if let Some(s) = store.as_mut() {
            if let Err(e) = evaluate_all(s, &mut notifiers) {
                tracing::warn!("notifier: {e}");
                store = None;
            }
        }
        let until = std::time::Instant::now() + EVERY;
        while std::time::Instant::now() < until && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Another notifier takes over at once.
    if let Some(s) = store.as_mut() {
        for n in &notifiers {
            if let Some(t) = n.token {
                let _ = lease::release(s, &n.notify.lease_job(), t);
            }
        }
    }
}

fn evaluate_all(store: &mut Store, notifiers: &mut [Notifier]) -> Result<()> {
    let snap = Snapshot::read(store)?;
    for n in notifiers.iter_mut() {
        n.evaluate(store, &snap)?;
    }
    Ok(())
}

/// Starts [`serve`] on a thread of its own (nothing when there is no notifier).
pub(crate) fn start(
    db: &str,
    notify: Vec<Notify>,
    owner: &str,
    cwd: Option<PathBuf>,
    stop: Arc<AtomicBool>,
) {
    if notify.is_empty() {
        return;
    }
    let notifiers = notify
        .into_iter()
        .map(|n| Notifier::new(n, owner, cwd.clone()))
        .collect();
    let db = db.to_string();
    std::thread::spawn(move || serve(&db, notifiers, &stop));
}

//! What became of a notification (`[[notify]]`): an event for the dashboard's stream, and a
//! counter per rule and outcome for the metrics (`exactly_notifications_total`).
use super::db::{args, DbResult, Tx};
use super::rows::NotificationCount;
use super::{int, record_event, text_or_empty, NewEvent, Store};
use exactly_words::state::EventKind;
use exactly_words::Result;

/// One notification's end, as recorded.
#[derive(Debug, Clone)]
pub struct NotifyEnd<'a> {
    /// Whether it was delivered.
    pub sent: bool,
    /// The notifier's job (`exactly-notify:<name>`).
    pub job: &'a str,
    /// The effect key of the notification's send.
    pub effect_key: &'a str,
    /// The `[[notify]]` rule that fired it.
    pub rule: &'a str,
    /// What happened, in words.
    pub detail: &'a str,
}

/// The counter kinds behind `exactly_notifications_total`: `notify:<outcome>:<rule>`.
const PREFIX: &str = "notify:";

impl Store {
    pub fn notification_ended(&mut self, end: &NotifyEnd<'_>, now: &str) -> Result<()> {
        let (kind, outcome) = match end.sent {
            true => (EventKind::NotifySent, "sent"),
            false => (EventKind::NotifyFailed, "failed"),
        };
        let counter = format!("{PREFIX}{outcome}:{}", end.rule);
        self.write(|tx| -> DbResult<()> {
            let ev = NewEvent::new(kind.clone(), now)
                .job(end.job)
                .effect(end.effect_key)
                .detail(end.detail);
            record_event(tx, &ev)?;
            tx.exec(
                "INSERT INTO exactly_counters (kind, job_key, n) VALUES (?1, ?2, 1)
                 ON CONFLICT(kind, job_key) DO UPDATE SET n = exactly_counters.n + 1",
                args![&counter, end.job],
            )?;
            Ok(())
        })
    }

    /// (rule, outcome, notifier job, count) of every notification counted so far.
    pub fn notification_counts(&mut self) -> Result<Vec<(String, String, String, u64)>> {
        let counts = self.read(notification_counts)?;
        Ok(counts
            .into_iter()
            .map(|c| (c.rule, c.outcome, c.notifier, c.count))
            .collect())
    }
}

/// Every notification counted so far, by notifier, rule and outcome, in `tx` (the snapshot's
/// one read reads them with the rest).
pub(super) fn notification_counts(tx: &Tx<'_>) -> DbResult<Vec<NotificationCount>> {
    let rows = tx.rows(
        "SELECT kind, job_key, n FROM exactly_counters WHERE kind LIKE 'notify:%' \
         ORDER BY kind, job_key",
        args![],
        |r| {
            Ok((
                text_or_empty(r, 0)?,
                text_or_empty(r, 1)?,
                int(r, 2)?.unwrap_or(0).max(0) as u64,
            ))
        },
    )?;
    Ok(rows
        .into_iter()
        .filter_map(|(kind, notifier, count)| {
            let mut parts = kind.trim_start_matches(PREFIX).splitn(2, ':');
            let (outcome, rule) = (parts.next()?, parts.next()?);
            Some(NotificationCount {
                notifier,
                rule: rule.to_string(),
                outcome: outcome.to_string(),
                count,
            })
        })
        .collect())
}

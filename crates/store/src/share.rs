//! What a scheduler's share of its jobs file is read from: the live schedulers of the same file
//! (their heartbeats), and which of other schedulers' due slots are already recorded.
use super::db::{args, Arg};
use super::{text_or_empty, Store};
use exactly_words::Result;
use std::borrow::Cow;
use std::collections::HashSet;

/// Jobs probed per statement: a fixed number of parameters (the last one repeated to fill a
/// chunk), so each backend prepares the statement once.
const PROBE_CHUNK: usize = 64;

impl Store {
    /// The owners of the schedulers of `source` that beat within `dead_after` and did not
    /// record an end, judged on this transaction's clock (the server's on PostgreSQL, where the
    /// heartbeats were stamped too).
    pub fn live_schedulers(
        &mut self,
        source: &str,
        dead_after: std::time::Duration,
        now: &str,
    ) -> Result<Vec<String>> {
        self.read(|tx| {
            if !super::has_table(tx, "exactly_schedulers")? {
                return Ok(Vec::new());
            }
            // An instant that does not parse (never seen) counts nobody: the caller is alone
            // and fires all its jobs, which is safe.
            let Some(now) = exactly_words::time::parse(tx.now(now)) else {
                return Ok(Vec::new());
            };
            let alive_after = exactly_words::time::fmt(
                now - chrono::Duration::from_std(dead_after).unwrap_or(chrono::Duration::MAX),
            );
            tx.rows(
                "SELECT owner FROM exactly_schedulers
                 WHERE source = ?1 AND ended_at IS NULL AND heartbeat_at >= ?2 ORDER BY owner",
                args![source, alive_after],
                |r| text_or_empty(r, 0),
            )
        })
    }

    /// Which of `slots` (job, slot) have a firing row, whatever its state: one read, each job
    /// a probe of the firings' primary key.
    pub fn recorded_firings(
        &mut self,
        slots: &[(&str, &str)],
    ) -> Result<HashSet<(String, String)>> {
        let mut by_slot: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        for &(job, slot) in slots {
            by_slot.entry(slot).or_default().push(job);
        }
        let marks = (2..PROBE_CHUNK + 2)
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT job_key, scheduled_at FROM exactly_firings
             WHERE scheduled_at = ?1 AND job_key IN ({marks})"
        );
        self.read(|tx| {
            let mut out = HashSet::new();
            for (slot, jobs) in &by_slot {
                for chunk in jobs.chunks(PROBE_CHUNK) {
                    let mut a: Vec<Arg<'_>> = Vec::with_capacity(PROBE_CHUNK + 1);
                    a.push(Arg::Text(Cow::Borrowed(slot)));
                    let Some(last) = chunk.last() else { continue };
                    for i in 0..PROBE_CHUNK {
                        a.push(Arg::Text(Cow::Borrowed(chunk.get(i).unwrap_or(last))));
                    }
                    tx.each(&sql, &a, |r| {
                        out.insert((text_or_empty(r, 0)?, text_or_empty(r, 1)?));
                        Ok(())
                    })?;
                }
            }
            // A slot a pause's rolling row stands for has no row of its own, but was decided.
            for &(job, slot) in slots {
                let key = (job.to_string(), slot.to_string());
                if !out.contains(&key) && super::paused_rows::covered_tx(tx, job, slot)?.is_some() {
                    out.insert(key);
                }
            }
            Ok(out)
        })
    }
}

//! A paused job's skipped slots as two firing rows per pause, not one each: the pause's first
//! slot keeps its own row, and one rolling row moves to each later slot it skips, counting them.
//! The slots between the two count as decided ([`covered_tx`]) for every scheduler.
use super::db::{args, DbResult, Optional, Tx};
use super::firing_rows::{upsert_firing, FireRequest};
use super::{text, text_or_empty};
use exactly_words::state::FiringState;
use exactly_words::time::{fmt, Ts};

/// The words of a pause's rolling row: `N firing(s) skipped while paused since FIRST, the
/// latest at this slot[: note]`. Its slot moves to each slot the pause skips; with the pause's
/// first row it stands for every slot between them (see [`covered_tx`]).
const ROLLING: &str = "firing(s) skipped while paused since ";
const ROLLING_LATEST: &str = ", the latest at this slot";

/// A rolling row's count and first slot, read back from its detail.
fn rolling(detail: &str) -> Option<(u64, String)> {
    let (n, rest) = detail.split_once(' ')?;
    let rest = rest.strip_prefix(ROLLING)?;
    let (first, _) = rest.split_once(ROLLING_LATEST)?;
    Some((n.parse().ok()?, first.to_string()))
}

fn rolling_detail(n: u64, first: &str, note: Option<&str>) -> String {
    let note = note.map(|n| format!(": {n}")).unwrap_or_default();
    format!("{n} {ROLLING}{first}{ROLLING_LATEST}{note}")
}

/// The schedule's slot before `slot` the store holds a row of: (slot, state, detail, whether
/// it was decided since the job was last paused).
fn slot_before(tx: &Tx<'_>, job: &str, slot: &str) -> DbResult<Option<(Ts, String, String, bool)>> {
    tx.one(
        "SELECT scheduled_at, state, coalesce(detail, ''),
                CASE WHEN updated_at >= (SELECT coalesce(paused_at, '') FROM exactly_jobs
                                         WHERE job_key = ?1) THEN 1 ELSE 0 END
         FROM exactly_firings WHERE job_key = ?1 AND scheduled_at < ?2
           AND kind IN ('scheduled', 'catchup')
         ORDER BY scheduled_at DESC LIMIT 1",
        args![job, slot],
        |r| {
            Ok((
                // Written back as the key of the row it moves (see `roll_skipped_tx`).
                super::rows::slot(r, 0, "exactly_firings.scheduled_at")?,
                text_or_empty(r, 1)?,
                text_or_empty(r, 2)?,
                r.get::<i64>(3)? != 0,
            ))
        },
    )
    .optional()
}

/// A paused job's scheduled slot skipped as part of its pause's rows: the second slot the
/// pause skips gets a rolling row, each later one moves it to itself. False when the slot is
/// the pause's first (recorded on its own row by the caller).
pub(super) fn roll_skipped_tx(
    tx: &Tx<'_>,
    f: &FireRequest<'_>,
    note: Option<&str>,
) -> DbResult<bool> {
    let Some((prev, state, detail, this_pause)) = slot_before(tx, f.job, f.slot)? else {
        return Ok(false);
    };
    if state != FiringState::Skipped.to_string() || !this_pause {
        return Ok(false);
    }
    let now = tx.now(f.now);
    let prev = fmt(prev);
    match rolling(&detail) {
        Some((n, first)) => {
            // Moved as a new row and the old one deleted (not its key updated in place): a
            // reader's kept copy of the latest slots learns of both (see `windows.rs`).
            tx.exec(
                "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, owner, run_id, \
                     created_at, updated_at, detail)
                 SELECT job_key, ?3, kind, state, ?4, run_id, created_at, ?5, ?6
                 FROM exactly_firings WHERE job_key = ?1 AND scheduled_at = ?2",
                args![
                    f.job,
                    prev,
                    f.slot,
                    f.owner,
                    now,
                    rolling_detail(n + 1, &first, note)
                ],
            )?;
            tx.exec(
                "DELETE FROM exactly_firings WHERE job_key = ?1 AND scheduled_at = ?2",
                args![f.job, prev],
            )?;
        }
        None => {
            let detail = rolling_detail(2, &prev, note);
            upsert_firing(tx, f, FiringState::Skipped, None, Some(&detail))?;
        }
    }
    Ok(true)
}

/// Whether `slot` (with no row of its own) is one a pause's rolling row stands for: the
/// schedule's row before it is `skipped` and the one after it is that pause's rolling row.
/// Returns the rolling row's owner (who decided it).
pub(super) fn covered_tx(tx: &Tx<'_>, job: &str, slot: &str) -> DbResult<Option<Option<String>>> {
    let Some((_, state, _, _)) = slot_before(tx, job, slot)? else {
        return Ok(None);
    };
    if state != FiringState::Skipped.to_string() {
        return Ok(None);
    }
    let after: Option<(String, String, Option<String>)> = tx
        .one(
            "SELECT state, coalesce(detail, ''), owner FROM exactly_firings
             WHERE job_key = ?1 AND scheduled_at > ?2 AND kind IN ('scheduled', 'catchup')
             ORDER BY scheduled_at LIMIT 1",
            args![job, slot],
            |r| Ok((text_or_empty(r, 0)?, text_or_empty(r, 1)?, text(r, 2)?)),
        )
        .optional()?;
    Ok(after
        .filter(|(state, detail, _)| {
            *state == FiringState::Skipped.to_string() && rolling(detail).is_some()
        })
        .map(|(_, _, owner)| owner))
}

#[cfg(test)]
mod tests {
    use super::super::firing_rows::Fired;
    use super::*;
    use crate::Store;
    use exactly_words::policy::Overlap;
    use exactly_words::state::FiringKind;

    fn slot(s: u32) -> String {
        format!("2026-01-01T00:00:{s:02}.000Z")
    }

    fn fire(store: &mut Store, s: u32, kind: FiringKind, owner: &str, now: u32) -> Fired {
        let (slot, now, until) = (slot(s), slot(now), slot(now + 1));
        store
            .fire(&FireRequest {
                job: "j",
                slot: &slot,
                kind,
                owner,
                lease_until: &until,
                now: &now,
                overlap: Overlap::Coalesce,
                live_here: false,
            })
            .unwrap()
    }

    fn counted(store: &mut Store) -> i64 {
        store
            .read(|tx| {
                tx.one(
                    "SELECT n FROM exactly_counters WHERE kind = 'firing_skipped_paused' \
                     AND job_key = 'j'",
                    &[],
                    |r| r.get(0),
                )
            })
            .unwrap()
    }

    /// A pause's five skipped slots are two rows (its first, and the rolling one at the
    /// latest), the counter counts five; a slot with no row of its own is decided all the
    /// same: a second scheduler's late firing of it is a duplicate, its share probe finds it
    /// recorded, a missed record leaves it; once resumed, a backfill runs it and the rolling
    /// row, which keeps its kind so a scheduler still picks up after the pause.
    #[test]
    fn a_pause_s_slots_are_two_rows_and_each_is_decided_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("f.db").to_str().unwrap()).unwrap();
        assert!(store
            .set_paused("j", true, "op", Some("vendor outage"), &slot(0))
            .unwrap());
        for s in 1..=5 {
            let fired = fire(&mut store, s, FiringKind::Scheduled, "a", s);
            assert!(matches!(fired, Fired::Skipped { .. }), "{fired:?}");
        }
        let rows: Vec<(String, String)> = store
            .read(|tx| {
                tx.rows(
                    "SELECT scheduled_at, coalesce(detail, '') FROM exactly_firings \
                     ORDER BY scheduled_at",
                    &[],
                    |r| Ok((text_or_empty(r, 0)?, text_or_empty(r, 1)?)),
                )
            })
            .unwrap();
        assert_eq!(
            rows,
            [
                (slot(1), "vendor outage".to_string()),
                (
                    slot(5),
                    format!(
                        "5 firing(s) skipped while paused since {}, the latest at this slot: \
                         vendor outage",
                        slot(1)
                    )
                )
            ]
        );
        assert_eq!(counted(&mut store), 5);
        assert_eq!(store.last_slot("j").unwrap().map(fmt), Some(slot(5)));

        // Slot 3 has no row: a second scheduler firing it late finds it decided.
        let fired = fire(&mut store, 3, FiringKind::Scheduled, "b", 6);
        assert!(
            matches!(
                fired,
                Fired::Duplicate {
                    state: FiringState::Skipped,
                    ..
                }
            ),
            "{fired:?}"
        );
        assert_eq!(counted(&mut store), 5);
        let s3 = slot(3);
        let probed = store.recorded_firings(&[("j", s3.as_str())]).unwrap();
        assert!(
            probed.contains(&("j".to_string(), s3.clone())),
            "{probed:?}"
        );
        let missed = store
            .record_missed("j", &[slot(2), slot(3), slot(4)], 3, "b", &slot(6), "no")
            .unwrap();
        assert_eq!(missed, 0);
        assert_eq!(counted(&mut store), 5);
        // Slot 6, the pause's next, rolls on; slot 0 (before the pause) is no pause's.
        assert!(matches!(
            fire(&mut store, 6, FiringKind::Catchup, "a", 6),
            Fired::Skipped { .. }
        ));
        assert_eq!(counted(&mut store), 6);
        let covered = store.read(|tx| covered_tx(tx, "j", &slot(0))).unwrap();
        assert_eq!(covered, None);

        // Resumed: a backfill runs the rolling row's slot and one with no row of its own.
        assert!(store.set_paused("j", false, "op", None, &slot(7)).unwrap());
        for (s, now) in [(6, 10), (3, 20)] {
            let fired = fire(&mut store, s, FiringKind::Backfill, "op", now);
            assert!(matches!(fired, Fired::Started(_)), "slot {s}: {fired:?}");
        }
        let kinds: Vec<String> = store
            .read(|tx| {
                tx.rows(
                    "SELECT scheduled_at || ' ' || kind || ' ' || state FROM exactly_firings \
                     ORDER BY scheduled_at",
                    &[],
                    |r| text_or_empty(r, 0),
                )
            })
            .unwrap();
        assert_eq!(
            kinds,
            [
                format!("{} scheduled skipped", slot(1)),
                format!("{} backfill running", slot(3)),
                format!("{} scheduled running", slot(6)),
            ]
        );
        assert_eq!(store.last_slot("j").unwrap().map(fmt), Some(slot(6)));
    }
}

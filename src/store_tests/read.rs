//! The store's reading as the snapshot takes it (crates/store/src/read.rs).
/// A snapshot as the dashboard takes one, now.
pub(super) fn snap(store: &mut crate::store::Store) -> crate::snapshot::Snapshot {
    let reading = store
        .reading(
            exactly_words::time::now(),
            crate::jobs::SCHEDULER_DEAD_AFTER,
        )
        .unwrap();
    crate::snapshot::Snapshot::from_reading(reading, "test", crate::jobs::SCHEDULER_DEAD_AFTER)
}

/// A job's failing episode, as every reader sees it: a run under way, a killed run or one
/// waiting for approval never ends it, only an `ok` run does; a weekly job whose only run
/// this week is under way keeps the episode its older runs opened; the key names the last
/// success before the failures.
#[test]
fn a_failing_episode_ends_only_with_a_success() {
    use crate::snapshot::JobState;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.db");
    let path = path.to_str().unwrap();
    drop(crate::store::Store::open(path).unwrap());
    let raw = rusqlite::Connection::open(path).unwrap();
    let now = exactly_words::time::now();
    let at = |h: i64| exactly_words::time::fmt(now - chrono::Duration::hours(h));
    raw.execute(
        "INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, overlap, \
         updated_at) VALUES ('d', 'every 1h', 3600, 60, 'coalesce', ?1), \
         ('w', 'every 7d', 604800, 60, 'coalesce', ?1)",
        [at(0)],
    )
    .unwrap();
    let run = |job: &str, id: &str, h: i64, outcome: Option<&str>| {
        let ended = outcome.map(|_| at(h));
        let ms = outcome.map(|_| 1000);
        raw.execute(
            "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
             started_at, ended_at, outcome, duration_ms) VALUES (?1, ?2, ?3, 's', 1, ?3, ?4, \
             ?5, ?6)",
            rusqlite::params![id, job, at(h), ended, outcome, ms],
        )
        .unwrap();
    };
    let job = |store: &mut crate::store::Store, key: &str| {
        snap(store)
            .jobs
            .into_iter()
            .find(|j| j.job_key == key)
            .unwrap()
    };
    run("d", "d1", 10, Some("ok"));
    run("d", "d2", 9, Some("failed"));
    run("d", "d3", 8, Some("killed"));
    run("d", "d4", 7, Some("awaiting_approval"));
    run("d", "d5", 6, Some("timeout"));
    run("d", "d6", 5, None);
    // A weekly job: it failed 8 and 15 days ago; this week's only run is under way.
    run("w", "w1", 24 * 22, Some("ok"));
    run("w", "w2", 24 * 15, Some("failed"));
    run("w", "w3", 24 * 8, Some("failed"));
    run("w", "w4", 1, None);
    let mut store = crate::store::Store::open(path).unwrap();
    let d = job(&mut store, "d");
    assert_eq!(d.state(), JobState::Running);
    let ok_at = exactly_words::time::fmt(d.last_success_at.unwrap());
    assert_eq!(
        d.failing_episode(),
        Some((format!("d@after-ok:{ok_at}"), 2))
    );
    let w = job(&mut store, "w");
    assert_eq!(w.state(), JobState::Running);
    assert_eq!(w.failing_episode().map(|e| e.1), Some(2));
    raw.execute(
        "UPDATE exactly_runs SET ended_at = ?1, outcome = 'awaiting_approval', \
         duration_ms = 5 WHERE run_id = 'd6'",
        [at(0)],
    )
    .unwrap();
    let d = job(&mut store, "d");
    assert_eq!(d.state(), JobState::AwaitingApproval);
    assert_eq!(d.state().label(), "waiting for approval");
    assert!(d.failing_episode().is_some());
    run("d", "d7", 0, Some("ok"));
    let d = job(&mut store, "d");
    assert_eq!((d.state(), d.failing_episode()), (JobState::Ok, None));
}

/// A time in a row that is not a time is the database's corruption, said with the column
/// and the value: never read as "no lease", never replaced by the wall clock.
#[test]
fn a_bad_time_in_a_row_is_corrupt_not_guessed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.db");
    let path = path.to_str().unwrap();
    drop(crate::store::Store::open(path).unwrap());
    let raw = rusqlite::Connection::open(path).unwrap();
    raw.execute(
        "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at) \
         VALUES ('j', 'me', 1, 'next tuesday', '2026-01-01T00:00:00.000Z')",
        [],
    )
    .unwrap();
    let mut store = crate::store::Store::open_read_only(path).unwrap();
    match store.reading(
        exactly_words::time::now(),
        crate::jobs::SCHEDULER_DEAD_AFTER,
    ) {
        Err(exactly_words::Error::Corrupt { message, .. }) => {
            assert!(
                message.ends_with("job_lease.lease_until holds \"next tuesday\", not a time"),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
        other => panic!("a bad lease_until read as {other:?}"),
    }
}

/// Duplicates suppressed and fenced writes: all time from the counters, last 24 h from the
/// events (through the partial index that holds only those two kinds).
#[test]
fn windowed_counts_count_their_kind_in_the_last_day() {
    use crate::store::{record_event, NewEvent};
    use exactly_words::state::EventKind;
    let dir = tempfile::tempdir().unwrap();
    let mut store = crate::store::Store::open(dir.path().join("c.db").to_str().unwrap()).unwrap();
    let now = exactly_words::time::now();
    let at = |h: i64| exactly_words::time::fmt(now - chrono::Duration::hours(h));
    let (today, old) = (at(1), at(48));
    store
        .write(|tx| {
            for (kind, when) in [
                (EventKind::DuplicateSuppressed, &today),
                (EventKind::DuplicateSuppressed, &today),
                (EventKind::DuplicateSuppressed, &old),
                (EventKind::FencedWrite, &today),
                (EventKind::FencedWrite, &old),
                (EventKind::EffectDone, &today),
            ] {
                record_event(tx, &NewEvent::new(kind, when).job("j"))?;
            }
            Ok(())
        })
        .unwrap();
    let snap = store
        .reading(now, crate::jobs::SCHEDULER_DEAD_AFTER)
        .map(|r| {
            crate::snapshot::Snapshot::from_reading(r, "test", crate::jobs::SCHEDULER_DEAD_AFTER)
        })
        .unwrap();
    let t = &snap.totals;
    let d = &snap.last_24h;
    assert_eq!((t.duplicates_suppressed, t.fenced_writes), (3, 2));
    assert_eq!((d.duplicates_suppressed, d.fenced_writes), (2, 1));
}

/// The leaked counts agree with the ledger; the unknown counts (all time and last 24h) agree
/// with the ledger whether the open list holds every open effect (the counts come from it) or
/// only the first [`crate::store::OPEN_SHOWN`].
#[test]
fn unknown_counts_agree_with_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u.db");
    let path = path.to_str().unwrap();
    drop(crate::store::Store::open(path).unwrap());
    let mut raw = rusqlite::Connection::open(path).unwrap();
    let now = exactly_words::time::now();
    let at = |h: i64| exactly_words::time::fmt(now - chrono::Duration::hours(h));
    let mut add = |n: usize, state: &str, hours_ago: i64| {
        let tx = raw.transaction().unwrap();
        for i in 0..n {
            tx.execute(
                "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
                   created_at, updated_at) VALUES (?1, 'j', 'r', 1, ?2, ?3, ?3)",
                rusqlite::params![format!("{state}-{hours_ago}-{i}"), state, at(hours_ago)],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    };
    // Open: 3 unknown today, 2 unknown two days ago, 1 submitted with no live lease.
    add(3, "unknown", 1);
    add(2, "unknown", 48);
    add(1, "submitted", 2);
    add(4, "done", 1);
    // Leaked (claimed, no live lease): 2 today, 1 two days ago.
    add(2, "claimed", 1);
    add(1, "claimed", 48);
    let check = |expect: (u64, u64), listed: usize| {
        let snap = crate::store::Store::open_read_only(path)
            .unwrap()
            .reading(now, crate::jobs::SCHEDULER_DEAD_AFTER)
            .map(|r| {
                crate::snapshot::Snapshot::from_reading(
                    r,
                    "test",
                    crate::jobs::SCHEDULER_DEAD_AFTER,
                )
            })
            .unwrap();
        assert_eq!((snap.totals.unknown, snap.last_24h.unknown), expect);
        assert_eq!(snap.unknown.len(), listed);
        let leaked = (
            snap.totals.claimed_never_submitted,
            snap.last_24h.claimed_never_submitted,
        );
        assert_eq!(leaked, (3, 2));
    };
    check((6, 4), 6);
    // More open effects than the list shows: the counts still count all of them.
    add(crate::store::OPEN_SHOWN, "unknown", 30);
    check(
        (6 + crate::store::OPEN_SHOWN as u64, 4),
        crate::store::OPEN_SHOWN,
    );
}

/// The snapshot's ledger queries must stay index searches: a scan of the done rows would
/// make the dashboard's poll cost grow with the ledger's whole history.
#[test]
fn snapshot_queries_never_scan_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = crate::store::Store::open(dir.path().join("q.db").to_str().unwrap()).unwrap();
    for (q, plan) in store.plans().unwrap() {
        assert!(plan.iter().all(|p| !p.starts_with("SCAN")), "{q}: {plan:?}");
        // The ledger's rows are found through the open-effects index alone (a query that
        // does not repeat its term would fall back to a scan, or to the primary key).
        if q.contains("FROM exactly_events") {
            assert!(
                plan.iter()
                    .any(|p| p.contains("INDEX exactly_events_windowed")),
                "{q}: {plan:?}"
            );
        }
        if q.contains("FROM effect_ledger") {
            assert!(
                plan.iter()
                    .any(|p| p.contains("USING INDEX effect_ledger_open")
                        || p.contains("USING COVERING INDEX effect_ledger_open")),
                "{q}: {plan:?}"
            );
        }
    }
}

/// Writing a ledger row tests the open-effects index's term: written as a constant list of
/// three states, SQLite built (and dropped) an ephemeral b-tree for it on every insert and two
/// on every update, three per effect lifecycle, about 13 % of its instructions (schema 9).
#[test]
fn writing_a_ledger_row_builds_no_ephemeral_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    drop(crate::store::Store::open(path.to_str().unwrap()).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    for sql in [
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
         created_at, updated_at) VALUES ('k', 'j', 'r', 1, 'submitted', 'a', 'a')",
        "UPDATE effect_ledger SET state = 'done', updated_at = 'b' WHERE effect_key = 'k'",
        "DELETE FROM effect_ledger WHERE effect_key = 'k'",
    ] {
        let ops: Vec<String> = c
            .prepare(&format!("EXPLAIN {sql}"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(1))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            !ops.iter().any(|op| op == "OpenEphemeral"),
            "{sql}: {ops:?}"
        );
    }
}

/// A database of schema 9 has the open-effects index with its old term: opened by this
/// version, the index is made again with the new one (queries repeating the new term would
/// not use the old index at all), and the open rows it holds are all found through it.
#[test]
fn an_older_open_effects_index_is_redefined_on_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let p = path.to_str().unwrap();
    drop(crate::store::Store::open(p).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "DROP INDEX effect_ledger_open;
         CREATE INDEX effect_ledger_open ON effect_ledger (state, job_key, updated_at)
           WHERE state IN ('claimed', 'submitted', 'unknown');
         INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
           created_at, updated_at)
         VALUES ('open', 'j', 'r', 1, 'unknown', '2026-12-07T00:00:00.000Z',
                 '2026-12-07T00:00:00.000Z'),
                ('shut', 'j', 'r', 1, 'done', '2026-12-07T00:00:00.000Z',
                 '2026-12-07T00:00:00.000Z');
         PRAGMA user_version = 9;",
    )
    .unwrap();
    drop(c);
    let mut store = crate::store::Store::open(p).unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    let sql: String = c
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'effect_ledger_open'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        sql.contains("state = 'claimed' OR state = 'submitted'"),
        "{sql}"
    );
    let version: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, crate::store::SCHEMA_VERSION);
    let n: i64 = c
        .query_row(
            "SELECT count(*) FROM effect_ledger INDEXED BY effect_ledger_open
             WHERE (state = 'claimed' OR state = 'submitted' OR state = 'unknown')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1);
    for (q, plan) in store.plans().unwrap() {
        assert!(plan.iter().all(|p| !p.starts_with("SCAN")), "{q}: {plan:?}");
    }
}

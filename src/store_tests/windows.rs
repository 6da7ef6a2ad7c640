//! The store's kept run windows and latest slots against a fresh read (crates/store/src/windows.rs).
use super::read::snap;
/// (job, runs, failed, p50, p99, last run, last success) per job.
type Figures = Vec<(
    String,
    u64,
    u64,
    Option<u64>,
    Option<u64>,
    Option<crate::snapshot::RunRow>,
    Option<exactly_words::time::Ts>,
)>;

fn figures(store: &mut crate::Store) -> Figures {
    snap(store)
        .jobs
        .into_iter()
        .map(|j| {
            let (p50, p99) = (j.p50_ms, j.p99_ms);
            (
                j.job_key,
                j.runs,
                j.runs_failed,
                p50,
                p99,
                j.last_run,
                j.last_success_at,
            )
        })
        .collect()
}

/// The run windows a dashboard keeps between polls always agree with a fresh read: after
/// new runs, after a running run ends, after runs are deleted (gc), and as runs age out.
#[test]
fn kept_run_windows_agree_with_a_fresh_read() {
    for with_triggers in [true, false] {
        run_windows_agree(with_triggers);
    }
}

/// A fresh database (path, and a plain connection to write it as another program would),
/// with the deletion triggers or, as an older schema has it, without them.
fn site(with_triggers: bool) -> (tempfile::TempDir, String, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db").to_str().unwrap().to_string();
    drop(crate::Store::open(&path).unwrap());
    let raw = rusqlite::Connection::open(&path).unwrap();
    if !with_triggers {
        raw.execute_batch(
            "DROP TRIGGER exactly_runs_deleted; DROP TRIGGER exactly_firings_deleted;",
        )
        .unwrap();
    }
    (dir, path, raw)
}

/// With the deletion triggers, or without them (an older schema, read-only: the windows
/// count rows instead).
fn run_windows_agree(with_triggers: bool) {
    let (_dir, path, raw) = site(with_triggers);
    let path = path.as_str();
    let now = exactly_words::time::now();
    let at = |s: i64| exactly_words::time::fmt(now - chrono::Duration::seconds(s));
    let run = |id: &str, job: &str, ago: i64, dur: Option<i64>, outcome: &str| {
        raw.execute(
            "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token,
               started_at, ended_at, outcome, duration_ms) VALUES (?1, ?2, ?3, 'o', 1, \
                   ?3, ?3, ?4, ?5)",
            rusqlite::params![id, job, at(ago), dur.map(|_| outcome), dur],
        )
        .unwrap();
    };
    for job in ["a", "b", "c", "d", "e"] {
        raw.execute(
            "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
             VALUES (?1, 'o', 1, ?2, ?2)",
            rusqlite::params![job, crate::store::RELEASED],
        )
        .unwrap();
    }
    // One run started 8 days ago: outside the window from the start.
    run("old", "a", 8 * 86400, Some(999), "ok");
    run("edge", "c", 7 * 86400 - 1, Some(7), "ok");
    for i in 0..20 {
        run(&format!("a{i}"), "a", 3600 - i, Some(100 + i), "ok");
    }
    run("b-running", "b", 10, None, "");
    // d's only success is older than the window, e: never succeeded; both failed this week.
    run("d-old", "d", 9 * 86400, Some(3), "ok");
    run("d-new", "d", 60, Some(4), "failed");
    run("e-new", "e", 60, Some(4), "failed");
    let mut kept = crate::Store::open_read_only(path).unwrap();
    let fresh = |_: ()| figures(&mut crate::Store::open_read_only(path).unwrap());
    assert_eq!(figures(&mut kept), fresh(()));
    let success = |f: &Figures, job: &str| f.iter().find(|f| f.0 == job).unwrap().6;
    let first = figures(&mut kept);
    assert_eq!(
        success(&first, "d"),
        exactly_words::time::parse(&at(9 * 86400))
    );
    assert_eq!(success(&first, "e"), None);
    // New runs, one failed.
    run("a-new", "a", 5, Some(5000), "failed");
    run("c1", "c", 5, Some(70), "ok");
    assert_eq!(figures(&mut kept), fresh(()));
    // The running run ends.
    raw.execute(
        "UPDATE exactly_runs SET duration_ms = 42, outcome = 'ok' WHERE run_id = 'b-running'",
        rusqlite::params![],
    )
    .unwrap();
    assert_eq!(figures(&mut kept), fresh(()));
    let b = figures(&mut kept).into_iter().find(|f| f.0 == "b").unwrap();
    assert_eq!((b.1, b.3), (1, Some(42)), "{b:?}");
    assert_eq!(b.5.as_ref().and_then(|r| r.duration_ms), Some(42), "{b:?}");
    // Runs deleted (as gc does), including ones inside the window.
    raw.execute(
        "DELETE FROM exactly_runs WHERE run_id IN ('a3', 'a4', 'c1')",
        rusqlite::params![],
    )
    .unwrap();
    assert_eq!(figures(&mut kept), fresh(()));
    // A run leaves the window as time passes.
    let before = figures(&mut kept);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let after = figures(&mut kept);
    assert_eq!(after, fresh(()));
    assert_ne!(before, after, "the run at the window's edge left it");
    run("a-last", "a", 1, Some(1), "ok");
    assert_eq!(figures(&mut kept), fresh(()));
}

/// The latest slots a dashboard keeps between polls agree with a fresh read: after new
/// firings (of a known job and of a job first seen), after a job's latest firing is deleted,
/// and on a database without the deletion triggers (an older schema, read-only).
#[test]
fn kept_latest_slots_agree_with_a_fresh_read() {
    for with_triggers in [true, false] {
        let (_dir, path, raw) = site(with_triggers);
        let path = path.as_str();
        let register = |job: &str| {
            raw.execute(
                "INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, \
                     overlap, updated_at)
                 VALUES (?1, 'every 1m', 60, 60, 'skip', '2026-01-01T00:00:00.000Z')",
                rusqlite::params![job],
            )
            .unwrap();
        };
        for job in ["a", "b", "c"] {
            register(job);
        }
        let fire = |job: &str, slot: &str| {
            raw.execute(
                "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, \
                     created_at, updated_at)
                 VALUES (?1, ?2, 'schedule', 'done', ?2, ?2)",
                rusqlite::params![job, slot],
            )
            .unwrap();
        };
        let slots = |store: &mut crate::Store| -> Vec<(String, Option<exactly_words::time::Ts>)> {
            snap(store)
                .jobs
                .into_iter()
                .map(|j| (j.job_key, j.last_slot))
                .collect()
        };
        let fresh = || slots(&mut crate::Store::open_read_only(path).unwrap());
        fire("a", "2026-01-01T00:01:00.000Z");
        fire("a", "2026-01-01T00:02:00.000Z");
        // d is not registered yet: the dashboard does not ask for its slot.
        fire("d", "2026-01-05T00:00:00.000Z");
        let mut kept = crate::Store::open_read_only(path).unwrap();
        assert_eq!(slots(&mut kept), fresh());
        // New firings: a's next, b's first (b was asked about with none), a backfilled one.
        fire("a", "2026-01-01T00:03:00.000Z");
        fire("b", "2026-01-01T00:03:00.000Z");
        fire("a", "2025-12-31T00:00:00.000Z");
        let now = slots(&mut kept);
        assert_eq!(now, fresh());
        assert_eq!(
            now[0].1.map(exactly_words::time::fmt).as_deref(),
            Some("2026-01-01T00:03:00.000Z")
        );
        assert_eq!(
            now[1].1.map(exactly_words::time::fmt).as_deref(),
            Some("2026-01-01T00:03:00.000Z")
        );
        assert_eq!(now[2].1, None);
        // a's latest firing deleted (not what gc does, but another program may).
        raw.execute(
            "DELETE FROM exactly_firings WHERE job_key = 'a' \
             AND scheduled_at = '2026-01-01T00:03:00.000Z'",
            rusqlite::params![],
        )
        .unwrap();
        let now = slots(&mut kept);
        assert_eq!(now, fresh(), "triggers {with_triggers}");
        assert_eq!(
            now[0].1.map(exactly_words::time::fmt).as_deref(),
            Some("2026-01-01T00:02:00.000Z")
        );
        // d, not shown yet, gets an older slot backfilled while the dashboard polls; once
        // registered, its latest is still its newest slot (fired before the dashboard began).
        fire("d", "2025-06-01T00:00:00.000Z");
        slots(&mut kept);
        register("d");
        let now = slots(&mut kept);
        assert_eq!(now, fresh(), "triggers {with_triggers}");
        assert_eq!(
            now[3].1.map(exactly_words::time::fmt).as_deref(),
            Some("2026-01-05T00:00:00.000Z")
        );
    }
}

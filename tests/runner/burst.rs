//! Three `exactly run` processes on one PostgreSQL database deciding bursts: hundreds of jobs
//! due at one instant, a third of them each scheduler's. Their SERIALIZABLE transactions
//! conflict with one another; a conflict storm must be met with smaller transactions, never
//! taken for an outage: every slot is decided once, none is missed for the database being
//! unavailable, no command runs twice.
//! PostgreSQL only: SQLite has one writer at a time, so nothing conflicts there.
use crate::support;
use std::time::Duration;
use support::runner::*;

/// Jobs due together every [`EVERY_MS`]: about 150 a scheduler, past the 32 rows of one table
/// a transaction's predicate locks cover before they become one lock on the whole table.
const JOBS: usize = 450;
const EVERY_MS: u64 = 3000;
/// Bursts measured.
const BURSTS: u64 = 4;

/// A slot as the database holds it (fixed-width UTC).
fn slot(ms: u64) -> String {
    let ts = chrono::DateTime::from_timestamp_millis(ms as i64).expect("a valid instant");
    exactly::time::fmt(ts)
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn three_schedulers_conflicting_on_postgres_take_no_outage_and_run_none_twice() {
    let _pg = support::backend::enter_postgres();
    // Three schedulers and their bursts load the 2 cores: no other load test beside them.
    let _alone = support::backend::one_at_a_time();
    let site = Site::new();
    let mut toml = String::new();
    // The lease outlasts a starved spawn of `true` by far: no run is taken for dead and resumed
    // here, so a second run of a slot would be a slot decided twice.
    for j in 0..JOBS {
        toml.push_str(&format!(
            "[[job]]\nname = \"burst-{j:03}\"\nevery = \"{EVERY_MS}ms\"\nlease = \"10s\"\n\
             overlap = \"coalesce\"\ncommand = [\"true\", \"{j}\"]\n\n"
        ));
    }
    site.write_jobs(&toml);
    assert_eq!(site.exactly(&["init"]).0, 0);
    let mut scheds: Vec<Sched> = ["a", "b", "c"]
        .iter()
        .map(|o| site.start(o, "5s"))
        .collect();
    let shared = wait_until(Duration::from_secs(15), || {
        ["a", "b", "c"]
            .iter()
            .all(|o| site.log(o).contains("3 live schedulers"))
    });
    assert!(
        shared,
        "the three did not see one another:\n{}",
        site.log("a")
    );

    // The bursts after they share the jobs: each slot decided once, none taken for an outage.
    let t1 = (epoch_ms() + 500).div_ceil(EVERY_MS) * EVERY_MS;
    let t2 = t1 + BURSTS * EVERY_MS;
    // Past t2, every slot before it is decided (the safety net's included).
    let wait = t2 + 2500 - epoch_ms().min(t2);
    std::thread::sleep(Duration::from_millis(wait));
    let want = (JOBS as u64 * BURSTS) as i64;
    let window = format!(
        "scheduled_at >= '{}' AND scheduled_at < '{}'",
        slot(t1),
        slot(t2)
    );
    // A starved scheduler decides late (and records such slots missed, saying why): each slot
    // is still decided, once, soon after.
    let count_firings = || {
        site.count(&format!(
            "SELECT count(*) FROM exactly_firings WHERE {window}"
        ))
    };
    wait_until(Duration::from_secs(30), || count_firings() >= want);
    let firings = count_firings();
    let by_state = site.strings(&format!(
        "SELECT state || ' ' || count(*) || ' ' || coalesce(min(detail), '') \
         FROM exactly_firings WHERE {window} GROUP BY state ORDER BY state"
    ));
    let unavailable_slots = site.count(&format!(
        "SELECT count(*) FROM exactly_firings WHERE {window} AND state = 'missed' \
         AND detail LIKE '%database unavailable%'"
    ));
    let runs = site.count(&format!("SELECT count(*) FROM exactly_runs WHERE {window}"));
    let twice = site.count(&format!(
        "SELECT count(*) FROM (SELECT 1 FROM exactly_runs WHERE {window} \
         GROUP BY job_key, scheduled_at HAVING count(*) > 1) AS t"
    ));
    let unavailable: Vec<String> = ["a", "b", "c"]
        .iter()
        .filter(|o| site.log(o).contains("database unavailable"))
        .map(|o| o.to_string())
        .collect();
    eprintln!(
        "bursts: {want} slots, {firings} firings ({by_state:?}), {runs} runs, {twice} run twice; \
         logged the database unavailable: {unavailable:?}"
    );
    for s in scheds.iter_mut() {
        assert_eq!(s.term(Duration::from_secs(20)), Some(0));
    }
    assert!(
        unavailable.is_empty(),
        "conflicting batches were taken for an outage by {unavailable:?}:\n{}",
        site.log(&unavailable[0])
    );
    assert_eq!(firings, want, "every slot is decided, once");
    // A slot decided past its window on a starved machine is missed for lateness, said so
    // (`by_state` above); none may be missed for a database that answered.
    assert_eq!(
        unavailable_slots, 0,
        "slots missed as if the database were unavailable: {by_state:?}"
    );
    assert_eq!(twice, 0, "a slot ran twice");
}

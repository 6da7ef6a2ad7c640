//! What an effect lifecycle costs the database, counted where load cannot move the count: two
//! commits (`submitted` with its reservation, then `done`), and on PostgreSQL one round trip
//! each, counted on the wire between the library and the server (`support::pg_wire`). The
//! events and counters the dashboard reads are written inside those two commits.
use crate::on_both_backends;
use crate::support::backend::{current, Backend};
use crate::support::cli::Env;
use crate::support::pg_wire::Relay;
use exactly::effect::{self, Effect, Failure, Observation, Spec};
use exactly::{lease, JobName, Store};
use std::time::Duration;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Sends nothing and succeeds: what is counted is the ledger's alone.
struct Nothing;

impl Effect for Nothing {
    fn perform(&mut self, _key: &str) -> Result<String, Failure> {
        Ok(String::new())
    }
    fn observe(&mut self, _key: &str) -> Observation {
        Observation::NotHappened
    }
}

/// Lifecycles counted after the warm-up (which prepares the statements on PostgreSQL).
const N: u64 = 20;
const WARMUP: u64 = 3;

/// Runs lifecycles `from..to` of the job `lifecycle` through the library.
fn lifecycles(store: &mut Store, ctx: &effect::Ctx, from: u64, to: u64) -> Res<()> {
    for n in from..to {
        let spec = Spec::new("send", "counted").input("n", n.to_string());
        match effect::run(store, ctx, &spec, &mut Nothing)? {
            effect::Outcome::Done { .. } => {}
            other => return Err(format!("lifecycle {n} ended {other:?}").into()),
        }
    }
    Ok(())
}

/// The store at `db` with the job's lease held, and the context of its holder.
fn held(db: &str) -> Res<(Store, effect::Ctx)> {
    let mut store = Store::open(db)?;
    let job = JobName::from("lifecycle");
    match lease::claim(&mut store, &job, "test", Duration::from_secs(600))? {
        lease::Claim::Won { token } => Ok((store, effect::Ctx::new(&job, token))),
        other => Err(format!("the lease: {other:?}").into()),
    }
}

/// The frames of the SQLite WAL of `db`'s current generation (a frame whose salts differ from
/// the header's is left from before the last reset): each one's page, and whether it commits.
fn wal_frames(db: &str) -> Res<Vec<(u32, bool)>> {
    let wal = std::fs::read(format!("{db}-wal"))?;
    let word = |at: usize| -> Res<u32> {
        let b = wal.get(at..at + 4).ok_or("the WAL ends mid-frame")?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (page, salts) = (word(8)? as usize, (word(16)?, word(20)?));
    let (mut at, mut frames) = (32, Vec::new());
    while at + 24 + page <= wal.len() && (word(at + 8)?, word(at + 12)?) == salts {
        frames.push((word(at)?, word(at + 4)? != 0));
        at += 24 + page;
    }
    Ok(frames)
}

/// The store at the SQLite file `db` after `N` lifecycles counted from an emptied WAL, so that
/// every frame in it is theirs. Kept open: its close would checkpoint and remove the WAL.
fn counted_on_sqlite(db: &str) -> Res<Store> {
    let (mut store, ctx) = held(db)?;
    lifecycles(&mut store, &ctx, 0, WARMUP)?;
    let c = rusqlite::Connection::open(db)?;
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    lifecycles(&mut store, &ctx, WARMUP, WARMUP + N)?;
    Ok(store)
}

on_both_backends! {
    /// Each lifecycle is two commits; on PostgreSQL, two round trips and two statements, no
    /// prepare once warm, and no third transaction for a lease check, the clock, an event or a
    /// counter.
    #[test]
    fn a_lifecycle_is_two_commits_of_one_round_trip_each() {
        let env = Env::new();
        match current() {
            Backend::Postgres => {
                let relay = Relay::start(env.db_str()).expect("the relay");
                let (mut store, ctx) = held(&relay.url).expect("the lease");
                lifecycles(&mut store, &ctx, 0, WARMUP).expect("warm-up");
                let before = relay.counts();
                lifecycles(&mut store, &ctx, WARMUP, WARMUP + N).expect("lifecycles");
                let c = relay.counts() - before;
                eprintln!("{N} lifecycles on the wire: {c:?}");
                assert_eq!(c.commits, 2 * N, "commits: {c:?}");
                assert_eq!(c.rollbacks, 0, "rollbacks: {c:?}");
                // A connection idle for a second is checked with an empty query first: a
                // stalled machine's, not the lifecycle's.
                assert_eq!(c.round_trips - c.pings, 2 * N, "round trips: {c:?}");
                assert_eq!(c.statements, 2 * N, "statements: {c:?}");
                assert_eq!(c.parses, 0, "statements prepared again: {c:?}");
            }
            Backend::Sqlite => {
                let _store = counted_on_sqlite(env.db_str()).expect("lifecycles");
                let frames = wal_frames(env.db_str()).expect("the WAL");
                let commits = frames.iter().filter(|(_, commit)| *commit).count() as u64;
                assert_eq!(commits, 2 * N, "commits");
            }
        }
    }
}

/// The pages written by the frames of the SQLite WAL of `db`'s current generation, by the
/// b-tree each belongs to (SQLite's `dbstat`).
fn wal_pages_by_tree(db: &str) -> Res<std::collections::BTreeMap<String, u64>> {
    let c = rusqlite::Connection::open(db)?;
    let mut tree = std::collections::HashMap::new();
    let mut stmt = c.prepare("SELECT name, pageno FROM dbstat")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        tree.insert(r.get::<_, i64>(1)? as u32, r.get::<_, String>(0)?);
    }
    let mut by_tree = std::collections::BTreeMap::new();
    for (page, _) in wal_frames(db)? {
        let name = tree.get(&page).cloned().unwrap_or_else(|| "(free)".into());
        *by_tree.entry(name).or_insert(0) += 1;
    }
    Ok(by_tree)
}

/// The pages a lifecycle writes on a new SQLite ledger, each one a guarantee's: the row, its
/// key and its open-effects entry, then the row, the entry and the `done` event with its two
/// indexes. The events' ids need no `sqlite_sequence` page (no AUTOINCREMENT; retention keeps
/// the newest event, so no id is handed out twice).
#[test]
fn a_lifecycle_writes_no_sequence_page() {
    let env = Env::new();
    let _store = counted_on_sqlite(env.db_str()).expect("lifecycles");
    let pages = wal_pages_by_tree(env.db_str()).expect("the WAL");
    let total: u64 = pages.values().sum();
    eprintln!("{N} lifecycles wrote {total} pages: {pages:?}");
    assert_eq!(pages.get("sqlite_sequence"), None, "pages: {pages:?}");
    assert!(
        total <= 9 * N,
        "{total} pages for {N} lifecycles: {pages:?}"
    );
}

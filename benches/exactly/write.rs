use super::*;

/// Sends nothing and always succeeds: the cost measured is the ledger's alone.
pub(crate) struct Nothing;

impl Effect for Nothing {
    fn perform(&mut self, _key: &str) -> Result<String, Failure> {
        Ok(String::new())
    }
    fn observe(&mut self, _key: &str) -> Observation {
        Observation::NotHappened
    }
}

/// Bare single-row commits per second with the store's own pragmas on the same file system.
pub(crate) fn bare_commits(dir: &Path, secs: f64) -> Res<f64> {
    let mut c = bare_db(&dir.join("bare.db"))?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        bare_commit(&mut c, n)?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// A fresh ledger at `path` with the bench job's lease held: (store, context of its holder).
pub(crate) fn fresh_ledger(path: &Path) -> Res<(Store, effect::Ctx)> {
    remove_db(path);
    ledger_with_lease(path_str(path)?)
}

/// The ledger `db` (a SQLite path or a PostgreSQL URL) opened, with the bench job's lease held.
pub(crate) fn ledger_with_lease(db: &str) -> Res<(Store, effect::Ctx)> {
    let mut store = Store::open(db)?;
    let token = match lease::claim(
        &mut store,
        &exactly::JobName::from("bench"),
        "bench",
        Duration::from_secs(3600),
    )? {
        lease::Claim::Won { token } => token,
        lease::Claim::Held { .. } => return Err("the bench lease is held".into()),
    };
    Ok((
        store,
        effect::Ctx::new(&exactly::JobName::from("bench"), token),
    ))
}

pub(crate) fn remove_db(path: &Path) {
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
    }
}

/// One whole effect lifecycle, its input `n`.
pub(crate) fn lifecycle(store: &mut Store, ctx: &effect::Ctx, n: u64) -> Res<()> {
    let spec = Spec::new("send", "bench").input("i", n.to_string());
    match effect::run(store, ctx, &spec, &mut Nothing)? {
        effect::Outcome::Done { .. } => Ok(()),
        other => Err(format!("lifecycle {n} ended {other:?}").into()),
    }
}

/// A bare database with the store's pragmas and one table with a unique key.
pub(crate) fn bare_db(path: &Path) -> Res<Connection> {
    remove_db(path);
    let c = Connection::open(path)?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.busy_timeout(Duration::from_secs(5))?;
    c.execute(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT NOT NULL UNIQUE, v TEXT)",
        [],
    )?;
    Ok(c)
}

/// One bare single-row commit, its key from `n`.
pub(crate) fn bare_commit(c: &mut Connection, n: u64) -> Res<()> {
    let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    tx.execute(
        "INSERT INTO t (k, v) VALUES (?1, ?2)",
        params![format!("{n:032x}"), "2026-11-30T00:00:00.000Z"],
    )?;
    tx.commit()?;
    Ok(())
}

/// Whole effect lifecycles per second through the library (lease held, no approval).
pub(crate) fn lifecycles(dir: &Path, secs: f64, round_no: u32) -> Res<f64> {
    let (mut store, ctx) = fresh_ledger(&dir.join(format!("ledger-{round_no}.db")))?;
    lifecycles_for(&mut store, &ctx, secs)
}

/// Lifecycles per second for `secs` on an open ledger whose lease `ctx` holds.
pub(crate) fn lifecycles_for(store: &mut Store, ctx: &effect::Ctx, secs: f64) -> Res<f64> {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        lifecycle(store, ctx, n)?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

pub(crate) fn write_ratio(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("write");
    std::fs::create_dir_all(&dir)?;
    // Interleaved rounds, so a neighbour's burst of disk work hits both sides alike.
    let (mut bare, mut life) = (Vec::new(), Vec::new());
    for r in 0..3 {
        bare.push(bare_commits(&dir, plan.write_secs / 3.0)?);
        life.push(lifecycles(&dir, plan.write_secs / 3.0, r)?);
    }
    let bare_s = median(&mut bare);
    let life_s = median(&mut life);
    out.insert("write_ratio".into(), json!(round(life_s / bare_s, 3)));
    out.insert("lifecycles_per_s".into(), json!(round(life_s, 0)));
    out.insert("bare_commits_per_s".into(), json!(round(bare_s, 0)));
    // What a commit costs here is its fsync and the pages it writes: count the WAL frames each
    // side appends (no checkpoint in between: 50 writes stay under the 1,000-frame autocheckpoint).
    let (life_frames, bare_frames, by_tree) = wal_frames(&dir, 50)?;
    out.insert(
        "wal_frames_per_lifecycle".into(),
        json!(round(life_frames, 1)),
    );
    out.insert(
        "wal_frames_per_bare_commit".into(),
        json!(round(bare_frames, 1)),
    );
    out.insert("wal_frames_by_tree".into(), by_tree);
    Ok(())
}

/// WAL frames appended per effect lifecycle and per bare commit, over `n` of each, and which
/// table or index each of a lifecycle's frames wrote ([`frames_by_tree`]).
pub(crate) fn wal_frames(dir: &Path, n: u64) -> Res<(f64, f64, Value)> {
    // Frames now in the WAL, as a passive checkpoint reports them (it copies, never resets).
    let checkpoint = |path: &Path, mode: &str| -> Res<f64> {
        let c = Connection::open(path)?;
        let log: i64 = c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| r.get(1))?;
        Ok(log as f64)
    };
    // A few first, so page allocation at the file's start is not counted; then the WAL is
    // emptied and `n` more counted.
    let path = dir.join("frames.db");
    let (mut store, ctx) = fresh_ledger(&path)?;
    for i in 0..20 {
        lifecycle(&mut store, &ctx, i)?;
    }
    checkpoint(&path, "TRUNCATE")?;
    for i in 20..20 + n {
        lifecycle(&mut store, &ctx, i)?;
    }
    // Read while the store's connection keeps the WAL (its close checkpoints and removes it).
    let by_tree = frames_by_tree(&path, n)?;
    let life = checkpoint(&path, "PASSIVE")? / n as f64;

    let bare = dir.join("frames-bare.db");
    let mut c = bare_db(&bare)?;
    for i in 0..20 {
        bare_commit(&mut c, i)?;
    }
    checkpoint(&bare, "TRUNCATE")?;
    for i in 20..20 + n {
        bare_commit(&mut c, i)?;
    }
    Ok((life, checkpoint(&bare, "PASSIVE")? / n as f64, by_tree))
}

/// The frames now in the WAL of `path` (written by `n` lifecycles, two commits each), per
/// lifecycle, by the b-tree each frame's page belongs to (SQLite's `dbstat`), for the first
/// commit (`start`: reserved and `submitted`) and the second (`end`: `done`): where a
/// lifecycle's pages go, so a change can be judged by the pages it saves.
fn frames_by_tree(path: &Path, n: u64) -> Res<Value> {
    let wal = std::fs::read(format!("{}-wal", path.display()))?;
    let word = |at: usize| -> Res<u32> {
        let b = wal.get(at..at + 4).ok_or("the WAL ends mid-frame")?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    let page_size = word(8)? as usize;
    let c = Connection::open(path)?;
    let mut tree = std::collections::HashMap::new();
    let mut stmt = c.prepare("SELECT name, pageno FROM dbstat")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        tree.insert(r.get::<_, i64>(1)? as u32, r.get::<_, String>(0)?);
    }
    // Frames up to the last commit frame (a commit frame records the database's size).
    let (mut pending, mut commits) = (Vec::new(), 0u64);
    let mut counts: [std::collections::BTreeMap<String, f64>; 2] = Default::default();
    let mut at = 32;
    while at + 24 + page_size <= wal.len() {
        let page = word(at)?;
        pending.push(tree.get(&page).cloned().unwrap_or_else(|| "(free)".into()));
        if word(at + 4)? != 0 {
            for name in pending.drain(..) {
                *counts[(commits % 2) as usize].entry(name).or_default() += 1.0 / n as f64;
            }
            commits += 1;
        }
        at += 24 + page_size;
    }
    let side = |m: &std::collections::BTreeMap<String, f64>| -> Value {
        m.iter()
            .map(|(k, v)| (k.clone(), json!(round(*v, 2))))
            .collect::<Map<_, _>>()
            .into()
    };
    Ok(json!({"commits": commits, "start": side(&counts[0]), "end": side(&counts[1])}))
}

//! Benchmark: how long the dashboard's poll (one `Snapshot`) takes as the ledger grows.
//! `cargo run --release --example bench_snapshot -- 1000000` fills a fresh database with that
//! many `done` rows (plus a few open ones and events) and prints the snapshot time.
use exactly::metrics::Snapshot;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile_dir()?;
    let path = format!("{dir}/bench.db");
    let mut store = exactly::Store::open(&path)?;
    drop(store);
    let fill = Instant::now();
    {
        // Bulk fixture rows through SQLite directly: the product's own writes are one
        // transaction per transition, far too slow to fill millions of rows.
        let mut c = rusqlite::Connection::open(&path)?;
        let tx = c.transaction()?;
        {
            let mut ins = tx.prepare(
                "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state,
                   created_at, updated_at) VALUES (?1, ?2, 'r', 1, ?3, ?4, ?4)",
            )?;
            for i in 0..n {
                let state = if i % 100_000 == 7 { "unknown" } else { "done" };
                ins.execute(rusqlite::params![
                    format!("{i:032x}"),
                    format!("job-{}", i % 12),
                    state,
                    "2026-11-01T00:00:00.000Z"
                ])?;
            }
            let mut ev = tx.prepare(
                "INSERT INTO exactly_events (at, kind, job_key) VALUES ('2026-11-30T00:00:00.000Z', 'duplicate_suppressed', 'job-1')",
            )?;
            for _ in 0..(n / 10) {
                ev.execute([])?;
            }
        }
        tx.commit()?;
    }
    println!(
        "filled {n} ledger rows and {} events in {:.1?}",
        n / 10,
        fill.elapsed()
    );
    store = exactly::Store::open(&path)?;
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let snap = Snapshot::read(&mut store)?;
        times.push(t.elapsed());
        std::hint::black_box(snap);
    }
    times.sort();
    println!(
        "snapshot over {n} rows: median {:.2?}, max {:.2?} (20 polls)",
        times[times.len() / 2],
        times[times.len() - 1]
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempfile_dir() -> std::io::Result<String> {
    let d = std::env::temp_dir().join(format!("exactly-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d.to_string_lossy().into_owned())
}

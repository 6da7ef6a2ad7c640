use super::*;

/// Calls timed one by one after the warm-up (`EXACTLY_BENCH_LIFECYCLE_N` and
/// `EXACTLY_BENCH_LIFECYCLE_WARMUP` change them; `EXACTLY_BENCH_LIFECYCLE_SAMPLES=FILE` writes
/// each call's µs).
const LIFECYCLE_CALLS: usize = 3_000;
const LIFECYCLE_WARMUP: usize = 300;

/// The Rust library's own cost of one guarded no-op, timed call by call: the lease held, a new
/// key each call (claim the key, `submitted`, `done`, on a SQLite file at `synchronous=FULL`),
/// perform sending nothing. The same steps python/bench/compare.py times through the Python
/// module, which runs this part (`EXACTLY_BENCH_LIFECYCLE_DIR` puts the file beside its own,
/// on the same disk) to state what the Python layer adds.
pub(crate) fn lifecycle_latency(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = match std::env::var_os("EXACTLY_BENCH_LIFECYCLE_DIR") {
        Some(d) => PathBuf::from(d),
        None => root.join("lifecycle"),
    };
    std::fs::create_dir_all(&dir)?;
    let calls = match std::env::var("EXACTLY_BENCH_LIFECYCLE_N") {
        Ok(n) => n
            .parse()
            .map_err(|e| format!("EXACTLY_BENCH_LIFECYCLE_N={n:?}: {e}"))?,
        Err(_) if plan.smoke => 100,
        Err(_) => LIFECYCLE_CALLS,
    };
    if calls == 0 {
        return Err("EXACTLY_BENCH_LIFECYCLE_N must be at least 1".into());
    }
    let warmup = match std::env::var("EXACTLY_BENCH_LIFECYCLE_WARMUP") {
        Ok(n) => n
            .parse()
            .map_err(|e| format!("EXACTLY_BENCH_LIFECYCLE_WARMUP={n:?}: {e}"))?,
        Err(_) if plan.smoke => 10,
        Err(_) => LIFECYCLE_WARMUP,
    };
    let (mut store, ctx) = fresh_ledger(&dir.join("rust-lifecycle.db"))?;
    for n in 0..warmup {
        lifecycle(&mut store, &ctx, n as u64)?;
    }
    let mut us = Vec::with_capacity(calls);
    for n in warmup..warmup + calls {
        let t = Instant::now();
        lifecycle(&mut store, &ctx, n as u64)?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    // Every call's time, one per line, for a caller that pools rounds (compare.py does).
    if let Some(file) = std::env::var_os("EXACTLY_BENCH_LIFECYCLE_SAMPLES") {
        let text: String = us.iter().map(|u| format!("{u:.1}\n")).collect();
        std::fs::write(&file, text)?;
    }
    let mean = us.iter().sum::<f64>() / us.len() as f64;
    out.insert("lifecycle_p50_us".into(), json!(round(median(&mut us), 1)));
    out.insert("lifecycle_mean_us".into(), json!(round(mean, 1)));
    out.insert(
        "lifecycle".into(),
        json!({"calls": calls, "warmup": warmup, "dir": path_str(&dir)?}),
    );
    Ok(())
}

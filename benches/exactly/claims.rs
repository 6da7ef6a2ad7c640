use super::*;

/// One won claim: its token, when its process was started and when it answered.
pub(crate) struct Grant {
    token: i64,
    started: Instant,
    answered: Instant,
}

pub(crate) fn claim_contention(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("claims");
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("claims.db");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    drop(Store::open(path_str(&db)?)?);
    let figures = race(plan, path_str(&db)?, || {
        let c = Connection::open(&db)?;
        Ok(c.query_row(
            "SELECT fencing_token FROM job_lease WHERE job_key = 'race'",
            [],
            |r| r.get(0),
        )?)
    })?;
    out.insert("claim_contention".into(), figures);
    Ok(())
}

/// Eight processes of the real binary claiming one job's 100 ms lease on the ledger `db` (a
/// SQLite path or a PostgreSQL URL, its schema made) over and over for the plan's claim time;
/// `last_token` reads the job's fencing token from the table afterwards. The figures as the
/// summary's `claim_contention` holds them.
pub(crate) fn race(plan: &Plan, db: &str, last_token: impl FnOnce() -> Res<i64>) -> Res<Value> {
    let lease_ms: u64 = 100;
    let secs = plan.claim_secs;
    let racers = 8;
    let start = Instant::now();
    let results: Vec<Res<(Vec<Grant>, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..racers)
            .map(|w| {
                s.spawn(move || -> Res<(Vec<Grant>, u64)> {
                    let mut grants = Vec::new();
                    let mut answered = 0u64;
                    let mut i = 0u64;
                    while start.elapsed().as_secs_f64() < secs {
                        i += 1;
                        let started = Instant::now();
                        let o = Command::new(exe())
                            .args(["--db", db, "lease", "claim", "--job", "race"])
                            .args(["--for", &format!("{lease_ms}ms")])
                            .args(["--owner", &format!("racer-{w}-{i}")])
                            .stdin(Stdio::null())
                            .output()?;
                        let answered_at = Instant::now();
                        match o.status.code() {
                            Some(0) => {
                                let token = String::from_utf8_lossy(&o.stdout).trim().parse()?;
                                grants.push(Grant {
                                    token,
                                    started,
                                    answered: answered_at,
                                });
                                answered += 1;
                            }
                            Some(3) => answered += 1,
                            _ => {
                                return Err(format!(
                                    "lease claim failed: {}",
                                    String::from_utf8_lossy(&o.stderr).trim()
                                )
                                .into())
                            }
                        }
                    }
                    Ok((grants, answered))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a racer panicked".into())))
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let mut grants = Vec::new();
    let mut answered = 0;
    for r in results {
        let (g, a) = r?;
        grants.extend(g);
        answered += a;
    }
    grants.sort_by_key(|g| g.token);
    // A double grant: two winners of one token, or a winner that answered before the previous
    // winner's lease (at least `lease_ms` from the moment its process started) could have ended.
    let lease = Duration::from_millis(lease_ms);
    let mut double = 0u64;
    for w in grants.windows(2) {
        if w[0].token == w[1].token || w[1].answered < w[0].started + lease {
            double += 1;
        }
    }
    // The tokens in the table agree with what the winners printed.
    if grants.last().map(|g| g.token) != Some(last_token()?) {
        double += 1;
    }
    Ok(json!({
        "claims_per_s": round(answered as f64 / elapsed, 1),
        "grants_per_s": round(grants.len() as f64 / elapsed, 1),
        "double_grants": double,
        "processes": racers,
        "lease_ms": lease_ms,
    }))
}

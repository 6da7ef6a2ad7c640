use super::*;
use exactly::contain::Containment;

/// What containment costs: the same fire-lag run, and the same wrapped sends, with cages on
/// (the default: a cgroup per run and per sender where one can be made) and off
/// (`EXACTLY_CGROUP=none`: the environment cookie alone), alternated on, off, on, off so that
/// drift on a shared machine falls on both. Each side is checked to be what it says (every run's
/// command and every sender's row tell how it was held), so a figure never compares the cookie
/// with itself. The library's own lifecycle (`effect::run` with an action that sends from this
/// process, as in `write_ratio`) makes no cage at all: the cage is made per command, so the
/// lifecycles that pay for it are the wrapped sends, `exactly effect … -- CMD`.
pub(crate) fn contain(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("contain");
    let knob = |name: &str, default: f64| -> Res<f64> {
        match std::env::var(name) {
            Ok(v) => Ok(v.parse().map_err(|e| format!("{name}={v:?}: {e}"))?),
            Err(_) => Ok(default),
        }
    };
    // Smoke: one size, one pair, long enough for one slot of every job after the start.
    let secs = knob(
        "EXACTLY_BENCH_CONTAIN_SECS",
        if plan.smoke { 6.0 } else { 30.0 },
    )?;
    let rounds = knob(
        "EXACTLY_BENCH_CONTAIN_ROUNDS",
        if plan.smoke { 1.0 } else { 2.0 },
    )? as usize;
    // Wrapped sends: blocks of a few seconds, alternated often (a shared machine drifts).
    let sends = knob(
        "EXACTLY_BENCH_CONTAIN_SENDS",
        if plan.smoke { 5.0 } else { 50.0 },
    )? as usize;
    let blocks = knob(
        "EXACTLY_BENCH_CONTAIN_BLOCKS",
        if plan.smoke { 2.0 } else { 10.0 },
    )? as usize;
    if rounds == 0 || sends == 0 || blocks == 0 {
        return Err("EXACTLY_BENCH_CONTAIN_ROUNDS, _SENDS and _BLOCKS must be at least 1".into());
    }
    let sizes: &[(usize, &str)] = if plan.smoke {
        &[(plan.fire_jobs, "")]
    } else {
        &[(plan.fire_jobs, ""), (plan.fire_jobs_400, "_400")]
    };
    // What "on" must be: the cages this machine makes (the scheduler and the senders inherit
    // this process's cgroup and environment).
    let Some(here) = exactly::contain::subtree().map(|s| s.kind) else {
        let why = format!(
            "not measured: no writable cgroup here ({}), so on and off are both the cookie",
            exactly::contain::describe()
        );
        eprintln!("bench: containment {why}");
        out.insert("contain".into(), json!({"on": "cookie", "note": why}));
        return Ok(());
    };
    for &(jobs, suffix) in sizes {
        let mut lags: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut each = Vec::new();
        for r in 0..rounds {
            for (i, mode) in MODES.iter().enumerate() {
                eprintln!(
                    "bench: containment {}, fire lag, {jobs} jobs, round {} of {rounds} …",
                    mode.name,
                    r + 1
                );
                let d = dir.join(format!("fire{jobs}-{}", mode.name));
                let mut env = vec![("EXACTLY_BENCH_STAMP_CGROUP", "1")];
                env.extend(mode.env);
                let lag = fire_run_env(&d, jobs, secs, &env)?;
                let how = stamps_held(&d.join("stamps.txt"))?;
                check(mode, here, &how, "run")?;
                each.push(json!({
                    "containment": how,
                    "p50_ms": round(pct(&lag.start, 0.50), 1),
                    "p99_ms": round(pct(&lag.start, 0.99), 1),
                    "runs": lag.start.len(),
                    // Missed firings start no command: a side that missed more has fewer late
                    // starts in its percentiles.
                    "missed": lag.missed,
                }));
                lags[i].extend(lag.start);
            }
        }
        for l in &mut lags {
            l.sort_by(f64::total_cmp);
        }
        let [on, off] = &lags;
        for (p, name) in [(0.99, "p99"), (0.50, "p50")] {
            let (a, b) = (pct(on, p), pct(off, p));
            out.insert(
                format!("contain_fire_lag_{name}_ms_on{suffix}"),
                json!(round(a, 1)),
            );
            out.insert(
                format!("contain_fire_lag_{name}_ms_off{suffix}"),
                json!(round(b, 1)),
            );
            let key = if name == "p99" {
                format!("contain_fire_lag_cost_pct{suffix}")
            } else {
                format!("contain_fire_lag_p50_cost_pct{suffix}")
            };
            out.insert(key, json!(round(100.0 * (a / b - 1.0), 1)));
        }
        out.insert(format!("contain_fire_runs{suffix}"), json!(each));
    }
    eprintln!("bench: containment, wrapped sends …");
    wrapped_sends(&dir, blocks, sends, here, out)?;
    out.insert(
        "contain".into(),
        json!({"on": here.word(), "off": "cookie", "rounds": rounds,
               "fire_secs": secs, "sends_per_block": sends, "send_blocks": blocks}),
    );
    Ok(())
}

/// One side of the comparison: its name and what it adds to the environment.
struct Mode {
    name: &'static str,
    env: &'static [(&'static str, &'static str)],
}

const MODES: [Mode; 2] = [
    Mode {
        name: "on",
        env: &[],
    },
    Mode {
        name: "off",
        env: &[(exactly::contain::CGROUP_VAR, "none")],
    },
];

/// How the runs of one fire-lag run were held, by their stamps' cgroups: one word, or an error
/// when they differ (some cage could not be made: the figure would mix the two).
fn stamps_held(file: &Path) -> Res<String> {
    let text = std::fs::read_to_string(file)?;
    let mut word = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (Some(v2), Some(v1)) = (f.get(3), f.get(4)) else {
            return Err(format!("stamp line {line:?} names no cgroup").into());
        };
        // A run's cage is `<subtree>/exactly/run-<id>` (contain::Cage::new("run")).
        let w = if v2.contains("/exactly/run-") {
            "cgroup-v2"
        } else if v1.contains("/exactly/run-") {
            "cgroup-v1"
        } else {
            "cookie"
        };
        match word {
            None => word = Some(w),
            Some(o) if o == w => {}
            Some(o) => return Err(format!("runs held both as {o} and as {w} in {file:?}").into()),
        }
    }
    Ok(word.ok_or("no run stamped its cgroup")?.to_string())
}

/// Checks that `mode` was held as it should be: on by the cgroup kind this machine makes
/// (`here`), off by the cookie alone.
fn check(mode: &Mode, here: Containment, how: &str, what: &str) -> Res<()> {
    let want = if mode.name == "on" {
        here.word()
    } else {
        Containment::Cookie.word()
    };
    if how != want {
        return Err(format!(
            "containment {}: a {what} was held as {how}, not {want}; the figure would compare \
             the wrong things",
            mode.name
        )
        .into());
    }
    Ok(())
}

/// Wrapped sends per second, on and off: `exactly effect … -- true`, one after another, each a
/// new key (a cage made, joined and removed per send when on). `blocks` blocks of `n` sends per
/// side, alternated, after one unmeasured block each (the binary and the files in cache).
fn wrapped_sends(
    dir: &Path,
    blocks: usize,
    n: usize,
    here: Containment,
    out: &mut Map<String, Value>,
) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    let mut dbs = Vec::new();
    for mode in &MODES {
        let db = dir.join(format!("sends-{}.db", mode.name));
        remove_db(&db);
        let o = Command::new(exe())
            .args([
                "--db",
                path_str(&db)?,
                "lease",
                "claim",
                "--job",
                "bench",
                "--for",
                "1h",
            ])
            .output()?;
        if !o.status.success() {
            return Err(format!("lease claim: {}", String::from_utf8_lossy(&o.stderr)).into());
        }
        let token = String::from_utf8(o.stdout)?.trim().to_string();
        dbs.push((db, token));
    }
    // Per block and side: seconds, and CPU of the sends' processes (they are our children).
    let mut secs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut next = 0usize;
    for block in 0..=blocks {
        for (i, mode) in MODES.iter().enumerate() {
            let (db, token) = &dbs[i];
            let (t, c) = (Instant::now(), children_cpu_s());
            for _ in 0..n {
                send(db, token, mode, next)?;
                next += 1;
            }
            if block > 0 {
                secs[i].push(t.elapsed().as_secs_f64());
                cpu[i].push(children_cpu_s() - c);
            }
        }
    }
    for (i, mode) in MODES.iter().enumerate() {
        let c = Connection::open(&dbs[i].0)?;
        let mut stmt = c.prepare("SELECT sender FROM effect_ledger WHERE state = 'done'")?;
        let senders: Vec<Option<String>> = stmt
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if senders.len() != n * (blocks + 1) {
            return Err(format!("{} sends done of {}", senders.len(), n * (blocks + 1)).into());
        }
        for s in senders {
            let how = s
                .as_deref()
                .and_then(exactly::sender::containment_of)
                .unwrap_or("none");
            check(mode, here, how, "sender")?;
        }
    }
    // Each on block against the off block right after it: drift between pairs cancels, and
    // the median keeps one pair hit by a neighbour's burst from deciding.
    let mut slower: Vec<f64> = secs[1]
        .iter()
        .zip(&secs[0])
        .map(|(off, on)| off / on)
        .collect();
    let per_s = |i: usize| (n * blocks) as f64 / secs[i].iter().sum::<f64>();
    let cpu_ms = |i: usize| 1000.0 * cpu[i].iter().sum::<f64>() / (n * blocks) as f64;
    out.insert("contain_sends_per_s_on".into(), json!(round(per_s(0), 1)));
    out.insert("contain_sends_per_s_off".into(), json!(round(per_s(1), 1)));
    out.insert(
        "contain_lifecycle_cost_pct".into(),
        json!(round(100.0 * (1.0 - median(&mut slower)), 1)),
    );
    out.insert("contain_send_cpu_ms_on".into(), json!(round(cpu_ms(0), 2)));
    out.insert("contain_send_cpu_ms_off".into(), json!(round(cpu_ms(1), 2)));
    let rates = |i: usize| -> Vec<f64> { secs[i].iter().map(|s| round(n as f64 / s, 1)).collect() };
    out.insert(
        "contain_sends_blocks".into(),
        json!({"on": rates(0), "off": rates(1), "sends_per_block": n}),
    );
    Ok(())
}

/// One wrapped send of a new key; an error unless it exits 0 (done).
fn send(db: &Path, token: &str, mode: &Mode, n: usize) -> Res<()> {
    let o = Command::new(exe())
        .args([
            "--db",
            path_str(db)?,
            "effect",
            "--job",
            "bench",
            "--token",
            token,
        ])
        .args(["--action", "send", "--target", "bench", "--input"])
        .arg(format!("i={n}"))
        .args(["--", "true"])
        .envs(mode.env.iter().copied())
        .stdin(Stdio::null())
        .output()?;
    if !o.status.success() {
        return Err(format!(
            "exactly effect ({} containment) exited {}: {}",
            mode.name,
            o.status,
            String::from_utf8_lossy(&o.stderr)
        )
        .into());
    }
    Ok(())
}

/// CPU seconds (user and system) of this process's waited-for children so far.
fn children_cpu_s() -> f64 {
    // SAFETY: getrusage fills a plain struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

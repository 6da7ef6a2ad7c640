use super::*;

pub(crate) fn chaos(plan: &Plan, root: &Path, out: &mut Map<String, Value>) -> Res<()> {
    let dir = root.join("chaos");
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("chaos.db");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    let n = plan.chaos_iterations;
    let t = Instant::now();
    let o = Command::new(exe())
        .args([
            "--db",
            path_str(&db)?,
            "chaos",
            "--scenario",
            "kill-mid-effect",
        ])
        .args(["--iterations", &n.to_string(), "--json", "--seed", "13"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    let secs = t.elapsed().as_secs_f64();
    let v: Value = serde_json::from_slice(&o.stdout)
        .map_err(|e| format!("exactly chaos printed no JSON ({e}), exit {:?}", o.status))?;
    let dups = v["duplicate_effects"]
        .as_u64()
        .ok_or("no duplicate_effects")?;
    if !o.status.success() || dups != 0 {
        return Err(format!("exactly chaos failed: exit {:?}, {v}", o.status).into());
    }
    out.insert(
        "chaos_iterations_per_s".into(),
        json!(round(n as f64 / secs, 2)),
    );
    out.insert(
        "chaos".into(),
        json!({"iterations": n, "secs": round(secs, 1), "duplicate_effects": dups,
               "lost_effects": v["lost_effects"]}),
    );
    Ok(())
}

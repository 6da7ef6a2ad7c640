use super::*;

/// The real `exactly top` in a pseudo-terminal (util-linux `script`) on the unchanging large
/// fixture: CPU from /proc/PID/stat, RSS from /proc/PID/status, bytes from the terminal.
pub(crate) fn top_idle(
    plan: &Plan,
    root: &Path,
    fixture: &Path,
    out: &mut Map<String, Value>,
) -> Res<()> {
    let dir = root.join("top");
    std::fs::create_dir_all(&dir)?;
    // A copy, so a dashboard's side files never touch the cached fixture.
    let db = dir.join("top.db");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    std::fs::copy(fixture, &db)?;
    let inner = format!(
        "stty rows 40 cols 140; exec {} --db {} top",
        shell_quote(&exe()),
        shell_quote(path_str(&db)?)
    );
    let mut script = Command::new("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start script(1) (util-linux) for a pseudo-terminal: {e}"))?;
    let stdout = script.stdout.take().ok_or("no stdout from script")?;
    let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = {
        let counted = counted.clone();
        std::thread::spawn(move || {
            let mut stdout = stdout;
            let mut buf = [0u8; 8192];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                counted.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let result = (|| -> Res<()> {
        let pid = find_child(script.id(), "exactly", Duration::from_secs(10))?;
        // Let it draw its first frames and settle.
        std::thread::sleep(Duration::from_secs(3));
        let (cpu0, bytes0, t0) = (
            cpu_ticks(pid)?,
            counted.load(std::sync::atomic::Ordering::Relaxed),
            Instant::now(),
        );
        std::thread::sleep(Duration::from_secs_f64(plan.top_secs));
        let (cpu1, bytes1, secs) = (
            cpu_ticks(pid)?,
            counted.load(std::sync::atomic::Ordering::Relaxed),
            t0.elapsed().as_secs_f64(),
        );
        let (rss_kb, hwm_kb) = rss_kb(pid)?;
        let hz = clock_ticks_per_s();
        let cpu_pct = (cpu1 - cpu0) as f64 / hz / secs * 100.0;
        out.insert("top_idle_cpu_pct".into(), json!(round(cpu_pct, 3)));
        out.insert(
            "top_idle_bytes_per_s".into(),
            json!(round((bytes1 - bytes0) as f64 / secs, 1)),
        );
        out.insert("top_rss_mb".into(), json!(round(rss_kb as f64 / 1024.0, 1)));
        out.insert(
            "top_peak_rss_mb".into(),
            json!(round(hwm_kb as f64 / 1024.0, 1)),
        );
        out.insert("top_secs".into(), json!(round(secs, 1)));
        // SAFETY: signalling the dashboard we started; it restores the terminal and exits.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        Ok(())
    })();
    let deadline = Instant::now() + Duration::from_secs(5);
    while script.try_wait()?.is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = script.kill();
    let _ = script.wait();
    let _ = reader.join();
    result
}

/// The descendants of `parent` with their names, parents before children; `enter` says whether
/// to look under one.
pub(crate) fn descendants(parent: u32, enter: impl Fn(&str) -> bool) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let mut todo = vec![parent];
    while let Some(p) = todo.pop() {
        let kids =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        for k in kids
            .split_whitespace()
            .filter_map(|k| k.parse::<u32>().ok())
        {
            let comm = std::fs::read_to_string(format!("/proc/{k}/comm")).unwrap_or_default();
            let comm = comm.trim().to_string();
            if enter(&comm) {
                todo.push(k);
            }
            out.push((k, comm));
        }
    }
    out
}

/// The pid of the first descendant of `parent` named `name`.
pub(crate) fn find_child(parent: u32, name: &str, wait: Duration) -> Res<u32> {
    let deadline = Instant::now() + wait;
    loop {
        if let Some((k, _)) = descendants(parent, |_| true)
            .into_iter()
            .find(|(_, c)| c == name)
        {
            return Ok(k);
        }
        if Instant::now() > deadline {
            return Err(format!("no {name} process appeared under pid {parent}").into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// utime + stime of a process, in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> Res<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').ok_or("bad /proc stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime 15.
    Ok(f.get(11).ok_or("no utime")?.parse::<u64>()?
        + f.get(12).ok_or("no stime")?.parse::<u64>()?)
}

pub(crate) fn rss_kb(pid: u32) -> Res<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

pub(crate) fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

//! The scheduler's helper processes under real faults: its spawners (a pool, one per core,
//! which fork the commands) and its watchdog (which stops them at their lease deadline)
//! SIGSTOPped or SIGKILLed while runs go on. A test of "the spawner" acts on every spawner of
//! the pool, so it holds whichever started the command. A helper's fault never turns a finished command into a failure,
//! never runs a slot twice, never holds a shutdown past its grace, and never leaves a command
//! running past its lease.
use crate::on_both_backends;
use crate::support;
use std::time::{Duration, Instant};
use support::runner::*;

/// The children of `pid`: (pid, name).
fn children(pid: i32) -> Vec<(i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter_map(|p| {
            let st = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let rest: Vec<&str> = st[st.rfind(')')? + 1..].split_whitespace().collect();
            let ppid: i32 = rest.get(1)?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).ok()?;
            (ppid == pid && rest[0] != "Z").then(|| (p, comm.trim().to_string()))
        })
        .collect()
}

/// The scheduler's spawners: its children named `exactly-spawner`.
pub(crate) fn spawners_of(s: &Sched) -> Vec<i32> {
    let sched = s.child.id() as i32;
    support::wait_for_some("the scheduler's spawners", Duration::from_secs(5), || {
        let found: Vec<i32> = children(sched)
            .into_iter()
            .filter(|(_, n)| n == "exactly-spawner")
            .map(|(p, _)| p)
            .collect();
        (!found.is_empty()).then_some(found)
    })
}

/// The scheduler's watchdog: its forked child that is not the spawner (named
/// `exactly-wdog` by this build, `exactly` by older ones), other than those in `not`.
fn watchdog_of(s: &Sched, not: &[i32]) -> Option<i32> {
    children(s.child.id() as i32)
        .into_iter()
        .find(|(p, n)| !not.contains(p) && (n == "exactly-wdog" || n == "exactly"))
        .map(|(p, _)| p)
}

/// The pid a command writes to `file`, once written (the file exists before the shell's echo
/// fills it).
fn pid_written(site: &Site, file: &str) -> i32 {
    support::wait_for_some(&format!("a pid in {file}"), Duration::from_secs(8), || {
        std::fs::read_to_string(site.path(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}

/// A process's state letter (`T`: stopped).
fn state(pid: i32) -> Option<char> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    st[st.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// SIGSTOPs processes until dropped (then SIGCONT), so a failing test leaves nothing frozen.
struct Frozen(Vec<i32>);

impl Frozen {
    fn new(pid: i32) -> Frozen {
        Frozen::all(&[pid])
    }

    fn all(pids: &[i32]) -> Frozen {
        for &pid in pids {
            // SAFETY: signalling a process this test's scheduler started.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
        }
        support::wait_for("the processes to stop", Duration::from_secs(3), || {
            pids.iter().all(|p| state(*p) == Some('T'))
        });
        Frozen(pids.to_vec())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: as in `new`.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}

/// (outcome, exit code, duration ms) of the run with fencing token `token`, "" for NULL.
fn run_of(site: &Site, token: i64) -> (String, String, i64) {
    let row = site.strings(&format!(
        "SELECT coalesce(outcome, '') || '|' || coalesce(CAST(exit_code AS TEXT), '') \
         || '|' || CAST(coalesce(duration_ms, -1) AS TEXT) \
         FROM exactly_runs WHERE fencing_token = {token}"
    ));
    let row = row.first().cloned().unwrap_or_default();
    let mut f = row.split('|');
    let (o, c, d) = (f.next(), f.next(), f.next());
    (
        o.unwrap_or("").to_string(),
        c.unwrap_or("").to_string(),
        d.and_then(|d| d.parse().ok()).unwrap_or(-1),
    )
}

fn ended(site: &Site, token: i64) -> bool {
    site.count(&format!(
        "SELECT count(*) FROM exactly_runs WHERE fencing_token = {token} AND ended_at IS NOT NULL"
    )) == 1
}

/// `exactly status --json`'s entry for `job`.
fn status_job(site: &Site, job: &str) -> serde_json::Value {
    let (code, out, err) = site.exactly(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("status --json is JSON");
    v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job_key"] == job)
        .cloned()
        .unwrap_or_else(|| panic!("job {job} in {v}"))
}

/// The pipes a process holds open (their inode numbers).
fn pipes(pid: i32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|l| l.to_string_lossy().into_owned())
        .filter(|l| l.starts_with("pipe:"))
        .collect()
}

/// Item 8: the watchdog is SIGKILLed or SIGSTOPped, then the scheduler is frozen: a new
/// watchdog (within the stop margin) still stops the command at its lease deadline.
fn a_faulty_watchdog_is_replaced(sig: i32) {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"long\"\nevery = \"2s\"\nlease = \"3s\"\noverlap = \"coalesce\"\n\
         command = {}\n",
        sh("echo $$ > pid.$EXACTLY_FENCING_TOKEN; sleep 30")
    ));
    let mut s = site.start("s", "1s");
    let pid = pid_written(&site, "pid.1");
    let spawners = spawners_of(&s);
    let old = support::wait_for_some("the watchdog", Duration::from_secs(3), || {
        watchdog_of(&s, &spawners)
    });
    let at = Instant::now();
    // A stopped one is let go on (SIGCONT) at the end, whatever becomes of the test.
    let _stopped = if sig == libc::SIGSTOP {
        Some(Frozen::new(old))
    } else {
        // SAFETY: signalling the watchdog this test's scheduler forked.
        unsafe { libc::kill(old, sig) };
        None
    };
    // A new one within the stop margin (and the grace a stopped one gets); none comes on a
    // build that does not replace it.
    let not: Vec<i32> = spawners.iter().copied().chain([old]).collect();
    let new = support::poll(Duration::from_millis(20), Duration::from_secs(3), || {
        watchdog_of(&s, &not)
    });
    let replaced_in = at.elapsed();
    // Every spawner holds the new watchdog's pipe: what it starts is held from the first instant.
    let handed = new.is_some_and(|w| {
        wait_until(Duration::from_secs(2), || {
            let theirs = pipes(w);
            spawners
                .iter()
                .all(|sp| pipes(*sp).iter().any(|p| theirs.contains(p)))
        })
    });
    let frozen = Frozen::new(s.child.id() as i32);
    let at = Instant::now();
    // Renewed at most a third of the lease ago, so its lease ends within 3 s of the freeze:
    // the command must be gone by then and the stop margin (`policy::stop_margin`, 700 ms).
    let stopped = wait_until(Duration::from_secs(12), || !alive(pid));
    let took = at.elapsed();
    drop(frozen);
    eprintln!(
        "signal {sig}: new watchdog {new:?} after {replaced_in:?}, pipe handed: {handed}; \
         command stopped {took:?} after the scheduler froze"
    );
    assert!(
        stopped && took < Duration::from_millis(3700),
        "the command ran {took:?} past its frozen scheduler (lease 3s; a new watchdog: \
         {new:?}): {}",
        site.log("s")
    );
    assert!(
        replaced_in < Duration::from_millis(1500),
        "replaced after {replaced_in:?}"
    );
    assert!(handed, "a spawner was not handed the new watchdog's pipe");
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    let log = site.log("s");
    let said = match sig {
        libc::SIGKILL => format!("the watchdog process {old} is gone"),
        _ => format!("the watchdog process {old} is stopped"),
    };
    assert!(log.contains(&said), "not said: {said}: {log}");
    assert_eq!(
        site.count("SELECT count(*) FROM exactly_events WHERE kind = 'watchdog_restarted'"),
        1,
        "{log}"
    );
}

on_both_backends! {
    /// Item 7: the command exits 0 while the spawner is frozen (it cannot reap it nor say so).
    #[test]
    fn a_frozen_spawner_never_turns_an_exit_0_into_a_timeout_nor_a_second_run() {
        let site = Site::new();
        site.write_jobs(&format!(
            "[[job]]\nname = \"quick\"\nevery = \"4s\"\nlease = \"20s\"\ntimeout = \"3s\"\n\
             retries = 1\nretry_backoff = \"1s\"\noverlap = \"coalesce\"\ncommand = {}\n",
            sh("echo $EXACTLY_SCHEDULED_AT >> ran; sleep 1")
        ));
        let mut s = site.start("s", "5s");
        support::wait_for("the first command to start", Duration::from_secs(8), || {
            !site.lines("ran").is_empty()
        });
        let spawners = spawners_of(&s);
        let frozen = Frozen::all(&spawners);
        // Noticed within the stop margin (`policy::stop_margin`, 700 ms), each of them.
        let said: Vec<String> = spawners
            .iter()
            .map(|p| format!("the spawner process {p} is stopped"))
            .collect();
        let noticed = wait_until(Duration::from_millis(700), || {
            let log = site.log("s");
            said.iter().all(|s| log.contains(s))
        });
        // The command exits 0 a second in; its 3 s timeout passes while the spawner is frozen.
        let ended_frozen = wait_until(Duration::from_secs(8), || ended(&site, 1));
        drop(frozen);
        support::wait_for("run 1 to end", Duration::from_secs(10), || ended(&site, 1));
        let slot = site.lines("ran")[0].clone();
        // Its firing settled (a retry would have run by then), and one more command ran after it.
        support::wait_for(
            "the firing to settle and a next run",
            Duration::from_secs(12),
            || {
                site.lines("ran").len() >= 2
                    && site.count(&format!(
                        "SELECT count(*) FROM exactly_firings WHERE scheduled_at = '{slot}' \
                     AND state IN ('ran', 'gave_up', 'missed')"
                    )) == 1
            },
        );
        assert_eq!(
            s.term(Duration::from_secs(10)),
            Some(0),
            "{}",
            site.log("s")
        );
        let (outcome, code, ms) = run_of(&site, 1);
        eprintln!(
            "run 1: {outcome} exit {code} in {ms} ms (ended while frozen: {ended_frozen}); ran: {:?}",
            site.lines("ran")
        );
        assert_eq!(
            (outcome.as_str(), code.as_str()),
            ("ok", "0"),
            "run 1 ({ms} ms, ended while the spawner was frozen: {ended_frozen}): {}",
            site.log("s")
        );
        assert!(ms < 3000, "run 1 took {ms} ms for a 1 s command");
        assert!(noticed, "not said within 700 ms: {said:?}: {}", site.log("s"));
        let ran = site.lines("ran");
        assert_eq!(
            ran.iter().filter(|l| **l == slot).count(),
            1,
            "the slot's command ran again: {ran:?}"
        );
    }

    /// Item 9: SIGTERM while the spawner is frozen: `--grace` holds.
    #[test]
    fn sigterm_stops_the_scheduler_within_its_grace_while_its_spawner_is_frozen() {
        let site = Site::new();
        site.write_jobs(&format!(
            "[[job]]\nname = \"long\"\nevery = \"2s\"\nlease = \"20s\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh("echo $$ > pid; sleep 30")
        ));
        let mut s = site.start("s", "1s");
        let pid = pid_written(&site, "pid");
        let _frozen = Frozen::all(&spawners_of(&s));
        let asked = Instant::now();
        let code = s.term(Duration::from_secs(8));
        let took = asked.elapsed();
        eprintln!("SIGTERM to exit: {took:?} (grace 1s), exit {code:?}");
        assert_eq!(
            code,
            Some(0),
            "no exit within 8 s of SIGTERM (grace 1s): {}",
            site.log("s")
        );
        assert!(
            took < Duration::from_secs(2),
            "SIGTERM took {took:?} with a grace of 1s: {}",
            site.log("s")
        );
        assert!(!alive(pid), "the command outlived its scheduler");
        let (outcome, _, ms) = run_of(&site, 1);
        eprintln!("run 1: {outcome} in {ms} ms");
        assert_eq!(outcome, "killed", "{}", site.log("s"));
        assert!(
            ms < 3000,
            "the run is recorded {ms} ms: the freeze is not its duration"
        );
        // As `status --json` tells it.
        let last = &status_job(&site, "long")["last_run"];
        assert_eq!(last["outcome"], "killed", "{last}");
        assert!(last["duration_ms"].as_i64().is_some_and(|d| d < 3000), "{last}");
    }

    #[test]
    fn a_killed_watchdog_is_restarted_and_stops_the_command_of_a_frozen_scheduler() {
        a_faulty_watchdog_is_replaced(libc::SIGKILL);
    }

    #[test]
    fn a_stopped_watchdog_is_replaced_and_stops_the_command_of_a_frozen_scheduler() {
        a_faulty_watchdog_is_replaced(libc::SIGSTOP);
    }

    /// Item 10: a command a frozen spawner never started is `not_started`, out of p50/p99.
    #[test]
    fn a_run_a_frozen_spawner_never_started_is_not_started_and_out_of_the_p99() {
        let site = Site::new();
        site.write_jobs(&format!(
            "[[job]]\nname = \"quick\"\nevery = \"1s\"\nlease = \"4s\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh("echo $EXACTLY_RUN_ID >> ran")
        ));
        let mut s = site.start("s", "1s");
        support::wait_for("two runs ok", Duration::from_secs(8), || {
            site.count("SELECT count(*) FROM exactly_runs WHERE outcome = 'ok'") >= 2
        });
        let frozen = Frozen::all(&spawners_of(&s));
        let waiting = "SELECT count(*) FROM exactly_runs WHERE ended_at IS NULL";
        support::wait_for(
            "a run to wait for the frozen spawner",
            Duration::from_secs(5),
            || site.count(waiting) == 1,
        );
        let stuck = site.strings("SELECT run_id FROM exactly_runs WHERE ended_at IS NULL")[0].clone();
        let done = |site: &Site| {
            site.count(&format!(
                "SELECT count(*) FROM exactly_runs WHERE run_id = '{stuck}' AND ended_at IS NOT NULL"
            )) == 1
        };
        let ended_frozen = wait_until(Duration::from_secs(10), || done(&site));
        drop(frozen);
        support::wait_for("the stuck run to end", Duration::from_secs(10), || {
            done(&site)
        });
        let job = status_job(&site, "quick");
        assert_eq!(
            s.term(Duration::from_secs(10)),
            Some(0),
            "{}",
            site.log("s")
        );
        let row = site.strings(&format!(
            "SELECT outcome || ' ' || coalesce(CAST(exit_code AS TEXT), '-') || ' ' \
             || CAST(duration_ms AS TEXT) \
             FROM exactly_runs WHERE run_id = '{stuck}'"
        ));
        eprintln!(
            "stuck run: {row:?} (ended while frozen: {ended_frozen}); p50 {} p99 {}",
            job["p50_ms"], job["p99_ms"]
        );
        assert!(
            row[0].starts_with("not_started -"),
            "the run whose command never started is {row:?} (ended while frozen: {ended_frozen}): {}",
            site.log("s")
        );
        assert!(
            !site.lines("ran").contains(&stuck),
            "its command ran after all"
        );
        let p99 = job["p99_ms"].as_u64().expect("a p99");
        assert!(
            p99 < 1000,
            "p99 {p99} ms counts the wait for a frozen spawner: {job}"
        );
    }

    /// Item 10: a command lost with its SIGKILLed spawner goes again, as a dead scheduler's does.
    #[test]
    fn a_run_lost_with_its_spawner_is_resumed_for_its_slot() {
        let site = Site::new();
        site.write_jobs(&format!(
            "[[job]]\nname = \"long\"\nevery = \"2s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh("echo $EXACTLY_SCHEDULED_AT >> ran; sleep 30")
        ));
        let mut s = site.start("s", "1s");
        support::wait_for("the command to start", Duration::from_secs(8), || {
            !site.lines("ran").is_empty()
        });
        let slot = site.lines("ran")[0].clone();
        // Every one, so the command's own is among them.
        for p in spawners_of(&s) {
            // SAFETY: killing the spawners this test's scheduler started.
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        let again = wait_until(Duration::from_secs(10), || {
            site.lines("ran").iter().filter(|l| **l == slot).count() >= 2
        });
        assert_eq!(
            s.term(Duration::from_secs(10)),
            Some(0),
            "{}",
            site.log("s")
        );
        let (outcome, _, _) = run_of(&site, 1);
        eprintln!(
            "run 1: {outcome}; its slot ran again: {again}; ran: {:?}",
            site.lines("ran")
        );
        assert!(
            again && outcome == "killed",
            "the lost run is {outcome}, its slot ran again: {again}: {}",
            site.log("s")
        );
        assert!(site.counter("firing_resumed") >= 1, "{}", site.log("s"));
    }
}

//! Commands start through the scheduler's spawner (src/runner/spawn/spawner/), a small process
//! forked once: what a command dies with is unchanged, and losing the spawner loses only the
//! commands it held, never the scheduler or a run's record.
use crate::support;
use std::time::Duration;
use support::runner::*;

/// The parent pid and the name of a process.
fn parent_of(pid: i32) -> Option<(i32, String)> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ppid: i32 = st[st.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).ok()?;
    Some((ppid, comm.trim().to_string()))
}

fn long_job(site: &Site) {
    let cmd = sh("echo $$ > pid.$EXACTLY_FENCING_TOKEN; sleep 30");
    site.write_jobs(&format!(
        "[[job]]\nname = \"long\"\nevery = \"2s\"\nlease = \"1s\"\noverlap = \"coalesce\"\n\
         command = {cmd}\n"
    ));
}

/// A scheduler running the long job's first command: the scheduler, the command's pid, and
/// its parent's pid and name.
fn first_command(site: &Site) -> (Sched, i32, i32, String) {
    long_job(site);
    let s = site.start("s", "1s");
    assert!(
        wait_until(Duration::from_secs(8), || site.exists("pid.1")),
        "{}",
        site.log("s")
    );
    let pid = pid_in(site, "pid.1");
    let (parent, name) = parent_of(pid).expect("the command's parent");
    (s, pid, parent, name)
}

#[test]
fn a_killed_spawner_takes_its_command_with_it_and_the_scheduler_goes_on() {
    let site = Site::new();
    let (mut s, pid, spawner, name) = first_command(&site);
    assert_eq!(
        name,
        "exactly-spawner",
        "the command was not started by the spawner: {}",
        site.log("s")
    );
    // SAFETY: killing the spawner this test's scheduler started.
    unsafe { libc::kill(spawner, libc::SIGKILL) };
    assert!(
        wait_until(Duration::from_secs(3), || !alive(pid)),
        "the command outlived its spawner (pid {pid})"
    );
    assert!(
        wait_until(Duration::from_secs(5), || site.count(
            "SELECT count(*) FROM exactly_runs WHERE fencing_token = 1 AND ended_at IS NOT NULL"
        ) == 1),
        "the run of the lost command was not recorded: {}",
        site.log("s")
    );
    // Later firings still run (their commands started by the scheduler itself).
    assert!(
        wait_until(Duration::from_secs(8), || site.exists("pid.2")
            || site.exists("pid.3")),
        "no later firing ran after the spawner died: {}",
        site.log("s")
    );
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    let log = site.log("s");
    assert!(
        log.contains("the spawner process is gone"),
        "the scheduler did not say its spawner died: {log}"
    );
}

#[test]
fn a_sigkilled_scheduler_takes_its_spawner_and_commands_with_it() {
    let site = Site::new();
    let (mut s, pid, _, _) = first_command(&site);
    let spawners = crate::helpers::spawners_of(&s);
    s.kill9();
    assert!(
        wait_until(Duration::from_secs(3), || !alive(pid)
            && spawners.iter().all(|p| !alive(*p))),
        "the command ({pid}) or a spawner ({spawners:?}) outlived a SIGKILLed scheduler"
    );
}

#[test]
fn a_command_that_cannot_start_fails_with_why_and_the_next_ones_run() {
    let site = Site::new();
    site.write_jobs(
        "[[job]]\nname = \"missing\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
         command = [\"/nonexistent/prog\", \"x\"]\n\n\
         [[job]]\nname = \"fine\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
         command = [\"sh\", \"-c\", \"echo ran >> fine.txt\"]\n",
    );
    let mut s = site.start("s", "1s");
    assert!(
        wait_until(Duration::from_secs(8), || {
            site.lines("fine.txt").len() >= 2
                && site.count(
                    "SELECT count(*) FROM exactly_runs WHERE job_key = 'missing' AND ended_at \
                     IS NOT NULL",
                ) >= 2
        }),
        "{}",
        site.log("s")
    );
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    let outcomes = site.strings(
        "SELECT DISTINCT outcome || ' ' || exit_code FROM exactly_runs WHERE job_key = 'missing'",
    );
    assert_eq!(outcomes, ["failed 127"], "{}", site.log("s"));
    let (_, logs, _) = site.exactly(&["logs", "missing"]);
    assert!(
        logs.contains("cannot start \"/nonexistent/prog\": No such file or directory"),
        "the run's output says why: {logs}"
    );
}

/// `n` jobs due at the same instants (every 2 s), each command appending `$$ $PPID
/// $EXACTLY_SCHEDULED_AT` to `ran.JOB`, then `tail` (a sleep, or nothing).
fn burst(site: &Site, n: usize, tail: &str) -> Vec<String> {
    let mut toml = String::new();
    let names: Vec<String> = (0..n).map(|j| format!("b{j:02}")).collect();
    for name in &names {
        let cmd = sh(&format!(
            "echo $$ $PPID $EXACTLY_SCHEDULED_AT >> ran.$EXACTLY_JOB; {tail} # {name}"
        ));
        toml.push_str(&format!(
            "[[job]]\nname = \"{name}\"\nevery = \"2s\"\nlease = \"2s\"\n\
             overlap = \"coalesce\"\ncommand = {cmd}\n\n"
        ));
    }
    site.write_jobs(&toml);
    names
}

/// (pid, parent pid, slot) of each command a job's `ran.JOB` names, in order.
fn ran(site: &Site, job: &str) -> Vec<(i32, i32, String)> {
    site.lines(&format!("ran.{job}"))
        .iter()
        .filter_map(|l| {
            let mut w = l.split(' ');
            Some((
                w.next()?.parse().ok()?,
                w.next()?.parse().ok()?,
                w.next()?.to_string(),
            ))
        })
        .collect()
}

/// A burst is started from as many processes as the pool has: every spawner starts some of it.
#[test]
fn a_burst_is_started_by_every_spawner_of_the_pool() {
    let site = Site::new();
    let jobs = burst(&site, 12, "true");
    let mut s = site.start_with_env("s", "1s", &[("EXACTLY_SPAWNERS", "2")]);
    let two = |j: &String| ran(&site, j).len() >= 2;
    assert!(
        wait_until(Duration::from_secs(10), || jobs.iter().all(two)),
        "two bursts did not run: {}",
        site.log("s")
    );
    // Once they ran: the pool is started whole before its first command.
    let spawners = crate::helpers::spawners_of(&s);
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    let mut parents: Vec<i32> = jobs
        .iter()
        .flat_map(|j| ran(&site, j))
        .map(|(_, ppid, _)| ppid)
        .collect();
    parents.sort_unstable();
    parents.dedup();
    let mut pool = spawners.clone();
    pool.sort_unstable();
    eprintln!("pool {pool:?}, the commands' parents {parents:?}");
    assert_eq!(pool.len(), 2, "EXACTLY_SPAWNERS=2 started {pool:?}");
    assert_eq!(
        parents, pool,
        "the burst was not started by every spawner of the pool"
    );
}

/// One spawner of the pool SIGKILLed: its commands die with it, their runs are `killed` and
/// their firings go again (started by the others), while the others' commands go on.
#[test]
fn killing_one_spawner_of_the_pool_loses_only_its_commands() {
    let site = Site::new();
    let jobs = burst(&site, 6, "sleep 30");
    let mut s = site.start_with_env("s", "1s", &[("EXACTLY_SPAWNERS", "2")]);
    assert!(
        wait_until(Duration::from_secs(10), || jobs
            .iter()
            .all(|j| !ran(&site, j).is_empty())),
        "not every job started: {}",
        site.log("s")
    );
    let first: Vec<(String, (i32, i32, String))> = jobs
        .iter()
        .map(|j| (j.clone(), ran(&site, j)[0].clone()))
        .collect();
    let victim = first[0].1 .1;
    let (lost, kept): (Vec<_>, Vec<_>) = first.iter().partition(|(_, (_, pp, _))| *pp == victim);
    assert!(
        !kept.is_empty(),
        "every command was started by one spawner ({victim}): {first:?}"
    );
    // SAFETY: killing a spawner this test's scheduler started.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    assert!(
        wait_until(Duration::from_secs(3), || lost
            .iter()
            .all(|(_, (pid, _, _))| !alive(*pid))),
        "a command outlived its spawner: {lost:?}"
    );
    // Each lost firing runs again for its slot, started by a spawner still alive.
    let again = wait_until(Duration::from_secs(12), || {
        lost.iter().all(|(j, (_, _, slot))| {
            ran(&site, j)
                .iter()
                .filter(|(_, pp, sl)| sl == slot && *pp != victim)
                .count()
                >= 1
        })
    });
    let kept_alive: Vec<bool> = kept.iter().map(|(_, (pid, _, _))| alive(*pid)).collect();
    let kept_runs = kept
        .iter()
        .map(|(j, _)| {
            site.count(&format!(
                "SELECT count(*) FROM exactly_runs WHERE job_key = '{j}' AND ended_at IS NULL"
            ))
        })
        .collect::<Vec<_>>();
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    for (j, _) in &lost {
        let first_run = site.strings(&format!(
            "SELECT coalesce(outcome, '-') FROM exactly_runs WHERE job_key = '{j}' \
             ORDER BY fencing_token LIMIT 1"
        ));
        assert_eq!(first_run, ["killed"], "{j}: {}", site.log("s"));
    }
    assert!(again, "a lost firing did not run again: {}", site.log("s"));
    assert!(
        kept_alive.iter().all(|a| *a),
        "another spawner's command died with the killed one: {kept:?} alive {kept_alive:?}"
    );
    assert!(
        kept_runs.iter().all(|n| *n == 1),
        "another spawner's run ended: {kept_runs:?}"
    );
    for (j, (_, _, slot)) in &kept {
        let slots: Vec<String> = ran(&site, j).into_iter().map(|r| r.2).collect();
        assert_eq!(
            slots,
            std::slice::from_ref(slot),
            "{j} ran again: {}",
            site.log("s")
        );
    }
    assert!(
        site.log("s").contains("the spawner process is gone"),
        "{}",
        site.log("s")
    );
}

/// More jobs than one decision batch holds (512 firings to a transaction).
const JOBS: i64 = 600;

/// [`JOBS`] jobs due at the same instants (every 15 s), each running `script` (`# N` added,
/// so no two commands are the same).
fn wide_burst(site: &Site, lease: &str, script: &str) {
    let mut toml = String::new();
    for j in 0..JOBS {
        let cmd = sh(&format!("{script} # {j}"));
        toml.push_str(&format!(
            "[[job]]\nname = \"d{j:03}\"\nevery = \"15s\"\nlease = \"{lease}\"\n\
             timeout = \"5s\"\noverlap = \"coalesce\"\ncommand = {cmd}\n\n"
        ));
    }
    site.write_jobs(&toml);
}

/// A burst larger than one decision batch (512 firings to a transaction) is decided whole
/// before its runs are started: with each run's hand-over to its thread slowed
/// (`EXACTLY_FAULT=hand_off:pause=8ms`, a fault point in the real code path, as a small machine
/// busy starting the burst's processes slows it), every firing of the slot is recorded within a
/// second or two of it, while its last command starts seconds later. Each batch's runs used to
/// be handed over before the next batch was decided: its firings waited for 512 slow starts.
#[test]
fn a_burst_past_one_batch_is_decided_whole_before_its_slow_starts() {
    let site = Site::new();
    wide_burst(&site, "10s", "true");
    let mut s = site.start_with_env("s", "5s", &[("EXACTLY_FAULT", "hand_off:pause=8ms")]);
    // The first slot every job fired at (a start straddling a slot leaves some jobs out of it),
    // once all its commands have started.
    let whole = format!(
        "SELECT scheduled_at FROM exactly_runs GROUP BY scheduled_at \
         HAVING count(*) = {JOBS} AND count(start_lag_ms) = {JOBS} ORDER BY scheduled_at LIMIT 1"
    );
    assert!(
        wait_until(Duration::from_secs(90), || site
            .count(&format!("SELECT count(*) FROM ({whole})"))
            == 1),
        "no slot of all {JOBS} jobs started: {}",
        site.log("s")
    );
    let slot = site.strings(&whole)[0].clone();
    assert_eq!(
        s.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("s")
    );
    // Milliseconds after the slot: the latest firing recorded, and the latest command started.
    let ms = |what: &str| {
        site.count(&format!(
            "SELECT CAST(max({what}) AS INTEGER) FROM (SELECT \
             (julianday(started_at) - julianday(scheduled_at)) * 86400000.0 AS decided, \
             (julianday(started_at) - julianday(scheduled_at)) * 86400000.0 + start_lag_ms \
             AS started FROM exactly_runs WHERE scheduled_at = '{slot}')"
        ))
    };
    let (decided, started) = (ms("decided"), ms("started"));
    eprintln!("slot {slot}: last firing recorded at +{decided} ms, last command at +{started} ms");
    // The fault took: the hand-overs alone take 600 × 8 ms.
    assert!(
        started >= 3_000,
        "the burst's commands were not slowed (last at +{started} ms): {}",
        site.log("s")
    );
    assert!(
        decided < 2_000,
        "the burst's last firing was recorded {decided} ms after its slot, behind the slow \
         starts (last at +{started} ms): {}",
        site.log("s")
    );
}

/// A scheduler SIGKILLed once a burst wider than one batch is decided, while its runs are still
/// being handed over (`EXACTLY_FAULT=hand_off:pause=20ms`: 12 s for the 600), leaves hundreds of
/// firings decided and never started: the next scheduler resumes every one of them, and each
/// of the burst's firings was decided once.
#[test]
fn a_burst_decided_and_not_handed_over_is_resumed_by_the_next_scheduler() {
    let site = Site::new();
    wide_burst(
        &site,
        "3s",
        "echo $EXACTLY_JOB $EXACTLY_SCHEDULED_AT >> ran",
    );
    let mut a = site.start_with_env("a", "1s", &[("EXACTLY_FAULT", "hand_off:pause=20ms")]);
    let whole = format!(
        "SELECT scheduled_at FROM exactly_runs GROUP BY scheduled_at \
         HAVING count(*) = {JOBS} ORDER BY scheduled_at LIMIT 1"
    );
    assert!(
        wait_until(Duration::from_secs(60), || site
            .count(&format!("SELECT count(*) FROM ({whole})"))
            == 1),
        "no slot of all {JOBS} jobs decided: {}",
        site.log("a")
    );
    a.kill9();
    let slot = site.strings(&whole)[0].clone();
    let ran_for = |site: &Site| -> std::collections::HashSet<String> {
        site.lines("ran")
            .into_iter()
            .filter_map(|l| l.strip_suffix(&format!(" {slot}")).map(str::to_string))
            .collect()
    };
    let before = ran_for(&site).len();
    eprintln!("slot {slot}: {before} of {JOBS} commands ran before the scheduler was killed");
    assert!(
        before < JOBS as usize / 2,
        "the kill came after most of the burst had started ({before}): {}",
        site.log("a")
    );
    let mut b = site.start("b", "1s");
    let all = wait_until(Duration::from_secs(90), || {
        ran_for(&site).len() == JOBS as usize
    });
    let after = ran_for(&site).len();
    assert_eq!(
        b.term(Duration::from_secs(20)),
        Some(0),
        "{}",
        site.log("b")
    );
    assert!(
        all,
        "{after} of {JOBS} firings of {slot} ran after the restart: {}",
        site.log("b")
    );
    assert_eq!(
        site.count(&format!(
            "SELECT count(*) FROM exactly_firings WHERE scheduled_at = '{slot}'"
        )),
        JOBS,
        "the burst's firings are not one each"
    );
    assert_eq!(
        site.count(&format!(
            "SELECT count(DISTINCT job_key) FROM exactly_runs \
             WHERE scheduled_at = '{slot}' AND outcome = 'ok'"
        )),
        JOBS,
        "not every firing of the burst ended with a run recorded ok: {}",
        site.log("b")
    );
}

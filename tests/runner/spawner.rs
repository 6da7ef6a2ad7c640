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
    let (mut s, pid, spawner, _) = first_command(&site);
    s.kill9();
    assert!(
        wait_until(Duration::from_secs(3), || !alive(pid) && !alive(spawner)),
        "the command ({pid}) or the spawner ({spawner}) outlived a SIGKILLed scheduler"
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

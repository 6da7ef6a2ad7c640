//! Reloading the jobs file with SIGHUP (what `systemctl reload` sends), with a real `exactly
//! run` on real jobs files: a good file's new job fires, a removed one stops, a changed one's
//! new command runs from its next firing while a run in progress finishes undisturbed; a bad
//! file changes nothing (one line says why) and the scheduler goes on; SIGTERM still stops it.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::runner::*;

/// A 1-second job whose command appends `line` to `file` in the jobs file's folder.
fn appending(name: &str, line: &str, file: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nevery = \"1s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
         command = [\"sh\", \"-c\", \"echo {line} >> {file}\"]\n"
    )
}

/// A 2-second job whose runs take 1.5 s, marking their start and end in `slow.out`.
const SLOW: &str =
    "[[job]]\nname = \"slow\"\nevery = \"2s\"\nlease = \"5s\"\noverlap = \"coalesce\"\n\
    command = [\"sh\", \"-c\", \"echo start >> slow.out; sleep 1.5; echo end >> slow.out\"]\n";

fn reload_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("reload")).collect()
}

/// Six 1-second jobs whose runs append `<slot> <version>` to `<job>.out`.
fn versioned(version: &str) -> String {
    (0..6)
        .map(|i| {
            format!(
                "[[job]]\nname = \"j{i}\"\nevery = \"1s\"\nlease = \"800ms\"\n\
                 overlap = \"coalesce\"\n\
                 command = [\"sh\", \"-c\", \"echo $EXACTLY_SCHEDULED_AT {version} >> j{i}.out\"]\n"
            )
        })
        .collect()
}

on_both_backends! {
    #[test]
    fn sighup_reloads_a_good_file_added_removed_and_changed_jobs() {
        let site = Site::new();
        site.write_jobs(&format!(
            "{}{}{SLOW}",
            appending("a", "a1", "a.out"),
            appending("b", "b", "b.out")
        ));
        let mut s = site.start("s", "5s");
        // Reload while a run of `slow` is in progress: it must finish as it began.
        assert!(
            wait_until(Duration::from_secs(15), || {
                !site.lines("a.out").is_empty()
                    && !site.lines("b.out").is_empty()
                    && site.lines("slow.out").last().map(String::as_str) == Some("start")
            }),
            "the first file never ran: {}",
            site.log("s")
        );
        site.write_jobs(&format!(
            "{}{}{SLOW}",
            appending("a", "a2", "a.out"),
            appending("c", "c", "c.out")
        ));
        s.signal(libc::SIGHUP);
        assert!(
            wait_until(Duration::from_secs(5), || site.log("s").contains("reloaded")),
            "no reload logged: {}",
            site.log("s")
        );
        let log = site.log("s");
        let line = reload_lines(&log).join("\n");
        assert!(
            line.contains("added c; removed b; changed a"),
            "the change is not logged: {line}"
        );
        assert!(s.child.try_wait().expect("try_wait").is_none(), "SIGHUP stopped it: {log}");
        let b_at_reload = site.lines("b.out").len();
        // The new job fires, the changed one runs its new command.
        assert!(
            wait_until(Duration::from_secs(10), || {
                site.lines("c.out").len() >= 3 && site.lines("a.out").iter().any(|l| l == "a2")
            }),
            "c never fired or a never ran its new command: {}",
            site.log("s")
        );
        // The removed job stopped: nothing more since the reload (a run live then may end).
        assert_eq!(site.lines("b.out").len(), b_at_reload, "b still fires: {}", site.log("s"));
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_jobs WHERE job_key = 'b' AND retired = 1"),
            1
        );
        // The run in progress at the reload finished: every run of slow ended ok, none killed.
        assert!(
            wait_until(Duration::from_secs(5), || {
                site.lines("slow.out").iter().any(|l| l == "end")
            }),
            "slow's run never finished: {}",
            site.log("s")
        );
        assert_eq!(
            site.count(
                "SELECT count(*) FROM exactly_runs WHERE job_key = 'slow' AND outcome <> 'ok'"
            ),
            0,
            "{}",
            site.log("s")
        );
        // Recorded: an event the dashboard's Events view and `status --json` show.
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_events WHERE kind = 'jobs_reloaded'"),
            1
        );
        let (code, out, err) = site.exactly(&["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("status --json is JSON");
        let shown = v["events"].as_array().is_some_and(|e| {
            e.iter().any(|e| {
                e["kind"] == "jobs_reloaded"
                    && e["detail"].as_str().is_some_and(|d| d.contains("added c"))
            })
        });
        assert!(shown, "no reload event in status --json: {out}");
        let (code, text, err) = site.exactly(&["status"]);
        assert_eq!(code, 0, "{err}");
        assert!(text.contains("reloaded"), "status does not show the reload: {text}");
        // SIGTERM still stops it, gracefully.
        assert_eq!(s.term(Duration::from_secs(10)), Some(0), "{}", site.log("s"));
        assert!(site.log("s").contains("stopped"), "{}", site.log("s"));
    }

    #[test]
    fn sighup_with_a_bad_file_keeps_the_running_jobs() {
        let site = Site::new();
        site.write_jobs(&appending("a", "a", "a.out"));
        let mut s = site.start("s", "2s");
        assert!(
            wait_until(Duration::from_secs(10), || !site.lines("a.out").is_empty()),
            "a never ran: {}",
            site.log("s")
        );
        // A typo in a key, and a new job that must not start from a file with an error.
        site.write_jobs(&format!(
            "{}retriez = 2\n{}",
            appending("a", "a", "a.out"),
            appending("d", "d", "d.out")
        ));
        s.signal(libc::SIGHUP);
        assert!(
            wait_until(Duration::from_secs(5), || site.log("s").contains("refused")),
            "no refusal logged: {}",
            site.log("s")
        );
        let log = site.log("s");
        let lines = reload_lines(&log);
        assert_eq!(lines.len(), 1, "one line says why: {lines:?}");
        assert!(lines[0].contains("unknown key \"retriez\""), "{lines:?}");
        // The scheduler goes on with the jobs it had.
        let before = site.lines("a.out").len();
        assert!(
            wait_until(Duration::from_secs(10), || site.lines("a.out").len() >= before + 2),
            "a stopped firing after a bad reload: {}",
            site.log("s")
        );
        assert!(s.child.try_wait().expect("try_wait").is_none(), "it stopped: {}", site.log("s"));
        assert!(!site.exists("d.out"), "a job of the refused file ran");
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_events WHERE kind = 'jobs_reloaded'"),
            0
        );
        assert_eq!(s.term(Duration::from_secs(10)), Some(0), "{}", site.log("s"));
    }
    #[test]
    fn schedulers_sharing_a_file_reloaded_one_after_the_other_fire_each_slot_once() {
        let site = Site::new();
        site.write_jobs(&versioned("v1"));
        let a = site.start("a", "2s");
        let b = site.start("b", "2s");
        let with = |version: &str, n: usize| {
            (0..6).all(|i| {
                let lines = site.lines(&format!("j{i}.out"));
                lines.iter().filter(|l| l.ends_with(version)).count() >= n
            })
        };
        assert!(
            wait_until(Duration::from_secs(15), || with("v1", 2)),
            "{}\n{}",
            site.log("a"),
            site.log("b")
        );
        // A reloads the new version; B still holds the old one and stops firing the changed
        // jobs (the newest registration wins), A fires them, its share on time, B's by the net.
        site.write_jobs(&versioned("v2"));
        a.signal(libc::SIGHUP);
        assert!(
            wait_until(Duration::from_secs(10), || with("v2", 3)),
            "the new version does not fire while B holds the old one: {}\n{}",
            site.log("a"),
            site.log("b")
        );
        assert!(site.log("b").contains("definition differs"), "{}", site.log("b"));
        b.signal(libc::SIGHUP);
        assert!(
            wait_until(Duration::from_secs(5), || site.log("b").contains("reloaded")),
            "{}",
            site.log("b")
        );
        let reloaded = "(SELECT max(at) FROM exactly_events WHERE kind = 'jobs_reloaded')";
        let owners = format!(
            "SELECT count(DISTINCT owner) FROM exactly_runs WHERE started_at > {reloaded}"
        );
        // Both reloaded, they split the jobs again: each fires its share.
        assert!(
            wait_until(Duration::from_secs(10), || with("v2", 6) && site.count(&owners) == 2),
            "the schedulers do not share the jobs again: {}\n{}",
            site.log("a"),
            site.log("b")
        );
        // No firing ran twice, and none ran the old version after B stopped it.
        for i in 0..6 {
            let lines = site.lines(&format!("j{i}.out"));
            let mut slots: Vec<&str> = lines.iter().filter_map(|l| l.split(' ').next()).collect();
            let n = slots.len();
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(slots.len(), n, "j{i} ran a firing twice: {lines:?}");
            let first_v2 = lines.iter().position(|l| l.ends_with("v2")).expect("a v2 run");
            assert!(
                lines[first_v2..].iter().all(|l| l.ends_with("v2")),
                "j{i} ran the old version after the new one: {lines:?}"
            );
        }
    }

    #[test]
    fn a_jobs_file_swapped_for_another_by_a_symlink_is_refused_at_reload() {
        let site = Site::new();
        std::fs::create_dir_all(site.path("v1")).expect("mkdir");
        std::fs::create_dir_all(site.path("v2")).expect("mkdir");
        std::fs::write(site.path("v1/jobs.toml"), appending("a", "v1", "a.out")).expect("write");
        std::fs::write(site.path("v2/jobs.toml"), appending("a", "v2", "a.out")).expect("write");
        let link = site.path("current.toml");
        std::os::unix::fs::symlink(site.path("v1/jobs.toml"), &link).expect("symlink");
        let mut s = site.start_file(&link, "s", "2s", &[]);
        assert!(
            wait_until(Duration::from_secs(10), || site.exists("v1/a.out")),
            "{}",
            site.log("s")
        );
        // A deploy swaps the link: the jobs' folder (and their identity) would move.
        std::fs::remove_file(&link).expect("unlink");
        std::os::unix::fs::symlink(site.path("v2/jobs.toml"), &link).expect("symlink");
        s.signal(libc::SIGHUP);
        assert!(
            wait_until(Duration::from_secs(5), || site.log("s").contains("refused")),
            "{}",
            site.log("s")
        );
        assert!(site.log("s").contains("restart the scheduler"), "{}", site.log("s"));
        let n = site.lines("v1/a.out").len();
        assert!(
            wait_until(Duration::from_secs(5), || site.lines("v1/a.out").len() > n),
            "the running file stopped firing: {}",
            site.log("s")
        );
        assert!(!site.exists("v2/a.out"), "the other file's job ran");
        assert_eq!(s.term(Duration::from_secs(10)), Some(0), "{}", site.log("s"));
    }
}

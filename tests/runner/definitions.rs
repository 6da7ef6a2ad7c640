//! Job definitions across jobs files and schedulers, with real `exactly run` processes on one
//! database: the newest registration of a job wins (an older scheduler with another definition,
//! or whose file retired the job, stops firing it), the duplicate-command lint compares the
//! commands as they run from each file's folder, names are normalised, and `keep_runs` trims
//! a job's history to its newest runs while the all-time counts keep growing.
use crate::on_both_backends;
use crate::support;
use std::path::Path;
use std::time::Duration;
use support::runner::*;

/// A 1-second job whose command appends a line to `count` in the jobs file's folder.
fn counting_job(name: &str, count: &str) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nevery = \"1s\"\nlease = \"800ms\"\noverlap = \"coalesce\"\n\
         timeout = \"900ms\"\ncommand = [\"sh\", \"-c\", \"echo x >> {count}\"]\n"
    )
}

fn write(site: &Site, name: &str, text: &str) -> std::path::PathBuf {
    let p = site.path(name);
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(&p, text).expect("write jobs file");
    p
}

fn status_json(site: &Site) -> serde_json::Value {
    let (code, out, err) = site.exactly(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("status --json is JSON")
}

fn job_json(v: &serde_json::Value, name: &str) -> serde_json::Value {
    v["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["job_key"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("no job {name} in {v}"))
}

on_both_backends! {
    #[test]
    fn the_newest_definition_wins_and_the_older_scheduler_stops_firing_it() {
        let site = Site::new();
        let a_file = write(&site, "a.toml", &counting_job("sync", "a.count"));
        let b_file = write(&site, "b.toml", &counting_job("sync", "b.count"));
        let mut a = site.start_file(&a_file, "a", "2s", &[]);
        assert!(
            wait_until(Duration::from_secs(10), || site.lines("a.count").len() >= 2),
            "a never ran sync: {}",
            site.log("a")
        );
        // Blue-green: the new file's scheduler starts while the old one still runs.
        let mut b = site.start_file(&b_file, "b", "2s", &[]);
        assert!(
            wait_until(Duration::from_secs(10), || site.lines("b.count").len() >= 2),
            "b never ran sync: {}",
            site.log("b")
        );
        // `a` re-reads the registry every 2 s: past that, its count must stand still.
        let noticed = wait_until(Duration::from_secs(5), || {
            site.log("a")
                .contains("definition differs from the one registered by b")
        });
        std::thread::sleep(Duration::from_millis(1200));
        let a_then = site.lines("a.count").len();
        let b_then = site.lines("b.count").len();
        std::thread::sleep(Duration::from_secs(3));
        let (a_now, b_now) = (site.lines("a.count").len(), site.lines("b.count").len());
        eprintln!("a's command ran {a_then} -> {a_now}, b's {b_then} -> {b_now} times");
        assert_eq!(a_now, a_then, "the replaced definition still fires: {}", site.log("a"));
        assert!(b_now >= b_then + 2, "the newest definition stopped firing");
        assert!(noticed, "a did not say why: {}", site.log("a"));
        assert_eq!(
            site.log("a").matches("definition differs").count(),
            1,
            "said once: {}",
            site.log("a")
        );
        // status --json: the job's warnings say so while `a` is alive; the keys are unchanged.
        let v = status_json(&site);
        let sync = job_json(&v, "sync");
        let warnings = sync["warnings"].as_array().cloned().unwrap_or_default();
        assert!(
            warnings.iter().any(|w| w.as_str().is_some_and(|w| w.contains("definition differs")
                && w.contains("scheduler a"))),
            "{sync}"
        );
        assert_eq!(site.counter("definition_conflict"), 1);
        // `check` of the old file against the database names the newest registration.
        let a_path = a_file.to_string_lossy().into_owned();
        let (code, out, _) = site.exactly(&["check", &a_path]);
        assert_eq!(code, 0, "a warning: {out}");
        assert!(
            out.contains("sync: warning: definition differs from the one registered by b"),
            "{out}"
        );
        // Lookups normalise the name as the jobs file does.
        let (code, out, err) = site.exactly(&["pause", "sync\u{a0} "]);
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(a.term(Duration::from_secs(10)), Some(0), "{}", site.log("a"));
        assert_eq!(b.term(Duration::from_secs(10)), Some(0), "{}", site.log("b"));
    }

    #[test]
    fn a_job_the_newest_file_retired_stops_firing_on_the_old_scheduler() {
        let site = Site::new();
        let file = write(
            &site,
            "jobs.toml",
            &format!(
                "{}\n{}",
                counting_job("keep", "keep.count"),
                counting_job("gone", "gone.count")
            ),
        );
        let mut old = site.start_file(&file, "old", "2s", &[]);
        assert!(
            wait_until(Duration::from_secs(10), || site.lines("gone.count").len() >= 2),
            "{}",
            site.log("old")
        );
        // The deploy rewrites the file without `gone` and starts a new scheduler on it.
        write(&site, "jobs.toml", &counting_job("keep", "keep.count"));
        let mut new = site.start_file(&file, "new", "2s", &[]);
        let noticed = wait_until(Duration::from_secs(5), || {
            site.log("old").contains("retired by the newest registration")
        });
        std::thread::sleep(Duration::from_millis(1200));
        let then = site.lines("gone.count").len();
        std::thread::sleep(Duration::from_secs(3));
        let now = site.lines("gone.count").len();
        eprintln!("the retired job ran {then} -> {now} times");
        assert_eq!(now, then, "a retired job still fires: {}", site.log("old"));
        assert!(noticed, "old did not say why: {}", site.log("old"));
        assert!(site.lines("keep.count").len() >= 4);
        assert_eq!(old.term(Duration::from_secs(10)), Some(0));
        assert_eq!(new.term(Duration::from_secs(10)), Some(0));
    }

    #[test]
    fn two_folders_run_sh_are_two_commands_and_a_real_duplicate_only_warns() {
        let site = Site::new();
        for d in ["one", "two"] {
            write(&site, &format!("{d}/run.sh"), "#!/bin/sh\ntrue\n");
        }
        let job = |name: &str, cmd: &str| {
            format!(
                "[[job]]\nname = \"{name}\"\nevery = \"1h\"\nlease = \"1m\"\n\
                 overlap = \"coalesce\"\n\
                 timeout = \"5m\"\ncommand = [\"{cmd}\"]\n"
            )
        };
        let one = write(&site, "one/jobs.toml", &job("one", "./run.sh"));
        let two = write(&site, "two/jobs.toml", &job("two", "./run.sh"));
        let dup = write(&site, "three/jobs.toml", &job("three", "../one/run.sh"));
        // `one` is registered (a scheduler ran it).
        let mut s1 = site.start_file(&one, "s1", "2s", &[]);
        assert!(
            wait_until(Duration::from_secs(10), || {
                site.count("SELECT count(*) FROM exactly_jobs") == 1
            }),
            "{}",
            site.log("s1")
        );
        let two = two.to_string_lossy().into_owned();
        let (code, out, err) = site.exactly(&["check", &two]);
        eprintln!("check two: exit {code}: {out}{err}");
        assert_eq!(code, 0, "{out}{err}");
        assert!(!out.contains("same command"), "{out}");
        let mut s2 = site.start_file(Path::new(&two), "s2", "2s", &[]);
        assert!(
            wait_until(Duration::from_secs(10), || {
                site.count("SELECT count(*) FROM exactly_jobs") == 2
            }),
            "run of the second folder's file did not start: {}",
            site.log("s2")
        );
        assert_eq!(s2.wait(Duration::from_millis(300)), None, "{}", site.log("s2"));
        // The same script reached from a third folder is a real duplicate: a warning.
        let dup = dup.to_string_lossy().into_owned();
        let (code, out, _) = site.exactly(&["check", &dup]);
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains("three: warning: same command as job \"one\""),
            "{out}"
        );
        let (code, out, _) = site.exactly(&["check", "--strict", &dup]);
        assert_eq!(code, 1, "{out}");
        assert_eq!(s1.term(Duration::from_secs(10)), Some(0));
        assert_eq!(s2.term(Duration::from_secs(10)), Some(0));
    }

    #[test]
    fn keep_runs_keeps_the_newest_runs_and_the_all_time_counts_grow() {
        let site = Site::new();
        site.write_jobs(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"800ms\"\noverlap = \"coalesce\"\n\
             timeout = \"900ms\"\nkeep_runs = 3\ncommand = [\"true\"]\n",
        );
        let mut s = site.start("s", "2s");
        // The file may exist a moment before the scheduler has made its tables: not yet 0.
        let ok = |site: &Site| {
            let (code, out, _) = site.exactly(&["status", "--json"]);
            if code != 0 {
                return 0;
            }
            let v: serde_json::Value = serde_json::from_str(&out).expect("status --json is JSON");
            job_json(&v, "tick")["runs_by_outcome"]["ok"]
                .as_u64()
                .unwrap_or(0)
        };
        assert!(
            wait_until(Duration::from_secs(12), || site.db_exists() && ok(&site) >= 6),
            "{}",
            site.log("s")
        );
        let runs = site.count("SELECT count(*) FROM exactly_runs WHERE job_key = 'tick'");
        let firings = site.count("SELECT count(*) FROM exactly_firings WHERE job_key = 'tick'");
        let total = ok(&site);
        eprintln!("keep_runs = 3: {runs} runs and {firings} firings kept of {total} ok all-time");
        assert!(runs <= 4, "{runs} runs kept");
        assert!(firings <= 5, "{firings} firings kept");
        assert!(total >= 6, "all-time count {total}");
        // Time passes on purpose: the job keeps firing meanwhile.
        std::thread::sleep(Duration::from_secs(2));
        assert!(ok(&site) > total, "the all-time count stopped growing");
        assert!(site.count("SELECT count(*) FROM exactly_runs WHERE job_key = 'tick'") <= 4);
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
    }
}

#[test]
fn names_equal_after_normalising_collide_and_invisible_characters_are_refused() {
    let site = Site::new();
    let job = |name: &str| {
        format!(
            "[[job]]\nname = \"{name}\"\nevery = \"1m\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
             timeout = \"30s\"\ncommand = [\"true\"]\n"
        )
    };
    site.write_jobs(&format!("{}{}", job("a "), job("a")));
    let (code, out, _) = site.exactly(&["check", &site.jobs()]);
    eprintln!("check \"a \" and \"a\": exit {code}: {out}");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("name collides with job \"a \""), "{out}");
    for bad in ["a\u{200b}", "\u{feff}a", "a\u{2060}b"] {
        site.write_jobs(&job(bad));
        let (code, out, _) = site.exactly(&["check", &site.jobs()]);
        assert_eq!(code, 1, "{bad:?}: {out}");
        assert!(out.contains("invalid name"), "{bad:?}: {out}");
    }
}

//! `exactly check` on small fixture files: each problem is caught, one line each; a clean file
//! passes.
use crate::on_both_backends;
use crate::support;
use support::runner::*;

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/check/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs `check --strict` (warnings fail too) with a database that does not exist (no
/// history): (exit code, stdout lines).
fn check(site: &Site, name: &str) -> (i32, Vec<String>) {
    let (code, out, err) = site.exactly(&["check", "--strict", &fixture(name)]);
    assert!(!err.contains("panicked"), "{err}");
    (code, out.lines().map(str::to_string).collect())
}

fn has(lines: &[String], job: &str, what: &str) -> bool {
    lines
        .iter()
        .any(|l| l.contains(&format!(": {job}: ")) && l.contains(what) && l.contains(" — "))
}

/// Runs `exactly run` on a file and waits at most 5 s: (exit code or None, stderr).
fn run_briefly(site: &Site, file: &str) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(bin())
        .args(["--db", &site.db(), "run", file])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start exactly run");
    let code = wait_exit(&mut child, std::time::Duration::from_secs(5));
    if code.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("stderr");
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn wait_exit(child: &mut std::process::Child, within: std::time::Duration) -> Option<i32> {
    support::poll(std::time::Duration::from_millis(20), within, || {
        child.try_wait().ok().flatten()
    })
    .and_then(|s| s.code())
}

on_both_backends! {
    #[test]
    fn clean_file_passes() {
        let site = Site::new();
        let (code, lines) = check(&site, "clean.toml");
        assert_eq!((code, lines.len()), (0, 1), "{lines:?}");
        assert!(!site.db_exists(), "check never creates a database");
    }

    #[test]
    fn each_problem_is_caught() {
        let site = Site::new();
        let cases: &[(&str, &str, &str)] = &[
            (
                "duplicate_command.toml",
                "invoices-hourly",
                "same command as job \"send-invoices\"",
            ),
            (
                "lease_ge_interval.toml",
                "poll",
                "lease 10m00s >= interval 5m00s",
            ),
            (
                "thin_lease.toml",
                "sync",
                "lease 2.0s < 3 scheduler heartbeats (6.0s)",
            ),
            ("missing_overlap.toml", "report", "missing overlap policy"),
            ("bad_cron.toml", "typo-cron", "invalid cron schedule"),
            ("bad_timezone.toml", "berlin", "invalid timezone"),
            ("bad_duration.toml", "vague", "invalid every"),
            ("bad_duration.toml", "vague", "invalid lease"),
            ("unknown_key.toml", "typo", "unknown key \"overlapp\""),
            ("malformed.toml", "-", "not valid TOML at line 2"),
        ];
        for (file, job, what) in cases {
            let (code, lines) = check(&site, file);
            assert_eq!(code, 1, "{file}: {lines:?}");
            assert!(
                has(&lines, job, what),
                "{file}: expected {job}: {what}, got {lines:?}"
            );
            assert!(
                lines.iter().all(|l| l.starts_with(&fixture(file))),
                "{lines:?}"
            );
        }
        let (_, lines) = check(&site, "malformed.toml");
        assert_eq!(lines.len(), 1, "malformed TOML is one line: {lines:?}");
        let (_, lines) = check(&site, "unknown_key.toml");
        assert!(
            lines.iter().any(|l| l.contains("did you mean \"overlap\"")),
            "{lines:?}"
        );
        // The run refuses what check calls an error.
        let (code, _, err) = site.exactly(&["run", &fixture("missing_overlap.toml")]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("missing overlap policy") && err.contains("refusing to run"),
            "{err}"
        );
        assert!(
            !site.db_exists(),
            "a refused file opens no database"
        );
        let (code, _, err) = site.exactly(&["check", &fixture("no-such-file.toml")]);
        assert_eq!(code, 2, "{err}");
    }

    #[test]
    fn history_finds_interval_below_p99_not_a_renewed_lease() {
        let site = Site::new();
        let (code, _, _) = site.exactly(&["init"]);
        assert_eq!(code, 0);
        let now = chrono::Utc::now();
        let mut inserts = String::new();
        for i in 0..20 {
            let started = (now - chrono::Duration::minutes(i + 1))
                .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string();
            inserts.push_str(&format!(
                "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
                 started_at, ended_at, outcome, duration_ms)
                 VALUES ('slow-t{i}', 'slow', '{started}', 'o', {i}, '{started}', '{started}', \
                 'ok', 3000);\n"
            ));
        }
        site.execute(&inserts);
        let (code, lines) = check(&site, "history.toml");
        assert_eq!(code, 1);
        // Its runs outlast the lease, which `exactly run` renews by heartbeat: normal, not a
        // risk (no "stolen while alive").
        assert!(
            !lines.iter().any(|l| l.contains("lease 1.0s <")),
            "{lines:?}"
        );
        assert!(
            has(&lines, "slow", "observed p99 3.0s > interval 2.0s"),
            "{lines:?}"
        );
        // Risks read from history warn but do not stop a scheduler from starting: refusing them
        // would also refuse the deploy of a fix for a job that got slow.
        let (code, err) = run_briefly(&site, &fixture("history.toml"));
        assert_eq!(code, None, "run refused a file over its history: {err}");
        assert!(
            err.contains("WARN job=slow observed p99 3.0s > interval 2.0s"),
            "{err}"
        );
    }

    #[test]
    fn run_refuses_every_file_check_rejects_with_the_same_lines() {
        let site = Site::new();
        let (code, lines) = check(&site, "bad_duration.toml");
        assert_eq!(code, 1);
        let (code, err) = run_briefly(&site, &fixture("bad_duration.toml"));
        assert_eq!(code, Some(2), "exactly run started anyway: {err}");
        for l in &lines {
            assert!(err.lines().any(|e| e == l), "run did not say {l:?}: {err}");
        }
        assert!(err.contains("refusing to run"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }

    #[test]
    fn warnings_fail_only_strict_check_and_run_logs_them_and_runs() {
        let site = Site::new();
        for (file, what) in [
            ("lease_ge_interval.toml", "lease 10m00s >= interval 5m00s"),
            ("duplicate_command.toml", "same command as job"),
        ] {
            let (code, out, _) = site.exactly(&["check", &fixture(file)]);
            assert_eq!(code, 0, "{file}: {out}");
            assert!(out.contains(&format!("warning: {what}")), "{file}: {out}");
            let (code, _) = check(&site, file);
            assert_eq!(code, 1, "{file}: --strict fails on a warning");
            let (code, err) = run_briefly(&site, &fixture(file));
            assert_eq!(code, None, "{file}: run refused a warning: {err}");
            assert!(err.contains(what) && err.contains("WARN"), "{file}: {err}");
            assert!(!err.contains("refusing to run"), "{err}");
        }
    }

    #[test]
    fn absurd_durations_are_refused_and_long_ones_keep_timestamps_fixed_width() {
        let site = Site::new();
        for (key, value) in [
            ("every", "400000y"),
            ("lease", "300000y"),
            ("catchup", "300000y"),
            ("timeout", "300000y"),
            ("observe_timeout", "300000y"),
        ] {
            let mut job = vec![
                ("every", "1h"),
                ("lease", "1m"),
                ("overlap", "\"coalesce\""),
                ("timeout", "10m"),
            ];
            job.retain(|(k, _)| *k != key);
            let mut text =
                format!("[[job]]\nname = \"absurd\"\ncommand = [\"true\"]\n{key} = \"{value}\"\n");
            for (k, v) in job {
                let v = if v.starts_with('"') {
                    v.to_string()
                } else {
                    format!("\"{v}\"")
                };
                text.push_str(&format!("{k} = {v}\n"));
            }
            let file = site.path("absurd.toml").to_string_lossy().into_owned();
            std::fs::write(&file, &text).expect("write");
            let (code, out, err) = site.exactly(&["check", &file]);
            assert_eq!(code, 1, "{key} = {value}: {out}{err}");
            assert!(out.contains(&format!("invalid {key}")), "{key}: {out}");
            let (code, err) = run_briefly(&site, &file);
            assert_eq!(code, Some(2), "{key}: {err}");
            assert!(!err.contains("panicked"), "{err}");
        }
        // The longest accepted durations run, fire and keep every timestamp 24 characters wide.
        let file = site.path("long.toml").to_string_lossy().into_owned();
        std::fs::write(
            &file,
            "[[job]]\nname = \"long\"\nevery = \"99y\"\nlease = \"98y\"\ncatchup = \"99y\"\n\
             timeout = \"97y\"\nobserve_timeout = \"97y\"\noverlap = \"queue\"\nqueue_cap = 1\n\
             command = [\"true\"]\n",
        )
        .expect("write");
        let (code, out, err) = site.exactly(&["check", &file]);
        assert_eq!(code, 0, "{out}{err}");
        let (code, err) = run_briefly(&site, &file);
        assert_eq!(code, None, "the scheduler should keep running: {err}");
        assert!(!err.contains("panicked"), "{err}");
        let (code, out, err) = site.exactly(&["trigger", "long"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(!err.contains("panicked"), "{err}");
        // A registry an older version wrote with an absurd lease (300000y): trigger stays sane.
        site.execute(
            "UPDATE exactly_jobs SET lease_ms = 9467280000000000, lease_s = 9467280000000 WHERE \
             job_key = 'long'",
        );
        let (code, out, err) = site.exactly(&["trigger", "long"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(!err.contains("panicked"), "{err}");
        for col in [
            "SELECT lease_until FROM job_lease",
            "SELECT scheduled_at FROM exactly_firings",
            "SELECT started_at FROM exactly_runs",
        ] {
            let v = site.strings(col);
            assert!(!v.is_empty(), "{col}");
            assert!(v.iter().all(|t| t.len() == 24), "{col}: {v:?}");
        }
    }

    #[test]
    fn timeouts_are_linted() {
        let site = Site::new();
        let file = site.path("t.toml").to_string_lossy().into_owned();
        std::fs::write(
            &file,
            "[[job]]\nname = \"long\"\nevery = \"1m\"\nlease = \"30s\"\noverlap = \"coalesce\"\n\
             timeout = \"2m\"\ncommand = [\"true\"]\n\n[[job]]\nname = \"open\"\nevery = \"1m\"\n\
             lease = \"30s\"\noverlap = \"coalesce\"\ncommand = [\"false\"]\n",
        )
        .expect("write");
        let (code, out, _) = site.exactly(&["check", &file]);
        assert_eq!(code, 0, "a warning passes without --strict: {out}");
        assert_eq!(site.exactly(&["check", "--strict", &file]).0, 1);
        let lines: Vec<String> = out.lines().map(str::to_string).collect();
        assert!(
            has(&lines, "long", "timeout 2m00s >= interval 1m00s"),
            "{lines:?}"
        );
        assert!(has(&lines, "open", "no timeout"), "{lines:?}");
    }
}

/// Every problem of a file is reported, each on its own line `FILE:LINE: JOB: …` naming the
/// key it is about; `--json` gives the same `line` and `key`. (Before, a bad time zone hid the
/// cron expression's problem, a key of the wrong type hid the rest of its job and was not
/// named, and no line had a number.)
#[test]
fn every_problem_is_reported_at_its_line_naming_its_key() {
    let site = Site::new();
    let file = fixture("every_problem.toml");
    let (code, out, err) = site.exactly(&["check", &file]);
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    let expect = [
        (6, "zoned", "invalid timezone"),
        (5, "zoned", "invalid cron schedule"),
        (18, "stringly", "wrong type of value for command"),
        (23, "sloppy", "invalid lease"),
        (24, "sloppy", "unknown key \"overlapp\""),
        (20, "sloppy", "missing overlap policy"),
    ];
    for (line, job, what) in expect {
        let prefix = format!("{file}:{line}: {job}: {what}");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&prefix) && l.contains(" — ")),
            "no line {prefix:?} in:\n{out}"
        );
    }
    assert_eq!(lines.len(), expect.len(), "one line per problem:\n{out}");
    assert!(
        out.contains("command = [\"true\"]"),
        "the fix is shown:\n{out}"
    );
    let (code, json, err) = site.exactly(&["check", "--json", &file]);
    assert_eq!(code, 1, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("check --json");
    let problems = v["problems"].as_array().expect("problems");
    let at = |what: &str| {
        problems
            .iter()
            .find(|p| p["what"].as_str().is_some_and(|w| w.starts_with(what)))
            .map(|p| (p["line"].as_u64(), p["key"].as_str().map(str::to_string)))
    };
    assert_eq!(
        at("invalid timezone"),
        Some((Some(6), Some("timezone".into())))
    );
    assert_eq!(
        at("wrong type of value"),
        Some((Some(18), Some("command".into())))
    );
    assert_eq!(
        at("missing overlap"),
        Some((Some(20), Some("overlap".into())))
    );
}

/// A file `exactly watch` runs (only `[[notify]]` tables) passes `check`, which says it is for
/// `watch`; a file with jobs says it is for `run`; a file with neither still fails. (Before, a
/// notify-only file failed "no jobs", so a watcher host's `ExecStartPre=exactly check` failed.)
#[test]
fn check_accepts_a_watch_file_and_says_which_command_it_is_for() {
    let site = Site::new();
    let watch = site.path("watch.toml").to_string_lossy().into_owned();
    std::fs::write(
        &watch,
        "[[notify]]\nname = \"pager\"\nwebhook = \"http://127.0.0.1:9/w\"\nscheduler_gone = true\n\n\
         [[notify]]\nname = \"ops\"\nhook = [\"true\"]\nfailing_runs = 3\n",
    )
    .expect("write");
    let (code, out, err) = site.exactly(&["check", &watch]);
    assert_eq!(code, 0, "a file exactly watch runs: {out}{err}");
    assert!(
        out.trim_end()
            .ends_with("ok (0 jobs, 2 notify; for exactly watch)"),
        "{out}"
    );
    let (code, json, err) = site.exactly(&["check", "--json", &watch]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("check --json");
    assert_eq!(
        (v["notify"].as_u64(), v["for"].as_str()),
        (Some(2), Some("watch"))
    );
    let both = site.path("both.toml").to_string_lossy().into_owned();
    let clean = std::fs::read_to_string(fixture("clean.toml")).expect("read");
    std::fs::write(
        &both,
        format!("{clean}\n[[notify]]\nname = \"ops\"\nhook = [\"true\"]\nfailing_runs = 3\n"),
    )
    .expect("write");
    let (code, out, err) = site.exactly(&["check", &both]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.trim_end()
            .ends_with("ok (3 jobs, 1 notify; for exactly run)"),
        "{out}"
    );
    let empty = site.path("empty.toml").to_string_lossy().into_owned();
    std::fs::write(&empty, "retain = \"90d\"\n").expect("write");
    let (code, out, _) = site.exactly(&["check", &empty]);
    assert_eq!(code, 1, "neither run nor watch takes it: {out}");
    assert!(out.contains("no jobs"), "{out}");
}

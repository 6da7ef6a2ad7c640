//! `exactly check` on small fixture files: each problem is caught, one line each; a clean file
//! passes.
mod runner_support;
use runner_support::*;

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

#[test]
fn clean_file_passes() {
    let site = Site::new();
    let (code, lines) = check(&site, "clean.toml");
    assert_eq!((code, lines.len()), (0, 1), "{lines:?}");
    assert!(!site.exists("exactly.db"), "check never creates a database");
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
        !site.exists("exactly.db"),
        "a refused file opens no database"
    );
    let (code, _, err) = site.exactly(&["check", &fixture("no-such-file.toml")]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn history_finds_lease_and_interval_below_p99() {
    let site = Site::new();
    let (code, _, _) = site.exactly(&["init"]);
    assert_eq!(code, 0);
    let c = site.conn();
    let now = chrono::Utc::now();
    for i in 0..20 {
        let started = (now - chrono::Duration::minutes(i + 1))
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        c.execute(
            "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, started_at, ended_at, outcome, duration_ms)
             VALUES (?1, 'slow', ?2, 'o', ?3, ?2, ?2, 'ok', 3000)",
            rusqlite::params![format!("slow-t{i}"), started, i],
        )
        .unwrap();
    }
    drop(c);
    let (code, lines) = check(&site, "history.toml");
    assert_eq!(code, 1);
    assert!(
        has(&lines, "slow", "lease 1.0s < observed p99 3.0s"),
        "{lines:?}"
    );
    assert!(
        has(&lines, "slow", "observed p99 3.0s > interval 2.0s"),
        "{lines:?}"
    );
}

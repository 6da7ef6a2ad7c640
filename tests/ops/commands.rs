//! What an operator's tools say, from the real binary on real databases: the metrics name a
//! job in `exactly_job`, their run-duration histogram never goes down when `gc` prunes runs, a
//! job that never succeeded still has its last-success series (0); `status --check` exits 0, 1
//! and 2 as monitoring plugins expect; `jobs` and `effects --state unknown` list what is there.
use crate::on_both_backends;
use crate::support;

use exactly::effect::{self, Ctx, Effect, Failure, Observation, Outcome, Spec};
use exactly::state::RunOutcome;
use exactly::{firing, jobs, lease};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::runner::*;

/// `exactly metrics` as `series → value`.
fn scrape(site: &Site) -> BTreeMap<String, f64> {
    let (code, out, err) = site.exactly(&["metrics"]);
    assert_eq!(code, 0, "metrics: {err}");
    out.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample is `series value`");
            let value = value.parse().unwrap_or_else(|e| panic!("{l}: {e}"));
            (series.to_string(), value)
        })
        .collect()
}

/// `job`'s run-duration histogram samples (`_bucket{le=…}`, `_sum`, `_count`), whatever the
/// label naming the job is called: `suffix{le}` → value.
fn histogram(m: &BTreeMap<String, f64>, job: &str) -> BTreeMap<String, f64> {
    m.iter()
        .filter(|(s, _)| {
            s.starts_with("exactly_job_run_duration_seconds_") && s.contains(&format!("=\"{job}\""))
        })
        .map(|(s, v)| {
            let suffix = s
                .trim_start_matches("exactly_job_run_duration_seconds_")
                .split('{')
                .next()
                .unwrap_or("");
            let le = s
                .split("le=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("");
            (format!("{suffix}{le}"), *v)
        })
        .collect()
}

/// `n` runs of `job`, three days ago (inside the duration window, older than `gc --keep 1d`),
/// each ending `outcome` after `ms`, written through the library at their own instants.
fn runs_days_ago(site: &Site, job: &str, n: i64, outcome: RunOutcome, ms: i64) {
    let mut s = exactly::Store::open(&site.db()).expect("open");
    let start = exactly::time::now() - chrono::Duration::days(3);
    for i in 0..n {
        let at = start + chrono::Duration::minutes(i);
        let (slot, until) = (
            exactly::time::fmt(at),
            exactly::time::fmt(at + chrono::Duration::minutes(1)),
        );
        let fired = firing::fire(
            &mut s,
            &firing::FireRequest {
                job,
                slot: &slot,
                kind: exactly::state::FiringKind::Scheduled,
                owner: "s0@old-host:1",
                lease_until: &until,
                now: &slot,
                overlap: exactly::policy::Overlap::Coalesce,
                live_here: false,
            },
        )
        .expect("fire");
        let firing::Fired::Started(run) = fired else {
            panic!("{job} at {slot} did not start: {fired:?}")
        };
        let end = jobs::RunEnd {
            job,
            run_id: &run.run_id,
            slot: &slot,
            token: run.token.get(),
            outcome: outcome.clone(),
            exit_code: Some(3),
            duration_ms: ms,
            start_lag_ms: None,
            renewal_gap_ms: None,
            log: "",
        };
        s.as_at(at + chrono::Duration::milliseconds(ms), |s| {
            jobs::finish_run(s, &end)
        })
        .expect("finish");
        // PostgreSQL stamps rows with its own clock, whatever instant the caller passes: the
        // run is moved back to its instant by hand (on SQLite it is there already).
        let fmt = exactly::time::fmt;
        site.execute(&format!(
            "UPDATE exactly_runs SET scheduled_at = '{}', started_at = '{}', ended_at = '{}' \
             WHERE run_id = '{}'",
            fmt(at),
            fmt(at),
            fmt(at + chrono::Duration::milliseconds(ms)),
            run.run_id
        ));
    }
}

/// `promtool check metrics` on `exactly metrics`: no lint.
fn promtool_clean(site: &Site) {
    let (code, out, err) = site.exactly(&["metrics"]);
    assert_eq!(code, 0, "metrics: {err}");
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "promtool could not be started ({e}): install Debian's prometheus package (.ci/run \
                 does)"
            )
        });
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), out.as_bytes())
        .expect("write to promtool");
    let done = child.wait_with_output().expect("promtool");
    assert!(
        done.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
}

fn json(site: &Site, args: &[&str]) -> Value {
    let (code, out, err) = site.exactly(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?} is not JSON ({e}): {out}"))
}

/// A far side that answers as told.
struct Answer(Result<String, Failure>);

impl Effect for Answer {
    fn perform(&mut self, _key: &str) -> Result<String, Failure> {
        self.0.clone()
    }
    fn observe(&mut self, _key: &str) -> Observation {
        Observation::CantTell("not asked".into())
    }
}

on_both_backends! {
    #[test]
    fn the_duration_histogram_never_goes_down_when_gc_prunes_runs() {
        let site = Site::new();
        runs_days_ago(&site, "nightly", 5, RunOutcome::Failed, 2000);
        let before = histogram(&scrape(&site), "nightly");
        assert_eq!(before.get("count"), Some(&5.0), "{before:?}");
        assert_eq!(before.get("sum"), Some(&10.0), "{before:?}");
        assert_eq!(before.get("bucket1.0"), Some(&0.0), "{before:?}");
        assert_eq!(before.get("bucket5.0"), Some(&5.0), "{before:?}");
        assert_eq!(before.get("bucket+Inf"), Some(&5.0), "{before:?}");

        let (code, _, err) = site.exactly(&["gc", "--keep", "1d"]);
        assert_eq!(code, 0, "gc: {err}");
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE job_key = 'nightly'"),
            1,
            "gc keeps only the job's latest run"
        );
        let after = histogram(&scrape(&site), "nightly");
        assert_eq!(after, before, "the histogram changed when gc pruned runs");

        // Named so Prometheus keeps it (its own `job` label is the scrape job's); the job that
        // never succeeded has its last success at 0 and an ok counter at 0.
        let m = scrape(&site);
        assert!(
            !m.keys().any(|s| s.contains("{job=") || s.contains(",job=")),
            "a `job` label: {m:?}"
        );
        let series = |s: &str| m.get(s).copied();
        assert_eq!(
            series(r#"exactly_job_run_duration_seconds_count{exactly_job="nightly"}"#),
            Some(5.0)
        );
        assert_eq!(
            series(r#"exactly_job_last_success_timestamp_seconds{exactly_job="nightly"}"#),
            Some(0.0)
        );
        assert_eq!(
            series(r#"exactly_job_runs_total{exactly_job="nightly",outcome="ok"}"#),
            Some(0.0)
        );
        assert_eq!(
            series(r#"exactly_job_runs_total{exactly_job="nightly",outcome="failed"}"#),
            Some(5.0)
        );
        promtool_clean(&site);
    }

    #[test]
    fn an_upgraded_database_counts_its_runs_already_ended_into_the_histogram_once() {
        let site = Site::new();
        runs_days_ago(&site, "nightly", 3, RunOutcome::Ok, 20_000);
        // Back to schema version 6: no duration counters, and on SQLite no triggers for them.
        site.execute("DELETE FROM exactly_counters WHERE kind LIKE 'run_duration:%'");
        if site.pg.is_some() {
            site.execute("UPDATE exactly_meta SET value = 6 WHERE name = 'schema_version'");
        } else {
            site.execute(
                "DROP TRIGGER exactly_runs_duration_insert; DROP TRIGGER \
                 exactly_runs_duration_update;
                 PRAGMA user_version = 6;",
            );
        }
        let read = histogram(&scrape(&site), "nightly");
        assert_eq!(read.get("count"), Some(&0.0), "a reader changes nothing: {read:?}");
        for _ in 0..2 {
            let (code, _, err) = site.exactly(&["init"]);
            assert_eq!(code, 0, "init: {err}");
        }
        let h = histogram(&scrape(&site), "nightly");
        assert_eq!(h.get("count"), Some(&3.0), "{h:?}");
        assert_eq!(h.get("sum"), Some(&60.0), "{h:?}");
        assert_eq!(h.get("bucket15.0"), Some(&0.0), "{h:?}");
        assert_eq!(h.get("bucket30.0"), Some(&3.0), "{h:?}");
        // And the next run's end is counted by the trigger.
        runs_days_ago(&site, "later", 1, RunOutcome::Ok, 50);
        let h = histogram(&scrape(&site), "later");
        assert_eq!(h.get("bucket0.1"), Some(&1.0), "{h:?}");
    }

    #[test]
    fn status_check_exits_0_when_healthy_1_for_a_pending_approval_2_with_no_scheduler() {
        let site = Site::new();
        site.write_jobs(&format!(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh("true")
        ));
        let mut sched = site.start("s", "5s");
        let check = || site.exactly(&["status", "--check"]);
        let mut last = (0, String::new(), String::new());
        assert!(
            wait_until(Duration::from_secs(20), || {
                last = check();
                last.0 == 0 && last.1.contains("jobs_registered=1")
            }),
            "never OK with a live scheduler: {last:?}\n{}",
            site.log("s")
        );
        assert!(last.1.starts_with("EXACTLY OK - "), "{last:?}");
        assert_eq!(last.1.lines().count(), 1, "one line: {last:?}");

        let token = site.claim("manual", "1h");
        let (code, _, err) = site.exactly(&[
            "effect", "--job", "manual", "--token", &token, "--action", "pay", "--target",
            "acme", "--terms", "pay 10 EUR", "--needs-approval", "--", "true",
        ]);
        assert_eq!(code, 4, "awaits approval: {err}");
        let (code, out, _) = check();
        assert_eq!(code, 1, "{out}");
        assert!(
            out.starts_with("EXACTLY WARNING - ") && out.contains("1 approval(s) pending"),
            "{out}"
        );

        assert_eq!(sched.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        let (code, out, _) = check();
        assert_eq!(code, 2, "{out}");
        assert!(
            out.starts_with("EXACTLY CRITICAL - no scheduler alive (1 job registered)"),
            "{out}"
        );
        assert!(out.contains("approval"), "the warning is still said: {out}");
    }

    #[test]
    fn an_unknown_older_than_an_hour_is_critical_and_listed_by_effects() {
        let site = Site::new();
        let mut s = exactly::Store::open(&site.db()).expect("open");
        let at = exactly::time::now() - chrono::Duration::hours(2);
        let token = match lease::claim_until(
            &mut s,
            &exactly::JobName::from("payroll"),
            "me@host:2",
            at + chrono::Duration::minutes(10),
            at,
        )
        .expect("claim")
        {
            lease::Claim::Won { token } => token,
            held => panic!("{held:?}"),
        };
        let ctx = Ctx::new(&exactly::JobName::from("payroll"), token).at(at);
        let mut lost = Answer(Err(Failure::Lost("exit 9".into())));
        let out = effect::run(&mut s, &ctx, &Spec::new("pay", "bob").terms("pay bob 10"), &mut lost)
            .expect("effect");
        assert!(matches!(out, Outcome::Unknown { .. }), "{out:?}");
        let done =
            effect::run(&mut s, &ctx, &Spec::new("pay", "alice"), &mut Answer(Ok("ok".into())))
                .expect("effect");
        assert!(matches!(done, Outcome::Done { .. }), "{done:?}");
        let key = out.key().to_string();
        drop(s);
        // PostgreSQL stamps rows with its own clock: the effect is moved back by hand.
        site.execute(&format!(
            "UPDATE effect_ledger SET created_at = '{0}', updated_at = '{0}' WHERE effect_key = \
             '{key}'",
            exactly::time::fmt(at)
        ));

        let (code, line, _) = site.exactly(&["status", "--check"]);
        assert_eq!(code, 2, "{line}");
        assert!(
            line.starts_with("EXACTLY CRITICAL - 1 unknown effect(s), oldest 2h"),
            "{line}"
        );

        let (code, text, err) = site.exactly(&["effects", "--state", "unknown"]);
        assert_eq!(code, 0, "{err}");
        let rows: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(rows.len(), 1, "{text}");
        assert!(
            rows[0].starts_with(&key) && rows[0].contains("payroll") && rows[0].contains("unknown")
                && rows[0].contains("2h") && rows[0].contains("pay bob 10"),
            "{text}"
        );
        let v = json(&site, &["effects", "--state", "unknown", "--json"]);
        assert!(v["schema_version"].as_i64().is_some_and(|n| n > 0), "{v}");
        assert_eq!(v["json_schema_version"], 1);
        assert_eq!(v["state"], "unknown");
        let e = &v["effects"];
        assert_eq!(e.as_array().map(Vec::len), Some(1), "{v}");
        assert_eq!(e[0]["effect_key"], key.as_str());
        assert_eq!(e[0]["job_key"], "payroll");
        assert_eq!(e[0]["terms_shown"], "pay bob 10");
        let age = e[0]["age_s"].as_i64().expect("age_s");
        assert!((7200..7300).contains(&age), "{v}");
        assert!(e[0]["since"].is_string() && e[0]["created_at"].is_string(), "{v}");

        // The other states, and a job that has none.
        let v = json(&site, &["effects", "--state", "done", "--json"]);
        assert_eq!(v["effects"].as_array().map(Vec::len), Some(1), "{v}");
        let v = json(&site, &["effects", "--state", "unknown", "--job", "other", "--json"]);
        assert_eq!(v["effects"].as_array().map(Vec::len), Some(0), "{v}");
        let (code, _, err) = site.exactly(&["effects", "--state", "lost"]);
        assert_eq!(code, 2, "a state that is not the ledger's: {err}");
    }

    #[test]
    fn jobs_lists_each_job_with_its_schedule_last_run_lease_and_state() {
        let site = Site::new();
        site.write_jobs(&format!(
            "[[job]]\nname = \"broken\"\nevery = \"1s\"\nlease = \"900ms\"\n\
             overlap = \"coalesce\"\ncommand = {}\n\n\
             [[job]]\nname = \"fine\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
             command = {}\n",
            sh("exit 3"),
            sh("true")
        ));
        let mut sched = site.start("s", "5s");
        let state = |v: &Value, job: &str| {
            v["jobs"]
                .as_array()
                .and_then(|js| js.iter().find(|j| j["job_key"] == job))
                .map(|j| j["state"].clone())
        };
        let mut v = Value::Null;
        assert!(
            wait_until(Duration::from_secs(20), || {
                // Until the scheduler made the schema, `jobs` refuses the database.
                let (code, out, _) = site.exactly(&["jobs", "--json"]);
                v = if code == 0 {
                    serde_json::from_str(&out).unwrap_or(Value::Null)
                } else {
                    Value::Null
                };
                state(&v, "broken") == Some("failing".into())
                    && state(&v, "fine") == Some("ok".into())
            }),
            "{v}\n{}",
            site.log("s")
        );
        assert_eq!(sched.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        site.claim("manual", "1h");
        let (code, _, err) = site.exactly(&["pause", "fine"]);
        assert_eq!(code, 0, "{err}");

        let v = json(&site, &["jobs", "--json"]);
        assert!(v["schema_version"].as_i64().is_some_and(|n| n > 0), "{v}");
        assert_eq!(v["json_schema_version"], 1);
        let job = |name: &str| {
            v["jobs"]
                .as_array()
                .and_then(|js| js.iter().find(|j| j["job_key"] == name))
                .unwrap_or_else(|| panic!("{name} in {v}"))
                .clone()
        };
        let broken = job("broken");
        assert_eq!(broken["schedule"], "every 1s");
        assert_eq!(broken["failing"], true);
        assert_eq!(broken["state"], "failing");
        assert_eq!(broken["last_run"]["outcome"], "failed");
        assert_eq!(broken["last_run"]["exit_code"], 3);
        assert!(broken["last_success_at"].is_null(), "{broken}");
        assert!(broken["next_fire_at"].is_string(), "{broken}");
        let fine = job("fine");
        assert_eq!(fine["state"], "paused");
        assert_eq!(fine["paused"], true);
        assert_eq!(fine["failing"], false);
        assert!(fine["last_success_at"].is_string(), "{fine}");
        let manual = job("manual");
        assert!(manual["schedule"].is_null(), "{manual}");
        assert!(manual["lease_owner"].is_string(), "{manual}");
        assert!(manual["lease_until"].is_string(), "{manual}");

        let (code, text, err) = site.exactly(&["jobs"]);
        assert_eq!(code, 0, "{err}");
        let line = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} in {text}"))
                .to_string()
        };
        assert!(text.starts_with("JOB "), "{text}");
        let b = line("broken");
        assert!(b.contains("every 1s") && b.contains("failed") && b.contains("failing"), "{b}");
        assert!(line("fine").contains("paused"), "{text}");
        assert!(!line("manual").contains("free"), "the lease holder is shown: {text}");
    }
}

/// One count of registered jobs: a job in the jobs file, not retired, paused or not. `status
/// --check`, its perfdata, `status`'s warning and `exactly_jobs_registered` all say 2 with one of
/// the two paused, and say the paused one. (Before, `status --check` said 1 where the warning and
/// the metric said 2.)
#[test]
fn every_output_counts_registered_jobs_alike_and_says_the_paused() {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"a\"\nevery = \"1h\"\nlease = \"1m\"\noverlap = \"coalesce\"\n\
         command = {c}\n\n[[job]]\nname = \"b\"\nevery = \"1h\"\nlease = \"1m\"\n\
         overlap = \"coalesce\"\ncommand = {c}\n",
        c = sh("true")
    ));
    let mut sched = site.start("s", "5s");
    assert!(
        wait_until(Duration::from_secs(20), || site
            .count("SELECT count(*) FROM exactly_jobs")
            == 2),
        "{}",
        site.log("s")
    );
    let (code, _, err) = site.exactly(&["pause", "b"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        sched.term(Duration::from_secs(15)),
        Some(0),
        "{}",
        site.log("s")
    );
    let (code, out, _) = site.exactly(&["status", "--check"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.starts_with("EXACTLY CRITICAL - no scheduler alive (2 jobs registered, 1 paused)"),
        "{out}"
    );
    assert!(out.contains("jobs_registered=2 "), "{out}");
    assert_eq!(scrape(&site).get("exactly_jobs_registered"), Some(&2.0));
    let (_, status, _) = site.exactly(&["status"]);
    assert!(
        status.contains("2 jobs registered (1 paused) are not firing"),
        "{status}"
    );
}

/// `status` lists the live schedulers and folds the ended ones into one line (how many, stopped
/// or dead, and the last); `--json` keeps every one. (Before, one row per scheduler that ever
/// ran: 23 rows after 22 restarts.)
#[test]
fn status_folds_ended_schedulers_into_one_line_and_json_keeps_them_all() {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"a\"\nevery = \"1h\"\nlease = \"1m\"\noverlap = \"coalesce\"\n\
         command = {}\n",
        sh("true")
    ));
    let alive = || {
        site.db_exists() && json(&site, &["status", "--json"])["totals"]["schedulers_alive"] == 1
    };
    for i in 0..3 {
        let mut s = site.start(&format!("old{i}"), "5s");
        assert!(
            wait_until(Duration::from_secs(20), alive),
            "{}",
            site.log(&format!("old{i}"))
        );
        assert_eq!(s.term(Duration::from_secs(15)), Some(0));
    }
    let mut live = site.start("live", "5s");
    assert!(
        wait_until(Duration::from_secs(20), alive),
        "{}",
        site.log("live")
    );
    let (code, text, err) = site.exactly(&["status"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("SCHEDULER"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(
        rows.len(),
        2,
        "the live one, then one line for the ended:\n{text}"
    );
    assert!(rows[0].contains("alive"), "{text}");
    assert!(
        rows[1].starts_with("3 ended (3 stopped), the last ") && rows[1].contains("old2"),
        "{text}"
    );
    let v = json(&site, &["status", "--json"]);
    assert_eq!(v["schedulers"].as_array().map(Vec::len), Some(4), "{v:#}");
    assert_eq!(live.term(Duration::from_secs(15)), Some(0));
}

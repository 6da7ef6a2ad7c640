//! The operator's truth, with real processes on real files: a killed scheduler is shown dead,
//! a failing job is counted and flagged, a run's output is readable (`logs`), `gc` keeps what
//! must stay, and read commands change no byte of any file.
use crate::support;

use exactly::effect::{self, Ctx, Effect, Failure, Observation, Outcome, Spec};
use exactly::state::RunOutcome;
use exactly::{firing, jobs, lease};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::runner::*;

fn status(site: &Site, env: &[(&str, &str)]) -> Value {
    let out = Command::new(bin())
        .args(["--db", &site.db(), "status", "--json"])
        .envs(env.iter().copied())
        .output()
        .expect("run status");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

fn job<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job_key"] == name)
        .unwrap_or_else(|| panic!("job {name} in {v}"))
}

/// A metric's value from `exactly metrics` (the first sample whose name and labels start so).
fn metric(site: &Site, prefix: &str) -> Option<f64> {
    metric_with(site, prefix, &[])
}

fn metric_with(site: &Site, prefix: &str, env: &[(&str, &str)]) -> Option<f64> {
    let out = Command::new(bin())
        .args(["--db", &site.db(), "metrics"])
        .envs(env.iter().copied())
        .output()
        .expect("run metrics");
    assert_eq!(out.status.code(), Some(0));
    let out = String::from_utf8_lossy(&out.stdout);
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(prefix))
        .map(|l| {
            l.rsplit(' ')
                .next()
                .expect("value")
                .parse()
                .expect("number")
        })
}

/// One value read with plain SQL; an error fails the test (never a silent 0).
fn sql_i64(site: &Site, sql: &str) -> i64 {
    site.conn()
        .query_row(sql, [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn sha(path: &Path) -> String {
    hex(&Sha256::digest(std::fs::read(path).expect("read file")))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn a_killed_scheduler_is_shown_dead_within_the_window_and_a_stopped_one_at_once() {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
         command = {}\n",
        sh("true")
    ));
    let mut sched = site.start("alpha", "5s");
    assert!(
        wait_until(Duration::from_secs(15), || site.exists("exactly.db")
            && runs_table(&site)
            && status(&site, &[])["totals"]["schedulers_alive"] == 1),
        "the scheduler never showed alive: {}",
        site.log("alpha")
    );
    let v = status(&site, &[]);
    let s = &v["schedulers"][0];
    assert_eq!(s["owner"], "alpha");
    assert_eq!(s["alive"], true);
    assert_eq!(s["pid"], sched.child.id() as i64);
    assert!(s["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert!(s["started_at"].is_string() && s["heartbeat_at"].is_string());
    assert!(
        v["warnings"].as_array().expect("warnings").is_empty(),
        "{v}"
    );

    // SIGKILL: no goodbye. With a 3 s window it must show dead within ~3 s (+ one 2 s beat).
    let window = [("EXACTLY_SCHEDULER_DEAD_AFTER", "3s")];
    sched.kill9();
    let killed = Instant::now();
    assert!(
        wait_until(Duration::from_secs(8), || status(&site, &window)["totals"]
            ["schedulers_alive"]
            == 0),
        "a SIGKILLed scheduler still shows alive"
    );
    let took = killed.elapsed();
    assert!(took <= Duration::from_secs(6), "shown dead after {took:?}");
    let v = status(&site, &window);
    assert_eq!(v["schedulers"][0]["alive"], false);
    let warnings = v["warnings"].as_array().expect("warnings");
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("scheduler"))),
        "no warning about the scheduler: {v}"
    );
    // Text and metrics say the same.
    let out = Command::new(bin())
        .args(["--db", &site.db(), "status"])
        .envs(window)
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("! no scheduler alive"), "{text}");
    assert!(text.contains("DEAD"), "{text}");
    assert_eq!(
        metric_with(&site, "exactly_schedulers_alive ", &window),
        Some(0.0)
    );

    // A clean stop records its end: not alive at once, not a death either.
    let mut sched = site.start("beta", "5s");
    assert!(wait_until(Duration::from_secs(10), || {
        status(&site, &window)["schedulers"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["owner"] == "beta" && s["alive"] == true))
    }));
    assert_eq!(sched.term(Duration::from_secs(10)), Some(0));
    let v = status(&site, &window);
    let beta = v["schedulers"]
        .as_array()
        .expect("schedulers")
        .iter()
        .find(|s| s["owner"] == "beta")
        .expect("beta listed")
        .clone();
    assert_eq!(beta["alive"], false, "{v}");
    assert_eq!(v["totals"]["schedulers_alive"], 0);
    assert!(
        sql_i64(
            &site,
            "SELECT count(*) FROM exactly_schedulers WHERE owner = 'beta' AND ended_at IS NOT NULL"
        ) == 1
    );
}

#[test]
fn a_failing_job_is_counted_flagged_and_its_next_firing_known() {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"broken\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
         command = {}\n\
         [[job]]\nname = \"daily\"\nschedule = \"0 7 * * *\"\ntimezone = \"Asia/Kolkata\"\n\
         lease = \"5m\"\noverlap = \"coalesce\"\ncommand = {}\n",
        sh("echo trying; exit 3"),
        sh("true")
    ));
    let mut sched = site.start("s1", "5s");
    assert!(
        wait_until(Duration::from_secs(20), || site.exists("exactly.db")
            && runs_table(&site)
            && status(&site, &[])["jobs"]
                .as_array()
                .and_then(|j| j.iter().find(|j| j["job_key"] == "broken"))
                .is_some_and(|j| j["runs_failed"].as_u64().unwrap_or(0) >= 3)),
        "no failed runs counted: {}",
        site.log("s1")
    );
    let v = status(&site, &[]);
    let b = job(&v, "broken");
    let last = &b["last_run"];
    assert_eq!(last["outcome"], "failed", "{b}");
    assert_eq!(last["exit_code"], 3);
    assert!(last["run_id"].is_string() && last["started_at"].is_string());
    assert!(last["duration_ms"].is_i64());
    assert!(b["last_success_at"].is_null());
    assert!(
        b["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("failed"))),
        "{b}"
    );
    // The next firing comes after the last one fired.
    let next = b["next_fire_at"].as_str().expect("next_fire_at");
    assert!(next > last["scheduled_at"].as_str().expect("slot"), "{b}");
    // Cron in a time zone: 07:00 in Kolkata (UTC+5:30) is 01:30 UTC.
    let d = job(&v, "daily");
    let next = d["next_fire_at"].as_str().expect("cron next_fire_at");
    assert!(next.ends_with("T01:30:00.000Z"), "{next}");
    let taken = v["taken_at"].as_str().expect("taken_at");
    assert!(next > taken, "{next} after {taken}");
    let failed_runs = sql_i64(
        &site,
        "SELECT count(*) FROM exactly_runs WHERE job_key = 'broken' AND outcome = 'failed'",
    );
    let counted = metric(
        &site,
        "exactly_job_runs_total{exactly_job=\"broken\",outcome=\"failed\"}",
    )
    .expect("runs_total for broken/failed");
    assert!(
        counted >= 3.0 && counted <= failed_runs as f64 + 2.0,
        "{counted} vs {failed_runs}"
    );
    assert!(metric(
        &site,
        "exactly_job_next_fire_timestamp_seconds{exactly_job=\"daily\"}"
    )
    .is_some());
    // A job that never succeeded has the series, at 0, so an alert on it can fire.
    assert_eq!(
        metric(
            &site,
            "exactly_job_last_success_timestamp_seconds{exactly_job=\"broken\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        metric(
            &site,
            "exactly_job_runs_total{exactly_job=\"broken\",outcome=\"ok\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        metric(
            &site,
            "exactly_job_missed_firings_total{exactly_job=\"broken\"}"
        ),
        Some(0.0)
    );
    assert_eq!(sched.term(Duration::from_secs(10)), Some(0));
}

#[test]
fn logs_prints_both_streams_sanitised_and_follows_a_running_run() {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"talker\"\nevery = \"1s\"\nlease = \"900ms\"\noverlap = \"coalesce\"\n\
         command = {}\n",
        sh("echo to-stdout; echo to-stderr >&2; printf 'evil \\033]0;pwned\\007 end\\n'; exit 0")
    ));
    // No run yet: a clear refusal.
    let (code, _, err) = site.exactly(&["init"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = site.exactly(&["logs", "talker"]);
    assert_eq!(code, 1);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let mut sched = site.start("s1", "5s");
    assert!(
        wait_until(Duration::from_secs(15), || sql_i64(
            &site,
            "SELECT count(*) FROM exactly_runs WHERE job_key = 'talker' AND ended_at IS NOT NULL"
        ) >= 1),
        "no run ended: {}",
        site.log("s1")
    );
    let (code, out, err) = site.exactly(&["logs", "talker"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("to-stdout"), "{out}");
    assert!(out.contains("to-stderr"), "{out}");
    assert!(out.contains("evil") && out.contains("end"), "{out}");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(err.contains("ok (exit 0)"), "{err}");
    let run_id =
        site.strings("SELECT run_id FROM exactly_runs WHERE job_key = 'talker'")[0].clone();
    let (code, by_id, _) = site.exactly(&["logs", "talker", "--run", &run_id]);
    assert_eq!(code, 0);
    assert_eq!(by_id, out);
    let (code, _, err) = site.exactly(&["logs", "talker", "--run", "no-such-run"]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(sched.term(Duration::from_secs(10)), Some(0));

    // --follow prints a running run's output as it comes, before the run ends.
    site.write_jobs(&format!(
        "[[job]]\nname = \"slow\"\nevery = \"1h\"\nlease = \"1m\"\noverlap = \"coalesce\"\n\
         command = {}\n",
        sh("for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 0.5; done")
    ));
    // Registered by a scheduler, then fired by hand (the run happens in `trigger` itself).
    let mut sched = site.start("s2", "5s");
    assert!(wait_until(Duration::from_secs(10), || sql_i64(
        &site,
        "SELECT count(*) FROM exactly_jobs WHERE job_key = 'slow'"
    ) == 1));
    assert_eq!(sched.term(Duration::from_secs(10)), Some(0));
    let mut trigger = Command::new(bin())
        .args(["--db", &site.db(), "trigger", "slow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("trigger");
    let mut follower = Command::new(bin())
        .args(["--db", &site.db(), "logs", "slow", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("logs --follow");
    let mut lines = BufReader::new(follower.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let started = Instant::now();
    for line in lines.by_ref() {
        let line = line.expect("line");
        seen.push(line.clone());
        if line == "tick 3" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{seen:?}");
    }
    // The run was still going when its third line arrived.
    let running = sql_i64(
        &site,
        "SELECT count(*) FROM exactly_runs WHERE job_key = 'slow' AND ended_at IS NULL",
    );
    assert_eq!(running, 1, "tick 3 came only after the run ended: {seen:?}");
    assert_eq!(seen, vec!["tick 1", "tick 2", "tick 3"]);
    for line in lines.by_ref() {
        let line = line.expect("line");
        seen.push(line.clone());
        if line == "tick 8" {
            break;
        }
    }
    assert_eq!(seen.len(), 8, "each line once: {seen:?}");
    let _ = follower.kill();
    let _ = follower.wait();
    assert_eq!(trigger.wait().expect("trigger").code(), Some(0));
}

/// Long ago: 2020-01-01, plus `mins` minutes.
fn long_ago(mins: i64) -> exactly::time::Ts {
    exactly::time::parse("2020-01-01T00:00:00.000Z").expect("instant")
        + chrono::Duration::minutes(mins)
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

/// `n` firings of `job` written long ago through the library (each a minute apart, as at its
/// own instant), each run ending `ok`; `each(store, token, run_id, at)` runs inside each run.
fn old_runs(
    site: &Site,
    job: &str,
    n: i64,
    mut each: impl FnMut(&mut exactly::Store, i64, &str, exactly::time::Ts),
) {
    let mut s = exactly::Store::open(&site.db()).expect("open");
    for i in 0..n {
        let at = long_ago(i);
        let (slot, until) = (exactly::time::fmt(at), exactly::time::fmt(long_ago(i + 1)));
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
        each(&mut s, run.token.get(), &run.run_id, at);
        let end = jobs::RunEnd {
            job,
            run_id: &run.run_id,
            slot: &slot,
            token: run.token.get(),
            outcome: RunOutcome::Ok,
            exit_code: Some(0),
            duration_ms: 1000,
            start_lag_ms: None,
            renewal_gap_ms: None,
            log: "",
        };
        s.as_at(at + chrono::Duration::seconds(1), |s| {
            jobs::finish_run(s, &end)
        })
        .expect("finish");
    }
}

/// A year and more of history, every row written long ago through the library with a pinned
/// clock: a scheduler's row, runs of `pay` each sending one effect keyed by its slot (done)
/// then a duplicate, and by hand an unknown effect, a pending approval, a fenced write and a
/// held lease.
fn old_history(site: &Site) {
    let mut s = exactly::Store::open(&site.db()).expect("open");
    let reg = jobs::SchedulerReg {
        owner: "s0@old-host:1",
        host: "old-host",
        pid: 1,
        source: "jobs.toml",
        host_id: "old-boot/1",
    };
    s.pin_clock(Some(long_ago(0)));
    jobs::scheduler_started(&mut s, &reg).expect("scheduler");
    drop(s);
    old_runs(site, "pay", 5, |s, token, run_id, at| {
        let spec = Spec::new("pay", "acme").input("slot", exactly::time::fmt(at));
        let ctx = Ctx::new(&exactly::JobName::from("pay"), exactly::Token::from(token))
            .with_run_id(run_id)
            .at(at);
        let first = effect::run(s, &ctx, &spec, &mut Answer(Ok("paid".into()))).expect("effect");
        assert!(matches!(first, Outcome::Done { .. }), "{first:?}");
        let again = effect::run(s, &ctx, &spec, &mut Answer(Ok("paid".into()))).expect("effect");
        assert!(
            matches!(again, Outcome::DuplicateSuppressed { .. }),
            "{again:?}"
        );
    });
    let mut s = exactly::Store::open(&site.db()).expect("open");
    let at = long_ago(60);
    let token = match lease::claim_until(
        &mut s,
        &exactly::JobName::from("manual"),
        "me@old-host:2",
        long_ago(120),
        at,
    )
    .expect("claim")
    {
        lease::Claim::Won { token } => token,
        held => panic!("{held:?}"),
    };
    let ctx = Ctx::new(&exactly::JobName::from("manual"), token).at(at);
    let lost = Failure::Lost("exit 9".into());
    let out = effect::run(
        &mut s,
        &ctx,
        &Spec::new("a", "lost"),
        &mut Answer(Err(lost)),
    )
    .expect("effect");
    assert!(matches!(out, Outcome::Unknown { .. }), "{out:?}");
    let ask = Spec::new("a", "ask").needs_approval(true);
    let out = effect::run(&mut s, &ctx, &ask, &mut Answer(Ok("sent".into()))).expect("effect");
    assert!(matches!(out, Outcome::AwaitingApproval { .. }), "{out:?}");
    let stale = Ctx::new(&exactly::JobName::from("manual"), exactly::Token::from(0)).at(at);
    let out = effect::run(
        &mut s,
        &stale,
        &Spec::new("a", "stale"),
        &mut Answer(Ok("sent".into())),
    )
    .expect("effect");
    assert!(matches!(out, Outcome::Fenced { .. }), "{out:?}");
}

/// What must not change when history is pruned.
fn kept_totals(site: &Site) -> Value {
    let v = status(site, &[]);
    let mut jobs = serde_json::Map::new();
    for j in v["jobs"].as_array().expect("jobs") {
        jobs.insert(
            j["job_key"].as_str().expect("key").to_string(),
            serde_json::json!({
                "runs_by_outcome": j["runs_by_outcome"],
                "missed_firings": j["missed_firings"],
                "fencing_token": j["fencing_token"],
                "duplicates_suppressed": j["duplicates_suppressed"],
                "fenced_writes": j["fenced_writes"],
                "last_run": j["last_run"]["run_id"],
            }),
        );
    }
    serde_json::json!({ "totals": v["totals"], "missed": v["missed_firings"], "jobs": jobs,
        "unknown": v["unknown"].as_array().expect("unknown").len(),
        "pending": v["pending_approvals"].as_array().expect("pending").len() })
}

#[test]
fn gc_prunes_history_but_keeps_open_effects_approvals_leases_and_totals() {
    let site = Site::new();
    old_history(&site);
    let unknown_key = site.strings("SELECT effect_key FROM effect_ledger WHERE state = 'unknown'");
    assert_eq!(unknown_key.len(), 1);
    let before = kept_totals(&site);
    let runs = sql_i64(&site, "SELECT count(*) FROM exactly_runs");
    let events = sql_i64(&site, "SELECT count(*) FROM exactly_events");
    let done = sql_i64(
        &site,
        "SELECT count(*) FROM effect_ledger WHERE state = 'done'",
    );
    assert!(runs >= 4 && done >= 4, "runs {runs}, done {done}");

    // A dry run counts and deletes nothing.
    let (code, out, err) = site.exactly(&["gc", "--keep", "30d", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{err}");
    let dry: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(dry["runs"], runs - 1, "all but the job's latest run: {dry}");
    assert!(dry["events"].as_i64().expect("events") > 0);
    assert_eq!(sql_i64(&site, "SELECT count(*) FROM exactly_runs"), runs);
    assert_eq!(
        sql_i64(&site, "SELECT count(*) FROM exactly_events"),
        events
    );

    let (code, out, err) = site.exactly(&["gc", "--keep", "30d"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("deleted"), "{out}");
    assert_eq!(
        sql_i64(&site, "SELECT count(*) FROM exactly_runs"),
        1,
        "the latest run stays"
    );
    assert_eq!(
        sql_i64(&site, "SELECT count(*) FROM exactly_schedulers"),
        0,
        "a scheduler silent since the horizon is forgotten"
    );
    assert_eq!(
        sql_i64(
            &site,
            "SELECT count(*) FROM effect_ledger WHERE state = 'done'"
        ),
        done,
        "effects are the dedupe memory: kept without --effects"
    );
    // Events of the open effect and the pending approval stay: they are the operator's evidence.
    let open_events = sql_i64(
        &site,
        &format!(
            "SELECT count(*) FROM exactly_events WHERE effect_key = '{}'",
            unknown_key[0]
        ),
    );
    assert!(open_events > 0);
    assert!(
        sql_i64(&site, "SELECT count(*) FROM exactly_events") < events,
        "old events were pruned"
    );
    assert_eq!(kept_totals(&site), before, "totals changed by gc");

    // --effects deletes settled effects only; open ones, approvals and leases stay.
    let (code, out, err) = site.exactly(&["gc", "--keep", "30d", "--effects"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("{done} done effect(s)")), "{out}");
    assert_eq!(
        sql_i64(
            &site,
            "SELECT count(*) FROM effect_ledger WHERE state = 'done'"
        ),
        0
    );
    assert_eq!(
        sql_i64(
            &site,
            "SELECT count(*) FROM effect_ledger WHERE state = 'unknown'"
        ),
        1
    );
    assert_eq!(
        sql_i64(
            &site,
            "SELECT count(*) FROM exactly_approvals WHERE state = 'pending'"
        ),
        1
    );
    assert_eq!(sql_i64(&site, "SELECT count(*) FROM job_lease"), 2);
    assert_eq!(kept_totals(&site), before, "totals changed by gc --effects");
    // Bad input: one line, exit 2.
    let (code, _, err) = site.exactly(&["gc", "--keep", "1h"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn retain_in_the_jobs_file_makes_run_prune_on_its_own() {
    let site = Site::new();
    let jobs = |retain: &str| {
        format!(
            "{retain}[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"900ms\"\n\
             overlap = \"coalesce\"\ncommand = {}\n",
            sh("true")
        )
    };
    site.write_jobs(&jobs(""));
    let mut sched = site.start("s1", "5s");
    assert!(wait_until(Duration::from_secs(20), || site
        .exists("exactly.db")
        && runs_table(&site)
        && sql_i64(
            &site,
            "SELECT count(*) FROM exactly_runs WHERE ended_at IS NOT NULL"
        ) >= 3));
    assert_eq!(sched.term(Duration::from_secs(10)), Some(0));
    // Older runs of the same job, written long ago through the library.
    old_runs(&site, "tick", 3, |_, _, _, _| {});
    let old = sql_i64(
        &site,
        "SELECT count(*) FROM exactly_runs WHERE started_at < '2021'",
    );
    assert_eq!(old, 3);
    // Off by default: a scheduler without `retain` keeps everything.
    let mut sched = site.start("s2", "5s");
    // A window in which a scheduler with `retain` would have pruned them, on purpose.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(sched.term(Duration::from_secs(10)), Some(0));
    assert_eq!(
        sql_i64(
            &site,
            "SELECT count(*) FROM exactly_runs WHERE started_at < '2021'"
        ),
        old
    );
    site.write_jobs(&jobs("retain = \"90d\"\n"));
    let (_, out, err) = site.exactly(&["check", &site.jobs()]);
    assert!(
        !out.contains("retain") && !err.contains("retain"),
        "{out}{err}"
    );
    let mut sched = site.start("s3", "5s");
    assert!(
        wait_until(Duration::from_secs(15), || sql_i64(
            &site,
            "SELECT count(*) FROM exactly_runs WHERE started_at < '2021'"
        ) == 0),
        "retain did not prune: {}",
        site.log("s3")
    );
    assert_eq!(sched.term(Duration::from_secs(10)), Some(0));
    site.write_jobs(&jobs("retain = \"soon\"\n"));
    let (code, out, _) = site.exactly(&["check", &site.jobs()]);
    assert_eq!(code, 1);
    assert!(out.contains("retain"), "{out}");
}

/// Runs a read command on `path`; asserts exit 1 with one line and returns stderr.
fn refused(path: &Path, args: &[&str]) -> String {
    let out = Command::new(bin())
        .arg("--db")
        .arg(path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run exactly");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn side_files(path: &Path) -> Vec<String> {
    ["-wal", "-shm", "-journal"]
        .iter()
        .map(|s| format!("{}{s}", path.display()))
        .filter(|p| Path::new(p).exists())
        .collect()
}

const READERS: &[&[&str]] = &[
    &["status"],
    &["status", "--json"],
    &["metrics"],
    &["top"],
    &["logs", "some-job"],
];

#[test]
fn read_commands_never_create_or_change_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A mistyped path: refused, and not created.
    let typo = dir.path().join("exactyl.db");
    for args in READERS {
        let err = refused(&typo, args);
        assert!(err.contains("does not exist"), "{err}");
        assert!(!typo.exists(), "{args:?} created {typo:?}");
        assert!(side_files(&typo).is_empty());
    }
    // Another application's SQLite files, in rollback-journal and in WAL mode.
    for (name, wal) in [("app.db", false), ("app-wal.db", true)] {
        let app = dir.path().join(name);
        {
            let c = rusqlite::Connection::open(&app).expect("open app db");
            if wal {
                c.pragma_update(None, "journal_mode", "WAL").expect("wal");
            }
            c.execute_batch(
                "PRAGMA user_version = 7; CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT);
                 INSERT INTO notes (body) VALUES ('keep me');",
            )
            .expect("app schema");
        }
        assert!(
            side_files(&app).is_empty(),
            "closing the app left {:?}",
            side_files(&app)
        );
        let before = sha(&app);
        for args in READERS {
            let err = refused(&app, args);
            assert!(err.contains("no exactly tables"), "{err}");
            assert_eq!(sha(&app), before, "{args:?} changed {name}");
            assert!(
                side_files(&app).is_empty(),
                "{args:?} created {:?}",
                side_files(&app)
            );
        }
    }
    // exactly's own database: read, and its main file not changed.
    let ours = dir.path().join("exactly.db");
    let out = Command::new(bin())
        .arg("--db")
        .arg(&ours)
        .arg("init")
        .output()
        .expect("init");
    assert_eq!(out.status.code(), Some(0));
    let before = sha(&ours);
    for args in [&["status", "--json"][..], &["metrics"]] {
        let out = Command::new(bin())
            .arg("--db")
            .arg(&ours)
            .args(args)
            .output()
            .expect("read");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(sha(&ours), before, "{args:?} changed the database");
    }
    // An empty path and an in-memory database are refused everywhere.
    for db in ["", ":memory:"] {
        for args in [&["status"][..], &["init"]] {
            let out = Command::new(bin())
                .args(["--db", db])
                .args(args)
                .output()
                .expect("run");
            assert_eq!(out.status.code(), Some(2), "{db:?} {args:?}");
        }
    }
}

/// A database of schema version 1 (no schedulers table, no run counters) is read as it is by
/// read commands, byte for byte untouched; the first writer upgrades it and counts the runs it
/// already holds once, and each later outcome once.
#[test]
fn an_older_database_is_read_as_it_is_and_upgraded_by_a_writer() {
    let site = Site::new();
    let (code, _, err) = site.exactly(&["init"]);
    assert_eq!(code, 0, "{err}");
    {
        let c = site.conn();
        c.execute_batch(
            "DROP TRIGGER exactly_runs_ended_insert; DROP TRIGGER exactly_runs_ended_update;
             DROP TABLE exactly_schedulers; PRAGMA user_version = 1;
             DROP INDEX exactly_firings_by_state;
             CREATE INDEX exactly_firings_state ON exactly_firings (job_key, state, scheduled_at);
             INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, overlap, updated_at)
               VALUES ('old', 'every 1h', 3600, 60, 'coalesce', '2026-01-01T00:00:00.000Z');
             INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
             started_at, ended_at, outcome, duration_ms, exit_code)
               VALUES ('r1', 'old', '2026-01-01T00:00:00.000Z', 'o', 1, \
               '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z', 'ok', 1000, 0),
                      ('r2', 'old', '2026-01-01T01:00:00.000Z', 'o', 2, \
                      '2026-01-01T01:00:00.000Z', '2026-01-01T01:00:01.000Z', 'ok', 1000, 0),
                      ('r3', 'old', '2026-01-01T02:00:00.000Z', 'o', 3, \
                      '2026-01-01T02:00:00.000Z', '2026-01-01T02:00:01.000Z', 'failed', 1000, 3),
                      ('r4', 'old', '2026-01-01T03:00:00.000Z', 'o', 4, \
                      '2026-01-01T03:00:00.000Z', NULL, NULL, NULL, NULL);",
        )
        .expect("make it a version-1 database");
        assert!(c
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .is_ok());
    }
    let db = std::path::PathBuf::from(site.db());
    let before = sha(&db);
    let v = status(&site, &[]);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["schedulers"].as_array().map(Vec::len), Some(0));
    assert_eq!(job(&v, "old")["last_run"]["run_id"], "r4");
    assert_eq!(
        sha(&db),
        before,
        "a read command changed a version-1 database"
    );
    let (code, _, err) = site.exactly(&["init"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        sql_i64(&site, "PRAGMA user_version"),
        exactly::SCHEMA_VERSION
    );
    // Version 3 replaced the firings' (job, state) index by a (state, job) one.
    assert_eq!(
        sql_i64(
            &site,
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = \
             'exactly_firings_state'"
        ),
        0,
        "the replaced index is dropped"
    );
    assert_eq!(
        sql_i64(
            &site,
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = \
             'exactly_firings_by_state'"
        ),
        1
    );
    let v = status(&site, &[]);
    assert_eq!(
        job(&v, "old")["runs_by_outcome"],
        serde_json::json!({"ok": 2, "failed": 1}),
        "runs ended before the upgrade are counted once"
    );
    // r4 ends now: counted once, and a later rewrite of its outcome is not a second run.
    let c = site.conn();
    c.execute(
        "UPDATE exactly_runs SET outcome = 'timeout', ended_at = '2026-01-01T03:10:00.000Z' WHERE \
         run_id = 'r4'",
        [],
    )
    .expect("end r4");
    c.execute(
        "UPDATE exactly_runs SET outcome = 'killed' WHERE run_id = 'r4'",
        [],
    )
    .expect("rewrite r4");
    let v = status(&site, &[]);
    assert_eq!(
        job(&v, "old")["runs_by_outcome"],
        serde_json::json!({"ok": 2, "failed": 1, "timeout": 1})
    );
    let (code, _, err) = site.exactly(&["init"]);
    assert_eq!(code, 0, "{err}");
    let v = status(&site, &[]);
    assert_eq!(
        job(&v, "old")["runs_by_outcome"]["ok"],
        2,
        "a second init counts nothing again"
    );
}

/// Whether a starting scheduler has created its tables yet (the file exists a moment before).
fn runs_table(site: &Site) -> bool {
    sql_i64(
        site,
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'exactly_runs'",
    ) == 1
}

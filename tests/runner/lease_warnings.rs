//! What `status` warns about a job's lease judges what can happen: a run that outlasts a lease
//! the scheduler renews is normal; a late renewal or a lease too short for a stall is not; a
//! duration is the command's own, the scheduler's start lag shown beside it.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::runner::*;

/// One run of a job whose command sleeps 0.3 s, under a scheduler with `EXACTLY_FAULT` set to
/// `fault`: its site, and the run's recorded duration.
fn one_quick_run(fault: &str) -> (Site, i64) {
    let site = Site::new();
    site.write_jobs(
        "[[job]]\nname = \"quick\"\nevery = \"10s\"\nlease = \"8s\"\noverlap = \"coalesce\"\n\
         command = [\"sh\", \"-c\", \"sleep 0.3\"]\n",
    );
    let mut s = site.start_with_env("s", "10s", &[("EXACTLY_FAULT", fault)]);
    assert!(
        wait_until(Duration::from_secs(20), || site.count(
            "SELECT count(*) FROM exactly_runs WHERE outcome IS NOT NULL"
        ) >= 1),
        "the run ended: {}",
        site.log("s")
    );
    assert_eq!(s.term(Duration::from_secs(10)), Some(0));
    let d = site.count(
        "SELECT duration_ms FROM exactly_runs WHERE outcome IS NOT NULL ORDER BY started_at LIMIT 1",
    );
    (site, d)
}

/// `status --json`'s row for `job`.
fn job_json(site: &Site, job: &str) -> serde_json::Value {
    let (code, out, err) = site.exactly(&["status", "--json"]);
    assert_eq!(code, 0, "status --json: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("status --json is JSON");
    v["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .find(|j| j["job_key"] == job)
        .cloned()
        .unwrap_or_else(|| panic!("no job {job} in {out}"))
}

fn warnings(j: &serde_json::Value) -> Vec<String> {
    j["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .map(|w| w.as_str().unwrap_or_default().to_string())
        .collect()
}

on_both_backends! {
    /// A job `exactly run` runs holds a lease its renewer renews every third of it: a run that
    /// outlasts the lease is neither stolen nor a reason to warn.
    #[test]
    fn a_run_outlasting_a_renewed_lease_is_not_warned_about() {
        let site = Site::new();
        site.write_jobs(
            "[[job]]\nname = \"long\"\nevery = \"10s\"\nlease = \"6s\"\noverlap = \"coalesce\"\n\
             command = [\"sh\", \"-c\", \"sleep 7.5\"]\n",
        );
        let mut s = site.start("s", "10s");
        assert!(
            wait_until(Duration::from_secs(30), || site.count(
                "SELECT count(*) FROM exactly_runs WHERE outcome IS NOT NULL"
            ) >= 1),
            "the run ended: {}",
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE outcome <> 'ok'"),
            0,
            "every run outlived its lease and ended by itself"
        );
        assert_eq!(site.counter("lease_stolen"), 0, "no run was stolen");
        let j = job_json(&site, "long");
        assert!(j["p99_ms"].as_u64().unwrap_or(0) > 6000, "{j}");
        let w = warnings(&j);
        assert!(
            !w.iter().any(|w| w.contains("stolen") || w.contains("p99")),
            "a renewed lease outlasted is no warning: {w:?}"
        );
        let (_, text, _) = site.exactly(&["status"]);
        assert!(!text.contains("p99>lease"), "{text}");
        eprintln!(
            "renewed: p99 {} ms over a 6 s lease, warnings {w:?}",
            j["p99_ms"]
        );
    }

    /// A lease shorter than a few of the scheduler's heartbeats leaves its runs so little renewal
    /// margin that an ordinary stall stops them: said, though no run has come near it yet.
    #[test]
    fn a_lease_shorter_than_a_few_heartbeats_warns() {
        let site = Site::new();
        site.write_jobs(
            "[[job]]\nname = \"short\"\nevery = \"1m\"\nlease = \"2s\"\noverlap = \"coalesce\"\ncommand = [\"true\"]\n\
             [[job]]\nname = \"fine\"\nevery = \"1m\"\nlease = \"30s\"\noverlap = \"coalesce\"\ncommand = [\"true\"]\n\
             [[job]]\nname = \"tight\"\nevery = \"3s\"\nlease = \"2s\"\noverlap = \"coalesce\"\ncommand = [\"true\"]\n",
        );
        let mut s = site.start("s", "10s");
        assert!(
            wait_until(Duration::from_secs(10), || site
                .count("SELECT count(*) FROM exactly_jobs")
                == 3),
            "{}",
            site.log("s")
        );
        let w = warnings(&job_json(&site, "short"));
        assert!(
            w.iter().any(|w| w.contains("renewal margin")),
            "a 2 s lease renewed by heartbeat is warned about: {w:?}"
        );
        eprintln!("short lease: {w:?}");
        let fine = warnings(&job_json(&site, "fine"));
        assert!(
            !fine.iter().any(|w| w.contains("renewal")),
            "a 30 s lease is not: {fine:?}"
        );
        // Firing every 3 s, no lease is both 6 s and shorter than the interval: not said.
        let tight = warnings(&job_json(&site, "tight"));
        assert!(
            !tight.iter().any(|w| w.contains("renewal margin")),
            "no lease both long enough and shorter than a 3 s interval: {tight:?}"
        );
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
    }

    /// Renewals that came late (the renewer held up: `EXACTLY_FAULT=heartbeat:pause=…`, a fault
    /// point in the real renewal path) are measured with the run and warned about, though the run
    /// survived them.
    #[test]
    fn late_renewals_are_measured_and_warned_about() {
        let site = Site::new();
        site.write_jobs(
            "[[job]]\nname = \"slow\"\nevery = \"10s\"\nlease = \"9s\"\noverlap = \"coalesce\"\n\
             command = [\"sh\", \"-c\", \"sleep 8\"]\n",
        );
        // Renewals are due every 3 s; each is held up 2.5 s more: gaps of about 5.5 s, under the
        // 8.4 s at which the command would be stopped.
        let mut s = site.start_with_env("s", "10s", &[("EXACTLY_FAULT", "heartbeat:pause=2500ms")]);
        assert!(
            wait_until(Duration::from_secs(30), || site.count(
                "SELECT count(*) FROM exactly_runs WHERE outcome IS NOT NULL"
            ) >= 1),
            "the run ended: {}",
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_runs WHERE outcome <> 'ok'"),
            0
        );
        let j = job_json(&site, "slow");
        let gap = j["renewal_gap_max_ms"].as_u64().unwrap_or(0);
        assert!(
            (5000..8400).contains(&gap),
            "largest renewal gap {gap}: {j}"
        );
        let w = warnings(&j);
        assert!(
            w.iter().any(|w| w.contains("renewal came late")),
            "late renewals are warned about: {w:?}"
        );
        assert!(!w.iter().any(|w| w.contains("stolen")), "{w:?}");
        eprintln!("late renewals: largest gap {gap} ms, warnings {w:?}");
    }

    /// A run's duration is its command's own: the time the scheduler took to start it (here held
    /// up 1.2 s before the spawn by `EXACTLY_FAULT=before_spawn:pause=…`, a fault point in the real
    /// path) is its start lag, reported beside it.
    #[test]
    fn a_runs_duration_excludes_its_start_lag_and_the_lag_is_reported() {
        let (site, d) = one_quick_run("before_spawn:pause=1200ms");
        assert!(
            (300..1000).contains(&d),
            "the command's own duration (it sleeps 0.3 s), not the lag before it: {d} ms"
        );
        let j = job_json(&site, "quick");
        let lag = j["start_lag_p99_ms"].as_u64().unwrap_or(0);
        assert!((1200..3000).contains(&lag), "start lag p99 {lag}: {j}");
        assert!(j["start_lag_p50_ms"].as_u64().unwrap_or(0) >= 1200, "{j}");
        assert!(j["p99_ms"].as_u64().unwrap_or(u64::MAX) < 1000, "{j}");
        let (_, text, _) = site.exactly(&["status"]);
        assert!(text.contains("lag p99"), "status shows the lag: {text}");
        let (code, metrics, err) = site.exactly(&["metrics"]);
        assert_eq!(code, 0, "metrics: {err}");
        let lag_s: f64 = metrics
            .lines()
            .find(|l| l.starts_with("exactly_job_start_lag_p99_seconds{exactly_job=\"quick\"}"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no start lag metric: {metrics}"));
        assert!((1.2..3.0).contains(&lag_s), "{lag_s}");
        eprintln!("lag: duration {d} ms, start lag p99 {lag} ms");
    }

    /// A spawner slow to say it started the command (a loaded machine) does not shorten the
    /// run's duration: it counts from the command's own start, as the spawner read it.
    #[test]
    fn a_spawner_slow_to_answer_does_not_shorten_a_runs_duration() {
        let (_site, d) = one_quick_run("spawner_reply:pause=250ms");
        assert!(
            (300..1000).contains(&d),
            "the command sleeps 0.3 s, counted from its own start: {d} ms"
        );
    }

    /// A cron wrapper holds its job's lease without renewing it (`lease claim`, the work,
    /// `lease release`): holds longer than the lease leave the job to be taken mid-work, and say so.
    #[test]
    fn a_wrapper_holding_a_lease_past_its_length_warns() {
        let site = Site::new();
        assert_eq!(site.exactly(&["init"]).0, 0);
        for _ in 0..3 {
            let token = site.claim("wrapped", "1s");
            std::thread::sleep(Duration::from_millis(1600));
            let (code, _, err) =
                site.exactly(&["lease", "release", "--job", "wrapped", "--token", &token]);
            assert_eq!(code, 0, "release: {err}");
        }
        // A wrapper whose holds end within the lease is fine.
        let token = site.claim("brief", "30s");
        let (code, _, err) = site.exactly(&["lease", "release", "--job", "brief", "--token", &token]);
        assert_eq!(code, 0, "release: {err}");
        let w = warnings(&job_json(&site, "wrapped"));
        assert!(
            w.iter()
                .any(|w| w.contains("p99") && w.contains("nothing renews")),
            "holds past an unrenewed lease are warned about: {w:?}"
        );
        let brief = warnings(&job_json(&site, "brief"));
        assert!(brief.is_empty(), "{brief:?}");
        eprintln!("wrapper: {w:?}");
    }
}

/// A database from before the start lag was measured (schema version 7), read by `status`
/// (read-only, so not upgraded), is read as it is: its durations, no lag.
#[test]
fn a_database_from_before_the_lag_is_read_as_it_is() {
    let site = Site::new();
    assert_eq!(site.exactly(&["init"]).0, 0);
    site.execute(
        "INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, overlap, updated_at)
           VALUES ('old', 'every 1h', 3600, 60, 'coalesce', '2026-01-01T00:00:00.000Z');
         ALTER TABLE exactly_runs DROP COLUMN start_lag_ms;
         ALTER TABLE exactly_runs DROP COLUMN renewal_gap_ms;
         DROP TABLE exactly_holds;
         PRAGMA user_version = 7;",
    );
    let now = chrono::Utc::now() - chrono::Duration::minutes(5);
    let at = now.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    site.execute(&format!(
        "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
         started_at, ended_at, outcome, duration_ms, exit_code)
           VALUES ('r1', 'old', '{at}', 'o', 1, '{at}', '{at}', 'ok', 1500, 0);"
    ));
    let j = job_json(&site, "old");
    assert_eq!(j["p99_ms"], 1500, "{j}");
    assert!(j["start_lag_p99_ms"].is_null(), "{j}");
    assert!(j["last_run"]["start_lag_ms"].is_null(), "{j}");
    let (code, out, err) = site.exactly(&["logs", "old"]);
    assert_eq!(code, 0, "logs on an older database: {err}{out}");
    assert_eq!(
        site.count("PRAGMA user_version"),
        7,
        "a read command left it as it was"
    );
}

//! `[[notify]]`: a notification is an effect of the ledger, keyed by (rule, subject, episode),
//! so it reaches the far side once — across a scheduler killed and started again, across two
//! schedulers on one database — a failed delivery is tried again until it lands (once), an
//! episode's end is told when `recovery = true`, and `exactly watch` notices a scheduler gone.
use crate::on_both_backends;
use crate::support;
use std::time::Duration;
use support::http::Recorder;
use support::runner::*;

/// A job failing every second (until the file `ok` exists), and a notifier of two failures in
/// a row by webhook and by a hook appending each notification to `hook.out`.
fn failing(site: &Site, url: &str, extra: &str) -> String {
    let hook = format!(
        "[\"sh\", \"-c\", {}]",
        toml_str(&format!(
            "cat >> {}; echo >> {}",
            site.path("hook.out").display(),
            site.path("hook.out").display()
        ))
    );
    format!(
        "[[job]]\nname = \"flaky\"\nevery = \"1s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
         command = {}\n\n[[notify]]\nname = \"ops\"\nwebhook = \"{url}/hook\"\nhook = {hook}\n\
         failing_runs = 2\n{extra}",
        sh(&format!("test -f {}", site.path("ok").display()))
    )
}

fn firing(far: &Recorder) -> Vec<support::http::Request> {
    far.delivered()
        .into_iter()
        .filter(|r| r.body.contains("\"state\":\"firing\"") && r.body.contains("failing_runs"))
        .collect()
}

on_both_backends! {
    #[test]
    fn a_notification_is_delivered_once_across_a_scheduler_killed_and_restarted() {
        let site = Site::new();
        let far = Recorder::start();
        site.write_jobs(&failing(&site, &far.url, ""));
        let mut s = site.start("s1", "5s");
        assert!(
            wait_until(Duration::from_secs(15), || !firing(&far).is_empty()),
            "no notification: {:?}\n{}",
            far.requests(),
            site.log("s1")
        );
        // Killed once both channels' sends are counted: a count is written after its channel's
        // `done` row, in a write of its own, and a SIGKILL between the two loses the count (the
        // ledger keeps the send), which the metrics below would then miss; under load that
        // window was hit (seen in CI).
        assert!(
            wait_until(Duration::from_secs(15), || site.counter("notify_sent") >= 2),
            "{}",
            site.log("s1")
        );
        s.kill9();
        let mut again = site.start("s2", "5s");
        // Its notifier takes the lease over once the killed one's lapses, and finds it sent.
        assert!(
            wait_until(Duration::from_secs(20), || {
                site.log("s2").contains("already notified (duplicate suppressed)")
            }),
            "{}",
            site.log("s2")
        );
        assert_eq!(again.term(Duration::from_secs(15)), Some(0), "{}", site.log("s2"));
        let sent = firing(&far);
        assert_eq!(sent.len(), 1, "{sent:?}");
        let body: serde_json::Value = serde_json::from_str(&sent[0].body).expect("JSON body");
        assert_eq!(body["rule"], "failing_runs");
        assert_eq!(body["subject"], "flaky");
        assert!(body["text"].as_str().is_some_and(|t| t.contains("flaky")), "{body}");
        assert_eq!(sent[0].idempotency_key.as_deref(), body["effect_key"].as_str());
        let hooked =
            site.lines("hook.out").into_iter().filter(|l| l.contains("failing_runs")).count();
        assert_eq!(hooked, 1, "the hook ran once");
        assert_eq!(
            site.count(
                "SELECT count(*) FROM effect_ledger WHERE job_key = 'exactly-notify:ops' AND \
                 state = 'done'"
            ),
            2,
            "one done row per channel"
        );
        assert!(site.counter("notify_sent") >= 2);
        // Shown: the events (top's Events view, status --json) and the metrics.
        let (_, status, _) = site.exactly(&["status", "--json"]);
        assert!(status.contains("\"notify_sent\""), "{status}");
        let (_, metrics, _) = site.exactly(&["metrics"]);
        assert!(
            metrics.contains(
                "exactly_notifications_total{notifier=\"ops\",\
                 rule=\"failing_runs\",outcome=\"sent\"} 2"
            ),
            "{metrics}"
        );
    }

    #[test]
    fn two_schedulers_on_one_database_notify_once() {
        let site = Site::new();
        let far = Recorder::start();
        site.write_jobs(&failing(&site, &far.url, ""));
        let mut a = site.start("a", "5s");
        let mut b = site.start("b", "5s");
        assert!(
            wait_until(Duration::from_secs(15), || !firing(&far).is_empty()),
            "no notification: {}\n{}",
            site.log("a"),
            site.log("b")
        );
        // The one that sent stops (releasing its notifier's lease): the other takes over and
        // finds the notification sent.
        let (sender, other, other_name) = if site.log("a").contains("notified ops") {
            (&mut a, &mut b, "b")
        } else {
            (&mut b, &mut a, "a")
        };
        assert_eq!(sender.term(Duration::from_secs(15)), Some(0));
        assert!(
            wait_until(Duration::from_secs(20), || {
                site.log(other_name).contains("already notified (duplicate suppressed)")
            }),
            "{}",
            site.log(other_name)
        );
        assert_eq!(other.term(Duration::from_secs(15)), Some(0));
        assert_eq!(firing(&far).len(), 1, "{:?}", far.requests());
    }

    #[test]
    fn a_failed_webhook_is_tried_again_and_delivered_once() {
        let site = Site::new();
        let far = Recorder::start();
        far.answer(500);
        site.write_jobs(&failing(&site, &far.url, ""));
        let mut s = site.start("s", "5s");
        let tried = || far.requests().iter().filter(|r| r.body.contains("failing_runs")).count();
        assert!(
            wait_until(Duration::from_secs(15), || tried() >= 2),
            "not tried again: {:?}\n{}",
            far.requests(),
            site.log("s")
        );
        far.answer(200);
        assert!(
            wait_until(Duration::from_secs(10), || !firing(&far).is_empty()),
            "{}",
            site.log("s")
        );
        // Every attempt carried one key; the ledger row is done; the failures were recorded.
        let keys: std::collections::BTreeSet<_> =
            far.requests().into_iter().filter_map(|r| r.idempotency_key).collect();
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert!(site.counter("notify_failed") >= 2);
        assert_eq!(s.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        assert_eq!(firing(&far).len(), 1);
    }

    #[test]
    fn the_end_of_an_episode_is_told_once_with_recovery() {
        let site = Site::new();
        let far = Recorder::start();
        site.write_jobs(&failing(&site, &far.url, "recovery = true\n"));
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(15), || !firing(&far).is_empty()),
            "{}",
            site.log("s")
        );
        std::fs::write(site.path("ok"), "").expect("touch ok");
        let recovered = || {
            far.delivered()
                .into_iter()
                .filter(|r| r.body.contains("\"state\":\"recovered\""))
                .count()
        };
        assert!(
            wait_until(Duration::from_secs(10), || recovered() == 1),
            "{:?}\n{}",
            far.requests(),
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        assert_eq!(recovered(), 1);
        assert_eq!(firing(&far).len(), 1);
    }

    #[test]
    fn a_lost_notification_is_unknown_and_sent_again_only_once_resolved() {
        let site = Site::new();
        let out = site.path("hook.out").display().to_string();
        let ok = site.path("hook.ok").display().to_string();
        // The hook fails (exit 1: it may have paged) until hook.ok exists.
        let hook = format!("cat >> {out}; echo >> {out}; test -f {ok}");
        site.write_jobs(&format!(
            "[[job]]\nname = \"flaky\"\nevery = \"1s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             command = [\"false\"]\n\n[[notify]]\nname = \"ops\"\nhook = [\"sh\", \"-c\", {}]\n\
             failing_runs = 2\n",
            toml_str(&hook)
        ));
        let mut s = site.start("s", "5s");
        let row = "SELECT count(*) FROM effect_ledger WHERE job_key = 'exactly-notify:ops' AND \
                   state = ";
        assert!(
            wait_until(Duration::from_secs(15), || site.count(&format!("{row}'unknown'")) == 1),
            "{}",
            site.log("s")
        );
        let key = site.strings(
            "SELECT effect_key FROM effect_ledger WHERE job_key = 'exactly-notify:ops'",
        );
        // Several evaluations later (runs go on every second), still one attempt.
        let runs = site.count("SELECT count(*) FROM exactly_runs WHERE job_key = 'flaky'");
        assert!(wait_until(Duration::from_secs(10), || site.count(
            "SELECT count(*) FROM exactly_runs WHERE job_key = 'flaky'"
        ) >= runs + 4));
        let sent = || site.lines("hook.out").iter().filter(|l| l.contains("failing_runs")).count();
        assert_eq!(sent(), 1, "an unknown notification was sent again");
        std::fs::write(&ok, "").expect("touch hook.ok");
        let (code, o, e) = site.exactly(&["resolve", &key[0], "--not-happened", "--force"]);
        assert_eq!(code, 0, "{o}{e}");
        assert!(
            wait_until(Duration::from_secs(10), || site.count(&format!("{row}'done'")) == 1),
            "{}",
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        assert_eq!(sent(), 2, "one lost attempt, one after the resolution");
    }

    #[test]
    fn watch_notices_a_scheduler_gone() {
        let site = Site::new();
        let far = Recorder::start();
        site.write_jobs(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             command = [\"true\"]\n",
        );
        std::fs::write(
            site.path("watch.toml"),
            format!(
                "[[notify]]\nname = \"pager\"\nwebhook = \"{}/w\"\nscheduler_gone = true\n",
                far.url
            ),
        )
        .expect("write watch.toml");
        let env = [("EXACTLY_SCHEDULER_DEAD_AFTER", "3s")];
        let mut s = site.start_with_env("doomed", "5s", &env);
        assert!(
            wait_until(Duration::from_secs(10), || {
                site.count("SELECT count(*) FROM exactly_runs") > 0
            }),
            "{}",
            site.log("doomed")
        );
        let log = std::fs::File::create(site.path("watch.log")).expect("watch log");
        let mut watch = std::process::Command::new(bin())
            .args(["--db", &site.db(), "watch"])
            .arg(site.path("watch.toml"))
            .envs(env)
            .stderr(log)
            .spawn()
            .expect("start exactly watch");
        s.kill9();
        let gone = || {
            far.delivered()
                .into_iter()
                .filter(|r| r.body.contains("scheduler_gone") && r.body.contains("doomed"))
                .count()
        };
        let ok = wait_until(Duration::from_secs(20), || gone() == 1);
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
        let status = watch.wait().expect("wait for exactly watch");
        let watch_log = support::read_or_empty(&site.path("watch.log"));
        assert!(ok, "{:?}\n{watch_log}", far.requests());
        assert_eq!(status.code(), Some(0), "{watch_log}");
        assert_eq!(gone(), 1);
    }

    #[test]
    fn watch_tells_of_an_old_unknown_effect_and_a_late_firing_once_each() {
        let site = Site::new();
        let far = Recorder::start();
        // A job that ran, then its only scheduler stopped cleanly: its next firing goes late.
        site.write_jobs(
            "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"2s\"\noverlap = \"coalesce\"\n\
             command = [\"true\"]\n",
        );
        let mut s = site.start("s", "5s");
        assert!(
            wait_until(Duration::from_secs(10), || {
                site.count("SELECT count(*) FROM exactly_runs WHERE ended_at IS NOT NULL") > 0
            }),
            "{}",
            site.log("s")
        );
        assert_eq!(s.term(Duration::from_secs(15)), Some(0), "{}", site.log("s"));
        // An effect whose sender failed after it may have sent: unknown.
        let token = site.claim("pay", "1m");
        let (code, _, err) = site.exactly(&[
            "effect", "--job", "pay", "--token", &token, "--action", "charge", "--target", "acme",
            "--", "sh", "-c", "exit 1",
        ]);
        assert_ne!(code, 0, "{err}");
        assert_eq!(
            site.count("SELECT count(*) FROM effect_ledger WHERE state = 'unknown'"),
            1,
            "{err}"
        );
        std::fs::write(
            site.path("watch.toml"),
            format!(
                "[[notify]]\nname = \"w\"\nwebhook = \"{}/w\"\nunknown_older_than = \"1s\"\n\
                 late_by = \"1s\"\n",
                far.url
            ),
        )
        .expect("write watch.toml");
        let log = std::fs::File::create(site.path("watch.log")).expect("watch log");
        let mut watch = std::process::Command::new(bin())
            .args(["--db", &site.db(), "watch"])
            .arg(site.path("watch.toml"))
            .stderr(log)
            .spawn()
            .expect("start exactly watch");
        let told = |rule: &str| {
            far.delivered()
                .into_iter()
                .filter(|r| r.body.contains(&format!("\"rule\":\"{rule}\"")))
                .count()
        };
        let ok = wait_until(Duration::from_secs(15), || {
            told("unknown_older_than") == 1 && told("late_by") == 1
        });
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
        let status = watch.wait().expect("wait for exactly watch");
        let watch_log = support::read_or_empty(&site.path("watch.log"));
        assert!(ok, "{:?}\n{watch_log}", far.requests());
        assert_eq!(status.code(), Some(0), "{watch_log}");
        assert_eq!((told("unknown_older_than"), told("late_by")), (1, 1), "{:?}", far.requests());
        let late =
            far.delivered().into_iter().find(|r| r.body.contains("late_by")).expect("late_by");
        assert!(late.body.contains("\"subject\":\"tick\""), "{}", late.body);
    }

    #[test]
    fn a_pending_approval_is_told_and_its_end_with_recovery() {
        let site = Site::new();
        let far = Recorder::start();
        let token = site.claim("pay", "1m");
        let effect = [
            "effect", "--job", "pay", "--token", &token, "--action", "charge", "--target", "acme",
            "--needs-approval", "--", "true",
        ];
        let (code, _, err) = site.exactly(&effect);
        assert_eq!(code, 4, "{err}");
        std::fs::write(
            site.path("watch.toml"),
            format!(
                "[[notify]]\nname = \"w\"\nwebhook = \"{}/w\"\n\
                 approval_pending_longer_than = \"1s\"\nrecovery = true\n",
                far.url
            ),
        )
        .expect("write watch.toml");
        let log = std::fs::File::create(site.path("watch.log")).expect("watch log");
        let mut watch = std::process::Command::new(bin())
            .args(["--db", &site.db(), "watch"])
            .arg(site.path("watch.toml"))
            .stderr(log)
            .spawn()
            .expect("start exactly watch");
        let told = |state: &str| {
            far.delivered()
                .into_iter()
                .filter(|r| r.body.contains("approval_pending_longer_than"))
                .filter(|r| r.body.contains(&format!("\"state\":\"{state}\"")))
                .count()
        };
        let fired = wait_until(Duration::from_secs(15), || told("firing") == 1);
        let key = site.strings("SELECT effect_key FROM effect_ledger WHERE job_key = 'pay'");
        let (code, o, e) = site.exactly(&["approve", &key[0]]);
        let recovered = fired
            && code == 0
            && wait_until(Duration::from_secs(10), || told("recovered") == 1);
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
        let status = watch.wait().expect("wait for exactly watch");
        let watch_log = support::read_or_empty(&site.path("watch.log"));
        assert!(fired && recovered, "{o}{e}{:?}\n{watch_log}", far.requests());
        assert_eq!(status.code(), Some(0), "{watch_log}");
        assert_eq!((told("firing"), told("recovered")), (1, 1), "{:?}", far.requests());
        // The episode names the request's time as stored: a notifier that came after one
        // whose episode read differently would tell the same approval again.
        let stored = site.strings("SELECT requested_at FROM exactly_approvals");
        let episode = format!("\"episode\":\"{}@{}\"", key[0], stored[0]);
        for r in far.requests() {
            assert!(r.body.contains(&episode), "{episode} in {}", r.body);
        }
    }
}

#[test]
fn check_reports_a_notifier_s_mistakes() {
    let site = Site::new();
    site.write_jobs(
        "[[job]]\nname = \"a\"\nevery = \"1m\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
         command = [\"true\"]\n\n\
         [[notify]]\nname = \"ops\"\nwebhok = \"http://x\"\nfailing_runs = 3\n",
    );
    let (code, out, err) = site.exactly(&["check", &site.jobs()]);
    assert_eq!(code, 1, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(all.contains("unknown key \"webhok\""), "{all}");
    assert!(all.contains("no hook or webhook"), "{all}");
}

#[test]
fn watch_refuses_a_file_without_notify_tables() {
    let site = Site::new();
    site.write_jobs(
        "[[job]]\nname = \"a\"\nevery = \"1m\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
         command = [\"true\"]\n",
    );
    let (code, out, err) = site.exactly(&["watch", &site.jobs()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("no [[notify]] tables"), "{err}");
}

/// `late_by` also tells of a firing a scheduler recorded missed (here `overlap = "fail"`: a
/// firing while the run is live is a loud miss), once per missed firing, and never "recovered":
/// a miss is an event with no end. Before: only an overdue next firing was told.
#[test]
fn a_recorded_missed_firing_is_told_once_each() {
    let site = Site::new();
    let far = Recorder::start();
    site.write_jobs(&format!(
        "[[job]]\nname = \"slow\"\nevery = \"1s\"\nlease = \"5s\"\noverlap = \"fail\"\n\
         command = {}\n\n[[notify]]\nname = \"ops\"\nwebhook = \"{}/m\"\nlate_by = \"1h\"\n\
         recovery = true\n",
        sh("sleep 2.5"),
        far.url
    ));
    let missed = |far: &Recorder| {
        far.delivered()
            .into_iter()
            .filter(|r| r.body.contains("firing_missed"))
            .collect::<Vec<_>>()
    };
    let mut s = site.start("s", "5s");
    assert!(
        wait_until(Duration::from_secs(20), || missed(&far).len() >= 2),
        "no missed firing told: {:?}\n{}",
        far.requests(),
        site.log("s")
    );
    assert_eq!(
        s.term(Duration::from_secs(15)),
        Some(0),
        "{}",
        site.log("s")
    );
    let told = missed(&far);
    let bodies: Vec<serde_json::Value> = told
        .iter()
        .map(|r| serde_json::from_str(&r.body).expect("JSON body"))
        .collect();
    let mut episodes: Vec<&str> = bodies
        .iter()
        .map(|b| b["episode"].as_str().expect("episode"))
        .collect();
    episodes.sort_unstable();
    let n = episodes.len();
    episodes.dedup();
    assert_eq!(
        episodes.len(),
        n,
        "a missed firing was told twice: {bodies:?}"
    );
    assert!(
        bodies
            .iter()
            .all(|b| b["state"] == "firing" && b["subject"] == "slow"),
        "{bodies:?}"
    );
    assert!(
        n as i64 <= site.counter("firing_missed"),
        "told {n}, recorded {}",
        site.counter("firing_missed")
    );
}

/// The webhook deliveries of `failing_runs`, as (episode, state) pairs in order.
fn told_per_episode(far: &Recorder) -> Vec<(String, String)> {
    far.delivered()
        .into_iter()
        .filter_map(|r| serde_json::from_str::<serde_json::Value>(&r.body).ok())
        .filter(|b| b["rule"] == "failing_runs")
        .map(|b| {
            let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
            (s("episode"), s("state"))
        })
        .collect()
}

/// A job failing after 2.5 s every 3 s: most rule passes land while its next run is in
/// progress. A run in progress never ends the episode: for 60 s the channel hears "firing"
/// once and never "recovered".
#[test]
fn a_run_in_progress_never_ends_a_failing_episode() {
    let site = Site::new();
    let far = Recorder::start();
    site.write_jobs(&format!(
        "[[job]]\nname = \"slowfail\"\nevery = \"3s\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
         command = {}\n\n[[notify]]\nname = \"ops\"\nwebhook = \"{}/hook\"\n\
         failing_runs = 1\nrecovery = true\n",
        sh("sleep 2.5; exit 1"),
        far.url
    ));
    let mut s = site.start("s", "5s");
    std::thread::sleep(Duration::from_secs(60));
    assert_eq!(
        s.term(Duration::from_secs(15)),
        Some(0),
        "{}",
        site.log("s")
    );
    let told = told_per_episode(&far);
    let mut per_episode: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for (episode, state) in &told {
        let e = per_episode.entry(episode.as_str()).or_default();
        match state.as_str() {
            "firing" => e.0 += 1,
            _ => e.1 += 1,
        }
    }
    println!("failing 3 s job for 60 s: (firing, recovered) per episode: {per_episode:?}");
    let failed = site.count("SELECT count(*) FROM exactly_runs WHERE outcome = 'failed'");
    assert!(failed >= 10, "only {failed} failed runs\n{}", site.log("s"));
    assert_eq!(
        per_episode.values().copied().collect::<Vec<_>>(),
        vec![(1, 0)],
        "one episode, told firing once and never recovered: {told:?}"
    );
}

/// A real success after failures ends the episode: exactly one "recovered", after it.
#[test]
fn a_success_after_failures_sends_exactly_one_recovered() {
    let site = Site::new();
    let far = Recorder::start();
    site.write_jobs(&format!(
        "[[job]]\nname = \"mend\"\nevery = \"3s\"\nlease = \"10s\"\noverlap = \"coalesce\"\n\
         command = {}\n\n[[notify]]\nname = \"ops\"\nwebhook = \"{}/hook\"\n\
         failing_runs = 2\nrecovery = true\n",
        sh(&format!("sleep 2; test -f {}", site.path("ok").display())),
        far.url
    ));
    let mut s = site.start("s", "5s");
    assert!(
        wait_until(Duration::from_secs(30), || {
            told_per_episode(&far).iter().any(|(_, st)| st == "firing")
        }),
        "no firing: {:?}\n{}",
        far.requests(),
        site.log("s")
    );
    std::fs::write(site.path("ok"), "").expect("touch ok");
    let ok = || site.count("SELECT count(*) FROM exactly_runs WHERE outcome = 'ok'");
    assert!(
        wait_until(Duration::from_secs(20), || ok() >= 3),
        "{}",
        site.log("s")
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        s.term(Duration::from_secs(15)),
        Some(0),
        "{}",
        site.log("s")
    );
    let told = told_per_episode(&far);
    let states: Vec<&str> = told.iter().map(|(_, st)| st.as_str()).collect();
    assert_eq!(states, vec!["firing", "recovered"], "{told:?}");
    assert_eq!(told[0].0, told[1].0, "one episode: {told:?}");
}

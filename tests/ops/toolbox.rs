//! The operator's toolbox, with the real binary on real files: Prometheus parses what `metrics`
//! prints and scrapes `--listen`, JSON for scripts, a viewer account that can only read, shell
//! completions, a man page, help on every flag, and docs/cron.md's cron wrapper under cron's rules.
use crate::support;

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::cli::*;

/// A Python with the real Prometheus parser (`prometheus_client`, installed by .ci/run).
fn python() -> String {
    for p in ["python3", "/usr/bin/python3"] {
        let ok = Command::new(p)
            .args(["-c", "import prometheus_client.parser"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return p.to_string();
        }
    }
    panic!("no python3 with prometheus_client: .ci/run installs python3-prometheus-client");
}

/// Parses exposition text with prometheus_client's parser (`openmetrics` or the classic text
/// format) and prints one line per sample: name, then its labels as JSON (sorted keys).
/// Fails (non-zero) on anything the parser rejects or on a duplicate series.
const PARSE: &str = r#"
import sys, json
fmt = sys.argv[1]
text = sys.stdin.read()
if fmt == "openmetrics":
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
else:
    from prometheus_client.parser import text_string_to_metric_families
seen = set()
for fam in text_string_to_metric_families(text):
    for s in fam.samples:
        k = (s.name, json.dumps(s.labels, sort_keys=True))
        if k in seen:
            sys.exit("duplicate series: %s %s" % k)
        seen.add(k)
        print(s.name, json.dumps(s.labels, sort_keys=True), s.value, fam.type)
"#;

/// Samples as (name, labels JSON, value, family type), parsed by the real parser.
fn parse(text: &str, fmt: &str) -> Vec<(String, serde_json::Value, f64, String)> {
    let mut child = Command::new(python())
        .args(["-c", PARSE, fmt])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python output");
    assert!(
        out.status.success(),
        "the Prometheus parser rejected it: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(|l| {
            let (name, rest) = l.split_once(' ').expect("name");
            // labels JSON has no raw spaces after the last '}' … value and type follow it.
            let end = rest.rfind('}').expect("labels") + 1;
            let labels: serde_json::Value = serde_json::from_str(&rest[..end]).expect("labels");
            let mut tail = rest[end..].split_whitespace();
            let value: f64 = tail.next().expect("value").parse().expect("number");
            let typ = tail.next().expect("type").to_string();
            (name.to_string(), labels, value, typ)
        })
        .collect()
}

/// Job names another program may write with the seed's SQL: they differ only by control
/// characters, escapes and quotes, so a lossy rendering would print identical series.
const HOSTILE: &[&str] = &[
    "a b",
    "a\nb",
    "a\tb",
    "a\rb",
    "a\\nb",
    "a\"b",
    "a\u{1b}[31mb",
    "a\u{85}b",
    "a\u{202e}b",
];

fn foreign_writer_jobs(env: &Env) {
    let (code, _, err) = env.run(&["init"]);
    assert_eq!(code, 0, "{err}");
    let c = rusqlite::Connection::open(&env.db).expect("open");
    for (i, name) in HOSTILE.iter().enumerate() {
        c.execute(
            "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at) \
             VALUES (?1, 'py-worker', ?2, '2000-01-01T00:00:00.000Z', '2000-01-01T00:00:00.000Z')",
            rusqlite::params![name, i as i64 + 1],
        )
        .expect("insert");
    }
}

#[test]
fn metrics_parse_with_a_real_prometheus_parser_and_hostile_job_names_never_collide() {
    let env = Env::new();
    foreign_writer_jobs(&env);
    for (flag, fmt) in [(None, "text"), (Some("--openmetrics"), "openmetrics")] {
        let mut args = vec!["metrics"];
        args.extend(flag);
        let (code, out, err) = env.run(&args);
        assert_eq!(code, 0, "{err}");
        let samples = parse(&out, fmt);
        // Nothing raw reaches a terminal that shows it.
        assert!(
            !out.chars()
                .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
            "{fmt}: {out:?}"
        );
        // One fencing-token series per job, each labelled with its name (a backslash doubled, a
        // control character written \u{..}): one-to-one, so no two jobs share a series.
        let mut jobs: Vec<String> = samples
            .iter()
            .filter(|s| s.0 == "exactly_job_fencing_token")
            .map(|s| s.1["exactly_job"].as_str().expect("job label").to_string())
            .collect();
        jobs.sort();
        let mut want: Vec<String> = HOSTILE
            .iter()
            .map(|s| exactly::metrics::label_value(s))
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(want.len(), HOSTILE.len(), "label_value is one-to-one");
        assert_eq!(jobs, want, "{fmt}: every job its own series");
        assert!(jobs.contains(&"a\\u{a}b".to_string()), "{jobs:?}");
        assert!(jobs.contains(&"a\\\\nb".to_string()), "{jobs:?}");
        assert!(jobs.contains(&"a\"b".to_string()), "{jobs:?}");
        let token = |job: &str| {
            samples
                .iter()
                .find(|s| s.0 == "exactly_job_fencing_token" && s.1["exactly_job"] == job)
                .map(|s| s.2)
        };
        assert_eq!(token("a\\u{a}b"), Some(2.0), "{fmt}");
        assert_eq!(token("a\\\\nb"), Some(5.0), "{fmt}");
        // Counters end in _total, typed counter; docs/monitoring.md's names are all there.
        for name in [
            "exactly_duplicates_suppressed_total",
            "exactly_fenced_writes_total",
            "exactly_missed_firings_total",
            "exactly_claimed_never_submitted",
            "exactly_unknown_effects",
            "exactly_oldest_unknown_age_seconds",
            "exactly_pending_approvals",
            "exactly_unused_approvals",
            "exactly_schedulers_alive",
            "exactly_jobs_registered",
        ] {
            assert!(samples.iter().any(|s| s.0 == name), "{fmt}: {name} missing");
        }
        let typ = |name: &str| samples.iter().find(|s| s.0 == name).map(|s| s.3.clone());
        assert_eq!(
            typ("exactly_duplicates_suppressed_total").as_deref(),
            Some("counter")
        );
        let info = samples
            .iter()
            .find(|s| s.0 == "exactly_build_info")
            .expect("exactly_build_info");
        assert_eq!(info.1["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(info.2, 1.0);
    }
}

/// One HTTP GET over a plain socket; returns (status line, headers, body).
fn http_get(port: u16, path: &str, accept: Option<&str>) -> (String, String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{accept}Connection: close\r\n\r\n"
    )
    .expect("send");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read");
    let (head, body) = resp.split_once("\r\n\r\n").expect("http response");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

struct Killed(std::process::Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn metrics_listen_serves_what_prometheus_scrapes_over_http() {
    let env = Env::new();
    foreign_writer_jobs(&env);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port();
    let server = Killed(
        env.cmd()
            .args(["metrics", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn metrics --listen"),
    );
    support::wait_for(
        "metrics --listen to listen",
        Duration::from_secs(20),
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    let (status, headers, body) = http_get(port, "/metrics", None);
    assert!(status.contains(" 200"), "{status}");
    assert!(
        headers.to_lowercase().contains("text/plain; version=0.0.4"),
        "{headers}"
    );
    let samples = parse(&body, "text");
    assert_eq!(
        samples
            .iter()
            .filter(|s| s.0 == "exactly_job_fencing_token")
            .count(),
        HOSTILE.len()
    );
    // Prometheus asks for OpenMetrics and gets it, with its content type.
    let (status, headers, body) = http_get(
        port,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert!(status.contains(" 200"), "{status}");
    assert!(
        headers.contains("application/openmetrics-text"),
        "{headers}"
    );
    assert!(body.ends_with("# EOF\n"));
    parse(&body, "openmetrics");
    // Each scrape is a fresh snapshot: a new effect's counter moves.
    let t = env.claim("fresh-job", "1m");
    let (code, _, err) = env.run(&[
        "effect",
        "--job",
        "fresh-job",
        "--token",
        &t.to_string(),
        "--action",
        "a",
        "--target",
        "t",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{err}");
    let (_, _, body) = http_get(port, "/metrics", None);
    assert!(parse(&body, "text")
        .iter()
        .any(|s| s.0 == "exactly_job_fencing_token" && s.1["exactly_job"] == "fresh-job"));
    let (status, _, _) = http_get(port, "/other", None);
    assert!(status.contains(" 404"), "{status}");
    drop(server);
}

#[test]
fn job_names_with_control_characters_or_too_long_are_refused_where_they_enter() {
    let env = Env::new();
    assert_eq!(env.run(&["init"]).0, 0);
    let long = "j".repeat(201);
    for bad in [
        "a\nb",
        "a\tb",
        "a\u{1b}[2Jb",
        "a\u{202e}b",
        "",
        long.as_str(),
    ] {
        let (code, out, err) = env.run(&["lease", "claim", "--job", bad, "--for", "1m"]);
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(out.is_empty());
        assert!(err.trim_end().lines().count() <= 4, "{err}");
        assert!(err.contains("job name"), "{err}");
    }
    // Nothing was written for them.
    assert_eq!(env.sql_count("SELECT count(*) FROM job_lease"), 0);
    // 200 characters is the limit, inclusive.
    env.claim(&"j".repeat(200), "1m");
    // The library refuses them too.
    let mut store = env.store();
    let r = exactly::lease::claim(
        &mut store,
        &exactly::JobName::from("x\ny"),
        "me",
        Duration::from_secs(60),
    );
    assert!(matches!(r, Err(exactly::Error::Usage(_))), "{r:?}");
    // A jobs file: one problem line, exit 1.
    let jobs = env.path("jobs.toml");
    std::fs::write(
        &jobs,
        "[[job]]\nname = \"a\\tb\"\nevery = \"1h\"\nlease = \"5m\"\noverlap = \"fail\"\n\
         command = [\"true\"]\n",
    )
    .expect("write");
    let (code, out, err) = env.run(&["check", jobs.to_str().expect("utf8")]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("invalid name"), "{out}");
}

fn keys(v: &serde_json::Value, want: &[&str], what: &str) {
    for k in want {
        assert!(v.get(k).is_some(), "{what}: key {k} missing in {v}");
    }
}

#[test]
fn status_json_is_the_dashboards_snapshot_with_every_contract_key_and_a_schema_version() {
    let env = Env::new();
    let t = env.claim("pay", "10m").to_string();
    let effect = |target: &str, extra: &[&str], cmd: &str| {
        let mut a = vec!["effect", "--job", "pay", "--token", &t, "--action", "pay"];
        a.extend(["--target", target]);
        a.extend(extra);
        a.extend(["--", "sh", "-c", cmd]);
        env.run(&a).0
    };
    assert_eq!(effect("lost", &[], "exit 9"), 6);
    assert_eq!(
        effect("big", &["--needs-approval", "--terms", "Pay 9 EUR"], "true"),
        4
    );
    let (code, out, err) = env.run(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    keys(
        &v,
        &[
            "schema_version",
            "json_schema_version",
            "totals",
            "jobs",
            "unknown",
            "pending_approvals",
            "schedulers",
            "events",
        ],
        "top",
    );
    assert_eq!(v["json_schema_version"], 1);
    keys(
        &v["totals"],
        &[
            "duplicates_suppressed",
            "fenced_writes",
            "claimed_never_submitted",
            "unknown",
            "pending_approvals",
            "unused_approvals",
            "schedulers_alive",
        ],
        "totals",
    );
    let job = &v["jobs"][0];
    keys(
        job,
        &[
            "job_key",
            "interval_s",
            "lease_s",
            "overlap",
            "runs",
            "p50_ms",
            "p99_ms",
            "fencing_token",
            "lease_owner",
            "lease_until",
            "warnings",
            "next_fire_at",
            "last_run",
            "last_success_at",
            "runs_failed",
            "lease_left_s",
        ],
        "job",
    );
    assert_eq!(job["job_key"], "pay");
    let left = job["lease_left_s"].as_i64().expect("lease_left_s");
    assert!((500..=600).contains(&left), "{left}");
    let u = &v["unknown"][0];
    keys(
        u,
        &["effect_key", "job_key", "since", "age_s", "fencing_token"],
        "unknown",
    );
    assert_eq!(u["fencing_token"].as_i64(), Some(t.parse().expect("token")));
    let a = &v["pending_approvals"][0];
    keys(
        a,
        &["effect_key", "job_key", "terms_shown", "age_s"],
        "approval",
    );
    assert_eq!(a["terms_shown"], "Pay 9 EUR");
    assert!(
        !v["events"].as_array().expect("events").is_empty(),
        "events are in it"
    );
}

/// A folder a viewer (`nobody`) can read but not write, with a database of exactly's in it
/// (files 0644, as a writer's umask 022 leaves them). CI runs as root, like this test.
fn viewer_site() -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let sub = dir.path().join("db");
    std::fs::create_dir(&sub).expect("mkdir");
    for d in [dir.path(), sub.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let db = sub.join("exactly.db").to_str().expect("utf8").to_string();
    let run = |args: &[&str]| {
        let out = Command::new(bin())
            .arg("--db")
            .arg(&db)
            .args(args)
            .output()
            .expect("run");
        split(out)
    };
    let t = run(&["lease", "claim", "--job", "pay", "--for", "10m"]).1;
    let t = t.trim().to_string();
    let (code, _, err) = run(&[
        "effect",
        "--job",
        "pay",
        "--token",
        &t,
        "--action",
        "pay",
        "--target",
        "landlord",
        "--needs-approval",
        "--terms",
        "Pay rent",
        "--",
        "true",
    ]);
    assert_eq!(code, 4, "{err}");
    (dir, db)
}

/// The binary, copied where `nobody` may run it (a clone under a private home, CI's say, is
/// not reachable by other users): into the viewer's site, so it goes when the site does.
fn nobody_bin(db: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let site = std::path::Path::new(db)
        .parent()
        .and_then(|d| d.parent())
        .expect("the viewer's site");
    let to = site.join("exactly");
    if !to.exists() {
        std::fs::copy(bin(), &to).expect("copy the binary");
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    to.to_str().expect("utf8").to_string()
}

fn as_nobody(db: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("runuser")
        .args(["-u", "nobody", "--", &nobody_bin(db), "--db", db])
        .args(args)
        .env_remove("EXACTLY_ACTOR")
        .output()
        .expect("runuser");
    split(out)
}

#[test]
fn a_viewer_who_can_only_read_runs_status_metrics_and_top_read_only() {
    let (_dir, db) = viewer_site();
    // The viewer cannot write: a write is refused with one line, nothing changes.
    let (code, _, err) = as_nobody(&db, &["lease", "claim", "--job", "x", "--for", "1m"]);
    assert_ne!(code, 0, "nobody wrote the database?");
    assert!(!err.contains("panicked"), "{err}");
    // With no writer open (no -wal/-shm), and with a writer holding the WAL open (side files
    // present, 0644, owned by root): status, status --json and metrics all read.
    for writer_open in [false, true] {
        let writer = writer_open.then(|| {
            let c = rusqlite::Connection::open(&db).expect("open");
            // A committed change left in the WAL (not checkpointed while c is open).
            c.execute("UPDATE job_lease SET owner = 'root-writer'", [])
                .expect("write");
            assert!(std::path::Path::new(&format!("{db}-shm")).exists());
            c
        });
        let (code, out, err) = as_nobody(&db, &["status"]);
        assert_eq!(code, 0, "writer open {writer_open}: {err}");
        assert!(out.contains("pay"), "{out}");
        let (code, out, err) = as_nobody(&db, &["status", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(v["totals"]["pending_approvals"], 1);
        if writer_open {
            assert_eq!(
                v["jobs"][0]["lease_owner"], "root-writer",
                "reads the WAL too"
            );
        }
        let (code, out, err) = as_nobody(&db, &["metrics"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("exactly_pending_approvals 1"), "{out}");
        drop(writer);
    }
    // top in a real terminal, as nobody, without --read-only: it says read-only and refuses.
    let sock = format!("exactly-viewer-{}", std::process::id());
    let tmux = |args: &[&str]| {
        let out = Command::new("tmux")
            .args(["-L", &sock])
            .args(args)
            .output()
            .expect("tmux (CI installs it)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    struct KillServer(String);
    impl Drop for KillServer {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["-L", &self.0, "kill-server"])
                .output();
        }
    }
    let _server = KillServer(sock.clone());
    let cmd = format!(
        "runuser -u nobody -- {} --db {db} top; sleep 60",
        nobody_bin(&db)
    );
    let ok = Command::new("tmux")
        .args([
            "-L",
            &sock,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
        ])
        .args(["-x", "100", "-y", "30", &cmd])
        .status()
        .expect("tmux is required (CI installs it)");
    assert!(ok.success());
    let wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = tmux(&["capture-pane", "-p", "-t", "t"]);
            if s.contains(what) {
                return s;
            }
            assert!(Instant::now() < deadline, "never showed {what:?}:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // The header says read-only at once; the jobs come with the first snapshot.
    wait_for("[READ-ONLY: database not writable]");
    wait_for("pay");
    tmux(&["send-keys", "-t", "t", "3"]);
    wait_for("Pending approval (1)");
    tmux(&["send-keys", "-t", "t", "a"]);
    wait_for("approve refused (database not writable)");
    tmux(&["send-keys", "-t", "t", "q"]);
}

#[test]
fn a_decision_records_the_os_user_and_a_claimed_actor_as_claimed() {
    let (_dir, db) = viewer_site();
    let key = {
        let c = rusqlite::Connection::open(&db).expect("open");
        c.query_row("SELECT effect_key FROM effect_ledger", [], |r| {
            r.get::<_, String>(0)
        })
        .expect("key")
    };
    let me = exactly::os_user();
    let out = Command::new(bin())
        .args(["--db", &db, "approve", &key])
        .env("EXACTLY_ACTOR", "ceo")
        .env("USER", "ceo")
        .env_remove("SSH_CLIENT")
        .output()
        .expect("approve");
    let (code, out, err) = split(out);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("by ceo (set by {me})")), "{out}");
    let c = rusqlite::Connection::open(&db).expect("open");
    let by: String = c
        .query_row(
            "SELECT decided_by FROM exactly_approvals WHERE effect_key = ?1",
            [&key],
            |r| r.get(0),
        )
        .expect("decided_by");
    assert_eq!(by, format!("ceo (set by {me})"));
    // Without the claim, the OS user alone (not $USER, which anyone can set).
    assert_eq!(
        exactly::actor_from(None, "root", Some("10.0.0.7 5022 22")),
        "root@10.0.0.7"
    );
    assert_eq!(exactly::actor_from(Some("root"), "root", None), "root");
    assert_eq!(
        exactly::actor_from(Some("ceo"), "root", Some("10.0.0.7 5022 22")),
        "ceo (set by root@10.0.0.7)"
    );
}

/// A subcommand's `--help` shows its example (every one does: `src/cli/mod.rs` checks them all).
#[test]
fn a_subcommands_help_shows_an_example() {
    // And the real binary prints it.
    let (code, out, _) = Env::new().run(&["lease", "claim", "--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Example"), "{out}");
}

#[test]
fn completions_for_bash_zsh_fish_and_a_man_page() {
    let env = Env::new();
    let (code, bash, err) = env.run(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    // Real bash loads it and registers the completion.
    let script = env.path("exactly.bash");
    std::fs::write(&script, &bash).expect("write");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p exactly",
            script.display()
        ))
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("exactly"));
    assert!(bash.contains("metrics") && bash.contains("--listen"));
    let (code, zsh, _) = env.run(&["completions", "zsh"]);
    assert_eq!(code, 0);
    assert!(zsh.starts_with("#compdef exactly"), "{zsh:.200}");
    let (code, fish, _) = env.run(&["completions", "fish"]);
    assert_eq!(code, 0);
    assert!(fish.contains("complete -c exactly"), "{fish:.200}");
    let (code, _, err) = env.run(&["completions", "tcsh"]);
    assert_eq!(code, 2, "{err}");
    let (code, man, _) = env.run(&["man"]);
    assert_eq!(code, 0);
    assert!(man.contains(".TH exactly 1"), "{man:.300}");
    for sub in ["lease", "effect", "metrics", "completions"] {
        assert!(man.contains(sub), "man page lists {sub}");
    }
}

/// `exactly` with neither --db nor EXACTLY_DB, in `dir`, with this environment.
fn bare(
    dir: &std::path::Path,
    env: &[(&str, &std::path::Path)],
    args: &[&str],
) -> (i32, String, String) {
    let mut c = Command::new(bin());
    c.current_dir(dir)
        .env_remove("EXACTLY_DB")
        .env_remove("XDG_STATE_HOME")
        .env_remove("HOME");
    for (k, v) in env {
        c.env(k, v);
    }
    split(c.args(args).output().expect("run"))
}

#[test]
fn the_default_database_follows_xdg_and_an_existing_exactly_db_still_wins() {
    let env = Env::new();
    let work = env.path("work");
    let state = env.path("state");
    let home = env.path("home");
    std::fs::create_dir(&work).expect("mkdir");
    // A read before anything exists creates nothing.
    let (code, _, err) = bare(&work, &[("XDG_STATE_HOME", &state)], &["status"]);
    assert_eq!(code, 1, "{err}");
    assert!(!state.exists());
    let (code, out, err) = bare(&work, &[("XDG_STATE_HOME", &state)], &["init"]);
    assert_eq!(code, 0, "{err}");
    let xdg = state.join("exactly").join("exactly.db");
    assert!(xdg.is_file(), "{out}");
    assert!(out.contains(xdg.to_str().expect("utf8")), "{out}");
    assert!(!work.join("exactly.db").exists());
    let (code, out, err) = bare(&work, &[("XDG_STATE_HOME", &state)], &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(xdg.to_str().expect("utf8")), "{out}");
    // No XDG_STATE_HOME: ~/.local/state.
    let (code, _, err) = bare(&work, &[("HOME", &home)], &["init"]);
    assert_eq!(code, 0, "{err}");
    assert!(home.join(".local/state/exactly/exactly.db").is_file());
    // An exactly.db in the working folder (the old default) is still the one used.
    std::fs::File::create(work.join("exactly.db")).expect("touch");
    let (code, out, err) = bare(&work, &[("XDG_STATE_HOME", &state)], &["init"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("initialised exactly.db"), "{out}");
}

/// The repository's root (scripts and docs live there).
fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs a wrapper script as cron would: from `/`, with nothing but a bare PATH and HOME, plus
/// the wrapper's own settings (all absolute paths).
fn cron(script: &str, vars: &[(&str, String)]) -> (i32, String, String) {
    let mut c = Command::new("/usr/bin/env");
    c.arg("-i")
        .arg("PATH=/usr/bin:/bin")
        .arg(format!("HOME={}", std::env::temp_dir().display()));
    for (k, v) in vars {
        c.arg(format!("{k}={v}"));
    }
    c.arg("/bin/sh").arg(repo(script)).current_dir("/");
    split(c.output().expect("run the wrapper"))
}

/// A far side: SEND appends the effect key to `far`, OBSERVE looks for it there.
fn far_side(env: &Env, send_sleep: &str) -> (Vec<(&'static str, String)>, std::path::PathBuf) {
    let far = env.path("far.log");
    let send = env.path("send.sh");
    let observe = env.path("observe.sh");
    std::fs::write(
        &send,
        format!(
            "#!/bin/sh\nsleep {send_sleep}\necho \"$EXACTLY_EFFECT_KEY\" >> {}\n",
            far.display()
        ),
    )
    .expect("write");
    std::fs::write(
        &observe,
        format!("#!/bin/sh\ngrep -q \"$1\" {} 2>/dev/null\n", far.display()),
    )
    .expect("write");
    for f in [&send, &observe] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let vars = vec![
        ("EXACTLY", bin()),
        ("EXACTLY_DB", env.db.display().to_string()),
        ("SEND", send.display().to_string()),
        ("OBSERVE", observe.display().to_string()),
    ];
    (vars, far)
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn the_cron_wrapper_under_cron_sends_once_yields_to_a_held_lease_and_reports_db_errors() {
    let script = "assets/scripts/cron-wrapper.sh";
    let env = Env::new();
    let (vars, far) = far_side(&env, "0");
    let (code, _, err) = cron(script, &vars);
    assert_eq!(code, 0, "first run: {err}");
    assert_eq!(lines(&far), 1, "the effect happened");
    let (code, _, err) = cron(script, &vars);
    assert_eq!(code, 0, "second run: {err}");
    assert!(err.contains("duplicate suppressed"), "{err}");
    assert_eq!(lines(&far), 1, "the second run sent nothing");
    // A live lease held by another host: exit 0, nothing run.
    let held = Env::new();
    let (hvars, hfar) = far_side(&held, "0");
    let (code, _, err) = held.run(&[
        "lease",
        "claim",
        "--job",
        "daily-digest",
        "--for",
        "10m",
        "--owner",
        "host-b",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cron(script, &hvars);
    assert_eq!(code, 0, "held elsewhere is not a failure: {err}");
    assert_eq!(lines(&hfar), 0);
    assert_eq!(held.sql_count("SELECT count(*) FROM effect_ledger"), 0);
    // The database cannot be used: a failure cron reports (non-zero), nothing sent.
    for bad in [
        "/nonexistent-dir/exactly.db".to_string(),
        env.dir.path().display().to_string(), // a folder, not a file
    ] {
        let mut v = vars.clone();
        v[1] = ("EXACTLY_DB", bad.clone());
        let (code, _, err) = cron(script, &v);
        assert_ne!(code, 0, "{bad}: a database error must not exit 0 ({err})");
        assert_ne!(code, 3, "{bad}");
        assert!(err.contains("exactly:"), "{err}");
    }
    assert_eq!(lines(&far), 1);
}

#[test]
fn the_renewing_cron_wrapper_keeps_its_lease_through_a_long_command() {
    let script = "assets/scripts/cron-wrapper-long.sh";
    let env = Env::new();
    let (mut vars, far) = far_side(&env, "6");
    vars.push(("LEASE", "2s".into()));
    vars.push(("RENEW_EVERY", "0.5".into()));
    let first = {
        let vars = vars.clone();
        std::thread::spawn(move || cron(script, &vars))
    };
    // Past the lease's first expiry and the clock-skew margin (2s + 2s), a second copy starts:
    // the lease is still held.
    std::thread::sleep(Duration::from_millis(4800));
    let (code, _, err) = cron(script, &vars);
    assert_eq!(code, 0, "second copy: {err}");
    let (code, _, err) = first.join().expect("first");
    assert_eq!(code, 0, "the long run kept its lease and finished: {err}");
    assert_eq!(lines(&far), 1, "sent once");
    let c = rusqlite::Connection::open(&env.db).expect("open");
    let (state, token): (String, i64) = c
        .query_row(
            "SELECT state, fencing_token FROM effect_ledger WHERE job_key = 'ledger-export'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("row");
    assert_eq!(
        (state.as_str(), token),
        ("done", 1),
        "one token: never taken over"
    );
}

#[test]
fn docs_include_the_cron_wrappers_and_unit_verbatim() {
    for (doc, f) in [
        ("docs/cron.md", "assets/scripts/cron-wrapper.sh"),
        ("docs/cron.md", "assets/scripts/cron-wrapper-long.sh"),
        ("docs/concepts.md", "assets/scripts/pay-fenced.sh"),
        ("docs/operations.md", "assets/systemd/exactly-run.service"),
    ] {
        let shown = std::fs::read_to_string(repo(doc)).expect(doc);
        let text = std::fs::read_to_string(repo(f)).expect(f);
        assert!(shown.contains(&text), "{doc} does not include {f} verbatim");
    }
}

#[test]
fn the_systemd_unit_restarts_on_failure_and_outwaits_the_grace() {
    let unit = std::fs::read_to_string(repo("assets/systemd/exactly-run.service")).expect("unit");
    let value = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} missing"))
            .to_string()
    };
    assert_eq!(value("Restart"), "on-failure");
    // `systemctl reload` sends SIGHUP: the scheduler reloads its jobs file.
    assert!(value("ExecReload").ends_with("kill -HUP $MAINPID"));
    assert_eq!(value("KillMode"), "mixed");
    assert_eq!(value("NoNewPrivileges"), "yes");
    assert_eq!(value("ProtectSystem"), "strict");
    let db = value("Environment");
    let db = db.strip_prefix("EXACTLY_DB=").expect("EXACTLY_DB");
    let dir = std::path::Path::new(db).parent().expect("dir");
    assert_eq!(value("ReadWritePaths"), dir.display().to_string());
    let start = value("ExecStart");
    let grace = start
        .split("--grace ")
        .nth(1)
        .and_then(|g| g.split_whitespace().next())
        .expect("ExecStart gives --grace");
    let secs = |d: &str| humantime::parse_duration(d).expect("duration").as_secs();
    assert!(
        secs(&value("TimeoutStopSec")) > secs(grace),
        "TimeoutStopSec must exceed --grace"
    );
}

//! Several hosts on one PostgreSQL database (`EXACTLY_TEST_PG`): the server's clock decides who
//! holds a lease, whatever the clients' clocks say, and each role may do only what it is granted.
//! Real processes, a real server, clocks moved by `faketime`. Without `EXACTLY_TEST_PG` they run
//! on a throwaway cluster (tests/support/cluster.rs); without a server they are ignored (and on
//! CI fail).
use std::process::Command;
use std::time::Duration;
use support::backend::{connect, enter_postgres, pg_url, with_search_path, PgSchema};
use support::{effect_args, strs};

use crate::support;

/// A fresh schema in the test database (see [`PgSchema`]) and the roles made for it, dropped
/// with it.
struct Schema {
    pg: PgSchema,
    base: String,
    name: String,
    roles: std::cell::RefCell<Vec<String>>,
}

/// What a role of the test may do with the schema's tables.
enum Grant {
    /// `SELECT` only: a viewer of `top`.
    Read,
    /// Rows read and written, no DDL: a scheduler or a worker.
    ReadWrite,
}

impl Schema {
    fn new() -> Schema {
        let pg = PgSchema::create();
        Schema {
            base: pg_url().expect("a PostgreSQL schema needs EXACTLY_TEST_PG"),
            name: pg.name.clone(),
            pg,
            roles: Default::default(),
        }
    }

    /// A login role granted `grant` on this schema (and the test's own role made a member of
    /// it, so the test may end its sessions); the URL that connects as it.
    fn role(&self, suffix: &str, grant: Grant) -> (String, String) {
        let (tag, role) = (&self.name, format!("{}_{suffix}", self.name));
        let rows = match grant {
            Grant::Read => format!("GRANT SELECT ON ALL TABLES IN SCHEMA {tag} TO {role};"),
            Grant::ReadWrite => format!(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {tag} TO {role};
                 GRANT USAGE ON ALL SEQUENCES IN SCHEMA {tag} TO {role};"
            ),
        };
        self.client()
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN PASSWORD 'pw';
                 GRANT {role} TO CURRENT_USER;
                 GRANT USAGE ON SCHEMA {tag} TO {role};
                 {rows}"
            ))
            .expect("create role");
        self.roles.borrow_mut().push(role.clone());
        let rest = self
            .base
            .split_once('@')
            .map(|(_, h)| h)
            .expect("URL with @host");
        let url = with_search_path(&format!("postgres://{role}:pw@{rest}"), tag);
        (role, url)
    }

    /// The one value `sql` selects (any SQL error fails the test).
    fn one<T: for<'a> postgres::types::FromSql<'a>>(&self, sql: &str) -> T {
        self.client()
            .query_one(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0)
    }

    /// Ends the role's sessions and refuses new ones (`away`), or lets it in again.
    fn cut_off(&self, role: &str, away: bool) {
        let sql = if away {
            format!(
                "ALTER ROLE {role} NOLOGIN;
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}';"
            )
        } else {
            format!("ALTER ROLE {role} LOGIN")
        };
        self.client().batch_execute(&sql).expect("alter role");
    }

    fn url(&self) -> String {
        self.pg.url.clone()
    }

    fn client(&self) -> postgres::Client {
        connect(&self.pg.url)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // The schema goes first (a role with grants on its tables cannot be dropped); the
        // `PgSchema` dropped after finds it gone.
        if let Ok(mut c) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
            for role in self.roles.borrow().iter() {
                let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {role}"));
            }
        }
    }
}

/// The PostgreSQL server of the tests (`EXACTLY_TEST_PG`, or the throwaway cluster); the
/// test fails without one (where there is none it is ignored at build time).
fn url() -> String {
    // Only its rule is wanted (a failure without a server); these tests name their database
    // themselves, so the backend it sets for the support module may end here.
    let _checked = enter_postgres();
    pg_url().expect("enter_postgres fails without a server")
}

/// A test's own schema, initialised by `exactly init`, and its URL.
fn site() -> (Schema, String) {
    url();
    let s = Schema::new();
    let db = s.url();
    let (code, _, err) = exactly(&db, "", &["init"]);
    assert_eq!(code, 0, "init: {err}");
    (s, db)
}

/// `exactly --db URL ARGS…`, its clock `skew` off the host's (through `faketime`) unless empty:
/// (exit code, stdout, stderr).
fn exactly(db: &str, skew: &str, args: &[&str]) -> (i32, String, String) {
    let bin = env!("CARGO_BIN_EXE_exactly");
    let mut cmd = if skew.is_empty() {
        Command::new(bin)
    } else {
        let mut c = Command::new("faketime");
        c.env("FAKETIME_NO_CACHE", "1").arg("-f").arg(skew).arg(bin);
        c
    };
    let out = cmd
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("run exactly (and faketime)");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Seconds from the server's now to the job's `lease_until`.
fn lease_left_s(s: &Schema, job: &str) -> f64 {
    let row = s
        .client()
        .query_one(
            "SELECT extract(epoch FROM (lease_until::timestamptz - now()))::float8
             FROM job_lease WHERE job_key = $1",
            &[&job],
        )
        .expect("read the lease");
    row.get(0)
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn two_clients_an_hour_apart_see_one_lease_holder() {
    let (s, db) = site();

    // A claims with the host's clock; B's clock is an hour ahead, C's an hour behind.
    let (code, token, err) = exactly(
        &db,
        "",
        &[
            "lease", "claim", "--job", "j", "--for", "30m", "--owner", "a",
        ],
    );
    assert_eq!((code, token.trim()), (0, "1"), "{err}");
    let (code, out, err) = exactly(
        &db,
        "+1h",
        &[
            "lease", "claim", "--job", "j", "--for", "30m", "--owner", "b",
        ],
    );
    assert_eq!(
        code, 3,
        "a client an hour ahead took a live lease: {out}{err}"
    );
    assert!(err.contains("leased by a"), "{err}");
    let (code, out, err) = exactly(
        &db,
        "-1h",
        &[
            "lease", "claim", "--job", "j", "--for", "30m", "--owner", "c",
        ],
    );
    assert_eq!(code, 3, "{out}{err}");
    // The lease ends 30 minutes after the server's now, not after a client's.
    let left = lease_left_s(&s, "j");
    assert!(
        (1790.0..=1800.0).contains(&left),
        "lease_until is {left} s away"
    );

    // B (an hour ahead) holds k for 1 s; once it ended (and the skew margin passed), C (an hour
    // behind) takes it over: by C's clock it would still be held for an hour.
    let (code, token, err) = exactly(
        &db,
        "+1h",
        &[
            "lease", "claim", "--job", "k", "--for", "1s", "--owner", "b",
        ],
    );
    assert_eq!((code, token.trim()), (0, "1"), "{err}");
    let left = lease_left_s(&s, "k");
    assert!((0.0..=1.0).contains(&left), "lease_until is {left} s away");
    std::thread::sleep(Duration::from_millis(3500));
    let (code, token, err) = exactly(
        &db,
        "-1h",
        &[
            "lease", "claim", "--job", "k", "--for", "30s", "--owner", "c",
        ],
    );
    assert_eq!((code, token.trim()), (0, "2"), "{err}");
    // The ledger's own stamps are the server's too.
    let stolen: i64 = s.one(
        "SELECT count(*) FROM exactly_events WHERE kind = 'lease_stolen'
           AND abs(extract(epoch FROM (at::timestamptz - now()))) < 60",
    );
    assert_eq!(stolen, 1);
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn a_viewer_role_reads_and_a_worker_role_acts_without_owning_the_schema() {
    let (s, _) = site();
    let (_, vdb) = s.role("viewer", Grant::Read);
    let (_, wdb) = s.role("worker", Grant::ReadWrite);

    // The worker claims, sends once, and a retry is suppressed.
    let (code, token, err) = exactly(&wdb, "", &["lease", "claim", "--job", "j", "--for", "1m"]);
    assert_eq!(code, 0, "{err}");
    let far = tempfile::NamedTempFile::new().expect("temp file");
    let send = format!("echo sent >> {}", far.path().display());
    let args = effect_args("j", &token, "pay", "t1").sh(&send);
    let effect = |db: &str| exactly(db, "", &strs(&args));
    let (code, _, err) = effect(&wdb);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = effect(&wdb);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("duplicate suppressed"), "{err}");
    assert_eq!(
        std::fs::read_to_string(far.path())
            .expect("far side")
            .lines()
            .count(),
        1
    );

    // The viewer reads what happened, and cannot change it.
    let (code, out, err) = exactly(&vdb, "", &["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"duplicates_suppressed\": 1"), "{out}");
    let (code, _, err) = exactly(&vdb, "", &["lease", "claim", "--job", "v", "--for", "1m"]);
    assert_ne!(code, 0, "a viewer claimed a lease");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("permission denied") || err.contains("read-only"),
        "{err}"
    );
    let n: i64 = s.one("SELECT count(*) FROM job_lease WHERE job_key = 'v'");
    assert_eq!(n, 0);
}

/// `top` and `status` stay index searches on PostgreSQL too: on a million-row ledger (a thousand
/// of them open) no query of theirs scans `effect_ledger`; the open rows come from its partial
/// index.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn the_dashboards_reads_do_not_scan_a_million_row_ledger() {
    let (s, db) = site();
    s.client()
        .batch_execute(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
             created_at, updated_at)
             SELECT 'k' || g, 'job' || (g % 100), 'r', 1,
                    CASE WHEN g % 1000 = 0 THEN 'unknown' ELSE 'done' END,
                    '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z'
             FROM generate_series(1, 1000000) g;
             ANALYZE;",
        )
        .expect("fill the ledger");
    let plans = exactly::read_plans(&db).expect("plans");
    assert_eq!(plans.len(), 5);
    for (q, plan) in plans {
        let text = plan.join("\n");
        assert!(!text.contains("Seq Scan on effect_ledger"), "{q}\n{text}");
        if q.contains("FROM effect_ledger") {
            assert!(text.contains("effect_ledger_open"), "{q}\n{text}");
        }
    }
    let t = std::time::Instant::now();
    let (code, out, err) = exactly(&db, "", &["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"unknown\": 1000"), "{out}");
    eprintln!(
        "status on a million-row ledger: {} ms",
        t.elapsed().as_millis()
    );
}

/// The database lost after `submitted`, while the command runs: its end cannot be written, so
/// `exactly effect` says so (exit 6, as on SQLite when the file stays locked), the row stays
/// `submitted` — never failed, never released — and reads as unknown once the lease is gone.
/// A retry with an observer settles it; the far side saw one request.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn a_database_lost_after_submitted_leaves_the_effect_open_never_failed() {
    let (s, _) = site();
    let (role, wdb) = s.role("w", Grant::ReadWrite);
    let dir = tempfile::tempdir().expect("tempdir");
    let (far, sent) = (dir.path().join("far"), dir.path().join("sent"));

    let (code, token, err) = exactly(&wdb, "", &["lease", "claim", "--job", "j", "--for", "3s"]);
    assert_eq!(code, 0, "{err}");
    let script = format!(
        "echo sent >> {far}; touch {sent}; sleep 1",
        far = far.display(),
        sent = sent.display()
    );
    let bin = env!("CARGO_BIN_EXE_exactly");
    let child = Command::new(bin)
        .args(["--db", &wdb])
        .args(effect_args("j", &token, "pay", "t1").sh(&script))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start exactly effect");
    // Once the request left, the database goes away for this role: its sessions are ended and
    // new ones refused.
    support::wait_for("the command to run", Duration::from_secs(10), || {
        sent.exists()
    });
    s.cut_off(&role, true);
    let out = child.wait_with_output().expect("wait for exactly effect");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    s.cut_off(&role, false);
    let state: String = s.one("SELECT state FROM effect_ledger");
    assert_eq!(state, "submitted");

    // After the lease it is unknown; a retry asks the far side instead of sending again.
    std::thread::sleep(Duration::from_millis(3500));
    let (code, out, err) = exactly(&wdb, "", &["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"unknown\": 1"), "{out}");
    let (code, token, err) = exactly(&wdb, "", &["lease", "claim", "--job", "j", "--for", "30s"]);
    assert_eq!(code, 0, "{err}");
    let observe = format!("grep -q sent {}", far.display());
    let retry = effect_args("j", &token, "pay", "t1")
        .observe(&observe)
        .sh(&script);
    let (code, _, err) = exactly(&wdb, "", &strs(&retry));
    assert_eq!(code, 0, "{err}");
    let lines = std::fs::read_to_string(&far)
        .expect("far side")
        .lines()
        .count();
    assert_eq!(lines, 1, "the far side got a second request");
    let state: String = s.one("SELECT state FROM effect_ledger");
    assert_eq!(state, "done");
}

/// `sslmode=require`: the connection is TLS and the server's certificate is checked — against
/// the CA in `PGSSLROOTCERT` here (`EXACTLY_TEST_PG_CA`, the throwaway cluster's self-signed
/// certificate in CI). Without that CA the same URL is refused in one line; nothing connects in
/// the clear instead.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
#[cfg_attr(
    exactly_no_pg_ca,
    ignore = "EXACTLY_TEST_PG is set without EXACTLY_TEST_PG_CA, its server's CA certificate"
)]
fn sslmode_require_connects_over_tls_and_checks_the_certificate() {
    url();
    let ca = support::backend::pg_ca().expect(
        "EXACTLY_TEST_PG_CA (the test server's certificate): without it, off CI, this test is \
         ignored at build time",
    );
    let s = Schema::new();
    let db = format!("{}&sslmode=require", s.url());
    let run = |ca: Option<&str>, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_exactly"));
        c.env_remove("PGSSLROOTCERT");
        if let Some(ca) = ca {
            c.env("PGSSLROOTCERT", ca);
        }
        let out = c
            .arg("--db")
            .arg(&db)
            .args(args)
            .output()
            .expect("run exactly");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = run(Some(&ca), &["init"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, token, err) = run(Some(&ca), &["lease", "claim", "--job", "j", "--for", "1m"]);
    assert_eq!((code, token.trim()), (0, "1"), "{err}");
    let (code, _, err) = run(None, &["status"]);
    assert_ne!(code, 0, "connected without checking the certificate");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("certificate") || err.contains("TLS"), "{err}");
    assert!(!err.contains(":exactly@"), "the password is shown: {err}");
}

/// A dashboard keeps runs between polls and reads only the rows added since. On PostgreSQL a
/// row's number is taken at insert, not at commit: a run inserted first but committed last must
/// still be counted by a dashboard that polled in between (it reads the last rowids again).
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn a_run_committed_after_a_later_one_is_still_counted_by_a_polling_dashboard() {
    let (s, db) = site();
    // A job the dashboard shows: known by its lease.
    assert_eq!(
        exactly(&db, "", &["lease", "claim", "--job", "j", "--for", "1h"]).0,
        0
    );
    let mut store = exactly::open(Some(&db), exactly::Access::ReadOnly).expect("open");
    let runs = |store: &mut exactly::Store| -> u64 {
        let snap = exactly::snapshot::Snapshot::read(store).expect("snapshot");
        snap.jobs
            .iter()
            .filter(|j| j.job_key == "j")
            .map(|j| j.runs)
            .sum()
    };
    let ts = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')";
    let insert = format!(
        "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, started_at)
         VALUES ($1, 'j', {ts}, 'o', 1, {ts})"
    );
    let end = format!(
        "UPDATE exactly_runs SET ended_at = {ts}, outcome = 'ok', duration_ms = 10 WHERE run_id = \
         $1"
    );
    let mut c = s.client();
    c.batch_execute("SET lock_timeout = '10s'")
        .expect("lock timeout");
    c.execute(&insert, &[&"r0"]).expect("r0");
    c.execute(&end, &[&"r0"]).expect("r0 ends");
    assert_eq!(runs(&mut store), 1);
    // r1 takes its number first, and commits (ended) after r2 is seen.
    let mut slow = s.client();
    slow.batch_execute("SET lock_timeout = '10s'")
        .expect("lock timeout");
    let mut t1 = slow.transaction().expect("begin");
    t1.execute(&insert, &[&"r1"]).expect("r1");
    c.execute(&insert, &[&"r2"]).expect("r2");
    c.execute(&end, &[&"r2"]).expect("r2 ends");
    assert_eq!(runs(&mut store), 2, "r0 and r2 are committed");
    t1.execute(&end, &[&"r1"]).expect("r1 ends");
    t1.commit().expect("commit r1");
    assert_eq!(
        runs(&mut store),
        3,
        "the kept window missed a run committed late"
    );
    let mut fresh = exactly::open(Some(&db), exactly::Access::ReadOnly).expect("open");
    assert_eq!(runs(&mut fresh), 3);
}

/// `exactly top` on PostgreSQL when the server goes away (its role's sessions ended and new
/// ones refused): the last data stays on screen, the header says how stale it is, the footer
/// why; once the server takes it back, the next poll reconnects and both go away. Driven in a
/// real terminal (tmux), as a person watches it.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn the_dashboard_keeps_its_last_data_while_the_server_is_away_and_reconnects() {
    let (s, db) = site();
    assert_eq!(
        exactly(
            &db,
            "",
            &["lease", "claim", "--job", "nightly", "--for", "1h"]
        )
        .0,
        0
    );
    let (role, vdb) = s.role("v", Grant::Read);
    let session = format!("exactly-{}", s.name);
    let top = format!(
        "EXACTLY_BUSY_TIMEOUT_MS=1000 {} --db '{vdb}' top",
        env!("CARGO_BIN_EXE_exactly")
    );
    let started = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "100",
            "-y",
            "30",
            &top,
        ])
        .status()
        .expect("tmux");
    assert!(started.success());
    let screen = || {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &session])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let wait_for = |what: &str, ok: &dyn Fn(&str) -> bool| -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let text = screen();
            if ok(&text) {
                return text;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}; the screen:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    wait_for("the job never showed", &|t| {
        t.contains("nightly") && t.contains("polled")
    });
    s.cut_off(&role, true);
    let away = wait_for("no staleness shown", &|t| {
        t.contains("STALE") && t.contains("poll failed")
    });
    assert!(away.contains("nightly"), "the last data is gone:\n{away}");
    assert!(!away.contains(":pw@"), "the password is shown:\n{away}");
    assert!(
        away.contains("READ-ONLY"),
        "a viewer's role may not write:\n{away}"
    );
    s.cut_off(&role, false);
    let back = wait_for("never reconnected", &|t| {
        !t.contains("STALE") && !t.contains("poll failed")
    });
    assert!(
        back.contains("nightly") && back.contains("polled"),
        "{back}"
    );
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &session])
        .status();
}

/// Writers racing on PostgreSQL meet serialization failures (`40001`); those transactions run
/// again, so every caller gets an answer — here 12 processes' worth of claims on one job at
/// once: exactly one wins, the others are told who holds it, none gets an error.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn racing_claims_are_retried_on_serialization_failures_and_one_wins() {
    let (_schema, db) = site();
    for round in 0..5 {
        let job = format!("j{round}");
        let gate = std::sync::Arc::new(std::sync::Barrier::new(12));
        let answers: Vec<_> = (0..12)
            .map(|i| {
                let (db, job, gate) = (db.clone(), job.clone(), gate.clone());
                std::thread::spawn(move || {
                    // A store of its own each: its own connection, as separate processes have.
                    let mut store = exactly::open(Some(&db), exactly::Access::Write).expect("open");
                    gate.wait();
                    exactly::lease::claim(
                        &mut store,
                        &exactly::JobName::from(&job),
                        &format!("w{i}"),
                        Duration::from_secs(60),
                    )
                    .map_err(|e| e.to_string())
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .collect();
        let errors: Vec<_> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
        assert!(errors.is_empty(), "round {round}: {errors:?}");
        let won = answers
            .iter()
            .filter(|a| matches!(a, Ok(exactly::lease::Claim::Won { .. })))
            .count();
        assert_eq!(won, 1, "round {round}: {answers:?}");
    }
}

/// A scheduler whose clock is an hour ahead: it fires by its own clock (the slots are its), but
/// every row it writes — the lease, the run's start, the firing, the events — carries the
/// server's time.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn a_scheduler_on_a_skewed_clock_stamps_its_rows_with_the_servers_time() {
    let (s, db) = site();
    let dir = tempfile::tempdir().expect("tempdir");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"800ms\"\noverlap = \"coalesce\"\n\
         timeout = \"900ms\"\ncommand = [\"true\"]\n",
    )
    .expect("jobs file");
    let mut sched = Command::new(env!("CARGO_BIN_EXE_exactly"));
    support::skew_clock(&mut sched, "+1h");
    let mut sched = sched
        .args(["--db", &db, "run"])
        .arg(&jobs)
        .args(["--owner", "ahead"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start exactly run");
    std::thread::sleep(Duration::from_secs(4));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(sched.id() as i32, libc::SIGTERM) };
    sched.wait().expect("wait for the scheduler");
    let far = |sql: &str| -> i64 { s.one(sql) };
    let ts = |col: &str| format!("abs(extract(epoch FROM ({col}::timestamptz - now())))");
    assert!(far("SELECT count(*) FROM exactly_runs") >= 2);
    // Fired by its clock: the slots are an hour ahead.
    assert_eq!(
        far(&format!(
            "SELECT count(*) FROM exactly_runs WHERE {} < 3000",
            ts("scheduled_at")
        )),
        0
    );
    // Stamped by the server's.
    for (table, col) in [
        ("exactly_runs", "started_at"),
        ("exactly_runs", "ended_at"),
        ("exactly_firings", "created_at"),
        ("exactly_firings", "updated_at"),
        ("exactly_events", "at"),
        ("exactly_schedulers", "heartbeat_at"),
        ("job_lease", "created_at"),
    ] {
        let off = far(&format!(
            "SELECT count(*) FROM {table} WHERE {col} IS NOT NULL AND {} > 60",
            ts(col)
        ));
        assert_eq!(off, 0, "{table}.{col} carries the client's clock");
    }
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn gc_from_a_client_an_hour_ahead_keeps_what_the_servers_clock_says_is_recent() {
    let (s, db) = site();
    // Two events by the server's clock: one 23h30m old (inside `--keep 1d`), one 25h old.
    let at = |ago: &str| -> String {
        s.one(&format!(
            "SELECT to_char((now() - interval '{ago}') AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
        ))
    };
    let (recent, old) = (at("23 hours 30 minutes"), at("25 hours"));
    s.client()
        .batch_execute(&format!(
            "INSERT INTO exactly_events (at, kind, detail) VALUES
               ('{recent}', 'lease_stolen', 'recent'), ('{old}', 'lease_stolen', 'old')"
        ))
        .expect("insert events");
    // By the client's clock (an hour ahead) the recent one is 24h30m old.
    let (code, out, err) = exactly(&db, "+1h", &["gc", "--keep", "1d"]);
    assert_eq!(code, 0, "{out}{err}");
    let left: Vec<String> = s
        .client()
        .query(
            "SELECT detail FROM exactly_events WHERE kind = 'lease_stolen' ORDER BY id",
            &[],
        )
        .expect("read events")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["recent"], "gc pruned by the client's clock: {out}");
}

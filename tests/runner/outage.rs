//! The scheduler under a failing database: a write lock, a deleted or replaced file, a corrupt
//! one. It backs off instead of spinning, records the slots it could not fire as missed (for
//! that reason) instead of running them late, and stops with a clear error when the database
//! is gone or keeps failing. All SQLite: each fault is a SQLite file's (its write lock, its
//! inode, its bytes); a PostgreSQL outage is the same code path (a failed transaction).
use crate::on_both_backends;
use crate::support;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::runner::*;

/// A 1 s job with no catch-up window, whose command does nothing.
fn every_second(site: &Site) {
    site.write_jobs(&format!(
        "[[job]]\nname = \"tick\"\nevery = \"1s\"\nlease = \"900ms\"\ntimeout = \"500ms\"\n\
         overlap = \"coalesce\"\ncommand = {}\n",
        sh("true")
    ));
}

/// `exactly --db DB run` of the site's jobs file with `extra` flags, its stderr in `OWNER.log`.
fn start_on(site: &Site, db: &Path, owner: &str, extra: &[&str]) -> Sched {
    let log = std::fs::File::create(site.path(&format!("{owner}.log"))).expect("log file");
    let child = Command::new(bin())
        .current_dir("/")
        .arg("--db")
        .arg(db)
        .args(["run", &site.jobs(), "--owner", owner, "--grace", "1s"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start exactly run");
    Sched { child }
}

/// Overwrites a file's bytes with zeros where it is (same inode, same length).
fn zero(path: &Path) {
    use std::io::Write;
    let len = std::fs::metadata(path).expect("stat").len() as usize;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open to corrupt");
    f.write_all(&vec![0u8; len]).expect("zero the file");
    f.sync_all().expect("sync");
}

/// The database file and its two WAL side files, all zeroed in place: every connection now
/// fails ("not a database"), and the file is still the one the scheduler opened.
fn corrupt(db: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let p = format!("{}{suffix}", db.display());
        if Path::new(&p).exists() {
            zero(Path::new(&p));
        }
    }
}

/// User + system CPU time of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat of the scheduler");
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat (utime, stime), counted from the state (field 3).
    let ticks: f64 = f[11].parse::<f64>().expect("utime") + f[12].parse::<f64>().expect("stime");
    ticks / 100.0
}

/// How far ahead of its slot a scheduler decides a firing (the default of
/// `EXACTLY_DECIDE_AHEAD_MS`, see `scheduler/batches.rs`).
fn ahead() -> chrono::Duration {
    chrono::Duration::milliseconds(1000)
}

fn errors(log: &str) -> usize {
    log.lines().filter(|l| l.contains(" ERROR ")).count()
}

fn runs(site: &Site) -> i64 {
    site.count("SELECT count(*) FROM exactly_runs")
}

#[test]
fn slots_under_a_write_lock_are_missed_for_that_reason_and_none_runs_late() {
    let site = Site::new();
    every_second(&site);
    let mut s = site.start_with_env("s", "1s", &[("EXACTLY_BUSY_TIMEOUT_MS", "1000")]);
    assert!(
        wait_until(Duration::from_secs(10), || runs(&site) >= 2),
        "{}",
        site.log("s")
    );
    // Another process holds the write lock for 8 s.
    let c = site.conn();
    c.execute_batch("BEGIN IMMEDIATE").expect("lock");
    let locked = chrono::Utc::now();
    std::thread::sleep(Duration::from_secs(8));
    c.execute_batch("COMMIT").expect("unlock");
    // Slots up to here were more than LATE_OK (2 s) late at the unlock, with some slack.
    let too_late = chrono::Utc::now() - chrono::Duration::milliseconds(2500);
    let after = runs(&site);
    assert!(
        wait_until(Duration::from_secs(10), || runs(&site) >= after + 2),
        "firing resumed after the lock: {}",
        site.log("s")
    );
    let (_, status, err) = site.exactly(&["status", "--json"]);
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    let log = site.log("s");
    // catchup = 0: a slot is run within LATE_OK (2 s) of its instant, or missed.
    let late = site.count(
        "SELECT count(*) FROM exactly_runs
          WHERE (julianday(started_at) - julianday(scheduled_at)) * 86400 > 3",
    );
    assert_eq!(late, 0, "a slot ran late: {log}");
    assert_eq!(
        site.count("SELECT count(*) FROM exactly_firings WHERE kind = 'catchup'"),
        0,
        "a slot was fired as a catch-up beyond its window (0): {log}"
    );
    let fmt = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let interval = format!(
        "FROM exactly_firings WHERE scheduled_at > '{}' AND scheduled_at < '{}'",
        // The slot within a second of the lock may have been decided ahead of it, before the
        // lock: its command needs nothing of the database at its slot, and runs.
        fmt(locked + ahead()),
        fmt(too_late)
    );
    let slots = site.count(&format!("SELECT count(*) {interval}"));
    let missed = site.count(&format!(
        "SELECT count(*) {interval} AND state = 'missed' AND detail = 'database unavailable'"
    ));
    assert!(
        slots >= 4,
        "{slots} slots recorded in the locked interval: {log}"
    );
    assert_eq!(
        missed,
        slots,
        "each slot of the locked interval is missed (database unavailable): {:?} {log}",
        site.strings(&format!(
            "SELECT scheduled_at || ' ' || state || ' ' || created_at {interval}"
        ))
    );
    let all_missed = site.count("SELECT count(*) FROM exactly_firings WHERE state = 'missed'");
    let json: serde_json::Value = serde_json::from_str(&status).expect(&err);
    assert_eq!(
        json["missed_firings"].as_i64(),
        Some(all_missed),
        "status counts the missed slots: {status}"
    );
    assert!(
        log.contains("database back after"),
        "one line says the outage ended: {log}"
    );
}

#[test]
fn a_database_replaced_under_the_scheduler_stops_it_with_an_error() {
    let site = Site::new();
    every_second(&site);
    let db = site.path("exactly.db");
    let mut s = start_on(&site, &db, "s", &[]);
    assert!(
        wait_until(Duration::from_secs(10), || runs(&site) >= 1),
        "{}",
        site.log("s")
    );
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let (code, _, err) = site.exactly(&["init"]);
    assert_eq!(code, 0, "{err}");
    let code = s.wait(Duration::from_secs(8));
    let log = site.log("s");
    assert!(
        code.is_some_and(|c| c != 0),
        "the scheduler ran on (exit {code:?}): {log}"
    );
    let last = log.lines().last().unwrap_or("");
    assert!(
        last.contains(&db.display().to_string())
            && (last.contains("replaced") || last.contains("deleted")),
        "its last line names the database and what happened: {log}"
    );
    // The fresh database saw no run of the scheduler.
    assert_eq!(runs(&site), 0, "a run went to the fresh database: {log}");
}

#[test]
fn a_database_whose_folder_is_deleted_stops_the_scheduler() {
    let site = Site::new();
    every_second(&site);
    let dir = site.path("data");
    std::fs::create_dir(&dir).expect("mkdir");
    let db = dir.join("exactly.db");
    let mut s = start_on(&site, &db, "s", &[]);
    assert!(
        wait_until(Duration::from_secs(10), || site
            .log("s")
            .contains("started run")),
        "{}",
        site.log("s")
    );
    std::fs::remove_dir_all(&dir).expect("rm -r data");
    let code = s.wait(Duration::from_secs(8));
    let log = site.log("s");
    assert!(
        code.is_some_and(|c| c != 0),
        "the scheduler ran on (exit {code:?}): {log}"
    );
    assert!(
        log.lines()
            .last()
            .is_some_and(|l| l.contains(&db.display().to_string()) && l.contains("deleted")),
        "its last line names the database: {log}"
    );
    assert!(!dir.exists(), "the folder was made again: {log}");
}

#[test]
fn a_corrupt_database_is_retried_with_back_off_not_in_a_spin() {
    let site = Site::new();
    every_second(&site);
    let db = site.path("exactly.db");
    let mut s = start_on(&site, &db, "s", &[]);
    assert!(
        wait_until(Duration::from_secs(10), || runs(&site) >= 2),
        "{}",
        site.log("s")
    );
    let before = site.log("s");
    corrupt(&db);
    // Let it meet the corruption, then watch it for 5 s.
    std::thread::sleep(Duration::from_secs(2));
    let (cpu0, t0, err0) = (
        cpu_seconds(s.child.id()),
        Instant::now(),
        errors(&site.log("s")),
    );
    std::thread::sleep(Duration::from_secs(5));
    let cpu = cpu_seconds(s.child.id()) - cpu0;
    let wall = t0.elapsed().as_secs_f64();
    let log = site.log("s");
    let new_errors = errors(&log) - err0;
    assert_eq!(s.term(Duration::from_secs(10)), Some(0), "{log}");
    assert!(
        errors(&log) - errors(&before) >= 1,
        "the failure is said at least once: {log}"
    );
    assert!(
        new_errors < 10,
        "{new_errors} ERROR lines in {wall:.1}s: {}",
        &log[log.len().saturating_sub(3000)..]
    );
    assert!(
        cpu < 0.2 * wall,
        "{cpu:.2}s of CPU in {wall:.1}s while the database failed"
    );
}

#[test]
fn a_database_failing_past_give_up_after_stops_the_scheduler() {
    let site = Site::new();
    every_second(&site);
    let db = site.path("exactly.db");
    let mut s = start_on(&site, &db, "s", &["--give-up-after", "3s"]);
    assert!(
        wait_until(Duration::from_secs(10), || runs(&site) >= 1),
        "{}",
        site.log("s")
    );
    corrupt(&db);
    let code = s.wait(Duration::from_secs(15));
    let log = site.log("s");
    assert_eq!(code, Some(1), "{log}");
    let last = log.lines().last().unwrap_or("");
    assert!(
        last.contains("giving up") && last.contains("unavailable") && last.contains("3.0s"),
        "its last line says why: {log}"
    );
}

/// A TCP forwarder to PostgreSQL that the test can cut (every connection dropped, new ones
/// refused) and restore: a server outage without touching the shared server.
struct Proxy {
    addr: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Proxy {
    fn to(upstream: String) -> Proxy {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let proxy = Proxy {
            addr,
            cut: Default::default(),
            conns: Default::default(),
        };
        let (cut, conns) = (proxy.cut.clone(), proxy.conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let Ok(server) = std::net::TcpStream::connect(&upstream) else {
                    continue;
                };
                let pipe = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                };
                let mut held = conns.lock().unwrap_or_else(|e| e.into_inner());
                if let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
                    client.try_clone(),
                    server.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                ) {
                    held.push(c3);
                    held.push(s3);
                    pipe(client, s2);
                    pipe(server, c2);
                }
            }
        });
        proxy
    }
    /// Drops every connection and refuses new ones until `restore`.
    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut held = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        for s in held.drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
    fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

// PostgreSQL only: the outage is a server's (a proxy cut), the SQLite tests above hold a lock.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn slots_during_a_postgres_outage_are_missed_for_that_reason_and_none_runs_late() {
    let _pg = support::backend::enter_postgres();
    let site = Site::new();
    every_second(&site);
    let url = site.db();
    // postgres://user:pass@HOST:PORT/db?…: the scheduler goes through the proxy.
    let at = url.find('@').expect("a URL with user@host") + 1;
    let end = at + url[at..].find('/').expect("a URL with /database");
    let proxy = Proxy::to(url[at..end].to_string());
    let through = format!("{}{}{}", &url[..at], proxy.addr, &url[end..]);
    let mut s = start_on(&site, Path::new(&through), "s", &[]);
    assert!(
        wait_until(Duration::from_secs(10), || runs(&site) >= 2),
        "{}",
        site.log("s")
    );
    proxy.cut();
    let down = chrono::Utc::now();
    std::thread::sleep(Duration::from_secs(8));
    let errors_during = errors(&site.log("s"));
    proxy.restore();
    let too_late = chrono::Utc::now() - chrono::Duration::milliseconds(2500);
    let after = runs(&site);
    assert!(
        wait_until(Duration::from_secs(15), || runs(&site) >= after + 2),
        "firing resumed after the outage: {}",
        site.log("s")
    );
    assert_eq!(
        s.term(Duration::from_secs(10)),
        Some(0),
        "{}",
        site.log("s")
    );
    let log = site.log("s");
    assert!(errors_during < 10, "{errors_during} ERROR lines: {log}");
    assert_eq!(
        site.count("SELECT count(*) FROM exactly_firings WHERE kind = 'catchup'"),
        0,
        "a slot was fired as a catch-up beyond its window (0): {log}"
    );
    let fmt = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let interval = format!(
        "FROM exactly_firings WHERE scheduled_at > '{}' AND scheduled_at < '{}'",
        // As above: the slot within a second of the outage may have been decided before it.
        fmt(down + ahead()),
        fmt(too_late)
    );
    let slots = site.count(&format!("SELECT count(*) {interval}"));
    let missed = site.count(&format!(
        "SELECT count(*) {interval} AND state = 'missed' AND detail = 'database unavailable'"
    ));
    assert!(slots >= 4, "{slots} slots recorded in the outage: {log}");
    assert_eq!(missed, slots, "each slot of the outage is missed: {log}");
}

/// Two crashes in a row: a scheduler that ended an outage (its slot left as the outage's, no
/// catch-up window) dies before the job's next slot, and the one after it does not call that
/// slot missed: it picks up where the first outage ended.
#[test]
fn a_second_crash_does_not_turn_the_first_outage_into_misses() {
    let site = Site::new();
    site.write_jobs(&format!(
        "[[job]]\nname = \"slow\"\nevery = \"10s\"\nlease = \"2s\"\ntimeout = \"1s\"\n\
         overlap = \"coalesce\"\ncommand = {}\n",
        sh("true")
    ));
    let mut s = site.start("s", "2s");
    assert!(
        wait_until(Duration::from_secs(12), || runs(&site) >= 1),
        "{}",
        site.log("s")
    );
    s.kill9();
    // Down for 14 s: one slot falls due with no scheduler alive, past its start window when the
    // next scheduler starts (4 s later), and the slot after it 6 s away.
    std::thread::sleep(Duration::from_secs(14));
    let mut s = site.start("s", "2s");
    let outages = |site: &Site| {
        site.count("SELECT count(*) FROM exactly_events WHERE kind = 'scheduler_outage'")
    };
    assert!(wait_until(Duration::from_secs(3), || outages(&site) == 1));
    std::thread::sleep(Duration::from_millis(300));
    s.kill9();
    std::thread::sleep(Duration::from_secs(3));
    let mut s = site.start("s", "2s");
    assert!(wait_until(Duration::from_secs(3), || outages(&site) == 2));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(s.term(Duration::from_secs(10)), Some(0));
    assert_eq!(
        site.counter("firing_missed"),
        0,
        "the first outage's slot was called missed: {:?}\n{}",
        site.strings(
            "SELECT scheduled_at || ' ' || coalesce(detail, '') FROM exactly_firings \
                      WHERE state = 'missed'"
        ),
        site.log("s")
    );
}

/// A warning that repeats (the heartbeat failing every 2 s on a locked or full database) is
/// said once, then at most once a minute with a count, and its end once: not every beat.
#[test]
fn a_failing_heartbeat_is_said_once_not_every_beat() {
    let site = Site::new();
    every_second(&site);
    let mut s = site.start_with_env("s", "1s", &[("EXACTLY_BUSY_TIMEOUT_MS", "200")]);
    assert!(
        wait_until(Duration::from_secs(10), || runs(&site) >= 2),
        "{}",
        site.log("s")
    );
    // Another process holds the write lock for 9 s: four or five beats fail.
    let c = site.conn();
    c.execute_batch("BEGIN IMMEDIATE").expect("lock");
    std::thread::sleep(Duration::from_secs(9));
    c.execute_batch("COMMIT").expect("unlock");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(s.term(Duration::from_secs(10)), Some(0));
    let log = site.log("s");
    let said = log.lines().filter(|l| l.contains(" heartbeat: ")).count();
    assert!(said >= 1, "the failing heartbeat was never said: {log}");
    assert!(
        said <= 2,
        "the failing heartbeat was said {said} times in 9 s (once, then its end): {log}"
    );
}

on_both_backends! {
    /// A scheduler SIGKILLed and started again 10 s later: the slots that fell due meanwhile are an
    /// outage, not misses. One `scheduler_outage` event says how long no scheduler was alive; the
    /// job with a catch-up window fires them late; the one without does not run them, and neither
    /// counts a missed firing (FiringMissed stays quiet: NoSchedulerAlive is the outage's alert).
    #[test]
    fn a_short_crash_is_one_outage_caught_up_and_never_missed() {
        let site = Site::new();
        let job = |name: &str, catchup: &str| {
            format!(
                "[[job]]\nname = \"{name}\"\nevery = \"1s\"\nlease = \"900ms\"\ntimeout = \"500ms\"\n\
                 overlap = \"coalesce\"\n{catchup}command = {}\n\n",
                sh("true")
            )
        };
        site.write_jobs(&(job("caught", "catchup = \"1m\"\n") + &job("plain", "")));
        let mut s = site.start("s", "2s");
        assert!(
            wait_until(Duration::from_secs(10), || runs(&site) >= 4),
            "{}",
            site.log("s")
        );
        s.kill9();
        let killed = exactly::time::now();
        std::thread::sleep(Duration::from_secs(10));
        let restarted = exactly::time::now();
        let mut s = site.start("s", "2s");
        let caught_up = |site: &Site| {
            site.count(
                "SELECT count(*) FROM exactly_firings WHERE job_key = 'caught' AND kind = 'catchup'",
            )
        };
        // Of the 10 slots the crash held, the last two are within LATE_OK of the restart (on
        // time, not catch-ups), and the first may have been decided ahead of it by the killed
        // scheduler (resumed by the next, not caught up): at least 7 catch-ups.
        let ok = wait_until(Duration::from_secs(8), || caught_up(&site) >= 7);
        // A few more ticks: a late miss would show.
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(s.term(Duration::from_secs(10)), Some(0));
        let log = site.log("s");
        assert_eq!(
            site.counter("firing_missed"),
            0,
            "a short crash counted missed firings: {:?}\n{log}",
            site.strings(
                "SELECT job_key || ' ' || scheduled_at || ' ' || coalesce(detail, '') \
                          FROM exactly_firings WHERE state = 'missed'"
            )
        );
        assert_eq!(
            site.count("SELECT count(*) FROM exactly_firings WHERE state = 'missed'"),
            0
        );
        assert!(
            ok,
            "caught fired {} catch-up firings: {:?}\n{log}",
            caught_up(&site),
            site.strings(
                "SELECT scheduled_at || ' ' || kind || ' ' || state FROM exactly_firings \
                 WHERE job_key = 'caught' ORDER BY scheduled_at"
            )
        );
        // Every slot of the job with a catch-up window was fired: no hole where the outage was.
        let slots: Vec<_> = site
            .strings("SELECT scheduled_at FROM exactly_firings WHERE job_key = 'caught' ORDER BY 1")
            .iter()
            .filter_map(|t| exactly::time::parse(t))
            .collect();
        for w in slots.windows(2) {
            assert_eq!((w[1] - w[0]).num_milliseconds(), 1000, "a hole: {slots:?}");
        }
        let outages = site
            .strings("SELECT detail FROM exactly_events WHERE kind = 'scheduler_outage' ORDER BY id");
        assert_eq!(outages.len(), 1, "one outage: {outages:?}\n{log}");
        // Its length: from the last heartbeat before the kill to the restart (a beat is 2 s).
        let d = &outages[0];
        let times: Vec<_> = d
            .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
            .filter_map(exactly::time::parse)
            .collect();
        assert_eq!(times.len(), 2, "from and to in {d}");
        let (from, to) = (times[0], times[1]);
        assert!(
            from <= killed && killed - from < chrono::Duration::seconds(3),
            "outage from {from}, killed at {killed}: {d}"
        );
        assert!(
            to >= restarted && to - restarted < chrono::Duration::seconds(2),
            "outage to {to}, restarted at {restarted}: {d}"
        );
        let len = (to - from).num_milliseconds();
        assert!((10_000..13_500).contains(&len), "outage of {len} ms: {d}");
        assert!(
            d.contains(&exactly::time::human_ms(len as u64)),
            "the length in words: {d}"
        );
        assert!(!log.contains("missed: no scheduler ran them"), "{log}");
        eprintln!("outage: {d}; caught up {}", caught_up(&site));
    }
}

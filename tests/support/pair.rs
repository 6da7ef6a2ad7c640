//! Two real PostgreSQL servers for the failover tests: a primary and its asynchronous standby
//! (`initdb`, then `pg_basebackup -R`), on free ports in `target/tmp/pg-pair/PID-N`, run as the
//! `postgres` user through `runuser` when the tests run as root (as `cluster.rs` runs its one
//! server, whose helpers these are). A failover is made as `src/chaos/pg_pair.rs` makes it: the
//! primary's WAL senders SIGSTOPped (what it commits from then on stays on it), every process of
//! the primary SIGKILLed, the standby promoted.
//!
//! The server binaries: `EXACTLY_TEST_PG_BIN`, else those `build.rs` found, else the newest
//! `/usr/lib/postgresql/*/bin`; none is an error (the test fails: where build.rs found none it
//! is ignored, `cfg(exactly_no_pg)`, off CI). The servers are stopped and removed when the
//! [`Pair`] is dropped, and by a watcher (`cluster::watch`) if the test process dies first.
use super::cluster::{as_owner, free_port, give, run, watch, SERVER_BIN};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Where `initdb`, `pg_ctl` and `pg_basebackup` are.
pub(super) fn server_bin() -> Result<PathBuf, String> {
    let has = |d: &Path| {
        ["initdb", "pg_ctl", "pg_basebackup"]
            .iter()
            .all(|b| d.join(b).is_file())
    };
    if let Some(dir) = std::env::var_os("EXACTLY_TEST_PG_BIN").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return if has(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "EXACTLY_TEST_PG_BIN={}: no initdb, pg_ctl and pg_basebackup there",
                dir.display()
            ))
        };
    }
    if let Some(dir) = SERVER_BIN.filter(|b| !b.is_empty()).map(PathBuf::from) {
        if has(&dir) {
            return Ok(dir);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| has(d))
        .collect();
    found.sort_by_key(|d| {
        d.parent()
            .and_then(Path::file_name)
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().ok_or_else(|| {
        "no PostgreSQL server (initdb, pg_ctl, pg_basebackup) for the two-server failover tests: \
         install it or set EXACTLY_TEST_PG_BIN (see CONTRIBUTING.md)"
            .to_string()
    })
}

/// One server of the pair: its directory (the data directory is `data` in it) and port.
#[derive(Debug)]
pub struct Server {
    bin: PathBuf,
    pub dir: PathBuf,
    pub port: u16,
}

impl Server {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100 -c fsync=off \
             -c wal_level=replica -c max_wal_senders=4 -c wal_sender_timeout=0",
            self.port,
            self.dir.display()
        );
        run(
            "pg_ctl start",
            as_owner(&self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.dir.join("log"))
                .args(["-w", "-o", &options, "start"]),
        )
        .map_err(|e| {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            format!("{e}\n{log}")
        })
    }

    /// A connection as the superuser, to the `exactly` database.
    pub fn client(&self) -> Result<::postgres::Client, String> {
        let conn = format!(
            "host=127.0.0.1 port={} user=postgres dbname=exactly",
            self.port
        );
        ::postgres::Client::connect(&conn, ::postgres::NoTls)
            .map_err(|e| format!("connecting to 127.0.0.1:{}: {e}", self.port))
    }

    /// The URL of this server alone, as the `exactly` role.
    pub fn url(&self) -> String {
        format!("postgres://exactly:exactly@127.0.0.1:{}/exactly", self.port)
    }

    fn postmaster(&self) -> Result<i32, String> {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .map_err(|e| format!("{}: {e}", self.data().join("postmaster.pid").display()))?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| "postmaster.pid names no pid".to_string())
    }

    fn stop(&self) {
        let _ = as_owner(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The pids whose parent is `parent` (from /proc).
fn children(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let after = s.rsplit_once(')')?.1;
                    after.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// A primary and its asynchronous standby, streaming; stopped and removed when dropped.
#[derive(Debug)]
pub struct Pair {
    pub primary: Server,
    pub standby: Server,
    root: PathBuf,
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.standby.stop();
        self.primary.stop();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

impl Pair {
    /// Starts the two servers (a role and database `exactly` on both) and waits until the
    /// standby streams.
    pub fn start() -> Result<Pair, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let started = Instant::now();
        let bin = server_bin()?;
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("pg-pair")
            .join(format!(
                "{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        give(&root)?;
        let server = |name: &str| -> Result<Server, String> {
            let dir = root.join(name);
            std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            give(&dir)?;
            // The watcher first: a start that fails half way is cleaned up too.
            watch(&bin, &dir)?;
            Ok(Server {
                bin: bin.clone(),
                dir,
                port: free_port()?,
            })
        };
        let pair = Pair {
            primary: server("primary")?,
            standby: server("standby")?,
            root,
        };
        let p = &pair.primary;
        run(
            "initdb",
            as_owner(&bin.join("initdb")).arg("-D").arg(p.data()).args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ]),
        )?;
        p.start()?;
        let admin = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            p.port
        );
        let mut c = ::postgres::Client::connect(&admin, ::postgres::NoTls)
            .map_err(|e| format!("connecting to the primary: {e}"))?;
        // Two statements: CREATE DATABASE cannot run in the transaction a batch would be.
        for sql in [
            "CREATE ROLE exactly LOGIN PASSWORD 'exactly'",
            "CREATE DATABASE exactly OWNER exactly",
        ] {
            c.batch_execute(sql)
                .map_err(|e| format!("{sql}: {}", super::pg::describe(&e)))?;
        }
        run(
            "pg_basebackup",
            as_owner(&bin.join("pg_basebackup"))
                .args(["-h", "127.0.0.1", "-p", &p.port.to_string()])
                .args([
                    "-U",
                    "postgres",
                    "-R",
                    "-X",
                    "stream",
                    "-c",
                    "fast",
                    "--no-sync",
                    "-D",
                ])
                .arg(pair.standby.data()),
        )?;
        pair.standby.start()?;
        pair.wait_streaming()?;
        eprintln!(
            "a primary on 127.0.0.1:{} and its standby on 127.0.0.1:{} (started in {:.1?})",
            pair.primary.port,
            pair.standby.port,
            started.elapsed()
        );
        Ok(pair)
    }

    /// The multi-host URL: whichever of the two accepts writes.
    pub fn url(&self) -> String {
        format!(
            "postgres://exactly:exactly@127.0.0.1:{},127.0.0.1:{}/exactly\
             ?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    /// The first value `sql` selects on the primary, until `cond` holds or 30 s pass.
    fn wait_on_primary(&self, what: &str, sql: &str) -> Result<(), String> {
        let mut c = self.primary.client()?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            let yes: bool = c
                .query_one(sql, &[])
                .map_err(|e| format!("{sql}: {}", super::pg::describe(&e)))?
                .get(0);
            if yes {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("{what} within 30 s"))
    }

    fn wait_streaming(&self) -> Result<(), String> {
        self.wait_on_primary(
            "the standby did not start streaming",
            "SELECT count(*) > 0 FROM pg_stat_replication WHERE state = 'streaming'",
        )
    }

    /// Waits until the standby has replayed all the primary wrote.
    pub fn wait_caught_up(&self) -> Result<(), String> {
        self.wait_on_primary(
            "the standby did not catch up",
            "SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false)
             FROM pg_stat_replication",
        )
    }

    /// SIGSTOP to the primary's WAL senders: what it commits from now on stays on it (the
    /// standby lags, as an asynchronous one may).
    pub fn hold_stream(&self) -> Result<(), String> {
        let mut c = self.primary.client()?;
        let rows = c
            .query("SELECT pid FROM pg_stat_replication", &[])
            .map_err(|e| format!("pg_stat_replication: {}", super::pg::describe(&e)))?;
        if rows.is_empty() {
            return Err("the primary has no WAL sender to hold".into());
        }
        for r in &rows {
            let pid: i32 = r.get(0);
            // SAFETY: kill(2) on a server process this test started; no memory is involved.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
        }
        Ok(())
    }

    /// The failover: SIGKILL to the primary's postmaster and every process it started at once
    /// (the machine is gone), then the standby promoted (`pg_ctl promote -w`).
    pub fn fail_over(&self) -> Result<(), String> {
        let pm = self.primary.postmaster()?;
        let mut pids = vec![pm];
        pids.extend(children(pm));
        for pid in pids {
            // SAFETY: kill(2) on a server process this test started; a pid gone is ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        run(
            "pg_ctl promote",
            as_owner(&self.standby.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.standby.data())
                .args(["-w", "promote"]),
        )
    }
}

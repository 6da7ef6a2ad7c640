//! Two local PostgreSQL servers for the `failover` scenario (failover.rs): a primary and its
//! standby made with `initdb` and `pg_basebackup -R` on free ports, run as the `postgres` user
//! when root, the primary's processes found to stop and kill, the standby promoted.
use crate::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub(super) fn err(what: impl Into<String>) -> Error {
    Error::Store(format!("failover: {}", what.into()))
}

/// Where `initdb`, `pg_ctl`, `pg_basebackup` are.
pub(super) fn server_bin() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("EXACTLY_TEST_PG_BIN").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| err(format!("no PostgreSQL server in /usr/lib/postgresql: {e}")))?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").exists() && b.join("pg_basebackup").exists())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found
        .pop()
        .ok_or_else(|| err("no initdb and pg_basebackup under /usr/lib/postgresql/*/bin"))
}

pub(super) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `program` as the servers' owner: `postgres` through runuser as root (initdb refuses root).
pub(super) fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Runs `cmd` to its end; an error with its output when it fails.
pub(super) fn run_tool(what: &str, cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| err(format!("{what}: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "{what}: {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| err(format!("a port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| err(format!("a port: {e}")))?
        .port())
}

/// One local server: its data directory and port.
pub(super) struct Server {
    pub(super) bin: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) port: u16,
}

impl Server {
    pub(super) fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub(super) fn start(&self) -> Result<()> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100 -c fsync=off \
             -c wal_level=replica -c max_wal_senders=4 -c wal_sender_timeout=0",
            self.port,
            self.dir.display()
        );
        run_tool(
            "pg_ctl start",
            as_owner(&self.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.dir.join("log"))
                .args(["-w", "-o", &options, "start"]),
        )
        .map(drop)
    }

    pub(super) fn client(&self) -> Result<postgres::Client> {
        let conn = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        );
        postgres::Client::connect(&conn, postgres::NoTls)
            .map_err(|e| err(format!("connecting to 127.0.0.1:{}: {e}", self.port)))
    }

    /// The postmaster's pid, from `postmaster.pid`.
    pub(super) fn postmaster(&self) -> Result<i32> {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .map_err(|e| err(format!("postmaster.pid: {e}")))?;
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or_else(|| err("postmaster.pid names no pid"))
    }

    /// SIGKILL to the postmaster and every process it started, at once: the machine is gone.
    pub(super) fn kill_all(&self) -> Result<()> {
        let pm = self.postmaster()?;
        let mut pids = vec![pm];
        pids.extend(children(pm));
        for pid in pids {
            // SAFETY: kill has no memory preconditions; a pid already gone is ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        Ok(())
    }

    pub(super) fn stop(&self) {
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
pub(super) fn children(parent: i32) -> Vec<i32> {
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

/// The two servers, stopped and removed when dropped.
pub(super) struct Pair {
    pub(super) primary: Server,
    pub(super) standby: Server,
    pub(super) root: PathBuf,
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.standby.stop();
        self.primary.stop();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub(super) fn give(path: &Path) -> Result<()> {
    if is_root() {
        run_tool(
            "chown postgres",
            Command::new("chown").arg("postgres").arg(path),
        )?;
    }
    Ok(())
}

impl Pair {
    pub(super) fn start(root: &Path) -> Result<Pair> {
        let bin = server_bin()?;
        std::fs::create_dir_all(root).map_err(|e| err(format!("{}: {e}", root.display())))?;
        give(root)?;
        let server = |name: &str| -> Result<Server> {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).map_err(|e| err(format!("{}: {e}", dir.display())))?;
            give(&dir)?;
            Ok(Server {
                bin: bin.clone(),
                dir,
                port: free_port()?,
            })
        };
        let pair = Pair {
            primary: server("primary")?,
            standby: server("standby")?,
            root: root.to_path_buf(),
        };
        let p = &pair.primary;
        run_tool(
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
        let mut c = p.client()?;
        for sql in [
            "CREATE ROLE exactly LOGIN PASSWORD 'exactly'",
            "CREATE DATABASE exactly OWNER exactly",
        ] {
            c.batch_execute(sql)
                .map_err(|e| err(format!("{sql}: {e}")))?;
        }
        run_tool(
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
        Ok(pair)
    }

    pub(super) fn url(&self) -> String {
        format!(
            "postgres://exactly:exactly@127.0.0.1:{},127.0.0.1:{}/exactly\
             ?target_session_attrs=read-write",
            self.primary.port, self.standby.port
        )
    }

    pub(super) fn wait_streaming(&self) -> Result<()> {
        let mut c = self.primary.client()?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
                    &[],
                )
                .map_err(|e| err(format!("pg_stat_replication: {e}")))?
                .get(0);
            if n > 0 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(err("the standby did not start streaming within 30 s"))
    }

    /// Waits until the standby has replayed all the primary wrote.
    pub(super) fn wait_caught_up(&self) -> Result<()> {
        let mut c = self.primary.client()?;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            let caught: bool = c
                .query_one(
                    "SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false)
                     FROM pg_stat_replication",
                    &[],
                )
                .map_err(|e| err(format!("pg_stat_replication: {e}")))?
                .get(0);
            if caught {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(err("the standby did not catch up within 30 s"))
    }

    /// SIGSTOP to the primary's WAL senders: what it commits from now on stays on it.
    pub(super) fn hold_stream(&self) -> Result<usize> {
        let mut c = self.primary.client()?;
        let rows = c
            .query("SELECT pid FROM pg_stat_replication", &[])
            .map_err(|e| err(format!("pg_stat_replication: {e}")))?;
        for r in &rows {
            let pid: i32 = r.get(0);
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(pid, libc::SIGSTOP) };
        }
        Ok(rows.len())
    }

    /// Makes the primary wait for its standby (set after the base backup, so the standby does
    /// not inherit it and wait for a standby it does not have), and waits until it does.
    pub(super) fn synchronous(&self) -> Result<()> {
        let mut c = self.primary.client()?;
        // Two statements: ALTER SYSTEM runs outside a transaction block.
        for sql in [
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
            "SELECT pg_reload_conf()",
        ] {
            c.batch_execute(sql)
                .map_err(|e| err(format!("{sql}: {e}")))?;
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                    &[],
                )
                .map_err(|e| err(format!("pg_stat_replication: {e}")))?
                .get(0);
            if n > 0 {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(err("the standby did not become synchronous within 30 s"))
    }

    pub(super) fn promote(&self) -> Result<()> {
        run_tool(
            "pg_ctl promote",
            as_owner(&self.standby.bin.join("pg_ctl"))
                .arg("-D")
                .arg(self.standby.data())
                .args(["-w", "promote"]),
        )
        .map(drop)
    }
}

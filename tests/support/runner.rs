//! The runner's process tests: real `exactly` processes on real databases (SQLite files, or
//! PostgreSQL schemas: see `backend`).
use super::backend::{self, Backend, PgSchema};
pub use super::bin;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A temp dir holding a jobs file and a database (`exactly.db` in it, or a PostgreSQL schema).
pub struct Site {
    pub dir: tempfile::TempDir,
    /// The PostgreSQL schema of a site on that backend, dropped with the site.
    pub pg: Option<PgSchema>,
}

impl Site {
    /// A new site on this thread's backend.
    pub fn new() -> Site {
        Site {
            dir: tempfile::tempdir().expect("tempdir"),
            pg: match backend::current() {
                Backend::Sqlite => None,
                Backend::Postgres => Some(PgSchema::create()),
            },
        }
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    /// Live processes of this site (working in its directory, as the processes a scheduler
    /// started do) whose environment holds `KEY=VALUE`: how a firing's copies are found. Run
    /// ids and effect keys repeat across sites, so another test's processes must not count.
    pub fn procs_with_env(&self, key: &str, value: &str) -> Vec<i32> {
        let want = format!("{key}={value}");
        let here = self.dir.path().canonicalize().expect("site directory");
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|d| d.starts_with(&here))
            })
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|v| v == want.as_bytes()))
                    .unwrap_or(false)
            })
            .filter(|pid| alive(*pid))
            .collect()
    }
    /// What `--db` is given: the file's path, or the schema's URL.
    pub fn db(&self) -> String {
        match &self.pg {
            Some(schema) => schema.url.clone(),
            None => self.path("exactly.db").to_string_lossy().into_owned(),
        }
    }
    /// Whether the database has been created: the file exists, or the schema has a table.
    pub fn db_exists(&self) -> bool {
        match &self.pg {
            Some(_) => {
                self.count(
                    "SELECT count(*) FROM information_schema.tables \
                     WHERE table_schema = current_schema()",
                ) > 0
            }
            None => self.exists("exactly.db"),
        }
    }
    /// Runs SQL on the database (either backend); any error fails the test.
    pub fn execute(&self, sql: &str) {
        super::execute(Path::new(&self.db()), sql)
    }
    pub fn jobs(&self) -> String {
        self.path("jobs.toml").to_string_lossy().into_owned()
    }
    pub fn write_jobs(&self, toml: &str) {
        std::fs::write(self.jobs(), toml).expect("write jobs file");
    }
    /// Starts `exactly run` with its stderr in `<owner>.log`.
    pub fn start(&self, owner: &str, grace: &str) -> Sched {
        self.start_with_env(owner, grace, &[])
    }
    /// `start`, with extra environment for the scheduler.
    pub fn start_with_env(&self, owner: &str, grace: &str, env: &[(&str, &str)]) -> Sched {
        self.start_file(Path::new(&self.jobs()), owner, grace, env)
    }
    /// `exactly run FILE` (any jobs file) as `owner`, with its stderr in `<owner>.log`.
    pub fn start_file(&self, file: &Path, owner: &str, grace: &str, env: &[(&str, &str)]) -> Sched {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(&format!("{owner}.log")))
            .expect("log file");
        // Started from `/`, as a service manager starts it: whatever runs for a job must not
        // depend on where the scheduler happened to be started.
        let child = Command::new(bin())
            .current_dir("/")
            .args(["--db", &self.db(), "run"])
            .arg(file)
            .args(["--owner", owner, "--grace", grace])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start exactly run");
        Sched { child }
    }
    pub fn log(&self, owner: &str) -> String {
        super::read_or_empty(&self.path(&format!("{owner}.log")))
    }
    /// Runs an `exactly` command to its end: (exit code, stdout, stderr).
    /// Claims `job`'s lease for `dur` with `exactly lease claim`; its token.
    pub fn claim(&self, job: &str, dur: &str) -> String {
        let (code, token, err) = self.exactly(&["lease", "claim", "--job", job, "--for", dur]);
        assert_eq!(code, 0, "claim failed: {err}");
        token.trim().to_string()
    }

    pub fn exactly(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(bin())
            .arg("--db")
            .arg(self.db())
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("run exactly");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
    pub fn conn(&self) -> rusqlite::Connection {
        super::conn(Path::new(&self.db()))
    }
    pub fn count(&self, sql: &str) -> i64 {
        // A typo in the SQL must fail the test, never read as 0. Only a table not there yet
        // reads as 0: a poll may come before the scheduler it started created the schema.
        if let Some(schema) = &self.pg {
            let ours = ["exactly_", "job_lease", "effect_ledger"];
            return match super::pg::count(&schema.url, sql) {
                Ok(n) => n,
                // relation "exactly_runs" does not exist
                Err(e)
                    if e.undefined_table
                        && ours
                            .iter()
                            .any(|t| e.message.contains(&format!("relation \"{t}"))) =>
                {
                    0
                }
                Err(e) => panic!("{sql}: {}", e.message),
            };
        }
        match self.conn().query_row(sql, [], |r| r.get(0)) {
            Ok(n) => n,
            Err(e)
                if e.to_string().starts_with("no such table: exactly_")
                    || e.to_string().starts_with("no such table: job_lease")
                    || e.to_string().starts_with("no such table: effect_ledger") =>
            {
                0
            }
            Err(e) => panic!("{sql}: {e}"),
        }
    }
    pub fn counter(&self, kind: &str) -> i64 {
        self.count(&format!(
            "SELECT coalesce(sum(n), 0) FROM exactly_counters WHERE kind = '{kind}'"
        ))
    }
    pub fn strings(&self, sql: &str) -> Vec<String> {
        super::strings(Path::new(&self.db()), sql)
    }
    pub fn lines(&self, file: &str) -> Vec<String> {
        super::read_or_empty(&self.path(file))
            .lines()
            .map(str::to_string)
            .collect()
    }
    pub fn exists(&self, file: &str) -> bool {
        self.path(file).exists()
    }
}

pub struct Sched {
    pub child: Child,
}

impl Sched {
    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }
    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
    /// SIGTERM, then the exit code (None if it did not exit within `within`).
    pub fn term(&mut self, within: Duration) -> Option<i32> {
        self.signal(libc::SIGTERM);
        self.wait(within)
    }
    /// How it ended (a signal included), or None if still running after `within`.
    pub fn wait_status(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        super::poll(Duration::from_millis(20), within, || {
            self.child.try_wait().ok().flatten()
        })
    }
    pub fn wait(&mut self, within: Duration) -> Option<i32> {
        self.wait_status(within).and_then(|s| s.code())
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `cond` every 50 ms until it holds or `within` passes.
pub fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    super::poll(Duration::from_millis(50), within, || cond().then_some(())).is_some()
}

/// A job command (argv as TOML) that runs `script` in sh with `$X` for the exactly binary.
pub fn sh(script: &str) -> String {
    let script = script.replace("$X", &bin());
    format!("[\"sh\", \"-c\", {}]", toml_str(&script))
}

/// An `exactly effect` in a job's command: appends to the far side for the command's slot,
/// observed by `observe`, sending with `sh -c body`.
pub fn slot_effect(observe: &str, body: &str) -> String {
    format!(
        "$X effect --action append --target far --input slot=$EXACTLY_SCHEDULED_AT \
         --observe '{observe}' -- sh -c '{body}'"
    )
}

/// An observer that finds the effect's key at the start of a line of the file `far`.
pub fn receipt_observer(far: &str) -> String {
    format!("grep -q \"^$EXACTLY_EFFECT_KEY \" {far}")
}

/// A job command whose first run's effect (observed by `observe`) ends with `first` and every
/// later run's with `then`; the first run leaves its slot in the file `lost`.
pub fn losing_first(observe: &str, first: &str, then: &str) -> String {
    sh(&format!(
        "if [ ! -e lost ]; then echo $EXACTLY_SCHEDULED_AT > lost; {}; exit $?; fi; {}",
        slot_effect(observe, first),
        slot_effect(observe, then)
    ))
}

pub fn toml_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

pub fn dir_of(p: &str) -> &Path {
    Path::new(p).parent().expect("parent")
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(st) => st
            .rfind(')')
            .and_then(|i| st[i + 1..].split_whitespace().next().map(|s| s != "Z"))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Reads a pid a job's command wrote to `file`. The shell creates the file (`echo $$ > file`)
/// before it writes the pid: an empty file is waited on (5 s at most), then refused.
pub fn pid_in(site: &Site, file: &str) -> i32 {
    let read = || -> String {
        std::fs::read_to_string(site.path(file))
            .expect("pid file")
            .trim()
            .to_string()
    };
    wait_until(Duration::from_secs(5), || !read().is_empty());
    let text = read();
    text.parse()
        .unwrap_or_else(|e| panic!("a pid in {file}: {text:?}: {e}"))
}

/// The pids of `pids` whose parent is not among them: one per process tree (an observer's
/// `sh -c` and its `sleep` are one observer).
pub fn roots(pids: &[i32]) -> Vec<i32> {
    let ppid = |pid: i32| -> Option<i32> {
        let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        st[st.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    pids.iter()
        .copied()
        .filter(|p| ppid(*p).is_none_or(|pp| !pids.contains(&pp)))
        .collect()
}

/// Milliseconds since the Unix epoch, as the scheduler counts `every` slots.
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

//! The CLI's tests: one database (a file in a temp dir, or a PostgreSQL schema: see
//! `backend`), `exactly --db DB …` run to its end.
use super::backend::{self, Backend, PgSchema};
pub use super::bin;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Env {
    pub dir: tempfile::TempDir,
    /// What `--db` is given: the file `exactly.db` in `dir` on SQLite, the schema's URL (see
    /// `backend::with_search_path`) on PostgreSQL.
    pub db: PathBuf,
    /// `EXACTLY_MAX_SKEW` for every command, when a test is about something else than the
    /// clock-skew margin (the default margin delays every takeover of an expired lease).
    pub skew: Option<String>,
    /// `EXACTLY_CGROUP` for every command (`none`: no cgroups, the fallback alone).
    pub cgroup: Option<String>,
    /// The PostgreSQL schema behind `db`, dropped with the Env.
    pub pg: Option<PgSchema>,
}

impl Env {
    /// A new database on this thread's backend.
    pub fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let (db, pg) = match backend::current() {
            Backend::Sqlite => (dir.path().join("exactly.db"), None),
            Backend::Postgres => {
                let schema = PgSchema::create();
                (PathBuf::from(&schema.url), Some(schema))
            }
        };
        Env {
            dir,
            db,
            skew: None,
            cgroup: None,
            pg,
        }
    }

    /// The database string (the file's path, or the URL).
    pub fn db_str(&self) -> &str {
        self.db.to_str().expect("utf8 database path")
    }

    pub fn with_skew(mut self, skew: &str) -> Env {
        self.skew = Some(skew.to_string());
        self
    }

    /// Every command as on a machine where no cgroup can be made: the sender's containment is
    /// the watchdog and the environment cookie alone.
    pub fn without_cgroups(mut self) -> Env {
        self.cgroup = Some("none".into());
        self
    }

    /// Every command makes its cages under `dir` (`EXACTLY_CGROUP`): a cgroup v1 freezer
    /// hierarchy, say, on a machine where v2 would be found first.
    pub fn with_cgroup(mut self, dir: &str) -> Env {
        assert!(
            Path::new(dir).join("cgroup.procs").exists(),
            "{dir} is not a cgroup directory: this test needs the v1 freezer hierarchy mounted"
        );
        self.cgroup = Some(dir.into());
        self
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new(bin());
        c.arg("--db").arg(&self.db);
        c.env_remove("EXACTLY_FAULT")
            .env_remove("EXACTLY_JOB")
            .env_remove("EXACTLY_FENCING_TOKEN")
            .env_remove("EXACTLY_RUN_ID")
            .env_remove("EXACTLY_HOST")
            .env_remove("EXACTLY_MAX_SKEW")
            // The CLI's token memory of this test's own (not the user's state folder).
            .env("EXACTLY_TOKEN_MEMORY", self.dir.path().join("tokens"));
        if let Some(s) = &self.skew {
            c.env("EXACTLY_MAX_SKEW", s);
        }
        match &self.cgroup {
            Some(g) => c.env("EXACTLY_CGROUP", g),
            None => c.env_remove("EXACTLY_CGROUP"),
        };
        c
    }

    /// Runs `exactly --db DB ARGS…`; returns (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.cmd().args(args).output().expect("run exactly");
        split(out)
    }

    pub fn store(&self) -> exactly::Store {
        exactly::Store::open(self.db_str()).expect("open store")
    }

    pub fn claim(&self, job: &str, dur: &str) -> i64 {
        let (code, out, err) = self.run(&["lease", "claim", "--job", job, "--for", dur]);
        assert_eq!(code, 0, "claim failed: {err}");
        out.trim().parse().expect("token")
    }

    pub fn sql_count(&self, sql: &str) -> i64 {
        super::count(&self.db, sql)
    }

    /// Runs SQL on the database (either backend); any error fails the test.
    pub fn sql_execute(&self, sql: &str) {
        super::execute(&self.db, sql)
    }

    pub fn state_of(&self, key: &str) -> Option<String> {
        if super::pg_url_of(&self.db).is_some() {
            let sql = format!(
                "SELECT state FROM effect_ledger WHERE effect_key = '{}'",
                key.replace('\'', "''")
            );
            return super::strings(&self.db, &sql).into_iter().next();
        }
        match super::conn(&self.db).query_row(
            "SELECT state FROM effect_ledger WHERE effect_key = ?1",
            [key],
            |r| r.get(0),
        ) {
            Ok(s) => Some(s),
            Err(rusqlite::Error::QueryReturnedNoRows) => None,
            Err(e) => panic!("reading the state of {key}: {e}"),
        }
    }
}

pub fn split(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Lines in a far-side file equal to `needle`.
/// A far side that never received anything has no file yet; any other read error fails.
pub fn far_count(path: &Path, needle: &str) -> usize {
    super::read_or_empty(path)
        .lines()
        .filter(|l| l.trim() == needle)
        .count()
}

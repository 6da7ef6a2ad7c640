//! The failover of `failover_shown.rs` and `failover_window.rs`, made without a second server:
//! the timeline the database recorded in `exactly_meta` is rewritten (the server's own stays),
//! so the next connection finds a change, as the first connection to a promoted standby does.
//! (Two real servers and a real promotion: `failover_promoted.rs`, `tests/chaos/failover.rs`.)
use std::process::Command;
use support::backend::{enter_postgres, with_client, PgSchema, Using};

use crate::support;

/// `exactly --db DB ARGS…` with no failover setting from the environment: (exit code, stdout,
/// stderr).
pub fn exactly(db: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(support::bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("EXACTLY_DB")
        .env_remove("EXACTLY_FAILOVER_GUARD")
        .env_remove("EXACTLY_FAILOVER_WINDOW")
        .output()
        .expect("run exactly");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`exactly`], which must succeed: its stdout.
pub fn ok(db: &str, args: &[&str]) -> String {
    let (code, out, err) = exactly(db, args);
    assert_eq!(code, 0, "exactly {args:?}: {out}{err}");
    out
}

/// A PostgreSQL database of its own, initialised, whose job `j` had `leases` leases claimed and
/// released (tokens 1 to `leases`) before the failover.
pub struct Site {
    pub schema: PgSchema,
    _pg: Using,
}

impl Site {
    pub fn new(leases: usize) -> Site {
        let pg = enter_postgres();
        let site = Site {
            schema: PgSchema::create(),
            _pg: pg,
        };
        let db = site.db();
        ok(db, &["init"]);
        for _ in 0..leases {
            let token = ok(db, &["lease", "claim", "--job", "j", "--for", "1m"]);
            ok(
                db,
                &["lease", "release", "--job", "j", "--token", token.trim()],
            );
        }
        site
    }

    /// What `--db` is given.
    pub fn db(&self) -> &str {
        self.schema.url.as_str()
    }

    /// The failover: `rows` (the old timeline's rows the test needs, SQL; may be empty), then
    /// the recorded timeline rewritten, in one batch.
    pub fn fail_over(&self, rows: &str) {
        with_client(self.db(), |c| {
            c.batch_execute(&format!(
                "{rows}\nUPDATE exactly_meta SET value = value + 100 WHERE name = 'timeline';"
            ))
        })
        .expect("the old timeline's rows and the failover");
    }

    /// A value of `exactly_meta`.
    pub fn meta(&self, name: &str) -> i64 {
        with_client(self.db(), |c| {
            c.query_one("SELECT value FROM exactly_meta WHERE name = $1", &[&name])
                .map(|r| r.get(0))
        })
        .unwrap_or_else(|e| panic!("exactly_meta {name}: {e}"))
    }
}

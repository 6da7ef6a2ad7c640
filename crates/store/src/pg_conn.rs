//! One PostgreSQL connection: its prepared statements, the server's clock as last read on it,
//! and what it learnt of its server. The pool (`pg.rs`) makes them; a transaction (`db.rs`)
//! and the failover checks (`pg_timeline.rs`) use them.
use super::db_values::{Arg, DbError, DbResult};
use super::pg_types::{bind, placeholders, refs, Params};
use postgres::types::ToSql;
use postgres::{Client, Statement};
use std::collections::HashMap;

/// One connection and the statements prepared on it (a statement is parsed and planned once per
/// connection, as rusqlite's statement cache does on SQLite).
pub(crate) struct PgConn {
    pub(super) client: Client,
    pub(super) stmts: HashMap<String, Statement>,
    /// Set when a transaction could not be rolled back: the pool must not hand it out again.
    pub(super) broken: bool,
    /// The server's clock less this host's, as last read on this connection (the server's
    /// answer first, ours after it: never more than the true difference). A one-statement
    /// call moves the caller's instants by it, having no transaction start to read it from.
    pub(super) shift: chrono::Duration,
    /// What the connection learnt of its server when it was made: a standby, the window after a
    /// failover (`pg_timeline`).
    pub(crate) seen: Seen,
    /// Set by the server's warning that a commit stopped waiting for a synchronous standby (the
    /// statement timeout cancelled the wait): the commit is on the primary alone.
    pub(super) sync_wait_cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Cancels this connection's statement: set when its server waits for a synchronous
    /// standby, so that a commit waiting for one that is gone is cut (`pg_sync`).
    pub(super) cancel: Option<postgres::CancelToken>,
    /// When the pool last handed it out: one idle longer than [`IDLE_CHECK`] is checked first.
    pub(super) used: std::time::Instant,
}

impl PgConn {
    fn prepare(&mut self, sql: &str) -> DbResult<Statement> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let stmt = self.client.prepare(&placeholders(sql))?;
        if self.stmts.len() >= 256 {
            self.stmts.clear();
        }
        self.stmts.insert(sql.to_string(), stmt.clone());
        Ok(stmt)
    }

    pub(crate) fn exec(&mut self, sql: &str, args: &[Arg<'_>]) -> DbResult<usize> {
        let (stmt, bound) = self.bound(sql, args)?;
        Ok(self.client.execute(&stmt, &refs(&bound))? as usize)
    }

    pub(crate) fn query(&mut self, sql: &str, args: &[Arg<'_>]) -> DbResult<Vec<postgres::Row>> {
        let (stmt, bound) = self.bound(sql, args)?;
        Ok(self.client.query(&stmt, &refs(&bound))?)
    }

    /// The statement for `sql` and its parameters, converted.
    fn bound(&mut self, sql: &str, args: &[Arg<'_>]) -> DbResult<(Statement, Params)> {
        let stmt = self.prepare(sql)?;
        let bound = bind(&stmt, args)?;
        Ok((stmt, bound))
    }

    /// Runs statements that take no parameters (a transaction's start and end, the schema).
    pub(crate) fn batch(&mut self, sql: &str) -> DbResult<()> {
        Ok(self.client.batch_execute(sql)?)
    }

    /// Starts a transaction and reads the server's clock in the same round trip.
    pub(crate) fn begin(&mut self, how: &str) -> DbResult<String> {
        let now = server_now(&mut self.client, &format!("BEGIN {how}; "))?;
        self.saw_clock(&now);
        Ok(now)
    }

    /// Notes the server's clock `now` as read just now (after its reply came).
    pub(crate) fn saw_clock(&mut self, now: &str) {
        let here = exactly_words::time::now();
        if let Some(n) = exactly_words::time::parse(now) {
            self.shift = n - here;
        }
    }

    /// An instant the caller computed on this host's clock, on the server's (as `Tx::later`,
    /// by the difference last read on this connection). A released lease stays as it is.
    pub(crate) fn later(&self, at: &str) -> String {
        if at == super::RELEASED {
            return at.to_string();
        }
        match exactly_words::time::parse(at) {
            Some(t) => exactly_words::time::fmt(t + self.shift),
            None => at.to_string(),
        }
    }

    /// Runs `sql` with parameters the `Arg` conversions do not cover (arrays), prepared once.
    pub(crate) fn query_typed(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> DbResult<Vec<postgres::Row>> {
        let stmt = self.prepare(sql)?;
        Ok(self.client.query(&stmt, params)?)
    }
}

/// Runs `before` (statements without results) and reads the server's clock, in one round trip.
pub(super) fn server_now(client: &mut Client, before: &str) -> DbResult<String> {
    let msgs = client.simple_query(&format!(
        "{before}SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
    ))?;
    msgs.iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .ok_or_else(|| DbError::Other("the server did not say the time".into()))
}

/// A transaction of row compare-and-sets only (see `Store::write_cas`).
pub(crate) const READ_COMMITTED: &str = "ISOLATION LEVEL READ COMMITTED";

/// A write transaction: `SERIALIZABLE`.
pub(crate) const WRITE: &str = "ISOLATION LEVEL SERIALIZABLE";

/// What a connection learnt of its server when it was made.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seen {
    /// The server is in recovery (a standby): writes are refused with `pg_timeline::STANDBY`.
    pub(crate) standby: bool,
    /// Until when (Unix ms) the window after an asynchronous failover lasts; 0 for none.
    pub(crate) window_until_ms: i64,
    /// The server's commits wait for a synchronous standby (its settings say so).
    pub(crate) sync: bool,
    /// A change found by a connection that could not record it (a read-only process): checked
    /// again before the connection serves a write.
    pub(crate) pending: bool,
}

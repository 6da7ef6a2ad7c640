//! One way for the store's operations to speak SQL to either database: a transaction ([`Tx`])
//! that runs a statement with `Arg`s and hands back `Row`s, on SQLite (rusqlite) or
//! PostgreSQL (the `postgres` client). The operations are written once; where the two dialects
//! differ, an operation asks `Tx::is_pg` and says both.
use std::cell::RefCell;

pub(crate) use super::db_values::args;
pub(crate) use super::db_values::{Arg, DbError, DbResult, Optional, Row, ToArg, Value};

/// A transaction on either database. Every store operation runs its statements through one.
pub struct Tx<'t> {
    inner: Inner<'t>,
}

enum Inner<'t> {
    Lite(&'t rusqlite::Connection),
    Pg {
        conn: RefCell<&'t mut super::pg_conn::PgConn>,
        /// The server's clock at the start of this transaction (`now()`, which PostgreSQL keeps
        /// fixed for the whole transaction), as the store writes instants.
        now: String,
        /// The server's clock less this host's, read together at the transaction's start.
        shift: chrono::Duration,
    },
}

impl<'t> Tx<'t> {
    pub(crate) fn lite(conn: &'t rusqlite::Connection) -> Tx<'t> {
        Tx {
            inner: Inner::Lite(conn),
        }
    }

    pub(crate) fn pg(
        conn: &'t mut super::pg_conn::PgConn,
        now: String,
        shift: chrono::Duration,
    ) -> Tx<'t> {
        Tx {
            inner: Inner::Pg {
                conn: RefCell::new(conn),
                now,
                shift,
            },
        }
    }

    /// Whether this is PostgreSQL (for the few statements the two dialects say differently).
    pub(crate) fn is_pg(&self) -> bool {
        matches!(self.inner, Inner::Pg { .. })
    }

    /// The instant this transaction acts at. On SQLite, the caller's `now` (every process on
    /// the host shares its clock). On PostgreSQL, the server's clock, whatever the client's says:
    /// leases and effects on several hosts are judged by one clock.
    pub(crate) fn now<'a>(&'a self, caller: &'a str) -> &'a str {
        match &self.inner {
            Inner::Lite(_) => caller,
            Inner::Pg { now, .. } => now,
        }
    }

    /// An instant the caller computed on this host's clock as "now + d" (a lease's end), moved
    /// to this transaction's clock: the server's now + d on PostgreSQL (a little less: the time
    /// between the caller reading its clock and the transaction starting), unchanged on SQLite.
    /// A released lease (before every instant) stays as it is.
    pub(crate) fn later(&self, at: &str) -> String {
        match &self.inner {
            Inner::Pg { shift, .. } if at != super::RELEASED => {
                match exactly_words::time::parse(at) {
                    Some(t) => exactly_words::time::fmt(t + *shift),
                    None => at.to_string(),
                }
            }
            _ => at.to_string(),
        }
    }

    /// Runs a statement; the number of rows it changed.
    pub(crate) fn exec(&self, sql: &str, args: &[Arg<'_>]) -> DbResult<usize> {
        match &self.inner {
            Inner::Lite(c) => Ok(c
                .prepare_cached(sql)?
                .execute(rusqlite::params_from_iter(args.iter()))?),
            Inner::Pg { conn, .. } => conn.borrow_mut().exec(sql, args),
        }
    }

    /// Calls `f` on each row `sql` returns, in order.
    pub(crate) fn each(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        mut f: impl FnMut(&Row<'_>) -> DbResult<()>,
    ) -> DbResult<()> {
        match &self.inner {
            Inner::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args.iter()))?;
                while let Some(r) = rows.next()? {
                    f(&Row::Lite(r))?;
                }
                Ok(())
            }
            Inner::Pg { conn, .. } => {
                let rows = conn.borrow_mut().query(sql, args)?;
                for r in &rows {
                    f(&Row::Pg(r))?;
                }
                Ok(())
            }
        }
    }

    /// Every row `sql` returns, each read by `f`.
    pub(crate) fn rows<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        mut f: impl FnMut(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<Vec<T>> {
        let mut out = Vec::new();
        self.each(sql, args, |r| {
            out.push(f(r)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// The first row `sql` returns, read by `f`; [`DbError::NoRows`] when there is none (see
    /// [`Optional::optional`]).
    pub(crate) fn one<T>(
        &self,
        sql: &str,
        args: &[Arg<'_>],
        f: impl FnOnce(&Row<'_>) -> DbResult<T>,
    ) -> DbResult<T> {
        match &self.inner {
            Inner::Lite(c) => {
                let mut stmt = c.prepare_cached(sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(args.iter()))?;
                match rows.next()? {
                    Some(r) => f(&Row::Lite(r)),
                    None => Err(DbError::NoRows),
                }
            }
            Inner::Pg { conn, .. } => {
                let rows = conn.borrow_mut().query(sql, args)?;
                match rows.first() {
                    Some(r) => f(&Row::Pg(r)),
                    None => Err(DbError::NoRows),
                }
            }
        }
    }
}

/// A SQLite write transaction begun and ended by cached statements: rusqlite's `Transaction`
/// parses `BEGIN IMMEDIATE` and `COMMIT` anew each time, two parses in every write. Rolled back
/// when dropped uncommitted (an error, a failed `COMMIT`, a panic).
pub(crate) struct LiteWrite<'c>(pub &'c rusqlite::Connection, bool);

impl<'c> LiteWrite<'c> {
    pub(crate) fn begin(conn: &'c rusqlite::Connection) -> rusqlite::Result<LiteWrite<'c>> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(LiteWrite(conn, false))
    }

    pub(crate) fn commit(mut self) -> rusqlite::Result<()> {
        self.0.prepare_cached("COMMIT")?.execute([])?;
        self.1 = true;
        Ok(())
    }
}

impl Drop for LiteWrite<'_> {
    fn drop(&mut self) {
        if !self.1 && !self.0.is_autocommit() {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

/// Set in a scheduler's process once its database is open: from then on a SQLite database is
/// opened without creating it, so a run (or the heartbeat) whose file was deleted fails
/// instead of starting a fresh, empty database where the old one was.
static NO_NEW_DATABASES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, this process opens only existing SQLite databases.
pub fn refuse_new_databases() {
    NO_NEW_DATABASES.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether opening a SQLite database may create its file.
pub(crate) fn may_create() -> bool {
    !NO_NEW_DATABASES.load(std::sync::atomic::Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::super::{record_event, NewEvent, Store};
    use super::{args, DbError};
    use exactly_words::state::EventKind;

    /// A write that fails after writing, or panics, leaves nothing behind and the connection
    /// ready for the next write (the guard rolls back, as rusqlite's `Transaction` did).
    #[test]
    fn a_failed_or_panicking_write_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("w.db").to_str().unwrap()).unwrap();
        let count = |store: &mut Store| {
            store
                .read(|tx| {
                    tx.one("SELECT count(*) FROM exactly_events", args![], |r| {
                        r.get::<i64>(0)
                    })
                })
                .unwrap()
        };
        let failed = store.write(|tx| {
            record_event(
                tx,
                &NewEvent::new(EventKind::JobPaused, "2026-01-01T00:00:00.000Z"),
            )?;
            Err::<(), _>(DbError::Other("stop here".into()))
        });
        assert!(failed.is_err());
        assert_eq!(count(&mut store), 0);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = store.write(|tx| -> super::DbResult<()> {
                record_event(
                    tx,
                    &NewEvent::new(EventKind::JobPaused, "2026-01-01T00:00:00.000Z"),
                )?;
                panic!("mid-write");
            });
        }));
        assert!(panicked.is_err());
        assert_eq!(count(&mut store), 0);
        store
            .write(|tx| {
                record_event(
                    tx,
                    &NewEvent::new(EventKind::JobPaused, "2026-01-01T00:00:00.000Z"),
                )
            })
            .unwrap();
        assert_eq!(count(&mut store), 1);
    }
}

//! Failover on PostgreSQL: every new connection reads the server's timeline (it changes when a
//! standby is promoted) and compares it with the one the database recorded in `exactly_meta`.
//! A change is a failover: it is recorded as a `failover` event and, with the guard on (the
//! default; `EXACTLY_FAILOVER_GUARD=off` turns it off, for the chaos harness), every job's
//! fencing token is raised to the next multiple of 2^32 above every token the promoted server
//! knows of, before the connection serves any claim, and a new job's first token starts there
//! too: the old primary, which issued fewer than 2^32 tokens per job since the last raise, can
//! have handed out none as high. When the old primary replicated asynchronously, a window opens
//! in which an effect without a row is checked before it is sent (see `docs/hosts.md`).
//!
//! A standby (in recovery) has no timeline of its own to compare: the connection is marked, and
//! a write on it is refused with a sentence that says so.
use super::db::{args, DbError, DbResult, Optional, Tx};
use super::pg_conn::{PgConn, Seen, READ_COMMITTED};
use super::{record_event, text_or_empty, NewEvent};
use exactly_words::state::EventKind;

/// The advisory lock the first connection after a failover holds while it raises the tokens.
const LOCK: i64 = 7203116;

/// Why an effect without a row is held after a failover (its `effect_unknown` event's detail).
pub(crate) const HOLD: &str = "held after an asynchronous failover: the ledger may have lost its \
     row; its observer, or a person (exactly resolve), says whether it was sent";

impl super::Store {
    /// Whether the window after an asynchronous failover is open (PostgreSQL only): an effect
    /// without a row is then recorded `unknown` before anything is sent (`Store::begin_tx`).
    pub(super) fn failover_window(&self, now: exactly_words::time::Ts) -> bool {
        match &self.conn {
            super::Conn::Pg(db) => db.failover_window(now),
            _ => false,
        }
    }

    /// Notes that the window closed (`held` found every effect accounted for): this process's
    /// next effects go the fast way again.
    pub(super) fn failover_window_closed(&self) {
        if let super::Conn::Pg(db) = &self.conn {
            db.failover_window_closed();
        }
    }
}

/// What a write on a standby is refused with.
pub(crate) const STANDBY: &str =
    "the server is a standby (in recovery): use target_session_attrs=read-write or the primary";

/// `failover_window_until_ms` of a window that lasts until every effect of the old timeline's
/// last leases is accounted for ([`held`] says when), the default.
pub(crate) const UNTIL_ACCOUNTED: i64 = i64::MAX;

/// The least the default window lasts: a key whose row the promoted server lost entirely is not
/// in the ledger, so only time bounds its retry (`failover_floor_until_ms`).
const LOST_KEYS_FLOOR: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether the guard is on: `EXACTLY_FAILOVER_GUARD` unset or anything but `off`/`0`.
pub(crate) fn guarded() -> bool {
    !matches!(
        std::env::var("EXACTLY_FAILOVER_GUARD").as_deref(),
        Ok("off") | Ok("0") | Ok("false")
    )
}

/// The window `EXACTLY_FAILOVER_WINDOW` sets (a fixed length; `0s`: none), or None: the default,
/// until every effect of the old timeline's last leases is accounted for.
fn window() -> Option<std::time::Duration> {
    std::env::var("EXACTLY_FAILOVER_WINDOW")
        .ok()
        .and_then(|w| exactly_words::time::parse_duration(&w).ok())
}

/// Whether the window after an asynchronous failover still holds an effect without a row at
/// `now` (the server's time), read in the transaction that would record the row. A fixed window
/// ends at its time. The default one stays open while any of these is left:
/// - a lease the promoted server knew of at the failover may still be held
///   (`failover_leases_until_ms`, the newest lease expiry then): its holder may be sending;
/// - an effect of the old timeline's last leases is open (`claimed`, `submitted`, `unknown`): a
///   row created before the failover (`failover_at_ms`) under its job's last token of the old
///   timeline (the highest below the raise), or one held or touched since the failover;
/// - the hour after the failover (`failover_floor_until_ms`): a key whose row the promoted server
///   lost is not in the ledger, so only time bounds its retry.
///
/// Once none is left it closes for good (`failover_window_until_ms` 0) and says so on stderr.
pub(crate) fn held(tx: &Tx<'_>, now: &str) -> DbResult<bool> {
    let until = meta(tx, "failover_window_until_ms")?.unwrap_or(0);
    let now_ms = exactly_words::time::parse(now)
        .ok_or_else(|| DbError::Other(format!("the server's time {now:?} is unreadable")))?
        .timestamp_millis();
    if until != UNTIL_ACCOUNTED {
        return Ok(now_ms < until);
    }
    let leases = meta(tx, "failover_leases_until_ms")?.unwrap_or(0);
    let floor_until = meta(tx, "failover_floor_until_ms")?.unwrap_or(0);
    if now_ms < leases.max(floor_until) {
        return Ok(true);
    }
    let at = exactly_words::time::fmt(
        chrono::DateTime::from_timestamp_millis(meta(tx, "failover_at_ms")?.unwrap_or(0))
            .unwrap_or_default(),
    );
    let floor = meta(tx, "token_floor")?.unwrap_or(0);
    let open: i64 = tx.one(
        concat!(
            "SELECT count(*) FROM effect_ledger e WHERE ",
            open_term!("e"),
            " AND e.created_at <= ?1
           AND (e.updated_at >= ?1
                OR e.fencing_token = (SELECT max(o.fencing_token) FROM effect_ledger o
                                      WHERE o.job_key = e.job_key AND o.fencing_token < ?2))"
        ),
        args![at.as_str(), floor],
        |r| r.get(0),
    )?;
    if open > 0 {
        return Ok(true);
    }
    set_meta(tx, "failover_window_until_ms", 0)?;
    eprintln!(
        "exactly: the window after the failover closed: every effect of the old timeline's last \
         leases is accounted for"
    );
    Ok(false)
}

/// The server's side: in recovery, its timeline, whether its commits wait for a standby, and
/// whether exactly's tables are there.
fn server(conn: &mut PgConn) -> DbResult<(bool, Option<i64>, bool, bool)> {
    let rows = conn.query(
        "SELECT pg_is_in_recovery(),
           CASE WHEN pg_is_in_recovery() THEN NULL
                ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END,
           current_setting('synchronous_standby_names') <> ''
             AND current_setting('synchronous_commit') IN ('on', 'remote_write', 'remote_apply'),
           to_regclass('exactly_meta') IS NOT NULL",
        &[],
    )?;
    let r = rows.first().ok_or(DbError::NoRows)?;
    let timeline = match r.try_get::<_, Option<String>>(1)? {
        Some(hex) => Some(
            i64::from_str_radix(&hex, 16)
                .map_err(|_| DbError::Other(format!("the server's timeline {hex:?} is not hex")))?,
        ),
        None => None,
    };
    Ok((r.try_get(0)?, timeline, r.try_get(2)?, r.try_get(3)?))
}

/// A value of `exactly_meta`.
fn meta(tx: &Tx<'_>, name: &str) -> DbResult<Option<i64>> {
    tx.one(
        "SELECT value FROM exactly_meta WHERE name = ?1",
        args![name],
        |r| r.get::<i64>(0),
    )
    .optional()
}

fn set_meta(tx: &Tx<'_>, name: &str, value: i64) -> DbResult<()> {
    tx.exec(
        "INSERT INTO exactly_meta (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        args![name, value],
    )?;
    Ok(())
}

/// Reads the server's timeline on a new connection and, when it differs from the recorded one,
/// records the failover and guards it (see the module). A connection of a process that only
/// reads (`may_write` false) writes nothing, and errors of a role that may not write
/// `exactly_meta` (a viewer): both leave the record and the guard to the next writer.
pub(crate) fn check(conn: &mut PgConn, may_write: bool) -> DbResult<Seen> {
    let (standby, timeline, sync, has_meta) = server(conn)?;
    let Some(timeline) = timeline.filter(|_| has_meta && !standby) else {
        return Ok(Seen {
            standby,
            window_until_ms: 0,
            sync,
            pending: false,
        });
    };
    let synchronous = sync;
    let sync = i64::from(sync);
    let recorded = {
        let now = String::new();
        let tx = Tx::pg(conn, now, chrono::Duration::zero());
        (
            meta(&tx, "timeline")?,
            meta(&tx, "sync_replication")?,
            meta(&tx, "failover_window_until_ms")?,
        )
    };
    let same = recorded.0 == Some(timeline) && recorded.1 == Some(sync);
    if !may_write || same {
        return Ok(Seen {
            standby: false,
            window_until_ms: recorded.2.unwrap_or(0),
            sync: synchronous,
            pending: !same,
        });
    }
    let now = conn.begin(READ_COMMITTED)?;
    let done = (|| {
        let tx = Tx::pg(conn, now.clone(), chrono::Duration::zero());
        // A synchronous standby gone must not hang every new connection on this commit (the
        // raise is made again from the tokens themselves at the next failover).
        tx.exec("SET LOCAL synchronous_commit = local", &[])?;
        tx.one("SELECT pg_advisory_xact_lock(?1)", args![LOCK], |_| Ok(()))?;
        let was = meta(&tx, "timeline")?;
        let was_sync = meta(&tx, "sync_replication")?.unwrap_or(0) == 1;
        if let Some(old) = was.filter(|&t| t != timeline) {
            failed_over(&tx, old, timeline, was_sync, &now)?;
        }
        set_meta(&tx, "timeline", timeline)?;
        set_meta(&tx, "sync_replication", sync)?;
        meta(&tx, "failover_window_until_ms")
    })();
    let done = done.and_then(|w| conn.batch("COMMIT").map(|()| w));
    match done {
        Ok(window) => Ok(Seen {
            standby: false,
            window_until_ms: window.unwrap_or(0),
            sync: synchronous,
            pending: false,
        }),
        Err(e) => {
            let _ = conn.batch("ROLLBACK");
            if matches!(e.sqlstate(), Some("42501") | Some("25006")) {
                return Ok(Seen::default());
            }
            Err(e)
        }
    }
}

/// The token every job gets after a failover: the next multiple of 2^32 above every token
/// the database knows of (and above the last raise).
pub(crate) fn raised(top: i64) -> i64 {
    ((top.max(0) >> 32) + 1) << 32
}

/// Records the failover from timeline `old` to `new` and, guarded, raises every fencing token
/// and opens the window after an asynchronous one.
fn failed_over(tx: &Tx<'_>, old: i64, new: i64, was_sync: bool, now: &str) -> DbResult<()> {
    let top: i64 = tx.one(
        "SELECT greatest(
           coalesce((SELECT max(fencing_token) FROM job_lease), 0),
           coalesce((SELECT max(fencing_token) FROM effect_ledger), 0),
           coalesce((SELECT max(value) FROM exactly_meta WHERE name = 'token_floor'), 0))",
        &[],
        |r| r.get(0),
    )?;
    let floor = raised(top);
    let how = if was_sync {
        "synchronous (nothing acknowledged was lost)"
    } else {
        "asynchronous (the last acknowledged commits may be lost)"
    };
    let detail = if guarded() {
        let jobs = tx.exec(
            "UPDATE job_lease SET fencing_token = ?1 WHERE fencing_token < ?1",
            args![floor],
        )?;
        set_meta(tx, "token_floor", floor)?;
        // `EXACTLY_FAILOVER_WINDOW=0s`: the operator says nothing could be lost (replication
        // they know was synchronous): no window.
        let fixed = window();
        let window = if was_sync || fixed.is_some_and(|w| w.is_zero()) {
            set_meta(tx, "failover_window_until_ms", 0)?;
            "no window".to_string()
        } else {
            let start = exactly_words::time::parse(now).ok_or_else(|| {
                DbError::Other(format!("the server's time {now:?} is unreadable"))
            })?;
            let until = match fixed {
                Some(w) => {
                    let end = start + chrono::Duration::from_std(w).unwrap_or_default();
                    set_meta(tx, "failover_window_until_ms", end.timestamp_millis())?;
                    exactly_words::time::fmt(end)
                }
                None => window_until_leases_end(tx, start)?,
            };
            // A row left `claimed` may have been `submitted`, even `done`, on the old primary:
            // it is checked as an effect without a row is, before anything is sent.
            let held = tx.exec(
                "UPDATE effect_ledger SET state = 'unknown', version = coalesce(version, 0) + 1,
                   updated_at = ?1 WHERE state = 'claimed'",
                args![now],
            )?;
            format!(
                "{held} claimed effect(s) held as unknown; effects without a row are checked \
                 before sending until {until}"
            )
        };
        format!(
            "timeline {old} -> {new}: the database failed over; replication was {how}; \
             fencing tokens of {jobs} job(s) raised to {floor}; {window}"
        )
    } else {
        format!(
            "timeline {old} -> {new}: the database failed over; replication was {how}; \
             guard off (EXACTLY_FAILOVER_GUARD): tokens not raised"
        )
    };
    eprintln!("exactly: {detail}");
    record_event(
        tx,
        &NewEvent::new(EventKind::Failover, now)
            .token(floor)
            .detail(&detail),
    )
}

/// The window after an asynchronous failover with no fixed length: until the newest lease the
/// promoted server knows of has ended (its holder may be sending until then), and not before
/// the floor. Recorded in `exactly_meta`; returns the event's words for it.
fn window_until_leases_end(tx: &Tx<'_>, start: exactly_words::time::Ts) -> DbResult<String> {
    // The newest lease the promoted server knows of: its holder may be sending
    // until it ends.
    // Compared as times, not by SQL's max() over the text, which a row
    // holding no time would win, hiding every real lease. Such a row is not
    // refused: that would stop this guard. Its end is unknown, so it is named
    // on stderr and in the event, and only the floor below bounds it.
    let mut leases = start;
    let mut unreadable = Vec::new();
    tx.each("SELECT job_key, lease_until FROM job_lease", &[], |r| {
        let until = text_or_empty(r, 1)?;
        match exactly_words::time::parse(&until) {
            Some(t) => leases = leases.max(t),
            None => unreadable.push(text_or_empty(r, 0)?),
        }
        Ok(())
    })?;
    if !unreadable.is_empty() {
        eprintln!(
            "exactly: the lease of job(s) {} holds no time (job_lease.lease_until): \
             the failover window does not wait for it",
            exactly_words::sanitize::inert_trunc(&unreadable.join(", "), 200)
        );
    }
    set_meta(tx, "failover_window_until_ms", UNTIL_ACCOUNTED)?;
    set_meta(tx, "failover_at_ms", start.timestamp_millis())?;
    set_meta(tx, "failover_leases_until_ms", leases.timestamp_millis())?;
    let floor_until = start + chrono::Duration::from_std(LOST_KEYS_FLOOR).unwrap_or_default();
    set_meta(
        tx,
        "failover_floor_until_ms",
        floor_until.timestamp_millis(),
    )?;
    let unread = if unreadable.is_empty() {
        String::new()
    } else {
        format!(
            "; {} lease(s) holding no time not waited for",
            unreadable.len()
        )
    };
    Ok(format!(
        "every effect of the old timeline's last leases is accounted for (and \
         not before {}){unread}",
        exactly_words::time::fmt(leases.max(floor_until))
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_raise_clears_every_token_of_the_epoch_below() {
        assert_eq!(super::raised(0), 1 << 32);
        assert_eq!(super::raised(405), 1 << 32);
        assert_eq!(super::raised((1 << 32) + 7), 2 << 32);
        assert_eq!(super::raised((2 << 32) - 1), 2 << 32);
    }
}

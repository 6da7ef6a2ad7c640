//! Commits that wait for a synchronous standby. With `synchronous_standby_names` set, PostgreSQL
//! acknowledges a commit only once a standby has it, and waits without end for a standby that is
//! gone (the statement timeout does not cut that wait). On a connection to such a server every
//! commit is watched: past `EXACTLY_SYNC_WAIT_MS` (default 30 s; a scheduler's `--give-up-after`
//! instead, see [`bound_by`]) the wait is cancelled, the server warns that the commit is on the
//! primary alone, and the store answers with that reason instead of hanging.
use super::db::{DbError, DbResult};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a commit whose wait for a synchronous standby was cut short is refused with (`{}`: what
/// set the bound).
fn sync_wait(by: &str) -> String {
    format!(
        "the commit waited too long ({by}) for a synchronous standby (synchronous_standby_names) \
         that did not answer: it is on the primary alone and a failover may lose it; bring the \
         standby back or change synchronous_standby_names"
    )
}

/// The bound a process set for itself ([`bound_by`]): its length in ms (0: none set) and what
/// set it.
static SET: parking_lot::Mutex<Option<(Duration, &'static str)>> = parking_lot::const_mutex(None);

/// Makes `bound` this process's wait for a synchronous standby, said to come from `by` in the
/// refusal (the scheduler: its `--give-up-after`), instead of `EXACTLY_SYNC_WAIT_MS`.
pub fn bound_by(bound: Duration, by: &'static str) {
    *SET.lock() = Some((bound, by));
}

/// How long a commit may wait for a synchronous standby, and what said so.
fn bound() -> (Duration, &'static str) {
    if let Some(set) = *SET.lock() {
        return (set.0.max(Duration::from_millis(100)), set.1);
    }
    let ms = std::env::var("EXACTLY_SYNC_WAIT_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(30_000);
    (Duration::from_millis(ms.max(100)), "EXACTLY_SYNC_WAIT_MS")
}

struct Watched {
    id: u64,
    deadline: Instant,
    token: postgres::CancelToken,
}

static WATCHED: parking_lot::Mutex<Vec<Watched>> = parking_lot::const_mutex(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(1);
static WATCHER: std::sync::Once = std::sync::Once::new();

/// A commit being watched; dropped when it returned.
pub(crate) struct Watch(Option<u64>);

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            WATCHED.lock().retain(|w| w.id != id);
        }
    }
}

/// Watches the statement about to run on the connection `token` cancels (None: its server does
/// not wait for standbys, and nothing is watched).
pub(crate) fn watch(token: Option<postgres::CancelToken>) -> Watch {
    let Some(token) = token else {
        return Watch(None);
    };
    WATCHER.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("exactly-sync-wait".into())
            .spawn(|| loop {
                std::thread::sleep(Duration::from_millis(100));
                let now = Instant::now();
                let due: Vec<postgres::CancelToken> = {
                    let mut watched = WATCHED.lock();
                    let (due, keep): (Vec<_>, Vec<_>) =
                        watched.drain(..).partition(|w| w.deadline <= now);
                    *watched = keep;
                    due.into_iter().map(|w| w.token).collect()
                };
                for t in due {
                    let _ = t.cancel_query(postgres::NoTls);
                }
            });
    });
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    WATCHED.lock().push(Watched {
        id,
        deadline: Instant::now() + bound().0,
        token,
    });
    Watch(Some(id))
}

/// The flag a connection's notice callback sets when the server says a commit stopped waiting
/// for its synchronous standby.
pub(crate) fn flag() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

/// Whether a notice is the server's word that a commit stopped waiting for a standby.
pub(crate) fn is_cut(message: &str) -> bool {
    message.contains("wait for synchronous replication")
}

/// An error when the server said the last commit stopped waiting for its synchronous standby.
pub(crate) fn check(cut: &AtomicBool) -> DbResult<()> {
    if cut.swap(false, Ordering::Relaxed) {
        return Err(DbError::Other(sync_wait(bound().1)));
    }
    Ok(())
}

//! The write queue within one process: writers take turns on a lock that wakes the next one
//! at once (SQLite's busy handler sleeps up to 100 ms between tries), and a scheduler's
//! firings go before its runs' writes (see `Store::write`).
use std::time::Duration;

/// Whose turn it is to write, within this process (see [`Store::write`]).
struct Gate {
    busy: bool,
    /// Writers marked first in line that are waiting: the others let them pass.
    first_waiting: usize,
}

static GATE: parking_lot::Mutex<Gate> = parking_lot::const_mutex(Gate {
    busy: false,
    first_waiting: 0,
});
/// Where writers wait: those marked first in line, and the others. A writer ending its turn
/// wakes one waiter, first in line if any (waking them all would wake hundreds of runs for
/// each end of a turn).
static FIRST_FREED: parking_lot::Condvar = parking_lot::Condvar::new();
static OTHERS_FREED: parking_lot::Condvar = parking_lot::Condvar::new();

/// A writer's turn; the next waiter is woken when it is dropped (a panic included).
pub(super) struct Turn;

impl Turn {
    /// Waits for the turn up to `wait`; `first` goes before every writer not marked so.
    pub(super) fn take(first: bool, wait: Duration) -> Option<Turn> {
        let deadline = std::time::Instant::now() + wait;
        let mut g = GATE.lock();
        if first {
            g.first_waiting += 1;
        }
        let blocked = |g: &Gate| g.busy || (!first && g.first_waiting > 0);
        let freed = if first { &FIRST_FREED } else { &OTHERS_FREED };
        let mut got = true;
        while blocked(&g) {
            if freed.wait_until(&mut g, deadline).timed_out() && blocked(&g) {
                got = false;
                break;
            }
        }
        if first {
            g.first_waiting -= 1;
        }
        if got {
            g.busy = true;
        }
        let wake_others = !got && first && g.first_waiting == 0 && !g.busy;
        drop(g);
        if wake_others {
            // Others may have waited for this writer only.
            OTHERS_FREED.notify_one();
        }
        got.then_some(Turn)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut g = GATE.lock();
        g.busy = false;
        let first = g.first_waiting > 0;
        drop(g);
        if first {
            FIRST_FREED.notify_one();
        } else {
            OTHERS_FREED.notify_one();
        }
    }
}

//! The write queue within one process: writers take turns on a lock that wakes the next one
//! at once (SQLite's busy handler sleeps up to 100 ms between tries), in four lanes: the lease
//! renewals that keep running commands alive go first, then a scheduler's firings (a firing
//! decided late is a command started late), then its runs' ends (an end recorded later holds
//! its lease a little longer, renewed meanwhile), then everything else (see `Store::write`).
use std::time::Duration;

/// A writer's lane: higher goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) enum Lane {
    #[default]
    Others = 0,
    /// A run's own writes: its end, and its lease confirmed before its command.
    Ends = 1,
    /// A scheduler's firings.
    Firings = 2,
    /// Lease renewals: a late one stops a live command at its deadline.
    Renewals = 3,
}

const LANES: usize = 4;

/// Whose turn it is to write, within this process (see [`Store::write`]).
struct Gate {
    busy: bool,
    /// Writers waiting in each lane.
    waiting: [usize; LANES],
}

static GATE: parking_lot::Mutex<Gate> = parking_lot::const_mutex(Gate {
    busy: false,
    waiting: [0; LANES],
});
/// Where each lane's writers wait. A writer ending its turn wakes one waiter of the highest lane
/// that has any (waking them all would wake hundreds of runs for each end of a turn).
static FREED: [parking_lot::Condvar; LANES] = [
    parking_lot::Condvar::new(),
    parking_lot::Condvar::new(),
    parking_lot::Condvar::new(),
    parking_lot::Condvar::new(),
];

impl Gate {
    fn blocked(&self, lane: usize) -> bool {
        self.busy || self.waiting[lane + 1..].iter().any(|n| *n > 0)
    }

    /// The highest lane with a waiter.
    fn next(&self) -> Option<usize> {
        (0..LANES).rev().find(|l| self.waiting[*l] > 0)
    }
}

/// A writer's turn; the next waiter is woken when it is dropped (a panic included).
pub(super) struct Turn;

impl Turn {
    /// Waits for the turn up to `wait`; a lane goes before every lower one.
    pub(super) fn take(lane: Lane, wait: Duration) -> Option<Turn> {
        let lane = lane as usize;
        let deadline = std::time::Instant::now() + wait;
        let mut g = GATE.lock();
        g.waiting[lane] += 1;
        let mut got = true;
        while g.blocked(lane) {
            if FREED[lane].wait_until(&mut g, deadline).timed_out() && g.blocked(lane) {
                got = false;
                break;
            }
        }
        g.waiting[lane] -= 1;
        if got {
            g.busy = true;
        }
        // A writer that gave up may have been the one a lower lane waited for.
        let wake = (!got && !g.busy).then(|| g.next()).flatten();
        drop(g);
        if let Some(l) = wake {
            FREED[l].notify_one();
        }
        got.then_some(Turn)
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut g = GATE.lock();
        g.busy = false;
        let next = g.next();
        drop(g);
        if let Some(l) = next {
            FREED[l].notify_one();
        }
    }
}

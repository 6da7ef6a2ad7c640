//! The clock a [`Store`] handle's operations read: the system's, or an instant a caller pinned
//! (a fixture written "as at" a fixed time, a test of what a dashboard shows at noon). One
//! clock on the handle, instead of an `…_at` twin of every operation. The store itself never
//! reads it: the library's operations read it and pass the time down.
use crate::Store;
use exactly_words::time::{self, Ts};

impl Store {
    /// Now, by this handle's clock.
    pub fn now(&self) -> Ts {
        self.pinned_now.unwrap_or_else(time::now)
    }

    /// Pins this handle's clock to `at` (None: the system's again). Every operation on the
    /// handle then acts as at that instant: what it records, and what it judges by the time.
    pub fn pin_clock(&mut self, at: Option<Ts>) {
        self.pinned_now = at;
    }

    /// Runs `f` with this handle's clock pinned to `at`, then gives the clock back as it was:
    /// one operation written as at an instant (a fixture's history, a replay).
    pub fn as_at<T>(&mut self, at: Ts, f: impl FnOnce(&mut Store) -> T) -> T {
        let before = self.pinned_now.replace(at);
        let out = f(self);
        self.pinned_now = before;
        out
    }

    /// [`Store::now`] as the database stores times (fixed-width UTC).
    pub fn now_text(&self) -> String {
        time::fmt(self.now())
    }
}

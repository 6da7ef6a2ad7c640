//! The clock a [`Store`] handle's operations read: the system's, or an instant a caller pinned
//! (a fixture written "as at" a fixed time, a test of what a dashboard shows at noon). One
//! clock on the handle, instead of an `…_at` twin of every operation. The store itself never
//! reads it: the library's operations read it and pass the time down.
use crate::store::Store;
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
    pub(crate) fn now_text(&self) -> String {
        time::fmt(self.now())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pinned_clock_is_what_operations_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let mut store = crate::store::Store::open(path.to_str().unwrap()).unwrap();
        let noon = exactly_words::time::parse("2026-06-01T12:00:00.000Z").unwrap();
        store.pin_clock(Some(noon));
        assert_eq!(store.now(), noon);
        crate::jobs::pause(&mut store, &exactly_words::JobName::from("j"), "ops", None).unwrap();
        let row = crate::jobs::record(&mut store, &exactly_words::JobName::from("j"))
            .unwrap()
            .unwrap();
        assert_eq!(row.updated_at.as_deref(), Some("2026-06-01T12:00:00.000Z"));
        store.pin_clock(None);
        assert!(store.now() > noon);
        // One operation as at an instant, and the clock given back.
        assert_eq!(store.as_at(noon, |s| s.now()), noon);
        assert!(store.now() > noon);
    }
}

//! Database connections lent to runs for the moment they need one.
//!
//! A run used to open a connection of its own before its command started and hold it to its
//! end: at a hundred firings a second that was a hundred opens (each checking the schema)
//! before the commands could start, and hundreds of idle connections. A run touches the
//! database only now and then (its observers' check, its output so far, its end), so it borrows
//! one for each and gives it back.
use crate::{Access, Result, Store};
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Idle connections kept per process; more are opened when more runs want one at once.
const KEEP: usize = 16;

static IDLE: Mutex<Vec<(String, Store)>> = Mutex::new(Vec::new());

/// How each database was first opened here: another handle on a PostgreSQL database this
/// process already prepared is made without checking its schema again (a read transaction per
/// run at a burst's end, when more runs than [`KEEP`] want one at once).
static OPENERS: Mutex<Vec<(String, crate::StoreOpener)>> = Mutex::new(Vec::new());

fn open(db: &str) -> Result<Store> {
    let known = OPENERS
        .lock()
        .ok()
        .and_then(|o| o.iter().find(|(d, _)| d == db).map(|(_, o)| o.clone()));
    if let Some(opener) = known {
        return opener.open();
    }
    let store = crate::open(Some(db), Access::Write)?;
    if let Ok(mut o) = OPENERS.lock() {
        o.push((db.to_string(), crate::reopener(&store)));
    }
    Ok(store)
}

/// A connection to `db`, given back when dropped.
pub(crate) struct Lent {
    db: String,
    store: Option<Store>,
}

/// A connection to `db`: an idle one, or a new one.
pub(crate) fn lend(db: &str) -> Result<Lent> {
    let idle = IDLE.lock().ok().and_then(|mut v| {
        let i = v.iter().rposition(|(d, _)| d == db)?;
        Some(v.swap_remove(i).1)
    });
    let store = match idle {
        Some(s) => s,
        None => open(db)?,
    };
    Ok(Lent {
        db: db.to_string(),
        store: Some(store),
    })
}

impl Lent {
    /// Replaces the connection with a new one (after an error it may not recover from).
    pub(crate) fn reopen(&mut self) -> Result<()> {
        self.store = Some(crate::open(Some(&self.db), Access::Write)?);
        Ok(())
    }
}

impl Deref for Lent {
    type Target = Store;
    fn deref(&self) -> &Store {
        match &self.store {
            Some(s) => s,
            None => unreachable!("a lent store is present until dropped"),
        }
    }
}

impl DerefMut for Lent {
    fn deref_mut(&mut self) -> &mut Store {
        match &mut self.store {
            Some(s) => s,
            None => unreachable!("a lent store is present until dropped"),
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else {
            return;
        };
        if let Ok(mut v) = IDLE.lock() {
            if v.len() < KEEP {
                v.push((std::mem::take(&mut self.db), store));
            }
        }
    }
}

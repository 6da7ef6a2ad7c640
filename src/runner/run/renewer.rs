//! One heartbeat for every run of a process: a thread that renews, in one write, the leases of
//! all the runs that are due (each a third of its lease after its last renewal), instead of a
//! write per run. Hundreds of runs at once would otherwise queue hundreds of renewals behind
//! each other and behind the firings, and a run whose renewal is late is stopped at its
//! deadline (see `hold.rs`). A run reads what the renewer heard from its [`Hold`].
use crate::{Access, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// How often the renewer looks for leases due.
const POLL: Duration = Duration::from_millis(20);
/// Longest a run's end waits for a renewal of its lease being written.
const RETIRE_WAIT: Duration = Duration::from_millis(500);
/// After a failed write, how long before the leases are tried again.
const RETRY: Duration = Duration::from_millis(100);

/// What the renewer knows of one run's lease.
#[derive(Debug, Clone, Copy)]
pub(super) struct Heard {
    /// When the write that last renewed (or granted) the lease was sent.
    pub renewed_at: Instant,
    /// A newer token holds the job.
    pub fenced: bool,
}

/// A run's lease as the renewer keeps it.
pub(super) struct Hold {
    job: crate::JobName,
    token: crate::Token,
    lease: Duration,
    state: Mutex<HoldState>,
}

struct HoldState {
    heard: Heard,
    /// The longest the lease went between two renewals (or its grant and the first).
    gap: Duration,
    next: Instant,
    /// The run has ended (its lease is being released): never renewed again.
    retired: bool,
    /// A renewal of it is being written now.
    in_flight: bool,
}

impl Hold {
    pub(super) fn heard(&self) -> Heard {
        self.state.lock().map(|s| s.heard).unwrap_or(Heard {
            renewed_at: Instant::now(),
            fenced: true,
        })
    }

    /// The longest the lease has gone without a renewal so far: between two renewals' writes,
    /// or since the last one (the run's command is stopped when this reaches its deadline).
    pub(super) fn renewal_gap(&self) -> Duration {
        self.state
            .lock()
            .map(|s| s.gap.max(s.heard.renewed_at.elapsed()))
            .unwrap_or_default()
    }

    /// A renewal the run wrote itself (before its command starts, or while its end waits).
    pub(super) fn renewed(&self, at: Instant) {
        if let Ok(mut s) = self.state.lock() {
            if at > s.heard.renewed_at {
                s.gap = s.gap.max(at - s.heard.renewed_at);
                s.heard.renewed_at = at;
                s.next = at + self.lease / crate::lease::RENEWALS_PER_LEASE;
            }
        }
    }

    /// The run is ending: no renewal is sent after this returns, and one being written is
    /// waited for (up to [`RETIRE_WAIT`]: a write hung on a lost connection must not hold up
    /// the end; a renewal landing after the release changes nothing, the released lease refuses
    /// it).
    pub(super) fn retire(&self) {
        let until = Instant::now() + RETIRE_WAIT;
        loop {
            match self.state.lock() {
                Ok(mut s) => {
                    s.retired = true;
                    if !s.in_flight || Instant::now() >= until {
                        return;
                    }
                }
                Err(_) => return,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Renewals go on (the end it retired for could not be recorded yet).
    pub(super) fn unretire(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.retired = false;
        }
    }
}

struct Renewer {
    holds: Mutex<Vec<Weak<Hold>>>,
}

/// Enlists a run's lease, granted by a write sent at `granted`, with the process's renewer for
/// the database `db` (started on first use).
pub(super) fn enlist(
    db: &str,
    job: &crate::JobName,
    token: crate::Token,
    lease: Duration,
    granted: Instant,
) -> Arc<Hold> {
    let hold = Arc::new(Hold {
        job: job.clone(),
        token,
        lease,
        state: Mutex::new(HoldState {
            heard: Heard {
                renewed_at: granted,
                fenced: false,
            },
            gap: Duration::ZERO,
            next: granted + lease / crate::lease::RENEWALS_PER_LEASE,
            retired: false,
            in_flight: false,
        }),
    });
    let renewer = renewer_for(db);
    if let Ok(mut holds) = renewer.holds.lock() {
        holds.push(Arc::downgrade(&hold));
    }
    hold
}

fn renewer_for(db: &str) -> Arc<Renewer> {
    static ALL: OnceLock<Mutex<HashMap<String, Arc<Renewer>>>> = OnceLock::new();
    let all = ALL.get_or_init(|| Mutex::new(HashMap::new()));
    let mut all = match all.lock() {
        Ok(a) => a,
        Err(p) => p.into_inner(),
    };
    all.entry(db.to_string())
        .or_insert_with(|| {
            let r = Arc::new(Renewer {
                holds: Mutex::new(Vec::new()),
            });
            let (me, db) = (r.clone(), db.to_string());
            std::thread::spawn(move || me.renew_forever(&db));
            r
        })
        .clone()
}

impl Renewer {
    fn renew_forever(&self, db: &str) {
        let mut store: Option<Store> = None;
        let mut failing = false;
        loop {
            std::thread::sleep(POLL);
            let due = self.due();
            if due.is_empty() {
                continue;
            }
            if store.is_none() {
                store = crate::open(Some(db), Access::Write).ok();
                if let Some(s) = store.as_mut() {
                    // Renewals go before the process's queued firings and ends.
                    crate::lease::renewer_first(s);
                }
            }
            // A renewal held up (a stalled thread, a starved process) lets the leases lapse.
            crate::fault::point(crate::fault::Point::Heartbeat);
            let sent = Instant::now();
            let leases: Vec<(&crate::JobName, crate::Token, Duration)> =
                due.iter().map(|h| (&h.job, h.token, h.lease)).collect();
            let result = match store.as_mut() {
                Some(s) => crate::lease::renew_many(s, &leases),
                None => Err(crate::Error::Store(format!("cannot open database {db}"))),
            };
            match &result {
                Ok(_) if failing => {
                    failing = false;
                    tracing::info!("lease renewals go through again");
                }
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!("lease renewal failed: {e}");
                    store = None;
                }
                Err(_) => store = None,
                Ok(_) => {}
            }
            for (i, h) in due.iter().enumerate() {
                let Ok(mut s) = h.state.lock() else { continue };
                s.in_flight = false;
                match result.as_ref().map(|r| r.get(i).copied().flatten()) {
                    Ok(Some(true)) => {
                        s.gap = s
                            .gap
                            .max(sent.saturating_duration_since(s.heard.renewed_at));
                        s.heard.renewed_at = s.heard.renewed_at.max(sent);
                        s.next = sent + h.lease / crate::lease::RENEWALS_PER_LEASE;
                    }
                    Ok(Some(false)) => s.heard.fenced = true,
                    // Released: its run is ending.
                    Ok(None) => s.retired = true,
                    Err(_) => s.next = Instant::now() + RETRY,
                }
            }
        }
    }

    /// The live holds due for renewal, marked in flight.
    fn due(&self) -> Vec<Arc<Hold>> {
        let Ok(mut holds) = self.holds.lock() else {
            return Vec::new();
        };
        holds.retain(|w| w.strong_count() > 0);
        let now = Instant::now();
        let mut out = Vec::new();
        for h in holds.iter().filter_map(Weak::upgrade) {
            let Ok(mut s) = h.state.lock() else { continue };
            if !s.retired && !s.heard.fenced && s.next <= now {
                s.in_flight = true;
                drop(s);
                out.push(h);
            }
        }
        out
    }
}

//! The dashboard (`exactly top`): the live operations screen for leases and the effect ledger.
//!
//! Data flows one way. A poll thread builds a [`Snapshot`] every `--refresh` and sends it over a
//! channel; the screen draws the last one it received, so drawing never
//! waits on the database. Keys become [`Request`] values for the same task (actions, detail
//! reads); the answers come back on the same channel as the snapshots.
pub(crate) mod input;
mod layout;
mod screen;
mod state;
mod view;

pub(crate) use state::{App, Focus, Loaded, Options, Pending, Reply, Report, Request};
pub(crate) use view::draw;

use crate::approval::{Decided, Resolved};
use crate::sanitize::inert;
use crate::snapshot::Snapshot;
use crate::{approval, effect, jobs, snapshot, Access, Error, Result, Store};
use clap::Args;
use crossterm::event::{Event, KeyEventKind};
use crossterm::{cursor, execute, terminal};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::io::{self, IsTerminal};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub(crate) struct TopArgs {
    /// How often to read the database.
    #[arg(long, default_value = "1s", value_name = "DUR")]
    pub refresh: String,
    /// Show only: approve, deny, resolve and pause are refused. The default when the database
    /// is not writable for this user (the header says so).
    #[arg(long)]
    pub read_only: bool,
    /// No colours (also when NO_COLOR is set); meaning is always in the text too.
    #[arg(long)]
    pub no_color: bool,
}

/// How many recent runs a job's detail shows.
pub(crate) const RUNS_SHOWN: usize = 200;

/// Does one piece of work against the database. The poll task runs this; tests call it directly
/// so they drive the same path.
pub(crate) fn serve(store: &mut Store, req: &Request) -> Vec<Reply> {
    match req {
        Request::Poll => vec![poll(store), judge(store)],
        Request::Load(focus) => vec![load(store, focus)],
        // The dashboard reads through a read-only connection; an action (which the operator
        // confirmed) writes through its own, opened from the URL as given: `db_name` hides a
        // PostgreSQL password, which a server that checks it would refuse.
        Request::Pending(act) => vec![
            match crate::reopener(store).with_access(Access::Write).open() {
                Ok(mut w) => perform(&mut w, act, &crate::actor()),
                Err(e) => Reply::Acted(Report {
                    ok: false,
                    text: format!("{} failed: {}", act.verb(), inert(&e.to_string())),
                }),
            },
            poll(store),
        ],
    }
}

/// How often an unchanged screen is drawn again so its ages move on. A frame of a large
/// dashboard costs milliseconds once its caches have gone cold between frames; once a second
/// that alone would be a dashboard's whole idle budget (measured by `cargo bench`).
pub(crate) const AGE_TICK: Duration = Duration::from_secs(5);

/// How often the screen hears "nothing changed" (it draws an unchanged screen every
/// [`AGE_TICK`]; the header's poll age must stay under the staleness limit of 5 s).
const UNCHANGED_TOLD_EVERY: Duration = Duration::from_millis(2500);

/// The longest a dashboard trusts "nothing committed" before it reads the snapshot again
/// anyway (a backstop for changes that come with time alone).
pub(crate) const FULL_POLL_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// A dashboard's polls: a whole [`Snapshot`] only when another connection committed since the
/// last one (SQLite's `data_version`) or when time alone changes what it shows — a lease ends,
/// a scheduler falls silent, a firing comes due — and otherwise [`Reply::Unchanged`]. An idle
/// dashboard on a large ledger then costs next to nothing.
///
/// The checklist (the ten rules, `exactly doctor`'s judgement) is judged with a snapshot at the
/// pace [`crate::checklist::Pace`] keeps: after a commit, and rarely on a large ledger.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    version: Option<i64>,
    /// When the last snapshot stops being true without any commit.
    due: Option<crate::time::Ts>,
    /// When the checklist is judged again, and the `data_version` it was last judged at.
    pace: crate::checklist::Pace,
    judged_version: Option<i64>,
}

impl Watch {
    pub(crate) fn poll(&mut self, store: &mut Store) -> Vec<Reply> {
        let now = crate::time::now();
        let version = match snapshot::data_version(store) {
            Ok(v) => v,
            Err(e) => return vec![Reply::PollFailed(e.to_string())],
        };
        if self.version == Some(version) && self.due.is_some_and(|d| now < d) {
            return vec![Reply::Unchanged(now)];
        }
        let reply = poll(store);
        match &reply {
            Reply::Snapshot(s) => {
                self.version = Some(version);
                self.due = Some(expires(s, now));
            }
            _ => self.forget(),
        }
        let mut replies = vec![reply];
        if self.version.is_some() && self.pace.due(self.judged_version != Some(version)) {
            self.judged_version = Some(version);
            replies.push(judged(
                self.pace
                    .check(store, &crate::checklist::Options::default()),
            ));
        }
        give_back_memory();
        replies
    }

    /// The next poll reads in full (after an action or a detail read), but the checklist keeps
    /// its own pace.
    pub(crate) fn forget(&mut self) {
        self.version = None;
        self.due = None;
    }

    /// As if the checklist was never judged.
    #[cfg(test)]
    pub(crate) fn judged_long_ago(&mut self) {
        self.pace = Default::default();
    }

    /// As if the checklist was last judged `ago`, taking `took`.
    #[cfg(test)]
    pub(crate) fn judged_at(&mut self, ago: Duration, took: Duration) {
        self.pace.judged_at(ago, took);
    }
}

/// Returns the heap a full read freed to the system. A judgement of the checklist on a
/// million-row ledger peaks at ~80 MB (SQLite's sorts, the rows read) and glibc keeps what was
/// freed: an idle dashboard then held 82 MB instead of 55 (measured with `exactly top` on the
/// bench's million-effect fixture, docs/performance.md).
fn give_back_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap pages; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One malloc arena for the whole process. The poll thread's reads and judgements otherwise
/// live in an arena of their own, which `malloc_trim` gave back less of: on the bench's
/// million-effect fixture an idle dashboard held 52 MB with glibc's default arenas and 41 MB
/// with one (docs/performance.md). The dashboard has two busy threads; they rarely allocate at
/// the same time, so sharing one arena's lock costs nothing measurable.
fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it has no preconditions.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The first instant at which `s` (taken at `now`) may be wrong although nothing was committed.
fn expires(s: &Snapshot, now: crate::time::Ts) -> crate::time::Ts {
    let mut due = crate::time::add(now, FULL_POLL_AT_LEAST_EVERY);
    let mut upto = |at: Option<crate::time::Ts>, plus: i64| {
        if let Some(t) = at {
            let t = t + chrono::Duration::seconds(plus);
            if t > now && t < due {
                due = t;
            }
        }
    };
    for j in &s.jobs {
        // A live lease's end turns its `submitted` rows into unknowns and its claims into leaks.
        upto(j.lease_until, 0);
        upto(j.next_fire_at, 0);
        upto(j.next_fire_at, crate::schedule::LATE_OK.as_secs() as i64);
    }
    for sc in s.schedulers.iter().filter(|sc| sc.alive) {
        upto(Some(sc.heartbeat_at), s.scheduler_dead_after_s);
    }
    due
}

fn poll(store: &mut Store) -> Reply {
    match Snapshot::read(store) {
        Ok(s) => Reply::Snapshot(Box::new(s)),
        Err(e) => Reply::PollFailed(e.to_string()),
    }
}

/// The ten rules judged as `exactly doctor` judges them, with no jobs file: what the database
/// recorded of each job's registration.
fn judge(store: &mut Store) -> Reply {
    judged(crate::checklist::check(
        store,
        &crate::checklist::Options::default(),
    ))
}

fn judged(c: Result<crate::checklist::Checklist>) -> Reply {
    match c {
        Ok(c) => Reply::Checklist(Box::new(c)),
        Err(e) => Reply::PollFailed(format!("cannot judge the checklist: {e}")),
    }
}

fn load(store: &mut Store, focus: &Focus) -> Reply {
    let r =
        match focus {
            Focus::Job(job) => jobs::recent_runs(store, &crate::JobName::from(job), RUNS_SHOWN)
                .map(|runs| Loaded::Job {
                    job: job.clone(),
                    runs,
                }),
            Focus::Run { run_id, .. } => jobs::run_output(store, run_id).map(|r| {
                let (row, output) = match r {
                    Some((row, out)) => (Some(Box::new(row)), out),
                    None => (None, String::new()),
                };
                Loaded::Run {
                    run_id: run_id.clone(),
                    row,
                    output,
                }
            }),
            Focus::Effect(key) => (|| {
                Ok(Loaded::Effect {
                    key: key.clone(),
                    row: effect::get(store, &crate::EffectKey::from(key))?.map(Box::new),
                    approval: approval::get(store, &crate::EffectKey::from(key))?.map(Box::new),
                    events: effect::events(store, &crate::EffectKey::from(key))?,
                })
            })(),
        };
    match r {
        Ok(l) => Reply::Loaded(l),
        Err(e) => Reply::LoadFailed(e.to_string()),
    }
}

/// Runs a confirmed action through the same library calls as the CLI, as `by`: its report, or
/// [`Reply::InFlight`] when a resolution needs a second confirmation.
pub(crate) fn perform(store: &mut Store, act: &Pending, by: &str) -> Reply {
    let ok = |text: String| Report { ok: true, text };
    let bad = |text: String| Report { ok: false, text };
    let who = inert(by);
    let toggled = |t: jobs::Toggled, job: &str| {
        let words = t.describe(job);
        if t.changed {
            ok(format!("{words} as {who}"))
        } else {
            bad(format!("{words}; nothing changed"))
        }
    };
    let r: Result<Reply> = (|| {
        Ok(Reply::Acted(match act {
            Pending::Approve { key, .. } | Pending::Deny { key, .. } => {
                let approve = matches!(act, Pending::Approve { .. });
                let d = if approve {
                    approval::approve(store, &crate::EffectKey::from(key), by, None)?
                } else {
                    approval::deny(store, &crate::EffectKey::from(key), by, None)?
                };
                let words = d.describe(key, approve);
                match d {
                    Decided::Done => ok(format!("{words} as {who}")),
                    Decided::Already { .. } => bad(format!("{words}; nothing changed")),
                    Decided::NotFound => bad(words),
                }
            }
            Pending::Resolve {
                key, how, force, ..
            } => {
                let r = approval::resolve(
                    store,
                    &crate::EffectKey::from(key),
                    *how,
                    by,
                    None,
                    None,
                    force.is_some(),
                )?;
                let words = r.describe(key, *how);
                match r {
                    Resolved::Done { forced: None, .. } => {
                        ok(format!("{words} ({}) as {who}", how.word()))
                    }
                    Resolved::Done {
                        forced: Some(s), ..
                    } => ok(format!(
                        "{words} ({}) as {who}; forced while in flight: {}",
                        how.word(),
                        s.describe()
                    )),
                    Resolved::InFlight(s) => {
                        let mut again = act.clone();
                        if let Pending::Resolve { force, .. } = &mut again {
                            *force = Some(s);
                        }
                        return Ok(Reply::InFlight(again, bad(words)));
                    }
                    _ => bad(words),
                }
            }
            Pending::Pause { job, note } => {
                let t = jobs::pause(store, &crate::JobName::from(job), by, note.as_deref())?;
                toggled(t, job)
            }
            Pending::Resume { job } => {
                toggled(jobs::resume(store, &crate::JobName::from(job), by)?, job)
            }
            Pending::Probe { job } => {
                let p = effect::probe(store, &crate::JobName::from(job), by)?;
                Report {
                    ok: p.suppressed(),
                    text: p.describe(),
                }
            }
        }))
    })();
    r.unwrap_or_else(|e| {
        Reply::Acted(bad(format!(
            "{} failed: {}",
            act.verb(),
            inert(&e.to_string())
        )))
    })
}

/// `exactly top`.
pub(crate) fn top_main(db: &Option<String>, a: TopArgs) -> Result<i32> {
    let refresh = crate::time::parse_duration(&a.refresh)?;
    if refresh < Duration::from_millis(100) {
        return Err(Error::Usage("--refresh must be at least 100ms".into()));
    }
    one_arena();
    // Open first, so a bad path is one sentence on a normal terminal, not a flash of UI.
    // Read-only: watching never changes the database (actions open their own connection).
    let mut store = crate::open(db.as_deref(), Access::ReadOnly)?;
    if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return Err(Error::Usage(
            "exactly top needs a terminal; for scripts use exactly status --json".into(),
        ));
    }
    let color = !a.no_color && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // A viewer account that may read but not write the database watches read-only, told so.
    let writable = crate::may_write(&mut store);
    let mut app = App::new(Options {
        read_only: a.read_only || !writable,
        color,
        refresh,
    });
    if !a.read_only && !writable {
        app.read_only_reason = Some("database not writable".into());
    }
    run(store, app, refresh)
}

/// Messages to the screen loop.
enum Msg {
    Term(Event),
    Reply(Reply),
    /// A signal (SIGTERM, SIGHUP, SIGINT, SIGQUIT) or a dead terminal.
    Quit(i32),
}

/// Puts the terminal back (raw mode off, main screen, cursor shown) however we leave.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        restore();
    }
}

fn restore() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
}

fn run(store: Store, mut app: App, refresh: Duration) -> Result<i32> {
    let (tx, rx) = mpsc::channel::<Msg>();

    quit_on_signals(tx.clone())?;

    let prev_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        prev_hook(info);
    }));

    terminal::enable_raw_mode()?;
    let _restore = Restore;
    execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
    let mut term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    term.clear()?;

    read_terminal(tx.clone());

    let (req_tx, req_rx) = mpsc::channel::<Request>();
    std::thread::Builder::new()
        .name("exactly-top-poll".into())
        .spawn(move || poll_loop(store, refresh, req_rx, tx))?;

    // New data, a key or a resize redraws at once; with nothing new, ages tick on a slow beat.
    let tick = AGE_TICK;
    let mut next_tick = Instant::now() + tick;
    let mut dirty = true;
    let mut code = 0;
    while !app.quit {
        if dirty {
            term.draw(|f| {
                app.on_frame(f.area());
                draw(f, &app, crate::time::now())
            })?;
            dirty = false;
        }
        let first = match rx.recv_timeout(next_tick.saturating_duration_since(Instant::now())) {
            Ok(m) => Some(m),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if Instant::now() >= next_tick {
            next_tick = Instant::now() + tick;
            dirty = true;
        }
        // A burst of keys or replies is handled before the next frame.
        for msg in first
            .into_iter()
            .chain(std::iter::from_fn(|| rx.try_recv().ok()))
        {
            match msg {
                Msg::Term(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                    if let Some(r) = app.on_key(k) {
                        let _ = req_tx.send(r);
                    }
                    dirty = true;
                }
                Msg::Term(Event::Resize(..)) => dirty = true,
                Msg::Term(_) => {}
                Msg::Reply(r) => {
                    // "Nothing changed" waits for the next tick's frame: one frame a second.
                    dirty |= !matches!(r, Reply::Unchanged(_));
                    if let Some(r) = app.on_reply(r) {
                        let _ = req_tx.send(r);
                    }
                }
                Msg::Quit(c) => {
                    code = c;
                    app.quit = true;
                }
            }
        }
    }
    drop(term);
    drop(_restore);
    // The poll thread ends at its next request or tick (a read under way is not waited for).
    drop(req_tx);
    hold_terminal_past_exit();
    Ok(code)
}

/// Signals end the loop like `q` does, so the loop's guard restores the terminal.
fn quit_on_signals(tx: mpsc::Sender<Msg>) -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGQUIT,
    ])?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            let _ = tx.send(Msg::Quit(128 + sig));
        }
    });
    Ok(())
}

/// Terminal events, read on a thread of their own; a terminal gone (an SSH connection
/// dropped) ends the loop.
fn read_terminal(tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || loop {
        match crossterm::event::read() {
            Ok(ev) => {
                if tx.send(Msg::Term(ev)).is_err() {
                    break;
                }
            }
            Err(_) => {
                let _ = tx.send(Msg::Quit(1));
                break;
            }
        }
    });
}

/// How long a child holds the terminal after we exit (see [`hold_terminal_past_exit`]).
const TERMINAL_HOLD: Duration = Duration::from_millis(300);

/// Keeps the terminal open a moment after this process exits, so the terminal's owner hears
/// of our exit before it sees the terminal close. tmux built with libutempter (Debian's)
/// removes the pane's utmp record when the terminal closes, through a helper whose own
/// SIGCHLD handler swallows ours if we exit meanwhile: the pane then shows dead with no exit
/// status and we stay a zombie until some other child of tmux exits (tmux issue #311; `less`
/// and `bash` quit by a key do the same there). A child that ignores the SIGHUP our exit
/// sends the terminal's foreground, sleeps, and exits, moves the close after our SIGCHLD.
fn hold_terminal_past_exit() {
    // SAFETY: after fork the child calls only async-signal-safe functions (signal, nanosleep,
    // _exit), as a child of a multithreaded process must.
    unsafe {
        if libc::fork() == 0 {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: TERMINAL_HOLD.as_nanos() as libc::c_long,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
}

/// Polls every `every`, and serves the screen's requests in between (a request first, as
/// soon as the read under way ends), on a thread of its own: the database's calls block, and
/// the screen never waits on them. A panic in a read ends the thread, said on the screen.
fn poll_loop(
    mut store: Store,
    every: Duration,
    requests: mpsc::Receiver<Request>,
    out: mpsc::Sender<Msg>,
) {
    let mut watch = Watch::default();
    let mut told = Instant::now();
    let mut tick = Instant::now();
    loop {
        let req = match requests.recv_timeout(tick.saturating_duration_since(Instant::now())) {
            Ok(r) => r,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                tick = Instant::now() + every;
                Request::Poll
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match req {
            // The timer's polls skip the read when nothing changed; after anything else the
            // next one reads in full.
            Request::Poll => watch.poll(&mut store),
            req => {
                watch.forget();
                serve(&mut store, &req)
            }
        }));
        let Ok(replies) = done else {
            let stopped = Reply::PollFailed("the poll task stopped: a read panicked".into());
            let _ = out.send(Msg::Reply(stopped));
            return;
        };
        for r in replies {
            // "Nothing changed" only moves the header's poll time on: the screen needs it no
            // more often than it draws an unchanged screen, and each message wakes it.
            if matches!(r, Reply::Unchanged(_)) && told.elapsed() < UNCHANGED_TOLD_EVERY {
                continue;
            }
            told = Instant::now();
            if out.send(Msg::Reply(r)).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;

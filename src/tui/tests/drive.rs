//! Driving the dashboard as an operator would, with no terminal: the snapshot a poll task
//! would send, keys pressed through the same `serve` the poll task runs, and the screen drawn
//! into ratatui's `TestBackend`.
use super::fixture::{now, Fixture};
use crate::tui::{draw, serve, App, Options, Request};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use exactly::snapshot::Snapshot;
use exactly::Store;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use std::time::Duration;

/// The snapshot, with what depends on the machine (host, path, clock) pinned.
pub(super) fn snapshot(f: &Fixture) -> Snapshot {
    // Read as at the fixture's clock: its runs are written as at it, and a run whose recorded
    // start is later than the reading's clock (one decided ahead of its slot) is not a job's
    // last run yet.
    let mut store = f.store();
    store.pin_clock(Some(now()));
    let mut s = Snapshot::read(&mut store).expect("snapshot");
    s.host = "web-1".into();
    s.db = "/var/lib/exactly/exactly.db".into();
    s.taken_at = super::fixture::ago(1);
    s
}

pub(super) fn app(read_only: bool) -> App {
    App::new(Options {
        read_only,
        color: true,
        refresh: Duration::from_secs(1),
    })
}

/// An app showing the fixture, as the screen loop would after its first poll.
pub(super) fn app_for(f: &Fixture) -> App {
    let mut a = app(false);
    a.on_reply(crate::tui::Reply::Snapshot(Box::new(snapshot(f))));
    a
}

pub(super) fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

pub(super) fn code(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

/// Presses keys the way the screen loop does: requests go to `serve` against the real database
/// and the replies come back into the app, until nothing more is asked.
pub(super) fn press(app: &mut App, store: &mut Store, keys: &[KeyEvent]) {
    for k in keys {
        if let Some(req) = app.on_key(*k) {
            pump(app, store, req);
        }
    }
}

pub(super) fn pump(app: &mut App, store: &mut Store, req: Request) {
    let mut queue = vec![req];
    while let Some(r) = queue.pop() {
        for reply in serve(store, &r) {
            // Pin what depends on the machine, as `snapshot` does.
            let reply = match reply {
                crate::tui::Reply::Snapshot(mut s) => {
                    s.host = "web-1".into();
                    s.db = "/var/lib/exactly/exactly.db".into();
                    s.taken_at = super::fixture::ago(1);
                    crate::tui::Reply::Snapshot(s)
                }
                other => other,
            };
            if let Some(next) = app.on_reply(reply) {
                queue.push(next);
            }
        }
    }
}

pub(super) fn keys(s: &str) -> Vec<KeyEvent> {
    s.chars().map(key).collect()
}

/// Draws one frame as the screen loop does: the app takes the frame's area, then is drawn.
pub(super) fn render(app: &mut App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    term.draw(|f| {
        app.on_frame(f.area());
        draw(f, app, now())
    })
    .expect("draw");
    term
}

/// The screen as plain text lines.
pub(super) fn text(term: &Terminal<TestBackend>) -> String {
    let buf = term.backend().buffer();
    let mut out = String::new();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

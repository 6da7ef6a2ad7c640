//! Drawing: the last [`Snapshot`](crate::snapshot::Snapshot) and the view state, at a given
//! `now` (so ages tick between polls and tests can fix the clock). Every string from the
//! database passes through [`clip`]: made inert, then cut to its column with `…`.
//!
//! One file per view (bottom's `canvas/widgets/`): jobs, unknown, approvals, events, job and
//! effect detail, popups, header and footer, table fitting.
mod approvals;
mod checklist;
mod effect_detail;
mod events;
mod footer;
pub(super) mod header;
mod job_detail;
mod jobs;
mod popups;
mod table;
mod text;
mod theme;
mod unknown;

use super::input::{of_mode, KeyAction, Mode};
use super::layout::*;
use super::screen::View;
use super::state::{App, Detail, Focus, Loaded, Pending, Popup, Typing};
use crate::sanitize::inert;
use crate::snapshot::{JobRow, RunRow};
use crate::state::{ApprovalState, EffectState, EventKind, RunOutcome};
use crate::time::{human_age, human_ms, Ts};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Cell, Clear, HighlightSpacing, Paragraph, Row, Sparkline, Table, TableState,
};
use ratatui::Frame;
use unicode_width::UnicodeWidthChar;

/// An open effect older than this is marked `!`: someone should look at the far side.
pub(super) const UNKNOWN_ALERT_S: i64 = 15 * 60;
/// A pending approval older than this is marked `!`.
pub(super) const APPROVAL_ALERT_S: i64 = 60 * 60;

use approvals::*;
use checklist::*;
use effect_detail::*;
use events::*;
use footer::*;
use header::*;
use job_detail::*;
use jobs::*;
use popups::*;
use table::*;
pub(super) use text::clip;
use text::*;
use theme::*;
use unknown::*;

/// Draws the app as it is; nothing in it changes (the caller fits the scroll state to the frame
/// first, with [`App::on_frame`]).
pub(crate) fn draw(f: &mut Frame, app: &App, now: Ts) {
    let t = Theme { color: app.color };
    let [top, counters, tabs, body, status, footer] = bands(f.area());
    draw_top(f, app, &t, top, now);
    draw_counters(f, app, &t, counters, now);
    draw_tabs(f, app, &t, tabs);
    match &app.detail {
        Some(d) => match &d.focus {
            Focus::Job(job) => draw_job_detail(f, app, &t, body, now, job, d),
            Focus::Effect(key) => draw_effect_detail(f, &t, body, key, d),
            Focus::Run { job, run_id } => draw_run_output(f, &t, body, now, job, run_id, d),
        },
        None => match app.view {
            View::Jobs => draw_jobs(f, app, &t, body, now),
            View::Unknown => draw_unknown(f, app, &t, body, now),
            View::Approvals => draw_approvals(f, app, &t, body, now),
            View::Events => draw_events(f, app, &t, body),
            View::Checklist => draw_checklist(f, app, &t, body),
        },
    }
    draw_status(f, app, &t, status, now);
    draw_footer(f, app, &t, footer);
    match &app.popup {
        Some(Popup::Help) if app.legend => draw_legend(f, &t, app.legend_page),
        Some(Popup::Help) => draw_help(f, &t),
        Some(Popup::Confirm(act)) => draw_confirm(f, &t, act),
        Some(Popup::Force(act)) => draw_force(f, &t, act),
        Some(Popup::Resolve { key, job, terms }) => draw_resolve(f, &t, key, job, terms.as_deref()),
        Some(Popup::Rule { subject, rule }) => draw_rule(f, app, &t, subject, *rule),
        _ => {}
    }
}

pub(super) fn line_clipped<'a>(spans: Vec<Span<'a>>, width: u16) -> Line<'a> {
    // Paragraphs clip at the edge already; spans are pre-clipped where they can be long.
    let _ = width;
    Line::from(spans)
}

/// Seconds since the snapshot shown was taken, and whether that is too long.
pub(super) fn staleness(app: &App, now: Ts) -> Option<(i64, bool)> {
    let s = app.snap.as_ref()?;
    let age = (now - s.taken_at).num_seconds().max(0);
    let limit = (app.refresh.as_secs() as i64 * 3).max(5);
    Some((age, app.poll_error.is_some() || age > limit))
}

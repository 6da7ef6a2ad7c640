//! The screen's geometry: where the bands, lists and tables fall in a frame, and how many rows
//! or output lines fit. The state (`state.rs`) scrolls by it and the views (`view/`) draw by it,
//! so it sits below both and reads no [`App`](super::App): callers pass what it needs.
use super::screen::View;
use crate::sanitize::inert;
use ratatui::layout::{Constraint, Layout, Rect};
use unicode_width::UnicodeWidthChar;

/// The screen's bands: top line, counters, tabs, body, status line, footer.
pub(super) fn bands(area: Rect) -> [Rect; 6] {
    Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(area)
}

/// Where the views draw in a frame of `area`.
pub(super) fn body(area: Rect) -> Rect {
    bands(area)[3]
}

/// A list over two lines about its selected row (Jobs, Unknown).
pub(super) fn list_layout(area: Rect) -> [Rect; 2] {
    Layout::vertical([Constraint::Min(2), Constraint::Length(2)]).areas(area)
}

/// How many rows of view `v`'s scrolled table fit in `body`, laid out as its draw lays it out
/// (`unused`: the approved-but-unused approvals, which share the Approvals view).
pub(super) fn rows_shown(v: View, body: Rect, unused: usize) -> usize {
    table_rows(match v {
        View::Jobs | View::Unknown | View::Checklist => list_layout(body)[0],
        View::Events => body,
        View::Approvals => approvals_layout(body, unused)[1],
    })
}

/// Pending approvals over the approved-but-unused ones (as many as fit in half), then two lines
/// about the selected one.
pub(super) fn approvals_layout(area: Rect, unused: usize) -> [Rect; 5] {
    let unused_h = if unused == 0 {
        2
    } else {
        (unused as u16 + 2).min(area.height / 2)
    };
    Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(unused_h.saturating_sub(1)),
        Constraint::Length(2),
    ])
    .areas(area)
}

/// How many rows a table drawn in `area` shows (its header takes one).
pub(super) fn table_rows(area: Rect) -> usize {
    (area.height as usize).saturating_sub(1).max(1)
}

/// The rows of a list of `n` that a table shows when `rows` fit: from the first row shown
/// (`offset`), moved just enough to keep the selection in view, as ratatui scrolls. A frame
/// then lays out a screenful, not a thousand jobs.
pub(super) fn visible(
    offset: usize,
    sel: Option<usize>,
    n: usize,
    rows: usize,
) -> std::ops::Range<usize> {
    let h = rows.max(1);
    let mut first = offset.min(n.saturating_sub(1));
    if let Some(sel) = sel.map(|s| s.min(n.saturating_sub(1))) {
        if sel < first {
            first = sel;
        }
        if sel >= first + h {
            first = sel + 1 - h;
        }
    }
    first..n.min(first + h)
}

/// A run's output as its screen in `area` shows it: the lines (each made inert; long ones wrap,
/// so an error message is read whole) and how many fit under the three lines of head.
pub(super) fn output_lines(output: &str, area: Rect) -> (Vec<String>, usize) {
    let w = area.width as usize;
    let lines = output
        .lines()
        .flat_map(|l| wrap(&inert(l), w.saturating_sub(1).max(1)))
        .collect();
    (lines, (area.height as usize).saturating_sub(3))
}

/// Cuts an inert line into pieces of at most `width` terminal cells.
fn wrap(line: &str, width: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut used = 0;
    for c in line.chars() {
        let cw = c.width().unwrap_or(0);
        if used + cw > width {
            out.push(String::new());
            used = 0;
        }
        used += cw;
        if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

//! Drawing: the last [`Snapshot`](crate::metrics::Snapshot) and the view state, at a given
//! `now` (so ages tick between polls and tests can fix the clock). Every string from the
//! database passes through [`clip`]: made inert, then cut to its column with `…`.
use super::input::{of_mode, Action, Mode};
use super::state::{Act, App, Detail, Focus, Loaded, Popup, Typing, View};
use crate::metrics::{JobRow, RunRow};
use crate::sanitize::inert;
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
pub const UNKNOWN_ALERT_S: i64 = 15 * 60;
/// A pending approval older than this is marked `!`.
pub const APPROVAL_ALERT_S: i64 = 60 * 60;

/// The 16 named colours, or none at all (`--no-color`, `NO_COLOR`). Meaning is always carried
/// by text too (`!`, `>`, words), so monochrome loses nothing.
struct Theme {
    color: bool,
}

impl Theme {
    fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }
    fn bad(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }
    fn warn(&self) -> Style {
        self.fg(Color::Yellow)
    }
    fn good(&self) -> Style {
        self.fg(Color::Green)
    }
    fn dim(&self) -> Style {
        self.fg(Color::DarkGray)
    }
    fn title(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    fn head(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
}

/// Inert, and cut to `width` terminal cells with `…` marking the cut.
pub fn clip(s: &str, width: usize) -> String {
    let clean = inert(s);
    let total: usize = clean.chars().map(|c| c.width().unwrap_or(0)).sum();
    if total <= width {
        return clean;
    }
    let mut out = String::new();
    let mut used = 0;
    for c in clean.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        used += w;
        out.push(c);
    }
    if width > 0 {
        out.push('…');
    }
    out
}

fn age_s(ts: &str, now: Ts) -> Option<i64> {
    crate::time::parse(ts).map(|t| (now - t).num_seconds())
}

fn ago(ts: &str, now: Ts) -> String {
    age_s(ts, now).map(human_age).unwrap_or_else(|| "-".into())
}

/// `HH:MM:SS` of a fixed-width timestamp (inert: it may come from another program).
fn clock(ts: &str) -> String {
    inert(ts.get(11..19).unwrap_or(ts))
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

/// An age in its largest unit only (`35m`, `11h`, `3d`): what fits a narrow column.
fn short_age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

fn dash<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// `p99` as a share of a limit, marked `!` past 100 %.
/// p99 as a share of a limit in milliseconds (interval or lease).
fn share(p99_ms: Option<u64>, limit_ms: Option<i64>) -> (String, bool) {
    match (p99_ms, limit_ms) {
        (Some(p), Some(l)) if l > 0 => {
            let pct = p as f64 * 100.0 / l as f64;
            let over = pct > 100.0;
            (format!("{:.0}%{}", pct, if over { "!" } else { "" }), over)
        }
        _ => ("-".into(), false),
    }
}

pub fn draw(f: &mut Frame, app: &App, now: Ts) {
    let t = Theme { color: app.color };
    let [top, counters, tabs, body, status, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    draw_top(f, app, &t, top, now);
    draw_counters(f, app, &t, counters, now);
    draw_tabs(f, app, &t, tabs);
    // Rows that fit, for PgUp/PgDn (the table header takes one).
    app.page.set(body.height.saturating_sub(2).max(1) as usize);
    match &app.detail {
        Some(d) => match &d.focus {
            Focus::Job(job) => draw_job_detail(f, app, &t, body, now, job, d),
            Focus::Effect(key) => draw_effect_detail(f, &t, body, key, d),
            Focus::Run { job, run_id } => draw_run_output(f, app, &t, body, now, job, run_id, d),
        },
        None => match app.view {
            View::Jobs => draw_jobs(f, app, &t, body, now),
            View::Unknown => draw_unknown(f, app, &t, body, now),
            View::Approvals => draw_approvals(f, app, &t, body, now),
            View::Events => draw_events(f, app, &t, body),
        },
    }
    draw_status(f, app, &t, status, now);
    draw_footer(f, app, &t, footer);
    match &app.popup {
        Some(Popup::Help) => draw_help(f, &t),
        Some(Popup::Confirm(act)) => draw_confirm(f, &t, act),
        Some(Popup::Resolve { key, job, terms }) => draw_resolve(f, &t, key, job, terms.as_deref()),
        _ => {}
    }
}

fn line_clipped<'a>(spans: Vec<Span<'a>>, width: u16) -> Line<'a> {
    // Paragraphs clip at the edge already; spans are pre-clipped where they can be long.
    let _ = width;
    Line::from(spans)
}

/// Seconds since the snapshot shown was taken, and whether that is too long.
fn staleness(app: &App, now: Ts) -> Option<(i64, bool)> {
    let s = app.snap.as_ref()?;
    let age = age_s(&s.taken_at, now)?.max(0);
    let limit = (app.refresh.as_secs() as i64 * 3).max(5);
    Some((age, app.poll_error.is_some() || age > limit))
}

fn draw_top(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    let mut spans = vec![Span::styled(" exactly top ", t.title())];
    if app.read_only {
        let tag = match &app.read_only_reason {
            Some(why) => format!("[READ-ONLY: {why}] "),
            None => "[READ-ONLY] ".to_string(),
        };
        spans.push(Span::styled(tag, t.warn()));
    }
    if app.frozen {
        spans.push(Span::styled("[FROZEN] ", t.warn()));
    }
    if let Some(s) = &app.snap {
        // Jobs registered and nobody to fire them: the one thing a healthy-looking screen
        // must not hide.
        let registered = s.jobs.iter().any(|j| j.schedule.is_some() && !j.retired);
        if registered && s.schedulers_alive == 0 {
            spans.push(Span::styled("! NO SCHEDULER ALIVE ", t.bad()));
        } else if s.schedulers_alive > 0 {
            spans.push(Span::styled(
                format!("sched {} ", s.schedulers_alive),
                t.good(),
            ));
        }
    }
    match (&app.snap, staleness(app, now)) {
        (Some(s), Some((age, stale))) => {
            if stale {
                spans.push(Span::styled(
                    format!("! STALE {} ", human_age(age)),
                    t.bad(),
                ));
            }
            spans.push(Span::raw(format!(
                "polled {} ({} ago)  ",
                clock(&s.taken_at),
                human_age(age)
            )));
            let used: usize = spans.iter().map(|s| s.width()).sum();
            let room = (area.width as usize).saturating_sub(used + 11);
            let host = clip(&s.host, 20.min(room / 3).max(4));
            let db = clip(&s.db, room.saturating_sub(host.chars().count()));
            spans.push(Span::styled("host ", t.dim()));
            spans.push(Span::raw(format!("{host}  ")));
            spans.push(Span::styled("db ", t.dim()));
            spans.push(Span::raw(db));
        }
        _ => {
            let text = match &app.poll_error {
                Some(e) => format!("! cannot read the database: {}", inert(e)),
                None => "reading the database…".into(),
            };
            spans.push(Span::styled(text, t.warn()));
        }
    }
    f.render_widget(Paragraph::new(line_clipped(spans, area.width)), area);
}

fn draw_counters(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    let wide = area.width >= 118;
    let labels: [&str; 7] = if wide {
        [
            "dup suppressed",
            "fenced writes",
            "claimed unsent",
            "unknown",
            "oldest unknown",
            "pending approval",
            "approved unused",
        ]
    } else {
        [
            "suppressed",
            "fenced",
            "never-sent",
            "unknown",
            "oldest",
            "pending",
            "unused",
        ]
    };
    let widths: Vec<usize> = labels.iter().map(|l| l.len().max(6) + 2).collect();
    let pad = |s: String, w: usize| format!("{s:<w$}");
    let mut head = vec![Span::raw(pad(String::new(), 10))];
    for (l, w) in labels.iter().zip(&widths) {
        head.push(Span::styled(pad((*l).to_string(), *w), t.dim()));
    }
    let mut lines = vec![Line::from(head)];
    if let Some(s) = &app.snap {
        // Ages tick between polls: measured from the effects' own timestamps at `now`.
        let ages: Vec<i64> = s
            .unknown
            .iter()
            .filter_map(|u| age_s(&u.since, now))
            .collect();
        let oldest_all = ages.iter().copied().max().or(s.oldest_unknown_s);
        let oldest_day = ages.iter().copied().filter(|a| *a <= 86_400).max();
        for (name, win, all_time) in [
            ("last 24h", &s.last_24h, false),
            ("all time", &s.totals, true),
        ] {
            let mut spans = vec![Span::styled(pad(format!(" {name}"), 10), t.head())];
            let oldest = if all_time { oldest_all } else { oldest_day };
            let oldest_txt = {
                oldest.map(|a| {
                    let alert = a > UNKNOWN_ALERT_S;
                    (
                        format!("{}{}", human_age(a), if alert { "!" } else { "" }),
                        alert,
                    )
                })
            };
            let cells: [(String, Style); 7] = [
                (win.duplicates_suppressed.to_string(), t.good()),
                mark(win.fenced_writes, t.warn()),
                mark(win.claimed_never_submitted, t.warn()),
                mark(win.unknown, t.bad()),
                match oldest_txt {
                    Some((s, true)) => (s, t.bad()),
                    Some((s, false)) => (s, Style::new()),
                    None => ("-".into(), t.dim()),
                },
                mark(win.pending_approvals, t.warn()),
                (win.unused_approvals.to_string(), Style::new()),
            ];
            for ((text, style), w) in cells.into_iter().zip(&widths) {
                spans.push(Span::styled(pad(text, *w), style));
            }
            lines.push(Line::from(spans));
        }
    }
    f.render_widget(Paragraph::new(lines), area);
}

/// A count, marked `!` and styled when it is not zero.
fn mark(n: u64, style: Style) -> (String, Style) {
    if n > 0 {
        (format!("{n}!"), style)
    } else {
        ("0".into(), Style::new())
    }
}

fn draw_tabs(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let mut spans = vec![Span::raw(" ")];
    for v in View::ALL {
        let (n, alert) = match v {
            View::Jobs => (app.jobs().len(), false),
            View::Unknown => {
                let n = app.unknown().len();
                (n, n > 0)
            }
            View::Approvals => {
                let n = app.approvals().0.len();
                (n, n > 0)
            }
            View::Events => (app.events().len(), false),
        };
        let text = format!(
            "{} {} {}{}",
            v.index() + 1,
            v.title(),
            n,
            if alert { "!" } else { "" }
        );
        if v == app.view {
            spans.push(Span::styled(format!("[{text}]"), t.selected()));
        } else {
            let st = if alert { t.warn() } else { Style::new() };
            spans.push(Span::styled(format!(" {text} "), st));
        }
        spans.push(Span::raw(" "));
    }
    spans.push(Span::styled(
        format!(" sort:{}", app.view.sorts()[app.sort[app.view.index()]]),
        t.dim(),
    ));
    if !app.filter.is_empty() {
        spans.push(Span::styled(
            format!(" filter:{}", clip(&app.filter, 20)),
            t.warn(),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// A table column: `prio` 0 always shows; higher ones drop first when narrow.
struct Col {
    title: &'static str,
    width: u16,
    prio: u8,
    /// Takes the width left over.
    flex: bool,
}

const fn col(title: &'static str, width: u16, prio: u8) -> Col {
    Col {
        title,
        width,
        prio,
        flex: false,
    }
}

const fn flex(title: &'static str, width: u16, prio: u8) -> Col {
    Col {
        title,
        width,
        prio,
        flex: true,
    }
}

/// Which columns fit in `avail` cells, and how wide each is (in column order).
fn fit(cols: &[Col], avail: u16) -> Vec<(usize, u16)> {
    // One cell for the selection marker, one between columns.
    let avail = avail.saturating_sub(2) as i32;
    let mut order: Vec<usize> = (0..cols.len()).collect();
    order.sort_by_key(|&i| cols[i].prio);
    let mut kept = vec![false; cols.len()];
    let mut used = -1;
    for i in order {
        let need = cols[i].width as i32 + 1;
        if used + need <= avail {
            used += need;
            kept[i] = true;
        }
    }
    let spare = (avail - used).max(0) as u16;
    let mut out: Vec<(usize, u16)> = (0..cols.len())
        .filter(|&i| kept[i])
        .map(|i| (i, cols[i].width))
        .collect();
    if let Some(x) = out.iter_mut().find(|(i, _)| cols[*i].flex) {
        x.1 += spare;
    }
    out
}

/// One table cell's text and style; the text is clipped to the column when laid out.
type C = (String, Style);

fn plain(s: impl Into<String>) -> C {
    (s.into(), Style::new())
}

/// Lays out a table from all-column rows, keeping the columns that fit.
fn table<'a>(cols: &[Col], rows: Vec<Vec<C>>, area: Rect, t: &Theme) -> Table<'a> {
    let kept = fit(cols, area.width);
    let header = Row::new(
        kept.iter()
            .map(|(i, _)| Cell::from(cols[*i].title))
            .collect::<Vec<_>>(),
    )
    .style(t.head());
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|cells| {
            Row::new(
                kept.iter()
                    .map(|(i, w)| {
                        let (text, style) = cells.get(*i).cloned().unwrap_or_default();
                        Cell::from(clip(&text, *w as usize)).style(style)
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    Table::new(
        rows,
        kept.iter()
            .map(|(_, w)| Constraint::Length(*w))
            .collect::<Vec<_>>(),
    )
    .header(header)
    .column_spacing(1)
    .row_highlight_style(t.selected())
    .highlight_symbol(">")
    .highlight_spacing(HighlightSpacing::Always)
}

/// The rows of a long list that the table shows (the selection kept in view, as ratatui
/// scrolls), so a frame lays out a screenful, not a thousand jobs.
fn visible(app: &App, v: View, n: usize, area: Rect, sel: usize) -> std::ops::Range<usize> {
    let h = (area.height as usize).saturating_sub(1).max(1);
    let sel = sel.min(n.saturating_sub(1));
    let mut first = app.offset[v.index()].get().min(n.saturating_sub(1));
    if sel < first {
        first = sel;
    }
    if sel >= first + h {
        first = sel + 1 - h;
    }
    first..n.min(first + h)
}

/// Renders the rows `shown` of a list (built by the caller for those rows only).
fn render_window(
    f: &mut Frame,
    app: &App,
    v: View,
    tbl: Table<'_>,
    area: Rect,
    shown: std::ops::Range<usize>,
    sel: usize,
) {
    let mut state = TableState::default().with_selected(sel.checked_sub(shown.start));
    f.render_stateful_widget(tbl, area, &mut state);
    app.offset[v.index()].set(shown.start);
}

fn render_table(f: &mut Frame, app: &App, v: View, tbl: Table<'_>, area: Rect, sel: Option<usize>) {
    let off = &app.offset[v.index()];
    let mut state = TableState::default()
        .with_offset(off.get())
        .with_selected(sel);
    f.render_stateful_widget(tbl, area, &mut state);
    off.set(state.offset());
}

fn empty_note(f: &mut Frame, t: &Theme, area: Rect, text: &str) {
    f.render_widget(
        Paragraph::new(Span::styled(text.to_string(), t.dim())),
        area,
    );
}

const JOB_COLS: [Col; 18] = [
    col("", 1, 0),
    flex("JOB", 14, 0),
    col("NEXT", 9, 1),
    col("EVERY", 8, 1),
    col("LEASE", 6, 2),
    col("RUNS", 5, 4),
    col("P50", 7, 3),
    col("P99", 7, 1),
    col("P99/IV", 6, 2),
    col("P99/LS", 6, 2),
    col("LAST", 13, 1),
    col("TOKEN", 5, 2),
    col("HOLDER", 14, 5),
    col("EXPIRES", 8, 1),
    col("STATE", 7, 1),
    col("Q", 3, 4),
    col("OVERLAP", 8, 5),
    col("SUP/FEN", 7, 4),
];

fn lease_left(j: &JobRow, now: Ts) -> Option<i64> {
    j.lease_until
        .as_deref()
        .and_then(crate::time::parse)
        .map(|u| (u - now).num_seconds())
}

fn job_state(j: &JobRow, now: Ts) -> &'static str {
    if j.paused {
        "PAUSED"
    } else if j.retired {
        "retired"
    } else if lease_left(j, now).is_some_and(|l| l > 0) {
        "running"
    } else {
        "idle"
    }
}

fn job_cells(j: &JobRow, t: &Theme, now: Ts) -> Vec<C> {
    let every = match (&j.schedule, j.interval_s) {
        (Some(s), _) => s.clone(),
        (None, Some(i)) => human_age(i),
        _ => "-".into(),
    };
    let (int_share, int_over) = share(j.p99_ms, j.interval_s.map(|s| s * 1000));
    let (lse_share, lse_over) = share(j.p99_ms, j.lease_ms);
    let last = j
        .last_run
        .as_ref()
        .map(|r| {
            let outcome = r.outcome.clone().unwrap_or_else(|| "running".into());
            let code = r
                .exit_code
                .filter(|c| *c != 0)
                .map(|c| format!(" {c}"))
                .unwrap_or_default();
            let age = age_s(&r.started_at, now)
                .map(short_age)
                .unwrap_or_else(|| "-".into());
            format!("{}{code} {age}", clip(&outcome, 7))
        })
        .unwrap_or_else(|| "-".into());
    let last_style = match j.last_run.as_ref().and_then(|r| r.outcome.as_deref()) {
        Some("ok") | Some("done") | None => Style::new(),
        Some(o) if crate::metrics::is_failure(o) => t.bad(),
        Some(_) => t.warn(),
    };
    let (next, next_style) = next_fire(j, t, now);
    let (expires, exp_style) = match (lease_left(j, now), &j.lease_owner) {
        (Some(l), Some(_)) if l > 0 => (human_age(l), Style::new()),
        (Some(_), Some(_)) => ("expired".into(), t.dim()),
        _ => ("free".into(), t.dim()),
    };
    let state = job_state(j, now);
    let over = |b: bool| if b { t.bad() } else { Style::new() };
    vec![
        (
            if j.warnings.is_empty() { " " } else { "!" }.into(),
            t.bad(),
        ),
        plain(j.job_key.clone()),
        (next, next_style),
        plain(every),
        plain(dash(j.lease_ms.map(|ms| human_ms(ms.max(0) as u64)))),
        plain(j.runs.to_string()),
        plain(dash(j.p50_ms.map(human_ms))),
        plain(dash(j.p99_ms.map(human_ms))),
        (int_share, over(int_over)),
        (lse_share, over(lse_over)),
        (last, last_style),
        plain(dash(j.fencing_token)),
        plain(j.lease_owner.clone().unwrap_or_else(|| "-".into())),
        (expires, exp_style),
        (state.into(), if j.paused { t.warn() } else { Style::new() }),
        plain(j.queue_depth.to_string()),
        plain(dash(j.overlap.clone())),
        plain(format!("{}/{}", j.duplicates_suppressed, j.fenced_writes)),
    ]
}

/// When a job fires next: `in 4m`, `due`, `late 3m!` (nobody fired it), `paused`.
fn next_fire(j: &JobRow, t: &Theme, now: Ts) -> (String, Style) {
    if j.paused {
        return ("paused".into(), t.warn());
    }
    let Some(at) = j.next_fire_at.as_deref().and_then(crate::time::parse) else {
        return ("-".into(), t.dim());
    };
    let secs = (at - now).num_seconds();
    // A firing waits up to 2 s for its tick; later than that, nobody fired it.
    if secs >= 0 {
        (format!("in {}", short_age(secs)), Style::new())
    } else if secs > -3 {
        ("due".into(), Style::new())
    } else {
        (format!("late {}!", short_age(-secs)), t.bad())
    }
}

fn draw_jobs(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    let jobs = app.jobs();
    if jobs.is_empty() {
        empty_note(
            f,
            t,
            area,
            " no jobs yet: a lease claimed (exactly lease claim) or a jobs file run (exactly run) shows here",
        );
        return;
    }
    let [tbl_area, notes] =
        Layout::vertical([Constraint::Min(2), Constraint::Length(2)]).areas(area);
    let sel = app.selected(View::Jobs);
    let shown = visible(app, View::Jobs, jobs.len(), tbl_area, sel);
    let rows = jobs[shown.clone()]
        .iter()
        .map(|j| job_cells(j, t, now))
        .collect();
    render_window(
        f,
        app,
        View::Jobs,
        table(&JOB_COLS, rows, tbl_area, t),
        tbl_area,
        shown,
        sel,
    );
    // The selected job's warnings: the overlap forecast in words.
    let w = notes.width as usize;
    let lines: Vec<Line> = match jobs.get(sel) {
        Some(j) if !j.warnings.is_empty() => j
            .warnings
            .iter()
            .take(2)
            .map(|x| Line::styled(clip(&format!(" ! {}: {x}", inert(&j.job_key)), w), t.bad()))
            .collect(),
        Some(j) if j.paused => vec![Line::styled(
            clip(
                &format!(
                    " {} is paused{}",
                    inert(&j.job_key),
                    j.pause_note
                        .as_deref()
                        .map(|n| format!(": {}", inert(n)))
                        .unwrap_or_default()
                ),
                w,
            ),
            t.warn(),
        )],
        Some(j) => vec![Line::styled(
            clip(&format!(" {}: no warnings", inert(&j.job_key)), w),
            t.dim(),
        )],
        None => vec![],
    };
    f.render_widget(Paragraph::new(lines), notes);
}

fn draw_unknown(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    let list = app.unknown();
    if list.is_empty() {
        empty_note(
            f,
            t,
            area,
            " no unknown effects: nothing waits to be resolved",
        );
        return;
    }
    let key_w = if area.width >= 118 { 32 } else { 12 };
    let cols = [
        col("", 1, 0),
        col("AGE", 7, 0),
        col("STATE", 9, 0),
        col("JOB", 14, 0),
        col("EFFECT KEY", key_w, 0),
        col("TOKEN", 5, 3),
        col("VERDICT", 12, 2),
        flex("TERMS", 12, 1),
    ];
    let [tbl_area, notes] =
        Layout::vertical([Constraint::Min(2), Constraint::Length(2)]).areas(area);
    let sel = app.selected(View::Unknown);
    let shown = visible(app, View::Unknown, list.len(), tbl_area, sel);
    let rows = list[shown.clone()]
        .iter()
        .map(|u| {
            let age = age_s(&u.since, now).unwrap_or(u.age_s);
            let alert = age > UNKNOWN_ALERT_S;
            vec![
                (if alert { "!" } else { " " }.into(), t.bad()),
                (human_age(age), if alert { t.bad() } else { Style::new() }),
                (
                    u.state.clone(),
                    if u.state == "unknown" {
                        t.warn()
                    } else {
                        Style::new()
                    },
                ),
                plain(u.job_key.clone()),
                plain(u.effect_key.clone()),
                plain(dash(u.fencing_token)),
                plain(u.verdict.clone().unwrap_or_else(|| "-".into())),
                plain(u.terms_shown.clone().unwrap_or_default()),
            ]
        })
        .collect();
    render_window(
        f,
        app,
        View::Unknown,
        table(&cols, rows, tbl_area, t),
        tbl_area,
        shown,
        sel,
    );
    if let Some(u) = list.get(sel) {
        draw_selected_effect(
            f,
            t,
            notes,
            &u.effect_key,
            &u.job_key,
            u.terms_shown.as_deref(),
        );
    }
}

/// Two lines under a list: the selected effect's whole key and its terms.
fn draw_selected_effect(
    f: &mut Frame,
    t: &Theme,
    area: Rect,
    key: &str,
    job: &str,
    terms: Option<&str>,
) {
    let w = area.width as usize;
    let lines = vec![
        Line::from(vec![
            Span::styled(" key ", t.dim()),
            Span::raw(clip(key, 40)),
            Span::styled("  job ", t.dim()),
            Span::raw(clip(job, w.saturating_sub(53))),
        ]),
        Line::from(vec![
            Span::styled(" terms ", t.dim()),
            Span::raw(clip(terms.unwrap_or("(none shown)"), w.saturating_sub(8))),
        ]),
    ];
    f.render_widget(Paragraph::new(lines), area);
}

fn draw_approvals(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    let (pending, unused) = app.approvals();
    let key_w = if area.width >= 118 { 32 } else { 12 };
    let sel = app.selected(View::Approvals);
    let approval_rows = |list: &[&crate::metrics::ApprovalView]| -> Vec<Vec<C>> {
        list.iter()
            .map(|a| {
                let age = age_s(&a.requested_at, now).unwrap_or(a.age_s);
                let alert = a.state == "pending" && age > APPROVAL_ALERT_S;
                vec![
                    (
                        human_age(age) + if alert { "!" } else { "" },
                        if alert { t.warn() } else { Style::new() },
                    ),
                    plain(a.job_key.clone()),
                    plain(a.effect_key.clone()),
                    plain(a.decided_by.clone().unwrap_or_else(|| "-".into())),
                    plain(a.terms_shown.clone().unwrap_or_default()),
                ]
            })
            .collect()
    };
    let pending_cols = [
        col("AGE", 8, 0),
        col("JOB", 14, 0),
        col("EFFECT KEY", key_w, 0),
        col("", 0, 9),
        flex("TERMS", 12, 0),
    ];
    let unused_cols = [
        col("AGE", 8, 0),
        col("JOB", 14, 0),
        col("EFFECT KEY", key_w, 0),
        col("APPROVED BY", 12, 1),
        flex("TERMS", 12, 0),
    ];
    let unused_h = if unused.is_empty() {
        2
    } else {
        (unused.len() as u16 + 2).min(area.height / 2)
    };
    let [p_title, p_area, u_title, u_area, notes] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(unused_h.saturating_sub(1)),
        Constraint::Length(2),
    ])
    .areas(area);
    f.render_widget(
        Paragraph::new(Span::styled(
            format!(" Pending approval ({}) — a approve, d deny", pending.len()),
            t.head(),
        )),
        p_title,
    );
    if pending.is_empty() {
        empty_note(f, t, p_area, " nothing waits for a person's approval");
    } else {
        let in_pending = (sel < pending.len()).then_some(sel);
        let tbl = table(&pending_cols, approval_rows(&pending), p_area, t);
        render_table(f, app, View::Approvals, tbl, p_area, in_pending);
    }
    f.render_widget(
        Paragraph::new(Span::styled(
            format!(" Approved, not yet used ({})", unused.len()),
            t.head(),
        )),
        u_title,
    );
    if unused.is_empty() {
        empty_note(f, t, u_area, " none");
    } else {
        let in_unused = sel.checked_sub(pending.len());
        let mut state = TableState::default().with_selected(in_unused);
        f.render_stateful_widget(
            table(&unused_cols, approval_rows(&unused), u_area, t),
            u_area,
            &mut state,
        );
    }
    if let Some(a) = pending.iter().chain(unused.iter()).nth(sel) {
        draw_selected_effect(
            f,
            t,
            notes,
            &a.effect_key,
            &a.job_key,
            a.terms_shown.as_deref(),
        );
    }
}

fn event_alert(kind: &str) -> bool {
    matches!(
        kind,
        "fenced_write" | "lease_stolen" | "effect_unknown" | "approval_denied"
    )
}

fn draw_events(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let list = app.events();
    if list.is_empty() {
        empty_note(f, t, area, " no events yet");
        return;
    }
    let key_w = if area.width >= 118 { 32 } else { 12 };
    let cols = [
        col("", 1, 0),
        col("AT", 8, 0),
        col("KIND", 20, 0),
        col("JOB", 14, 0),
        col("EFFECT KEY", key_w, 1),
        col("TOKEN", 5, 3),
        col("WHO", 14, 2),
        flex("DETAIL", 10, 1),
    ];
    let sel = app.selected(View::Events);
    let shown = visible(app, View::Events, list.len(), area, sel);
    let rows = list[shown.clone()]
        .iter()
        .map(|e| {
            let alert = event_alert(&e.kind);
            vec![
                (if alert { "!" } else { " " }.into(), t.bad()),
                plain(clock(&e.at)),
                (e.kind.clone(), if alert { t.warn() } else { Style::new() }),
                plain(e.job_key.clone().unwrap_or_else(|| "-".into())),
                plain(e.effect_key.clone().unwrap_or_else(|| "-".into())),
                plain(dash(e.fencing_token)),
                plain(e.actor.clone().unwrap_or_else(|| "-".into())),
                plain(e.detail.clone().unwrap_or_default()),
            ]
        })
        .collect();
    render_window(
        f,
        app,
        View::Events,
        table(&cols, rows, area, t),
        area,
        shown,
        sel,
    );
}

/// `label  value` lines, value clipped to what is left of the width.
fn field<'a>(t: &Theme, label: &str, value: &str, width: u16) -> Line<'a> {
    let w = (width as usize).saturating_sub(20);
    Line::from(vec![
        Span::styled(format!(" {label:<18} "), t.dim()),
        Span::raw(clip(value, w)),
    ])
}

fn draw_effect_detail(f: &mut Frame, t: &Theme, area: Rect, key: &str, d: &Detail) {
    let w = area.width;
    let mut lines = vec![Line::styled(
        clip(
            &format!(" Effect {key} — Esc back, a/d approve/deny, r resolve"),
            w as usize,
        ),
        t.title(),
    )];
    match &d.loaded {
        None => lines.push(Line::styled(" loading…", t.dim())),
        Some(Loaded::Effect {
            row,
            approval,
            events,
            ..
        }) => {
            match row {
                None => lines.push(Line::styled(" no such effect in the ledger", t.warn())),
                Some(r) => {
                    let o = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
                    for (label, value) in [
                        ("effect_key", r.effect_key.clone()),
                        ("state", r.state.clone()),
                        ("job_key", r.job_key.clone()),
                        ("run_id", r.run_id.clone()),
                        ("fencing_token", dash(r.fencing_token)),
                        ("terms_shown", o(&r.terms_shown)),
                        ("response", o(&r.response)),
                        ("created_at", r.created_at.clone()),
                        ("updated_at", r.updated_at.clone()),
                        ("action_id", o(&r.action_id)),
                        ("target_id", o(&r.target_id)),
                        ("input_digest", o(&r.input_digest)),
                        ("observe_cmd", o(&r.observe_cmd)),
                        ("attempt", o(&r.attempt)),
                        ("verdict", o(&r.verdict)),
                        ("verdict_at", o(&r.verdict_at)),
                        ("resolved_by", o(&r.resolved_by)),
                        ("resolved_at", o(&r.resolved_at)),
                        ("resolution_note", o(&r.resolution_note)),
                        ("evidence", o(&r.evidence)),
                    ] {
                        lines.push(field(t, label, &value, w));
                    }
                }
            }
            match approval {
                Some(a) => lines.push(field(
                    t,
                    "approval",
                    &format!(
                        "{} (requested {}; decided by {} at {}; note {}; consumed {})",
                        a.state,
                        a.requested_at,
                        a.decided_by.as_deref().unwrap_or("-"),
                        a.decided_at.as_deref().unwrap_or("-"),
                        a.note.as_deref().unwrap_or("-"),
                        a.consumed_at.as_deref().unwrap_or("-"),
                    ),
                    w,
                )),
                None => lines.push(field(t, "approval", "none requested", w)),
            }
            lines.push(Line::styled(
                format!(" History ({} events, oldest first)", events.len()),
                t.head(),
            ));
            for e in events {
                let text = format!(
                    " {} {} {:<20} {} {}",
                    clock(&e.at),
                    if event_alert(&e.kind) { "!" } else { " " },
                    inert(&e.kind),
                    e.actor.as_deref().map(inert).unwrap_or_else(|| "-".into()),
                    e.detail.as_deref().map(inert).unwrap_or_default(),
                );
                lines.push(Line::raw(clip(&text, w as usize)));
            }
        }
        Some(_) => {}
    }
    let max_scroll = lines.len().saturating_sub(area.height as usize);
    let scroll = d.scroll.min(max_scroll);
    let shown: Vec<Line> = lines.into_iter().skip(scroll).collect();
    f.render_widget(Paragraph::new(shown), area);
}

fn draw_job_detail(
    f: &mut Frame,
    app: &App,
    t: &Theme,
    area: Rect,
    now: Ts,
    job: &str,
    d: &Detail,
) {
    let w = area.width as usize;
    let Some(j) = app
        .snap
        .as_ref()
        .and_then(|s| s.jobs.iter().find(|j| j.job_key == job))
    else {
        empty_note(f, t, area, " this job is no longer in the snapshot");
        return;
    };
    let mut info = vec![Line::styled(
        clip(
            &format!(" Job {job} — Esc back, j/k pick a run, Enter its output, p pause/resume"),
            w,
        ),
        t.title(),
    )];
    let lease = match (lease_left(j, now), &j.lease_owner) {
        (Some(l), Some(o)) if l > 0 => format!(
            "held by {} with fencing token {}, expires in {}",
            inert(o),
            dash(j.fencing_token),
            human_age(l)
        ),
        (Some(l), Some(o)) => format!(
            "expired {} ago (last holder {}, token {})",
            human_age(-l),
            inert(o),
            dash(j.fencing_token)
        ),
        _ => format!("free (last token {})", dash(j.fencing_token)),
    };
    let (int_share, _) = share(j.p99_ms, j.interval_s.map(|s| s * 1000));
    let (lse_share, _) = share(j.p99_ms, j.lease_ms);
    for line in [
        format!(
            " schedule {}  interval {}  lease {}  overlap {}{}  state {}",
            inert(j.schedule.as_deref().unwrap_or("-")),
            dash(j.interval_s.map(human_age)),
            dash(j.lease_ms.map(|ms| human_ms(ms.max(0) as u64))),
            inert(j.overlap.as_deref().unwrap_or("-")),
            j.queue_cap.map(|c| format!(" (cap {c})")).unwrap_or_default(),
            job_state(j, now),
        ),
        format!(" lease {lease}"),
        format!(
            " runs {}  p50 {}  p99 {} ({} of interval, {} of lease)  queue {}  suppressed {}  fenced {}",
            j.runs,
            dash(j.p50_ms.map(human_ms)),
            dash(j.p99_ms.map(human_ms)),
            int_share,
            lse_share,
            j.queue_depth,
            j.duplicates_suppressed,
            j.fenced_writes
        ),
    ] {
        info.push(Line::raw(clip(&line, w)));
    }
    if j.paused {
        info.push(Line::styled(
            clip(
                &format!(
                    " PAUSED{}",
                    j.pause_note
                        .as_deref()
                        .map(|n| format!(": {}", inert(n)))
                        .unwrap_or_default()
                ),
                w,
            ),
            t.warn(),
        ));
    }
    for x in &j.warnings {
        info.push(Line::styled(clip(&format!(" ! {x}"), w), t.bad()));
    }
    let runs: &[RunRow] = match &d.loaded {
        Some(Loaded::Job { runs, .. }) => runs,
        _ => &[],
    };
    let info_h = info.len() as u16;
    let [info_area, legend, spark, runs_area] = Layout::vertical([
        Constraint::Length(info_h),
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Min(2),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(info), info_area);
    // Durations oldest → newest, scaled so the top is the larger of interval, lease and the
    // longest run: a bar near the top is a run that nearly overlapped the next or lost its lease.
    let durations: Vec<Option<u64>> = runs
        .iter()
        .rev()
        .map(|r| r.duration_ms.map(|d| d.max(0) as u64))
        .collect();
    let longest = durations.iter().flatten().copied().max().unwrap_or(0);
    let interval_ms = j.interval_s.map(|s| s.max(0) as u64 * 1000);
    let lease_ms = j.lease_ms.map(|ms| ms.max(0) as u64);
    let top = longest
        .max(interval_ms.unwrap_or(0))
        .max(lease_ms.unwrap_or(0))
        .max(1);
    let over_lease = lease_ms
        .map(|l| durations.iter().flatten().filter(|&&d| d > l).count())
        .unwrap_or(0);
    let over_interval = interval_ms
        .map(|l| durations.iter().flatten().filter(|&&d| d > l).count())
        .unwrap_or(0);
    let pct = |x: Option<u64>| {
        x.map(|v| format!("{}%", v * 100 / top))
            .unwrap_or_else(|| "-".into())
    };
    let legend_text = if d.loaded.is_none() {
        " run times: loading…".to_string()
    } else if runs.is_empty() {
        " run times: no runs recorded".to_string()
    } else {
        format!(
            " last {} run times, oldest→newest; top = {}; interval at {}, lease at {}; over lease {}{}, over interval {}{}",
            runs.len(),
            human_ms(top),
            pct(interval_ms),
            pct(lease_ms),
            over_lease,
            if over_lease > 0 { "!" } else { "" },
            over_interval,
            if over_interval > 0 { "!" } else { "" },
        )
    };
    let legend_style = if over_lease + over_interval > 0 {
        t.bad()
    } else {
        t.dim()
    };
    f.render_widget(
        Paragraph::new(Line::styled(clip(&legend_text, w), legend_style)),
        legend,
    );
    let spark_w = (spark.width as usize).saturating_sub(1);
    let shown: Vec<Option<u64>> = durations
        .iter()
        .skip(durations.len().saturating_sub(spark_w))
        .copied()
        .collect();
    f.render_widget(
        Sparkline::default()
            .data(&shown)
            .max(top)
            .style(t.fg(Color::Cyan))
            .absent_value_symbol("·"),
        Rect {
            x: spark.x + 1,
            width: spark.width.saturating_sub(1),
            ..spark
        },
    );
    let cols = [
        col("STARTED", 8, 0),
        col("AGO", 7, 0),
        col("DURATION", 8, 0),
        col("%LEASE", 7, 1),
        col("OUTCOME", 10, 0),
        col("EXIT", 4, 1),
        col("TOKEN", 5, 1),
        col("SLOT", 24, 3),
        flex("OWNER", 12, 2),
    ];
    let rows = runs
        .iter()
        .map(|r| {
            let over = matches!((r.duration_ms, lease_ms), (Some(d), Some(l)) if d as u64 > l);
            vec![
                plain(clock(&r.started_at)),
                plain(ago(&r.started_at, now)),
                (
                    dash(r.duration_ms.map(|d| human_ms(d.max(0) as u64))),
                    if over { t.bad() } else { Style::new() },
                ),
                (
                    match (r.duration_ms, lease_ms) {
                        (Some(d), Some(l)) if l > 0 => {
                            format!(
                                "{}%{}",
                                d.max(0) as u64 * 100 / l,
                                if over { "!" } else { "" }
                            )
                        }
                        _ => "-".into(),
                    },
                    if over { t.bad() } else { Style::new() },
                ),
                {
                    let o = r.outcome.clone().unwrap_or_else(|| "running".into());
                    let st = if crate::metrics::is_failure(&o) {
                        t.bad()
                    } else {
                        Style::new()
                    };
                    (o, st)
                },
                plain(dash(r.exit_code)),
                plain(r.fencing_token.to_string()),
                plain(r.scheduled_at.clone()),
                plain(r.owner.clone()),
            ]
        })
        .collect();
    // The cursor picks a run (Enter shows its output); the table scrolls to keep it in view.
    let selected = (!runs.is_empty()).then(|| d.scroll.min(runs.len() - 1));
    let mut state = TableState::default().with_selected(selected);
    f.render_stateful_widget(table(&cols, rows, runs_area, t), runs_area, &mut state);
}

/// One run's stored output: stdout and stderr as they arrived, each line made inert, scrolled
/// with j/k, PgUp/PgDn, g/G.
#[allow(clippy::too_many_arguments)]
fn draw_run_output(
    f: &mut Frame,
    app: &App,
    t: &Theme,
    area: Rect,
    now: Ts,
    job: &str,
    run_id: &str,
    d: &Detail,
) {
    let w = area.width as usize;
    let mut head = vec![Line::styled(
        clip(
            &format!(
                " Output of run {} ({}) — Esc back, j/k scroll",
                inert(run_id),
                inert(job)
            ),
            w,
        ),
        t.title(),
    )];
    let (row, output) = match &d.loaded {
        Some(Loaded::Run { row, output, .. }) => (row.as_deref(), output.as_str()),
        _ => {
            head.push(Line::styled(" loading…", t.dim()));
            f.render_widget(Paragraph::new(head), area);
            return;
        }
    };
    let Some(r) = row else {
        head.push(Line::styled(
            " this run is no longer stored (pruned?)",
            t.warn(),
        ));
        f.render_widget(Paragraph::new(head), area);
        return;
    };
    let outcome = r.outcome.clone().unwrap_or_else(|| "running".into());
    let bad = crate::metrics::is_failure(&outcome);
    head.push(Line::styled(
        clip(
            &format!(
                " {}{} · started {} ({} ago) · took {} · slot {} · token {} · {}",
                inert(&outcome),
                r.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default(),
                clock(&r.started_at),
                ago(&r.started_at, now),
                dash(r.duration_ms.map(|d| human_ms(d.max(0) as u64))),
                inert(&r.scheduled_at),
                r.fencing_token,
                inert(&r.owner)
            ),
            w,
        ),
        if bad { t.bad() } else { t.dim() },
    ));
    // Long lines wrap: an error message is read whole.
    let lines: Vec<String> = output
        .lines()
        .flat_map(|l| wrap(&inert(l), w.saturating_sub(1).max(1)))
        .collect();
    let body_h = (area.height as usize).saturating_sub(head.len() + 1);
    let max_scroll = lines.len().saturating_sub(body_h);
    app.output_max.set(max_scroll);
    let scroll = d.scroll.min(max_scroll);
    head.push(Line::styled(
        clip(
            &if lines.is_empty() {
                " (no output)".to_string()
            } else {
                format!(
                    " lines {}-{} of {}",
                    scroll + 1,
                    (scroll + body_h).min(lines.len()),
                    lines.len()
                )
            },
            w,
        ),
        t.head(),
    ));
    for l in lines.iter().skip(scroll).take(body_h) {
        head.push(Line::raw(format!(" {l}")));
    }
    f.render_widget(Paragraph::new(head), area);
}

fn draw_status(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    let w = area.width as usize;
    let line = if let Some(Popup::Typing { what, text }) = &app.popup {
        let prompt = match what {
            Typing::Filter { .. } => "filter (job or effect key): ".to_string(),
            Typing::PauseNote { job } => format!("pause {} — note (optional): ", clip(job, 24)),
        };
        Line::from(vec![
            Span::styled(format!(" {prompt}"), t.head()),
            Span::raw(clip(text, w.saturating_sub(prompt.len() + 3))),
            Span::styled("_", t.head()),
        ])
    } else if let Some(e) = &app.poll_error {
        let age = staleness(app, now)
            .map(|(a, _)| format!(" (showing data from {} ago)", human_age(a)))
            .unwrap_or_default();
        Line::styled(clip(&format!(" ! poll failed{age}: {e}"), w), t.bad())
    } else if let Some(r) = &app.status {
        let text = if r.ok {
            format!(" {}", r.text)
        } else {
            format!(" ! {}", r.text)
        };
        Line::styled(clip(&text, w), if r.ok { t.good() } else { t.bad() })
    } else {
        Line::raw("")
    };
    f.render_widget(Paragraph::new(line), area);
}

fn is_action(a: Action) -> bool {
    matches!(
        a,
        Action::Approve | Action::Deny | Action::Resolve | Action::Pause
    )
}

fn draw_footer(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let mut spans = vec![];
    for b in of_mode(app.mode()) {
        let Some(short) = b.short else { continue };
        if app.read_only && is_action(b.action) {
            continue;
        }
        spans.push(Span::styled(
            format!(" {}", b.label),
            t.head().add_modifier(Modifier::REVERSED),
        ));
        spans.push(Span::raw(format!(" {short} ")));
    }
    if app.read_only && app.mode() == Mode::Main {
        spans.push(Span::styled(" read-only: actions off", t.warn()));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// A box of at most `w`×`h` cells in the middle of the screen.
fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn draw_help(f: &mut Frame, t: &Theme) {
    let area = centered(f.area(), 100, 40);
    f.render_widget(Clear, area);
    let block = Block::bordered().title(" Keys — Esc closes ");
    let inner = block.inner(area);
    f.render_widget(block, area);
    let mut lines: Vec<Line> = vec![];
    for (mode, title) in [
        (Mode::Main, "Screen"),
        (Mode::Confirm, "Confirm (after a, d, p, r)"),
        (Mode::Resolve, "Resolve (after r)"),
        (Mode::Typing, "Typing (filter, note)"),
        (Mode::Help, "This help"),
    ] {
        lines.push(Line::styled(title, t.head()));
        for b in of_mode(mode) {
            lines.push(Line::from(vec![
                Span::styled(format!(" {:<6}", b.label), t.title()),
                Span::raw(b.help),
            ]));
        }
    }
    // As many columns as it takes to show every binding without scrolling.
    let h = inner.height.max(1) as usize;
    let ncols = lines.len().div_ceil(h).max(1);
    let col_w = inner.width / ncols as u16;
    for (i, chunk) in lines.chunks(h).enumerate() {
        let r = Rect {
            x: inner.x + i as u16 * col_w,
            width: col_w.saturating_sub(1),
            ..inner
        };
        f.render_widget(Paragraph::new(chunk.to_vec()), r);
    }
}

fn draw_confirm(f: &mut Frame, t: &Theme, act: &Act) {
    let vw = (f.area().width.min(78) as usize).saturating_sub(11);
    let mut lines = vec![];
    let mut push = |label: &str, value: &str| {
        lines.push(Line::from(vec![
            Span::styled(format!(" {label:<7}"), t.dim()),
            Span::raw(clip(value, vw)),
        ]))
    };
    match act {
        Act::Approve { key, job, terms }
        | Act::Deny { key, job, terms }
        | Act::Resolve {
            key, job, terms, ..
        } => {
            push("effect", key);
            push("job", job);
            // Terms over up to three lines: what the operator agrees to must be readable.
            let clean = inert(terms.as_deref().unwrap_or("(none shown)"));
            let chars: Vec<char> = clean.chars().collect();
            let chunks: Vec<String> = chars
                .chunks(vw.max(1))
                .map(|c| c.iter().collect())
                .collect();
            for (i, c) in chunks.iter().take(3).enumerate() {
                let last = i == 2 && chunks.len() > 3;
                let text = if last {
                    clip(&format!("{c}…"), vw)
                } else {
                    c.clone()
                };
                push(if i == 0 { "terms" } else { "" }, &text);
            }
        }
        Act::Pause { job, note } => {
            push("job", job);
            push("note", note.as_deref().unwrap_or("(none)"));
        }
        Act::Resume { job } => push("job", job),
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled(" y ", t.head().add_modifier(Modifier::REVERSED)),
        Span::raw(format!(" {}   ", clip(&act.verb(), 40))),
        Span::styled("[ n / Esc: cancel ]", t.selected()),
        Span::raw(" (default)"),
    ]));
    let area = centered(f.area(), 78, lines.len() as u16 + 2);
    f.render_widget(Clear, area);
    let block = Block::bordered()
        .title(Span::styled(format!(" Confirm: {} ", act.verb()), t.bad()))
        .border_style(t.warn());
    let inner = block.inner(area);
    f.render_widget(block, area);
    f.render_widget(Paragraph::new(lines), inner);
}

fn draw_resolve(f: &mut Frame, t: &Theme, key: &str, job: &str, terms: Option<&str>) {
    let area = centered(f.area(), 78, 10);
    f.render_widget(Clear, area);
    let block = Block::bordered()
        .title(Span::styled(
            " Resolve: what does the far side show? ",
            t.warn(),
        ))
        .border_style(t.warn());
    let inner = block.inner(area);
    f.render_widget(block, area);
    let vw = (inner.width as usize).saturating_sub(9);
    let line = |label: &str, v: &str| {
        Line::from(vec![
            Span::styled(format!(" {label:<7}"), t.dim()),
            Span::raw(clip(v, vw)),
        ])
    };
    let mut lines = vec![
        line("effect", key),
        line("job", job),
        line("terms", terms.unwrap_or("(none shown)")),
        Line::raw(""),
    ];
    for b in of_mode(Mode::Resolve) {
        lines.push(Line::from(vec![
            Span::styled(format!(" {:<5}", b.label), t.head()),
            Span::raw(b.help),
        ]));
    }
    f.render_widget(Paragraph::new(lines), inner);
}

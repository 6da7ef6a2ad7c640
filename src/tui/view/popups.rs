//! Popups: help, a confirmation carrying its action, the resolve choice.
use super::*;

/// A box of at most `w`×`h` cells in the middle of the screen.
pub(super) fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

pub(super) fn draw_help(f: &mut Frame, t: &Theme) {
    let area = centered(f.area(), 100, 40);
    f.render_widget(Clear, area);
    let block = Block::bordered().title(" Keys — ? legend, Esc closes ");
    let inner = block.inner(area);
    f.render_widget(block, area);
    let mut lines: Vec<Line> = vec![];
    for (mode, title) in [
        (Mode::Main, "Screen"),
        (Mode::Confirm, "Confirm (after a, d, p, r, P)"),
        (Mode::Force, "In flight (resolve, again)"),
        (Mode::Resolve, "Resolve (after r)"),
        (Mode::Typing, "Typing (filter, note)"),
        (Mode::Help, "This help"),
        (Mode::Cell, "A rule's evidence (Enter in 5)"),
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
    let ncols = lines.len().div_ceil(inner.height.max(1) as usize).max(1);
    draw_columns(f, inner, &lines, ncols, 1);
}

/// `lines` down `ncols` columns of `inner`, each `gap` cells short of its share.
fn draw_columns(f: &mut Frame, inner: Rect, lines: &[Line], ncols: usize, gap: u16) {
    let h = inner.height.max(1) as usize;
    let col_w = inner.width / ncols.max(1) as u16;
    for (i, chunk) in lines.chunks(h).take(ncols).enumerate() {
        let r = Rect {
            x: inner.x + i as u16 * col_w,
            width: col_w.saturating_sub(gap),
            ..inner
        };
        f.render_widget(Paragraph::new(chunk.to_vec()), r);
    }
}

/// What every counter, column and mark means, by where it shows (`?` twice).
const LEGEND: &[(&str, &[(&str, &str)])] = &[
    (
        "Header",
        &[
            ("sched N", "schedulers alive"),
            ("polled", "last read of the database"),
            ("last 24h", "counters of the last day"),
            ("all time", "since the database began"),
            // Then the counters, from header::COUNTERS (the header's own words).
            ("!", "needs attention"),
        ],
    ),
    (
        "Jobs",
        &[
            ("WARN", "first warning (+: more)"),
            (" failing", "failed; none ok since"),
            (" gave up", "a firing used its 3 runs"),
            (" retry", "a firing waits to re-run"),
            (" p99>iv", "p99 > interval: a queue"),
            (" p99>lease", "unrenewed lease outlasted"),
            (" renew gap", "a lease renewal came late"),
            (" lease<6s", "renewed lease, thin margin"),
            (" lease>=iv", "a crash blocks next firing"),
            (" redefined", "defined otherwise too"),
            ("NEXT", "next firing; late! missed"),
            ("EVERY", "schedule or interval"),
            ("LEASE", "lease length"),
            ("RUNS", "runs in the window"),
            ("P50 P99", "run duration percentiles"),
            ("P99/IV", "p99 as % of the interval"),
            ("P99/LS", "p99 as % of the lease"),
            ("LAST", "last run, exit code, age"),
            ("TOKEN", "fencing token of the lease"),
            ("HOLDER", "who holds the lease"),
            ("EXPIRES", "lease left, free, expired"),
            ("STATE", "running ok failing idle …"),
            (" approval", "its run waits for approval"),
            ("Q", "firings queued"),
            ("OVERLAP", "coalesce, queue or fail"),
            ("SUP/FEN", "suppressed/fenced (job)"),
        ],
    ),
    (
        "Unknown, Approvals, Events",
        &[
            ("AGE", "since open or pending"),
            ("STATE", "submitted: may be sending"),
            ("", "unknown: answer lost"),
            ("VERDICT", "the observer's last answer"),
            ("TERMS", "what a person approves"),
            ("APPROVED BY", "who approved, unused"),
            ("KIND", "what happened (! alerts)"),
            ("WHO", "actor or owner that did it"),
            ("follow", "Events track newest (F)"),
        ],
    ),
    (
        "Runs (Enter on a job)",
        &[
            ("OUTCOME", "ok failed timeout killed…"),
            ("SLOT", "the firing's time slot"),
            ("OWNER", "the scheduler that ran it"),
        ],
    ),
];

/// The legend in columns of 39 cells, a page at a time (`j` turns it) when it does not fit.
pub(super) fn draw_legend(f: &mut Frame, t: &Theme, page: usize) {
    let area = centered(f.area(), 124, 40);
    f.render_widget(Clear, area);
    let mut lines: Vec<Line> = vec![];
    for (section, entries) in LEGEND {
        lines.push(Line::styled(*section, t.head()));
        for (label, text) in *entries {
            if *section == "Header" && *label == "!" {
                for c in &COUNTERS {
                    lines.push(Line::from(vec![
                        Span::styled(format!(" {:<11} ", c.word), t.title()),
                        Span::raw(c.gloss),
                    ]));
                }
            }
            lines.push(Line::from(vec![
                Span::styled(format!(" {label:<11} "), t.title()),
                Span::raw(*text),
            ]));
        }
    }
    let inner = Block::bordered().inner(area);
    let h = inner.height.max(1) as usize;
    let ncols = (inner.width / 39).max(1) as usize;
    let per_page = h * ncols;
    let pages = lines.len().div_ceil(per_page).max(1);
    let page = page % pages;
    let title = if pages > 1 {
        format!(
            " Legend {}/{pages} — j next page, ? keys, Esc closes ",
            page + 1
        )
    } else {
        " Legend — ? keys, Esc closes ".to_string()
    };
    f.render_widget(Block::bordered().title(title), area);
    let shown: Vec<Line> = lines
        .iter()
        .skip(page * per_page)
        .take(per_page)
        .cloned()
        .collect();
    draw_columns(f, inner, &shown, ncols, 0);
}

pub(super) fn draw_confirm(f: &mut Frame, t: &Theme, act: &Pending) {
    let vw = (f.area().width.min(78) as usize).saturating_sub(11);
    let mut lines = vec![];
    let mut push = |label: &str, value: &str| {
        lines.push(Line::from(vec![
            Span::styled(format!(" {label:<7}"), t.dim()),
            Span::raw(clip(value, vw)),
        ]))
    };
    match act {
        Pending::Approve { key, job, terms }
        | Pending::Deny { key, job, terms }
        | Pending::Resolve {
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
        Pending::Pause { job, note } => {
            push("job", job);
            push("note", note.as_deref().unwrap_or("(none)"));
        }
        Pending::Resume { job } => push("job", job),
        Pending::Probe { job } => {
            push("job", job);
            push(
                "does",
                "attempts its latest done effect again, same key and token",
            );
            push("sends", "NOTHING: no command, no observer is run");
            push(
                "expect",
                "the ledger suppresses it; the job's SUP count moves",
            );
            push("else", "dedupe broken: said so, its reservation released");
        }
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

pub(super) fn draw_resolve(f: &mut Frame, t: &Theme, key: &str, job: &str, terms: Option<&str>) {
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

/// The second confirmation of a resolution the ledger refused: who may still be sending and
/// until when, in red, and only `F` goes on.
pub(super) fn draw_force(f: &mut Frame, t: &Theme, act: &Pending) {
    let Pending::Resolve {
        key,
        job,
        force: Some(s),
        ..
    } = act
    else {
        return;
    };
    let vw = (f.area().width.min(78) as usize).saturating_sub(11);
    let line = |label: &str, v: &str| {
        Line::from(vec![
            Span::styled(format!(" {label:<7}"), t.dim()),
            Span::raw(clip(v, vw)),
        ])
    };
    let until = match &s.until {
        Some(u) => format!("{} (its lease's end)", crate::time::fmt(*u)),
        None => "its process is still running on this host".into(),
    };
    let mut lines = vec![
        line("effect", key),
        line("job", job),
        line("do", &act.verb()),
        line("sender", s.attempt.as_deref().unwrap_or("(unrecorded)")),
        line("until", &until),
    ];
    if s.running && s.until.is_some() {
        lines.push(line("", "its process is still running on this host"));
    }
    lines.push(Line::raw(""));
    for (i, w) in [
        "Its sender may still be sending. Check the far side first:",
        "\"did not happen\" lets a retry send it twice; \"cancel\" records",
        "cancelled for what the far side may still get.",
    ]
    .iter()
    .enumerate()
    {
        let mark = if i == 0 { " ! " } else { "   " };
        lines.push(Line::styled(clip(&format!("{mark}{w}"), vw + 8), t.bad()));
    }
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled(" F ", t.bad().add_modifier(Modifier::REVERSED)),
        Span::raw(" force it   "),
        Span::styled("[ n / Esc: cancel ]", t.selected()),
        Span::raw(" (default)"),
    ]));
    let area = centered(f.area(), 78, lines.len() as u16 + 2);
    f.render_widget(Clear, area);
    let block = Block::bordered()
        .title(Span::styled(" In flight: force the resolution? ", t.bad()))
        .border_style(t.bad());
    let inner = block.inner(area);
    f.render_widget(block, area);
    f.render_widget(Paragraph::new(lines), inner);
}

//! The top line, the counters and the view tabs.
use super::*;

pub(super) fn draw_top(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
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
        let registered = s
            .jobs
            .iter()
            .any(|j| j.settings.schedule.is_some() && !j.retired);
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
                clock(&crate::time::fmt(s.taken_at)),
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

/// One counter of the header: its word (the same at every width, in the legend and in
/// docs/dashboard.md), the legend's gloss and the docs' meaning.
pub(crate) struct Counter {
    pub word: &'static str,
    pub gloss: &'static str,
    /// Read by the test that writes docs/dashboard.md's table.
    #[cfg_attr(not(test), allow(dead_code))]
    pub means: &'static str,
}

/// The header's counters, in order: the one table the header, the legend and the docs'
/// counter table (`markdown_counters`, generated as the key table is) are drawn from.
pub(crate) const COUNTERS: [Counter; 7] = [
    Counter {
        word: "suppressed",
        gloss: "duplicates not sent again",
        means: "attempts that found their effect already done and sent nothing",
    },
    Counter {
        word: "fenced",
        gloss: "stale-token writes refused",
        means: "writes refused because a newer fencing token held the job",
    },
    Counter {
        word: "never-sent",
        gloss: "claims never sent (leaked)",
        means: "effects claimed under a lease that ended, never sent: a leak in the claim path",
    },
    Counter {
        word: "unknown",
        gloss: "sent, outcome unknown",
        means: "effects sent whose outcome is not known (and `submitted` by a sender that is gone)",
    },
    Counter {
        word: "oldest",
        gloss: "age of the oldest unknown",
        means: "the age of the oldest `unknown`",
    },
    Counter {
        word: "pending",
        gloss: "awaiting a person",
        means: "approvals waiting for a person",
    },
    Counter {
        word: "unused",
        gloss: "approved, never sent",
        means: "approvals given and not yet used by a send",
    },
];

/// docs/dashboard.md's counter table, from [`COUNTERS`].
#[cfg(test)]
pub(crate) fn markdown_counters() -> String {
    let mut s = String::from("| counter | means |\n|---|---|\n");
    for c in &COUNTERS {
        s.push_str(&format!("| `{}` | {} |\n", c.word, c.means));
    }
    s
}

pub(super) fn draw_counters(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    // The same words at every width (the legend's and the docs'): a wider screen pads them.
    let labels: [&str; 7] = COUNTERS.map(|c| c.word);
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
            .map(|u| (now - u.since).num_seconds())
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
pub(super) fn mark(n: u64, style: Style) -> (String, Style) {
    if n > 0 {
        (format!("{n}!"), style)
    } else {
        ("0".into(), Style::new())
    }
}

pub(super) fn draw_tabs(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let mut spans = vec![Span::raw(" ")];
    for v in View::ALL {
        let (n, alert) = match v {
            View::Jobs => (app.jobs().len(), false),
            View::Checklist => {
                let n = app.checklist_rows().len();
                (n, app.jobs_failing_a_rule() > 0)
            }
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
        // The checklist's count is a dash until its first judgement arrives.
        let n = match v {
            View::Checklist if app.checklist.is_none() => "-".to_string(),
            _ => n.to_string(),
        };
        let mut text = format!(
            "{} {} {}{}",
            v.index() + 1,
            v.title(),
            n,
            if alert { "!" } else { "" }
        );
        // The job count says how many jobs break one of the ten rules (view 5 shows which).
        let failing = app.jobs_failing_a_rule();
        if v == View::Jobs && failing > 0 {
            let (mark, _) = verdict_mark(crate::checklist::Verdict::Fail, t);
            text.push_str(&format!(" ({failing}{mark})"));
        }
        if v == app.view {
            spans.push(Span::styled(format!("[{text}]"), t.selected()));
        } else {
            let st = if alert { t.warn() } else { Style::new() };
            spans.push(Span::styled(format!(" {text} "), st));
        }
        spans.push(Span::raw(" "));
    }
    spans.push(Span::styled(
        format!(" sort:{}", app.sort.label(app.view)),
        t.dim(),
    ));
    if app.view == View::Events {
        spans.push(if app.follow {
            Span::styled(" follow", t.good())
        } else {
            Span::styled(" paused (F follows)", t.warn())
        });
    }
    if !app.filter.is_empty() {
        spans.push(Span::styled(
            format!(" filter:{}", clip(&app.filter, 20)),
            t.warn(),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

//! The status line and the footer of keys.
use super::*;

pub(super) fn draw_status(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
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

pub(super) fn is_action(a: KeyAction) -> bool {
    matches!(
        a,
        KeyAction::Approve | KeyAction::Deny | KeyAction::Resolve | KeyAction::Pause
    )
}

pub(super) fn draw_footer(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
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

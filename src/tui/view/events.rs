//! The Events view: the stream of events, newest first.
use super::*;

/// An event that needs attention: its kind, or a probe that found no suppressed duplicate.
pub(super) fn event_alert(e: &crate::snapshot::EventRow) -> bool {
    let probe_not_suppressed =
        e.kind == EventKind::Probe && e.detail.as_deref() != Some(crate::effect::PROBE_SUPPRESSED);
    probe_not_suppressed
        || matches!(
            e.kind,
            EventKind::FencedWrite
                | EventKind::LeaseStolen
                | EventKind::EffectUnknown
                | EventKind::ApprovalDenied
                | EventKind::NotifyFailed
                | EventKind::WatchdogRestarted
        )
}

pub(super) fn draw_events(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
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
    let shown = visible(
        app.offset(View::Events),
        Some(sel),
        list.len(),
        table_rows(area),
    );
    let rows = list[shown.clone()]
        .iter()
        .map(|e| {
            let alert = event_alert(e);
            vec![
                (if alert { "!" } else { " " }.into(), t.bad()),
                plain(clock(&crate::time::fmt(e.at))),
                (
                    e.kind.to_string(),
                    if alert { t.warn() } else { Style::new() },
                ),
                plain(e.job_key.clone().unwrap_or_else(|| "-".into())),
                plain(e.effect_key.clone().unwrap_or_else(|| "-".into())),
                plain(dash(e.fencing_token)),
                plain(e.actor.clone().unwrap_or_else(|| "-".into())),
                plain(e.detail.clone().unwrap_or_default()),
            ]
        })
        .collect();
    render_window(f, table(&cols, rows, area, t), area, shown, Some(sel));
}

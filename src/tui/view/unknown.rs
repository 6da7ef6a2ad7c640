//! The Unknown view: open effects (submitted or unknown) waiting for a resolver.
use super::*;

pub(super) fn draw_unknown(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
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
    let [tbl_area, notes] = list_layout(area);
    let sel = app.selected(View::Unknown);
    let shown = visible(
        app.offset(View::Unknown),
        Some(sel),
        list.len(),
        table_rows(tbl_area),
    );
    let rows = list[shown.clone()]
        .iter()
        .map(|u| {
            let age = (now - u.since).num_seconds();
            let alert = age > UNKNOWN_ALERT_S;
            vec![
                (if alert { "!" } else { " " }.into(), t.bad()),
                (human_age(age), if alert { t.bad() } else { Style::new() }),
                (
                    u.state.to_string(),
                    if u.state == EffectState::Unknown {
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
        table(&cols, rows, tbl_area, t),
        tbl_area,
        shown,
        Some(sel),
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
pub(super) fn draw_selected_effect(
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

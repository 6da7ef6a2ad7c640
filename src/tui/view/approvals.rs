//! The Approvals view: effects waiting for a person's decision.
use super::*;

pub(super) fn draw_approvals(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    let (pending, unused) = app.approvals();
    let key_w = if area.width >= 118 { 32 } else { 12 };
    let sel = app.selected(View::Approvals);
    let approval_rows = |list: &[&crate::snapshot::ApprovalView]| -> Vec<Vec<C>> {
        list.iter()
            .map(|a| {
                // The dashboard's own clock (pinned in its tests), not the read's.
                let age = (now - a.requested_at).num_seconds();
                let alert = ApprovalState::Pending == a.state.as_str() && age > APPROVAL_ALERT_S;
                vec![
                    (
                        human_age(age) + if alert { "!" } else { "" },
                        if alert { t.warn() } else { Style::new() },
                    ),
                    plain(a.job_key.clone()),
                    plain(a.effect_key.to_string()),
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
    let [p_title, p_area, u_title, u_area, notes] = approvals_layout(area, unused.len());
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
        let shown = visible(
            app.offset(View::Approvals),
            in_pending,
            pending.len(),
            table_rows(p_area),
        );
        let tbl = table(
            &pending_cols,
            approval_rows(&pending[shown.clone()]),
            p_area,
            t,
        );
        render_window(f, tbl, p_area, shown, in_pending);
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

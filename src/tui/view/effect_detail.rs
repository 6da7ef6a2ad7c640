//! An effect's detail: its ledger row and its events.
use super::*;

/// `label  value` lines, value clipped to what is left of the width.
pub(super) fn field<'a>(t: &Theme, label: &str, value: &str, width: u16) -> Line<'a> {
    let w = (width as usize).saturating_sub(20);
    Line::from(vec![
        Span::styled(format!(" {label:<18} "), t.dim()),
        Span::raw(clip(value, w)),
    ])
}

pub(super) fn draw_effect_detail(f: &mut Frame, t: &Theme, area: Rect, key: &str, d: &Detail) {
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
                    let ot = |v: &Option<Ts>| v.map_or_else(|| "-".into(), crate::time::fmt);
                    for (label, value) in [
                        ("effect_key", r.effect_key.to_string()),
                        ("state", r.state.to_string()),
                        ("job_key", r.job_key.clone()),
                        ("run_id", r.run_id.clone()),
                        ("fencing_token", dash(r.fencing_token)),
                        ("terms_shown", o(&r.terms_shown)),
                        ("response", o(&r.response)),
                        ("created_at", crate::time::fmt(r.created_at)),
                        ("updated_at", r.updated_at.clone()),
                        ("action_id", o(&r.action_id)),
                        ("target_id", o(&r.target_id)),
                        ("input_digest", o(&r.input_digest)),
                        ("observe_cmd", o(&r.observe_cmd)),
                        ("attempt", o(&r.attempt)),
                        ("verdict", o(&r.verdict)),
                        ("verdict_at", ot(&r.verdict_at)),
                        ("resolved_by", o(&r.resolved_by)),
                        ("resolved_at", ot(&r.resolved_at)),
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
                        crate::time::fmt(a.requested_at),
                        a.decided_by.as_deref().unwrap_or("-"),
                        a.decided_at.map_or_else(|| "-".into(), crate::time::fmt),
                        a.note.as_deref().unwrap_or("-"),
                        a.consumed_at.map_or_else(|| "-".into(), crate::time::fmt),
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
                    clock(&crate::time::fmt(e.at)),
                    if event_alert(e) { "!" } else { " " },
                    inert(e.kind.as_str()),
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

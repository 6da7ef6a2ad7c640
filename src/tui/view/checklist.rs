//! The Checklist view: jobs (and actions outside any job) as rows, the essay's ten rules as
//! columns, each cell the rule's verdict; the selected cell's evidence and fix below, and in
//! full on Enter.
use super::*;
use crate::checklist::{Rule, RuleResult, SubjectName, Verdict};

/// A verdict as the cell shows it: a glyph in colour, a plain letter without (NO_COLOR).
pub(super) fn verdict_mark(v: Verdict, t: &Theme) -> (&'static str, Style) {
    match (v, t.color) {
        (Verdict::Ok, true) => ("✔", t.good()),
        (Verdict::Warn, true) => ("!", t.warn()),
        (Verdict::Fail, true) => ("✘", t.bad()),
        (Verdict::Ok, false) => ("o", Style::new()),
        (Verdict::Warn, false) => ("w", Style::new()),
        (Verdict::Fail, false) => ("F", Style::new()),
    }
}

/// The subject as its row names it: a job by its name, an action outside any job marked so.
pub(super) fn subject_label(name: &SubjectName) -> String {
    match name {
        SubjectName::Job(j) => j.clone(),
        SubjectName::Action(a) => format!("action:{a}"),
    }
}

const RULE_TITLES: [&str; 10] = [" 1", " 2", " 3", " 4", " 5", " 6", " 7", " 8", " 9", "10"];

pub(super) fn draw_checklist(f: &mut Frame, app: &App, t: &Theme, area: Rect) {
    let Some(c) = &app.checklist else {
        empty_note(f, t, area, " judging the ten rules from the ledger…");
        return;
    };
    let rows = app.checklist_rows();
    if rows.is_empty() {
        let note = if c.subjects.is_empty() {
            " no jobs yet: the ten rules are judged for each job the ledger knows"
        } else {
            " nothing matches the filter"
        };
        empty_note(f, t, area, note);
        return;
    }
    let [tbl_area, notes] = list_layout(area);
    let mut cols = vec![col("JOB", 14, 0)];
    cols.extend(RULE_TITLES.iter().map(|title| col(title, 3, 0)));
    // The rules a row breaks, by id: the row read without counting columns.
    cols.push(flex("BREAKS", 10, 1));
    let sel = app.selected(View::Checklist);
    let rule = app.selected_rule();
    let shown = visible(
        app.offset(View::Checklist),
        Some(sel),
        rows.len(),
        table_rows(tbl_area),
    );
    let cells = rows[shown.clone()]
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let here = shown.start + i == sel;
            let mut cells = vec![plain(subject_label(&s.name))];
            cells.extend(s.rules.iter().map(|r| {
                let (mark, style) = verdict_mark(r.verdict, t);
                // The cursor's cell in brackets: the row is highlighted already.
                if here && r.rule == rule {
                    (format!("[{mark}]"), style)
                } else {
                    (format!(" {mark}"), style)
                }
            }));
            cells.push(breaks(s, t));
            cells
        })
        .collect();
    render_window(
        f,
        table(&cols, cells, tbl_area, t),
        tbl_area,
        shown,
        Some(sel),
    );
    let w = notes.width as usize;
    let lines = match rows.get(sel) {
        Some(s) => cell_lines(&subject_label(&s.name), s.result(rule), t, w),
        None => vec![],
    };
    f.render_widget(Paragraph::new(lines), notes);
}

/// The ids of the rules a subject fails (or, failing none, those it is warned about).
fn breaks(s: &crate::checklist::Subject, t: &Theme) -> C {
    for (v, style) in [(Verdict::Fail, t.bad()), (Verdict::Warn, t.warn())] {
        let ids: Vec<&str> = s
            .rules
            .iter()
            .filter(|r| r.verdict == v)
            .map(|r| r.rule.id())
            .collect();
        if !ids.is_empty() {
            let (mark, _) = verdict_mark(v, t);
            return (format!("{mark} {}", ids.join(" ")), style);
        }
    }
    plain("")
}

/// The selected cell in two lines: the rule and its evidence, then what to do.
fn cell_lines<'a>(subject: &str, r: &RuleResult, t: &Theme, w: usize) -> Vec<Line<'a>> {
    let (mark, style) = verdict_mark(r.verdict, t);
    vec![
        Line::from(vec![
            Span::styled(
                clip(
                    &format!(
                        " {} {} · {}: {mark} {}",
                        r.rule.number(),
                        r.rule.title(),
                        inert(subject),
                        r.verdict.id()
                    ),
                    w,
                ),
                style,
            ),
            Span::raw(clip(
                &format!(" — {}", inert(&r.evidence)),
                w.saturating_sub(r.rule.title().len() + subject.len() + 16),
            )),
        ]),
        Line::styled(clip(&format!("   fix: {}", inert(&r.fix)), w), t.dim()),
    ]
}

/// Enter on a cell: the rule, the verdict, the whole evidence and fix, wrapped.
pub(super) fn draw_rule(f: &mut Frame, app: &App, t: &Theme, subject: &str, rule: Rule) {
    let result = app.checklist.as_ref().and_then(|c| {
        c.subjects
            .iter()
            .find(|s| s.name.as_str() == subject)
            .map(|s| s.result(rule).clone())
    });
    let width = f.area().width.min(78);
    // The popup's inner width: its border takes two cells, the labels ten.
    let vw = width.saturating_sub(12).max(1) as usize;
    let mut lines = vec![Line::from(vec![
        Span::styled(format!(" {:<9}", "subject"), t.dim()),
        Span::raw(clip(subject, vw)),
    ])];
    match result {
        Some(r) => lines.extend(result_lines(&r, rule, t, vw)),
        None => lines.push(Line::styled(" no longer in the checklist", t.warn())),
    }
    let area = centered(f.area(), width, lines.len() as u16 + 2);
    f.render_widget(Clear, area);
    let block = Block::bordered().title(format!(
        " rule {} · {} — Esc closes ",
        rule.number(),
        rule.title()
    ));
    let inner = block.inner(area);
    f.render_widget(block, area);
    f.render_widget(Paragraph::new(lines), inner);
}

/// A result's lines in the popup: verdict, evidence and fix wrapped, the rule's id.
fn result_lines<'a>(r: &RuleResult, rule: Rule, t: &Theme, vw: usize) -> Vec<Line<'a>> {
    let (mark, style) = verdict_mark(r.verdict, t);
    let mut lines = vec![Line::from(vec![
        Span::styled(format!(" {:<9}", "verdict"), t.dim()),
        Span::styled(format!("{mark} {}", r.verdict.id()), style),
    ])];
    for (label, text) in [("evidence", &r.evidence), ("fix", &r.fix)] {
        let clean: Vec<char> = inert(text).chars().collect();
        for (i, chunk) in clean.chunks(vw).take(4).enumerate() {
            let head = if i == 0 { label } else { "" };
            lines.push(Line::from(vec![
                Span::styled(format!(" {head:<9}"), t.dim()),
                Span::raw(chunk.iter().collect::<String>().trim_start().to_string()),
            ]));
        }
    }
    lines.push(Line::styled(
        format!(" rule id {} (exactly doctor --json)", rule.id()),
        t.dim(),
    ));
    lines
}

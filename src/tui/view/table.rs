//! Table fitting: which columns fit the width, and the table drawn from rows.
use super::*;
use unicode_width::UnicodeWidthStr;

/// A table column: `prio` 0 always shows; higher ones drop first when narrow.
pub(super) struct Col {
    title: &'static str,
    width: u16,
    prio: u8,
    /// Takes the width left over.
    flex: bool,
}

pub(super) const fn col(title: &'static str, width: u16, prio: u8) -> Col {
    Col {
        title,
        width,
        prio,
        flex: false,
    }
}

pub(super) const fn flex(title: &'static str, width: u16, prio: u8) -> Col {
    Col {
        title,
        width,
        prio,
        flex: true,
    }
}

/// Which columns fit in `avail` cells, and how wide each is (in column order).
pub(super) fn fit(cols: &[Col], avail: u16) -> Vec<(usize, u16)> {
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

/// The cells the flex column has and does not need for its values go to
/// the columns whose shown values they make whole (a cron schedule of 9 cells in an 8-cell
/// column): a value is cut only when the screen has no room left for it.
fn widen(cols: &[Col], mut kept: Vec<(usize, u16)>, rows: &[Vec<C>]) -> Vec<(usize, u16)> {
    let Some(fx) = kept.iter().position(|(i, _)| cols[*i].flex) else {
        return kept;
    };
    let need = |i: usize| -> u16 {
        rows.iter()
            .filter_map(|r| r.get(i))
            .map(|(text, _)| inert(text).width().min(u16::MAX as usize) as u16)
            .max()
            .unwrap_or(0)
    };
    let (flex_col, flex_w) = kept[fx];
    // The flex column keeps what its widest value (or title) needs, even below its own width.
    let title = cols[flex_col].title.width().min(u16::MAX as usize) as u16;
    let keep = need(flex_col).max(title).min(flex_w);
    let mut spare = flex_w - keep;
    for (i, w) in kept.iter_mut() {
        if spare == 0 {
            break;
        }
        // A column of no width is a placeholder that keeps rows' cells aligned: never shown.
        if cols[*i].flex || cols[*i].width == 0 {
            continue;
        }
        let more = need(*i).saturating_sub(*w).min(spare);
        *w += more;
        spare -= more;
    }
    kept[fx].1 = keep + spare;
    kept
}

/// One table cell's text and style; the text is clipped to the column when laid out.
pub(super) type C = (String, Style);

pub(super) fn plain(s: impl Into<String>) -> C {
    (s.into(), Style::new())
}

/// Lays out a table from all-column rows, keeping the columns that fit.
pub(super) fn table<'a>(cols: &[Col], rows: Vec<Vec<C>>, area: Rect, t: &Theme) -> Table<'a> {
    let kept = widen(cols, fit(cols, area.width), &rows);
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

/// Renders the rows `shown` of a list (built by the caller for those rows only), `sel` being
/// the selected row of the whole list. The state is this frame's: the app's stays as it is.
pub(super) fn render_window(
    f: &mut Frame,
    tbl: Table<'_>,
    area: Rect,
    shown: std::ops::Range<usize>,
    sel: Option<usize>,
) {
    let mut state =
        TableState::default().with_selected(sel.and_then(|s| s.checked_sub(shown.start)));
    f.render_stateful_widget(tbl, area, &mut state);
}

pub(super) fn empty_note(f: &mut Frame, t: &Theme, area: Rect, text: &str) {
    f.render_widget(
        Paragraph::new(Span::styled(text.to_string(), t.dim())),
        area,
    );
}

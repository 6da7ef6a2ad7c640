//! Text for cells: clipped and made inert, ages, shares of a limit.
use super::*;

/// Inert, and cut to `width` terminal cells with `…` marking the cut.
pub(crate) fn clip(s: &str, width: usize) -> String {
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

/// `HH:MM:SS` of a fixed-width timestamp (inert: it may come from another program).
pub(super) fn clock(ts: &str) -> String {
    inert(ts.get(11..19).unwrap_or(ts))
}

/// An age in its largest unit only (`35m`, `11h`, `3d`): what fits a narrow column.
pub(super) fn short_age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

pub(super) fn dash<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// A job's p99 as a share of its lease: marked `!` past 100 % only for a lease nobody renews
/// (a run of a job the scheduler runs outlasts its renewed lease as a matter of course).
pub(super) fn lease_share(j: &JobRow) -> (String, bool) {
    let (text, over) = share(j.p99_ms, j.settings.lease_ms);
    if j.lease_renewed {
        (text.trim_end_matches('!').to_string(), false)
    } else {
        (text, over)
    }
}

/// `p99` as a share of a limit, marked `!` past 100 %.
/// p99 as a share of a limit in milliseconds (interval or lease).
pub(super) fn share(p99_ms: Option<u64>, limit_ms: Option<i64>) -> (String, bool) {
    match (p99_ms, limit_ms) {
        (Some(p), Some(l)) if l > 0 => {
            let pct = p as f64 * 100.0 / l as f64;
            let over = pct > 100.0;
            (format!("{:.0}%{}", pct, if over { "!" } else { "" }), over)
        }
        _ => ("-".into(), false),
    }
}

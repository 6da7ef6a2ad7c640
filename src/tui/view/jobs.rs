//! The Jobs view: one row per job, its lease, runs and next firing.
use super::*;

pub(super) const JOB_COLS: [Col; 18] = [
    // Each warned job's reason in a word, on its own row at any width (the notes below say it
    // in full for the selected one).
    col("WARN", 10, 0),
    flex("JOB", 14, 0),
    col("NEXT", 9, 1),
    col("EVERY", 8, 1),
    col("LEASE", 6, 2),
    col("RUNS", 5, 4),
    col("P50", 7, 3),
    col("P99", 7, 1),
    col("P99/IV", 6, 2),
    col("P99/LS", 6, 2),
    col("LAST", 13, 1),
    col("TOKEN", 5, 2),
    col("HOLDER", 14, 5),
    col("EXPIRES", 8, 1),
    col("STATE", 8, 1),
    col("Q", 3, 4),
    col("OVERLAP", 8, 5),
    col("SUP/FEN", 7, 4),
];

pub(super) fn lease_left(j: &JobRow, now: Ts) -> Option<i64> {
    j.lease_until.map(|u| (u - now).num_seconds())
}

/// The job's state word ([`JobRow::state`], as `jobs` and `status` say it); a paused job's in
/// capitals, to stand out; waiting for approval as `approval`, whole in the column (the legend
/// says it).
pub(super) fn job_state(j: &JobRow) -> &'static str {
    match j.state() {
        crate::snapshot::JobState::Paused => "PAUSED",
        crate::snapshot::JobState::AwaitingApproval => "approval",
        s => s.label(),
    }
}

pub(super) fn job_cells(j: &JobRow, t: &Theme, now: Ts) -> Vec<C> {
    // The column's title says "every": an interval shows its value alone and compact (`10s`,
    // `1h30m`), so a narrow column never cuts it (`every 1…`).
    let every = match (&j.settings.schedule, j.settings.interval_s) {
        (Some(s), _) => match s.strip_prefix("every ") {
            Some(d) => d.split_whitespace().collect(),
            None => s.clone(),
        },
        (None, Some(i)) => human_age(i),
        _ => "-".into(),
    };
    let (int_share, int_over) = share(j.p99_ms, j.settings.interval_s.map(|s| s * 1000));
    let (lse_share, lse_over) = lease_share(j);
    let last = j
        .last_run
        .as_ref()
        .map(|r| {
            let outcome = r.outcome_or_running();
            let code = r
                .exit_code
                .filter(|c| *c != 0)
                .map(|c| format!(" {c}"))
                .unwrap_or_default();
            let age = short_age((now - r.started_at).num_seconds());
            format!("{}{code} {age}", clip(outcome, 7))
        })
        .unwrap_or_else(|| "-".into());
    let last_style = match j.last_run.as_ref().and_then(|r| r.outcome.as_ref()) {
        Some(RunOutcome::Ok) | None => Style::new(),
        // Another writer's "done" reads as fine, as an effect's would.
        Some(RunOutcome::Other(w)) if w == EffectState::Done.as_str() => Style::new(),
        Some(o) if o.is_failure() => t.bad(),
        Some(_) => t.warn(),
    };
    let (next, next_style) = next_fire(j, t, now);
    let (expires, exp_style) = match (lease_left(j, now), &j.lease_owner) {
        (Some(l), Some(_)) if l > 0 => (human_age(l), Style::new()),
        (Some(_), Some(_)) => ("expired".into(), t.dim()),
        _ => ("free".into(), t.dim()),
    };
    let state = job_state(j);
    let over = |b: bool| if b { t.bad() } else { Style::new() };
    vec![
        (warn_cell(j), t.bad()),
        plain(j.job_key.clone()),
        (next, next_style),
        plain(every),
        plain(dash(
            j.settings.lease_ms.map(|ms| human_ms(ms.max(0) as u64)),
        )),
        plain(j.runs.to_string()),
        plain(dash(j.p50_ms.map(human_ms))),
        plain(dash(j.p99_ms.map(human_ms))),
        (int_share, over(int_over)),
        (lse_share, over(lse_over)),
        (last, last_style),
        plain(dash(j.fencing_token)),
        plain(j.lease_owner.clone().unwrap_or_else(|| "-".into())),
        (expires, exp_style),
        (state.into(), if j.paused { t.warn() } else { Style::new() }),
        plain(j.queue_depth.to_string()),
        plain(dash(j.settings.overlap.map(|o| o.name()))),
        plain(format!("{}/{}", j.duplicates_suppressed, j.fenced_writes)),
    ]
}

/// `!` and the first warning's reason (`!p99>lease`), `+` when there are more.
pub(super) fn warn_cell(j: &JobRow) -> String {
    match (j.warning_tags.first(), j.warnings.len()) {
        (_, 0) => String::new(),
        (Some(tag), 1) => format!("!{tag}"),
        (Some(tag), _) => format!("!{tag}+"),
        (None, _) => "!".into(),
    }
}

/// When a job fires next: `in 4m`, `due`, `late 3m!` (nobody fired it), `paused`.
pub(super) fn next_fire(j: &JobRow, t: &Theme, now: Ts) -> (String, Style) {
    if j.paused {
        return ("paused".into(), t.warn());
    }
    let Some(at) = j.next_fire_at else {
        return ("-".into(), t.dim());
    };
    let secs = (at - now).num_seconds();
    // A firing waits up to 2 s for its tick, and its jitter or catch-up window (`catchup_s`);
    // later than that, nobody fired it.
    if secs >= 0 {
        (format!("in {}", short_age(secs)), Style::new())
    } else if secs > -3 - j.catchup_s.max(0) {
        ("due".into(), Style::new())
    } else {
        (format!("late {}!", short_age(-secs)), t.bad())
    }
}

pub(super) fn draw_jobs(f: &mut Frame, app: &App, t: &Theme, area: Rect, now: Ts) {
    let jobs = app.jobs();
    if jobs.is_empty() {
        empty_note(
            f,
            t,
            area,
            " no jobs yet: a lease claimed (exactly lease claim) or a jobs file run \
             (exactly run) shows here",
        );
        return;
    }
    let [tbl_area, notes] = list_layout(area);
    let sel = app.selected(View::Jobs);
    let shown = visible(
        app.offset(View::Jobs),
        Some(sel),
        jobs.len(),
        table_rows(tbl_area),
    );
    let rows = jobs[shown.clone()]
        .iter()
        .map(|j| job_cells(j, t, now))
        .collect();
    render_window(
        f,
        table(&JOB_COLS, rows, tbl_area, t),
        tbl_area,
        shown,
        Some(sel),
    );
    // A host-name clash first (the header already says when no scheduler is alive), then the
    // selected job's warnings: the overlap forecast in words.
    let w = notes.width as usize;
    let system: Vec<Line> = app
        .snap
        .iter()
        .flat_map(|s| s.failover_warnings.iter().chain(s.host_clashes.iter()))
        .take(1)
        .map(|x| Line::styled(clip(&format!(" ! {}", inert(x)), w), t.bad()))
        .collect();
    let lines: Vec<Line> = match jobs.get(sel) {
        Some(j) if !j.warnings.is_empty() => j
            .warnings
            .iter()
            .take(2)
            .map(|x| Line::styled(clip(&format!(" ! {}: {x}", inert(&j.job_key)), w), t.bad()))
            .collect(),
        Some(j) if j.paused => vec![Line::styled(
            clip(
                &format!(
                    " {} is paused{}",
                    inert(&j.job_key),
                    j.pause_note
                        .as_deref()
                        .map(|n| format!(": {}", inert(n)))
                        .unwrap_or_default()
                ),
                w,
            ),
            t.warn(),
        )],
        Some(j) => vec![Line::styled(
            clip(&format!(" {}: no warnings", inert(&j.job_key)), w),
            t.dim(),
        )],
        None => vec![],
    };
    let lines: Vec<Line> = system.into_iter().chain(lines).collect();
    f.render_widget(Paragraph::new(lines), notes);
}

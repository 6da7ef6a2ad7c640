//! A job's detail (its runs and effects) and one run's stored output.
use super::*;

pub(super) fn draw_job_detail(
    f: &mut Frame,
    app: &App,
    t: &Theme,
    area: Rect,
    now: Ts,
    job: &str,
    d: &Detail,
) {
    let Some(j) = app
        .snap
        .as_ref()
        .and_then(|s| s.jobs.iter().find(|j| j.job_key == job))
    else {
        empty_note(f, t, area, " this job is no longer in the snapshot");
        return;
    };
    let info = head_lines(j, t, now, area.width as usize);
    let runs: &[RunRow] = match &d.loaded {
        Some(Loaded::Job { runs, .. }) => runs,
        _ => &[],
    };
    let info_h = info.len() as u16;
    let [info_area, legend, spark, runs_area] = Layout::vertical([
        Constraint::Length(info_h),
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Min(2),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(info), info_area);
    let times = RunTimes::of(j, runs);
    let legend_line = times.legend(t, d.loaded.is_none(), legend.width as usize);
    f.render_widget(Paragraph::new(legend_line), legend);
    times.draw_sparkline(f, t, spark);
    let rows = runs.iter().map(|r| run_row(r, times.lease_ms, t, now));
    // The cursor picks a run (Enter shows its output); the table scrolls to keep it in view.
    let selected = (!runs.is_empty()).then(|| d.scroll.min(runs.len() - 1));
    let mut state = TableState::default().with_selected(selected);
    let runs_table = table(&RUN_COLS, rows.collect(), runs_area, t);
    f.render_stateful_widget(runs_table, runs_area, &mut state);
}

/// The job's head: its title and keys, its settings and lease, its numbers, its pause and
/// warnings.
fn head_lines(j: &JobRow, t: &Theme, now: Ts, w: usize) -> Vec<Line<'static>> {
    let job = &j.job_key;
    let mut info = vec![Line::styled(
        clip(
            &format!(" Job {job} — Esc back, j/k pick a run, Enter its output, p pause/resume"),
            w,
        ),
        t.title(),
    )];
    for line in settings_lines(j, now) {
        info.push(Line::raw(clip(&line, w)));
    }
    if j.paused {
        info.push(Line::styled(
            clip(
                &format!(
                    " PAUSED{}",
                    j.pause_note
                        .as_deref()
                        .map(|n| format!(": {}", inert(n)))
                        .unwrap_or_default()
                ),
                w,
            ),
            t.warn(),
        ));
    }
    for x in &j.warnings {
        info.push(Line::styled(clip(&format!(" ! {x}"), w), t.bad()));
    }
    info
}

/// The job's settings, its lease, and its numbers: one line each; and its runs' start lag
/// when measured (the scheduler's part, kept out of p50/p99).
fn settings_lines(j: &JobRow, now: Ts) -> Vec<String> {
    let (int_share, _) = share(j.p99_ms, j.settings.interval_s.map(|s| s * 1000));
    let (lse_share, _) = lease_share(j);
    let mut lines = vec![
        format!(
            " schedule {}  interval {}  lease {}  overlap {}{}  state {}",
            inert(j.settings.schedule.as_deref().unwrap_or("-")),
            dash(j.settings.interval_s.map(human_age)),
            dash(j.settings.lease_ms.map(|ms| human_ms(ms.max(0) as u64))),
            inert(j.settings.overlap.map_or("-", |o| o.name())),
            j.settings
                .queue_cap
                .map(|c| format!(" (cap {c})"))
                .unwrap_or_default(),
            job_state(j),
        ),
        format!(" lease {}", lease_text(j, now)),
        format!(
            " runs {}  p50 {}  p99 {} ({} of interval, \
             {} of lease)  queue {}  suppressed {}  fenced {}",
            j.runs,
            dash(j.p50_ms.map(human_ms)),
            dash(j.p99_ms.map(human_ms)),
            int_share,
            lse_share,
            j.queue_depth,
            j.duplicates_suppressed,
            j.fenced_writes
        ),
    ];
    if let (Some(p50), Some(p99)) = (j.start_lag_p50_ms, j.start_lag_p99_ms) {
        lines.push(format!(
            " start lag p50 {}  p99 {}: the scheduler's, before each command started",
            human_ms(p50),
            human_ms(p99)
        ));
    }
    lines
}

/// Who holds the job's lease and for how long, or since when it is free.
fn lease_text(j: &JobRow, now: Ts) -> String {
    match (lease_left(j, now), &j.lease_owner) {
        (Some(l), Some(o)) if l > 0 => format!(
            "held by {} with fencing token {}, expires in {}",
            inert(o),
            dash(j.fencing_token),
            human_age(l)
        ),
        (Some(l), Some(o)) => format!(
            "expired {} ago (last holder {}, token {})",
            human_age(-l),
            inert(o),
            dash(j.fencing_token)
        ),
        _ => format!("free (last token {})", dash(j.fencing_token)),
    }
}

/// The runs' durations oldest → newest, and the scale they are drawn to: the top is the larger
/// of interval, lease and the longest run, so a bar near the top is a run that nearly
/// overlapped the next or lost its lease.
struct RunTimes {
    durations: Vec<Option<u64>>,
    top: u64,
    interval_ms: Option<u64>,
    lease_ms: Option<u64>,
}

impl RunTimes {
    fn of(j: &JobRow, runs: &[RunRow]) -> RunTimes {
        let durations: Vec<Option<u64>> = runs
            .iter()
            .rev()
            .map(|r| r.duration_ms.map(|d| d.max(0) as u64))
            .collect();
        let longest = durations.iter().flatten().copied().max().unwrap_or(0);
        let interval_ms = j.settings.interval_s.map(|s| s.max(0) as u64 * 1000);
        let lease_ms = j.settings.lease_ms.map(|ms| ms.max(0) as u64);
        let top = longest
            .max(interval_ms.unwrap_or(0))
            .max(lease_ms.unwrap_or(0))
            .max(1);
        RunTimes {
            durations,
            top,
            interval_ms,
            lease_ms,
        }
    }

    /// How many runs took longer than `limit`.
    fn over(&self, limit: Option<u64>) -> usize {
        limit
            .map(|l| self.durations.iter().flatten().filter(|&&d| d > l).count())
            .unwrap_or(0)
    }

    /// The line over the sparkline: its scale and the runs over lease or interval.
    fn legend(&self, t: &Theme, loading: bool, w: usize) -> Line<'static> {
        let (over_lease, over_interval) = (self.over(self.lease_ms), self.over(self.interval_ms));
        let pct = |x: Option<u64>| {
            x.map(|v| format!("{}%", v * 100 / self.top))
                .unwrap_or_else(|| "-".into())
        };
        let text = if loading {
            " run times: loading…".to_string()
        } else if self.durations.is_empty() {
            " run times: no runs recorded".to_string()
        } else {
            format!(
                " last {} run times, oldest→newest; top = {}; interval at {}, lease at {}; \
                 over lease {}{}, over interval {}{}",
                self.durations.len(),
                human_ms(self.top),
                pct(self.interval_ms),
                pct(self.lease_ms),
                over_lease,
                if over_lease > 0 { "!" } else { "" },
                over_interval,
                if over_interval > 0 { "!" } else { "" },
            )
        };
        let style = if over_lease + over_interval > 0 {
            t.bad()
        } else {
            t.dim()
        };
        Line::styled(clip(&text, w), style)
    }

    /// The newest runs that fit, one column each, past a one-column margin.
    fn draw_sparkline(&self, f: &mut Frame, t: &Theme, spark: Rect) {
        let spark_w = (spark.width as usize).saturating_sub(1);
        let shown: Vec<Option<u64>> = self
            .durations
            .iter()
            .skip(self.durations.len().saturating_sub(spark_w))
            .copied()
            .collect();
        f.render_widget(
            Sparkline::default()
                .data(&shown)
                .max(self.top)
                .style(t.fg(Color::Cyan))
                .absent_value_symbol("·"),
            Rect {
                x: spark.x + 1,
                width: spark.width.saturating_sub(1),
                ..spark
            },
        );
    }
}

/// The runs table's columns.
const RUN_COLS: [Col; 9] = [
    col("STARTED", 8, 0),
    col("AGO", 7, 0),
    col("DURATION", 8, 0),
    col("%LEASE", 7, 1),
    col("OUTCOME", 10, 0),
    col("EXIT", 4, 1),
    col("TOKEN", 5, 1),
    col("SLOT", 24, 3),
    flex("OWNER", 12, 2),
];

/// One run's row of the table: a run longer than the lease is marked.
fn run_row(r: &RunRow, lease_ms: Option<u64>, t: &Theme, now: Ts) -> Vec<C> {
    let over = matches!((r.duration_ms, lease_ms), (Some(d), Some(l)) if d as u64 > l);
    let over_style = if over { t.bad() } else { Style::new() };
    let of_lease = match (r.duration_ms, lease_ms) {
        (Some(d), Some(l)) if l > 0 => {
            format!(
                "{}%{}",
                d.max(0) as u64 * 100 / l,
                if over { "!" } else { "" }
            )
        }
        _ => "-".into(),
    };
    let outcome = r.outcome_at(now).to_string();
    let outcome_style = if r.failed() { t.bad() } else { Style::new() };
    vec![
        plain(clock(&crate::time::fmt(r.started_at))),
        plain(human_age((now - r.started_at).num_seconds())),
        (
            dash(r.duration_ms.map(|d| human_ms(d.max(0) as u64))),
            over_style,
        ),
        (of_lease, over_style),
        (outcome, outcome_style),
        plain(dash(r.exit_code)),
        plain(r.fencing_token.to_string()),
        plain(crate::time::fmt(r.scheduled_at)),
        plain(r.owner.clone()),
    ]
}

/// One run's stored output: stdout and stderr as they arrived, each line made inert, scrolled
/// with j/k, PgUp/PgDn, g/G.
pub(super) fn draw_run_output(
    f: &mut Frame,
    t: &Theme,
    area: Rect,
    now: Ts,
    job: &str,
    run_id: &str,
    d: &Detail,
) {
    let w = area.width as usize;
    let mut head = vec![Line::styled(
        clip(
            &format!(
                " Output of run {} ({}) — Esc back, j/k scroll",
                inert(run_id),
                inert(job)
            ),
            w,
        ),
        t.title(),
    )];
    let (row, output) = match &d.loaded {
        Some(Loaded::Run { row, output, .. }) => (row.as_deref(), output.as_str()),
        _ => {
            head.push(Line::styled(" loading…", t.dim()));
            f.render_widget(Paragraph::new(head), area);
            return;
        }
    };
    let Some(r) = row else {
        head.push(Line::styled(
            " this run is no longer stored (pruned?)",
            t.warn(),
        ));
        f.render_widget(Paragraph::new(head), area);
        return;
    };
    head.push(run_line(r, t, now, w));
    let (lines, body_h) = output_lines(output, area);
    let max_scroll = lines.len().saturating_sub(body_h);
    let scroll = d.scroll.min(max_scroll);
    let shown = if lines.is_empty() {
        " (no output)".to_string()
    } else {
        format!(
            " lines {}-{} of {}",
            scroll + 1,
            (scroll + body_h).min(lines.len()),
            lines.len()
        )
    };
    head.push(Line::styled(clip(&shown, w), t.head()));
    for l in lines.iter().skip(scroll).take(body_h) {
        head.push(Line::raw(format!(" {l}")));
    }
    f.render_widget(Paragraph::new(head), area);
}

/// What a run's output screen says of the run: its outcome, times, slot, token and owner.
fn run_line(r: &RunRow, t: &Theme, now: Ts, w: usize) -> Line<'static> {
    let outcome = r.outcome_at(now);
    let bad = r.failed();
    Line::styled(
        clip(
            &format!(
                " {}{} · started {} ({} ago) · took {} · slot {} · token {} · {}",
                inert(outcome),
                r.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_default(),
                clock(&crate::time::fmt(r.started_at)),
                human_age((now - r.started_at).num_seconds()),
                dash(r.duration_ms.map(|d| human_ms(d.max(0) as u64))),
                crate::time::fmt(r.scheduled_at),
                r.fencing_token,
                inert(&r.owner)
            ),
            w,
        ),
        if bad { t.bad() } else { t.dim() },
    )
}

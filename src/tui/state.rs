//! What the dashboard shows and where the operator is: the last [`Snapshot`] received, the view,
//! the selection and scroll state of each view, popups. Keys change it through [`App::on_key`]
//! (`state/keys.rs`); anything that needs the database leaves as a [`Request`] value and comes
//! back as a [`Reply`].
mod checklist;
mod keys;
mod sort;

use super::input::Mode;
use super::layout;
use super::screen::View;
use crate::approval::{ApprovalRow, Resolution, Sending};
use crate::checklist::{Checklist, Rule};
use crate::effect::LedgerRow;
use crate::sanitize::inert;
use crate::snapshot::{ApprovalView, EventRow, JobRow, OpenEffect, RunRow, Snapshot};
use ratatui::layout::Rect;
use ratatui::widgets::TableState;
pub(super) use sort::{ByAge, ChecklistSort, EventSort, JobSort, Sorts};
use std::time::Duration;

/// A risky action, held as a value until the operator confirms it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pending {
    Approve {
        key: String,
        job: String,
        terms: Option<String>,
    },
    Deny {
        key: String,
        job: String,
        terms: Option<String>,
    },
    Resolve {
        key: String,
        job: String,
        terms: Option<String>,
        how: Resolution,
        /// Set once the ledger said its sender may still be sending and the operator is asked
        /// again: then confirmed, it resolves with force.
        force: Option<Sending>,
    },
    Pause {
        job: String,
        note: Option<String>,
    },
    Resume {
        job: String,
    },
    /// Attempt the job's latest done effect again, sending nothing (`exactly probe`).
    Probe {
        job: String,
    },
}

impl Pending {
    pub(crate) fn verb(&self) -> String {
        match self {
            Pending::Approve { .. } => "approve".into(),
            Pending::Deny { .. } => "deny".into(),
            Pending::Resolve { how, force, .. } => {
                let verb = match how {
                    Resolution::Happened => "resolve: it happened (→ done)",
                    Resolution::NotHappened => {
                        "resolve: it did not happen (→ claimed, a retry may send it)"
                    }
                    Resolution::Cancel => "resolve: cancel, never retry (→ cancelled)",
                };
                match force {
                    Some(_) => format!("force {verb}"),
                    None => verb.into(),
                }
            }
            Pending::Pause { .. } => "pause job".into(),
            Pending::Resume { .. } => "resume job".into(),
            Pending::Probe { .. } => "probe job (sends nothing)".into(),
        }
    }
}

/// What a detail screen is about.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Focus {
    Job(String),
    Effect(String),
    /// One run's stored output (opened from its job's runs).
    Run {
        job: String,
        run_id: String,
    },
}

/// Work for the poll task: the only path from the screen to the database.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    Poll,
    Load(Focus),
    Pending(Pending),
}

/// Detail data read for one focus.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Loaded {
    Job {
        job: String,
        runs: Vec<RunRow>,
    },
    Effect {
        key: String,
        row: Option<Box<LedgerRow>>,
        approval: Option<Box<ApprovalRow>>,
        events: Vec<EventRow>,
    },
    Run {
        run_id: String,
        row: Option<Box<RunRow>>,
        output: String,
    },
}

/// The result of an action, shown in the status line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Report {
    pub ok: bool,
    pub text: String,
}

/// What the poll task sends back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    Snapshot(Box<Snapshot>),
    /// Nothing was committed since the last snapshot, checked at this instant: the snapshot
    /// still holds (its ages tick in the view).
    Unchanged(crate::time::Ts),
    PollFailed(String),
    Loaded(Loaded),
    LoadFailed(String),
    Acted(Report),
    /// The ten rules judged again (read less often than the snapshot: see `tui::Watch`).
    Checklist(Box<Checklist>),
    /// The ledger refused a resolution: its sender may still be sending. The act, with
    /// `force` set, waits for a second confirmation.
    InFlight(Pending, Report),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Typing {
    /// The filter is applied as it is typed; Esc puts back `before`.
    Filter {
        before: String,
    },
    PauseNote {
        job: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Popup {
    Help,
    Confirm(Pending),
    /// The second, red confirmation of a resolution whose sender may still be sending.
    Force(Pending),
    Resolve {
        key: String,
        job: String,
        terms: Option<String>,
    },
    Typing {
        what: Typing,
        text: String,
    },
    /// One cell of the Checklist: a subject's result for a rule, its evidence and its fix.
    Rule {
        subject: String,
        rule: Rule,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Detail {
    pub focus: Focus,
    pub loaded: Option<Loaded>,
    /// The first line shown; in a job's detail, the selected run.
    pub scroll: usize,
    /// Where Esc goes back to (a run's output goes back to its job's runs).
    pub back: Option<Box<Detail>>,
}

/// The effect under the cursor, with what an action needs to show.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EffectRef {
    pub key: String,
    pub job: String,
    pub terms: Option<String>,
    /// The approval's state when one was requested.
    pub approval: Option<exactly::state::ApprovalState>,
}

/// Where the operator is in one view's list, owned by the app: ratatui's own table state (the
/// selected row and the first row shown, over the whole filtered list) and the selected row's
/// identity. Keys and new snapshots move the selection; [`App::on_frame`] scrolls the window.
#[derive(Debug, Default)]
pub(super) struct ViewState {
    pub table: TableState,
    /// The row's identity, so a poll that inserts rows above does not move the cursor.
    key: Option<String>,
}

pub(crate) struct Options {
    pub read_only: bool,
    pub color: bool,
    pub refresh: Duration,
}

pub(crate) struct App {
    pub snap: Option<Snapshot>,
    /// Received while frozen; shown on unfreeze.
    held: Option<Snapshot>,
    pub poll_error: Option<String>,
    pub view: View,
    views: [ViewState; 5],
    /// The last checklist judged; none before the first.
    pub checklist: Option<Checklist>,
    /// The Checklist view's selected rule column (0 to 9).
    pub rule: usize,
    pub sort: Sorts,
    pub filter: String,
    pub frozen: bool,
    /// Events: the cursor stays on the newest row as events arrive (as `tail -f`); moving it
    /// away stops following, `F` or going to the first row follows again.
    pub follow: bool,
    /// The help popup shows the legend of counters and columns rather than the keys.
    pub legend: bool,
    /// Which page of the legend shows, on a screen too small for all of it.
    pub legend_page: usize,
    pub read_only: bool,
    /// Why read-only when it was not asked for (the database is not writable for us).
    pub read_only_reason: Option<String>,
    pub color: bool,
    pub refresh: Duration,
    pub popup: Option<Popup>,
    pub detail: Option<Detail>,
    pub status: Option<Report>,
    pub quit: bool,
    /// The last frame's area, recorded by the caller of draw (PgUp/PgDn and scrolling a run's
    /// output measure by it); none before the first frame.
    area: Option<Rect>,
}

impl App {
    pub(crate) fn new(o: Options) -> App {
        App {
            snap: None,
            held: None,
            poll_error: None,
            view: View::Jobs,
            views: Default::default(),
            checklist: None,
            rule: 0,
            sort: Sorts::default(),
            filter: String::new(),
            frozen: false,
            follow: true,
            legend: false,
            legend_page: 0,
            read_only: o.read_only,
            read_only_reason: None,
            color: o.color,
            refresh: o.refresh,
            popup: None,
            detail: None,
            status: None,
            quit: false,
            area: None,
        }
    }

    /// Which key table applies now.
    pub(crate) fn mode(&self) -> Mode {
        match &self.popup {
            None => Mode::Main,
            Some(Popup::Help) => Mode::Help,
            Some(Popup::Confirm(_)) => Mode::Confirm,
            Some(Popup::Force(_)) => Mode::Force,
            Some(Popup::Resolve { .. }) => Mode::Resolve,
            Some(Popup::Typing { .. }) => Mode::Typing,
            Some(Popup::Rule { .. }) => Mode::Cell,
        }
    }

    pub(crate) fn selected(&self, v: View) -> usize {
        self.views[v.index()].table.selected().unwrap_or(0)
    }

    /// The first row view `v`'s table shows.
    pub(crate) fn offset(&self, v: View) -> usize {
        self.views[v.index()].table.offset()
    }

    /// Rows that fit in the body of the last frame (for PgUp/PgDn; the table header takes one).
    pub(crate) fn page(&self) -> usize {
        self.area.map_or(10, |a| {
            layout::body(a).height.saturating_sub(2).max(1) as usize
        })
    }

    /// The furthest the open run's output can scroll in the last frame (long lines wrap).
    pub(crate) fn output_max(&self) -> usize {
        let (Some(area), Some(d)) = (self.area, &self.detail) else {
            return usize::MAX;
        };
        match &d.loaded {
            Some(Loaded::Run {
                row: Some(_),
                output,
                ..
            }) => {
                let (lines, fit) = layout::output_lines(output, layout::body(area));
                lines.len().saturating_sub(fit)
            }
            _ => 0,
        }
    }

    /// Takes the area of the frame about to be drawn: the shown view's table scrolls just enough
    /// to keep its selection in view (as ratatui scrolls), and stays put otherwise so it does
    /// not jump between frames. The caller of [`draw`](super::draw) calls this first.
    pub(crate) fn on_frame(&mut self, area: Rect) {
        self.area = Some(area);
        if self.detail.is_some() {
            return;
        }
        let v = self.view;
        let sel = self.selected(v);
        let (n, sel) = match v {
            View::Jobs => (self.jobs().len(), Some(sel)),
            View::Unknown => (self.unknown().len(), Some(sel)),
            View::Approvals => {
                let n = self.approvals().0.len();
                (n, (sel < n).then_some(sel))
            }
            View::Events => (self.events().len(), Some(sel)),
            View::Checklist => (self.checklist_rows().len(), Some(sel)),
        };
        if n == 0 {
            return;
        }
        let rows = layout::rows_shown(v, layout::body(area), self.approvals().1.len());
        let first = layout::visible(self.offset(v), sel, n, rows).start;
        *self.views[v.index()].table.offset_mut() = first;
    }

    // ---- rows, filtered and sorted ----

    fn matches(&self, job: &str, key: Option<&str>) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        let f = self.filter.to_lowercase();
        job.to_lowercase().contains(&f) || key.is_some_and(|k| k.to_lowercase().contains(&f))
    }

    pub(crate) fn jobs(&self) -> Vec<&JobRow> {
        // No filter: collect the rows without reading them (a frame touches only those shown).
        let all = self.filter.is_empty();
        let Some(s) = &self.snap else { return vec![] };
        let mut v: Vec<&JobRow> = s
            .jobs
            .iter()
            .filter(|j| all || self.matches(&j.job_key, None))
            .collect();
        match self.sort.jobs {
            JobSort::P99 => v.sort_by_key(|j| std::cmp::Reverse(j.p99_ms)),
            JobSort::LastRun => v.sort_by(|a, b| {
                let t = |j: &JobRow| j.last_run.as_ref().map(|r| r.started_at);
                t(b).cmp(&t(a))
            }),
            JobSort::Warnings => v.sort_by_key(|j| std::cmp::Reverse(j.warnings.len())),
            JobSort::Name => {}
        }
        v
    }

    pub(crate) fn unknown(&self) -> Vec<&OpenEffect> {
        // No filter: collect the rows without reading them (a frame touches only those shown).
        let all = self.filter.is_empty();
        let Some(s) = &self.snap else { return vec![] };
        let mut v: Vec<&OpenEffect> = s
            .unknown
            .iter()
            .filter(|u| all || self.matches(&u.job_key, Some(&u.effect_key)))
            .collect();
        if self.sort.unknown == ByAge::Job {
            v.sort_by(|a, b| a.job_key.cmp(&b.job_key));
        }
        v
    }

    /// Pending approvals, then approved-but-unused ones; the cursor runs over both.
    pub(crate) fn approvals<'a>(&'a self) -> (Vec<&'a ApprovalView>, Vec<&'a ApprovalView>) {
        let all = self.filter.is_empty();
        let Some(s) = &self.snap else {
            return (vec![], vec![]);
        };
        let filter_sort = |list: &'a [ApprovalView]| -> Vec<&'a ApprovalView> {
            let mut v: Vec<&'a ApprovalView> = list
                .iter()
                .filter(|a| all || self.matches(&a.job_key, Some(&a.effect_key)))
                .collect();
            if self.sort.approvals == ByAge::Job {
                v.sort_by(|a, b| a.job_key.cmp(&b.job_key));
            }
            v
        };
        (
            filter_sort(&s.pending_approvals),
            filter_sort(&s.unused_approvals),
        )
    }

    pub(crate) fn events(&self) -> Vec<&EventRow> {
        // No filter: collect the rows without reading them (a frame touches only those shown).
        let all = self.filter.is_empty();
        let Some(s) = &self.snap else { return vec![] };
        let mut v: Vec<&EventRow> = s
            .events
            .iter()
            .filter(|e| {
                all || self.matches(e.job_key.as_deref().unwrap_or(""), e.effect_key.as_deref())
            })
            .collect();
        if self.sort.events == EventSort::Kind {
            v.sort_by(|a, b| a.kind.as_str().cmp(b.kind.as_str()).then(b.id.cmp(&a.id)));
        }
        v
    }

    /// Row identities of a view, in display order.
    fn keys(&self, v: View) -> Vec<String> {
        match v {
            View::Jobs => self.jobs().iter().map(|j| j.job_key.clone()).collect(),
            View::Unknown => self
                .unknown()
                .iter()
                .map(|u| u.effect_key.to_string())
                .collect(),
            View::Approvals => {
                let (p, u) = self.approvals();
                p.iter()
                    .chain(u.iter())
                    .map(|a| a.effect_key.to_string())
                    .collect()
            }
            View::Events => self.events().iter().map(|e| e.id.to_string()).collect(),
            View::Checklist => self
                .checklist_rows()
                .iter()
                .map(|s| s.name.as_str().to_string())
                .collect(),
        }
    }

    /// Puts every cursor back on its row after the rows changed.
    fn reanchor(&mut self) {
        for v in View::ALL {
            let keys = self.keys(v);
            let c = &mut self.views[v.index()];
            let follows = v == View::Events && self.follow;
            let i = match c
                .key
                .as_ref()
                .filter(|_| !follows)
                .and_then(|k| keys.iter().position(|x| x == k))
            {
                Some(i) => i,
                None if follows => {
                    c.key = keys.first().cloned();
                    0
                }
                None => {
                    let i = c.table.selected().unwrap_or(0);
                    let i = i.min(keys.len().saturating_sub(1));
                    c.key = keys.get(i).cloned();
                    i
                }
            };
            c.table.select(Some(i));
        }
    }

    fn move_to(&mut self, index: isize) {
        let keys = self.keys(self.view);
        let last = keys.len().saturating_sub(1) as isize;
        let i = index.clamp(0, last.max(0)) as usize;
        if self.view == View::Events {
            self.follow = i == 0;
        }
        let c = &mut self.views[self.view.index()];
        c.table.select(Some(i));
        c.key = keys.get(i).cloned();
    }

    // ---- what is selected ----

    pub(crate) fn selected_job(&self) -> Option<&JobRow> {
        if let Some(Detail {
            focus: Focus::Job(job),
            ..
        }) = &self.detail
        {
            return self.snap.as_ref()?.jobs.iter().find(|j| &j.job_key == job);
        }
        if self.detail.is_some() || self.view != View::Jobs {
            return None;
        }
        self.jobs().get(self.selected(View::Jobs)).copied()
    }

    pub(crate) fn selected_effect(&self) -> Option<EffectRef> {
        if let Some(d) = &self.detail {
            let Focus::Effect(key) = &d.focus else {
                return None;
            };
            let (row, approval) = match &d.loaded {
                Some(Loaded::Effect { row, approval, .. }) => (row.as_deref(), approval.as_deref()),
                _ => (None, None),
            };
            return Some(EffectRef {
                key: key.clone(),
                job: row.map(|r| r.job_key.clone()).unwrap_or_default(),
                terms: row.and_then(|r| r.terms_shown.clone()),
                approval: approval.map(|a| a.state.clone()),
            });
        }
        let i = self.selected(self.view);
        match self.view {
            View::Jobs | View::Checklist => None,
            View::Unknown => self.unknown().get(i).map(|u| EffectRef {
                key: u.effect_key.to_string(),
                job: u.job_key.clone(),
                terms: u.terms_shown.clone(),
                approval: None,
            }),
            View::Approvals => {
                let (p, u) = self.approvals();
                p.iter().chain(u.iter()).nth(i).map(|a| EffectRef {
                    key: a.effect_key.to_string(),
                    job: a.job_key.clone(),
                    terms: a.terms_shown.clone(),
                    approval: Some(a.state.clone()),
                })
            }
            View::Events => {
                let e = self.events().get(i).copied()?;
                let key = e.effect_key.as_ref()?.to_string();
                Some(EffectRef {
                    key,
                    job: e.job_key.clone().unwrap_or_default(),
                    terms: None,
                    approval: None,
                })
            }
        }
    }

    // ---- incoming ----

    /// Takes in what the poll task sent; new data or an action's result asks for the open detail
    /// again.
    pub(crate) fn on_reply(&mut self, r: Reply) -> Option<Request> {
        match r {
            Reply::Snapshot(s) => {
                self.poll_error = None;
                if self.frozen {
                    self.held = Some(*s);
                } else {
                    self.snap = Some(*s);
                    self.reanchor();
                    // An open detail follows the data too (its rows are not in the snapshot).
                    return self.detail.as_ref().map(|d| Request::Load(d.focus.clone()));
                }
            }
            Reply::Unchanged(at) => {
                self.poll_error = None;
                if let Some(s) = self.held.as_mut().or(self.snap.as_mut()) {
                    s.taken_at = at;
                }
            }
            Reply::PollFailed(e) => self.poll_error = Some(e),
            Reply::Loaded(l) => {
                if let Some(d) = &mut self.detail {
                    let same = match (&d.focus, &l) {
                        (Focus::Job(a), Loaded::Job { job, .. }) => a == job,
                        (Focus::Effect(a), Loaded::Effect { key, .. }) => a == key,
                        (Focus::Run { run_id: a, .. }, Loaded::Run { run_id, .. }) => a == run_id,
                        _ => false,
                    };
                    if same {
                        d.loaded = Some(l);
                    }
                }
            }
            Reply::LoadFailed(e) => {
                self.status = Some(Report {
                    ok: false,
                    text: format!("cannot load detail: {}", inert(&e)),
                })
            }
            Reply::Checklist(c) => {
                self.checklist = Some(*c);
                self.reanchor();
            }
            Reply::Acted(rep) => {
                self.status = Some(rep);
                return self.detail.as_ref().map(|d| Request::Load(d.focus.clone()));
            }
            Reply::InFlight(act, rep) => {
                self.status = Some(rep);
                // Never over what the operator opened meanwhile: the status line says why.
                if self.popup.is_none() && !self.read_only {
                    self.popup = Some(Popup::Force(act));
                }
            }
        }
        None
    }
}

//! Keys into state changes: a [`KeyAction`] from the key table moves the selection, opens a
//! detail or a popup, or holds a risky act as a [`Pending`] until it is confirmed; what needs the
//! database leaves as a [`Request`].
use super::*;
use crate::tui::input::{lookup, KeyAction};
use crossterm::event::{KeyCode, KeyEvent};

impl App {
    fn refuse_read_only(&mut self, what: &str) -> bool {
        if self.read_only {
            self.status = Some(Report {
                ok: false,
                text: format!(
                    "read-only: {what} refused ({})",
                    self.read_only_reason
                        .as_deref()
                        .unwrap_or("started with --read-only")
                ),
            });
        }
        self.read_only
    }

    fn say(&mut self, ok: bool, text: impl Into<String>) {
        self.status = Some(Report {
            ok,
            text: text.into(),
        });
    }

    /// Handles one key press; returns work for the database, if any.
    pub(crate) fn on_key(&mut self, key: KeyEvent) -> Option<Request> {
        let mode = self.mode();
        let Some(action) = lookup(mode, &key) else {
            if let (Some(Popup::Typing { what, text }), KeyCode::Char(c)) =
                (&mut self.popup, key.code)
            {
                text.push(c);
                if matches!(what, Typing::Filter { .. }) {
                    self.filter = text.clone();
                    self.reanchor();
                }
            }
            return None;
        };
        if action == KeyAction::Quit {
            self.quit = true;
            return None;
        }
        match mode {
            Mode::Main => self.main_action(action),
            Mode::Help => {
                self.help_action(action);
                None
            }
            Mode::Confirm | Mode::Force => self.confirm_action(mode, action),
            Mode::Cell => {
                self.popup = None;
                None
            }
            Mode::Resolve => {
                self.resolve_action(action);
                None
            }
            Mode::Typing => {
                self.typing_action(action);
                None
            }
        }
    }

    /// In the help popup: Tab flips to the legend, PgDn pages it, any other key closes it.
    fn help_action(&mut self, action: KeyAction) {
        if action == KeyAction::NextView {
            self.legend = !self.legend;
            self.legend_page = 0;
        } else if action == KeyAction::PageDown {
            self.legend_page += 1;
        } else {
            self.popup = None;
        }
    }

    /// A confirmation (or the second one, `Force`): its own key does the held act, any other
    /// key cancels it.
    fn confirm_action(&mut self, mode: Mode, action: KeyAction) -> Option<Request> {
        let (act, yes) = match (self.popup.take(), mode) {
            (Some(Popup::Confirm(act)), Mode::Confirm) => (act, KeyAction::Confirm),
            (Some(Popup::Force(act)), Mode::Force) => (act, KeyAction::Force),
            _ => return None,
        };
        if action == yes {
            self.say(true, format!("working: {} …", act.verb()));
            Some(Request::Pending(act))
        } else {
            self.say(true, "cancelled; nothing changed");
            None
        }
    }

    /// Choosing how to resolve: happened, not happened or cancel, then a confirmation.
    fn resolve_action(&mut self, action: KeyAction) {
        let Some(Popup::Resolve { key, job, terms }) = self.popup.take() else {
            return;
        };
        let how = match action {
            KeyAction::Happened => Resolution::Happened,
            KeyAction::NotHappened => Resolution::NotHappened,
            KeyAction::CancelEffect => Resolution::Cancel,
            _ => return self.say(true, "cancelled; nothing changed"),
        };
        self.popup = Some(Popup::Confirm(Pending::Resolve {
            key,
            job,
            terms,
            how,
            force: None,
        }));
    }

    /// A line being typed (a filter, a pause note): Backspace, Enter, or Esc to drop it.
    fn typing_action(&mut self, action: KeyAction) {
        let Some(Popup::Typing { what, mut text }) = self.popup.take() else {
            return;
        };
        match (action, what) {
            (KeyAction::DeleteChar, what) => {
                text.pop();
                if matches!(what, Typing::Filter { .. }) {
                    self.filter = text.clone();
                    self.reanchor();
                }
                self.popup = Some(Popup::Typing { what, text });
            }
            (KeyAction::Accept, Typing::Filter { .. }) => {}
            (KeyAction::Accept, Typing::PauseNote { job }) => {
                let note = Some(text.trim().to_string()).filter(|n| !n.is_empty());
                self.popup = Some(Popup::Confirm(Pending::Pause { job, note }));
            }
            (_, Typing::Filter { before }) => {
                self.filter = before;
                self.reanchor();
            }
            (_, Typing::PauseNote { .. }) => self.say(true, "cancelled; nothing changed"),
        }
    }

    /// The main screen's actions, one handler each: what a key does is read off this table.
    fn main_action(&mut self, action: KeyAction) -> Option<Request> {
        use KeyAction as K;
        match action {
            K::Show(v) => self.show(v),
            K::NextView => self.show(self.view.next()),
            K::Up | K::Down | K::Top | K::Bottom | K::PageUp | K::PageDown => self.step(action),
            K::Left | K::Right if self.view == View::Checklist && self.detail.is_none() => {
                self.move_rule(if action == K::Left { -1 } else { 1 })
            }
            K::Open => return self.open(),
            K::Back => return self.back(),
            K::Filter => self.ask_filter(),
            K::Sort => {
                self.sort.next(self.view);
                self.reanchor();
            }
            K::Follow => self.toggle_follow(),
            K::Freeze => self.toggle_freeze(),
            K::Help => {
                self.legend = false;
                self.popup = Some(Popup::Help);
            }
            K::Approve => self.ask_decision(true),
            K::Deny => self.ask_decision(false),
            K::Resolve => self.ask_resolve(),
            K::Pause => self.ask_pause(),
            K::Probe => self.ask_probe(),
            _ => {}
        }
        None
    }

    fn show(&mut self, view: View) {
        self.view = view;
        self.detail = None;
    }

    /// Up, down, top, bottom, a page: in an open detail its scroll, else the selection.
    fn step(&mut self, action: KeyAction) {
        let page = self.page();
        let here = self.selected(self.view) as isize;
        let output_max = self.output_max();
        if let Some(d) = &mut self.detail {
            d.scroll = match action {
                KeyAction::Up => d.scroll.saturating_sub(1),
                KeyAction::Down => d.scroll + 1,
                KeyAction::Top => 0,
                KeyAction::PageUp => d.scroll.saturating_sub(page),
                KeyAction::PageDown => d.scroll + page,
                _ => usize::MAX / 2,
            };
            // Keep the cursor on a run, and a scroll within the output.
            let last = match &d.loaded {
                Some(Loaded::Job { runs, .. }) => Some(runs.len().saturating_sub(1)),
                Some(Loaded::Run { .. }) => Some(output_max),
                _ => None,
            };
            if let Some(last) = last {
                d.scroll = d.scroll.min(last);
            }
            return;
        }
        let page = page as isize;
        let to = match action {
            KeyAction::Up => here - 1,
            KeyAction::Down => here + 1,
            KeyAction::Top => 0,
            KeyAction::Bottom => isize::MAX / 2,
            KeyAction::PageUp => here - page,
            _ => here + page,
        };
        self.move_to(to);
    }

    /// Esc: back to the detail this one was opened from, else clears the filter.
    fn back(&mut self) -> Option<Request> {
        match self.detail.take() {
            Some(d) => {
                let back = d.back?;
                let focus = back.focus.clone();
                self.detail = Some(*back);
                Some(Request::Load(focus))
            }
            None => {
                if !self.filter.is_empty() {
                    self.filter.clear();
                    self.reanchor();
                }
                None
            }
        }
    }

    fn ask_filter(&mut self) {
        self.popup = Some(Popup::Typing {
            what: Typing::Filter {
                before: self.filter.clone(),
            },
            text: self.filter.clone(),
        });
    }

    fn toggle_follow(&mut self) {
        self.follow = !self.follow;
        if self.follow && self.view == View::Events {
            self.move_to(0);
        }
    }

    fn toggle_freeze(&mut self) {
        self.frozen = !self.frozen;
        if !self.frozen {
            if let Some(s) = self.held.take() {
                self.snap = Some(s);
                self.reanchor();
            }
        }
    }

    /// `a`/`d` on a pending approval: held for confirmation.
    fn ask_decision(&mut self, approve: bool) {
        if self.refuse_read_only(if approve { "approve" } else { "deny" }) {
            return;
        }
        match self.selected_effect() {
            Some(EffectRef {
                key,
                job,
                terms,
                approval: Some(_),
            }) => {
                self.popup = Some(Popup::Confirm(if approve {
                    Pending::Approve { key, job, terms }
                } else {
                    Pending::Deny { key, job, terms }
                }));
            }
            Some(_) => self.say(
                false,
                "no approval was requested for this effect (pending ones are in view 3)",
            ),
            None => self.say(false, "select a pending effect first (view 3)"),
        }
    }

    /// `r` on an unknown effect: the choice of how to resolve it.
    fn ask_resolve(&mut self) {
        if self.refuse_read_only("resolve") {
            return;
        }
        match self.selected_effect() {
            Some(e) => {
                self.popup = Some(Popup::Resolve {
                    key: e.key,
                    job: e.job,
                    terms: e.terms,
                })
            }
            None => self.say(false, "select an unknown effect first (view 2)"),
        }
    }

    /// `p` on a job: a note, then confirmation to pause; confirmation to resume a paused one.
    fn ask_pause(&mut self) {
        if self.refuse_read_only("pause/resume") {
            return;
        }
        let popup = match self.selected_job() {
            Some(j) if j.paused => Popup::Confirm(Pending::Resume {
                job: j.job_key.clone(),
            }),
            Some(j) => Popup::Typing {
                what: Typing::PauseNote {
                    job: j.job_key.clone(),
                },
                text: String::new(),
            },
            None => return self.say(false, "select a job first (view 1)"),
        };
        self.popup = Some(popup);
    }

    /// `P` on a job: confirmation that says a probe sends nothing.
    fn ask_probe(&mut self) {
        if self.refuse_read_only("probe") {
            return;
        }
        match self.selected_job() {
            Some(j) => {
                self.popup = Some(Popup::Confirm(Pending::Probe {
                    job: j.job_key.clone(),
                }))
            }
            None => self.say(false, "select a job first (view 1)"),
        }
    }

    fn open(&mut self) -> Option<Request> {
        if let Some(d) = &self.detail {
            // In a job's runs, Enter opens the selected run's output.
            let (Focus::Job(job), Some(Loaded::Job { runs, .. })) = (&d.focus, &d.loaded) else {
                return None;
            };
            let run = runs.get(d.scroll.min(runs.len().saturating_sub(1)))?;
            let focus = Focus::Run {
                job: job.clone(),
                run_id: run.run_id.clone(),
            };
            let back = self.detail.take().map(Box::new);
            self.detail = Some(Detail {
                focus: focus.clone(),
                loaded: None,
                scroll: 0,
                back,
            });
            return Some(Request::Load(focus));
        }
        if self.view == View::Checklist {
            let subject = self.selected_subject()?.name.as_str().to_string();
            let rule = self.selected_rule();
            self.popup = Some(Popup::Rule { subject, rule });
            return None;
        }
        let focus = match self.view {
            View::Jobs => Focus::Job(self.selected_job()?.job_key.clone()),
            View::Events => {
                let e = self.events().get(self.selected(View::Events)).copied()?;
                match (&e.effect_key, &e.job_key) {
                    (Some(k), _) => Focus::Effect(k.to_string()),
                    (None, Some(j)) => Focus::Job(j.clone()),
                    _ => return None,
                }
            }
            _ => Focus::Effect(self.selected_effect()?.key),
        };
        self.detail = Some(Detail {
            focus: focus.clone(),
            loaded: None,
            scroll: 0,
            back: None,
        });
        Some(Request::Load(focus))
    }
}

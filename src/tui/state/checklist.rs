//! The Checklist view's rows and cursor: subjects (jobs, then actions outside any job) by the
//! filter and the view's order, and the rule column under the cursor.
use super::*;
use crate::checklist::{Subject, Verdict};

impl App {
    /// The checklist's subjects as the view lists them.
    pub(crate) fn checklist_rows(&self) -> Vec<&Subject> {
        let Some(c) = &self.checklist else {
            return vec![];
        };
        let mut v: Vec<&Subject> = c
            .subjects
            .iter()
            .filter(|s| self.matches(s.name.as_str(), None))
            .collect();
        if self.sort.checklist == ChecklistSort::Worst {
            let weight = |s: &Subject| {
                let n = |v: Verdict| s.rules.iter().filter(|r| r.verdict == v).count();
                std::cmp::Reverse((n(Verdict::Fail), n(Verdict::Warn)))
            };
            v.sort_by_key(|s| weight(s));
        }
        v
    }

    /// The subject under the cursor in the Checklist view.
    pub(crate) fn selected_subject(&self) -> Option<&Subject> {
        if self.view != View::Checklist || self.detail.is_some() {
            return None;
        }
        self.checklist_rows()
            .get(self.selected(View::Checklist))
            .copied()
    }

    /// The rule column under the cursor.
    pub(crate) fn selected_rule(&self) -> Rule {
        Rule::ALL[self.rule.min(Rule::ALL.len() - 1)]
    }

    /// Moves the rule column by `by`, staying within the ten.
    pub(super) fn move_rule(&mut self, by: isize) {
        let last = Rule::ALL.len() as isize - 1;
        self.rule = (self.rule as isize + by).clamp(0, last) as usize;
    }

    /// How many jobs fail at least one rule (the Jobs tab says so).
    pub(crate) fn jobs_failing_a_rule(&self) -> usize {
        self.checklist.as_ref().map_or(0, |c| {
            c.subjects
                .iter()
                .filter(|s| matches!(s.name, crate::checklist::SubjectName::Job(_)))
                .filter(|s| s.worst() == Verdict::Fail)
                .count()
        })
    }
}

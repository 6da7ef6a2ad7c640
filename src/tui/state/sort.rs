//! How each view orders its rows; `s` cycles the current view's order.
use crate::tui::screen::View;

/// The Jobs view's orders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum JobSort {
    /// By name (the snapshot's order).
    #[default]
    Name,
    /// Slowest p99 first.
    P99,
    /// Most recently started run first.
    LastRun,
    /// Most warnings first.
    Warnings,
}

/// The Unknown and Approvals views' orders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ByAge {
    /// Oldest first (the snapshot's order).
    #[default]
    Oldest,
    /// By job name.
    Job,
}

/// The Events view's orders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum EventSort {
    /// Newest first (the snapshot's order).
    #[default]
    Newest,
    /// By kind, newest first within a kind.
    Kind,
}

/// The Checklist view's orders.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ChecklistSort {
    /// Jobs by name, then actions outside any job (the checklist's order).
    #[default]
    Name,
    /// Worst first: most failed rules, then most warnings.
    Worst,
}

/// Each view's order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sorts {
    pub jobs: JobSort,
    pub unknown: ByAge,
    pub approvals: ByAge,
    pub events: EventSort,
    pub checklist: ChecklistSort,
}

impl Sorts {
    /// The view's next order, after its last the first again.
    pub(crate) fn next(&mut self, view: View) {
        match view {
            View::Jobs => {
                self.jobs = match self.jobs {
                    JobSort::Name => JobSort::P99,
                    JobSort::P99 => JobSort::LastRun,
                    JobSort::LastRun => JobSort::Warnings,
                    JobSort::Warnings => JobSort::Name,
                }
            }
            View::Unknown => self.unknown = self.unknown.next(),
            View::Approvals => self.approvals = self.approvals.next(),
            View::Events => {
                self.events = match self.events {
                    EventSort::Newest => EventSort::Kind,
                    EventSort::Kind => EventSort::Newest,
                }
            }
            View::Checklist => {
                self.checklist = match self.checklist {
                    ChecklistSort::Name => ChecklistSort::Worst,
                    ChecklistSort::Worst => ChecklistSort::Name,
                }
            }
        }
    }

    /// The view's order as the header shows it (`sort:p99`).
    pub(crate) fn label(&self, view: View) -> &'static str {
        match view {
            View::Jobs => match self.jobs {
                JobSort::Name => "name",
                JobSort::P99 => "p99",
                JobSort::LastRun => "last run",
                JobSort::Warnings => "warnings",
            },
            View::Unknown => self.unknown.label(),
            View::Approvals => self.approvals.label(),
            View::Events => match self.events {
                EventSort::Newest => "newest",
                EventSort::Kind => "kind",
            },
            View::Checklist => match self.checklist {
                ChecklistSort::Name => "name",
                ChecklistSort::Worst => "worst",
            },
        }
    }
}

impl ByAge {
    fn next(self) -> ByAge {
        match self {
            ByAge::Oldest => ByAge::Job,
            ByAge::Job => ByAge::Oldest,
        }
    }

    fn label(self) -> &'static str {
        match self {
            ByAge::Oldest => "oldest",
            ByAge::Job => "job",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s_cycles_each_views_orders_and_back() {
        let mut s = Sorts::default();
        let mut seen = Vec::new();
        for _ in 0..5 {
            seen.push(s.label(View::Jobs));
            s.next(View::Jobs);
        }
        assert_eq!(seen, ["name", "p99", "last run", "warnings", "name"]);
        // Each view keeps its own order.
        s.next(View::Events);
        assert_eq!(s.label(View::Events), "kind");
        assert_eq!(s.label(View::Unknown), "oldest");
        s.next(View::Approvals);
        assert_eq!(
            (s.label(View::Approvals), s.label(View::Unknown)),
            ("job", "oldest")
        );
    }
}

//! The dashboard's views: a word the keys (`input.rs`), the state and the drawing share, kept
//! below all three.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum View {
    Jobs,
    Unknown,
    Approvals,
    Events,
    /// The essay's ten rules judged for every job (`exactly doctor`'s checklist).
    Checklist,
}

impl View {
    pub(crate) const ALL: [View; 5] = [
        View::Jobs,
        View::Unknown,
        View::Approvals,
        View::Events,
        View::Checklist,
    ];

    pub(crate) fn index(self) -> usize {
        match self {
            View::Jobs => 0,
            View::Unknown => 1,
            View::Approvals => 2,
            View::Events => 3,
            View::Checklist => 4,
        }
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            View::Jobs => "Jobs",
            View::Unknown => "Unknown",
            View::Approvals => "Approvals",
            View::Events => "Events",
            View::Checklist => "Checklist",
        }
    }

    pub(super) fn next(self) -> View {
        View::ALL[(self.index() + 1) % View::ALL.len()]
    }
}

//! The dashboard's colours: the 16 named ANSI colours, or none at all.
use super::*;

/// The 16 named colours, or none at all (`--no-color`, `NO_COLOR`). Meaning is always carried
/// by text too (`!`, `>`, words), so monochrome loses nothing.
pub(super) struct Theme {
    pub(super) color: bool,
}

impl Theme {
    pub(super) fn fg(&self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }
    pub(super) fn bad(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }
    pub(super) fn warn(&self) -> Style {
        self.fg(Color::Yellow)
    }
    pub(super) fn good(&self) -> Style {
        self.fg(Color::Green)
    }
    pub(super) fn dim(&self) -> Style {
        self.fg(Color::DarkGray)
    }
    pub(super) fn title(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }
    pub(super) fn head(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }
    pub(super) fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }
}

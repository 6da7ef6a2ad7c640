//! Keys become [`KeyAction`] values through one table, [`BINDINGS`], which also feeds the help
//! popup and the footer, so what the screen says is what the keys do.
use super::screen::View;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Where a key is read: the main screen, a popup, or a line being typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A list view or an open detail.
    Main,
    /// The confirmation of a risky action.
    Confirm,
    /// Choosing how to resolve an unknown effect.
    Resolve,
    /// The second confirmation of a resolution whose sender may still be sending.
    Force,
    /// Typing a filter or a pause note.
    Typing,
    /// The help popup.
    Help,
    /// A Checklist cell's evidence and fix.
    Cell,
}

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyAction {
    Show(View),
    NextView,
    Up,
    Down,
    /// Checklist: the rule column to the left.
    Left,
    /// Checklist: the rule column to the right.
    Right,
    Top,
    Bottom,
    PageUp,
    PageDown,
    Open,
    Back,
    Filter,
    Sort,
    Freeze,
    /// Events: follow the newest row, or stop following.
    Follow,
    Help,
    Quit,
    Approve,
    Deny,
    Resolve,
    Pause,
    /// Probe the selected job: attempt its latest done effect again, sending nothing.
    Probe,
    /// In a confirmation: do it.
    Confirm,
    /// In the second confirmation: resolve although its sender may still be sending.
    Force,
    /// In a popup: do nothing and close it.
    Cancel,
    Happened,
    NotHappened,
    CancelEffect,
    /// While typing: accept the line.
    Accept,
    DeleteChar,
}

/// One key binding: in `mode`, `keys` do `action`; `label` and `help` are what people read.
pub(crate) struct Binding {
    pub mode: Mode,
    pub keys: &'static [(KeyCode, KeyModifiers)],
    pub label: &'static str,
    pub help: &'static str,
    pub action: KeyAction,
    /// The footer's word for it; bindings without one show only in `?`.
    pub short: Option<&'static str>,
}

const NONE: KeyModifiers = KeyModifiers::NONE;
const CTRL: KeyModifiers = KeyModifiers::CONTROL;

const fn ch(c: char) -> (KeyCode, KeyModifiers) {
    (KeyCode::Char(c), NONE)
}

const fn b(
    mode: Mode,
    keys: &'static [(KeyCode, KeyModifiers)],
    label: &'static str,
    help: &'static str,
    action: KeyAction,
    short: Option<&'static str>,
) -> Binding {
    Binding {
        mode,
        keys,
        label,
        help,
        action,
        short,
    }
}

use KeyAction as A;
use Mode as M;

/// Every key the dashboard answers to.
pub(crate) const BINDINGS: &[Binding] = &[
    b(
        M::Main,
        &[(KeyCode::Char('q'), NONE), (KeyCode::Char('c'), CTRL)],
        "q",
        "quit",
        A::Quit,
        Some("quit"),
    ),
    b(
        M::Main,
        &[(KeyCode::Char('?'), NONE), (KeyCode::F(1), NONE)],
        "?",
        "help",
        A::Help,
        Some("help"),
    ),
    b(
        M::Main,
        &[ch('1')],
        "1",
        "Jobs: leases, run times",
        A::Show(View::Jobs),
        None,
    ),
    b(
        M::Main,
        &[ch('2')],
        "2",
        "Unknown: effects to resolve",
        A::Show(View::Unknown),
        None,
    ),
    b(
        M::Main,
        &[ch('3')],
        "3",
        "Approvals: pending, unused",
        A::Show(View::Approvals),
        None,
    ),
    b(
        M::Main,
        &[ch('4')],
        "4",
        "Events: the recent stream",
        A::Show(View::Events),
        None,
    ),
    b(
        M::Main,
        &[ch('5')],
        "5",
        "Checklist: the ten rules per job",
        A::Show(View::Checklist),
        None,
    ),
    b(
        M::Main,
        &[(KeyCode::Tab, NONE)],
        "Tab",
        "next view",
        A::NextView,
        None,
    ),
    b(
        M::Main,
        &[ch('k'), (KeyCode::Up, NONE)],
        "k/↑",
        "move up",
        A::Up,
        None,
    ),
    b(
        M::Main,
        &[ch('j'), (KeyCode::Down, NONE)],
        "j/↓",
        "move down",
        A::Down,
        None,
    ),
    b(
        M::Main,
        &[ch('h'), (KeyCode::Left, NONE)],
        "h/←",
        "Checklist: rule to the left",
        A::Left,
        None,
    ),
    b(
        M::Main,
        &[ch('l'), (KeyCode::Right, NONE)],
        "l/→",
        "Checklist: rule to the right",
        A::Right,
        None,
    ),
    b(
        M::Main,
        &[ch('g'), (KeyCode::Home, NONE)],
        "g",
        "first row",
        A::Top,
        None,
    ),
    b(
        M::Main,
        &[ch('G'), (KeyCode::End, NONE)],
        "G",
        "last row",
        A::Bottom,
        None,
    ),
    b(
        M::Main,
        &[(KeyCode::PageUp, NONE)],
        "PgUp",
        "page up",
        A::PageUp,
        None,
    ),
    b(
        M::Main,
        &[(KeyCode::PageDown, NONE)],
        "PgDn",
        "page down",
        A::PageDown,
        None,
    ),
    b(
        M::Main,
        &[(KeyCode::Enter, NONE)],
        "Enter",
        "open (job → runs → output; a rule's evidence)",
        A::Open,
        Some("open"),
    ),
    b(
        M::Main,
        &[(KeyCode::Esc, NONE), (KeyCode::Backspace, NONE)],
        "Esc",
        "back / clear filter",
        A::Back,
        None,
    ),
    b(
        M::Main,
        &[ch('/')],
        "/",
        "filter by job or effect key",
        A::Filter,
        Some("filter"),
    ),
    b(M::Main, &[ch('s')], "s", "sort", A::Sort, None),
    b(
        M::Main,
        &[ch('f')],
        "f",
        "freeze / unfreeze updates",
        A::Freeze,
        None,
    ),
    b(
        M::Main,
        &[ch('F')],
        "F",
        "Events: follow the newest / stop",
        A::Follow,
        None,
    ),
    b(
        M::Main,
        &[ch('a')],
        "a",
        "approve selected pending effect",
        A::Approve,
        Some("approve"),
    ),
    b(
        M::Main,
        &[ch('d')],
        "d",
        "deny selected pending effect",
        A::Deny,
        Some("deny"),
    ),
    b(
        M::Main,
        &[ch('r')],
        "r",
        "resolve selected unknown effect",
        A::Resolve,
        Some("resolve"),
    ),
    b(
        M::Main,
        &[ch('p')],
        "p",
        "pause / resume selected job",
        A::Pause,
        Some("pause"),
    ),
    b(
        M::Main,
        &[ch('P')],
        "P",
        "probe job (sends nothing)",
        A::Probe,
        None,
    ),
    b(
        M::Confirm,
        &[ch('y'), ch('Y')],
        "y",
        "confirm",
        A::Confirm,
        Some("confirm"),
    ),
    b(
        M::Confirm,
        &[
            ch('n'),
            (KeyCode::Esc, NONE),
            (KeyCode::Enter, NONE),
            ch('q'),
        ],
        "n/Esc",
        "cancel (the default)",
        A::Cancel,
        Some("cancel"),
    ),
    // A capital F, not a second `y`: a reflex that confirmed once must not release a sender.
    b(
        M::Force,
        &[ch('F')],
        "F",
        "force (it may still be sending)",
        A::Force,
        Some("force"),
    ),
    b(
        M::Force,
        &[
            ch('n'),
            (KeyCode::Esc, NONE),
            (KeyCode::Enter, NONE),
            ch('q'),
        ],
        "n/Esc",
        "cancel (the default)",
        A::Cancel,
        Some("cancel"),
    ),
    b(
        M::Resolve,
        &[ch('h')],
        "h",
        "it happened: mark done",
        A::Happened,
        Some("happened"),
    ),
    b(
        M::Resolve,
        &[ch('n')],
        "n",
        "it did not happen: may retry",
        A::NotHappened,
        Some("did not happen"),
    ),
    b(
        M::Resolve,
        &[ch('c')],
        "c",
        "cancel: never retry",
        A::CancelEffect,
        Some("cancel effect"),
    ),
    b(
        M::Resolve,
        &[(KeyCode::Esc, NONE), ch('q')],
        "Esc",
        "back",
        A::Cancel,
        Some("back"),
    ),
    b(
        M::Typing,
        &[(KeyCode::Enter, NONE)],
        "Enter",
        "accept",
        A::Accept,
        Some("accept"),
    ),
    b(
        M::Typing,
        &[(KeyCode::Esc, NONE)],
        "Esc",
        "cancel",
        A::Cancel,
        Some("cancel"),
    ),
    b(
        M::Typing,
        &[(KeyCode::Backspace, NONE)],
        "Bksp",
        "delete a character",
        A::DeleteChar,
        None,
    ),
    b(
        M::Help,
        &[(KeyCode::Tab, NONE), ch('?'), ch('l')],
        "?/Tab",
        "keys / legend of every counter and column",
        A::NextView,
        Some("legend"),
    ),
    b(
        M::Help,
        &[
            ch('j'),
            (KeyCode::Down, NONE),
            (KeyCode::PageDown, NONE),
            ch(' '),
        ],
        "j",
        "the legend's next page",
        A::PageDown,
        None,
    ),
    b(
        M::Help,
        &[(KeyCode::Esc, NONE), ch('q'), (KeyCode::Enter, NONE)],
        "Esc",
        "close help",
        A::Cancel,
        Some("close"),
    ),
    b(
        M::Cell,
        &[(KeyCode::Esc, NONE), ch('q'), (KeyCode::Enter, NONE)],
        "Esc",
        "close the rule's evidence",
        A::Cancel,
        Some("close"),
    ),
];

/// The action bound to `key` in `mode`, if any. Ctrl-C always quits.
pub(crate) fn lookup(mode: Mode, key: &KeyEvent) -> Option<KeyAction> {
    if key.code == KeyCode::Char('c') && key.modifiers.contains(CTRL) {
        return Some(KeyAction::Quit);
    }
    // Shift arrives with upper-case letters on some terminals and not on others.
    let mods = key.modifiers - KeyModifiers::SHIFT;
    BINDINGS
        .iter()
        .filter(|b| b.mode == mode)
        .find(|b| {
            b.keys
                .iter()
                .any(|(code, m)| *code == key.code && (*m - KeyModifiers::SHIFT) == mods)
        })
        .map(|b| b.action)
}

/// The bindings of one mode, for the footer or the help popup.
pub(crate) fn of_mode(mode: Mode) -> impl Iterator<Item = &'static Binding> {
    BINDINGS.iter().filter(move |b| b.mode == mode)
}

/// The key table as Markdown, for docs/dashboard.md (the same table `?` shows).
#[cfg(test)]
pub(crate) fn markdown() -> String {
    let mut out = String::from("| where | key | does |\n|---|---|---|\n");
    for m in [
        Mode::Main,
        Mode::Confirm,
        Mode::Force,
        Mode::Resolve,
        Mode::Typing,
        Mode::Help,
        Mode::Cell,
    ] {
        let place = match m {
            Mode::Main => "screen",
            Mode::Confirm => "confirmation",
            Mode::Force => "in flight",
            Mode::Resolve => "after `r`",
            Mode::Typing => "typing",
            Mode::Help => "help",
            Mode::Cell => "a rule's evidence",
        };
        for b in of_mode(m) {
            out.push_str(&format!("| {place} | `{}` | {} |\n", b.label, b.help));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_key_is_unique_per_mode() {
        for (i, a) in BINDINGS.iter().enumerate() {
            for b2 in &BINDINGS[i + 1..] {
                if a.mode != b2.mode {
                    continue;
                }
                for k in a.keys {
                    assert!(!b2.keys.contains(k), "{:?} bound twice in {:?}", k, a.mode);
                }
            }
        }
    }

    #[test]
    fn ctrl_c_quits_everywhere() {
        let k = KeyEvent::new(KeyCode::Char('c'), CTRL);
        for m in [
            Mode::Main,
            Mode::Confirm,
            Mode::Force,
            Mode::Resolve,
            Mode::Typing,
            Mode::Help,
            Mode::Cell,
        ] {
            assert_eq!(lookup(m, &k), Some(KeyAction::Quit));
        }
    }
}

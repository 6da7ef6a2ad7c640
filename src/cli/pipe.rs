//! A closed pipe ends a command quietly: `exactly status | head -1` and
//! `exactly completions fish | head` stop at the reader's end, with no panic and no message.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe fails and `println!` panics. A command
//! that only reports gets the signal's default back: it ends at once, silently, the way `cat`
//! does. A command that acts (an effect, a run, a scheduler, the dashboard) keeps going: its
//! exit code says what happened to the effect or the run, whoever stopped reading its lines,
//! so its lines go through [`say`], which drops what nobody reads.
use super::Cmd;
use std::io::Write;

/// Called once the command line is parsed, before the command writes anything.
pub(super) fn end_quietly_on_closed_pipe(cmd: &Cmd) {
    if acts(cmd) {
        return;
    }
    // SAFETY: restoring a signal's default disposition before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Commands whose work must not be cut short by their reader going away.
fn acts(cmd: &Cmd) -> bool {
    match cmd {
        Cmd::Effect(_)
        | Cmd::Run(_)
        | Cmd::Trigger(_)
        | Cmd::Backfill(_)
        | Cmd::Top(_)
        | Cmd::Demo(_)
        | Cmd::Chaos(_)
        | Cmd::FarSide(_) => true,
        // A server writes to its clients' sockets, never to a pipe it should end on.
        Cmd::Metrics(m) => m.listen.is_some(),
        _ => false,
    }
}

/// One line on stdout for a command that acts: dropped when stdout is a closed pipe (or
/// otherwise unwritable) instead of panicking mid-run.
pub(crate) fn say(line: impl std::fmt::Display) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

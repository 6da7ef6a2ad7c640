//! A closed pipe ends a command quietly: `exactly status | head -1` and
//! `exactly completions fish | head` stop at the reader's end, with no panic and no message.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe fails and `println!` panics. A command
//! that only reports ends at once on the signal, silently and with exit 0: its reader has all it
//! wanted (`exactly man | head` is not a failure, and a shell with `pipefail` must not see 141,
//! the signal's default). A command that acts (an effect, a run, a scheduler, the dashboard) keeps going: its
//! exit code says what happened to the effect or the run, whoever stopped reading its lines,
//! so its lines go through [`say`], which drops what nobody reads.
use super::Cmd;
use std::io::Write;

/// Called once the command line is parsed, before the command writes anything.
pub(super) fn end_quietly_on_closed_pipe(cmd: &Cmd) {
    if acts(cmd) {
        return;
    }
    // SAFETY: installing a handler before any thread is started; the handler only calls
    // _exit, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGPIPE,
            reader_gone as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// SIGPIPE for a command that only reports: its reader went away, so it is done (exit 0).
extern "C" fn reader_gone(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe; nothing of this process is left to flush for a reader
    // that is gone.
    unsafe { libc::_exit(0) }
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

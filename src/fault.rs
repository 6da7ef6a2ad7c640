//! Named fault points in the real code path. `EXACTLY_FAULT=after_send:pause=200ms` makes the
//! process announce `exactly-fault: after_send` on stderr and pause there, so a harness can
//! `SIGKILL` it at exactly that line; `EXACTLY_FAULT=after_send:kill` kills itself there.
//! Several specs may be joined with `,`.

/// The points, in the order an effect passes them. `after_claim`: the lease is held, nothing is
/// sent (on the one-transaction path, where reserving and submitting are one commit, it comes
/// just before that commit; on the full path, after `claimed` is committed).
pub const POINTS: &[&str] = &["after_claim", "after_submitted", "after_send", "after_done"];

/// Called at each named point; does nothing unless `EXACTLY_FAULT` names it.
pub fn point(name: &str) {
    point_of("EXACTLY_FAULT", name);
}

/// A named point whose spec is read from `var` (the chaos far side's client has its own).
pub fn point_of(var: &str, name: &str) {
    let Ok(spec) = std::env::var(var) else {
        return;
    };
    for part in spec.split(',') {
        let (point, action) = part.split_once(':').unwrap_or((part, "pause=0ms"));
        if point.trim() != name {
            continue;
        }
        eprintln!("exactly-fault: {name}");
        let action = action.trim();
        if action == "kill" {
            // SAFETY: raising a signal on ourselves has no memory-safety preconditions.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        } else if let Some(d) = action.strip_prefix("pause=") {
            if let Ok(d) = crate::time::parse_duration(d) {
                std::thread::sleep(d);
            }
        }
    }
}

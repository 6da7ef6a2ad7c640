//! Named fault points in the real code path. `EXACTLY_FAULT=after_send:pause=200ms` makes the
//! process announce `exactly-fault: after_send` on stderr and pause there, so a harness can
//! `SIGKILL` it at exactly that line; `EXACTLY_FAULT=after_send:kill` kills itself there.
//! Several specs may be joined with `,`.

/// The points, in the order an effect passes them. `after_claim` is the moment `claimed` is
/// committed and nothing is sent; an effect that reserves and submits in one transaction has no
/// such moment, so an attempt told to stop there reserves in a transaction of its own (the path
/// every effect awaiting approval takes).
pub const POINTS: &[&str] = &["after_claim", "after_submitted", "after_send", "after_done"];

/// Whether `EXACTLY_FAULT` names the point (a caller with two ways to do something takes the
/// one that passes it).
pub fn armed(name: &str) -> bool {
    std::env::var("EXACTLY_FAULT").is_ok_and(|spec| {
        spec.split(',')
            .any(|part| part.split_once(':').map_or(part, |(p, _)| p).trim() == name)
    })
}

/// Called at each named point; does nothing unless `EXACTLY_FAULT` names it.
pub fn point(name: &str) {
    point_of("EXACTLY_FAULT", name);
}

/// The spec in `var`, read once per process: a point sits on every write path, and reading the
/// environment takes a lock and a scan each time.
fn spec_of(var: &str) -> Option<&'static str> {
    static SPECS: parking_lot::Mutex<Vec<(String, Option<&'static str>)>> =
        parking_lot::const_mutex(Vec::new());
    let mut specs = SPECS.lock();
    if let Some((_, spec)) = specs.iter().find(|(v, _)| v == var) {
        return *spec;
    }
    // Leaked once per variable name (two in all): the spec lives as long as the process.
    let spec = std::env::var(var)
        .ok()
        .map(|s| &*Box::leak(s.into_boxed_str()));
    specs.push((var.to_string(), spec));
    spec
}

/// A named point whose spec is read from `var` (the chaos far side's client has its own).
pub fn point_of(var: &str, name: &str) {
    let Some(spec) = spec_of(var) else {
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

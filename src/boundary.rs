//! The boundary, checked: the dashboard, the command line, the runner and the chaos harness act
//! only through the library's operations, never the store itself, and open the database only
//! through [`open`](crate::open).
use std::path::Path;

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn tui_cli_runner_and_chaos_never_name_the_store() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for room in ["tui", "cli", "runner", "chaos"] {
        sources(&root.join(room), &mut files);
    }
    files.push(root.join("demo.rs"));
    // The dashboard's tests build fixture databases with SQL, as tests/ do.
    files.retain(|f| !f.components().any(|c| c.as_os_str() == "tests"));
    assert!(files.len() >= 20, "found only {} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        for (i, line) in text.lines().enumerate() {
            // `store::` names the store's module; `Store::open…` opens a database apart
            // from `crate::open`; `rusqlite` is SQL.
            if ["store::", "Store::open", "rusqlite"]
                .iter()
                .any(|w| line.contains(w))
            {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the store named outside the library:\n{}",
        found.join("\n")
    );
}

/// The store is the ground floor: its code names only the modules below it (the state
/// words, times, policy, schedules, the sender's identity, keys, the fencing token, fault
/// points, sanitizing),
/// never the library's domain modules or the application above them. Its rows are its own
/// (`store/rows.rs`); the snapshot is built from them.
#[test]
fn the_store_names_no_module_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut below: Vec<String> = vec![
        "store".into(),
        "Error".into(),
        "Result".into(),
        "Token".into(),
    ];
    below.extend(
        [
            "state", "time", "policy", "schedule", "sender", "key", "fault", "sanitize",
        ]
        .map(String::from),
    );
    let mut files = Vec::new();
    sources(&root.join("store"), &mut files);
    assert!(files.len() >= 10, "found only {} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + 7..];
                // `crate::{a, b::C}` names each of a and b.
                let named: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group.split([',', '}']).map(str::trim).collect(),
                    None => vec![rest],
                };
                for n in named {
                    let name: String = n
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    let is_fn = n[name.len()..].starts_with('(');
                    if !name.is_empty() && !is_fn && !below.contains(&name) {
                        found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "the store names a module above it:\n{}",
        found.join("\n")
    );
}

/// Policy up, SQL down: the store decides nothing of the runner's, asks nobody who acts and
/// reads no clock (every write's time comes from its caller, or on PostgreSQL the server).
#[test]
fn the_store_never_reaches_up() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join("store");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() >= 10, "found only {} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        // A file's unit tests (at its end) may read the clock; its code may not.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (i, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            // The one exception: the PostgreSQL backend reads this host's clock beside the
            // server's, only to measure how far apart they are (`Tx::later`); what it writes
            // is the server's time.
            let offset = f.ends_with("pg.rs") && line.contains("let here = crate::time::now();");
            if [
                "runner::",
                "crate::actor()",
                "hostname()",
                "crate::host()",
                "time::now",
            ]
            .iter()
            .any(|w| line.contains(w))
                && !offset
            {
                found.push(format!("{}:{}: {}", f.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the store reaches up:\n{}",
        found.join("\n")
    );
}

//! The floors, checked where the compiler does not keep them. The words (`crates/words`) are a
//! crate of their own and cannot name anything above them. Inside this crate the store
//! (`crates/store/src/`) names only the words and itself, asks nobody who acts and reads no clock; the
//! application (`src/main.rs` and its modules) acts only through the library's operations,
//! never the store itself, and opens the database only through [`open`](crate::open).
//!
//! The checks read whole `use` statements and paths, not lines: comments and string literals
//! are blanked first, `#[cfg(test)]` items dropped, a grouped `use a::{b, c::{d}}` over many
//! lines expanded, `super::` and `self::` resolved against the file's module, a root re-export
//! (`crate::open`, `crate::Error`) followed to where it comes from (`src/lib.rs`,
//! `crates/words/src/lib.rs`, `src/main.rs`), and a path used without a `use`
//! (`crate::os_user()`) read like an import. The application's method calls on a `Store` are
//! read too (`calls.rs`): it holds the handle but calls none of the store's methods. The
//! fixtures at the end are the wrong imports and calls each check must catch.
mod calls;
mod reader;

use calls::{StoreCalls, SHARED};
use reader::*;
use std::path::{Path, PathBuf};

/// What the store may name: the words (but not who acts: the store gets that from its caller)
/// and itself. `time::now` only in the PostgreSQL files, which read this host's clock beside
/// the server's to measure how far apart they are (`Tx::later`); what they write is the
/// server's time.
fn store_findings(roots: &Roots, file: &Path, text: &str) -> Vec<String> {
    let module = module_of(file);
    // In the store's crate `crate::` is the store: read as the library would name it.
    let owned;
    let text = if file.starts_with(store_src()) {
        owned = text.replace("crate::", "crate::store::");
        owned.as_str()
    } else {
        text
    };
    // The clock is read only by the PostgreSQL files and the handle's own clock (clock.rs).
    let pg = file
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("pg") || n == "clock.rs");
    let mut found = Vec::new();
    for (line, written, to) in named(roots, Krate::Lib, &module, text) {
        let floor = to.first().map(String::as_str).unwrap_or("");
        let why = match floor {
            "store" | "exactly_store" => None,
            "exactly_words" if to.get(1).is_some_and(|m| m == "identity") => {
                Some("asks who acts or where")
            }
            "exactly_words"
                if to.get(1).is_some_and(|m| m == "time")
                    && to.get(2).is_some_and(|f| f == "now")
                    && !pg =>
            {
                Some("reads the clock")
            }
            "exactly_words" => None,
            _ if to.iter().any(|s| s == "runner") => Some("names the runner"),
            _ => Some("names a floor above it"),
        };
        if let Some(why) = why {
            found.push(format!(
                "{}:{line}: {written} ({why}: {})",
                file.display(),
                to.join("::")
            ));
        }
    }
    found
}

/// What the application may not name: the store's module, `Store::open` (it opens the database
/// through `crate::open`), SQL.
fn bin_findings(roots: &Roots, file: &Path, text: &str) -> Vec<String> {
    let module = module_of(file);
    let mut found = Vec::new();
    for (line, written, to) in named(roots, Krate::Bin, &module, text) {
        let opens = to.ends_with(&["Store".to_string(), "open".to_string()])
            || to
                .windows(2)
                .any(|w| w[0] == "Store" && w[1].starts_with("open"));
        // The `Store` handle is the library's to hand out; its module is not.
        let store = written
            .split([':', ' '])
            .any(|s| s == "store" || s == "rusqlite");
        if opens || store {
            found.push(format!(
                "{}:{line}: {written} ({})",
                file.display(),
                to.join("::")
            ));
        }
    }
    // What no path reading sees: a `Store::open…` through a name the file made up, `rusqlite`
    // anywhere, a `store::` path of any spelling.
    let code = without_tests(&blank(text));
    for (i, line) in code.lines().enumerate() {
        if ["store::", "Store::open", "rusqlite"]
            .iter()
            .any(|w| line.contains(w))
        {
            found.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
        }
    }
    found
}

fn store_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    sources(&store_src(), &mut files);
    assert!(files.len() >= 10, "found only {} files", files.len());
    files
}

fn bin_files() -> Vec<PathBuf> {
    let root = src();
    let mut files = vec![root.join("main.rs"), root.join("demo.rs")];
    for room in ["tui", "cli", "runner", "chaos", "mcp"] {
        sources(&root.join(room), &mut files);
    }
    // The dashboard's tests build fixture databases with SQL, as tests/ do.
    files.retain(|f| !f.components().any(|c| c.as_os_str() == "tests"));
    assert!(files.len() >= 20, "found only {} files", files.len());
    files
}

#[test]
fn the_application_never_names_the_store() {
    let roots = Roots::load();
    let mut found = Vec::new();
    for f in bin_files() {
        found.extend(bin_findings(&roots, &f, &read(&f)));
    }
    assert!(
        found.is_empty(),
        "the store named outside the library:\n{}",
        found.join("\n")
    );
}

/// The application calls no method of the store's own (`store.can_write()`): each thing it
/// asks of the database is a library operation (`may_write(&mut store)`).
#[test]
fn the_application_calls_no_method_of_the_store() {
    let roots = Roots::load();
    let bin: Vec<(String, String)> = bin_files()
        .iter()
        .map(|f| (f.display().to_string(), read(f)))
        .collect();
    let calls = StoreCalls::load(&store_files(), &bin);
    assert!(
        calls.methods.len() >= 50 && calls.methods.contains("can_write"),
        "the store's methods not read: {:?}",
        calls.methods
    );
    for name in SHARED {
        assert!(calls.methods.contains(*name), "{name} is no store method");
    }
    let found: Vec<String> = bin
        .iter()
        .flat_map(|(f, text)| calls.found(&roots, Path::new(f), text))
        .collect();
    assert!(
        found.is_empty(),
        "the store's methods called outside the library:\n{}",
        found.join("\n")
    );
}

/// The store is the ground floor above the words: its rows are its own (`store/rows.rs`); the
/// snapshot is built from them. Policy up, SQL down: it decides nothing of the runner's, asks
/// nobody who acts and reads no clock (every write's time comes from its caller, or on
/// PostgreSQL the server).
#[test]
fn the_store_names_only_the_words_and_itself() {
    let roots = Roots::load();
    let mut found = Vec::new();
    for f in store_files() {
        found.extend(store_findings(&roots, &f, &read(&f)));
    }
    assert!(
        found.is_empty(),
        "the store reaches up:\n{}",
        found.join("\n")
    );
}

/// The words cannot name a floor above them because their crate depends on no crate of this
/// workspace (the library depends on it, so it could not anyway without a cycle).
#[test]
fn the_words_depend_on_no_crate_of_the_workspace() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/words/Cargo.toml");
    let text = read(&manifest);
    let local: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#') && l.contains("path"))
        .collect();
    assert!(local.is_empty(), "the words depend on: {local:?}");
}

/// Each check catches what the line searches it replaces missed. A fixture is a file's text as
/// if at the path given; each must be found, and the same text made harmless must not be.
#[test]
fn the_checks_catch_every_spelling_of_a_wrong_import() {
    let roots = Roots::load();
    let store = |at: &str, text: &str| store_findings(&roots, &src().join(at), text);
    let wrong = [
        (
            "store/read.rs",
            "use crate::{\n    time::Ts,\n    snapshot::Snapshot,\n};\n",
        ),
        ("store/read.rs", "use super::super::snapshot::Snapshot;\n"),
        ("store/read.rs", "use super::{super::lease, rows};\n"),
        (
            "store/db.rs",
            "fn f() -> String {\n    exactly_words::os_user()\n}\n",
        ),
        ("store/db.rs", "use crate::{actor, Token};\n"),
        ("store/db.rs", "use exactly_words::identity::hostname;\n"),
        (
            "store/read.rs",
            "fn f() { let t = exactly_words::time::now(); }\n",
        ),
        (
            "store/read.rs",
            "use exactly_words::time;\nuse time::now;\n",
        ),
        (
            "store/read.rs",
            "use exactly_words::time;\nfn f() { let t = time::now(); }\n",
        ),
        ("store/mod.rs", "use self::super::effect::Ctx;\n"),
        (
            "store/rows.rs",
            "fn f() { crate::snapshot::Snapshot::default(); }\n",
        ),
        (
            "store/rows.rs",
            "fn f() -> crate::store::Store { crate::database::open(None, a) }\n",
        ),
    ];
    for (at, text) in wrong {
        assert!(!store(at, text).is_empty(), "missed in {at}:\n{text}");
    }
    let right = [
        (
            "store/read.rs",
            "use crate::{\n    time::Ts,\n    state::RunOutcome,\n};\n",
        ),
        (
            "store/read.rs",
            "use super::rows::JobRow;\nuse super::super::store::db;\n",
        ),
        (
            "store/read.rs",
            "// use crate::snapshot;\nconst S: &str = \"crate::snapshot\";\n",
        ),
        (
            "store/read.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::snapshot;\n}\n",
        ),
        (
            "store/pg.rs",
            "fn f() { let here = exactly_words::time::now(); }\n",
        ),
        (
            "store/db.rs",
            "use crate::{Error, Result, Token, JobName};\n",
        ),
    ];
    for (at, text) in right {
        let found = store(at, text);
        assert!(found.is_empty(), "wrongly found in {at}:\n{found:?}");
    }
}

/// The application's check catches the store reached by any spelling of its name.
#[test]
fn the_checks_catch_every_spelling_of_the_store_in_the_application() {
    let roots = Roots::load();
    let bin = |at: &str, text: &str| bin_findings(&roots, &src().join(at), text);
    let wrong = [
        (
            "tui/mod.rs",
            "fn f() { let s = crate::store::Store::open(\"x\"); }\n",
        ),
        (
            "tui/mod.rs",
            "use crate::{\n    Access,\n    Store,\n};\nfn f() { Store::open_at(p, a); }\n",
        ),
        (
            "runner/mod.rs",
            "use exactly::{\n    Store as S,\n};\nfn f() { S::open(p); }\n",
        ),
        ("cli/mod.rs", "use rusqlite::Connection;\n"),
    ];
    for (at, text) in wrong {
        assert!(!bin(at, text).is_empty(), "missed in {at}:\n{text}");
    }
    let right = [
        (
            "tui/mod.rs",
            "use crate::{open, Access};\nfn f() { open(None, Access::ReadOnly); }\n",
        ),
        ("cli/mod.rs", "// Store::open is the library's\n"),
    ];
    for (at, text) in right {
        let found = bin(at, text);
        assert!(found.is_empty(), "wrongly found in {at}:\n{found:?}");
    }
}

/// The application's check catches a call of the store's own methods, on any receiver known
/// to be a store, and passes the same names on other types.
#[test]
fn the_checks_catch_every_call_of_a_store_method_in_the_application() {
    let roots = Roots::load();
    let texts: Vec<(String, String)> = bin_files()
        .iter()
        .map(|f| (f.display().to_string(), read(f)))
        .collect();
    let calls = StoreCalls::load(&store_files(), &texts);
    let call = |at: &str, text: &str| calls.found(&roots, &src().join(at), text);
    let wrong = [
        (
            "tui/mod.rs",
            "fn f(store: &mut Store) -> bool {\n    store.can_write()\n}\n",
        ),
        (
            "runner/run/hold.rs",
            "fn f(s: &mut exactly::Store) {\n    s\n        .set_writes_first(true);\n}\n",
        ),
        (
            "runner/run/execute.rs",
            "fn f(db: &str) {\n    lend(db).and_then(|mut s| s.identity());\n}\n",
        ),
        (
            "cli/mod.rs",
            "fn f(db: Option<&str>) {\n    let s = open(db).unwrap();\n    s.path();\n}\n",
        ),
        (
            "cli/mod.rs",
            "fn f() -> Result<()> {\n    if let Ok(mut s) = crate::open(None, A) {\n        \
             s.path();\n    }\n}\n",
        ),
        (
            "cli/mod.rs",
            "fn f() -> Result<String> {\n    Ok(crate::open(None, A)?.path().into())\n}\n",
        ),
        (
            "tui/mod.rs",
            "use exactly::Store as Db;\nfn f(d: &mut Db) {\n    d.path();\n}\n",
        ),
        (
            "runner/run/hold.rs",
            "fn f(s: &mut Lent) {\n    s.path();\n}\n",
        ),
        (
            "cli/mod.rs",
            "fn f<'a>(s: &'a mut Store) -> &'a str {\n    s.path()\n}\n",
        ),
        (
            "cli/effects.rs",
            "struct A {\n    store: Store,\n}\nfn f(a: &A) {\n    a.store.path();\n}\n",
        ),
        (
            "tui/mod.rs",
            "fn f(s: &mut Store) {\n    Store::can_write(s);\n}\n",
        ),
        (
            "tui/mod.rs",
            "use crate::{self as x, Store as Y};\nfn f(s: &mut Y) {\n    x::Store::path(s);\n}\n",
        ),
    ];
    for (at, text) in wrong {
        assert!(!call(at, text).is_empty(), "missed in {at}:\n{text}");
    }
    let right = [
        (
            "cli/token_memory.rs",
            "fn f(p: &Path) {\n    OpenOptions::new().write(true).open(p);\n}\n",
        ),
        (
            "chaos/sched.rs",
            "fn f(&mut self, dir: TempDir) {\n    self.prune(h);\n    dir.path();\n}\n",
        ),
        (
            "tui/mod.rs",
            "// store.can_write()\nconst S: &str = \"store.can_write()\";\n",
        ),
        (
            "tui/mod.rs",
            "fn f(store: &mut Store) -> bool {\n    crate::may_write(store)\n}\n",
        ),
        (
            "tui/mod.rs",
            "#[cfg(test)]\nmod tests {\n    fn f(s: &mut Store) {\n        s.can_write();\n    }\n}\n",
        ),
    ];
    for (at, text) in right {
        let found = call(at, text);
        assert!(found.is_empty(), "wrongly found in {at}:\n{found:?}");
    }
}

//! Method calls on a `Store` in the application. The compiler cannot refuse them: the store's
//! methods are `pub` for the library, another crate, and the application holds the `Store`
//! values `open` hands it. So they are read here, from the text: every `pub fn` of an
//! `impl Store` in the store's crate is a method the application may not call.
//!
//! A method whose name only the store has is refused on any receiver. A name other types have
//! too (`path`, `open`, `write` of the standard library, the harness's `prune`) is refused on a
//! receiver known to be a `Store`: a parameter, field or binding typed `Store` (or a type that
//! derefs to it), a binding from a function that returns one, or such a call itself
//! (`open(db)?.path()`). `Store::m(&s)` is a path, read by the import checks.
use super::reader::*;
use std::collections::BTreeSet;
use std::path::Path;

/// Names other types have too, refused only on a receiver known to be a `Store`.
pub(super) const SHARED: &[&str] = &["open", "path", "write", "waiting", "prune"];

/// What the check knows of the store and of the application as a whole.
pub(super) struct StoreCalls {
    /// The store's `pub` methods.
    pub(super) methods: BTreeSet<String>,
    /// `Store`, the names it is imported by, and the application's types that deref to it.
    types: BTreeSet<String>,
    /// Functions that return a `Store` (or a type of `types`): `open`, the runner's `lend`.
    opens: BTreeSet<String>,
}

impl StoreCalls {
    /// Reads the store's methods from its crate and the application's files.
    pub(super) fn load(store_files: &[impl AsRef<Path>], bin: &[(String, String)]) -> StoreCalls {
        let mut methods = BTreeSet::new();
        for f in store_files {
            methods.extend(pub_methods(&without_tests(&blank(&read(f.as_ref())))));
        }
        let mut calls = StoreCalls {
            methods,
            types: BTreeSet::from(["Store".to_string()]),
            opens: BTreeSet::from(["open".to_string()]),
        };
        let codes: Vec<Vec<String>> = bin
            .iter()
            .map(|(_, text)| {
                let toks = tokens(&without_tests(&blank(text)));
                toks.into_iter().map(|t| t.0).collect()
            })
            .collect();
        for t in &codes {
            calls.types.extend(aliases(t));
        }
        // A type that derefs to a store, then the functions that return either.
        for t in &codes {
            calls.types.extend(derefs_to(t, &calls.types));
        }
        for t in &codes {
            calls.opens.extend(returning(t, &calls.types));
        }
        calls
    }

    /// The calls of a store method in `text` (a file of the application at `file`).
    pub(super) fn found(&self, roots: &Roots, file: &Path, text: &str) -> Vec<String> {
        let mut found = Vec::new();
        // `Store::can_write(&mut s)`, `exactly::Store::path(&s)`: paths, read as imports are.
        for (line, written, to) in named(roots, Krate::Bin, &module_of(file), text) {
            let ufcs = to
                .windows(2)
                .any(|w| self.types.contains(&w[0]) && self.methods.contains(&w[1]));
            if ufcs {
                found.push(format!("{}:{line}: {written}", file.display()));
            }
        }
        let toks = tokens(&without_tests(&blank(text)));
        let words: Vec<String> = toks.iter().map(|t| t.0.clone()).collect();
        let mut types = self.types.clone();
        types.extend(aliases(&words));
        let stores = self.store_names(&words, &types);
        for i in 1..words.len() {
            let name = &words[i];
            // `Store::can_write(s)` where no `use` says what `Store` is.
            if words[i - 1] == "::" && i > 1 && types.contains(&words[i - 2]) {
                if self.methods.contains(name) {
                    found.push(format!(
                        "{}:{}: {}::{name} is the store's own method",
                        file.display(),
                        toks[i].1,
                        words[i - 2]
                    ));
                }
                continue;
            }
            let called = words.get(i + 1).is_some_and(|n| n == "(" || n == "::");
            if words[i - 1] != "." || !called || !self.methods.contains(name) {
                continue;
            }
            let shared = SHARED.contains(&name.as_str());
            if shared && !self.is_store(&words, i - 1, &stores) {
                continue;
            }
            found.push(format!(
                "{}:{}: .{name}(…) is the store's own method",
                file.display(),
                toks[i].1
            ));
        }
        found
    }

    /// Whether the expression ending just before the `.` at `dot` is a store.
    fn is_store(&self, w: &[String], dot: usize, stores: &BTreeSet<String>) -> bool {
        let mut k = dot;
        while k > 0 && w[k - 1] == "?" {
            k -= 1;
        }
        if k == 0 {
            return false;
        }
        if w[k - 1] != ")" {
            return stores.contains(&w[k - 1]);
        }
        // `open(db)?.path()`: the function called just before.
        let mut depth = 0;
        let mut j = k - 1;
        loop {
            match w[j].as_str() {
                ")" => depth += 1,
                "(" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            if j == 0 {
                return false;
            }
            j -= 1;
        }
        j > 0 && self.opens.contains(&w[j - 1])
    }

    /// The names a file gives a store: typed `Store` (`s: &mut Store`, a field `store: Store`),
    /// or bound from a function that returns one (`let mut s = open(db)?`,
    /// `if let Ok(s) = open(db)`).
    fn store_names(&self, w: &[String], types: &BTreeSet<String>) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for i in 0..w.len() {
            if w[i] == ":" && i > 0 && is_ident(&w[i - 1]) && types_as(w, i + 1, types) {
                names.insert(w[i - 1].clone());
            }
            if w[i] != "let" {
                continue;
            }
            let Some(eq) = (i..w.len()).find(|&k| w[k] == "=" || w[k] == ";") else {
                continue;
            };
            let pattern: Vec<&str> = w[i + 1..eq]
                .iter()
                .map(String::as_str)
                .filter(|s| !matches!(*s, "mut" | "Ok" | "Some" | "(" | ")"))
                .collect();
            let callee = (eq + 1..w.len())
                .take_while(|&k| !matches!(w[k].as_str(), ";" | "{"))
                .find(|&k| w.get(k + 1).is_some_and(|n| n == "(") && is_ident(&w[k]));
            if let ([name], Some(c)) = (pattern.as_slice(), callee) {
                if w[eq] == "=" && self.opens.contains(&w[c]) {
                    names.insert(name.to_string());
                }
            }
        }
        names
    }
}

fn is_ident(w: &str) -> bool {
    w.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && w.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Whether the type at `at` is a store: `&`, `mut` and a lifetime skipped, then a path whose
/// last segment is one of `types`.
fn types_as(w: &[String], mut at: usize, types: &BTreeSet<String>) -> bool {
    while at < w.len() && matches!(w[at].as_str(), "&" | "mut" | "'") {
        at += 1;
        // `'a`: a quote token, then the lifetime's name.
        if w.get(at - 1).is_some_and(|q| q == "'") {
            at += 1;
        }
    }
    let mut last = None;
    while at < w.len() && is_ident(&w[at]) {
        last = Some(&w[at]);
        if w.get(at + 1).is_some_and(|n| n == "::") {
            at += 2;
        } else {
            break;
        }
    }
    last.is_some_and(|l| types.contains(l))
}

/// `pub fn` names inside `impl Store { … }` blocks (not `pub(crate)`, not trait impls).
fn pub_methods(code: &str) -> Vec<String> {
    let w: Vec<String> = tokens(code).into_iter().map(|t| t.0).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < w.len() {
        if w[i] != "impl" {
            i += 1;
            continue;
        }
        // The implemented type's path, then its block.
        let mut k = i + 1;
        while k < w.len() && (is_ident(&w[k]) || w[k] == "::") {
            k += 1;
        }
        let inherent_store = k > i + 1 && w[k - 1] == "Store" && w.get(k).is_some_and(|b| b == "{");
        if !inherent_store {
            i += 1;
            continue;
        }
        let mut depth = 0;
        let mut j = k;
        while j < w.len() {
            match w[j].as_str() {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                "pub" if depth == 1 && w.get(j + 1).is_some_and(|f| f == "fn") => {
                    if let Some(name) = w.get(j + 2) {
                        out.push(name.clone());
                    }
                }
                _ => {}
            }
            j += 1;
        }
        i = j;
    }
    out
}

/// The names a `use` gives the store's type: `S` for `use exactly::Store as S`.
fn aliases(w: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..w.len().saturating_sub(2) {
        if w[i] == "Store" && w[i + 1] == "as" && is_ident(&w[i + 2]) {
            out.push(w[i + 2].clone());
        }
    }
    out
}

/// Types that deref to a store: `impl Deref for Lent { type Target = Store; … }`.
fn derefs_to(w: &[String], types: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..w.len().saturating_sub(3) {
        if w[i] == "Deref" && w[i + 1] == "for" && is_ident(&w[i + 2]) {
            let block = &w[i + 3..w.len().min(i + 12)];
            let target = block.windows(3).any(|t| t[0] == "Target" && t[1] == "=")
                && block
                    .iter()
                    .skip_while(|t| *t != "=")
                    .take_while(|t| *t != ";")
                    .any(|t| types.contains(t));
            if target {
                out.push(w[i + 2].clone());
            }
        }
    }
    out
}

/// Functions whose return type names a store (`fn lend(db: &str) -> Result<Lent>`).
fn returning(w: &[String], types: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..w.len().saturating_sub(1) {
        if w[i] != "fn" || !is_ident(&w[i + 1]) {
            continue;
        }
        let Some(open) = (i + 2..w.len()).find(|&k| w[k] == "(" || w[k] == "{" || w[k] == ";")
        else {
            continue;
        };
        if w[open] != "(" {
            continue;
        }
        let mut depth = 0;
        let mut k = open;
        while k < w.len() {
            match w[k].as_str() {
                "(" => depth += 1,
                ")" => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            k += 1;
        }
        if w.get(k + 1).is_some_and(|a| a == "-") && w.get(k + 2).is_some_and(|a| a == ">") {
            let ret = w[k + 3..]
                .iter()
                .take_while(|t| !matches!(t.as_str(), "{" | ";" | "where"));
            if ret.clone().any(|t| types.contains(t)) {
                out.push(w[i + 1].clone());
            }
        }
    }
    out
}

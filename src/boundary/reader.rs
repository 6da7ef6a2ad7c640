//! The reader the floor checks stand on: a file's text with comments, strings and test items
//! blanked, its `use` statements (grouped ones expanded) and paths, each resolved against the
//! file's module and the crates' root re-exports to where it leads.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(super) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

pub(super) fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

pub(super) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("read source")
}

/// `text` with comments, string and char literals replaced by spaces (newlines kept, so line
/// numbers stay).
pub(super) fn blank(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = b.clone();
    let mut i = 0;
    let wipe = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in out.iter_mut().take(to.min(b.len())).skip(from) {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < b.len() {
        let at = |k: usize| b.get(k).copied().unwrap_or('\0');
        if at(i) == '/' && at(i + 1) == '/' {
            let end = (i..b.len()).find(|&k| b[k] == '\n').unwrap_or(b.len());
            wipe(&mut out, i, end);
            i = end;
        } else if at(i) == '/' && at(i + 1) == '*' {
            let (mut depth, mut k) = (1, i + 2);
            while k < b.len() && depth > 0 {
                if at(k) == '/' && at(k + 1) == '*' {
                    depth += 1;
                    k += 2;
                } else if at(k) == '*' && at(k + 1) == '/' {
                    depth -= 1;
                    k += 2;
                } else {
                    k += 1;
                }
            }
            wipe(&mut out, i, k);
            i = k;
        } else if (at(i) == 'r' || (at(i) == 'b' && at(i + 1) == 'r'))
            && (i == 0 || !ident(at(i - 1)))
            && {
                let s = if at(i) == 'b' { i + 2 } else { i + 1 };
                let h = (s..b.len()).take_while(|&k| b[k] == '#').count();
                at(s + h) == '"'
            }
        {
            // A raw string: r"…", r#"…"#, br"…".
            let s = if at(i) == 'b' { i + 2 } else { i + 1 };
            let hashes = (s..b.len()).take_while(|&k| b[k] == '#').count();
            let mut k = s + hashes + 1;
            while k < b.len() {
                if b[k] == '"' && (k + 1..k + 1 + hashes).all(|h| at(h) == '#') {
                    k += 1 + hashes;
                    break;
                }
                k += 1;
            }
            wipe(&mut out, i, k);
            i = k;
        } else if at(i) == '"' {
            let mut k = i + 1;
            while k < b.len() && b[k] != '"' {
                k += if b[k] == '\\' { 2 } else { 1 };
            }
            wipe(&mut out, i, k + 1);
            i = k + 1;
        } else if at(i) == '\'' {
            // A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            let end = if at(i + 1) == '\\' {
                (i + 3..b.len().min(i + 12)).find(|&k| b[k] == '\'')
            } else if at(i + 2) == '\'' {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    wipe(&mut out, i, e + 1);
                    i = e + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// `code` (blanked) without its `#[cfg(test)]` items: a file's tests may do what its code may
/// not (build fixtures, read the clock).
pub(super) fn without_tests(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let chars = out.clone();
    let text: String = code.to_string();
    let mut from = 0;
    while let Some(found) = text[from..].find("#[cfg(test)]") {
        let start = from + found;
        let begin = text[..start].chars().count();
        // The item ends at its first `;` before any brace, else at its braces' match.
        let mut k = begin + "#[cfg(test)]".len();
        let mut depth = 0;
        while k < chars.len() {
            match chars[k] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ';' if depth == 0 => break,
                _ => {}
            }
            k += 1;
        }
        for c in out.iter_mut().take(k + 1).skip(begin) {
            if *c != '\n' {
                *c = ' ';
            }
        }
        from = start + "#[cfg(test)]".len();
    }
    out.into_iter().collect()
}

/// A token of code: a word, `::`, or one punctuation character; with its line.
pub(super) fn tokens(code: &str) -> Vec<(String, usize)> {
    let b: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let s = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push((b[s..i].iter().collect(), line));
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            out.push(("::".into(), line));
            i += 2;
        } else {
            out.push((c.to_string(), line));
            i += 1;
        }
    }
    out
}

/// One `use` tree expanded: `a::{b, c::{d, e as f}}` is `a::b`, `a::c::d`, `a::c::e`, each
/// with the name it is known by here (`b`, `d`, `f`; None for a glob).
pub(super) fn expand(toks: &[String]) -> Vec<(Vec<String>, Option<String>)> {
    pub(super) fn tree(
        t: &[String],
        i: &mut usize,
        prefix: &[String],
        out: &mut Vec<(Vec<String>, Option<String>)>,
    ) {
        let mut path = prefix.to_vec();
        loop {
            match t.get(*i).map(String::as_str) {
                Some("{") => {
                    *i += 1;
                    while !matches!(t.get(*i).map(String::as_str), Some("}") | None) {
                        tree(t, i, &path, out);
                        if t.get(*i).map(String::as_str) == Some(",") {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return;
                }
                Some("*") => {
                    *i += 1;
                    out.push((path, None));
                    return;
                }
                Some("::") => *i += 1,
                Some(w) if w != "," && w != "}" => {
                    *i += 1;
                    if w == "self" && !path.is_empty() {
                        // `a::{self}` names `a`.
                    } else {
                        path.push(w.to_string());
                    }
                    if t.get(*i).map(String::as_str) != Some("::") {
                        let mut name = path.last().cloned();
                        if t.get(*i).map(String::as_str) == Some("as") {
                            name = t.get(*i + 1).cloned();
                            *i += 2;
                        }
                        out.push((path, name));
                        return;
                    }
                }
                _ => {
                    out.push((path, None));
                    return;
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        tree(toks, &mut i, &[], &mut out);
        if toks.get(i).map(String::as_str) == Some(",") {
            i += 1;
        }
    }
    out
}

/// A crate's `use` statements as (line, path) and its paths used without a `use`, both as
/// written.
#[derive(Default)]
pub(super) struct Read {
    /// (line, the path as written, the name it is known by).
    uses: Vec<(usize, Vec<String>, Option<String>)>,
    /// (line, the path as written): `crate::os_user()`, `super::super::x::Y`, `time::now()`.
    paths: Vec<(usize, Vec<String>)>,
    /// `mod x;` and `mod x {` declared in the file.
    mods: Vec<String>,
}

pub(super) fn read_code(code: &str) -> Read {
    let t = tokens(code);
    let mut r = Read::default();
    let mut i = 0;
    while i < t.len() {
        let w = t[i].0.as_str();
        let prev = if i == 0 { "" } else { t[i - 1].0.as_str() };
        if w == "use" && prev != "::" {
            let line = t[i].1;
            let end = (i..t.len()).find(|&k| t[k].0 == ";").unwrap_or(t.len());
            let words: Vec<String> = t[i + 1..end].iter().map(|x| x.0.clone()).collect();
            for (path, name) in expand(&words) {
                r.uses.push((line, path, name));
            }
            i = end + 1;
        } else if w == "mod" && t.get(i + 1).is_some() {
            r.mods.push(t[i + 1].0.clone());
            i += 2;
        } else if t.get(i + 1).is_some_and(|n| n.0 == "::")
            && prev != "::"
            && w.chars().all(|c| c.is_alphanumeric() || c == '_')
        {
            let line = t[i].1;
            let mut path = vec![w.to_string()];
            let mut k = i + 1;
            while t.get(k).is_some_and(|x| x.0 == "::")
                && t.get(k + 1)
                    .is_some_and(|x| x.0.chars().all(|c| c.is_alphanumeric() || c == '_'))
            {
                path.push(t[k + 1].0.clone());
                k += 2;
            }
            r.paths.push((line, path));
            i = k;
        } else {
            i += 1;
        }
    }
    r
}

/// Where a crate's root re-exports come from: `open` → `database::open`, `Error` →
/// `exactly_words::Error`, read from the root file's `pub use` statements.
pub(super) fn root_exports(root_file: &Path) -> BTreeMap<String, Vec<String>> {
    let r = read_code(&without_tests(&blank(&read(root_file))));
    r.uses
        .into_iter()
        .filter_map(|(_, path, name)| Some((name?, path)))
        .collect()
}

/// The crates the checks follow paths through: the words', the library's and the binary's
/// root re-exports.
pub(super) struct Roots {
    words: BTreeMap<String, Vec<String>>,
    lib: BTreeMap<String, Vec<String>>,
    bin: BTreeMap<String, Vec<String>>,
}

impl Roots {
    pub(super) fn load() -> Roots {
        let words = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/words/src/lib.rs");
        Roots {
            words: root_exports(&words),
            lib: root_exports(&src().join("lib.rs")),
            bin: root_exports(&src().join("main.rs")),
        }
    }
}

/// Which crate a file's code is in: the library's `crate::` is `exactly`, the binary's is its
/// own, with `exactly::` the library.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Krate {
    Lib,
    Bin,
}

/// A path as the library sees it, from its root: `["store", "rows", "JobRow"]`,
/// `["exactly_words", "identity", "os_user"]`; for the binary's own items `["bin", …]`.
pub(super) fn resolve(
    roots: &Roots,
    krate: Krate,
    module: &[String],
    imports: &BTreeMap<String, Vec<String>>,
    path: &[String],
) -> Option<Vec<String>> {
    let first = path.first()?.as_str();
    let rest = &path[1..];
    let full: Vec<String> = match first {
        "crate" | "self" | "super" => {
            let mut here: Vec<String> = if first == "crate" {
                Vec::new()
            } else {
                module.to_vec()
            };
            let from = usize::from(first == "crate");
            for seg in &path[from..] {
                match seg.as_str() {
                    "self" => {}
                    "super" => {
                        here.pop();
                    }
                    _ => here.push(seg.clone()),
                }
            }
            here
        }
        "exactly" if krate == Krate::Bin => {
            return Some(follow(roots, Krate::Lib, rest.to_vec()));
        }
        "exactly_words" => return Some(follow_words(roots, rest.to_vec())),
        _ => {
            let imported = imports.get(first)?;
            let mut p = imported.clone();
            p.extend(rest.iter().cloned());
            return Some(p);
        }
    };
    Some(follow(roots, krate, full))
}

/// A path from a crate's root with its first segment followed through the root's re-exports.
pub(super) fn follow(roots: &Roots, krate: Krate, path: Vec<String>) -> Vec<String> {
    let table = match krate {
        Krate::Lib => &roots.lib,
        Krate::Bin => &roots.bin,
    };
    let Some(first) = path.first() else {
        return path;
    };
    match table.get(first) {
        Some(to) => {
            let mut p = to.clone();
            p.extend(path[1..].iter().cloned());
            match (krate, p.first().map(String::as_str)) {
                (_, Some("exactly_words")) => follow_words(roots, p[1..].to_vec()),
                (Krate::Bin, Some("exactly")) => follow(roots, Krate::Lib, p[1..].to_vec()),
                _ => p,
            }
        }
        None if krate == Krate::Bin => std::iter::once("bin".to_string()).chain(path).collect(),
        None => path,
    }
}

pub(super) fn follow_words(roots: &Roots, path: Vec<String>) -> Vec<String> {
    let mut p = vec!["exactly_words".to_string()];
    match path.first().and_then(|f| roots.words.get(f)) {
        Some(to) => {
            p.extend(to.iter().cloned());
            p.extend(path[1..].iter().cloned());
        }
        None => p.extend(path),
    }
    p
}

/// A file's module path from its crate's root: `src/store/read.rs` is `store::read`,
/// `src/store/mod.rs` is `store`.
pub(super) fn module_of(file: &Path) -> Vec<String> {
    // The store's crate (crates/store/src/) is the library's `store`.
    let (lead, rel) = match file.strip_prefix(store_src()) {
        Ok(rel) => (Some("store".to_string()), rel),
        Err(_) => (None, file.strip_prefix(src()).unwrap_or(file)),
    };
    let mut m: Vec<String> = lead
        .into_iter()
        .chain(
            rel.with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned()),
        )
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// Every path a file names, resolved: (line, the path as written, where it leads).
pub(super) fn named(
    roots: &Roots,
    krate: Krate,
    module: &[String],
    text: &str,
) -> Vec<(usize, String, Vec<String>)> {
    let code = without_tests(&blank(text));
    let r = read_code(&code);
    // Names a `use` brings in (and modules declared here) resolve the paths that start with
    // them.
    let mut imports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &r.mods {
        let mut p = module.to_vec();
        p.push(m.clone());
        imports.insert(m.clone(), p);
    }
    let mut out = Vec::new();
    for (line, path, name) in &r.uses {
        let first = path.first().map(String::as_str).unwrap_or("");
        // `use store::x` in a file that declares `mod store` is `self::store::x`.
        let path: Vec<String> = if r.mods.iter().any(|m| m == first) {
            std::iter::once("self".to_string())
                .chain(path.iter().cloned())
                .collect()
        } else {
            path.clone()
        };
        // A `use` may start with a name an earlier one brought in (`use crate::time;` then
        // `use time::now;`).
        if let Some(to) = resolve(roots, krate, module, &imports, &path) {
            if let Some(n) = name {
                imports.insert(n.clone(), to.clone());
            }
            out.push((*line, format!("use {}", path.join("::")), to));
        }
    }
    for (line, path) in &r.paths {
        if let Some(to) = resolve(roots, krate, module, &imports, path) {
            out.push((*line, path.join("::"), to));
        }
    }
    out
}

/// The store's crate's sources.
pub(super) fn store_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/store/src")
}

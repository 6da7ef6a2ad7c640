//! Every command block README.md or a file in docs/ marks runnable (`<!-- runnable -->` on the
//! line before its opening fence, optionally with `K=V` settings: `<!-- runnable: SEND=true -->`)
//! runs as written — commands with `sh -eu`, a script (a shebang) as itself — in a fresh folder,
//! with this build's `exactly` first on the PATH, and must exit 0. What a newcomer copies from the
//! documentation is what this test proves. And every relative link in README.md,
//! CONTRIBUTING.md, ARCHITECTURE.md and docs/ leads to a file that exists (and, with a `#`, to a
//! heading in it).
use std::path::{Path, PathBuf};
use std::process::Command;

struct Block {
    file: String,
    line: usize,
    env: Vec<(String, String)>,
    text: String,
}

fn blocks(file: &str, readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim();
        if let Some(rest) = l
            .strip_prefix("<!-- runnable")
            .and_then(|r| r.strip_suffix("-->"))
        {
            let env = rest
                .trim_start_matches(':')
                .split_whitespace()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert!(
                lines.get(i + 1).is_some_and(|f| f.starts_with("```sh")),
                "{file} line {}: a runnable mark must stand right before a ```sh block",
                i + 1
            );
            let mut text = String::new();
            let mut j = i + 2;
            while j < lines.len() && !lines[j].starts_with("```") {
                text.push_str(lines[j]);
                text.push('\n');
                j += 1;
            }
            out.push(Block {
                file: file.to_string(),
                line: i + 2,
                env,
                text,
            });
            i = j;
        }
        i += 1;
    }
    out
}

/// README.md and every Markdown file in docs/, as (path from the root, text).
fn documents(root: &Path) -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| {
            e.expect("docs/ entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|n| {
            let text =
                std::fs::read_to_string(root.join(&n)).unwrap_or_else(|e| panic!("{n}: {e}"));
            (n, text)
        })
        .collect()
}

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_exactly"))
        .parent()
        .expect("the binary's folder")
        .to_path_buf()
}

#[test]
fn every_runnable_readme_block_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found: Vec<Block> = documents(root)
        .iter()
        .flat_map(|(name, text)| blocks(name, text))
        .collect();
    // The five-minute start (README), init (docs/languages.md), the two cron wrappers
    // (docs/cron.md), the alert rules' promtool tests (docs/monitoring.md).
    assert!(
        found.len() >= 5,
        "README.md and docs/ mark {} blocks runnable; a mark was lost",
        found.len()
    );
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for b in &found {
        let dir = tempfile::tempdir().expect("tempdir");
        // Blocks that name the repository's files (the alert rules) find them where the docs say.
        std::os::unix::fs::symlink(root.join("assets"), dir.path().join("assets"))
            .expect("link assets");
        // A script (a shebang line) runs with its own settings; commands stop at the first
        // failure.
        let flags = if b.text.starts_with("#!") {
            "-c"
        } else {
            "-euc"
        };
        let out = Command::new("sh")
            .args([flags, &b.text])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("HOME", dir.path())
            .env("EXACTLY_DB", dir.path().join("exactly.db"))
            .env("EXACTLY", env!("CARGO_BIN_EXE_exactly"))
            .envs(b.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("EXACTLY_FAULT")
            .output()
            .expect("run sh");
        assert!(
            out.status.success(),
            "{} block at line {} exited {:?}\n--- block\n{}--- stdout\n{}--- stderr\n{}",
            b.file,
            b.line,
            out.status,
            b.text,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped (but `-` and `_`),
/// spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The lines of a Markdown text outside its fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = documents(root);
    for n in ["CONTRIBUTING.md", "ARCHITECTURE.md"] {
        docs.push((
            n.to_string(),
            std::fs::read_to_string(root.join(n)).unwrap_or_else(|e| panic!("{n}: {e}")),
        ));
    }
    let mut links = 0;
    let mut broken = vec![];
    for (name, text) in &docs {
        let dir = Path::new(name).parent().unwrap_or(Path::new(""));
        for line in prose(text) {
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                let tail = &rest[at + 2..];
                let Some(end) = tail.find(')') else { break };
                let target = &tail[..end];
                rest = &tail[end..];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (file, frag) = target.split_once('#').unwrap_or((target, ""));
                let path = if file.is_empty() {
                    PathBuf::from(name)
                } else {
                    dir.join(file)
                };
                let Ok(shown) = std::fs::read_to_string(root.join(&path)) else {
                    if !root.join(&path).exists() {
                        broken.push(format!("{name}: {target}: no such file"));
                    }
                    continue;
                };
                if frag.is_empty() {
                    continue;
                }
                let found = prose(&shown)
                    .iter()
                    .any(|l| l.starts_with('#') && anchor(l.trim_start_matches('#')) == frag);
                if !found {
                    broken.push(format!("{name}: {target}: no heading #{frag}"));
                }
            }
        }
    }
    assert!(links > 20, "only {links} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// docs/jobs-file.md's tables say of every key what `man 5 exactly-jobs` says: its type, default
/// and example (both come from `src/cli/man_jobs.rs`; a key added there and not here fails).
#[test]
fn the_jobs_file_reference_has_every_key_of_the_man_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/jobs-file.md")).expect("docs/jobs-file.md");
    let out = Command::new(env!("CARGO_BIN_EXE_exactly"))
        .args(["man", "exactly-jobs.5"])
        .output()
        .expect("exactly man");
    assert!(out.status.success(), "exactly man exactly-jobs.5 failed");
    let page = String::from_utf8_lossy(&out.stdout).replace("\\-", "-");
    let lines: Vec<&str> = page.lines().collect();
    let mut keys = 0;
    let mut in_keys = false;
    for (i, l) in lines.iter().enumerate() {
        if let Some(section) = l.strip_prefix(".SH ") {
            in_keys = section.ends_with("KEYS\"");
        }
        if *l != ".TP" || !in_keys {
            continue;
        }
        let head = lines[i + 1];
        let (key, kind) = head
            .strip_prefix("\\fB")
            .and_then(|h| h.split_once("\\fR ("))
            .unwrap_or_else(|| panic!("a key's line: {head}"));
        let kind = kind.strip_suffix(')').unwrap_or(kind);
        let foot = lines[i + 4];
        let (default, example) = foot
            .strip_prefix("Default: ")
            .and_then(|f| f.split_once(". Example: "))
            .unwrap_or_else(|| panic!("a key's default and example: {foot}"));
        let example = example.trim_start_matches("\\fB").trim_end_matches("\\fR");
        let row = format!(
            "| `{key}` | {} | {default} | `{example}` |",
            kind.replace('|', "\\|")
        );
        assert!(doc.contains(&row), "docs/jobs-file.md lacks the row {row}");
        keys += 1;
    }
    assert!(keys > 30, "only {keys} keys read from the man page");
}

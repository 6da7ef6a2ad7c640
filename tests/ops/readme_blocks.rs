//! Every command block README marks runnable (`<!-- runnable -->` on the line before its
//! opening fence, optionally with `K=V` settings: `<!-- runnable: SEND=true -->`) runs as
//! written — commands with `sh -eu`, a script (a shebang) as itself — in a fresh folder, with this build's `exactly` first on the PATH, and
//! must exit 0. What a newcomer copies from README is what this test proves.
use std::path::{Path, PathBuf};
use std::process::Command;

struct Block {
    line: usize,
    env: Vec<(String, String)>,
    text: String,
}

fn blocks(readme: &str) -> Vec<Block> {
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
                "README line {}: a runnable mark must stand right before a ```sh block",
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

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_exactly"))
        .parent()
        .expect("the binary's folder")
        .to_path_buf()
}

#[test]
fn every_runnable_readme_block_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let found = blocks(&readme);
    // The five-minute start, init, the two cron wrappers, the alert rules' promtool tests.
    assert!(
        found.len() >= 5,
        "README marks {} blocks runnable; a mark was lost",
        found.len()
    );
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for b in &found {
        let dir = tempfile::tempdir().expect("tempdir");
        // Blocks that name the repository's files (the alert rules) find them where README says.
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
            "README block at line {} exited {:?}\n--- block\n{}--- stdout\n{}--- stderr\n{}",
            b.line,
            out.status,
            b.text,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

//! Whether the PostgreSQL tests can run here, decided once per build for the test binaries
//! (tests/support/backend.rs, tests/support/cluster.rs): with `EXACTLY_TEST_PG` they use that
//! server; without it they start a throwaway cluster from the server binaries found here
//! (`EXACTLY_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`, else `PATH`), given to
//! them as `EXACTLY_TEST_PG_SERVER_BIN`; where there are none, `cfg(exactly_no_pg)` marks every
//! PostgreSQL test ignored, with the reason. On CI (`CI` set, not "false") nothing is ignored:
//! a missing server fails them. A test never passes without running.
//!
//! `EXACTLY_TEST_PG_CA` is decided the same way for the one test that needs it with a server
//! of one's own: without it (and off CI) `cfg(exactly_no_pg_ca)` marks it ignored.
use std::path::{Path, PathBuf};

fn env(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A directory with the server binaries a throwaway cluster needs.
fn has_server(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"]
        .iter()
        .all(|b| dir.join(b).is_file())
}

/// A version directory's number (`15`, `9.6`) for sorting; 0 when it is not one.
fn version(dir: &Path) -> Vec<u32> {
    dir.parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .map(|n| n.split('.').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// Where `initdb` and `pg_ctl` are, as `.ci/run` looks for them.
fn server_bin(path: Option<&str>) -> Option<PathBuf> {
    if let Some(dir) = env("EXACTLY_TEST_PG_BIN") {
        let dir = PathBuf::from(dir);
        return has_server(&dir).then_some(dir);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|d| has_server(d))
        .collect();
    versions.sort_by_key(|d| version(d));
    if let Some(dir) = versions.pop() {
        return Some(dir);
    }
    std::env::split_paths(path?)
        .find(|d| has_server(d))
        .and_then(|d| std::fs::canonicalize(d.join("initdb")).ok())
        .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
        .filter(|d| has_server(d))
}

/// On PATH.
fn found(program: &str, path: Option<&str>) -> bool {
    path.is_some_and(|p| std::env::split_paths(p).any(|d| d.join(program).is_file()))
}

/// What else a throwaway cluster needs: openssl (its TLS certificate), setsid (its watcher)
/// and, as root, the `postgres` user and runuser (initdb refuses root).
fn missing_tools(path: Option<&str>) -> Vec<String> {
    let mut missing: Vec<String> = ["openssl", "setsid"]
        .iter()
        .filter(|t| !found(t, path))
        .map(|t| t.to_string())
        .collect();
    // The effective uid, the second field of `Uid:` in /proc/self/status.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    if root {
        if !found("runuser", path) {
            missing.push("runuser".into());
        }
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        if !passwd.lines().any(|l| l.starts_with("postgres:")) {
            missing.push("the postgres user".into());
        }
    }
    missing
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(exactly_no_pg)");
    println!("cargo:rustc-check-cfg=cfg(exactly_no_pg_ca)");
    let url = env("EXACTLY_TEST_PG");
    let ca = env("EXACTLY_TEST_PG_CA");
    let ci = env("CI").is_some_and(|v| !v.eq_ignore_ascii_case("false"));
    let path = env("PATH");
    let mut bin = String::new();
    if url.is_none() {
        match server_bin(path.as_deref()) {
            Some(dir) => {
                let missing = missing_tools(path.as_deref());
                if missing.is_empty() {
                    println!("cargo:rerun-if-changed={}", dir.display());
                    bin = dir.display().to_string();
                } else if !ci {
                    println!(
                        "cargo:warning=PostgreSQL tests ignored: the throwaway cluster needs {}",
                        missing.join(", ")
                    );
                    println!("cargo:rustc-cfg=exactly_no_pg");
                }
            }
            None if !ci => println!("cargo:rustc-cfg=exactly_no_pg"),
            None => {}
        }
    } else if ca.is_none() && !ci {
        println!("cargo:rustc-cfg=exactly_no_pg_ca");
    }
    println!("cargo:rustc-env=EXACTLY_TEST_PG_SERVER_BIN={bin}");
}

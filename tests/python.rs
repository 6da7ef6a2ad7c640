//! The Python module (python/): built and installed as a newcomer would (`pip install
//! ./python` into a virtual environment), then its pytest suite run against this build's
//! binary, on SQLite and on PostgreSQL: the protocol's outcomes, the key vectors of `exactly
//! key`, the lease context manager, approvals across Python and the CLI, asyncio, and the kill
//! test (Python workers SIGKILLed at each point of an effect, hundreds of times).
//!
//! Needs `python3` with `venv` and pip's access to PyPI (maturin, pytest); `.ci/run` makes
//! sure of both. Nothing here skips: a missing Python fails the test, saying what is missing.
mod support;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The virtual environment's python with this checkout's module installed: made once per test
/// process (both backends' tests share it).
fn python() -> Result<PathBuf, String> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(install).clone()
}

fn install() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-venv");
    let py = venv.join("bin").join("python");
    if !py.exists() {
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv (Python 3.9+ with venv is needed: see .ci/run)",
        )?;
    }
    let have_tools = Command::new(&py)
        .args(["-c", "import maturin, pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_tools {
        run(
            Command::new(&py).args(["-m", "pip", "install", "-q", "maturin>=1.5,<2", "pytest"]),
            "pip install maturin pytest",
        )?;
    }
    // Its own target folder: this test's cargo holds the lock on the workspace's.
    run(
        Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "-q",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(root().join("python"))
            .env(
                "CARGO_TARGET_DIR",
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-build"),
            ),
        "pip install ./python",
    )?;
    Ok(py)
}

/// Runs pytest on python/tests with `db` (None: a SQLite file per test) and this build's binary.
fn pytest(db: Option<&str>) -> Result<(), String> {
    let py = python()?;
    let mut cmd = Command::new(&py);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-s"])
        .arg(root().join("python").join("tests"))
        // Not python/: its exactly/ (without the built module) would shadow the installed one.
        .current_dir(root().join("python").join("tests"))
        .env("EXACTLY_BIN", support::bin())
        .env_remove("EXACTLY_DB")
        .env_remove("EXACTLY_FAULT");
    match db {
        Some(url) => cmd.env("EXACTLY_TEST_PY_DB", url),
        None => cmd.env_remove("EXACTLY_TEST_PY_DB"),
    };
    let out = cmd.output().map_err(|e| format!("pytest: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("pytest failed ({}):\n{text}", out.status))
    }
}

on_both_backends! {
    #[test]
    fn the_python_suite_passes() {
        let db = match support::backend::current() {
            support::backend::Backend::Sqlite => None,
            support::backend::Backend::Postgres => {
                Some(support::backend::PgSchema::create())
            }
        };
        if let Err(e) = pytest(db.as_ref().map(|s| s.url.as_str())) {
            panic!("{e}");
        }
    }
}

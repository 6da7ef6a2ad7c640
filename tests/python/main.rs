//! The Python module (python/): built as a release is (the manylinux2014 wheel of wheel.rs)
//! and installed into a virtual environment, then its pytest suite run against this build's
//! binary, on SQLite and on PostgreSQL: the protocol's outcomes, the key vectors of `exactly
//! key`, the lease context manager, approvals across Python and the CLI, asyncio, the `with`
//! form, the kill test (Python workers SIGKILLed at each point of an effect, hundreds of
//! times), and a real LangGraph graph SIGKILLed mid-node and resumed.
//!
//! Needs `python3` with `venv` and pip's access to PyPI (maturin, ziglang, auditwheel, pytest;
//! mypy and pyright for the types' test, pyright running on Node, which it fetches when none is
//! installed; langgraph and langgraph-checkpoint-sqlite for the LangGraph wrapper's kill test;
//! exactly-once for the smoke test of python/bench/compare.py); `.ci/run` makes sure of both.
//! Nothing here skips: a missing Python fails the test, saying what is missing.
#[path = "../support/mod.rs"]
mod support;
mod wheel;
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

/// The virtual environment's python with this checkout's module installed (the manylinux
/// wheel wheel.rs builds, the one users get): made once per test process (both backends'
/// tests share it).
fn python() -> Result<PathBuf, String> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(install).clone()
}

/// The virtual environment with the tools (maturin and ziglang to build the wheels, auditwheel,
/// pytest, mypy, pyright): made once per test process.
fn tools() -> Result<PathBuf, String> {
    static TOOLS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    TOOLS.get_or_init(make_tools).clone()
}

fn make_tools() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-venv");
    let py = venv.join("bin").join("python");
    if !py.exists() {
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv (Python 3.9+ with venv is needed: see .ci/run)",
        )?;
    }
    let have_tools = Command::new(&py)
        .args([
            "-c",
            "import maturin, ziglang, auditwheel, pytest, mypy, pyright, langgraph.checkpoint.sqlite, exactly_once",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_tools {
        run(
            Command::new(&py).args([
                "-m",
                "pip",
                "install",
                "-q",
                "maturin>=1.5,<2",
                "ziglang",
                "auditwheel",
                "pytest",
                "mypy",
                "pyright",
                // The LangGraph wrapper's kill test runs a real graph with its SQLite
                // checkpointer.
                "langgraph",
                "langgraph-checkpoint-sqlite",
                // python/bench/compare.py's smoke test runs it beside this module.
                "exactly-once==0.2.1",
            ]),
            "pip install maturin ziglang auditwheel pytest mypy pyright langgraph langgraph-checkpoint-sqlite exactly-once",
        )?;
    }
    Ok(py)
}

fn install() -> Result<PathBuf, String> {
    let py = tools()?;
    // The module alone: the suite runs against this build's binary (EXACTLY_BIN).
    let module = wheel::wheels()?.module;
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
            .arg(&module),
        "pip install the module's wheel",
    )?;
    Ok(py)
}

/// Runs pytest on python/tests with `db` (None: a SQLite file per test) and this build's binary.
fn pytest(db: Option<&str>) -> Result<(), String> {
    let py = python()?;
    let mut cmd = Command::new(&py);
    cmd.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-s"])
        .arg(root().join("python").join("tests"))
        // wheel.rs runs from python/ (`python -m pytest` there imports the installed module).
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

/// `exactly chaos --scenario python` with the module's Python: its JSON, and its exit code.
fn chaos(db: &str, extra: &[&str]) -> Result<(serde_json::Value, Option<i32>), String> {
    let py = python()?;
    let out = Command::new(support::bin())
        .args(["--db", db, "chaos", "--scenario", "python", "--json"])
        .args(extra)
        .env("EXACTLY_CHAOS_PYTHON", &py)
        .env_remove("EXACTLY_FAULT")
        .output()
        .map_err(|e| format!("exactly chaos: {e}"))?;
    let v = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "exactly chaos printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((v, out.status.code()))
}

/// The database a chaos run uses: a file in a temp folder, or a PostgreSQL schema.
fn chaos_db() -> (
    Option<tempfile::TempDir>,
    Option<support::backend::PgSchema>,
    String,
) {
    match support::backend::current() {
        support::backend::Backend::Sqlite => {
            let dir = tempfile::tempdir().expect("a temp folder");
            let db = dir.path().join("chaos.db").display().to_string();
            (Some(dir), None, db)
        }
        support::backend::Backend::Postgres => {
            let s = support::backend::PgSchema::create();
            let url = s.url.clone();
            (None, Some(s), url)
        }
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

    /// Python senders SIGKILLed at each point (and at random), restarted by new Python
    /// processes: the far side gets each message once, every unknown is settled.
    #[test]
    fn chaos_python_senders_send_each_message_once() {
        let (_dir, _schema, db) = chaos_db();
        let (v, code) =
            chaos(&db, &["--iterations", "36", "--seed", "11"]).unwrap_or_else(|e| panic!("{e}"));
        let s = &v["scenarios"]["python"];
        assert!(v["not_run"]["python"].is_null(), "the scenario must run here: {v:#}");
        assert_eq!(code, Some(0), "{v:#}");
        assert_eq!(s["iterations"].as_u64(), Some(36), "{s:#}");
        assert_eq!(s["duplicate_effects"].as_u64(), Some(0), "{s:#}");
        assert_eq!(s["lost_effects"].as_u64(), Some(0), "{s:#}");
        assert_eq!(s["unknown_unresolved"].as_u64(), Some(0), "{s:#}");
        for point in [
            "after_claim",
            "after_submitted",
            "in_perform_after_send",
            "after_send",
            "after_done",
        ] {
            assert_eq!(s["kills"][point].as_u64(), Some(6), "{point}: {s:#}");
        }
        assert!(s["unknown_resolved"].as_u64().is_some_and(|n| n >= 12), "{s:#}");
    }

    /// The same senders without the ledger (the harness's self-check) send twice: the
    /// scenario can fail.
    #[test]
    fn chaos_python_senders_without_the_guard_send_twice() {
        let (_dir, _schema, db) = chaos_db();
        let (v, code) = chaos(&db, &["--unguarded", "--iterations", "12", "--seed", "11"])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(code, Some(1), "{v:#}");
        let d = v["scenarios"]["python"]["duplicate_effects"].as_u64();
        assert!(d.is_some_and(|d| d >= 8), "{v:#}");
    }
}

//! The wheels as a user gets them: both distributions (`exactly-ledger`, the module, and
//! `exactly-ledger-cli`, the `exactly` command it depends on) built with zig for manylinux2014,
//! their tags checked with auditwheel, installed from the wheel files alone (`--no-index`) into
//! a clean virtual environment, and used there with no Rust on the PATH: the versions agree,
//! `exactly demo` runs, the Python examples and the kill test pass against the installed module
//! and command. The same module wheel is what the pytest suite of main.rs runs against.
use super::{root, run, tools};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The two wheel files, built once per test process.
#[derive(Clone, Debug)]
pub struct Wheels {
    pub dir: PathBuf,
    pub module: PathBuf,
    pub cli: PathBuf,
}

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The platform tag both wheels must carry, and auditwheel must find them consistent with.
const PLATFORM: &str = "manylinux_2_17_x86_64";

fn tmp() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}

pub fn wheels() -> Result<Wheels, String> {
    static W: OnceLock<Result<Wheels, String>> = OnceLock::new();
    W.get_or_init(build).clone()
}

/// `maturin build --release --zig --compatibility manylinux2014` for python/ and python/cli/,
/// sharing one target folder (the dependencies are built once), its own: this test's cargo
/// holds the lock on the workspace's.
fn build() -> Result<Wheels, String> {
    let py = tools()?;
    let bin = py.parent().ok_or("the venv's python has no folder")?;
    let dir = tmp().join("wheels");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("empty {}: {e}", dir.display()))?;
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for project in ["python", "python/cli"] {
        let started = std::time::Instant::now();
        run(
            Command::new(&py)
                .args(["-m", "maturin", "build", "--release", "--zig"])
                .args(["--compatibility", "manylinux2014", "--out"])
                .arg(&dir)
                .current_dir(root().join(project))
                // ziglang's `python -m ziglang` is found through this PATH.
                .env("PATH", &path)
                .env("CARGO_TARGET_DIR", tmp().join("wheel-build")),
            &format!("maturin build --zig ({project})"),
        )?;
        println!(
            "wheel of {project} built in {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    let find = |prefix: &str| -> Result<PathBuf, String> {
        let name = |p: &PathBuf| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| format!("read {}: {e}", dir.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("read {}: {e}", dir.display()))?
            .into_iter()
            .filter(|p| name(p).starts_with(prefix) && name(p).ends_with(".whl"))
            .collect();
        match found.as_slice() {
            [one] => Ok(one.clone()),
            _ => Err(format!("expected one {prefix}*.whl, found {found:?}")),
        }
    };
    Ok(Wheels {
        module: find(&format!("exactly_ledger-{VERSION}-"))?,
        cli: find(&format!("exactly_ledger_cli-{VERSION}-"))?,
        dir,
    })
}

/// Runs `cmd`, returning its stdout; an exit other than 0 is an error with both outputs.
fn output(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    Err(format!(
        "{what}: {}\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// The PATH of a machine without Rust: the clean venv's bin, then every folder of this PATH
/// that holds no cargo and no rustc.
fn path_without_rust(venv_bin: &Path) -> String {
    let mut dirs = vec![venv_bin.display().to_string()];
    for d in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if !d.join("cargo").exists() && !d.join("rustc").exists() {
            dirs.push(d.display().to_string());
        }
    }
    dirs.join(":")
}

/// A command in the clean venv's world: no inherited environment but a HOME and the PATH
/// without Rust.
fn clean(program: impl AsRef<std::ffi::OsStr>, env: &CleanEnv) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", &env.path)
        .env("HOME", &env.home)
        .env("LANG", "C.UTF-8")
        .env("TMPDIR", &env.home);
    cmd
}

struct CleanEnv {
    path: String,
    home: PathBuf,
}

/// What auditwheel does not see: an undefined, non-weak symbol without a version in a wheel's
/// ELF file was not found at link time (a shared library may leave one), e.g. glibc 2.25's
/// `getrandom` against manylinux2014's glibc 2.17, and fails the load on an older system. Only
/// the Python C API (`Py…`, resolved from the interpreter) may be such a symbol. Prints each
/// one found; uses pyelftools, which auditwheel brings.
const UNRESOLVED_SYMBOLS: &str = r#"
import io, sys, zipfile
from elftools.elf.elffile import ELFFile
bad = []
for whl in sys.argv[1:]:
    z = zipfile.ZipFile(whl)
    for name in z.namelist():
        data = z.read(name)
        if data[:4] != b"\x7fELF":
            continue
        elf = ELFFile(io.BytesIO(data))
        dynsym = elf.get_section_by_name(".dynsym")
        versym = elf.get_section_by_name(".gnu.version")
        for i, sym in enumerate(dynsym.iter_symbols()):
            if sym["st_shndx"] != "SHN_UNDEF" or sym["st_info"]["bind"] != "STB_GLOBAL":
                continue
            ndx = versym.get_symbol(i)["ndx"] if versym else "VER_NDX_GLOBAL"
            if ndx in ("VER_NDX_LOCAL", "VER_NDX_GLOBAL") and sym.name \
                    and not sym.name.startswith(("Py", "_Py")):
                bad.append(f"{name}: {sym.name}")
print("\n".join(bad))
"#;

#[test]
fn the_wheels_carry_honest_manylinux2014_tags() {
    let w = wheels().unwrap_or_else(|e| panic!("{e}"));
    let py = tools().unwrap_or_else(|e| panic!("{e}"));
    for (wheel, tag) in [(&w.module, "cp39-abi3"), (&w.cli, "py3-none")] {
        let name = wheel.file_name().unwrap_or_default().to_string_lossy();
        assert!(
            name.contains(&format!("-{tag}-"))
                && name.contains("manylinux2014_x86_64")
                && name.contains(PLATFORM),
            "{name}"
        );
        let shown = output(
            Command::new(&py)
                .args(["-m", "auditwheel", "show"])
                .arg(wheel),
            "auditwheel show",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let shown = shown.split_whitespace().collect::<Vec<_>>().join(" ");
        println!("auditwheel show {name}: {shown}");
        assert!(
            shown.contains(&format!(
                "consistent with the following platform tag: \"{PLATFORM}\""
            )),
            "{name}: {shown}"
        );
        let unresolved = output(
            Command::new(&py)
                .args(["-c", UNRESOLVED_SYMBOLS])
                .arg(wheel),
            "the wheel's undefined symbols",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            unresolved.trim().is_empty(),
            "{name}: symbols no library provided at link time (newer than glibc 2.17?):\n{unresolved}"
        );
        let size = std::fs::metadata(wheel).map(|m| m.len()).unwrap_or(0);
        println!("{name}: {:.1} MB", size as f64 / 1e6);
    }
}

/// The sdists build (cheap: no compiling) and carry what a source install needs: the LICENSE,
/// the words' and the store's crates (crates/words, crates/store: path dependencies of the
/// library), the README as the long description, the project's URLs, and the module's pin of
/// the command's version.
#[test]
fn the_sdists_carry_the_license_and_the_pin() {
    let py = tools().unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp().join("sdists");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    }
    for (project, name) in [
        ("python", "exactly_ledger"),
        ("python/cli", "exactly_ledger_cli"),
    ] {
        run(
            Command::new(&py)
                .args(["-m", "maturin", "sdist", "--out"])
                .arg(&dir)
                .current_dir(root().join(project)),
            &format!("maturin sdist ({project})"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let sdist = dir.join(format!("{name}-{VERSION}.tar.gz"));
        let check = format!(
            "import sys, tarfile\n\
             t = tarfile.open(sys.argv[1])\n\
             top = '{name}-{VERSION}/'\n\
             names = set(t.getnames())\n\
             assert top + 'LICENSE' in names, 'no LICENSE'\n\
             assert top + 'crates/words/src/lib.rs' in names, 'no crates/words'\n\
             assert top + 'crates/store/src/lib.rs' in names, 'no crates/store'\n\
             info = t.extractfile(top + 'PKG-INFO').read().decode()\n\
             assert 'Description-Content-Type: text/markdown' in info, info\n\
             print(info.split('\\n\\n')[0])\n"
        );
        let info = output(
            Command::new(&py).args(["-c", &check]).arg(&sdist),
            "the sdist's contents",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(info.contains(&format!("Version: {VERSION}")), "{info}");
        let pypi = format!("https://pypi.org/project/{}/", name.replace('_', "-"));
        assert!(
            info.contains(&format!("Project-URL: Homepage, {pypi}")),
            "the metadata must say where the project lives:\n{info}"
        );
        if name == "exactly_ledger" {
            assert!(
                info.contains(&format!("Requires-Dist: exactly-ledger-cli=={VERSION}")),
                "the module must depend on the command at its own version:\n{info}"
            );
        }
    }
}

/// From the wheel files alone into a clean venv, used with no Rust on the PATH and nothing of
/// this checkout on sys.path but its tests: versions, `exactly demo`, the examples, the kill
/// test.
#[test]
fn the_installed_wheels_work_without_rust() {
    let w = wheels().unwrap_or_else(|e| panic!("{e}"));
    let venv = tmp().join("wheel-venv");
    if venv.exists() {
        std::fs::remove_dir_all(&venv).unwrap_or_else(|e| panic!("{e}"));
    }
    let home = tmp().join("wheel-home");
    if home.exists() {
        std::fs::remove_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::create_dir_all(&home).unwrap_or_else(|e| panic!("{e}"));
    run(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        "python3 -m venv",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let py = venv.join("bin").join("python");
    // pytest from PyPI first; then ours from the wheel files only, the command's wheel found
    // as the module's dependency.
    run(
        Command::new(&py).args(["-m", "pip", "install", "-q", "pytest"]),
        "pip install pytest",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    run(
        Command::new(&py)
            .args(["-m", "pip", "install", "-q", "--no-index", "--find-links"])
            .arg(&w.dir)
            .arg("exactly-ledger"),
        "pip install --no-index exactly-ledger",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let env = CleanEnv {
        path: path_without_rust(&venv.join("bin")),
        home: home.clone(),
    };

    // No Rust here; the module and the command are the installed ones, at one version.
    let check = format!(
        "import importlib.metadata as m, os, shutil, exactly\n\
         assert shutil.which('cargo') is None, shutil.which('cargo')\n\
         assert shutil.which('rustc') is None, shutil.which('rustc')\n\
         venv = {venv:?}\n\
         assert exactly.__file__.startswith(venv), exactly.__file__\n\
         cmd = shutil.which('exactly')\n\
         assert cmd == os.path.join(venv, 'bin', 'exactly'), f'exactly command: {{cmd}}'\n\
         v = exactly.__version__\n\
         assert v == m.version('exactly-ledger') == m.version('exactly-ledger-cli'), v\n\
         assert f'exactly-ledger-cli=={{v}}' in (m.requires('exactly-ledger') or []), m.requires('exactly-ledger')\n\
         lic = [f for f in m.files('exactly-ledger') or [] if f.name == 'LICENSE']\n\
         assert lic, 'no LICENSE in the module wheel'\n\
         print(v)\n",
        venv = venv.display().to_string()
    );
    let v = output(
        clean(&py, &env).args(["-c", &check]),
        "the installed module",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v.trim(), VERSION, "exactly.__version__");
    let cli = output(clean("exactly", &env).arg("--version"), "exactly --version")
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{}", cli.trim());
    assert_eq!(
        cli.trim(),
        format!("exactly {VERSION}"),
        "exactly --version"
    );
    let pyproject = std::fs::read_to_string(root().join("python/pyproject.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        pyproject.contains(&format!("\"exactly-ledger-cli=={VERSION}\"")),
        "python/pyproject.toml must pin exactly-ledger-cli=={VERSION} (root Cargo.toml's version)"
    );

    // The demo's workload (schedulers the command starts as itself again) on a file of ours.
    let demo_db = home.join("demo.db");
    output(
        clean("exactly", &env)
            .args(["demo", "--no-ui", "--for", "4s", "--db"])
            .arg(&demo_db),
        "exactly demo --no-ui",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let status = output(
        clean("exactly", &env)
            .arg("--db")
            .arg(&demo_db)
            .args(["status", "--json"]),
        "exactly status --json",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let s: serde_json::Value = serde_json::from_str(&status).unwrap_or_else(|e| panic!("{e}"));
    let count = |field: &str| s[field].as_array().map_or(0, Vec::len);
    let done = s["events"].as_array().map_or(0, |events| {
        events.iter().filter(|e| e["kind"] == "effect_done").count()
    });
    println!(
        "exactly demo: {} jobs, {} schedulers (the command started as itself again), {} events, \
         {done} effects done",
        count("jobs"),
        count("schedulers"),
        count("events")
    );
    assert!(count("jobs") > 0, "{s:#}");
    assert!(count("schedulers") > 0, "{s:#}");
    assert!(done > 0, "{s:#}");

    // The examples (the assistant under the installed `exactly run`, the agent's approval with
    // `exactly approve`) and the kill test, run from python/ as `python -m pytest` would be.
    let out = clean(&py, &env)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-s"])
        .args(["tests/test_examples.py", "tests/test_kill.py"])
        .current_dir(root().join("python"))
        .env("EXACTLY_PY_KILL_ROUNDS", "10")
        .output()
        .unwrap_or_else(|e| panic!("pytest: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "pytest against the installed wheels:\n{text}"
    );
    let line = text
        .lines()
        // After pytest's progress dots, with -s.
        .find_map(|l| l.find("python kill test: ").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no kill test line:\n{text}"));
    let n = |word: &str| -> u64 {
        let before = line.split(&format!(" {word}")).next().unwrap_or_default();
        let num = before.rsplit(' ').next().unwrap_or_default();
        num.parse()
            .unwrap_or_else(|e| panic!("{word} in {line:?}: {e}"))
    };
    let (effects, kills, duplicates, lost) =
        (n("effects"), n("SIGKILLs"), n("duplicates"), n("lost"));
    println!(
        "python kill test: {effects} effects, {kills} SIGKILLs, {duplicates} duplicates, {lost} lost (installed wheels)"
    );
    assert_eq!(effects, 60, "{line}");
    assert!(kills >= 50, "{line}");
    assert_eq!(duplicates, 0, "{line}");
    assert_eq!(lost, 0, "{line}");
}

//! A throwaway PostgreSQL cluster for the `postgres::` tests when `EXACTLY_TEST_PG` is not set:
//! started once per test binary (on the first test that wants it) from the server binaries
//! `build.rs` found (`EXACTLY_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`, else
//! `PATH`), as `.ci/run` starts CI's: `initdb` and `pg_ctl` run as the `postgres` user (through
//! `runuser`) when the tests run as root, in `target/tmp/pg/PID`, listening on 127.0.0.1 with TLS
//! (a throwaway CA made by `openssl`), a role `exactly` that may create schemas and roles.
//!
//! It is stopped when the test process ends: a watcher started in a session of its own stops it
//! (`pg_ctl stop -m immediate`) and removes its directory once the test process is gone, however
//! it ended; and each start first stops and removes the cluster of any test process that is gone
//! (a watcher killed too), so none leaks.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A running cluster: the URL of its `exactly` database and its CA certificate.
#[derive(Debug)]
pub struct Cluster {
    pub url: String,
    pub ca: PathBuf,
}

/// Where build.rs found `initdb` and `pg_ctl`; empty when it found none (the tests are then
/// ignored, `cfg(exactly_no_pg)`, or fail on CI).
pub(super) const SERVER_BIN: Option<&str> = option_env!("EXACTLY_TEST_PG_SERVER_BIN");

/// The cluster of this test binary, started on the first call; Err says why there is none.
pub fn get() -> Result<&'static Cluster, String> {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| start(Auth::Trust))
        .as_ref()
        .map_err(Clone::clone)
}

/// A second cluster of this test binary whose server checks the password of a TCP connection
/// (`scram-sha-256`), where `get()`'s trusts any: what a program does with the password of
/// its URL shows only here. Started on the first call, whether `EXACTLY_TEST_PG` is set or not
/// (from the server binaries `pair.rs` finds), in `target/tmp/pg-password/PID`.
pub fn with_password() -> Result<&'static Cluster, String> {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| start(Auth::Password))
        .as_ref()
        .map_err(Clone::clone)
}

/// How the server checks a connection over TCP.
#[derive(Clone, Copy, PartialEq)]
enum Auth {
    /// Anyone is who they say.
    Trust,
    /// The role's password, as `scram-sha-256`; the admin connects on the Unix socket (trust).
    Password,
}

pub(super) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// `program` run as the cluster's owner: `postgres` through runuser as root (initdb refuses
/// root), else this user.
pub(super) fn as_owner(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Runs `cmd` to its end; Err with its output when it fails.
pub(super) fn run(what: &str, cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{what}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// Gives the cluster's owner a path (as root; as another user it is already its own).
pub(super) fn give(path: &Path) -> Result<(), String> {
    if !is_root() {
        return Ok(());
    }
    run(
        &format!("chown postgres {}", path.display()),
        Command::new("chown").arg("postgres").arg(path),
    )
}

/// Stops and removes the cluster of every test process that is gone (its watcher gone too).
fn reap(root: &Path, bin: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let data = e.path().join("data");
        let _ = as_owner(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(e.path());
    }
}

pub(super) fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("a free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("a free port: {e}"))
}

/// A throwaway CA and a certificate for 127.0.0.1 signed by it, as `.ci/run` makes them.
fn certificates(dir: &Path) -> Result<(), String> {
    let p = |f: &str| dir.join(f);
    run(
        "openssl (the CA)",
        Command::new("openssl")
            .args(["req", "-new", "-x509", "-days", "2", "-nodes", "-subj"])
            .arg("/CN=exactly test CA")
            .arg("-keyout")
            .arg(p("ca.key"))
            .arg("-out")
            .arg(p("ca.crt")),
    )?;
    run(
        "openssl (the request)",
        Command::new("openssl")
            .args(["req", "-new", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout"])
            .arg(p("server.key"))
            .arg("-out")
            .arg(p("server.csr")),
    )?;
    std::fs::write(
        p("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .map_err(|e| format!("server.ext: {e}"))?;
    run(
        "openssl (the certificate)",
        Command::new("openssl")
            .args(["x509", "-req", "-in"])
            .arg(p("server.csr"))
            .arg("-CA")
            .arg(p("ca.crt"))
            .arg("-CAkey")
            .arg(p("ca.key"))
            .args(["-CAcreateserial", "-days", "2", "-extfile"])
            .arg(p("server.ext"))
            .arg("-out")
            .arg(p("server.crt")),
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p("server.key"), std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("server.key: {e}"))?;
    give(&p("server.key"))?;
    give(&p("server.crt"))
}

/// A path for the watcher's shell script, in single quotes.
fn quoted(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// Starts a watcher in a session of its own (Ctrl-C and the test's end leave it alive): once
/// this process is gone it stops the cluster and removes its directory.
pub(super) fn watch(bin: &Path, dir: &Path) -> Result<(), String> {
    let owner = if is_root() {
        "runuser -u postgres -- "
    } else {
        ""
    };
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
         {owner}{pg_ctl} -D {data} -m immediate -w stop >/dev/null 2>&1; rm -rf {dir}",
        pid = std::process::id(),
        pg_ctl = quoted(&bin.join("pg_ctl")),
        data = quoted(&dir.join("data")),
        dir = quoted(dir),
    );
    Command::new("setsid")
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("the cluster's watcher (setsid sh): {e}"))
}

fn start(auth: Auth) -> Result<Cluster, String> {
    let (bin, root) = match auth {
        Auth::Trust => (
            PathBuf::from(SERVER_BIN.filter(|b| !b.is_empty()).ok_or(
                "EXACTLY_TEST_PG is not set and build.rs found no PostgreSQL server (initdb, \
                 pg_ctl): set EXACTLY_TEST_PG, or install PostgreSQL (see CONTRIBUTING.md)",
            )?),
            "pg",
        ),
        // Wanted with `EXACTLY_TEST_PG` set too, when build.rs looked for no server.
        Auth::Password => (super::pair::server_bin()?, "pg-password"),
    };
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(root);
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    reap(&root, &bin);
    let dir = root.join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    give(&dir)?;
    let started = std::time::Instant::now();
    let data = dir.join("data");
    run(
        "initdb",
        as_owner(&bin.join("initdb")).arg("-D").arg(&data).args([
            "--auth-local=trust",
            match auth {
                Auth::Trust => "--auth-host=trust",
                Auth::Password => "--auth-host=scram-sha-256",
            },
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        ]),
    )?;
    certificates(&dir)?;
    let port = free_port()?;
    let options = format!(
        "-p {port} -k {d} -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off \
         -c ssl=on -c ssl_cert_file={d}/server.crt -c ssl_key_file={d}/server.key",
        d = dir.display()
    );
    // The watcher first: a start that fails half way is cleaned up too.
    watch(&bin, &dir)?;
    run(
        "pg_ctl start",
        as_owner(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(dir.join("log"))
            .args(["-w", "-o", &options, "start"]),
    )
    .map_err(|e| {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        format!("{e}\n{log}")
    })?;
    // The superuser has no password: on the Unix socket where the server checks none.
    let host = match auth {
        Auth::Trust => "127.0.0.1".to_string(),
        Auth::Password => dir.display().to_string(),
    };
    let admin = format!("host={host} port={port} user=postgres dbname=postgres");
    let mut c = postgres::Client::connect(&admin, postgres::NoTls)
        .map_err(|e| format!("connecting to the throwaway cluster: {e}"))?;
    // Two statements: CREATE DATABASE cannot run in the transaction a batch would be.
    for sql in [
        "CREATE ROLE exactly LOGIN PASSWORD 'exactly' CREATEDB CREATEROLE",
        "CREATE DATABASE exactly OWNER exactly",
    ] {
        c.batch_execute(sql)
            .map_err(|e| format!("{sql}: {}", super::pg::describe(&e)))?;
    }
    eprintln!(
        "a throwaway PostgreSQL for this test binary on 127.0.0.1:{port} in {} (started in {:.1?})",
        dir.display(),
        started.elapsed()
    );
    Ok(Cluster {
        url: format!("postgres://exactly:exactly@127.0.0.1:{port}/exactly"),
        ca: dir.join("ca.crt"),
    })
}

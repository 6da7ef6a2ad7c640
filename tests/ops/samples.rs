//! What ships runs as shipped: the sample jobs file (`assets/jobs.toml`) with its scripts, the
//! cron wrappers under cron's rules with `exactly` where `cargo install` puts it, and the demo,
//! which leaves nothing behind in the temporary directory.
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::cli::split;
use support::runner::{wait_until, Site};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs `exactly ARGS` as an operator would from `/`, with only `PATH=/usr/bin:/bin` (so the
/// binary is not on it), `TMPDIR` the site's folder (where the sample scripts' outboxes go).
fn operator(site: &Site, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(support::bin())
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TMPDIR", site.dir.path())
        .arg("--db")
        .arg(site.db())
        .args(args)
        .output()
        .expect("run exactly");
    split(out)
}

#[test]
fn the_sample_jobs_file_runs_as_shipped() {
    let site = Site::new();
    let sample = repo("assets/jobs.toml");
    // Registered by a scheduler started from `/` (as a service manager starts it).
    let mut sched = site.start_file(&sample, "sample", "2s", &[]);
    assert!(
        wait_until(Duration::from_secs(20), || site
            .count("SELECT count(*) FROM exactly_jobs")
            == 3),
        "{}",
        site.log("sample")
    );
    assert_eq!(sched.term(Duration::from_secs(20)), Some(0));
    let outbox = |name: &str| support::read_or_empty(&site.path(name)).lines().count();

    let (code, out, err) = operator(&site, &["trigger", "daily-digest"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(outbox("digest-outbox.log"), 1, "{out}{err}");
    let (code, out, err) = operator(&site, &["trigger", "end-of-day-close"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(outbox("close-outbox.log"), 1, "{out}{err}");

    // The invoice waits for a person's approval (its script's exit 4), then is sent once.
    let (code, out, err) = operator(&site, &["trigger", "invoice-batch"]);
    assert!(!err.contains("cannot open"), "{err}");
    assert!(out.contains("exit 4"), "awaits approval: {out}{err}");
    assert_eq!(outbox("invoice-outbox.log"), 0);
    assert_ne!(code, 0);
    let keys = site.strings("SELECT effect_key FROM exactly_approvals WHERE state = 'pending'");
    assert_eq!(keys.len(), 1, "{out}{err}");
    assert_eq!(
        site.strings("SELECT outcome FROM exactly_runs WHERE job_key = 'invoice-batch'"),
        ["awaiting_approval"]
    );
    let (code, _, err) = operator(&site, &["approve", &keys[0]]);
    assert_eq!(code, 0, "{err}");
    // The approval wakes the waiting firing: a scheduler runs it within a tick.
    let tmp = site.dir.path().to_string_lossy().into_owned();
    let mut sched = site.start_file(&sample, "sample2", "2s", &[("TMPDIR", tmp.as_str())]);
    assert!(
        wait_until(Duration::from_secs(10), || outbox("invoice-outbox.log")
            == 1),
        "{}",
        site.log("sample2")
    );
    assert_eq!(sched.term(Duration::from_secs(20)), Some(0));
    assert_eq!(outbox("invoice-outbox.log"), 1);
}

/// A far side for the wrappers: SEND appends the effect key to `far.log`, OBSERVE finds it.
fn far_side(dir: &Path) -> std::io::Result<(PathBuf, PathBuf, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let far = dir.join("far.log");
    let send = dir.join("send.sh");
    let observe = dir.join("observe.sh");
    std::fs::write(
        &send,
        format!(
            "#!/bin/sh\necho \"$EXACTLY_EFFECT_KEY\" >> {}\n",
            far.display()
        ),
    )?;
    std::fs::write(
        &observe,
        format!("#!/bin/sh\ngrep -q \"$1\" {} 2>/dev/null\n", far.display()),
    )?;
    for f in [&send, &observe] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok((far, send, observe))
}

#[test]
fn the_cron_wrappers_find_exactly_where_cargo_install_puts_it() {
    for script in [
        "assets/scripts/cron-wrapper.sh",
        "assets/scripts/cron-wrapper-long.sh",
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let cargo_bin = home.join(".cargo/bin");
        std::fs::create_dir_all(&cargo_bin).expect("mkdir");
        std::os::unix::fs::symlink(support::bin(), cargo_bin.join("exactly")).expect("symlink");
        let (far, send, observe) = far_side(dir.path()).expect("far side");
        let db = dir.path().join("exactly.db");
        // As cron runs it: from `/`, a bare PATH, HOME, and the crontab's own settings; no
        // EXACTLY, so the wrapper must find the binary itself.
        let cron = || {
            split(
                Command::new("/usr/bin/env")
                    .arg("-i")
                    .arg("PATH=/usr/bin:/bin")
                    .arg(format!("HOME={}", home.display()))
                    .arg(format!("EXACTLY_DB={}", db.display()))
                    .arg(format!("SEND={}", send.display()))
                    .arg(format!("OBSERVE={}", observe.display()))
                    .arg("/bin/sh")
                    .arg(repo(script))
                    .current_dir("/")
                    .output()
                    .expect("run the wrapper"),
            )
        };
        let (code, out, err) = cron();
        assert_eq!(code, 0, "{script}: {out}{err}");
        assert_eq!(support::read_or_empty(&far).lines().count(), 1, "{script}");
        let (code, _, err) = cron();
        assert_eq!(code, 0, "{script}: {err}");
        assert!(err.contains("duplicate suppressed"), "{script}: {err}");
        assert_eq!(support::read_or_empty(&far).lines().count(), 1, "{script}");
    }
}

#[test]
fn the_demo_leaves_nothing_behind_in_the_temporary_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tempfile::tempdir().expect("tempdir");
    let out = Command::new(support::bin())
        .args(["demo", "--no-ui", "--for", "2s"])
        .env("TMPDIR", tmp.path())
        .env("HOME", home.path())
        .env_remove("EXACTLY_DB")
        .env_remove("XDG_STATE_HOME")
        .current_dir(home.path())
        .output()
        .expect("run the demo");
    let (code, _, err) = split(out);
    assert_eq!(code, 0, "{err}");
    let left = || -> Vec<PathBuf> {
        std::fs::read_dir(tmp.path())
            .expect("read the temporary directory")
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .expect("list the temporary directory")
    };
    assert!(left().is_empty(), "the demo left {:?}", left());
    // Interrupted (Ctrl-C) once its database exists: the same.
    let mut demo = Command::new(support::bin())
        .args(["demo", "--no-ui", "--for", "60s"])
        .env("TMPDIR", tmp.path())
        .env("HOME", home.path())
        .env_remove("EXACTLY_DB")
        .env_remove("XDG_STATE_HOME")
        .current_dir(home.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the demo");
    let started = wait_until(Duration::from_secs(60), || {
        left().iter().any(|d| d.join("demo.db").exists())
    });
    // SAFETY: signalling our own child.
    unsafe { libc::kill(demo.id() as i32, libc::SIGINT) };
    let status = demo.wait().expect("wait for the demo");
    assert!(started, "the demo never created its database");
    assert_eq!(status.code(), Some(0));
    assert!(left().is_empty(), "the interrupted demo left {:?}", left());
}

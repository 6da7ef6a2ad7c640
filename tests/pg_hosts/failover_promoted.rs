//! The window after an asynchronous failover, on two real servers: a primary and its
//! asynchronous standby (`support::pair`), the primary SIGKILLed and the standby promoted. An
//! effect of the old timeline's last lease left `submitted` (its row reached the standby before
//! the WAL sender was stopped) holds the window: a new key is held for its check, and sent once
//! that effect is resolved; the window is then recorded closed. (`failover_window.rs` shows the
//! same rule with the failover made by rewriting the recorded timeline.)
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::pair::Pair;

use crate::support;

fn exactly(db: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(support::bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("EXACTLY_DB")
        .env_remove("EXACTLY_FAILOVER_GUARD")
        .env_remove("EXACTLY_FAILOVER_WINDOW")
        .stdin(Stdio::null())
        .output()
        .expect("run exactly");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(db: &str, args: &[&str]) -> String {
    let (code, out, err) = exactly(db, args);
    assert_eq!(code, 0, "exactly {args:?}: {out}{err}");
    out.trim().to_string()
}

/// `exactly effect` for `target` under `token`: the far side is the file `far`, a line each.
fn effect_args(token: &str, target: &str, far: &Path) -> Vec<String> {
    support::effect_args("j", token, "send", target)
        .sh(&format!("echo {target} >> '{}'", far.display()))
}

/// How many times the far side got `target`.
fn sent(far: &Path, target: &str) -> usize {
    support::read_or_empty(far)
        .lines()
        .filter(|l| *l == target)
        .count()
}

/// One value of a row, as text, on `client`'s server.
fn one(c: &mut ::postgres::Client, sql: &str) -> String {
    c.query_one(&format!("SELECT ({sql})::text"), &[])
        .map(|r| r.get::<_, String>(0))
        .unwrap_or_else(|e| panic!("{sql}: {}", support::pg::describe(&e)))
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn after_a_real_failover_new_keys_wait_until_the_old_lease_s_effect_is_resolved() {
    let started = Instant::now();
    let pair = Pair::start().unwrap_or_else(|e| panic!("{e}"));
    let db = pair.url();
    let db = db.as_str();
    let dir = tempfile::tempdir().expect("tempdir");
    let far = dir.path().join("far-side");
    ok(db, &["init"]);
    // An earlier lease, its effect done and the lease released: settled, it holds nothing.
    let t1 = ok(db, &["lease", "claim", "--job", "j", "--for", "1m"]);
    ok(db, &support::strs(&effect_args(&t1, "earlier", &far)));
    ok(db, &["lease", "release", "--job", "j", "--token", &t1]);
    // The old timeline's last lease: its effect is `submitted` (committed before the command
    // runs) when its process dies with the primary's machine.
    let t2 = ok(db, &["lease", "claim", "--job", "j", "--for", "3s"]);
    let running = dir.path().join("running");
    let mut sender = Command::new(support::bin())
        .arg("--db")
        .arg(db)
        .args(support::effect_args("j", &t2, "send", "last").sh(&format!(
            "echo last >> '{far}'; touch '{running}'; sleep 60",
            far = far.display(),
            running = running.display()
        )))
        .env_remove("EXACTLY_FAILOVER_GUARD")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("start exactly effect");
    support::wait_for(
        "the last lease's effect to run",
        Duration::from_secs(20),
        || running.exists(),
    );
    // SAFETY: kill(2) on the process group this test started; no memory is involved.
    unsafe { libc::kill(-(sender.id() as i32), libc::SIGKILL) };
    sender.wait().expect("wait for exactly effect");
    let mut primary = pair.primary.client().unwrap_or_else(|e| panic!("{e}"));
    let last_key = one(
        &mut primary,
        "SELECT effect_key FROM effect_ledger WHERE target_id = 'last'",
    );
    pair.wait_caught_up().unwrap_or_else(|e| panic!("{e}"));
    pair.hold_stream().unwrap_or_else(|e| panic!("{e}"));
    // Acknowledged by the primary alone: the promoted standby never hears of it.
    primary
        .batch_execute("INSERT INTO exactly_meta (name, value) VALUES ('lost-with-the-primary', 1)")
        .unwrap_or_else(|e| panic!("{}", support::pg::describe(&e)));
    drop(primary);
    pair.fail_over().unwrap_or_else(|e| panic!("{e}"));
    let mut promoted = pair.standby.client().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        one(
            &mut promoted,
            "SELECT count(*) FROM exactly_meta WHERE name = 'lost-with-the-primary'"
        ),
        "0",
        "the failover lost nothing: the standby was not behind"
    );
    assert_eq!(
        one(
            &mut promoted,
            &format!("SELECT state FROM effect_ledger WHERE effect_key = '{last_key}'")
        ),
        "submitted"
    );
    // The first claim on the promoted server, once the old lease (3 s) has ended: it finds the
    // new timeline and raises the tokens above the old primary's.
    let token = support::wait_for_some("the old lease to end", Duration::from_secs(30), || {
        let (code, out, err) = exactly(db, &["lease", "claim", "--job", "j", "--for", "1m"]);
        match code {
            0 => Some(out.trim().to_string()),
            3 => None,
            _ => panic!("lease claim on the promoted server: {code}: {out}{err}"),
        }
    });
    assert_eq!(token, "4294967297", "the token after the raise");
    let window = |c: &mut ::postgres::Client| {
        one(
            c,
            "SELECT value FROM exactly_meta WHERE name = 'failover_window_until_ms'",
        )
    };
    assert_eq!(
        window(&mut promoted),
        i64::MAX.to_string(),
        "the default window"
    );
    // The window lasts at least the hour after the failover (a key whose row the promoted
    // server lost entirely is bounded by time alone). Made to have passed, by SQL: the hour's
    // end (`failover_floor_until_ms`) moved back by an hour. `failover_at_ms` itself stays: it
    // tells the old timeline's rows from the new, and moved back it would leave the open
    // `submitted` row out (created after it), so the window would close for the wrong reason.
    promoted
        .batch_execute(
            "UPDATE exactly_meta SET value = value - 3600000
             WHERE name = 'failover_floor_until_ms'",
        )
        .unwrap_or_else(|e| panic!("{}", support::pg::describe(&e)));
    // While the old lease's effect is open, a key without a row is held for its check.
    let (code, out, err) = exactly(db, &support::strs(&effect_args(&token, "new-1", &far)));
    assert_eq!(
        code, 5,
        "not held while the old lease's effect is open: {out}{err}"
    );
    assert_eq!(
        one(
            &mut promoted,
            "SELECT state FROM effect_ledger WHERE target_id = 'new-1'"
        ),
        "unknown"
    );
    assert_eq!(sent(&far, "new-1"), 0, "held, yet sent");
    assert_eq!(
        window(&mut promoted),
        i64::MAX.to_string(),
        "closed while held"
    );
    // A person checked the far side: the old lease's effect happened.
    ok(db, &["resolve", &last_key, "--happened", "--force"]);
    let (code, out, err) = exactly(db, &support::strs(&effect_args(&token, "new-2", &far)));
    assert_eq!(
        code, 0,
        "the window stayed open once all was accounted for: {out}{err}"
    );
    assert!(
        err.contains("the window after the failover closed"),
        "{err}"
    );
    assert_eq!(sent(&far, "new-2"), 1);
    assert_eq!(window(&mut promoted), "0", "the window is recorded closed");
    assert_eq!(sent(&far, "last"), 1);
    assert_eq!(sent(&far, "earlier"), 1);
    eprintln!(
        "two servers, a failover and the window in {:.1?}",
        started.elapsed()
    );
}

//! The CLI's token memory across processes: each `exactly lease claim` is a process of its own
//! (a cron wrapper's), and the highest fencing token each job was handed per database is kept in
//! the user's state folder. A claim handed one not above it (the database went back, as after a
//! failover that lost its last commits) is released and refused, and an effect or renewal under
//! a token below it runs nothing; an effect sent raises it; a database made again is
//! another database; concurrent claimers all leave their jobs; a folder that cannot be written
//! or a corrupt file is said on stderr and the claim goes on.
use crate::on_both_backends;
use crate::support;
use std::process::{Child, Command, Stdio};
use support::cli::{split, Env};

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// `exactly` on the env's database with the user's state folder at `state` (the memory in its
/// default place, `state/exactly/tokens`).
fn cmd(env: &Env, state: &std::path::Path) -> Command {
    let mut c = env.cmd();
    c.env_remove("EXACTLY_TOKEN_MEMORY")
        .env("XDG_STATE_HOME", state)
        .env("EXACTLY_MAX_SKEW", "0s");
    c
}

fn run(mut c: Command, args: &[&str]) -> Res<(i32, String, String)> {
    Ok(split(c.args(args).output()?))
}

/// Claims `job` and releases it at once: the token it was handed.
fn claim_release(env: &Env, state: &std::path::Path, job: &str) -> Res<i64> {
    let (code, out, err) = run(
        cmd(env, state),
        &["lease", "claim", "--job", job, "--for", "1m"],
    )?;
    if code != 0 {
        return Err(format!("claim: exit {code}: {err}").into());
    }
    let token = out.trim().to_string();
    let (code, _, err) = run(
        cmd(env, state),
        &["lease", "release", "--job", job, "--token", &token],
    )?;
    if code != 0 {
        return Err(format!("release: exit {code}: {err}").into());
    }
    Ok(token.parse()?)
}

/// The database loses the job's last claims, as a promoted standby that never got them: the
/// lease row's token set back (the timeline guard's raise is not in play here).
fn lose_claims(env: &Env, job: &str, token: i64) {
    env.sql_execute(&format!(
        "UPDATE job_lease SET fencing_token = {token} WHERE job_key = '{job}'"
    ));
}

/// The memory's lines for `job`, parsed.
fn remembered(state: &std::path::Path, job: &str) -> Res<Vec<serde_json::Value>> {
    let text = std::fs::read_to_string(state.join("exactly").join("tokens"))?;
    let mut found = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        if v["job"] == job {
            found.push(v);
        }
    }
    Ok(found)
}

/// Three claims (tokens 1, 2, 3), each its own process; the database then hands out 2: the
/// claim is refused (exit 3, one line naming the failover), the lease is not left held, and
/// the memory names the job with 3. The same claim with the memory off is handed a token
/// handed out before (3) and exits 0: what a cron wrapper did before. An effect handed a
/// token below the remembered one runs nothing.
fn claim_refused() -> Res {
    let env = Env::new();
    let state = env.path("state");
    for want in 1..=3 {
        assert_eq!(claim_release(&env, &state, "nightly")?, want);
    }
    lose_claims(&env, "nightly", 1);
    let (code, out, err) = run(
        cmd(&env, &state),
        &["lease", "claim", "--job", "nightly", "--for", "1m"],
    )?;
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(out, "", "no token printed: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("token 2, not above 3")
            && err.contains("failover")
            && err.contains("lease was released"),
        "{err}"
    );
    let held = env.sql_count(&format!(
        "SELECT count(*) FROM job_lease WHERE job_key = 'nightly' AND lease_until <> '{}'",
        exactly::lease::RELEASED
    ));
    assert_eq!(held, 0, "the refused claim's lease is not left held");
    let mine = remembered(&state, "nightly")?;
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["token"], 3, "{mine:?}");

    // An effect under token 2 (stale: 3 was handed out for the job) runs nothing.
    let ran = env.path("ran");
    let touch = format!("touch {}", ran.display());
    let (code, _, err) = run(
        cmd(&env, &state),
        &[
            "effect", "--job", "nightly", "--token", "2", "--action", "send", "--target", "t",
            "--", "sh", "-c", &touch,
        ],
    )?;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("lower than 3"), "{err}");
    assert!(
        !ran.exists(),
        "the command ran under a token lower than one seen"
    );
    // Nor is a lease renewed under it.
    let (code, _, err) = run(
        cmd(&env, &state),
        &[
            "lease", "renew", "--job", "nightly", "--token", "2", "--for", "1m",
        ],
    )?;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("lower than 3"), "{err}");

    // Without the memory, the claim acts on a token handed out before.
    let mut off = cmd(&env, &state);
    off.env("EXACTLY_TOKEN_MEMORY", "off");
    let (code, out, err) = run(off, &["lease", "claim", "--job", "nightly", "--for", "1m"])?;
    assert_eq!((code, out.trim()), (0, "3"), "{err}");
    Ok(())
}

/// An effect sent under a token the memory did not hold (claimed by a scheduler, or with the
/// memory off) raises it: the commands a scheduler starts remember their tokens too.
fn effect_raises() -> Res {
    let env = Env::new();
    let state = env.path("state");
    let mut off = cmd(&env, &state);
    off.env("EXACTLY_TOKEN_MEMORY", "off");
    let (code, token, err) = run(off, &["lease", "claim", "--job", "w", "--for", "1m"])?;
    assert_eq!(code, 0, "{err}");
    let token = token.trim();
    assert!(!state.join("exactly").join("tokens").exists());
    let (code, _, err) = run(
        cmd(&env, &state),
        &[
            "effect", "--job", "w", "--token", token, "--action", "a", "--target", "t", "--",
            "true",
        ],
    )?;
    assert_eq!(code, 0, "{err}");
    let mine = remembered(&state, "w")?;
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["token"].to_string(), token, "{mine:?}");
    Ok(())
}

/// The MCP gateway (each client session starts one) claims its lease as `lease claim` does: a
/// token not above one it was handed before is released and refused before the server starts.
fn gateway_refused() -> Res {
    let env = Env::new();
    let state = env.path("state");
    for want in 1..=2 {
        assert_eq!(claim_release(&env, &state, "mail")?, want);
    }
    lose_claims(&env, "mail", 0);
    let started = env.path("started");
    let server = format!("touch {}", started.display());
    let (code, _, err) = run(
        cmd(&env, &state),
        &["mcp", "--name", "mail", "--", "sh", "-c", &server],
    )?;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("token 1, not above 2"), "{err}");
    assert!(!started.exists(), "the gateway started its server");
    let held = env.sql_count(&format!(
        "SELECT count(*) FROM job_lease WHERE job_key = 'mail' AND lease_until <> '{}'",
        exactly::lease::RELEASED
    ));
    assert_eq!(held, 0, "the refused gateway's lease is not left held");
    Ok(())
}

/// A database dropped and made again under the same name (`exactly init` of a new one)
/// starts its tokens at 1, and the memory does not take that for a failover.
fn made_again() -> Res {
    let env = Env::new();
    let state = env.path("state");
    for want in 1..=3 {
        assert_eq!(claim_release(&env, &state, "daily")?, want);
    }
    match &env.pg {
        Some(pg) => env.sql_execute(&format!(
            "DROP SCHEMA {0} CASCADE; CREATE SCHEMA {0}",
            pg.name
        )),
        None => {
            for suffix in ["", "-wal", "-shm"] {
                let f = format!("{}{suffix}", env.db_str());
                if std::path::Path::new(&f).exists() {
                    std::fs::remove_file(f)?;
                }
            }
        }
    }
    let (code, _, err) = run(cmd(&env, &state), &["init"])?;
    assert_eq!(code, 0, "{err}");
    assert_eq!(claim_release(&env, &state, "daily")?, 1);
    let mine = remembered(&state, "daily")?;
    assert_eq!(mine.len(), 2, "one entry per database: {mine:?}");
    Ok(())
}

/// Claimers of twelve jobs at once, three times: every job is remembered with its third token
/// (the file is changed under a lock, by rename: no claimer's raise is lost).
fn concurrent_claimers() -> Res {
    let env = Env::new();
    let state = env.path("state");
    let (code, _, err) = run(cmd(&env, &state), &["init"])?;
    assert_eq!(code, 0, "{err}");
    for round in 1..=3 {
        let children: Vec<Child> = (0..12)
            .map(|i| {
                cmd(&env, &state)
                    .args([
                        "lease",
                        "claim",
                        "--job",
                        &format!("job-{i}"),
                        "--for",
                        "1s",
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
            })
            .collect::<Result<_, _>>()?;
        for child in children {
            let (code, out, err) = split(child.wait_with_output()?);
            assert_eq!((code, out.trim()), (0, &*round.to_string()), "{err}");
        }
        env.sql_execute(&format!(
            "UPDATE job_lease SET lease_until = '{}'",
            exactly::lease::RELEASED
        ));
    }
    for i in 0..12 {
        let mine = remembered(&state, &format!("job-{i}"))?;
        assert_eq!(mine.len(), 1, "job-{i}: {mine:?}");
        assert_eq!(mine[0]["token"], 3, "job-{i}: {mine:?}");
    }
    Ok(())
}

on_both_backends! {
    #[test]
    fn a_gateway_handed_a_token_handed_out_before_is_refused() {
        if let Err(e) = gateway_refused() {
            panic!("{e}");
        }
    }

    #[test]
    fn an_effect_sent_raises_the_memory() {
        if let Err(e) = effect_raises() {
            panic!("{e}");
        }
    }

    #[test]
    fn a_claim_handed_a_token_handed_out_before_is_released_and_refused() {
        if let Err(e) = claim_refused() {
            panic!("{e}");
        }
    }

    #[test]
    fn a_database_made_again_is_another_database() {
        if let Err(e) = made_again() {
            panic!("{e}");
        }
    }

    #[test]
    fn concurrent_claimers_all_leave_their_jobs() {
        if let Err(e) = concurrent_claimers() {
            panic!("{e}");
        }
    }
}

/// A state folder that cannot be made (its place is a file) and a memory file of garbage: each
/// is one warning line, and the claim goes on.
#[test]
fn an_unusable_or_corrupt_memory_never_fails_a_claim() -> Res {
    let env = Env::new();
    let blocked = env.path("not-a-folder");
    std::fs::write(&blocked, "")?;
    let (code, out, err) = run(
        cmd(&env, &blocked),
        &["lease", "claim", "--job", "a", "--for", "1s"],
    )?;
    assert_eq!((code, out.trim()), (0, "1"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("token memory is not kept"), "{err}");

    let state = env.path("state");
    std::fs::create_dir_all(state.join("exactly"))?;
    std::fs::write(
        state.join("exactly").join("tokens"),
        b"\xff\0garbage\n{\"db\":\n",
    )?;
    let (code, out, err) = run(
        cmd(&env, &state),
        &["lease", "claim", "--job", "b", "--for", "1s"],
    )?;
    assert_eq!((code, out.trim()), (0, "1"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("2 unreadable line(s)"), "{err}");
    assert_eq!(remembered(&state, "b")?.len(), 1);
    Ok(())
}

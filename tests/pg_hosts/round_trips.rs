//! On PostgreSQL each ledger transition and each lease claim, renewal and release is one round
//! trip. Counted on the wire: the library talks to the server through a TCP relay that reads
//! the protocol (`support::pg_wire`) and counts the requests that wait for the server's answer.
//! Without a PostgreSQL server (`EXACTLY_TEST_PG`, or one to start) the tests are ignored.
use crate::support;
use exactly::effect::{self, Effect, Failure, Observation, Spec};
use exactly::{lease, Access};
use std::time::Duration;
use support::backend::{pg_url, with_search_path, PgSchema};
use support::pg_wire::Relay;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Answer;

impl Effect for Answer {
    fn perform(&mut self, _key: &str) -> Result<String, Failure> {
        Ok("ok".into())
    }
    fn observe(&mut self, _key: &str) -> Observation {
        Observation::NotHappened
    }
}

/// The test server's URL; the test fails without one (where there is none it is ignored at
/// build time).
fn pg_base() -> String {
    let _checked = support::backend::enter_postgres();
    pg_url().expect("enter_postgres fails without a server")
}

/// The round trips `f` made through `relay`.
fn trips(relay: &Relay, f: impl FnOnce() -> Res<()>) -> Res<u64> {
    let before = relay.counts().round_trips;
    f()?;
    Ok(relay.counts().round_trips - before)
}

#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn each_transition_is_one_round_trip_on_postgres() -> Res<()> {
    let base = pg_base();
    let schema = PgSchema::create();
    let relay = Relay::start(&base)?;
    let db = with_search_path(&relay.url, &schema.name);
    let mut store = exactly::open(Some(&db), Access::Write)?;
    let hour = Duration::from_secs(3600);
    let won = |c| match c {
        lease::Claim::Won { token } => Ok(token),
        other => Err(format!("claim not won: {other:?}")),
    };
    let lifecycle = |store: &mut exactly::Store, token, n: u32| -> Res<()> {
        let ctx = effect::Ctx::new(&exactly::JobName::from("j"), token);
        let spec = Spec::new("send", "far").input("n", n.to_string());
        match effect::run(store, &ctx, &spec, &mut Answer)? {
            effect::Outcome::Done { .. } => Ok(()),
            other => Err(format!("lifecycle ended {other:?}").into()),
        }
    };
    // Once each first: a statement is prepared on a connection's first use of it.
    let token = won(lease::claim(
        &mut store,
        &exactly::JobName::from("j"),
        "me",
        hour,
    )?)?;
    lifecycle(&mut store, token, 0)?;
    lease::renew(&mut store, &exactly::JobName::from("j"), token, hour)?;
    lease::renew_many(&mut store, &[(&exactly::JobName::from("j"), token, hour)])?;
    let other = won(lease::claim(
        &mut store,
        &exactly::JobName::from("k"),
        "me",
        hour,
    )?)?;
    lease::release(&mut store, &exactly::JobName::from("k"), other)?;

    let mut seen = Vec::new();
    let mut count = |what: &str, n: u64, f: &mut dyn FnMut() -> Res<()>| -> Res<()> {
        let t = trips(&relay, f)?;
        seen.push(format!("{what}: {t} (want {n})"));
        Ok(())
    };
    count("an effect lifecycle (begin+submit, finish)", 2, &mut || {
        lifecycle(&mut store, token, 1)
    })?;
    count("a claim", 1, &mut || {
        won(lease::claim(
            &mut store,
            &exactly::JobName::from("l"),
            "me",
            hour,
        )?)?;
        Ok(())
    })?;
    count("a claim of a held lease", 1, &mut || match lease::claim(
        &mut store,
        &exactly::JobName::from("j"),
        "other",
        hour,
    )? {
        lease::Claim::Held { .. } => Ok(()),
        c => Err(format!("held lease won: {c:?}").into()),
    })?;
    count("a renewal", 1, &mut || {
        assert!(lease::renew(
            &mut store,
            &exactly::JobName::from("j"),
            token,
            hour
        )?);
        Ok(())
    })?;
    count("a renewal of three leases", 1, &mut || {
        let out = lease::renew_many(
            &mut store,
            &[
                (&exactly::JobName::from("j"), token, hour),
                (&exactly::JobName::from("k"), other, hour),
                (
                    &exactly::JobName::from("j"),
                    exactly::Token::from(token.get() - 1),
                    hour,
                ),
            ],
        )?;
        assert_eq!(out, vec![Some(true), None, Some(false)]);
        Ok(())
    })?;
    count("a release", 1, &mut || {
        assert!(lease::release(
            &mut store,
            &exactly::JobName::from("j"),
            token
        )?);
        Ok(())
    })?;
    let wanted = |s: &String| {
        let (got, want) = s.rsplit_once(": ").map_or(("", ""), |(_, r)| {
            r.split_once(" (want ").unwrap_or(("", ""))
        });
        got == want.trim_end_matches(')')
    };
    eprintln!("round trips: {seen:#?}");
    assert!(seen.iter().all(wanted), "round trips: {seen:#?}");
    Ok(())
}

/// Eight threads, each with a store of its own, race for one job's lease over and over: the winner
/// runs an effect to `done` under its token and releases the lease; after its next claim (so a
/// newer token exists) it tries another effect under the old one. Every transition goes by the
/// server's functions: no token is won twice, every held token's effect is done once, and every
/// stale one is fenced (recorded) with nothing inserted.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn racing_claims_and_transitions_keep_the_fence_on_postgres() -> Res<()> {
    pg_base();
    let schema = PgSchema::create();
    drop(exactly::open(Some(&schema.url), Access::Write)?);
    let until = std::time::Instant::now() + Duration::from_secs(3);
    let results: Vec<Result<Vec<i64>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let db = schema.url.clone();
                s.spawn(move || -> Result<Vec<i64>, String> {
                    let e = |e: exactly::Error| e.to_string();
                    let mut store = exactly::open(Some(&db), Access::Write).map_err(e)?;
                    let mut won = Vec::new();
                    // The token this thread released last: stale once anyone claimed after.
                    let mut stale: Option<i64> = None;
                    let mut n = 0;
                    while std::time::Instant::now() < until {
                        n += 1;
                        let hour = Duration::from_secs(3600);
                        let claim = lease::claim(
                            &mut store,
                            &exactly::JobName::from("race"),
                            &format!("w{w}"),
                            hour,
                        )
                        .map_err(e)?;
                        if let Some(old) = stale.take() {
                            let ctx = effect::Ctx::new(
                                &exactly::JobName::from("race"),
                                exactly::Token::from(old),
                            );
                            let spec = Spec::new("send", "far").input("stale", format!("{w}-{n}"));
                            let out =
                                effect::run(&mut store, &ctx, &spec, &mut Answer).map_err(e)?;
                            if !matches!(out, effect::Outcome::Fenced { .. }) {
                                return Err(format!("stale token {old}: {out:?}"));
                            }
                        }
                        let lease::Claim::Won { token } = claim else {
                            continue;
                        };
                        won.push(token.get());
                        let ctx = effect::Ctx::new(&exactly::JobName::from("race"), token);
                        let spec = Spec::new("send", "far").input("t", token.to_string());
                        let out = effect::run(&mut store, &ctx, &spec, &mut Answer).map_err(e)?;
                        if !matches!(out, effect::Outcome::Done { .. }) {
                            return Err(format!("token {token}: {out:?}"));
                        }
                        if !lease::release(&mut store, &exactly::JobName::from("race"), token)
                            .map_err(e)?
                        {
                            return Err(format!("token {token}: release refused"));
                        }
                        stale = Some(token.get());
                    }
                    Ok(won)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a racer panicked".into())))
            .collect()
    });
    let mut tokens = Vec::new();
    for r in results {
        tokens.extend(r?);
    }
    tokens.sort_unstable();
    let n = tokens.len() as i64;
    assert!(n >= 8, "only {n} claims won in 3 s");
    assert_eq!(tokens, (1..=n).collect::<Vec<_>>(), "each token won once");
    let mut c = support::backend::connect(&schema.url);
    let count = |c: &mut postgres::Client, sql: &str| -> Res<i64> {
        Ok(c.query_one(sql, &[])?.get::<_, i64>(0))
    };
    let done = "SELECT count(*) FROM effect_ledger WHERE state = 'done'";
    assert_eq!(count(&mut c, done)?, n, "one effect done per token");
    let events = "SELECT count(*) FROM exactly_events WHERE kind = 'effect_done'";
    assert_eq!(count(&mut c, events)?, n);
    let stale = "SELECT count(*) FROM effect_ledger WHERE state <> 'done'";
    assert_eq!(count(&mut c, stale)?, 0, "no stale row inserted");
    let fenced = "SELECT count(*) FROM exactly_events WHERE kind = 'fenced_write'";
    assert!(
        count(&mut c, fenced)? >= n - 8,
        "each stale try recorded as fenced"
    );
    Ok(())
}

/// A login role that may only read and write the rows of `schema`'s tables, dropped with this
/// value (after the schema, whose drop takes its grants along).
struct Worker {
    role: String,
    base: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let sql = format!("DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}", self.role);
        if let Err(e) = support::backend::connect(&self.base).batch_execute(&sql) {
            eprintln!("warning: role {} not dropped: {e}", self.role);
        }
    }
}

/// A database an older exactly made (its tables, no functions) is upgraded by the next writer
/// that may create them; until then a worker role granted only the tables keeps to the
/// transactions, with the same answers.
#[test]
#[cfg_attr(
    exactly_no_pg,
    ignore = "no PostgreSQL: set EXACTLY_TEST_PG or install the server (CONTRIBUTING.md)"
)]
fn an_older_database_gets_the_functions_and_a_worker_role_keeps_working() -> Res<()> {
    let base = pg_base();
    let schema = PgSchema::create();
    let worker = Worker {
        role: format!("{}_w", schema.name),
        base: base.clone(),
    };
    drop(exactly::open(Some(&schema.url), Access::Write)?);
    let functions =
        "SELECT count(*) FROM pg_proc WHERE pronamespace = current_schema()::regnamespace
                     AND proname IN ('exactly_begin_effect', 'exactly_finish_effect')";
    let mut c = support::backend::connect(&schema.url);
    assert_eq!(c.query_one(functions, &[])?.get::<_, i64>(0), 2);
    c.batch_execute(&format!(
        "DROP FUNCTION exactly_begin_effect, exactly_submit_effect, exactly_finish_effect,
           exactly_claim_lease, exactly_set_lease, exactly_renew_leases, exactly_event;
         DELETE FROM exactly_meta WHERE name = 'pg_functions';
         CREATE ROLE {r} LOGIN PASSWORD 'pw';
         GRANT {r} TO CURRENT_USER;
         GRANT USAGE ON SCHEMA {s} TO {r};
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r};
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {r};",
        r = worker.role,
        s = schema.name
    ))?;
    let rest = base
        .split_once('@')
        .map(|(_, h)| h)
        .ok_or("URL with @host")?;
    let worker_db = with_search_path(
        &format!("postgres://{}:pw@{rest}", worker.role),
        &schema.name,
    );
    let lifecycle = |db: &str, job: &str| -> Res<()> {
        let mut store = exactly::open(Some(db), Access::Write)?;
        let lease::Claim::Won { token } = lease::claim(
            &mut store,
            &exactly::JobName::from(job),
            "me",
            Duration::from_secs(60),
        )?
        else {
            return Err(format!("{job}: claim not won").into());
        };
        let ctx = effect::Ctx::new(&exactly::JobName::from(job), token);
        let spec = Spec::new("send", "far").input("job", job);
        match effect::run(&mut store, &ctx, &spec, &mut Answer)? {
            effect::Outcome::Done { .. } => {}
            other => return Err(format!("{job}: {other:?}").into()),
        }
        let stale = effect::Ctx::new(
            &exactly::JobName::from(job),
            exactly::Token::from(token.get() - 1),
        );
        let spec = Spec::new("send", "far").input("stale", job);
        match effect::run(&mut store, &stale, &spec, &mut Answer)? {
            effect::Outcome::Fenced { .. } => Ok(()),
            other => Err(format!("{job} under a stale token: {other:?}").into()),
        }
    };
    // The worker may not create functions: it works on through the transactions.
    lifecycle(&worker_db, "a")?;
    assert_eq!(c.query_one(functions, &[])?.get::<_, i64>(0), 0);
    // The owner's next open installs them, and the worker's next open uses them.
    drop(exactly::open(Some(&schema.url), Access::Write)?);
    assert_eq!(c.query_one(functions, &[])?.get::<_, i64>(0), 2);
    lifecycle(&worker_db, "b")?;
    let done = "SELECT count(*) FROM effect_ledger WHERE state = 'done'";
    assert_eq!(c.query_one(done, &[])?.get::<_, i64>(0), 2);
    drop(c);
    drop(schema);
    drop(worker);
    Ok(())
}

//! A stored time that is not a time, read where it used to be guessed: each read says it is
//! the database's corruption, naming the column and the value, in one line.
use crate::store::Store;
use exactly_words::Error;

/// Sorts like a time (so a `WHERE at < ?` still finds it), parses as none: month 13.
const BAD: &str = "2026-13-01T00:00:00.000Z";

/// A fresh database at `dir`, its raw connection for rows written by hand, and its path.
fn fresh(dir: &tempfile::TempDir) -> (rusqlite::Connection, String) {
    let path = dir.path().join("bad.db");
    let path = path.to_str().unwrap().to_string();
    drop(Store::open(&path).unwrap());
    (rusqlite::Connection::open(&path).unwrap(), path)
}

/// A fresh database at `dir` holding one row written by hand by `sql`, with `BAD` as `?1`.
fn holding(dir: &tempfile::TempDir, sql: &str) -> String {
    let (raw, path) = fresh(dir);
    raw.execute(sql, [BAD]).unwrap();
    path
}

/// `got` is the one-line corruption of `column`.
fn assert_corrupt<T: std::fmt::Debug>(got: exactly_words::Result<T>, column: &str) {
    match got {
        Err(Error::Corrupt { message, .. }) => {
            assert!(
                message.ends_with(&format!("{column} holds \"{BAD}\", not a time")),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
        other => panic!("a bad {column} read as {other:?}"),
    }
}

/// The approval's age was 0 and the dashboard and the notifier used the text as found.
#[test]
fn a_bad_requested_at_is_corrupt_not_age_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(
        &dir,
        "INSERT INTO exactly_approvals (effect_key, job_key, state, requested_at) \
         VALUES ('k', 'j', 'pending', ?1)",
    );
    let mut store = Store::open_read_only(&path).unwrap();
    let read = store.reading(
        exactly_words::time::now(),
        crate::jobs::SCHEDULER_DEAD_AFTER,
    );
    assert_corrupt(read, "exactly_approvals.requested_at");
}

/// Job `j`'s lease, ending at `BAD`.
const A_BAD_LEASE: &str = "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, \
                           created_at) VALUES ('j', 'me', 1, ?1, '2026-01-01T00:00:00.000Z')";

/// The lease's time left was zero: a lease read as run out, by the runner's and the effect's
/// checks of it.
#[test]
fn a_bad_lease_until_is_corrupt_not_no_time_left() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(&dir, A_BAD_LEASE);
    let mut store = Store::open(&path).unwrap();
    let left = crate::lease::get_with_left(&mut store, &exactly_words::JobName::from("j"));
    assert_corrupt(left, "job_lease.lease_until");
}

/// The plain lease read handed the text on, for each reader to parse or compare as it liked.
#[test]
fn a_bad_lease_until_is_corrupt_in_the_lease_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(&dir, A_BAD_LEASE);
    let mut store = Store::open_read_only(&path).unwrap();
    let row = crate::lease::get(&mut store, &exactly_words::JobName::from("j"));
    assert_corrupt(row, "job_lease.lease_until");
}

/// A claim that found the lease held handed its end on as text: `lease claim`, the MCP gateway
/// and the chaos harness printed "held until" whatever the row held.
#[test]
fn a_bad_lease_until_is_corrupt_when_a_claim_finds_it_held() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(&dir, A_BAD_LEASE);
    let mut store = Store::open(&path).unwrap();
    let claim = crate::lease::claim(
        &mut store,
        &exactly_words::JobName::from("j"),
        "other",
        std::time::Duration::from_secs(60),
    );
    assert_corrupt(claim, "job_lease.lease_until");
}

/// A hold whose claim time is not a time was left out of the `p99>lease` figure.
#[test]
fn a_bad_hold_time_is_corrupt_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(
        &dir,
        "INSERT INTO exactly_holds (job_key, fencing_token, lease_ms, claimed_at, released_at) \
         VALUES ('j', 1, 60000, ?1, '2026-01-01T00:00:00.000Z')",
    );
    let mut store = Store::open_read_only(&path).unwrap();
    let read = store.reading(
        exactly_words::time::now(),
        crate::jobs::SCHEDULER_DEAD_AFTER,
    );
    assert_corrupt(read, "exactly_holds.claimed_at");
}

/// The last slot fired was read as none: the slots since the real last one were neither
/// caught up nor called missed.
#[test]
fn a_bad_last_slot_is_corrupt_not_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(
        &dir,
        "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, created_at, \
         updated_at) VALUES ('j', ?1, 'scheduled', 'done', ?1, ?1)",
    );
    let mut store = Store::open(&path).unwrap();
    assert_corrupt(
        crate::firing::last_slot(&mut store, &exactly_words::JobName::from("j")),
        "exactly_firings.scheduled_at",
    );
}

/// An outage's end and a scheduler's last beat were read as none: no outage.
#[test]
fn bad_scheduler_times_are_corrupt_not_no_outage() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, path) = fresh(&dir);
    raw.execute(
        "INSERT INTO exactly_events (at, kind, detail) VALUES (?1, 'scheduler_outage', \
         'no scheduler of jobs.toml was alive for 1h')",
        [BAD],
    )
    .unwrap();
    let mut store = Store::open(&path).unwrap();
    assert_corrupt(
        store.last_outage_end("jobs.toml", "2027-01-01T00:00:00.000Z"),
        "exactly_events.at",
    );
    raw.execute(
        "INSERT INTO exactly_schedulers (owner, host, pid, started_at, heartbeat_at, source) \
         VALUES ('old', 'h', 1, ?1, ?1, 'jobs.toml')",
        [BAD],
    )
    .unwrap();
    let reg = crate::store::SchedulerReg {
        owner: "new",
        host: "h",
        pid: 2,
        source: "jobs.toml",
        host_id: "id",
    };
    assert_corrupt(
        store.scheduler_started(
            &reg,
            "2026-06-01T00:00:00.000Z",
            Some(std::time::Duration::from_secs(10)),
        ),
        "exactly_schedulers.ended_at or heartbeat_at",
    );
}

/// A failed run's end was read as none: its firing went again at once, without its backoff.
#[test]
fn a_bad_run_end_is_corrupt_not_no_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, path) = fresh(&dir);
    let slot = "2026-06-01T00:00:00.000Z";
    raw.execute(
        "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, created_at, \
         updated_at, detail) VALUES ('j', ?1, 'scheduled', 'retry', ?1, ?1, \
         'its run failed: run 2 of at most 3 goes after its backoff')",
        [slot],
    )
    .unwrap();
    raw.execute(
        "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
         started_at, ended_at, outcome, duration_ms) \
         VALUES ('r1', 'j', ?1, 'me', 1, ?1, ?2, 'failed', 5)",
        [slot, BAD],
    )
    .unwrap();
    let mut store = Store::open(&path).unwrap();
    assert_corrupt(resume(&mut store), "exactly_runs.ended_at");
}

/// `exactly effects` showed such an effect as changed 0 s ago.
#[test]
fn a_bad_effect_change_time_is_corrupt_not_age_zero() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(
        &dir,
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
         created_at, updated_at) VALUES ('k', 'j', 'r', 1, 'unknown', \
         '2026-01-01T00:00:00.000Z', ?1)",
    );
    let mut store = Store::open_read_only(&path).unwrap();
    assert_corrupt(
        crate::effect::in_state(
            &mut store,
            &exactly_words::state::EffectState::Unknown,
            None,
        ),
        "effect_ledger.updated_at",
    );
}

/// The kill test's last run was said to be 0 s old.
#[test]
fn a_bad_chaos_run_time_is_corrupt_not_just_now() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(
        &dir,
        "INSERT INTO exactly_chaos_runs (at, scenarios, iterations, duplicates, lost, passed) \
         VALUES (?1, 'kill-mid-effect', 3, 0, 0, 1)",
    );
    let mut store = Store::open_read_only(&path).unwrap();
    assert_corrupt(
        store.checklist_reading(
            exactly_words::time::now(),
            crate::jobs::SCHEDULER_DEAD_AFTER,
        ),
        "exactly_chaos_runs.at",
    );
}

/// An effect's row, `submitted` under job `j`'s token 1 by an attempt of another host, its
/// times good but for the columns the caller names with `?1`.
fn ledger_row_with(bad: &[&str]) -> String {
    let good = "'2026-01-01T00:00:00.000Z'";
    let col = |c: &str| if bad.contains(&c) { "?1" } else { good };
    format!(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
         created_at, updated_at, attempt, verdict, verdict_at, resolved_by, resolved_at, \
         sender, sender_until) VALUES ('k', 'j', 'r', 1, 'submitted', {}, {good}, \
         'elsewhere:1', 'can''t tell', {}, 'me', {}, NULL, {})",
        col("created_at"),
        col("verdict_at"),
        col("resolved_at"),
        col("sender_until"),
    )
}

/// The effect's row handed its creation time on as text: `exactly effects --json` and the
/// effect's detail showed whatever was stored.
#[test]
fn a_bad_effect_creation_time_is_corrupt_not_shown_as_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(&dir, &ledger_row_with(&["created_at"]));
    let mut store = Store::open_read_only(&path).unwrap();
    assert_corrupt(
        crate::effect::get(&mut store, &exactly_words::EffectKey::from("k")),
        "effect_ledger.created_at",
    );
}

/// A verdict's and a resolution's times were handed on as text too.
#[test]
fn bad_verdict_and_resolution_times_are_corrupt() {
    for column in ["verdict_at", "resolved_at"] {
        let dir = tempfile::tempdir().unwrap();
        let path = holding(&dir, &ledger_row_with(&[column]));
        let mut store = Store::open_read_only(&path).unwrap();
        assert_corrupt(
            crate::effect::get(&mut store, &exactly_words::EffectKey::from("k")),
            &format!("effect_ledger.{column}"),
        );
    }
}

/// The send's deadline was compared as text: month 13 sorts after every real instant, so its
/// sender was judged in flight for ever and the row could never be settled.
#[test]
fn a_bad_send_deadline_is_corrupt_not_a_sender_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let path = holding(&dir, &ledger_row_with(&["sender_until"]));
    let mut store = Store::open(&path).unwrap();
    let resolved = crate::approval::resolve(
        &mut store,
        &exactly_words::EffectKey::from("k"),
        crate::approval::Resolution::Happened,
        "me",
        None,
        None,
        false,
    );
    assert_corrupt(resolved, "effect_ledger.sender_until");
}

/// A ledger row's times are shown exactly as stored (`exactly effects --json`, the Python
/// module's `effect_row`): the fixed-width text, milliseconds included when they are zero.
#[test]
fn a_ledger_rows_times_serialize_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, path) = fresh(&dir);
    let at = "2026-01-01T00:00:00.000Z";
    raw.execute(
        &ledger_row_with(&["created_at", "verdict_at", "resolved_at", "sender_until"]),
        [at],
    )
    .unwrap();
    let mut store = Store::open_read_only(&path).unwrap();
    let row = crate::effect::get(&mut store, &exactly_words::EffectKey::from("k"))
        .unwrap()
        .unwrap();
    let json = serde_json::to_value(&row).unwrap();
    for column in [
        "created_at",
        "updated_at",
        "verdict_at",
        "resolved_at",
        "sender_until",
    ] {
        assert_eq!(json[column], at, "{column}: {json}");
    }
    assert_eq!(json["effect_key"], "k", "{json}");
}

/// An approval holding `column = BAD` (the other times good), `state` as given.
fn approval_holding(dir: &tempfile::TempDir, state: &str, column: &str) -> String {
    let (raw, path) = fresh(dir);
    raw.execute(
        &format!(
            "INSERT INTO exactly_approvals (effect_key, job_key, state, requested_at, \
             decided_by, {column}) VALUES ('k', 'j', ?2, '2026-06-01T00:00:00.000Z', 'ops', ?1)"
        ),
        [BAD, state],
    )
    .unwrap();
    path
}

/// The decision's time was handed on as found, for `exactly effect` and the dashboard to show.
#[test]
fn a_bad_decided_at_is_corrupt_not_shown_as_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = approval_holding(&dir, "approved", "decided_at");
    let mut store = Store::open(&path).unwrap();
    let key = exactly_words::EffectKey::from("k");
    assert_corrupt(
        crate::approval::get(&mut store, &key),
        "exactly_approvals.decided_at",
    );
    // A second decision reads the first to say who decided, and when.
    assert_corrupt(
        crate::approval::approve(&mut store, &key, "ops2", None),
        "exactly_approvals.decided_at",
    );
}

/// The consuming send's time was handed on as found.
#[test]
fn a_bad_consumed_at_is_corrupt_not_shown_as_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = approval_holding(&dir, "consumed", "consumed_at");
    let mut store = Store::open_read_only(&path).unwrap();
    assert_corrupt(
        crate::approval::get(&mut store, &exactly_words::EffectKey::from("k")),
        "exactly_approvals.consumed_at",
    );
}

/// Resumes job `j`'s firings at 2026-06-01T00:00:05Z, every earlier run's scheduler gone.
fn resume(store: &mut Store) -> exactly_words::Result<crate::store::Resumed> {
    let gone = |_: &crate::store::RunOwner| true;
    let backoff = |_: &str, _: i64| std::time::Duration::from_secs(600);
    store.resume_firing(
        "j",
        &crate::store::Resumer {
            owner: "me",
            silent_for: chrono::Duration::seconds(10),
            gone: &gone,
        },
        &crate::store::ResumeTimes {
            lease_until: "2026-06-01T00:01:05.000Z",
            now: "2026-06-01T00:00:05.000Z",
            oldest: "2026-05-01T00:00:00.000Z",
        },
        &exactly_words::policy::RetryRules {
            attempts: 3,
            backoff: &backoff,
            held: None,
        },
    )
}

/// Job `j`'s firing at `slot` in `state`, and (if `running`) its run that died.
fn firing_at(raw: &rusqlite::Connection, slot: &str, state: &str) {
    raw.execute(
        "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, run_id, created_at, \
         updated_at) VALUES ('j', ?1, 'scheduled', ?2, 'r1', '2026-06-01T00:00:00.000Z', \
         '2026-06-01T00:00:00.000Z')",
        [slot, state],
    )
    .unwrap();
    raw.execute(
        "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
         started_at) VALUES ('r1', 'j', ?1, 'me', 1, '2026-06-01T00:00:00.000Z')",
        [slot],
    )
    .unwrap();
}

/// A firing whose run died, at a slot that is not a time, was run again for that text: a run
/// and `EXACTLY_SCHEDULED_AT` for an instant no schedule has.
#[test]
fn a_bad_firing_slot_is_corrupt_not_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, path) = fresh(&dir);
    firing_at(&raw, BAD, "running");
    let mut store = Store::open(&path).unwrap();
    assert_corrupt(resume(&mut store), "exactly_firings.scheduled_at");
    // Nothing was started, nothing given up: the firing is as it was.
    let state: String = raw
        .query_row("SELECT state FROM exactly_firings", [], |r| r.get(0))
        .unwrap();
    assert_eq!(state, "running");
}

/// A queued firing at a slot that is not a time was started for that text.
#[test]
fn a_bad_queued_slot_is_corrupt_not_started() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, path) = fresh(&dir);
    firing_at(&raw, BAD, "queued");
    let mut store = Store::open(&path).unwrap();
    let got = store.start_queued(
        "j",
        "me",
        "2026-06-01T00:01:05.000Z",
        "2026-06-01T00:00:05.000Z",
    );
    assert_corrupt(got, "exactly_firings.scheduled_at");
}

/// A slot is written back in the fixed-width form to find its row: one stored in another form
/// (a time all the same) would find no row, and its firing would be run again with its row
/// left `running`, for ever.
#[test]
fn a_slot_in_another_form_is_corrupt_not_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let (raw, path) = fresh(&dir);
    let slot = "2026-06-01T00:00:00Z";
    firing_at(&raw, slot, "running");
    let mut store = Store::open(&path).unwrap();
    match resume(&mut store) {
        Err(Error::Corrupt { message, .. }) => assert!(
            message.ends_with(
                "exactly_firings.scheduled_at holds \"2026-06-01T00:00:00Z\", not a slot in \
                 the fixed-width form"
            ),
            "{message}"
        ),
        other => panic!("a slot in another form read as {other:?}"),
    }
}

//! Fixture databases for the dashboard's tests: real SQLite files written through the library
//! with a pinned clock (each operation says when it happened, relative to [`NOW`]), so screens
//! are the same on every run.
use exactly::effect::{self, Attempt, Ctx, Effect, Failure, Io, Observation, Spec};
use exactly::lease;
use exactly::time::Ts;
use exactly::Store;
use rusqlite::{params, Connection};

/// The instant the screens are drawn at. In the future, so that leases pinned relative to it are
/// live for the store's own clock too.
pub(super) const NOW: &str = "2099-01-01T12:00:00.000Z";

pub(super) fn now() -> Ts {
    exactly::time::parse(NOW).expect("fixed time")
}

pub(super) struct Fixture {
    pub _dir: tempfile::TempDir,
    pub path: String,
}

impl Fixture {
    pub(super) fn store(&self) -> Store {
        Store::open(&self.path).expect("open fixture")
    }
    pub(super) fn sql(&self) -> Connection {
        Connection::open(&self.path).expect("open fixture")
    }
}

pub(super) fn new_db() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("exactly.db").to_string_lossy().into_owned();
    Store::open(&path).expect("create");
    Fixture { _dir: dir, path }
}

/// An action whose far side answers as told.
pub(super) struct Far(pub Result<String, Failure>);

impl Effect for Far {
    fn perform(&mut self, _key: &str) -> Result<String, Failure> {
        self.0.clone()
    }
    fn observe(&mut self, _key: &str) -> Observation {
        Observation::CantTell("far side did not answer".into())
    }
}

/// A far side whose observer cannot tell, in these words (it is never asked to send).
struct Unsure(&'static str);

impl Effect for Unsure {
    fn perform(&mut self, _key: &str) -> Result<String, Failure> {
        Err(Failure::NotSent("an observer only looks".into()))
    }
    fn observe(&mut self, _key: &str) -> Observation {
        Observation::CantTell(self.0.into())
    }
}

/// Drives an attempt through the library's own steps (`effect::execute`, as `effect::run`
/// does) until the step pending is one `stop` names, or the attempt ends; returns that step.
pub(super) fn drive(
    store: &mut Store,
    att: &mut Attempt,
    act: &mut dyn Effect,
    stop: impl Fn(&Io) -> bool,
) -> Io {
    let mut io = att.pending().clone();
    for _ in 0..64 {
        if stop(&io) || matches!(io, Io::End(_)) {
            return io;
        }
        let input = effect::execute(store, att, &io, act)
            .expect("store")
            .expect("an input");
        io = att.step(input);
    }
    panic!("an attempt never ended")
}

/// Claims `job`'s lease at `ago(at)`, held until `until`.
pub(super) fn claim(store: &mut Store, job: &str, owner: &str, at: i64, until: Ts) -> i64 {
    match lease::claim_until(store, &crate::JobName::from(job), owner, until, ago(at))
        .expect("claim")
    {
        lease::Claim::Won { token } => token.get(),
        lease::Claim::Held { .. } => panic!("lease of {job} held"),
    }
}

/// The attempt id every fixture attempt records: the same on every machine in the screens.
pub(super) const ATTEMPT: &str = "web-1:4242";

/// Runs one effect to its end at `ago(at)`, as `effect::run` does.
pub(super) fn run(
    store: &mut Store,
    job: &str,
    token: i64,
    spec: &Spec,
    far: Result<&str, Failure>,
    at: i64,
) -> String {
    let ctx = Ctx::new(&crate::JobName::from(job), crate::Token::from(token))
        .with_run_id(&format!("{job}-run-{token}"))
        .at(ago(at));
    let mut att = Attempt::new(&ctx, spec, ATTEMPT).expect("spec");
    let mut far = Far(far.map(str::to_string));
    let end = drive(store, &mut att, &mut far, |_| false);
    assert!(matches!(end, Io::End(_)), "{end:?}");
    spec.key().to_string()
}

/// `NOW` minus `secs`.
pub(super) fn ago(secs: i64) -> Ts {
    now() - chrono::Duration::seconds(secs)
}

/// `NOW` minus `secs`, in the ledger's fixed-width form.
pub(super) fn before(secs: i64) -> String {
    exactly::time::fmt(ago(secs))
}

pub(super) fn after(secs: i64) -> String {
    before(-secs)
}

pub(super) fn add_job(
    c: &Connection,
    job: &str,
    schedule: Option<&str>,
    interval_s: i64,
    lease_s: i64,
    overlap: &str,
    cap: Option<i64>,
) {
    c.execute(
        "INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, overlap, \
             queue_cap, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT(job_key) DO UPDATE SET schedule = excluded.schedule, \
             interval_s = excluded.interval_s,
           lease_s = excluded.lease_s, overlap = excluded.overlap, queue_cap = excluded.queue_cap",
        params![
            job,
            schedule,
            interval_s,
            lease_s,
            overlap,
            cap,
            before(7200)
        ],
    )
    .expect("job");
}

/// `n` finished runs of a job, one per interval back from `NOW`, with durations from `dur`.
pub(super) fn add_runs(
    c: &Connection,
    job: &str,
    n: i64,
    interval_s: i64,
    token: i64,
    dur: impl Fn(i64) -> i64,
    outcome: impl Fn(i64) -> &'static str,
) {
    for i in 0..n {
        let start = before((n - i) * interval_s + 5);
        let d = dur(i);
        let end = exactly::time::fmt(
            exactly::time::parse(&start).expect("ts") + chrono::Duration::milliseconds(d),
        );
        c.execute(
            "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
                 started_at, ended_at, outcome, duration_ms)
             VALUES (?1, ?2, ?3, 'worker-1@web-1', ?4, ?3, ?5, ?6, ?7)",
            params![format!("{job}-{i}"), job, start, token, end, outcome(i), d],
        )
        .expect("run");
    }
}

pub(super) fn empty() -> Fixture {
    new_db()
}

/// An effect whose sender may still be sending: `payouts` lost its first answer, an operator
/// said it did not happen, and the retry (attempt [`ATTEMPT`], on another host, under a live
/// lease) has submitted it and not answered yet. Its newest event is that resolution, so the
/// Events view (`4`) opens it with Enter. Returns the fixture and the effect key.
pub(super) fn in_flight() -> (Fixture, String) {
    let f = new_db();
    let mut s = f.store();
    let t = claim(&mut s, "payouts", "worker-1@web-1", 300, ago(-600));
    let pay = Spec::new("pay", "acme")
        .input("amount", "120.00")
        .terms("Pay 120.00 EUR to ACME GmbH (invoice 2098-117)");
    let key = run(
        &mut s,
        "payouts",
        t,
        &pay,
        Err(Failure::Lost("connection reset after 30s".into())),
        300,
    );
    let r = s
        .as_at(ago(200), |s| {
            exactly::approval::resolve(
                s,
                &crate::EffectKey::from(&key),
                exactly::approval::Resolution::NotHappened,
                "alice@10.0.0.7",
                Some("not in the bank's list"),
                None,
                false,
            )
        })
        .expect("resolve");
    assert!(
        matches!(r, exactly::approval::Resolved::Done { .. }),
        "{r:?}"
    );
    let ctx = Ctx::new(&crate::JobName::from("payouts"), crate::Token::from(t))
        .with_run_id("payouts-run-2")
        .at(ago(100));
    let mut att = Attempt::new(&ctx, &pay, ATTEMPT).expect("spec");
    let at = drive(&mut s, &mut att, &mut Far(Ok("unused".into())), |io| {
        matches!(io, Io::Send)
    });
    assert_eq!(at, Io::Send);
    drop(s);
    (f, key)
}

/// A day of an operator's life: five jobs, leases held and expired, runs that overrun their
/// lease, duplicates suppressed, a fenced write, unknown effects, pending and unused approvals.
/// Each step happens at its own instant (seconds before `NOW`), in the order written.
pub(super) fn busy() -> Fixture {
    let f = new_db();
    let mut s = f.store();
    let owner = "worker-1@web-1";

    // legacy-backup: a cron wrapper known only by its lease; its snapshot upload was lost.
    let t = claim(&mut s, "legacy-backup", "cron@db-1", 9360, ago(-3000));
    let snap = Spec::new("snapshot", "s3://backups")
        .input("day", "2098-12-31")
        .terms("Upload nightly DB snapshot");
    run(
        &mut s,
        "legacy-backup",
        t,
        &snap,
        Err(Failure::Lost("killed by signal 9".into())),
        9360,
    );

    // sync-crm: runs longer than its interval and its lease; a claim left by a dead token.
    // Its lease has too little time left to send under, so the attempt reserves `claimed` and
    // must submit apart; it dies before that.
    let t1 = claim(
        &mut s,
        "sync-crm",
        owner,
        8190,
        ago(8190) + chrono::Duration::milliseconds(50),
    );
    let crm = Spec::new("upsert", "crm").input("batch", "77");
    let ctx = Ctx::new(&crate::JobName::from("sync-crm"), crate::Token::from(t1))
        .with_run_id("sync-crm-run-1")
        .at(ago(8190));
    let mut att = Attempt::new(&ctx, &crm, "web-1:4244").expect("spec");
    let at = drive(&mut s, &mut att, &mut Far(Ok("unused".into())), |io| {
        matches!(io, Io::Submit { .. })
    });
    assert!(matches!(at, Io::Submit { .. }), "{at:?}");
    release_as_at(&mut s, "sync-crm", t1, ago(8190));
    let _t2 = claim(&mut s, "sync-crm", owner, 8189, ago(-35));

    // daily-digest: the lease was superseded mid-send, so the old attempt is open and fenced.
    let old = claim(&mut s, "daily-digest", owner, 5850, ago(-600));
    let digest = Spec::new("send-digest", "all-users")
        .input("day", "2098-12-31")
        .terms("Send the daily digest to 1,204 subscribers");
    let ctx_old = Ctx::new(
        &crate::JobName::from("daily-digest"),
        crate::Token::from(old),
    )
    .with_run_id("daily-digest-run-old")
    .at(ago(5850));
    let key = digest.key();
    // The old holder reserves and submits it, then stalls before sending.
    let mut att = Attempt::new(&ctx_old, &digest, ATTEMPT).expect("spec");
    let mut sends = Far(Ok("sent".into()));
    let at = drive(&mut s, &mut att, &mut sends, |io| matches!(io, Io::Send));
    assert_eq!(at, Io::Send);
    assert_eq!(&key, att.key());
    release_as_at(&mut s, "daily-digest", old, ago(5850));
    let new = claim(&mut s, "daily-digest", "worker-2@web-2", 5850, ago(-431));
    // The old holder comes back, sends and tries to record it: fenced.
    let end = drive(&mut s, &mut att, &mut sends, |_| false);
    assert!(matches!(end, Io::End(_)), "{end:?}");
    let sms = Spec::new("sms", "+4915112345678").terms("SMS: your parcel arrives today");
    run(&mut s, "daily-digest", new, &sms, Ok("queued"), 5790);

    // reminders: paused by an operator.
    let t = claim(&mut s, "reminders", owner, 5400, ago(-600));
    release_as_at(&mut s, "reminders", t, ago(5400));
    s.as_at(ago(5400), |s| {
        let note = Some("holiday freeze until 2 Jan");
        exactly::jobs::pause(s, &crate::JobName::from("reminders"), "bob@10.0.0.9", note)
    })
    .expect("pause");

    // invoices: a pending approval, an approved one not yet used, one sent and one lost.
    let t = claim(&mut s, "invoices", owner, 4700, ago(-252));
    let lost = Spec::new("pay", "umbrella")
        .input("amount", "1800.00")
        .terms("Pay 1800.00 EUR to Umbrella Corp (invoice 2098-121)");
    run(
        &mut s,
        "invoices",
        t,
        &lost,
        Err(Failure::Lost("connection reset after 30s".into())),
        4680,
    );
    let refund = Spec::new("refund", "globex")
        .input("amount", "49.90")
        .terms("Refund 49.90 EUR to Globex (order 8812)")
        .needs_approval(true);
    let refund_key = run(&mut s, "invoices", t, &refund, Ok("unused"), 4666);
    let mail = Spec::new("send-invoice", "initech")
        .input("month", "2098-12")
        .terms("Email invoice 2098-12 to billing@initech.example");
    run(
        &mut s,
        "invoices",
        t,
        &mail,
        Ok("250 OK queued as 7F3A"),
        3510,
    );
    run(
        &mut s,
        "invoices",
        t,
        &mail,
        Ok("250 OK queued as 7F3A"),
        3457,
    ); // a duplicate, suppressed
    let pay = Spec::new("pay", "acme")
        .input("amount", "120.00")
        .terms("Pay 120.00 EUR to ACME GmbH (invoice 2098-117)")
        .needs_approval(true);
    run(&mut s, "invoices", t, &pay, Ok("unused"), 2333);
    // A second attempt asks the far side, which cannot tell: the verdict is recorded.
    let ctx = Ctx::new(&crate::JobName::from("invoices"), crate::Token::from(t))
        .with_run_id(&format!("invoices-run-{t}"))
        .at(ago(240))
        .by("observer@web-1");
    let mut look = Attempt::new(&ctx, &lost, "web-1:4243").expect("spec");
    let end = drive(&mut s, &mut look, &mut Unsure("bank API timed out"), |_| {
        false
    });
    assert!(matches!(end, Io::End(_)), "{end:?}");
    s.as_at(ago(200), |s| {
        let note = Some("checked the order");
        exactly::approval::approve(
            s,
            &crate::EffectKey::from(&refund_key),
            "alice@10.0.0.7",
            note,
        )
    })
    .expect("approve");
    drop(s);

    let c = f.sql();
    add_job(&c, "invoices", None, 3600, 900, "coalesce", None);
    add_job(
        &c,
        "daily-digest",
        Some("0 7 * * *"),
        86400,
        600,
        "fail",
        None,
    );
    add_job(&c, "sync-crm", None, 60, 90, "queue", Some(3));
    add_job(&c, "reminders", None, 900, 300, "coalesce", None);
    add_runs(
        &c,
        "invoices",
        48,
        3600,
        1,
        |i| 30_000 + (i * 7919) % 45_000,
        |i| if i == 30 { "failed" } else { "ok" },
    );
    add_runs(
        &c,
        "daily-digest",
        14,
        86400,
        2,
        |i| 180_000 + (i * 104_729) % 500_000,
        |_| "ok",
    );
    // Its scheduler started each command 0.4 s after the run's recorded start, and once went
    // 6 minutes of its 10-minute lease without a renewal (a stalled host), four days before
    // `NOW`: within the week the dashboard judges by.
    c.execute(
        "UPDATE exactly_runs SET start_lag_ms = 400 + (rowid % 7) * 50, renewal_gap_ms = \
             CASE WHEN run_id = 'daily-digest-10' THEN 360000 ELSE 200500 END
         WHERE job_key = 'daily-digest'",
        [],
    )
    .expect("lags");
    add_runs(
        &c,
        "sync-crm",
        60,
        60,
        2,
        |i| 40_000 + (i * 15_485) % 80_000,
        |i| if i % 9 == 4 { "overlap" } else { "ok" },
    );
    add_runs(
        &c,
        "reminders",
        20,
        900,
        1,
        |i| 2_000 + (i * 331) % 3_000,
        |_| "ok",
    );
    // Today's 07:00 digest fired (its run is the live lease below).
    c.execute(
        "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, created_at, updated_at)
         VALUES ('daily-digest', '2099-01-01T07:00:00.000Z', 'scheduled', 'running', ?1, ?1)",
        params!["2099-01-01T07:00:00.000Z"],
    )
    .expect("firing");
    for (slot, state) in [(120, "queued"), (60, "queued")] {
        c.execute(
            "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, \
                 created_at, updated_at)
             VALUES ('sync-crm', ?1, 'schedule', ?2, ?1, ?1)",
            params![before(slot), state],
        )
        .expect("firing");
    }
    // A scheduler beating now (the fixture's clock is ahead of the real one: alive).
    add_scheduler(&c, "sched@web-1:311", NOW, None);
    f
}

/// A scheduler's row: `heartbeat` is when it last beat.
pub(super) fn add_scheduler(c: &Connection, owner: &str, heartbeat: &str, ended: Option<&str>) {
    c.execute(
        "INSERT INTO exactly_schedulers (owner, host, pid, started_at, heartbeat_at, ended_at)
         VALUES (?1, 'web-1', 311, ?2, ?3, ?4)",
        params![owner, before(86_400), heartbeat, ended],
    )
    .expect("scheduler");
}

/// A finished run with its exit code and stored output.
#[allow(clippy::too_many_arguments)]
pub(super) fn add_run(
    c: &Connection,
    job: &str,
    run_id: &str,
    slot: &str,
    dur_ms: i64,
    outcome: &str,
    exit_code: i64,
    log: &str,
) {
    let end = exactly::time::fmt(
        exactly::time::parse(slot).expect("ts") + chrono::Duration::milliseconds(dur_ms + 40),
    );
    c.execute(
        "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
             started_at, ended_at, outcome, duration_ms, exit_code, log)
         VALUES (?1, ?2, ?3, 'sched@web-1:311', 1, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![run_id, job, slot, end, outcome, dur_ms, exit_code, log],
    )
    .expect("run");
}

/// What an operator finds after the scheduler was killed: no scheduler alive, a job failing
/// every night (exit 3, its output stored), a job that ran fine until the scheduler died.
pub(super) fn health() -> Fixture {
    let f = new_db();
    let c = f.sql();
    // The scheduler was SIGKILLed an hour ago: its last heartbeat, and no end.
    add_scheduler(&c, "sched@web-1:311", "2020-01-01T00:00:00.000Z", None);
    c.execute(
        "INSERT INTO exactly_jobs (job_key, schedule, timezone, interval_s, lease_s, lease_ms, \
             overlap, catchup_s, updated_at)
         VALUES ('nightly-report', '0 2 * * *', 'Europe/Berlin', 86400, 1800, 1800000, \
             'coalesce', 0, ?1),
                ('sync-orders', 'every 5m', NULL, 300, 120, 120000, 'queue', 0, ?1),
                ('send-reminders', 'every 7m', NULL, 420, 300, 300000, 'coalesce', 0, ?1)",
        params![NOW],
    )
    .expect("jobs");
    // nightly-report fails every night since three days: 02:00 Berlin is 01:00 UTC in winter.
    for (i, day) in [
        "2098-12-27",
        "2098-12-28",
        "2098-12-29",
        "2098-12-30",
        "2098-12-31",
        "2099-01-01",
    ]
    .iter()
    .enumerate()
    {
        let slot = format!("{day}T01:00:00.000Z");
        let (outcome, code, log) = if i < 3 {
            (
                "ok",
                0,
                "report: 1,204 rows\nuploaded report-ok.csv\n".to_string(),
            )
        } else {
            (
                "failed",
                3,
                format!(
                    "report: connecting to warehouse db-2:5432\nreport: query 1 of 4 ok (1.2s)\n\
                     psql: error: connection to server at \"db-2\" (10.0.0.12), port 5432 failed: \
                     FATAL:  password authentication failed for user \"report\"\n\
                     \x1b[31mreport: giving up after 3 attempts\x1b[0m\nreport: \
                     exit 3 (night {i})\n"
                ),
            )
        };
        add_run(
            &c,
            "nightly-report",
            &format!("nightly-report-t{}", i + 1),
            &slot,
            40_000 + i as i64 * 1_000,
            outcome,
            code,
            &log,
        );
    }
    // sync-orders ran every 5 minutes until the scheduler died 40 minutes ago.
    for i in 0..12 {
        let slot = before(2400 + (11 - i) * 300);
        add_run(
            &c,
            "sync-orders",
            &format!("sync-orders-t{}", i + 1),
            &slot,
            8_000 + i * 350,
            "ok",
            0,
            "synced 12 orders\n",
        );
    }
    c.execute(
        "INSERT INTO exactly_firings (job_key, scheduled_at, kind, state, created_at, updated_at)
         VALUES ('sync-orders', ?1, 'scheduled', 'ran', ?1, ?1)",
        params![before(2400)],
    )
    .expect("firing");
    // send-reminders: fired at 11:56, next at 12:03 (whole multiples of 7 minutes since the
    // epoch).
    add_run(
        &c,
        "send-reminders",
        "send-reminders-t1",
        "2099-01-01T11:56:00.000Z",
        2_300,
        "ok",
        0,
        "sent 3 reminders\n",
    );
    f
}

/// Releases a lease as at `at` (the handle's clock pinned for the one call).
fn release_as_at(s: &mut Store, job: &str, token: i64, at: Ts) {
    s.as_at(at, |s| {
        lease::release(s, &crate::JobName::from(job), crate::Token::from(token))
    })
    .expect("release");
}

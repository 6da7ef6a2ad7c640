//! The hostile fixture: everything another program could write into the tables to attack the
//! operator's terminal (escapes, bidi overrides, control characters), in every column a view
//! shows. Its own file: the other fixtures are an operator's day, this one an attack.
use super::fixture::*;
use rusqlite::params;

/// Everything another program could write into the tables to attack the operator's terminal.
pub(super) fn hostile() -> Fixture {
    let f = new_db();
    let c = f.sql();
    let evil_job = "evil\u{1b}[2J\u{1b}]0;pwned\u{7}-job\r\u{202e}gnp.exe";
    let esc_key = "k3y\u{1b}[31mRED\u{1b}[0m\u{9b}2J";
    let long = "A".repeat(50) + &"long terms that go on and on ".repeat(20);
    c.execute(
        "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at) VALUES \
         (?1, ?2, 7, ?3, ?4)",
        params![
            evil_job,
            "own\u{9b}31mer\u{7}\u{8}\u{8}\u{8}",
            after(120),
            NOW
        ],
    )
    .expect("lease");
    c.execute(
        "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
         VALUES (CAST(x'6a6f62fffe80' AS TEXT), CAST(x'c0afc0af' AS TEXT), 3, ?1, ?2)",
        params![after(60), NOW],
    )
    .expect("lease invalid utf8");
    c.execute(
        "INSERT INTO exactly_jobs (job_key, schedule, interval_s, lease_s, overlap, paused, \
             pause_note, updated_at)
         VALUES (?1, ?2, 60, 'x', ?3, 1, ?4, ?5)",
        params![
            evil_job,
            "*/1 * * * *\u{1b}[8m",
            "queue\u{1b}[5m",
            "note\u{1b}]8;;http://evil\u{1b}\\click\u{1b}]8;;\u{1b}\\",
            NOW
        ],
    )
    .expect("job");
    let ledger = |key: &str, job: &str, state: &str, terms: &str, response: &str| {
        c.execute(
            "INSERT INTO effect_ledger (effect_key, job_key, run_id, fencing_token, state, \
                 terms_shown, response,
               created_at, updated_at, verdict) VALUES (?1, ?2, 'r\u{1b}[1m', 7, ?3, ?4, \
                   ?5, ?6, ?6, ?7)",
            params![
                key,
                job,
                state,
                terms,
                response,
                before(4000),
                "can\u{1b}[9m't tell\r"
            ],
        )
        .expect("ledger");
    };
    ledger(
        esc_key,
        evil_job,
        "unknown",
        "Pay \u{1b}]52;c;ZWNobyBwd25lZA==\u{7}100 EUR\nto\tMallory\r\u{202e}RUE 0001",
        "ok\u{1b}[?1049l",
    );
    ledger(
        "widechars",
        "請求書-job",
        "unknown",
        "請求書を送る 💸 e\u{301}\u{200b} \
         全角テキストがとても長い場合にレイアウトを壊さないこと",
        "",
    );
    ledger("longterms", "long-job", "submitted", &long, "");
    c.execute(
        "INSERT INTO effect_ledger (effect_key, job_key, run_id, state, terms_shown, \
             created_at, updated_at)
         VALUES ('badutf8', CAST(x'6a6f62ff' AS TEXT), 'r', 'unknown', \
             CAST(x'5061792080ff20c3' AS TEXT), ?1, ?1)",
        params![before(9000)],
    )
    .expect("invalid utf8");
    for (key, job, terms) in [
        (
            esc_key,
            evil_job,
            "Approve \u{1b}[1A\u{1b}[2Kfake line\u{1b}[0m 100 EUR",
        ),
        (
            "wideapproval",
            "請求書-job",
            "承認してください：１００ユーロ",
        ),
        ("longapproval", "long-job", long.as_str()),
    ] {
        c.execute(
            "INSERT INTO exactly_approvals (effect_key, job_key, terms_shown, state, requested_at) \
             VALUES (?1, ?2, ?3, 'pending', ?4)",
            params![key, job, terms, before(7300)],
        )
        .expect("approval");
    }
    c.execute(
        "INSERT INTO exactly_approvals (effect_key, job_key, terms_shown, state, \
             requested_at, decided_by)
         VALUES ('approvedbad', CAST(x'ff' AS TEXT), 'x', 'approved', ?1, ?2)",
        params![before(100), "mallory\u{1b}[8m@\u{9d}0;t\u{9c}host"],
    )
    .expect("approval");
    for i in 0..6 {
        c.execute(
            "INSERT INTO exactly_events (at, kind, job_key, effect_key, \
                 fencing_token, actor, detail)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                before(60 * (6 - i)),
                [
                    "fenced_write",
                    "kind\u{1b}[31m",
                    "resolved",
                    "lease_stolen",
                    "approval_denied",
                    "x\u{7f}y"
                ][i as usize],
                evil_job,
                esc_key,
                i,
                "who\u{1b}]0;t\u{7}\u{85}",
                format!("detail {i} \u{1b}[1;1H\u{1b}[2Jcleared? \u{202d}bidi\r\n{long}")
            ],
        )
        .expect("event");
    }
    c.execute(
        "INSERT INTO exactly_runs (run_id, job_key, scheduled_at, owner, fencing_token, \
             started_at, ended_at, outcome, duration_ms, log)
         VALUES ('r1', ?1, ?2, ?3, 7, ?2, ?2, ?4, 'NaN', ?5)",
        params![
            evil_job,
            before(300),
            "own\u{1b}[5mer",
            "ok\u{1b}[41m",
            "line 1\u{1b}[2J\u{1b}]0;pwned\u{7}\r\nover\u{202e}written\u{9b}31m\n\
             \u{1b}[?1049lgone\u{8}\u{8}\t\u{85}end"
        ],
    )
    .expect("run");
    f
}

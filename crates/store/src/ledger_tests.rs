//! An effect's end records its event without a counter (`UNCOUNTED`); other kinds keep theirs.
use crate::db::args;
use crate::ledger_rows::{Begin, NewEffect, SendEnd, SentBy};
use crate::Store;
use exactly_words::state::EffectState;

const NOW: &str = "2026-01-01T00:00:00.000Z";
const LATER: &str = "2026-01-01T00:10:00.000Z";

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("l.db");
    let store = Store::open(path.to_str().expect("utf8")).expect("open");
    (dir, store)
}

/// Job `j`'s lease row: `token`, until `until`.
fn lease(store: &mut Store, token: i64, until: &str) {
    store
        .write(|tx| {
            tx.exec(
                "INSERT INTO job_lease (job_key, owner, fencing_token, lease_until, created_at)
                 VALUES ('j', 'o', ?1, ?2, ?3)
                 ON CONFLICT (job_key) DO UPDATE SET fencing_token = excluded.fencing_token,
                   lease_until = excluded.lease_until",
                args![token, until, NOW],
            )
        })
        .expect("lease");
}

fn count(store: &mut Store, sql: &str) -> i64 {
    store
        .read(|tx| tx.one(sql, args![], |r| r.get::<i64>(0)))
        .expect(sql)
}

fn now() -> exactly_words::time::Ts {
    exactly_words::time::parse(NOW).expect("time")
}

/// Reserves `key` of job `j` under `token`, submitting at once where nothing stands in the way.
fn begin(store: &mut Store, key: &str, token: i64) -> Begin {
    let e = NewEffect {
        effect_key: key,
        job_key: "j",
        run_id: "r",
        token,
        action_id: "pay",
        target_id: "carol",
        input_digest: "d",
        input_fields: "",
        ..Default::default()
    };
    let by = SentBy {
        attempt: "host:1",
        sender: Some("identity"),
    };
    store.begin_and_submit_effect(&e, by, now()).expect("begin")
}

fn state(store: &mut Store, key: &str) -> Option<EffectState> {
    store.effect(key).expect("row").map(|r| r.state)
}

#[test]
fn an_effects_end_is_an_event_without_a_counter_and_other_kinds_keep_theirs() {
    let (_d, mut store) = open();
    lease(&mut store, 1, LATER);
    for (key, state) in [("k1", EffectState::Done), ("k2", EffectState::Unknown)] {
        let Begin::Submitted(seen, _) = begin(&mut store, key, 1) else {
            panic!("not submitted at once");
        };
        let end = SendEnd {
            key,
            job: "j",
            token: 1,
            state,
            response: "ok",
            output: None,
        };
        assert!(store.finish_effect_on(&end, &seen, now()).expect("finish"));
    }
    let events = |kind: &str| format!("SELECT count(*) FROM exactly_events WHERE kind = '{kind}'");
    let counted = |kind: &str| {
        format!("SELECT coalesce(sum(n), 0) FROM exactly_counters WHERE kind = '{kind}'")
    };
    assert_eq!(count(&mut store, &events("effect_done")), 1);
    assert_eq!(count(&mut store, &counted("effect_done")), 0);
    assert_eq!(count(&mut store, &events("effect_unknown")), 1);
    assert_eq!(count(&mut store, &counted("effect_unknown")), 1);
    assert_eq!(state(&mut store, "k1"), Some(EffectState::Done));
}

//! Properties over random interleavings of claim / renew / release / steal / effect among several
//! workers and a moving clock, against a real SQLite file.
use exactly::effect::{self, Ctx, Effect, Failure, Observation, Outcome, Spec};
use exactly::lease::{self, Claim};
use exactly::snapshot::Snapshot;
use exactly::Store;
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Op {
    Claim { w: usize, dur_ms: i64 },
    Renew { w: usize, dur_ms: i64 },
    Release { w: usize },
    Effect { w: usize, key: u8, mode: u8 },
    Advance { ms: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize, 50..2000i64).prop_map(|(w, dur_ms)| Op::Claim { w, dur_ms }),
        (0..3usize, 50..2000i64).prop_map(|(w, dur_ms)| Op::Renew { w, dur_ms }),
        (0..3usize).prop_map(|w| Op::Release { w }),
        (0..3usize, 0..4u8, 0..4u8).prop_map(|(w, key, mode)| Op::Effect { w, key, mode }),
        (1..1500i64).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// A far side that records every request (it does not deduplicate) and answers truthfully
/// when asked whether an effect arrived. `mode` 1 loses the answer after acting, 2 fails
/// before sending.
struct Far<'a> {
    got: &'a mut HashMap<String, usize>,
    mode: u8,
}

impl Effect for Far<'_> {
    fn perform(&mut self, key: &str) -> Result<String, Failure> {
        if self.mode == 2 {
            return Err(Failure::NotSent("refused before sending".into()));
        }
        *self.got.entry(key.to_string()).or_default() += 1;
        if self.mode == 1 {
            return Err(Failure::Lost("timeout after the far side acted".into()));
        }
        Ok("ok".into())
    }
    fn observe(&mut self, key: &str) -> Observation {
        if self.got.contains_key(key) {
            Observation::Happened(None)
        } else {
            Observation::NotHappened
        }
    }
}

fn at(ms: i64) -> exactly::time::Ts {
    chrono::DateTime::from_timestamp_millis(ms).unwrap()
}

fn ts(ms: i64) -> String {
    exactly::time::fmt(at(ms))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn interleavings_never_duplicate_and_tokens_never_decrease(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path().join("p.db").to_str().unwrap()).unwrap();
        let mut clock: i64 = 1_800_000_000_000;
        let mut tokens: [Option<i64>; 3] = [None; 3];
        let mut highest = 0i64;
        let mut far: HashMap<String, usize> = HashMap::new();
        let mut fenced_expected = 0u64;
        let mut fenced_seen = 0u64;
        for op in ops {
            match op {
                Op::Advance { ms } => clock += ms,
                Op::Claim { w, dur_ms } => {
                    let job = exactly::JobName::from("job");
                    let until = at(clock + dur_ms);
                    match lease::claim_until(&mut store, &job, &format!("w{w}"), until, at(clock))
                        .unwrap()
                    {
                        Claim::Won { token } => {
                            prop_assert!(
                                token > exactly::Token::from(highest),
                                "token {} after {}",
                                token,
                                highest
                            );
                            highest = token.get();
                            tokens[w] = Some(token.get());
                        }
                        Claim::Held { token, .. } => prop_assert_eq!(token, highest),
                    }
                }
                Op::Renew { w, dur_ms } => {
                    if let Some(t) = tokens[w] {
                        let ok = lease::renew_until(
                            &mut store,
                            &exactly::JobName::from("job"),
                            exactly::Token::from(t),
                            at(clock + dur_ms),
                        )
                        .unwrap();
                        if t != highest { prop_assert!(!ok, "a stale renew was accepted"); }
                    }
                }
                Op::Release { w } => {
                    if let Some(t) = tokens[w].take() {
                        let ok = lease::release(
                            &mut store,
                            &exactly::JobName::from("job"),
                            exactly::Token::from(t),
                        )
                        .unwrap();
                        if t != highest { prop_assert!(!ok, "a stale release was accepted"); }
                    }
                }
                Op::Effect { w, key, mode } => {
                    let Some(t) = tokens[w] else { continue };
                    let spec = Spec::new("send", "dave").input("n", key.to_string());
                    let ctx = Ctx::new(&exactly::JobName::from("job"), exactly::Token::from(t));
                    let mut far_side = Far { got: &mut far, mode };
                    let out = effect::run(&mut store, &ctx, &spec, &mut far_side).unwrap();
                    if t != highest {
                        fenced_expected += 1;
                        prop_assert!(
                            matches!(out, Outcome::Fenced { .. }),
                            "stale token {} got {:?}",
                            t,
                            out
                        );
                    }
                    if matches!(out, Outcome::Fenced { .. }) { fenced_seen += 1; }
                }
            }
            for (k, n) in &far {
                prop_assert!(*n <= 1, "far side got {} effects for {}", n, k);
            }
        }
        prop_assert_eq!(fenced_seen, fenced_expected);
        let snap = Snapshot::read(&mut store).unwrap();
        prop_assert!(snap.totals.fenced_writes >= fenced_expected);
    }

    #[test]
    fn text_order_is_time_order(a in 0i64..253_402_300_799_000, b in 0i64..253_402_300_799_000) {
        let (ta, tb) = (ts(a), ts(b));
        prop_assert_eq!(ta.len(), 24);
        prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
    }
}

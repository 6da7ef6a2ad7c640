//! The judgements (rule 3's in `keys.rs`), each from the rows `checklist_reading` read: one
//! [`RuleResult`] per rule, with its evidence and its fix in a line each. docs/checklist.md says
//! how each is judged and what it cannot know.
use super::{
    Declared, Rule, RuleResult, Verdict, KILL_TEST_AGE, LEASE_HEADROOM, PENDING_APPROVAL_AGE,
    SUPPRESSED_ZERO_RUNS, UNKNOWN_FAIL_AGE,
};
use crate::snapshot::{JobRow, Snapshot};
use crate::store::{ActionFacts, ChaosRunRow, DoneRow, JobEvidence, JobRecord};
use exactly_words::policy::FarSide;
use exactly_words::time::{human_age, human_ms, Ts};

use Verdict::{Fail, Ok, Warn};

/// What every judgement reads.
pub(super) struct Ctx<'a> {
    pub(super) now: Ts,
    pub(super) snap: &'a Snapshot,
    pub(super) registered: &'a [JobRecord],
    pub(super) actions: &'a [ActionFacts],
    pub(super) repeats: &'a [DoneRow],
    pub(super) chaos_runs: &'a [ChaosRunRow],
    pub(super) declared: &'a [Declared],
    pub(super) file: Option<&'a str>,
}

pub(super) fn r(
    rule: Rule,
    verdict: Verdict,
    evidence: String,
    fix: impl Into<String>,
) -> RuleResult {
    RuleResult::new(rule, verdict, evidence, fix)
}

pub(super) fn plural(n: u64, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

impl Ctx<'_> {
    /// A job's ten results.
    pub(super) fn job(&self, row: &JobRow, f: &JobEvidence) -> [RuleResult; 10] {
        let job = row.job_key.as_str();
        let declared = self.declared.iter().find(|d| d.job.as_str() == job);
        let record = self
            .registered
            .iter()
            .find(|j| j.job_key == job && !j.retired);
        let far_side = match declared {
            Some(d) => d.far_side,
            None => record.and_then(|r| r.far_side),
        };
        let actions: Vec<&ActionFacts> = self.actions.iter().filter(|a| a.job_key == job).collect();
        [
            self.lease_token(f),
            self.lease_bounds(row, declared, f.hold_lease_ms),
            self.key_from_facts(
                &[job],
                &actions,
                declared.map(|d| d.interval_s).or(row.settings.interval_s),
            ),
            self.far_side(&actions, far_side),
            self.token_on_writes(f, far_side),
            self.unknown_resolved(&[job], f),
            self.overlap_policy(row, record, declared),
            self.kill_test(),
            self.approvals_once(&[job], f),
            self.counters(job, f),
        ]
    }

    /// The ten results of one action's effects outside any job (in `jobs`, the job keys their
    /// rows name): the rules about a job's lease say there is none.
    pub(super) fn action(
        &self,
        action: &str,
        jobs: &[String],
        f: &JobEvidence,
    ) -> [RuleResult; 10] {
        let actions: Vec<&ActionFacts> = self
            .actions
            .iter()
            .filter(|a| jobs.contains(&a.job_key) && a.action_id.as_deref().unwrap_or("") == action)
            .collect();
        let keys: Vec<&str> = jobs.iter().map(String::as_str).collect();
        let no_lease = |rule| {
            r(
                rule,
                Warn,
                format!(
                    "{} written under job key {}, which holds no lease row",
                    plural(f.rows, "effect"),
                    keys.join(", ")
                ),
                "claim a lease for the job key (exactly lease claim, store.claim) before each \
                 effect",
            )
        };
        [
            r(
                Rule::LeaseToken,
                Fail,
                format!(
                    "{} with no lease row: no claim, no token to refuse a stale writer",
                    plural(f.rows, "effect")
                ),
                "claim a lease per job in one statement (exactly lease claim) and write with \
                 its token",
            ),
            no_lease(Rule::LeaseBounds),
            self.key_from_facts(&keys, &actions, None),
            self.far_side(&actions, None),
            self.token_on_writes(f, None),
            self.unknown_resolved(&keys, f),
            no_lease(Rule::OverlapPolicy),
            self.kill_test(),
            self.approvals_once(&keys, f),
            self.counters(action, f),
        ]
    }

    /// 1. A lease row and a token that only goes up.
    fn lease_token(&self, f: &JobEvidence) -> RuleResult {
        let rule = Rule::LeaseToken;
        let Some(token) = f.lease_token else {
            if f.rows > 0 {
                return r(
                    rule,
                    Fail,
                    format!("{} but no lease row", plural(f.rows, "ledger row")),
                    "claim the job's lease (exactly lease claim) before writing its effects",
                );
            }
            return r(
                rule,
                Ok,
                "no lease claimed yet: its first run makes the row".into(),
                "nothing to do",
            );
        };
        if let Some(max) = f.ledger_max_token.filter(|m| *m > token) {
            return r(
                rule,
                Fail,
                format!("ledger rows carry token {max}, above the lease's {token}: it went back"),
                format!(
                    "raise the lease's token above {max} (an adopted ledger or a lease row \
                     deleted) so stale writers are refused"
                ),
            );
        }
        if f.runs_token_backwards > 0 {
            return r(
                rule,
                Fail,
                format!(
                    "{} started with a lower token than an earlier run",
                    plural(f.runs_token_backwards, "run")
                ),
                "find who recreated the lease row; never delete job_lease rows",
            );
        }
        let ledger = match f.ledger_max_token {
            Some(m) => format!("ledger tokens up to {m}"),
            None => "no ledger rows".into(),
        };
        // A failover in the last 7 days: guarded, the tokens were raised above the old
        // primary's; unguarded, one may have been handed out twice.
        if let Some(w) = self.snap.failover_warnings.first() {
            if w.contains("guard off") {
                return r(
                    rule,
                    Fail,
                    format!("lease row at token {token}; {w}"),
                    "a token may have been handed out twice: pause the job, check the far side, \
                     and keep the failover guard on (unset EXACTLY_FAILOVER_GUARD)",
                );
            }
            return r(
                rule,
                Ok,
                format!(
                    "lease row at token {token}; {ledger}, never above it; the tokens were \
                     raised at the last failover, above any the old primary issued"
                ),
                "nothing to do",
            );
        }
        r(
            rule,
            Ok,
            format!("lease row at token {token}; {ledger}, never above it"),
            "nothing to do",
        )
    }

    /// 2. Longer than the worst run, shorter than the interval.
    fn lease_bounds(
        &self,
        row: &JobRow,
        declared: Option<&Declared>,
        held: Option<i64>,
    ) -> RuleResult {
        let rule = Rule::LeaseBounds;
        // The jobs file given beats the registry's last record of it.
        let lease_ms = declared
            .map(|d| d.lease_ms)
            .or(row.settings.lease_ms)
            .or(row.hold_lease_ms.map(|l| l as i64))
            .or(held)
            .filter(|l| *l > 0);
        let interval_ms = declared
            .map(|d| d.interval_s)
            .or(row.settings.interval_s)
            .map(|s| s.saturating_mul(1000))
            .filter(|i| *i > 0);
        let Some(lease) = lease_ms else {
            return r(
                rule,
                Warn,
                "no lease length known (no registration, no hold recorded)".into(),
                "claim with exactly lease claim --for DUR, or register the job in a jobs file",
            );
        };
        let lease_u = lease as u64;
        let iv = interval_ms.map(|i| i as u64);
        let iv_words = iv.map_or("interval unknown".to_string(), |i| {
            format!("interval {}", human_ms(i))
        });
        if let Some(i) = iv.filter(|i| lease_u >= *i) {
            return r(
                rule,
                Fail,
                format!("lease {} ≥ {}", human_ms(lease_u), iv_words),
                format!(
                    "set lease below {}: a crashed run blocks the next firing for the whole lease",
                    human_ms(i)
                ),
            );
        }
        if row.lease_renewed {
            renewed_bounds(row, lease_u, &iv_words)
        } else {
            unrenewed_bounds(row, lease_u, iv, &iv_words)
        }
    }

    /// 4. The far side dedupes, or the effect is observable.
    fn far_side(&self, actions: &[&ActionFacts], far_side: Option<FarSide>) -> RuleResult {
        let rule = Rule::FarSide;
        if actions.is_empty() {
            return r(rule, Ok, "no effects recorded".into(), "nothing to do");
        }
        if let Some(fs) = far_side {
            let src = self.file.unwrap_or("the jobs file");
            return r(
                rule,
                Ok,
                format!(
                    "far_side = \"{}\" declared in {src} (taken on trust)",
                    fs.name()
                ),
                "keep the far side's dedupe tested: exactly probe JOB",
            );
        }
        let unobserved: Vec<&str> = actions
            .iter()
            .filter(|a| a.with_observer == 0 && a.observer_verdicts == 0)
            .map(|a| a.action_id.as_deref().unwrap_or("(no action)"))
            .collect();
        if !unobserved.is_empty() {
            return r(
                rule,
                Fail,
                format!(
                    "no observer and no far_side declared: {}",
                    unobserved.join(", ")
                ),
                "give the effect an observer (--observe CMD, observe=) or declare far_side = \
                 \"dedupes\" in the jobs file",
            );
        }
        let by_hand: Vec<String> = actions
            .iter()
            .filter(|a| a.resolved_by_hand > 0 && a.observer_verdicts == 0)
            .map(|a| {
                format!(
                    "{} ({})",
                    a.action_id.as_deref().unwrap_or("(no action)"),
                    a.resolved_by_hand
                )
            })
            .collect();
        if !by_hand.is_empty() {
            return r(
                rule,
                Warn,
                format!(
                    "every unknown was resolved by hand, no observer verdict: {}",
                    by_hand.join(", ")
                ),
                "make the observer able to answer (exit 0 happened, 1 did not) so unknowns \
                 settle themselves",
            );
        }
        let observed: u64 = actions.iter().map(|a| a.with_observer).sum();
        let verdicts: u64 = actions.iter().map(|a| a.observer_verdicts).sum();
        r(
            rule,
            Ok,
            format!(
                "{} recorded an observer; {}",
                plural(observed, "effect"),
                plural(verdicts, "observer verdict")
            ),
            "nothing to do",
        )
    }

    /// 5. Every write carries the token.
    fn token_on_writes(&self, f: &JobEvidence, far_side: Option<FarSide>) -> RuleResult {
        let rule = Rule::TokenOnWrites;
        if f.rows_without_token > 0 {
            return r(
                rule,
                Fail,
                format!(
                    "{} of {} written without a fencing token",
                    plural(f.rows_without_token, "ledger row"),
                    f.rows
                ),
                "write effects with the lease's token (the seed's fenced INSERT, or exactly \
                 effect)",
            );
        }
        let far = match far_side {
            Some(FarSide::Fences) => {
                "; far side declared to fence: whether the command passes \
                 EXACTLY_FENCING_TOKEN on cannot be seen here"
            }
            _ => "",
        };
        r(
            rule,
            Ok,
            format!(
                "ledger writes: {}, each with a token; {} refused as stale, {} seen{far}",
                f.rows,
                plural(f.fenced, "write"),
                plural(f.takeovers, "takeover")
            ),
            "pass EXACTLY_FENCING_TOKEN to the far side and have it refuse lower ones",
        )
    }

    /// 6. Unknowns resolved before any retry.
    fn unknown_resolved(&self, jobs: &[&str], f: &JobEvidence) -> RuleResult {
        let rule = Rule::UnknownResolved;
        let open: Vec<_> = self
            .snap
            .unknown
            .iter()
            .filter(|u| jobs.contains(&u.job_key.as_str()))
            .collect();
        let retries = match f.retries_in_flight {
            0 => String::new(),
            n => format!("; {} met a send in flight in 7 days", plural(n, "retry")),
        };
        let Some(oldest) = open.iter().map(|u| u.age_s).max() else {
            if f.retries_in_flight > 0 {
                return r(
                    rule,
                    Warn,
                    format!("no open unknowns{retries} (and waited, sending nothing)"),
                    "retries come before sends settle: give the effect an observer, or space \
                     the retries past the lease",
                );
            }
            return r(rule, Ok, "no open unknowns".into(), "nothing to do");
        };
        let seen = format!(
            "{} open, oldest {}{retries}",
            plural(open.len() as u64, "unknown"),
            human_age(oldest)
        );
        let fix = "check the far side, then exactly resolve KEY --happened|--not-happened \
                   (retries wait until then)";
        if oldest as u64 >= UNKNOWN_FAIL_AGE.as_secs() {
            return r(rule, Fail, seen, fix);
        }
        r(rule, Warn, seen, fix)
    }

    /// 7. An explicit overlap policy.
    fn overlap_policy(
        &self,
        row: &JobRow,
        record: Option<&JobRecord>,
        declared: Option<&Declared>,
    ) -> RuleResult {
        let rule = Rule::OverlapPolicy;
        if let Some(d) = declared {
            return r(
                rule,
                Ok,
                format!(
                    "overlap = \"{}\" written in {}",
                    d.overlap.name(),
                    self.file.unwrap_or("the jobs file")
                ),
                "nothing to do",
            );
        }
        let written =
            record.filter(|r| r.settings.schedule.is_some() || r.settings.interval_s.is_some());
        match written
            .and_then(|r| r.settings.overlap)
            .or(row.settings.overlap)
        {
            Some(o) if written.is_some() => r(
                rule,
                Ok,
                format!(
                    "overlap = \"{}\" written in {}",
                    o.name(),
                    written
                        .and_then(|w| w.source.as_deref())
                        .unwrap_or("its jobs file")
                ),
                "nothing to do",
            ),
            _ => r(
                rule,
                Warn,
                "no overlap policy written: a caller that finds the lease held gives up (exit \
                 3), coalesce by accident"
                    .into(),
                "schedule it from a jobs file with overlap = coalesce | queue | fail",
            ),
        }
    }

    /// 8. A kill test, run repeatedly.
    fn kill_test(&self) -> RuleResult {
        let rule = Rule::KillTest;
        let Some(last) = self.chaos_runs.first() else {
            return r(
                rule,
                Warn,
                "never: no exactly chaos run recorded in this database".into(),
                "run exactly chaos (kill-mid-effect, deploy-restart) against it",
            );
        };
        let age = exactly_words::time::age_s(last.at, self.now);
        let seen = format!(
            "{} ago: {} × {}, {} duplicates, {} lost",
            human_age(age),
            last.scenarios,
            last.iterations,
            last.duplicates,
            last.lost
        );
        if !last.passed || last.duplicates > 0 || last.lost > 0 {
            return r(
                rule,
                Fail,
                format!("failed {seen}"),
                "read exactly chaos's report (--json) and fix what it found",
            );
        }
        if age as u64 > KILL_TEST_AGE.as_secs() {
            return r(rule, Warn, seen, "run exactly chaos again");
        }
        r(rule, Ok, seen, "nothing to do")
    }

    /// 9. Approvals consumed once.
    fn approvals_once(&self, jobs: &[&str], f: &JobEvidence) -> RuleResult {
        let rule = Rule::ApprovalsOnce;
        if f.approvals_reused > 0 {
            return r(
                rule,
                Fail,
                format!(
                    "{} consumed more than once",
                    plural(f.approvals_reused, "approval")
                ),
                "store approvals against the effect key and consume them in the submit",
            );
        }
        let mine = |a: &&crate::snapshot::ApprovalView| jobs.contains(&a.job_key.as_str());
        let old: Vec<_> = self
            .snap
            .pending_approvals
            .iter()
            .filter(mine)
            .filter(|a| a.age_s as u64 >= PENDING_APPROVAL_AGE.as_secs())
            .collect();
        if f.approved_unused_after_run > 0 {
            return r(
                rule,
                Warn,
                format!(
                    "{} approved, still unused after a run",
                    plural(f.approved_unused_after_run, "approval")
                ),
                "run the job again, or deny what is no longer wanted",
            );
        }
        if let Some(oldest) = old.iter().map(|a| a.age_s).max() {
            return r(
                rule,
                Warn,
                format!(
                    "{} pending, oldest {}",
                    plural(old.len() as u64, "approval"),
                    human_age(oldest)
                ),
                "exactly approve KEY or exactly deny KEY",
            );
        }
        let pending = self.snap.pending_approvals.iter().filter(mine).count() as u64;
        r(
            rule,
            Ok,
            format!(
                "none reused, none unused after a run; {} pending",
                plural(pending, "approval")
            ),
            "nothing to do",
        )
    }

    /// 10. The counters, read as the essay reads them.
    fn counters(&self, job: &str, f: &JobEvidence) -> RuleResult {
        let rule = Rule::Counters;
        let seen = format!(
            "suppressed {}, fenced {} ({} in 24h), claimed never submitted {}",
            f.suppressed, f.fenced, f.fenced_24h, f.claimed_leaked
        );
        if f.claimed_leaked > 0 {
            return r(
                rule,
                Fail,
                seen,
                "a leak in the claim path: find what claims and never submits",
            );
        }
        if f.fenced_24h > f.fenced_prev_24h {
            return r(
                rule,
                Warn,
                format!(
                    "{seen}; fenced rising ({} the day before)",
                    f.fenced_prev_24h
                ),
                "the lease is too short: raise it, or split the job",
            );
        }
        let runs = f.runs_ended.max(f.lease_token.unwrap_or(0).max(0) as u64);
        if f.suppressed == 0 && runs >= SUPPRESSED_ZERO_RUNS {
            return r(
                rule,
                Warn,
                format!("{seen}, over {runs} runs"),
                format!("dedupe untested: exactly probe {job}"),
            );
        }
        r(rule, Ok, seen, "nothing to do")
    }
}

/// Rule 2 for a lease the scheduler renews by heartbeat: the first bound becomes the renewal
/// margin (a lease of several heartbeats, and heartbeats never missed).
fn renewed_bounds(row: &JobRow, lease_u: u64, iv_words: &str) -> RuleResult {
    let rule = Rule::LeaseBounds;
    if let Some(gap) = row.renewal_gap_max_ms.filter(|g| *g > lease_u / 2) {
        return r(
            rule,
            Warn,
            format!(
                "renewed lease {}, but a run's lease went {} without a renewal",
                human_ms(lease_u),
                human_ms(gap)
            ),
            "a lease of several heartbeats: raise the lease, or find what stalled the \
             scheduler",
        );
    }
    if lease_u < 6000 {
        return r(
            rule,
            Warn,
            format!(
                "renewed lease {} is under three heartbeats (6s)",
                human_ms(lease_u)
            ),
            "set lease ≥ 6s so one late heartbeat does not stop a run",
        );
    }
    let runs = match row.p99_ms {
        Some(p) => format!("; runs p99 {}", human_ms(p)),
        None => String::new(),
    };
    r(
        rule,
        Ok,
        format!(
            "lease {} renewed by heartbeat, never missed; {}{runs}",
            human_ms(lease_u),
            iv_words
        ),
        "nothing to do",
    )
}

/// Rule 2 for a lease nobody renews (a cron wrapper, a library claim): the holder must finish
/// within the lease, and the lease must end before the next firing.
fn unrenewed_bounds(row: &JobRow, lease_u: u64, iv: Option<u64>, iv_words: &str) -> RuleResult {
    let rule = Rule::LeaseBounds;
    // Nobody renews it: the holder must finish within the lease.
    let max_run = row
        .durations_ms
        .iter()
        .copied()
        .max()
        .map(|m| m.max(0) as u64);
    let (p99, worst, what) = match (row.hold_p99_ms, row.p99_ms) {
        (Some(h), _) => (h, h.max(max_run.unwrap_or(0)), "holds"),
        (None, Some(p)) => (p, max_run.unwrap_or(p), "runs"),
        (None, None) => {
            return r(
                rule,
                Warn,
                format!(
                    "lease {} nobody renews, no hold or run measured yet; {}",
                    human_ms(lease_u),
                    iv_words
                ),
                "release the lease when done (exactly lease release) so holds are measured",
            );
        }
    };
    let suggest = || -> String {
        let want = (worst as f64 * LEASE_HEADROOM).ceil() as u64;
        match iv {
            Some(i) if worst >= i => "split the job: its worst run outlasts the interval, \
                                          no lease fits both bounds"
                .to_string(),
            Some(i) if want >= i => format!(
                "set lease between {} and {} (or split the job)",
                human_ms(worst),
                human_ms(i)
            ),
            _ => format!("set lease = {}", human_ms(want.div_ceil(1000) * 1000)),
        }
    };
    let seen = format!(
        "{what} p99 {}, max {} vs lease {} nobody renews; {}",
        human_ms(p99),
        human_ms(worst),
        human_ms(lease_u),
        iv_words
    );
    if p99 > lease_u {
        return r(rule, Fail, seen, suggest());
    }
    if worst > lease_u || iv.is_some_and(|i| worst >= i) {
        return r(rule, Warn, seen, suggest());
    }
    r(rule, Ok, seen, "nothing to do")
}

//! The effect lifecycle: `claimed` → `submitted` (committed before the request leaves) → `done`
//! or `unknown`. A second attempt learns what happened from the unique violation and branches
//! on the row's state; `submitted`/`unknown` are settled by an observer before any retry.
use crate::fault;
use crate::key;
use crate::store::{Begin, NewEffect, Resolution, Resolved, Store, Submit};
use crate::Result;
use serde_json::{Map, Value};
use std::io::Read;
use std::process::{Command, Stdio};

/// Who is acting: the job, the fencing token of its lease, and the run.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub job: String,
    pub token: i64,
    pub run_id: String,
}

impl Ctx {
    pub fn new(job: &str, token: i64) -> Ctx {
        Ctx {
            job: job.to_string(),
            token,
            run_id: format!("{job}-{token}-{}", std::process::id()),
        }
    }
    pub fn with_run_id(mut self, run_id: &str) -> Ctx {
        self.run_id = run_id.to_string();
        self
    }
}

/// What the effect is about: action, target and the inputs that change its consequence.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    pub action: String,
    pub target: String,
    pub inputs: Map<String, Value>,
    pub terms: Option<String>,
    pub needs_approval: bool,
    /// A shell command recorded with the effect so a later run can settle it.
    pub observe_cmd: Option<String>,
}

impl Spec {
    pub fn new(action: &str, target: &str) -> Spec {
        Spec {
            action: action.to_string(),
            target: target.to_string(),
            ..Default::default()
        }
    }
    pub fn input(mut self, k: &str, v: impl Into<Value>) -> Spec {
        self.inputs.insert(k.to_string(), v.into());
        self
    }
    pub fn terms(mut self, t: &str) -> Spec {
        self.terms = Some(t.to_string());
        self
    }
    pub fn needs_approval(mut self, yes: bool) -> Spec {
        self.needs_approval = yes;
        self
    }
    pub fn input_digest(&self) -> String {
        key::input_digest(&self.inputs)
    }
    /// The effect key (DESIGN.md's contract).
    pub fn key(&self) -> String {
        key::effect_key(&self.action, &self.target, &self.input_digest())
    }
}

/// Why a send did not produce an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// Definitely nothing was sent (exit 75): the reservation is released.
    NotSent(String),
    /// The request may have left: the effect becomes `unknown`.
    Lost(String),
}

/// The far side's answer to "did this effect happen?".
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    Happened(Option<String>),
    NotHappened,
    CantTell(String),
}

/// The effect itself: `perform` sends it (passing the effect key on as the far side's
/// idempotency key where it has one), `observe` asks the far side whether it happened.
pub trait Action {
    fn perform(&mut self, effect_key: &str) -> std::result::Result<String, Failure>;
    fn observe(&mut self, effect_key: &str) -> Observation;
}

/// Every way an attempt can end. Only the first sends anything.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Sent now; the answer is recorded.
    Done { key: String, response: String },
    /// Already done (now or, per the observer, earlier): nothing sent.
    DuplicateSuppressed {
        key: String,
        response: Option<String>,
    },
    /// A higher fencing token exists: stop quietly, do not retry.
    Fenced { key: String },
    /// Waiting for a person: nothing sent.
    AwaitingApproval { key: String },
    /// An earlier attempt may have sent it and nobody can tell yet: nothing sent.
    Unresolved {
        key: String,
        state: String,
        reason: String,
    },
    /// We sent and lost the answer: the effect is `unknown` until resolved.
    Unknown { key: String, reason: String },
    /// Denied or resolved "never retry".
    Cancelled { key: String },
    /// The action promised nothing was sent; the reservation was released.
    NotSent { key: String, reason: String },
}

impl Outcome {
    pub fn key(&self) -> &str {
        match self {
            Outcome::Done { key, .. }
            | Outcome::DuplicateSuppressed { key, .. }
            | Outcome::Fenced { key }
            | Outcome::AwaitingApproval { key }
            | Outcome::Unresolved { key, .. }
            | Outcome::Unknown { key, .. }
            | Outcome::Cancelled { key }
            | Outcome::NotSent { key, .. } => key,
        }
    }

    /// The CLI's exit code (DESIGN.md's contract).
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Done { .. } | Outcome::DuplicateSuppressed { .. } => 0,
            Outcome::Fenced { .. } => 3,
            Outcome::AwaitingApproval { .. } => 4,
            Outcome::Unresolved { .. } => 5,
            Outcome::Unknown { .. } => 6,
            Outcome::Cancelled { .. } => 7,
            Outcome::NotSent { .. } => 75,
        }
    }
}

/// `host:pid` of this attempt, recorded with `submitted` so a restart can tell a dead sender
/// from one still sending.
fn attempt_id() -> String {
    format!("{}:{}", crate::hostname(), std::process::id())
}

/// True when the attempt that moved the row to `submitted` is a live process on this host
/// (other than us): it may be sending right now, so observing would race it.
fn sender_alive(attempt: Option<&str>) -> bool {
    let Some((host, pid)) = attempt.and_then(|a| a.rsplit_once(':')) else {
        return false;
    };
    let Ok(pid) = pid.parse::<i32>() else {
        return false;
    };
    if host != crate::hostname() || pid as u32 == std::process::id() || pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Runs one effect under the ledger's guard. See [`Outcome`] for the ways it ends.
pub fn run(store: &mut Store, ctx: &Ctx, spec: &Spec, action: &mut dyn Action) -> Result<Outcome> {
    let key = spec.key();
    let digest = spec.input_digest();
    let begin = store.begin_effect(&NewEffect {
        effect_key: &key,
        job_key: &ctx.job,
        run_id: &ctx.run_id,
        token: ctx.token,
        terms_shown: spec.terms.as_deref(),
        action_id: &spec.action,
        target_id: &spec.target,
        input_digest: &digest,
        observe_cmd: spec.observe_cmd.as_deref(),
    })?;
    match begin {
        Begin::Fenced => return Ok(Outcome::Fenced { key }),
        Begin::Claimed => {}
        Begin::Existing(row) => match row.state.as_str() {
            "done" => {
                store.record_duplicate(&key, &ctx.job, Some(ctx.token), "already done")?;
                return Ok(Outcome::DuplicateSuppressed {
                    key,
                    response: row.response,
                });
            }
            "cancelled" => return Ok(Outcome::Cancelled { key }),
            // Nothing was sent: the compare-and-set below takes the row over.
            "claimed" => {}
            "submitted" | "unknown" => {
                if row.state == "submitted" && sender_alive(row.attempt.as_deref()) {
                    return Ok(Outcome::Unresolved {
                        key,
                        state: row.state,
                        reason: "another attempt is sending it right now".into(),
                    });
                }
                if let Some(out) = settle(store, ctx, &key, &row.state, action)? {
                    return Ok(out);
                }
            }
            other => {
                return Ok(Outcome::Unresolved {
                    key,
                    state: other.to_string(),
                    reason: format!(
                        "the ledger row is in unrecognised state {:?}",
                        crate::sanitize::inert(other)
                    ),
                })
            }
        },
    }
    fault::point("after_claim");
    if spec.needs_approval {
        match store.approval(&key)? {
            None => {
                store.request_approval(&key, &ctx.job, spec.terms.as_deref())?;
                return Ok(Outcome::AwaitingApproval { key });
            }
            Some(a) if a.state == "pending" => return Ok(Outcome::AwaitingApproval { key }),
            _ => {}
        }
    }
    let attempt = attempt_id();
    match store.submit_effect(
        &key,
        &ctx.job,
        &ctx.run_id,
        ctx.token,
        &attempt,
        spec.needs_approval,
    )? {
        Submit::Won { .. } => {}
        Submit::Fenced => return Ok(Outcome::Fenced { key }),
        Submit::NotApproved => return Ok(Outcome::AwaitingApproval { key }),
        Submit::Denied => return Ok(Outcome::Cancelled { key }),
        Submit::Lost(row) => {
            return Ok(match row.state.as_str() {
                "done" => {
                    store.record_duplicate(
                        &key,
                        &ctx.job,
                        Some(ctx.token),
                        "done by a concurrent attempt",
                    )?;
                    Outcome::DuplicateSuppressed {
                        key,
                        response: row.response,
                    }
                }
                "cancelled" => Outcome::Cancelled { key },
                state => Outcome::Unresolved {
                    key,
                    state: state.to_string(),
                    reason: "a concurrent attempt won the claim and is sending it".into(),
                },
            })
        }
    }
    fault::point("after_submitted");
    let sent = action.perform(&key);
    fault::point("after_send");
    let out = match sent {
        Ok(response) => {
            if store.finish_effect(&key, &ctx.job, ctx.token, "done", &response)? {
                Outcome::Done { key, response }
            } else {
                Outcome::Fenced { key }
            }
        }
        Err(Failure::NotSent(reason)) => {
            if store.release_effect(&key, &ctx.job, ctx.token)? {
                Outcome::NotSent { key, reason }
            } else {
                Outcome::Fenced { key }
            }
        }
        Err(Failure::Lost(reason)) => {
            if store.finish_effect(&key, &ctx.job, ctx.token, "unknown", &reason)? {
                Outcome::Unknown { key, reason }
            } else {
                Outcome::Fenced { key }
            }
        }
    };
    fault::point("after_done");
    Ok(out)
}

/// Asks the observer about an open effect and records its verdict. Returns the outcome when the
/// attempt must stop here, or None when the effect did not happen and may be sent.
fn settle(
    store: &mut Store,
    ctx: &Ctx,
    key: &str,
    state: &str,
    action: &mut dyn Action,
) -> Result<Option<Outcome>> {
    let key = key.to_string();
    let fence = Some((ctx.job.as_str(), ctx.token));
    match action.observe(&key) {
        Observation::Happened(resp) => {
            let words = resp.clone().unwrap_or_default();
            match store.observe_verdict(&key, Some(Resolution::Happened), &words, fence)? {
                Resolved::NotOpen { state, .. } if state == "fenced" => {
                    Ok(Some(Outcome::Fenced { key }))
                }
                _ => {
                    store.record_duplicate(
                        &key,
                        &ctx.job,
                        Some(ctx.token),
                        "observer: already happened",
                    )?;
                    Ok(Some(Outcome::DuplicateSuppressed {
                        key,
                        response: resp,
                    }))
                }
            }
        }
        Observation::NotHappened => {
            match store.observe_verdict(&key, Some(Resolution::NotHappened), "", fence)? {
                Resolved::Done { .. } => Ok(None),
                Resolved::NotOpen { state, .. } if state == "fenced" => {
                    Ok(Some(Outcome::Fenced { key }))
                }
                Resolved::NotOpen { state, .. } => Ok(Some(Outcome::Unresolved {
                    key,
                    state,
                    reason: "settled by someone else meanwhile".into(),
                })),
                Resolved::NotFound => Ok(None),
            }
        }
        Observation::CantTell(why) => {
            store.observe_verdict(&key, None, &why, fence)?;
            Ok(Some(Outcome::Unresolved {
                key,
                state: state.to_string(),
                reason: format!(
                    "the observer could not tell ({why}); resolve it with `exactly resolve`"
                ),
            }))
        }
    }
}

/// An observer's verdict on an open effect, and the run that sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub effect_key: String,
    pub run_id: String,
    pub verdict: Observation,
}

/// Runs a recorded observer on every open effect of a job (the runner does this before the
/// job's next run). Returns (effect key, verdict) pairs.
pub fn settle_open(store: &mut Store, job: &str) -> Result<Vec<Settled>> {
    settle_open_with(store, job, |cmd, key| observe_with(cmd, key, &[]))
}

/// [`settle_open`] with `observe(cmd, effect_key)` running each observer (the scheduler bounds
/// it with [`observe_within`]).
pub fn settle_open_with(
    store: &mut Store,
    job: &str,
    mut observe: impl FnMut(&str, &str) -> Observation,
) -> Result<Vec<Settled>> {
    let open = store.open_effects_of(job)?;
    let mut out = Vec::new();
    for row in open {
        if row.state == "submitted" && sender_alive(row.attempt.as_deref()) {
            continue;
        }
        let Some(cmd) = row.observe_cmd.clone() else {
            continue;
        };
        let verdict = observe(&cmd, &row.effect_key);
        let (res, words) = match &verdict {
            Observation::Happened(r) => (Some(Resolution::Happened), r.clone().unwrap_or_default()),
            Observation::NotHappened => (Some(Resolution::NotHappened), String::new()),
            Observation::CantTell(w) => (None, w.clone()),
        };
        store.observe_verdict(&row.effect_key, res, &words, None)?;
        out.push(Settled {
            effect_key: row.effect_key,
            run_id: row.run_id,
            verdict,
        });
    }
    Ok(out)
}

/// Most bytes of a command's stdout kept as the effect's response.
const RESPONSE_MAX: usize = 64 * 1024;

/// An effect that is a command: exit 0 is done (stdout is the response), exit 75 promises
/// nothing was sent, anything else (or a signal) leaves it unknown.
pub struct CommandAction {
    pub argv: Vec<String>,
    pub observe_cmd: Option<String>,
    /// Extra environment for both the command and the observer.
    pub env: Vec<(String, String)>,
}

impl Action for CommandAction {
    fn perform(&mut self, effect_key: &str) -> std::result::Result<String, Failure> {
        let Some((prog, args)) = self.argv.split_first() else {
            return Err(Failure::NotSent("no command given".into()));
        };
        let child = die_with_parent(Command::new(prog).args(args))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("EXACTLY_EFFECT_KEY", effect_key)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            // It never started, so nothing left this machine.
            Err(e) => return Err(Failure::NotSent(format!("cannot start {prog:?}: {e}"))),
        };
        let mut out = Vec::new();
        if let Some(mut stdout) = child.stdout.take() {
            // Keep the head, but drain the rest so a chatty command never blocks on a full pipe.
            let _ = (&mut stdout)
                .take(RESPONSE_MAX as u64)
                .read_to_end(&mut out);
            let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        }
        let status = match child.wait() {
            Ok(s) => s,
            Err(e) => return Err(Failure::Lost(format!("lost the command: {e}"))),
        };
        let response = String::from_utf8_lossy(&out).trim_end().to_string();
        match status.code() {
            Some(0) => Ok(response),
            Some(75) => Err(Failure::NotSent(
                "the command exited 75: nothing sent".into(),
            )),
            Some(c) => Err(Failure::Lost(format!("the command exited {c}"))),
            None => {
                use std::os::unix::process::ExitStatusExt;
                Err(Failure::Lost(format!(
                    "the command was killed by signal {}",
                    status.signal().unwrap_or(0)
                )))
            }
        }
    }

    fn observe(&mut self, effect_key: &str) -> Observation {
        match &self.observe_cmd {
            Some(cmd) => observe_with(cmd, effect_key, &self.env),
            None => Observation::CantTell("no --observe command was given".into()),
        }
    }
}

/// A command we run dies with us: if we are killed mid-effect, an orphan must not go on to
/// send after a restart has already observed "not happened" and sent again.
fn die_with_parent(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// Runs an observer shell command: exit 0 happened, 1 did not happen, anything else can't tell.
pub fn observe_with(cmd: &str, effect_key: &str, env: &[(String, String)]) -> Observation {
    let out = die_with_parent(Command::new("sh").arg("-c").arg(cmd))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("EXACTLY_EFFECT_KEY", effect_key)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output();
    match out {
        Ok(o) => match o.status.code() {
            Some(0) => {
                let s = String::from_utf8_lossy(&o.stdout).trim_end().to_string();
                Observation::Happened((!s.is_empty()).then_some(s))
            }
            Some(1) => Observation::NotHappened,
            Some(c) => Observation::CantTell(format!("observer exited {c}")),
            None => Observation::CantTell("observer was killed".into()),
        },
        Err(e) => Observation::CantTell(format!("cannot start observer: {e}")),
    }
}

/// [`observe_with`], bounded: an observer still running after `limit`, or when `stop` is set
/// (shutdown, a lost lease), is killed with its process group and the verdict is "can't tell".
pub fn observe_within(
    cmd: &str,
    effect_key: &str,
    env: &[(String, String)],
    limit: std::time::Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> Observation {
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    let child = die_with_parent(Command::new("sh").arg("-c").arg(cmd))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("EXACTLY_EFFECT_KEY", effect_key)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Observation::CantTell(format!("cannot start observer: {e}")),
    };
    let pgid = child.id() as i32;
    let reader = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = (&mut out).take(RESPONSE_MAX as u64).read_to_end(&mut buf);
            let _ = std::io::copy(&mut out, &mut std::io::sink());
            buf
        })
    });
    // A limit too far to represent is no limit.
    let deadline = Instant::now().checked_add(limit);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) => {}
            Err(e) => break Err(format!("lost the observer: {e}")),
        }
        let stopped = stop.load(std::sync::atomic::Ordering::SeqCst);
        if stopped || deadline.is_some_and(|d| Instant::now() >= d) {
            // SAFETY: a negative pid names the observer's own process group.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait();
            break Err(if stopped {
                "observer stopped: its run is ending".to_string()
            } else {
                format!(
                    "observer timed out after {}",
                    crate::time::human_ms(limit.as_millis() as u64)
                )
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // Whatever it left behind holding our pipe goes with it.
    // SAFETY: as above; the group may already be empty.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let out = reader.and_then(|r| r.join().ok()).unwrap_or_default();
    match status {
        Ok(s) => match s.code() {
            Some(0) => {
                let s = String::from_utf8_lossy(&out).trim_end().to_string();
                Observation::Happened((!s.is_empty()).then_some(s))
            }
            Some(1) => Observation::NotHappened,
            Some(c) => Observation::CantTell(format!("observer exited {c}")),
            None => Observation::CantTell("observer was killed".into()),
        },
        Err(why) => Observation::CantTell(why),
    }
}

//! The effect lifecycle: `claimed` → `submitted` (committed before the request leaves) → `done`
//! or `unknown`. A second attempt learns what happened from the unique violation and branches
//! on the row's state; `submitted`/`unknown` are settled by an observer before any retry.
use crate::fault;
use crate::key;
use crate::store::{Begin, NewEffect, Resolution, Resolved, Store, Submit};
use crate::wrapped::{self, LeaseWatch, NotStarted, Output};
use crate::Result;
use serde_json::{Map, Value};
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
    /// The response as the bytes `perform` produced and how many there were in all (a
    /// command's stdout), when the action has them; kept with the effect so a duplicate
    /// replays them.
    fn take_output(&mut self) -> Option<Output> {
        None
    }
}

/// Every way an attempt can end. Only the first sends anything.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Sent now; the answer is recorded. `cut`: the response kept was cut to
    /// [`wrapped::RESPONSE_MAX`] bytes of this many.
    Done {
        key: String,
        response: String,
        cut: Option<u64>,
    },
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
    /// The action ran (`ran` says how it ended) but its outcome could not be recorded (a
    /// locked database, a full disk) within the lease: the effect stays `submitted` until an
    /// observer or an operator settles it.
    Unrecorded {
        key: String,
        ran: String,
        reason: String,
    },
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
            | Outcome::NotSent { key, .. }
            | Outcome::Unrecorded { key, .. } => key,
        }
    }

    /// The CLI's exit code (DESIGN.md's contract).
    pub fn exit_code(&self) -> i32 {
        match self {
            Outcome::Done { .. } | Outcome::DuplicateSuppressed { .. } => 0,
            Outcome::Fenced { .. } => 3,
            Outcome::AwaitingApproval { .. } => 4,
            Outcome::Unresolved { .. } => 5,
            Outcome::Unknown { .. } | Outcome::Unrecorded { .. } => 6,
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
    // Recording the outcome is retried until this lease runs out (a locked database, a full
    // disk); read now, while the database has just answered.
    let record_until = store
        .lease(&ctx.job)
        .ok()
        .flatten()
        .and_then(|l| crate::time::parse(&l.lease_until));
    fault::point("after_submitted");
    let sent = action.perform(&key);
    let output = action.take_output();
    fault::point("after_send");
    let recorded = retrying(record_until, || match &sent {
        Ok(response) => store.finish_effect_output(
            &key,
            &ctx.job,
            ctx.token,
            "done",
            response,
            output.as_ref().map(|o| (o.kept.as_slice(), o.total)),
        ),
        Err(Failure::NotSent(_)) => store.release_effect(&key, &ctx.job, ctx.token),
        Err(Failure::Lost(reason)) => {
            store.finish_effect(&key, &ctx.job, ctx.token, "unknown", reason)
        }
    });
    let out = match (recorded, sent) {
        (Err(e), sent) => Outcome::Unrecorded {
            key,
            ran: match sent {
                Ok(_) => "it exited 0".into(),
                Err(Failure::NotSent(r)) | Err(Failure::Lost(r)) => r,
            },
            reason: e.to_string(),
        },
        (Ok(false), _) => Outcome::Fenced { key },
        (Ok(true), Ok(response)) => Outcome::Done {
            key,
            response,
            cut: output.as_ref().filter(|o| o.cut()).map(|o| o.total),
        },
        (Ok(true), Err(Failure::NotSent(reason))) => Outcome::NotSent { key, reason },
        (Ok(true), Err(Failure::Lost(reason))) => Outcome::Unknown { key, reason },
    };
    fault::point("after_done");
    Ok(out)
}

/// Pause between tries to record an outcome.
const RECORD_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs `write` until it succeeds or `until` (by our clock) has passed; at least once. A fenced
/// answer (`Ok(false)`) is an answer, not a failure.
fn retrying(
    until: Option<crate::time::Ts>,
    mut write: impl FnMut() -> Result<bool>,
) -> Result<bool> {
    loop {
        match write() {
            Ok(v) => return Ok(v),
            Err(e) => {
                if until.is_none_or(|u| crate::time::now() >= u) {
                    return Err(e);
                }
                std::thread::sleep(RECORD_RETRY_PAUSE);
            }
        }
    }
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
    let open = store.open_effects_of(job)?;
    let mut out = Vec::new();
    for row in open {
        if row.state == "submitted" && sender_alive(row.attempt.as_deref()) {
            continue;
        }
        let Some(cmd) = row.observe_cmd.clone() else {
            continue;
        };
        let verdict = observe_with(&cmd, &row.effect_key, &[]);
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

/// An effect that is a command: exit 0 is done (stdout is the response), exit 75 promises
/// nothing was sent, anything else (or a signal) leaves it unknown. See [`crate::wrapped`] for
/// how it runs: streamed, in its own process group, signals forwarded, held to its lease.
pub struct CommandAction {
    pub argv: Vec<String>,
    pub observe_cmd: Option<String>,
    /// Extra environment for both the command and the observer.
    pub env: Vec<(String, String)>,
    /// The lease the command runs under; it is stopped once that lease has expired.
    pub lease: Option<LeaseWatch>,
    /// What the last `perform` wrote on stdout.
    pub output: Option<Output>,
}

impl CommandAction {
    pub fn new(argv: Vec<String>) -> CommandAction {
        CommandAction {
            argv,
            observe_cmd: None,
            env: Vec::new(),
            lease: None,
            output: None,
        }
    }
}

impl Action for CommandAction {
    fn perform(&mut self, effect_key: &str) -> std::result::Result<String, Failure> {
        let Some((prog, args)) = self.argv.split_first() else {
            return Err(Failure::NotSent("no command given".into()));
        };
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("EXACTLY_EFFECT_KEY", effect_key);
        let ended = match wrapped::run(&mut cmd, self.lease.clone()) {
            Ok(e) => e,
            // It never started, so nothing left this machine.
            Err(NotStarted::Spawn(e)) => {
                return Err(Failure::NotSent(format!("cannot start {prog:?}: {e}")))
            }
            Err(NotStarted::LeaseGone(why)) => {
                return Err(Failure::NotSent(format!(
                    "{} before it started",
                    why.words().replace(", so the command was stopped", "")
                )))
            }
        };
        let response = String::from_utf8_lossy(&ended.output.kept)
            .trim_end()
            .to_string();
        self.output = Some(ended.output);
        let status = match ended.status {
            Ok(s) => s,
            Err(e) => return Err(Failure::Lost(format!("lost the command: {e}"))),
        };
        let code = status.code();
        if let Some(why) = ended.stopped {
            // Stopped mid-send: only its own promise makes it "not sent".
            return Err(if code == Some(75) {
                Failure::NotSent(format!("{}; it exited 75: nothing sent", why.words()))
            } else {
                Failure::Lost(why.words())
            });
        }
        let signalled = ended
            .forwarded
            .map(|s| format!(" after we forwarded signal {s}"))
            .unwrap_or_default();
        match code {
            Some(0) => Ok(response),
            Some(75) => Err(Failure::NotSent(
                "the command exited 75: nothing sent".into(),
            )),
            Some(c) => Err(Failure::Lost(format!("the command exited {c}{signalled}"))),
            None => {
                use std::os::unix::process::ExitStatusExt;
                Err(Failure::Lost(format!(
                    "the command was killed by signal {}{signalled}",
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

    fn take_output(&mut self) -> Option<Output> {
        self.output.take()
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

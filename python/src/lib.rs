//! `exactly._native`: the Rust library's operations for Python, one call each. The protocol
//! (the effect step machine, the compare-and-set ledger, leases, approvals) runs here, in the
//! same library the CLI and the scheduler use; `exactly/__init__.py` only gives it a Pythonic
//! face (context managers, decorators, asyncio, enums).
//!
//! Every call that touches the database or waits releases the GIL; the callables an effect
//! runs (perform, observe) take it back for their own duration only.
use exactly::effect::{self, Attempt, Ctx, Effect, Failure, Input, Io, Observation, Outcome, Spec};
use exactly::{approval, lease, Access, Store};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

create_exception!(exactly, Error, PyException, "Base of exactly's errors.");
create_exception!(
    exactly,
    UsageError,
    Error,
    "Bad input: an ambiguous effect key, a bad job name or duration (the CLI's exit 2)."
);
create_exception!(
    exactly,
    StoreError,
    Error,
    "The database could not be used (the CLI's exit 1)."
);
create_exception!(
    exactly,
    BusyError,
    StoreError,
    "Another process held the database's write lock past the busy timeout: worth retrying."
);

/// The library's error as the Python exception of its kind, with the CLI's one-line message.
fn err(e: exactly::Error) -> PyErr {
    let msg = e.to_string();
    match e {
        exactly::Error::Usage(_) => UsageError::new_err(msg),
        exactly::Error::Busy { .. } => BusyError::new_err(msg),
        exactly::Error::Store(_)
        | exactly::Error::NotFound { .. }
        | exactly::Error::Sqlite { .. }
        | exactly::Error::Postgres { .. }
        | exactly::Error::Corrupt { .. }
        | exactly::Error::Foreign { .. }
        | exactly::Error::TooNew { .. }
        | exactly::Error::Io { .. }
        | exactly::Error::Environment(_) => StoreError::new_err(msg),
    }
}

fn json_map(inputs: &str) -> PyResult<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_str(inputs) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(UsageError::new_err("inputs must be a JSON object")),
        Err(e) => Err(UsageError::new_err(format!(
            "inputs are not valid JSON: {e}"
        ))),
    }
}

/// The effect key of the facts, exactly as `exactly key` derives it (an ambiguous one refused).
#[pyfunction]
fn key(action: &str, target: &str, inputs_json: &str) -> PyResult<String> {
    let inputs = json_map(inputs_json)?;
    exactly::key::check(action, target, &inputs).map_err(err)?;
    Ok(exactly::key::effect_key(action, target, &exactly::key::input_digest(&inputs)).into())
}

/// A job name as every call stores and compares it (NFC, trimmed), or the CLI's refusal.
#[pyfunction]
fn job_name(name: &str) -> PyResult<String> {
    let job = lease::job_name(name).map_err(|e| UsageError::new_err(e.why))?;
    Ok(job.as_str().to_string())
}

/// Who acts, as the CLI records it (`EXACTLY_ACTOR` marked as claimed by the login user).
#[pyfunction]
fn actor() -> String {
    exactly::actor()
}

/// `user@host:pid`, the owner a lease shows by default.
#[pyfunction]
fn default_owner() -> String {
    lease::default_owner()
}

/// Milliseconds from a duration such as "10m" or "1h30m" (the CLI's grammar).
#[pyfunction]
fn parse_duration_ms(text: &str) -> PyResult<u64> {
    let d = exactly::time::parse_duration(text).map_err(err)?;
    Ok(d.as_millis() as u64)
}

/// One open database: a small pool of connections, one taken per call for that call alone, so
/// no lock is held while an effect's perform or observe runs (they may call the store, and
/// concurrent calls each get their own connection).
#[pyclass(module = "exactly._native", frozen)]
struct Db {
    pool: Mutex<Vec<Store>>,
    closed: AtomicBool,
    path: String,
}

/// Idle connections kept for reuse; more are opened while calls overlap, then dropped.
const POOL_KEEP: usize = 8;

impl Db {
    /// Runs `f` on a connection of its own with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Store) -> exactly::Result<T> + Send,
    ) -> PyResult<T> {
        py.allow_threads(|| {
            let closed = || StoreError::new_err("the database is closed");
            if self.closed.load(Ordering::SeqCst) {
                return Err(closed());
            }
            let idle = self.idle()?.pop();
            let mut store = match idle {
                Some(s) => s,
                None => exactly::open(Some(&self.path), Access::Write).map_err(err)?,
            };
            let result = f(&mut store).map_err(err);
            if !self.closed.load(Ordering::SeqCst) {
                let mut idle = self.idle()?;
                if idle.len() < POOL_KEEP {
                    idle.push(store);
                }
            }
            result
        })
    }

    fn idle(&self) -> PyResult<std::sync::MutexGuard<'_, Vec<Store>>> {
        self.pool
            .lock()
            .map_err(|_| StoreError::new_err("the database handle was poisoned by a panic"))
    }
}

/// The far side's observer as a Python callable, normalised by `exactly/__init__.py`:
/// `observe(key) -> (0, response | None) | (1, None) | (2, reason)`. The send is not in here:
/// [`advance`] pauses the attempt at its send, and the caller sends in its own code (a perform
/// callable, or the body of a `with` block) before [`Db::effect_finish`].
struct PyEffect {
    observe: Option<Py<PyAny>>,
}

impl Effect for PyEffect {
    fn perform(&mut self, _effect_key: &str) -> Result<String, Failure> {
        // Never asked: `advance` stops before `Io::Send`.
        Err(Failure::NotSent(
            "the send is the caller's, not the driver's".into(),
        ))
    }

    fn observe(&mut self, effect_key: &str) -> Observation {
        let Some(observe) = &self.observe else {
            return Observation::CantTell("no observer was given".into());
        };
        Python::with_gil(|py| {
            let verdict = observe
                .call1(py, (effect_key,))
                .and_then(|r| r.extract::<(i32, Option<String>)>(py));
            match verdict {
                Ok((0, response)) => Observation::Happened(response),
                Ok((1, _)) => Observation::NotHappened,
                Ok((_, reason)) => Observation::CantTell(
                    reason.unwrap_or_else(|| "the observer can't tell".into()),
                ),
                Err(e) => Observation::CantTell(format!("the observer raised: {e}")),
            }
        })
    }
}

/// An attempt paused at its send, between [`Db::effect_begin`] and [`Db::effect_finish`].
#[pyclass(module = "exactly._native", frozen)]
struct Paused {
    key: String,
    attempt: Mutex<Option<Attempt>>,
}

#[pymethods]
impl Paused {
    /// The effect key the send passes on.
    #[getter]
    fn key(&self) -> String {
        self.key.clone()
    }
}

/// Drives `att` from `io` until it must send (`Io::Send`, left to the caller) or ends
/// (`Io::End`): each step performed by the library's [`effect::execute`], as `effect::run`
/// does, with its one rule for a write that fails after the send: the outcome is `unrecorded`.
fn advance(
    store: &mut Store,
    att: &mut Attempt,
    mut io: Io,
    far_side: &mut PyEffect,
) -> exactly::Result<Io> {
    loop {
        if matches!(io, Io::Send | Io::End(_)) {
            return Ok(io);
        }
        match effect::execute(store, att, &io, far_side) {
            Ok(Some(input)) => io = att.step(input),
            Ok(None) => return Ok(io),
            Err(e) => match &io {
                Io::Finish { sent, .. } => {
                    return Ok(Io::End(Outcome::Unrecorded {
                        key: att.key().clone(),
                        ran: match sent {
                            Ok(_) => "it exited 0".into(),
                            Err(Failure::NotSent(r)) | Err(Failure::Lost(r)) => r.clone(),
                        },
                        reason: e.to_string(),
                    }))
                }
                _ => return Err(e),
            },
        }
    }
}

/// An outcome as a dict `exactly.Outcome` is built from: its kind and its parts.
fn outcome_dict<'py>(py: Python<'py>, out: &Outcome) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("key", out.key().as_str())?;
    d.set_item("exit_code", out.exit_code())?;
    let kind = match out {
        Outcome::Done { response, .. } => {
            d.set_item("response", response)?;
            "done"
        }
        Outcome::DuplicateSuppressed { response, .. } => {
            d.set_item("response", response)?;
            "duplicate"
        }
        // It ran, and only its row was fenced: unrecorded, its answer kept.
        Outcome::Fenced {
            ran: Some(ran),
            response,
            ..
        } => {
            d.set_item(
                "reason",
                format!("{ran}; fenced: a newer token holds the job"),
            )?;
            d.set_item("response", response)?;
            "unrecorded"
        }
        Outcome::Fenced { .. } => "fenced",
        Outcome::AwaitingApproval { .. } => "awaiting_approval",
        Outcome::Unresolved { state, reason, .. } => {
            d.set_item("state", state)?;
            d.set_item("reason", reason)?;
            "in_flight"
        }
        Outcome::Unknown { reason, .. } => {
            d.set_item("reason", reason)?;
            "unknown"
        }
        Outcome::Cancelled { .. } => "cancelled",
        Outcome::NotSent { reason, .. } => {
            d.set_item("reason", reason)?;
            "not_sent"
        }
        Outcome::Unrecorded { ran, reason, .. } => {
            d.set_item("reason", format!("{ran}; {reason}"))?;
            "unrecorded"
        }
        Outcome::LeaseEnding { until, .. } => {
            d.set_item(
                "reason",
                until.as_deref().unwrap_or("the lease was released"),
            )?;
            "lease_ending"
        }
    };
    d.set_item("outcome", kind)?;
    Ok(d)
}

fn to_json(py: Python<'_>, value: &impl serde::Serialize) -> PyResult<PyObject> {
    let text = serde_json::to_string(value)
        .map_err(|e| StoreError::new_err(format!("cannot encode: {e}")))?;
    let json = py.import("json")?;
    Ok(json.call_method1("loads", (text,))?.unbind())
}

#[pymethods]
impl Db {
    /// Opens (creating when new) the database `db` names: a SQLite path or a `postgres://` URL,
    /// with the CLI's rules for `--db` (empty: `$EXACTLY_DB`, `./exactly.db`, the XDG folder).
    #[new]
    fn new(py: Python<'_>, db: &str) -> PyResult<Db> {
        let given = Some(db).filter(|d| !d.is_empty());
        let path = exactly::db_path(given);
        let store = py
            .allow_threads(|| exactly::open(Some(&path), Access::Write))
            .map_err(err)?;
        Ok(Db {
            pool: Mutex::new(vec![store]),
            closed: AtomicBool::new(false),
            path,
        })
    }

    /// What the database was opened as (a URL's password hidden).
    #[getter]
    fn path(&self) -> String {
        exactly::shown_db(&self.path)
    }

    /// The database as given, for a second connection (a lease's renewer opens its own).
    #[getter]
    fn location(&self) -> String {
        self.path.clone()
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.closed.store(true, Ordering::SeqCst);
        py.allow_threads(|| {
            if let Ok(mut g) = self.pool.lock() {
                g.clear();
            }
        });
        Ok(())
    }

    /// Claims the job's lease for `ttl_ms`: `(token, None, None)` when won, `(None, owner,
    /// until)` while another holds it.
    fn claim(
        &self,
        py: Python<'_>,
        job: &str,
        ttl_ms: u64,
        owner: &str,
    ) -> PyResult<(Option<i64>, Option<String>, Option<String>)> {
        let job = lease::job_name(job).map_err(|e| UsageError::new_err(e.why))?;
        let dur = Duration::from_millis(ttl_ms);
        lease::check_duration(dur).map_err(err)?;
        let claim = self.with(py, |s| lease::claim(s, &job, owner, dur))?;
        Ok(match claim {
            lease::Claim::Won { token } => (Some(token.get()), None, None),
            lease::Claim::Held { owner, until, .. } => (None, Some(owner), Some(until)),
        })
    }

    /// Extends a lease we hold to `ttl_ms` from now; False when fenced.
    fn renew(&self, py: Python<'_>, job: &str, token: i64, ttl_ms: u64) -> PyResult<bool> {
        let job = lease::job_name(job).map_err(|e| UsageError::new_err(e.why))?;
        let dur = Duration::from_millis(ttl_ms);
        lease::check_duration(dur).map_err(err)?;
        self.with(py, |s| {
            lease::renew(s, &job, exactly::Token::from(token), dur)
        })
    }

    /// Releases a lease we hold; False when fenced.
    fn release(&self, py: Python<'_>, job: &str, token: i64) -> PyResult<bool> {
        let job = lease::job_name(job).map_err(|e| UsageError::new_err(e.why))?;
        self.with(py, |s| lease::release(s, &job, exactly::Token::from(token)))
    }

    /// Begins one effect attempt under the ledger's guard: the step machine (the one `exactly
    /// effect` runs) driven through reserving, observing an open effect (with `observe`) and
    /// submitting, up to the send. Returns the attempt paused at its send (`fresh`: the caller
    /// sends, then calls [`Db::effect_finish`]), or its outcome as a dict when nothing may be
    /// sent (a duplicate, fenced, awaiting approval, in flight, …).
    #[pyo3(signature = (
        job, token, run_id, action, target, inputs_json, terms, needs_approval, observe, by=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn effect_begin(
        &self,
        py: Python<'_>,
        job: &str,
        token: i64,
        run_id: Option<String>,
        action: &str,
        target: &str,
        inputs_json: &str,
        terms: Option<String>,
        needs_approval: bool,
        observe: Option<Py<PyAny>>,
        by: Option<String>,
    ) -> PyResult<(Option<Paused>, Option<Py<PyDict>>)> {
        let job = lease::job_name(job).map_err(|e| UsageError::new_err(e.why))?;
        let mut ctx = Ctx::new(&job, exactly::Token::from(token));
        if let Some(r) = &run_id {
            ctx = ctx.with_run_id(r);
        }
        if let Some(b) = &by {
            ctx = ctx.by(b);
        }
        let spec = Spec {
            action: action.to_string(),
            target: target.to_string(),
            inputs: json_map(inputs_json)?,
            terms,
            needs_approval,
            observe_cmd: None,
        };
        // The sender is this process (no group, no cage), as `effect::run` records it.
        let identity = exactly::sender::Identity::this_process(None).in_cage(None);
        let mut att = Attempt::new(&ctx, &spec, &effect::attempt_id())
            .map_err(err)?
            .with_sender(&identity.encode());
        let mut far_side = PyEffect { observe };
        let io = att.start();
        let io = self.with(py, |s| advance(s, &mut att, io, &mut far_side))?;
        match io {
            Io::End(out) => Ok((None, Some(outcome_dict(py, &out)?.unbind()))),
            _ => Ok((
                Some(Paused {
                    key: att.key().as_str().to_string(),
                    attempt: Mutex::new(Some(att)),
                }),
                None,
            )),
        }
    }

    /// Ends an attempt [`Db::effect_begin`] left at its send with what the send did: `code` 0
    /// and the response, 1 and why nothing was sent (the reservation is released), 2 and why
    /// the request may have left (`unknown`). Returns the outcome as a dict; an attempt ends
    /// once.
    fn effect_finish(
        &self,
        py: Python<'_>,
        paused: &Paused,
        code: i32,
        text: String,
    ) -> PyResult<Py<PyDict>> {
        let taken = paused
            .attempt
            .lock()
            .map_err(|_| StoreError::new_err("the attempt was poisoned by a panic"))?
            .take();
        let Some(mut att) = taken else {
            return Err(UsageError::new_err(format!(
                "effect {} was already finished: an attempt ends once",
                paused.key
            )));
        };
        let sent = match code {
            0 => Ok(text),
            1 => Err(Failure::NotSent(text)),
            _ => Err(Failure::Lost(text)),
        };
        // Where `effect::execute` stops a test after the send, before its answer is recorded.
        py.allow_threads(|| exactly::fault::point(exactly::fault::Point::AfterSend));
        let io = att.step(Input::Sent(sent));
        let mut far_side = PyEffect { observe: None };
        let io = self.with(py, |s| advance(s, &mut att, io, &mut far_side))?;
        match io {
            Io::End(out) => Ok(outcome_dict(py, &out)?.unbind()),
            other => Err(StoreError::new_err(format!(
                "effect {}: the attempt asked for {other:?} after its send",
                paused.key
            ))),
        }
    }

    /// The ledger row of an effect key as a dict, or None when it was never begun.
    fn effect_row(&self, py: Python<'_>, key: &str) -> PyResult<Option<PyObject>> {
        let row = self.with(py, |s| effect::get(s, &exactly::EffectKey::from(key)))?;
        row.map(|r| to_json(py, &r)).transpose()
    }

    /// Approves (`approve`) or denies an effect awaiting approval: `(applied, words)`, where
    /// applied is False when someone decided first or nothing was asked.
    #[pyo3(signature = (key, approve, note=None, by=None))]
    fn decide(
        &self,
        py: Python<'_>,
        key: &str,
        approve: bool,
        note: Option<String>,
        by: Option<String>,
    ) -> PyResult<(bool, String)> {
        let by = by.unwrap_or_else(exactly::actor);
        let r = self.with(py, |s| {
            if approve {
                approval::approve(s, &exactly::EffectKey::from(key), &by, note.as_deref())
            } else {
                approval::deny(s, &exactly::EffectKey::from(key), &by, note.as_deref())
            }
        })?;
        let words = r.describe(key, approve);
        Ok((matches!(r, approval::Decided::Done), words))
    }

    /// Resolves an open effect (`happened`, `not_happened` or `cancel`): `(code, words)` with
    /// the CLI's exit code (0 resolved, 5 in flight, 1 nothing to resolve).
    #[pyo3(signature = (key, how, note=None, evidence=None, force=false, by=None))]
    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &self,
        py: Python<'_>,
        key: &str,
        how: &str,
        note: Option<String>,
        evidence: Option<String>,
        force: bool,
        by: Option<String>,
    ) -> PyResult<(i32, String)> {
        let how = match how {
            "happened" => approval::Resolution::Happened,
            "not_happened" => approval::Resolution::NotHappened,
            "cancel" => approval::Resolution::Cancel,
            other => {
                return Err(UsageError::new_err(format!(
                    "resolve how={other:?}: say happened, not_happened or cancel"
                )))
            }
        };
        let by = by.unwrap_or_else(exactly::actor);
        let r = self.with(py, |s| {
            approval::resolve(
                s,
                &exactly::EffectKey::from(key),
                how,
                &by,
                note.as_deref(),
                evidence.as_deref(),
                force,
            )
        })?;
        let words = r.describe(key, how);
        let code = match r {
            approval::Resolved::Done { .. } => 0,
            approval::Resolved::InFlight(_) => 5,
            _ => 1,
        };
        Ok((code, words))
    }

    /// The snapshot `exactly status --json` prints, as plain data.
    fn status(&self, py: Python<'_>) -> PyResult<PyObject> {
        let text = self.with(py, |s| Ok(exactly::snapshot::Snapshot::read(s)?.to_json()))?;
        let json = py.import("json")?;
        Ok(json.call_method1("loads", (text,))?.unbind())
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The workspace's one version (root Cargo.toml): the distribution's and `exactly --version`'s.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Db>()?;
    m.add_class::<Paused>()?;
    m.add_function(wrap_pyfunction!(key, m)?)?;
    m.add_function(wrap_pyfunction!(actor, m)?)?;
    m.add_function(wrap_pyfunction!(job_name, m)?)?;
    m.add_function(wrap_pyfunction!(default_owner, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration_ms, m)?)?;
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("UsageError", py.get_type::<UsageError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    Ok(())
}

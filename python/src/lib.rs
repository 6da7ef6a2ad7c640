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
use pyo3::exceptions::{PyException, PyKeyboardInterrupt, PySystemExit};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyString, PyTuple, PyType};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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

/// What `import exactly` hands this module once ([`bind`]): the `Outcome` class and its kinds,
/// so an outcome is built here in one step, the current-key variable perform runs under, and
/// the Python helpers for the rare cases (a fact that is not plain, an answer that is not a str
/// or None, a raise from perform), so their rules and their words stay in one place.
struct Hooks {
    /// `object.__new__`: an `Outcome` filled in without its frozen `__init__`.
    new: Py<PyAny>,
    outcome: Py<PyAny>,
    /// The `Kind` of each name in [`KINDS`], in that order.
    kinds: Vec<Py<PyAny>>,
    /// `exactly._context.KEY.set` and `.reset`: what `current_key()` reads.
    key_set: Py<PyAny>,
    key_reset: Py<PyAny>,
    /// `_answer(r, sync) -> (code, text, refused)`: perform's answer that is not a str or None.
    answer: Py<PyAny>,
    /// `_raised(e) -> (code, text)`: what a raise from perform means.
    raised: Py<PyAny>,
    /// `_inputs_json(inputs) -> str`: inputs that are not plain, checked (each refusal named).
    inputs_json: Py<PyAny>,
    /// `_text(what, v) -> str`: an action or target that is not a str, refused by name.
    text: Py<PyAny>,
    /// `_check_sync(perform)`: raises when perform is async (what sync run cannot await).
    check_sync: Py<PyAny>,
    /// `_refused(what, outcome) -> str`: the words for an awaitable refused from sync run.
    refused: Py<PyAny>,
    /// The type of a function written in Python.
    function: Py<PyAny>,
    /// Whether a function can be marked a coroutine function by an attribute
    /// (`inspect.markcoroutinefunction`, Python 3.12 on).
    marks: bool,
}

static HOOKS: GILOnceCell<Hooks> = GILOnceCell::new();

/// The outcome kinds, as `exactly.Kind`'s values.
const KINDS: [&str; 10] = [
    "done",
    "duplicate",
    "fenced",
    "awaiting_approval",
    "in_flight",
    "unknown",
    "cancelled",
    "not_sent",
    "unrecorded",
    "lease_ending",
];

fn hooks(py: Python<'_>) -> PyResult<&Hooks> {
    HOOKS
        .get(py)
        .ok_or_else(|| StoreError::new_err("exactly._native is used before `import exactly`"))
}

/// Called once by `exactly/__init__.py`: see [`Hooks`]. A second call (a reload) keeps the first.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (
    outcome, kinds, key_var, answer, raised, inputs_json, text, check_sync, refused
))]
fn bind(
    py: Python<'_>,
    outcome: Py<PyAny>,
    kinds: &Bound<'_, PyDict>,
    key_var: Py<PyAny>,
    answer: Py<PyAny>,
    raised: Py<PyAny>,
    inputs_json: Py<PyAny>,
    text: Py<PyAny>,
    check_sync: Py<PyAny>,
    refused: Py<PyAny>,
) -> PyResult<()> {
    let kinds = KINDS
        .iter()
        .map(|k| {
            kinds
                .get_item(k)?
                .map(Bound::unbind)
                .ok_or_else(|| StoreError::new_err(format!("no Kind {k:?} was bound")))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let new = py
        .import("builtins")?
        .getattr("object")?
        .getattr("__new__")?
        .unbind();
    let function = text.bind(py).get_type().into_any().unbind();
    let _first = HOOKS.set(
        py,
        Hooks {
            new,
            outcome,
            kinds,
            key_set: key_var.getattr(py, "set")?,
            key_reset: key_var.getattr(py, "reset")?,
            answer,
            raised,
            inputs_json,
            text,
            check_sync,
            refused,
            function,
            marks: py.version_info() >= (3, 12),
        },
    );
    Ok(())
}

/// How deep a plain value is converted here; a deeper one goes through Python's check.
const PLAIN_DEPTH: usize = 32;

/// A plain value as the key's JSON: None, a bool, a str, an int within 64 bits, and lists,
/// tuples and dicts (names str) of them; None for anything else (a float, a subclass, a number
/// outside 64 bits), which Python's own check then encodes or refuses by name, as before.
fn plain(v: &Bound<'_, PyAny>, depth: usize) -> Option<serde_json::Value> {
    use serde_json::Value;
    if v.is_none() {
        return Some(Value::Null);
    }
    if let Ok(s) = v.downcast_exact::<PyString>() {
        return s.to_cow().ok().map(|c| Value::String(c.into_owned()));
    }
    if let Ok(b) = v.downcast_exact::<PyBool>() {
        return Some(Value::Bool(b.is_true()));
    }
    if v.is_exact_instance_of::<PyInt>() {
        // As JSON text reads back: a negative number an i64, any other a u64.
        return match v.extract::<i64>() {
            Ok(i) => Some(Value::from(i)),
            Err(_) => v.extract::<u64>().ok().map(Value::from),
        };
    }
    if depth >= PLAIN_DEPTH {
        return None;
    }
    if let Ok(d) = v.downcast_exact::<PyDict>() {
        return plain_map(d, depth + 1).map(Value::Object);
    }
    if let Ok(l) = v.downcast_exact::<PyList>() {
        return l.iter().map(|x| plain(&x, depth + 1)).collect();
    }
    if let Ok(t) = v.downcast_exact::<PyTuple>() {
        return t.iter().map(|x| plain(&x, depth + 1)).collect();
    }
    None
}

fn plain_map(
    d: &Bound<'_, PyDict>,
    depth: usize,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut m = serde_json::Map::new();
    for (k, v) in d.iter() {
        let k = k.downcast_exact::<PyString>().ok()?.to_cow().ok()?;
        m.insert(k.into_owned(), plain(&v, depth)?);
    }
    Some(m)
}

/// The inputs as the key's JSON object: plain ones converted here, any other through Python's
/// check and JSON (`_inputs_json`), which names what it refuses.
fn inputs_map(
    py: Python<'_>,
    h: &Hooks,
    inputs: &Bound<'_, PyAny>,
) -> PyResult<serde_json::Map<String, serde_json::Value>> {
    if inputs.is_none() {
        return Ok(serde_json::Map::new());
    }
    if let Some(m) = inputs
        .downcast_exact::<PyDict>()
        .ok()
        .and_then(|d| plain_map(d, 0))
    {
        return Ok(m);
    }
    let text: String = h.inputs_json.call1(py, (inputs,))?.extract(py)?;
    json_map(&text)
}

/// Whether `f` is a function written in Python that is not a coroutine function, read from its
/// code as `inspect.iscoroutinefunction` does; False (ask `_check_sync`) for anything else, and
/// from 3.12 on for a function with attributes (`inspect.markcoroutinefunction` sets one; before
/// 3.12 inspect reads the code alone, so its attributes are not read here either).
fn plain_sync(py: Python<'_>, h: &Hooks, f: &Bound<'_, PyAny>) -> PyResult<bool> {
    /// `inspect.CO_COROUTINE`.
    const CO_COROUTINE: u32 = 0x80;
    if !f.get_type().is(h.function.bind(py)) {
        return Ok(false);
    }
    if h.marks {
        let attrs = f.getattr(intern!(py, "__dict__"))?;
        if !attrs.downcast::<PyDict>().is_ok_and(|d| d.is_empty()) {
            return Ok(false);
        }
    }
    let flags: u32 = f
        .getattr(intern!(py, "__code__"))?
        .getattr(intern!(py, "co_flags"))?
        .extract()?;
    Ok(flags & CO_COROUTINE == 0)
}

/// An action or target: a str as is, anything else through Python's `_text`, which refuses it.
fn text_of(py: Python<'_>, h: &Hooks, what: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = v.downcast_exact::<PyString>() {
        if let Ok(c) = s.to_cow() {
            return Ok(c.into_owned());
        }
    }
    h.text.call1(py, (what, v))?.extract(py)
}

/// What was made from a str object, with the object (held: its address is not reused while
/// remembered), so the same object is found again by identity, its text not read again.
type Remembered<T> = (Py<PyString>, T);

thread_local! {
    /// The action and the target (in that order) made last in this thread: the str objects
    /// they were read from, held, and their text. A lease's effects mostly repeat both.
    static LAST_TEXT: RefCell<[Option<Remembered<String>>; 2]> = const { RefCell::new([None, None]) };
}

/// [`text_of`] for the action (`slot` 0) or the target (1) of a new effect: the same str
/// object as the last one's in this thread is not read again (see [`Remembered`]).
fn text_cached(
    py: Python<'_>,
    h: &Hooks,
    slot: usize,
    what: &str,
    v: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let Ok(s) = v.downcast_exact::<PyString>() else {
        return text_of(py, h, what, v);
    };
    let known = LAST_TEXT.with(|last| match last.borrow().get(slot) {
        Some(Some((obj, text))) if obj.is(s) => Some(text.clone()),
        _ => None,
    });
    if let Some(text) = known {
        return Ok(text);
    }
    let text = text_of(py, h, what, v)?;
    LAST_TEXT.with(|last| {
        if let Some(entry) = last.borrow_mut().get_mut(slot) {
            *entry = Some((s.clone().unbind(), text.clone()));
        }
    });
    Ok(text)
}

/// The effect key of the facts, exactly as `exactly key` derives it (an ambiguous one refused).
#[pyfunction]
#[pyo3(signature = (action, target, inputs=None))]
fn key(
    py: Python<'_>,
    action: &Bound<'_, PyAny>,
    target: &Bound<'_, PyAny>,
    inputs: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let h = hooks(py)?;
    let action = text_of(py, h, "action", action)?;
    let target = text_of(py, h, "target", target)?;
    let inputs = match inputs {
        Some(i) => inputs_map(py, h, i)?,
        None => serde_json::Map::new(),
    };
    exactly::key::check(&action, &target, &inputs).map_err(err)?;
    Ok(exactly::key::effect_key(&action, &target, &exactly::key::input_digest(&inputs)).into())
}

/// One effect's facts in the library's terms, made once when `exactly.Effect` is made: who acts
/// (the job's name normalised, its token, the run), what (action, target, the inputs checked),
/// and its key, derived once (by the first attempt, or when asked before it).
#[pyclass(module = "exactly._native", frozen)]
struct Facts {
    /// Shared with the lease's other effects (see [`context`]): one context, not a copy each.
    ctx: Arc<Ctx>,
    spec: Spec,
    /// The run given, or `exactly run`'s; None: the context's default.
    run_id: Option<String>,
    key: OnceLock<String>,
}

#[pymethods]
impl Facts {
    #[new]
    #[pyo3(signature = (job, token, run_id, action, target, inputs, terms, needs_approval))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        job: &Bound<'_, PyString>,
        token: i64,
        run_id: Option<String>,
        action: &Bound<'_, PyAny>,
        target: &Bound<'_, PyAny>,
        inputs: &Bound<'_, PyAny>,
        terms: Option<String>,
        needs_approval: bool,
    ) -> PyResult<Facts> {
        let h = hooks(py)?;
        let mut ctx = context(job, token)?;
        // Under `exactly run` the run's id ties the effect to the run that sent it.
        let run_id = run_id.or_else(|| {
            let ours = std::env::var("EXACTLY_JOB").is_ok_and(|j| j == ctx.job.as_str());
            ours.then(|| std::env::var("EXACTLY_RUN_ID").ok()).flatten()
        });
        let action = text_cached(py, h, 0, "action", action)?;
        let target = text_cached(py, h, 1, "target", target)?;
        let inputs = inputs_map(py, h, inputs)?;
        exactly::key::check(&action, &target, &inputs).map_err(err)?;
        if let Some(r) = &run_id {
            ctx = Arc::new(Ctx::clone(&ctx).with_run_id(r));
        }
        Ok(Facts {
            ctx,
            spec: Spec {
                action,
                target,
                inputs,
                terms,
                needs_approval,
                observe_cmd: None,
            },
            run_id,
            key: OnceLock::new(),
        })
    }

    #[getter]
    fn job(&self) -> &str {
        self.ctx.job.as_str()
    }

    #[getter]
    fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    #[getter]
    fn key(&self) -> &str {
        self.key.get_or_init(|| self.spec.key().into())
    }
}

impl Facts {
    /// A new attempt at the effect, its sender this process (no group, no cage), as
    /// `effect::run` records it; boxed, as it is handed between closures and calls several
    /// times per effect: a pointer moves, not the whole struct.
    fn attempt(&self) -> exactly::Result<Box<Attempt>> {
        let identity = exactly::sender::Identity::this_process(None).in_cage(None);
        let att = Attempt::new(&self.ctx, &self.spec, &effect::attempt_id())?
            .with_sender(&identity.encode());
        let _first = self.key.set(att.key().as_str().to_string());
        Ok(Box::new(att))
    }
}

/// A context, with the token and the process it was made for.
type CtxOf = (i64, u32, Arc<Ctx>);

thread_local! {
    /// The context made last in this thread, with the name (the str object it was made from),
    /// token and process it was made for (a forked child is another process, another run): the
    /// effects of one lease share one, its job's name normalised once rather than per effect.
    static LAST_CTX: RefCell<Option<Remembered<CtxOf>>> = const { RefCell::new(None) };
}

/// The context of `job` (its name normalised, or the CLI's refusal) under `token`, as a run
/// of this process: [`Ctx::new`], remembered for the last one made in this thread. A lease's
/// effects pass the same str object, found by identity without reading its text (see
/// [`Remembered`]); another object with the same text is found by comparing the text.
fn context(job: &Bound<'_, PyString>, token: i64) -> PyResult<Arc<Ctx>> {
    let pid = std::process::id();
    let known = LAST_CTX.with(|last| match &*last.borrow() {
        Some((name, (t, p, ctx))) if *t == token && *p == pid => {
            let same = name.is(job) || {
                let name = name.bind(job.py());
                matches!((name.to_cow(), job.to_cow()), (Ok(a), Ok(b)) if a == b)
            };
            same.then(|| Arc::clone(ctx))
        }
        _ => None,
    });
    if let Some(ctx) = known {
        return Ok(ctx);
    }
    let name = lease::job_name(&job.to_cow()?).map_err(|e| UsageError::new_err(e.why))?;
    let ctx = Arc::new(Ctx::new(&name, exactly::Token::from(token)));
    LAST_CTX.with(|last| {
        *last.borrow_mut() = Some((job.clone().unbind(), (token, pid, Arc::clone(&ctx))))
    });
    Ok(ctx)
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

    /// Ends `att`, paused at its send, with what the send did (see [`Db::effect_finish`]).
    fn finish(
        &self,
        py: Python<'_>,
        mut att: Box<Attempt>,
        code: i32,
        text: String,
        error: Option<PyObject>,
        key: Option<&Bound<'_, PyString>>,
    ) -> PyResult<PyObject> {
        let sent = match code {
            0 => Ok(text),
            1 => Err(Failure::NotSent(text)),
            _ => Err(Failure::Lost(text)),
        };
        let io = att.step(Input::Sent(sent));
        let mut far_side = PyEffect { observe: None };
        let io = self.with(py, |s| {
            // Where `effect::execute` stops a test after the send, before its answer is recorded.
            exactly::fault::point(exactly::fault::Point::AfterSend);
            advance(s, &mut att, io, &mut far_side)
        })?;
        match io {
            Io::End(out) => {
                let key = key.filter(|_| out.key() == att.key());
                outcome_obj(py, hooks(py)?, &out, error, key)
            }
            other => Err(StoreError::new_err(format!(
                "effect {}: the attempt asked for {other:?} after its send",
                att.key()
            ))),
        }
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
    attempt: Mutex<Option<Box<Attempt>>>,
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

/// A new, empty `exactly.Outcome`, as `Outcome.__new__(Outcome)` makes it: its type's own
/// `tp_new` slot (object's, unless the class defines `__new__`), called directly rather than
/// through `object.__new__`'s call, which checks what is known here and slices its arguments.
fn new_outcome<'py>(py: Python<'py>, h: &Hooks) -> PyResult<Bound<'py, PyAny>> {
    let tp = h.outcome.bind(py).downcast::<PyType>()?;
    // SAFETY: `tp` is a live type object (a class defined in Python: a heap type, whose slots
    // PyType_GetSlot reads on every version from 3.9), and the GIL is held.
    let slot = unsafe { pyo3::ffi::PyType_GetSlot(tp.as_type_ptr(), pyo3::ffi::Py_tp_new) };
    if slot.is_null() {
        return h.new.bind(py).call1((tp,));
    }
    // SAFETY: the `Py_tp_new` slot holds a `newfunc`, or null (handled above).
    let new = unsafe { std::mem::transmute::<*mut std::ffi::c_void, pyo3::ffi::newfunc>(slot) };
    let args = PyTuple::empty(py);
    // SAFETY: a `newfunc` called as type_call calls it: the type, an argument tuple (empty), no
    // keywords; it returns a new reference or null with an exception set.
    unsafe {
        let o = new(tp.as_type_ptr(), args.as_ptr(), std::ptr::null_mut());
        Bound::from_owned_ptr_or_err(py, o)
    }
}

/// An outcome as an `exactly.Outcome`, filled in one step (not through the frozen
/// dataclass's `__init__`): every field set here, `error` the exception perform raised, `key`
/// the outcome's key when it was already made a Python string (the one perform was given).
fn outcome_obj(
    py: Python<'_>,
    h: &Hooks,
    out: &Outcome,
    error: Option<PyObject>,
    key: Option<&Bound<'_, PyString>>,
) -> PyResult<PyObject> {
    let mut response = None;
    let mut reason = None;
    let mut state = None;
    let kind = match out {
        Outcome::Done { response: r, .. } => {
            response = Some(r.as_str());
            "done"
        }
        Outcome::DuplicateSuppressed { response: r, .. } => {
            response = r.as_deref();
            "duplicate"
        }
        // It ran, and only its row was fenced: unrecorded, its answer kept.
        Outcome::Fenced {
            ran: Some(ran),
            response: r,
            ..
        } => {
            reason = Some(format!("{ran}; fenced: a newer token holds the job"));
            response = r.as_deref();
            "unrecorded"
        }
        Outcome::Fenced { .. } => "fenced",
        Outcome::AwaitingApproval { .. } => "awaiting_approval",
        Outcome::Unresolved {
            state: s,
            reason: r,
            ..
        } => {
            state = Some(s.as_str());
            reason = Some(r.clone());
            "in_flight"
        }
        Outcome::Unknown { reason: r, .. } => {
            reason = Some(r.clone());
            "unknown"
        }
        Outcome::Cancelled { .. } => "cancelled",
        Outcome::NotSent { reason: r, .. } => {
            reason = Some(r.clone());
            "not_sent"
        }
        Outcome::Unrecorded { ran, reason: r, .. } => {
            reason = Some(format!("{ran}; {r}"));
            "unrecorded"
        }
        Outcome::LeaseEnding { until, .. } => {
            reason = Some(until.map_or("the lease was released".to_string(), exactly::time::fmt));
            "lease_ending"
        }
    };
    let kind = KINDS
        .iter()
        .position(|k| *k == kind)
        .and_then(|i| h.kinds.get(i))
        .ok_or_else(|| StoreError::new_err(format!("no Kind {kind:?}")))?;
    let o = new_outcome(py, h)?;
    let key = match key {
        Some(k) => k.clone(),
        None => PyString::new(py, out.key().as_str()),
    };
    let none = || py.None().into_bound(py);
    let text = |t: Option<&str>| t.map_or_else(none, |t| PyString::new(py, t).into_any());
    // Each field set as the dataclass's `__init__` sets it, in its order (on 3.11 and later,
    // into the object's inline values, shared by every Outcome, rather than a dict of its own).
    let fields = [
        (intern!(py, "outcome"), kind.bind(py).clone()),
        (intern!(py, "key"), key.into_any()),
        (intern!(py, "response"), text(response)),
        (intern!(py, "reason"), text(reason.as_deref())),
        (intern!(py, "state"), text(state)),
        (
            intern!(py, "exit_code"),
            out.exit_code().into_pyobject(py)?.into_any(),
        ),
        (
            intern!(py, "error"),
            error.map_or_else(none, |e| e.into_bound(py)),
        ),
    ];
    for (name, value) in fields {
        // The frozen dataclass's `__setattr__` refuses; object's own is what its `__init__`
        // calls (`object.__setattr__(self, name, value)`), here without the call.
        // SAFETY: the object, the name (a str) and the value are alive, and the GIL is held.
        let set = unsafe {
            pyo3::ffi::PyObject_GenericSetAttr(o.as_ptr(), name.as_ptr(), value.as_ptr())
        };
        if set != 0 {
            return Err(PyErr::fetch(py));
        }
    }
    Ok(o.unbind())
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
            lease::Claim::Held { owner, until, .. } => {
                (None, Some(owner), Some(exactly::time::fmt(until)))
            }
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
    /// sends, then calls [`Db::effect_finish`]), or its `Outcome` when nothing may be sent (a
    /// duplicate, fenced, awaiting approval, in flight, …).
    #[pyo3(signature = (facts, observe))]
    fn effect_begin(
        &self,
        py: Python<'_>,
        facts: &Facts,
        observe: Option<Py<PyAny>>,
    ) -> PyResult<(Option<Paused>, Option<PyObject>)> {
        let mut far_side = PyEffect { observe };
        let (att, io) = self.with(py, |s| {
            let mut att = facts.attempt()?;
            let io = att.start();
            let io = advance(s, &mut att, io, &mut far_side)?;
            Ok((att, io))
        })?;
        match io {
            Io::End(out) => Ok((None, Some(outcome_obj(py, hooks(py)?, &out, None, None)?))),
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
    /// the request may have left (`unknown`). Returns the `Outcome` (`error` on it); an
    /// attempt ends once.
    #[pyo3(signature = (paused, code, text, error=None))]
    fn effect_finish(
        &self,
        py: Python<'_>,
        paused: &Paused,
        code: i32,
        text: String,
        error: Option<PyObject>,
    ) -> PyResult<PyObject> {
        let taken = paused
            .attempt
            .lock()
            .map_err(|_| StoreError::new_err("the attempt was poisoned by a panic"))?
            .take();
        let Some(att) = taken else {
            return Err(UsageError::new_err(format!(
                "effect {} was already finished: an attempt ends once",
                paused.key
            )));
        };
        self.finish(py, att, code, text, error, None)
    }

    /// One whole attempt, as `Effect.run` and `arun` make it: begun as [`Db::effect_begin`]
    /// does; when it may send, `perform(key)` called with the key as `current_key()` while it
    /// runs, then ended as [`Db::effect_finish`] does with what perform did (an answer that is
    /// not a str or None, and a raise, judged by Python's `_answer` and `_raised`). Returns the
    /// `Outcome`. From sync run (`sync`) an async perform is refused before anything is
    /// written, and an awaitable answer once its reservation is released (`UsageError`);
    /// `KeyboardInterrupt` and `SystemExit` are raised again once recorded.
    #[pyo3(signature = (facts, observe, perform, sync))]
    fn effect_run(
        &self,
        py: Python<'_>,
        facts: &Facts,
        observe: Option<Py<PyAny>>,
        perform: &Bound<'_, PyAny>,
        sync: bool,
    ) -> PyResult<PyObject> {
        let h = hooks(py)?;
        if sync && !plain_sync(py, h, perform)? {
            h.check_sync.call1(py, (perform,))?;
        }
        let mut far_side = PyEffect { observe };
        let (att, io) = self.with(py, |s| {
            let mut att = facts.attempt()?;
            let io = att.start();
            let io = advance(s, &mut att, io, &mut far_side)?;
            Ok((att, io))
        })?;
        if let Io::End(out) = io {
            return outcome_obj(py, h, &out, None, None);
        }
        let key = PyString::new(py, att.key().as_str());
        // One argument tuple for both calls given the key.
        let with_key = PyTuple::new(py, [&key])?;
        let token = h.key_set.call1(py, &with_key)?;
        let answered = perform.call1(&with_key);
        h.key_reset.call1(py, (token,))?;
        let (code, text, error, refused) = match answered {
            Ok(r) if r.is_none() => (0, String::new(), None, false),
            Ok(r) => match r.downcast_exact::<PyString>().map(|s| s.to_cow()) {
                Ok(Ok(s)) => (0, s.into_owned(), None, false),
                _ => {
                    let (code, text, refused): (i32, String, bool) =
                        h.answer.call1(py, (r, sync))?.extract(py)?;
                    (code, text, None, refused)
                }
            },
            Err(e) => {
                let e: PyObject = e.into_value(py).into_any();
                let (code, text): (i32, String) = h.raised.call1(py, (&e,))?.extract(py)?;
                // NotSent promised nothing left: no error to keep.
                (code, text, (code != 1).then_some(e), false)
            }
        };
        let again = error.as_ref().and_then(|e| {
            let e = e.bind(py);
            let stop =
                e.is_instance_of::<PyKeyboardInterrupt>() || e.is_instance_of::<PySystemExit>();
            stop.then(|| PyErr::from_value(e.clone()))
        });
        let out = self.finish(py, att, code, text, error, Some(&key))?;
        if refused {
            let words: String = h.refused.call1(py, ("perform", &out))?.extract(py)?;
            return Err(UsageError::new_err(words));
        }
        match again {
            Some(e) => Err(e),
            None => Ok(out),
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
    m.add_class::<Facts>()?;
    m.add_function(wrap_pyfunction!(bind, m)?)?;
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

"""An effect and its attempts: :meth:`Effect.run` and ``arun`` (a perform callable), and the
``with`` form (the caller's block sends). Each is the one step machine of the Rust library:
``run`` and ``arun`` are one native call each (``_native.Db.effect_run``: begin, perform,
finish); the ``with`` form is begun by ``effect_begin`` (reserve, observe an open effect,
submit: up to the send) and ended by ``effect_finish`` with what the block did. The facts are
checked and put in the library's terms once, when the :class:`Effect` is made
(``_native.Facts``), and the key derived once."""
from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Tuple, cast

from . import NotSent, _context, _native, _response_text, _verdict
from ._native import UsageError

if TYPE_CHECKING:
    from . import Inputs, Lease, Outcome, Store


def current_key() -> str:
    """The effect key of the effect whose perform, observer or ``with`` block is running in
    this thread or asyncio task (a task inherits it from the code that created it; a thread
    you start does not: pass the key on). Raises :class:`UsageError` anywhere else."""
    k = _context.KEY.get()
    if k is None:
        raise UsageError(
            "exactly.current_key() is called outside an effect: it is the key of the effect "
            "whose perform, observer or `with` block is running in this thread or task")
    return k


def _with_key(k: str, fn: Callable[[str], Any]) -> Any:
    """``fn(k)`` with ``k`` as :func:`current_key` while it runs."""
    tok = _context.KEY.set(k)
    try:
        return fn(k)
    finally:
        _context.KEY.reset(tok)


_FUNCTION = type(_with_key)


def _is_async(fn: Any) -> bool:
    """``inspect.iscoroutinefunction(fn)``; a plain function's answer read from its code (a
    marked one, with a ``__dict__``, asks inspect), as that costs a guarded call less."""
    if type(fn) is _FUNCTION and not fn.__dict__:
        return bool(fn.__code__.co_flags & inspect.CO_COROUTINE)
    return fn is not None and inspect.iscoroutinefunction(fn)


def current_lease(store: "Optional[Store]" = None, job: Optional[str] = None) -> "Optional[Lease]":
    """The lease this code runs under: the innermost one entered with ``with`` (``with
    store.claim(…)``, ``with store.lease(…)``, ``with lease:``) in this thread or task, else,
    under ``exactly run``, the scheduler's (:func:`scheduled_lease`); None when there is none.
    With ``job``, only a lease of that job."""
    want = _native.job_name(job) if job is not None else None
    for lease in reversed(_context.LEASES.get()):
        if want is None or lease.job == want:
            return cast("Lease", lease)
    if os.environ.get("EXACTLY_JOB") and os.environ.get("EXACTLY_FENCING_TOKEN"):
        from . import scheduled_lease
        s = store if store is not None else _default_store()
        got = scheduled_lease(s)
        if got is not None and (want is None or got.job == want):
            return got
    return None


_DEFAULT: Dict[str, "Store"] = {}
_DEFAULT_LOCK = threading.Lock()


def _default_store() -> "Store":
    """The database ``exactly.open()`` opens (``$EXACTLY_DB`` under ``exactly run``), opened
    once per process (and per ``$EXACTLY_DB``) for the calls that name no store."""
    from . import open as open_store
    db = os.environ.get("EXACTLY_DB", "")
    with _DEFAULT_LOCK:
        if db not in _DEFAULT:
            _DEFAULT[db] = open_store(db or None)
        return _DEFAULT[db]


def _no_lease(what: str) -> UsageError:
    return UsageError(
        f"{what} needs a lease: pass the job and its token, call it inside `with "
        "store.claim(job):` (or `with store.lease(job):`), or run it under `exactly run`")


def _unstarted(r: Any) -> bool:
    """A coroutine never started sent nothing; any other awaitable (a task, a future) may be
    running already."""
    return inspect.iscoroutine(r) and inspect.getcoroutinestate(r) == inspect.CORO_CREATED


def _refuse(r: Any) -> Tuple[int, str]:
    """perform's (or a block's) answer that is an awaitable, where nothing can await it: a
    coroutine never started is closed (nothing sent); anything else may be running."""
    if _unstarted(r):
        r.close()
        return (1, "an awaitable (a coroutine) came back where nothing awaits it: nothing was sent")
    return (2, "an awaitable that may be running came back where nothing awaits it")


class Attempt:
    """One attempt at an effect, as the ``with`` form gives it::

        with store.effect(action="charge", target="cus_42", inputs={"cents": 500}) as e:
            if e.fresh:
                e.result = charge(e.key)   # the far side's answer: recorded done
        e.outcome                          # the Outcome run() gives

    ``fresh`` is True only when the ledger lets this attempt send (never for a duplicate, a
    fenced token, an effect awaiting approval or left unsettled by its observer); ``outcome`` is
    known at once when it is not fresh, and after the block when it is."""

    def __init__(self, effect: "Effect", paused: Optional[_native.Paused],
                 done: "Optional[Outcome]"):
        self.effect = effect
        self.key: str = paused.key if paused is not None else cast("Outcome", done).key
        self._paused = paused
        self._result: Any = _UNSET
        self._key_token: Any = None  # current_key()'s, while the block runs
        self._outcome = done

    def __repr__(self) -> str:
        return f"Attempt(key={self.key!r}, fresh={self.fresh}, outcome={self._outcome!r})"

    @property
    def fresh(self) -> bool:
        """True while this attempt holds the send: the block must send (or raise NotSent)."""
        return self._paused is not None and self._outcome is None

    @property
    def outcome(self) -> "Outcome":
        """How the attempt ended, the :class:`Outcome` :meth:`Effect.run` gives: known at once
        when the attempt is not fresh, and once its block has ended when it is (asked inside
        a fresh block, a :class:`UsageError`)."""
        if self._outcome is None:
            raise UsageError(f"effect {self.key} is fresh and its block has not ended: its "
                             "outcome is known after the block")
        return self._outcome

    @property
    def result(self) -> Any:
        """The far side's answer, set by the block that sent; recorded as the response."""
        return None if self._result is _UNSET else self._result

    @result.setter
    def result(self, value: Any) -> None:
        if not self.fresh:
            raise UsageError(
                f"effect {self.key} is not fresh ({self.outcome.outcome.value}): this attempt may "
                "not send, so it has no result to record")
        self._result = value

    def _finish(self, code: int, text: str, error: Optional[BaseException] = None) -> "Outcome":
        assert self._paused is not None
        out: "Outcome" = self.effect.store._db.effect_finish(self._paused, code, text, error)
        self._outcome = out
        return out

    def _leave(self, exc: Optional[BaseException]) -> bool:
        """Ends the block: records what it did when it held the send. True swallows ``exc``."""
        if not self.fresh:
            return False
        if self._result is not _UNSET:
            r = self._result
            if inspect.isawaitable(r):
                code, why = _refuse(r)
                self._finish(code, why)
                raise UsageError(
                    f"e.result of effect {self.key} is an awaitable (a coroutine?): "
                    f"{'nothing was sent' if code == 1 else 'recorded unknown'}; write "
                    "`e.result = await send(e.key)` in `async with`")
            # The far side answered: done, whatever the block raised after.
            self._finish(0, _response_text(r))
            return False
        if exc is None:
            self._finish(2, "the `with` block held the send and ended without `e.result`: "
                            "the request may have left")
            raise UsageError(
                f"effect {self.key}: the `with` block held the send and ended without setting "
                "`e.result`, so it was recorded unknown (its observer settles it); set "
                "`e.result = …` to the far side's answer (None when there is none), or raise "
                "exactly.NotSent when nothing was sent")
        if isinstance(exc, NotSent):
            self._finish(1, exc.reason or "not sent")
            return True
        self._finish(2, f"the block raised {type(exc).__name__}: {exc}", exc)
        return False


_UNSET: Any = object()


class Effect:
    """One effect, described by its facts; :meth:`run` performs it under the ledger's guard,
    and ``with effect as e:`` gives the block the send (see :class:`Attempt`)."""

    def __init__(self, store: "Store", job: str, token: int, *, action: str, target: str,
                 inputs: "Optional[Inputs]" = None, terms: Optional[str] = None,
                 needs_approval: bool = False, observe: Optional[Callable[[str], Any]] = None,
                 run_id: Optional[str] = None):
        self._init(store, job, token, action, target, inputs, terms, needs_approval, observe,
                   run_id)

    def _init(self, store: "Store", job: str, token: int, action: str, target: str,
              inputs: "Optional[Inputs]", terms: Optional[str], needs_approval: bool,
              observe: Optional[Callable[[str], Any]], run_id: Optional[str]) -> None:
        # Positional; `lease.effect(…)` and `store.effect(…)` do the same inline, on an effect
        # made with `object.__new__`: a class called with keywords, or a call more, costs a
        # guarded call more than the rest of its Python. Keep the three alike.
        self.store, self.token = store, token
        self.action, self.target = action, target
        self.inputs = {**inputs} if type(inputs) is dict else dict(inputs or {})
        self.terms, self.needs_approval, self.observe = terms, needs_approval, observe
        # In the library's terms, once: the job's name normalised, the facts checked (a bad
        # one refused here, by name), and under `exactly run` the run that sends it. The key
        # is derived once, by the first attempt or by `key` when asked before it.
        self._facts = _native.Facts(job, token, run_id, action, target, self.inputs, terms,
                                    needs_approval)

    @property
    def job(self) -> str:
        """The job's name, normalised as every call stores it."""
        return self._facts.job

    @property
    def run_id(self) -> Optional[str]:
        """The run given, or ``exactly run``'s when it runs this job; else None."""
        return self._facts.run_id

    @property
    def key(self) -> str:
        """The effect key: ``exactly.key(action, target, inputs)``."""
        return self._facts.key

    def __repr__(self) -> str:
        return f"Effect(job={self.job!r}, key={self.key!r})"

    def run(self, perform: Callable[[str], Any]) -> "Outcome":
        """Sends the effect once: ``perform(key)`` is called only when the ledger allows it
        (never for a duplicate, a fenced token, an unapproved or unsettled effect), with the
        effect key to pass on as the far side's idempotency key (and as
        :func:`current_key` while it runs); what it returns is recorded as the response. A
        raise from perform leaves the effect ``unknown`` (the request may have left), except
        :class:`NotSent`; the exception is on ``outcome.error``, and
        ``KeyboardInterrupt``/``SystemExit`` are re-raised once recorded. A perform or observe
        that returns an awaitable (a coroutine) is refused before anything is sent: the
        reservation is released and :class:`UsageError` names :meth:`arun`."""
        observe = self.observe
        if observe is None:
            # One native call, which refuses an async perform before anything is written (typed
            # by annotation: `cast` would be a call more).
            out: "Outcome" = self.store._db.effect_run(self._facts, None, perform, True)
            return out
        if _is_async(perform) or _is_async(observe):
            raise UsageError(_ASYNC)
        return self._run(perform, observe, sync=True)

    async def arun(self, perform: Callable[[str], Any]) -> "Outcome":
        """:meth:`run` from asyncio: perform and observe may be coroutine functions, run on
        this event loop (in this task's context) while the ledger's steps wait in a thread of
        this call's own (not the loop's default executor, which perform may need), on a
        connection of its own."""
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        observe = self.observe
        out = await _in_thread(loop, lambda: self._run(
            _on_loop(perform, loop, ctx), _on_loop(observe, loop, ctx) if observe else None))
        return cast("Outcome", out)

    # The with form.

    def __enter__(self) -> Attempt:
        if self.observe is not None and _is_async(self.observe):
            raise UsageError("observe is async: use `async with store.effect(…) as e:`")
        return self._enter(self._begin(self.observe, sync=True))

    def __exit__(self, et: Any, exc: Optional[BaseException], tb: Any) -> bool:
        return self._exit()._leave(exc)

    async def __aenter__(self) -> Attempt:
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        observe = _on_loop(self.observe, loop, ctx) if self.observe else None
        return self._enter(cast(Attempt, await _in_thread(loop, lambda: self._begin(observe))))

    async def __aexit__(self, et: Any, exc: Optional[BaseException], tb: Any) -> bool:
        att = self._exit()
        loop = asyncio.get_running_loop()
        return bool(await _in_thread(loop, lambda: att._leave(exc)))

    def _enter(self, att: Attempt) -> Attempt:
        _context.push(_context.ATTEMPTS, att)
        att._key_token = _context.KEY.set(att.key)
        return att

    def _exit(self) -> Attempt:
        for entered in reversed(_context.ATTEMPTS.get()):
            att = cast(Attempt, entered)
            if att.effect is self:
                _context.pop(_context.ATTEMPTS, att)
                _context.KEY.reset(att._key_token)
                return att
        raise UsageError(f"effect {self.key}: its `with` block ended where it was not entered")

    # One attempt: begun up to the send, the send, finished.

    def _begin(self, observe: Optional[Callable[[str], Any]], sync: bool = False) -> Attempt:
        look = _looker(observe, sync, None) if observe is not None else None
        paused, done = self.store._db.effect_begin(self._facts, look)
        return Attempt(self, paused, done)

    def _run(self, perform: Callable[[str], Any], observe: Optional[Callable[[str], Any]],
             sync: bool = False) -> "Outcome":
        """One native call: begin, ``perform(key)`` under :func:`current_key`, finish. It
        raises itself what perform did that must be raised (an awaitable from sync run, once
        its reservation is released; ``KeyboardInterrupt``/``SystemExit``, once recorded)."""
        refused: List[str] = []
        look = _looker(observe, sync, refused) if observe is not None else None
        out = self.store._db.effect_run(self._facts, look, perform, sync)
        if refused:
            raise UsageError(_refused("observe", out))
        return cast("Outcome", out)


def _looker(observe: Callable[[str], Any], sync: bool,
            refused: Optional[List[str]]) -> Callable[[str], Tuple[int, Optional[str]]]:
    """The observer as the native side asks it: ``look(key) -> (code, response or why)``, with
    the key as :func:`current_key` while it runs; an awaitable from sync run is refused (noted
    in ``refused``): it cannot tell."""

    def look(k: str) -> Tuple[int, Optional[str]]:
        try:
            v = _with_key(k, observe)
        except Exception as e:  # noqa: BLE001 - an observer that fails can't tell
            return (2, f"the observer raised {type(e).__name__}: {e}")
        if sync and inspect.isawaitable(v):
            if refused is not None:
                refused.append("observe")
            if _unstarted(v):
                cast(Any, v).close()
            return (2, "the observer returned an awaitable from sync run")
        return _verdict(v)

    return look


_ASYNC = "perform or observe is async: use `await effect.arun(perform)`"


def _check_sync(perform: Any) -> None:
    """For ``effect_run`` from sync run: refuses an async perform before anything is written."""
    if _is_async(perform):
        raise UsageError(_ASYNC)


def _refused(what: str, out: "Outcome") -> str:
    return (f"{what} returned an awaitable (a coroutine?) from sync run, which cannot await it: "
            f"nothing was sent and effect {out.key} was left as it was ({out.outcome.value}); "
            "use `await effect.arun(perform)`")


_new = object.__new__


def _answer(r: Any, sync: bool) -> Tuple[int, str, bool]:
    """perform's answer that is not a str or None, for ``effect_run``: ``(code, text,
    refused)``. An awaitable from sync run is refused (nothing can await it); anything else is
    recorded as :func:`_response_text` keeps it."""
    if sync and inspect.isawaitable(r):
        code, why = _refuse(r)
        return (code, why, True)
    return (0, _response_text(r), False)


def _raised(e: BaseException) -> Tuple[int, str]:
    """What a raise from perform means, for ``effect_run``: :class:`NotSent` promised nothing
    left (1, the reservation released); any other, the request may have left (2, unknown)."""
    if isinstance(e, NotSent):
        return (1, e.reason or "not sent")
    return (2, f"perform raised {type(e).__name__}: {e}")


def _in_thread(loop: asyncio.AbstractEventLoop, work: Callable[[], Any]) -> "asyncio.Future[Any]":
    """``work()`` in a thread of its own (never the loop's default executor, which the caller's
    code may need), its result or raise handed to the awaiting task."""
    done: "asyncio.Future[Any]" = loop.create_future()

    def settle(result: Any, error: Optional[BaseException]) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def run() -> None:
        try:
            r = work()
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            loop.call_soon_threadsafe(settle, None, e)
        else:
            loop.call_soon_threadsafe(settle, r, None)

    threading.Thread(target=run, name="exactly-arun", daemon=True).start()
    return done


def _on_loop(fn: Callable[[str], Any], loop: asyncio.AbstractEventLoop,
             ctx: contextvars.Context) -> Callable[[str], Any]:
    """``fn`` called from a worker thread in (a copy of) the caller's context ``ctx``; an
    awaitable it returns is awaited on ``loop`` as a task of that context."""
    async def wait(aw: Awaitable[Any]) -> Any:
        return await aw

    def call(k: str) -> Any:
        r = fn(k)
        if inspect.isawaitable(r):
            # The task copies the context this runs in: the caller's, with current_key set.
            return asyncio.run_coroutine_threadsafe(wait(r), loop).result()
        return r

    return lambda k: ctx.copy().run(_with_key, k, call)

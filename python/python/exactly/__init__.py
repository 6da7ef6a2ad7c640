"""exactly: exactly-once *effect* for scheduled jobs and agents, from Python.

The protocol runs in the same Rust library as the ``exactly`` command (``exactly._native``):
a lease per job with a monotonic fencing token, an effect key derived from the facts acted on,
an effect ledger whose ``unknown`` is settled by an observer before any retry, and approvals
consumed once. This module gives it a Pythonic face::

    import exactly
    store = exactly.open("exactly.db")               # or "postgres://…"
    with store.claim("invoices", ttl="10m") as lease: # LeaseHeld when another holds it
        eff = lease.effect(action="send-invoice", target="customer-42",
                           inputs={"month": "2026-11"}, observe=already_sent)
        out = eff.run(lambda key: send(key))          # key: pass on as Idempotency-Key
        if out.outcome == exactly.Kind.DONE: ...

Shortest, under the current lease (the one entered with ``with``, or the scheduler's under
``exactly run``)::

    with store.lease("refunds"), store.effect(action="refund", target=order,
                                              inputs={"amount": amount}, observe=refunded) as e:
        if e.fresh:                                   # only when the ledger lets this send
            e.result = send(e.key)                    # recorded done; a raise: unknown

A Python database and the CLI's are one: effects written here show in ``exactly top`` and
``exactly status``, and a key attempted here and retried with ``exactly effect`` is one effect.
"""
from __future__ import annotations

import asyncio
import base64
import dis
import enum
import json
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

from . import _context, _native
from ._native import BusyError, Error, StoreError, UsageError

__version__: str = _native.__version__
"""This release's version: the ``exactly-ledger`` distribution's and ``exactly --version``'s."""

__all__ = [
    "open", "key", "Store", "Lease", "Effect", "Outcome", "Kind", "Observation",
    "HAPPENED", "NOT_HAPPENED", "CANT_TELL", "Happened", "Decision", "Resolution",
    "scheduled_lease", "effect", "current_key", "current_lease", "Attempt",
    "Error", "UsageError", "StoreError", "BusyError", "LeaseHeld", "EffectNotDone",
    "NotSent", "Fenced", "AwaitingApproval", "InFlight", "Unknown", "Cancelled",
    "Unrecorded", "LeaseEnding",
]

Inputs = Mapping[str, Any]
Duration = Union[str, int, float]


class Kind(str, enum.Enum):
    """How an effect attempt ended. A ``str`` enum: ``out.outcome == "done"`` holds."""

    DONE = "done"
    """Sent now; the far side's answer is recorded."""
    DUPLICATE = "duplicate"
    """Already done (by an earlier attempt, or per the observer): nothing sent; the stored
    answer is ``out.response``."""
    FENCED = "fenced"
    """A newer fencing token holds the job: stop quietly, do not retry."""
    AWAITING_APPROVAL = "awaiting_approval"
    """A person must approve first (``exactly approve KEY``): nothing sent."""
    IN_FLIGHT = "in_flight"
    """An earlier attempt may still be sending, or its observer cannot tell: nothing sent."""
    UNKNOWN = "unknown"
    """Sent, and the answer was lost (or perform raised): the effect is ``unknown`` until its
    observer or a person resolves it. Never retried blindly."""
    CANCELLED = "cancelled"
    """Denied, or resolved "never retry": nothing sent."""
    NOT_SENT = "not_sent"
    """perform raised :class:`NotSent`: nothing left; the reservation is released."""
    UNRECORDED = "unrecorded"
    """perform ran but its end could not be recorded: the effect stays ``submitted``."""
    LEASE_ENDING = "lease_ending"
    """Too little of the lease was left to send under it: nothing sent."""

    def __str__(self) -> str:
        return self.value


class Observation(enum.Enum):
    """An observer's verdict on "did this effect happen?"."""

    HAPPENED = "happened"
    NOT_HAPPENED = "not_happened"
    CANT_TELL = "cant_tell"


HAPPENED = Observation.HAPPENED
NOT_HAPPENED = Observation.NOT_HAPPENED
CANT_TELL = Observation.CANT_TELL


@dataclass(frozen=True)
class Happened:
    """An observer's "it happened", with what the far side shows (kept as the response)."""

    response: Any = None
    """A str, or bytes or a JSON value, kept as perform's return is."""


class Resolution(str, enum.Enum):
    """A person's resolution of an open (``submitted`` or ``unknown``) effect."""

    HAPPENED = "happened"
    NOT_HAPPENED = "not_happened"
    CANCEL = "cancel"


class LeaseHeld(Error):
    """The job's lease is held by someone else (raised by :meth:`Store.lease`, and by
    ``with store.claim(…)``)."""

    def __init__(self, job: str, owner: Optional[str], until: Optional[str]):
        super().__init__(f"the lease of {job} is held by {owner} until {until}")
        self.job, self.owner, self.until = job, owner, until

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.job, self.owner, self.until))


class EffectNotDone(Error):
    """An attempt that did not end done: raised by :meth:`Outcome.raise_for_outcome`."""

    def __init__(self, outcome: "Outcome"):
        why = f": {outcome.reason}" if outcome.reason else ""
        super().__init__(f"effect {outcome.key} {outcome.outcome.value}{why}")
        self.outcome = outcome

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.outcome,))


class NotSent(EffectNotDone):
    """Raise it from perform to promise that nothing reached the far side (the CLI's exit 75):
    the reservation is released and a later attempt may send. Any other exception leaves the
    effect ``unknown``."""

    def __init__(self, reason: Union[str, "Outcome"] = "not sent"):
        if isinstance(reason, Outcome):
            super().__init__(reason)
        else:
            Exception.__init__(self, reason)
            self.outcome = None
        self.reason = reason if isinstance(reason, str) else reason.reason

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.outcome if self.outcome is not None else self.reason,))


class Fenced(EffectNotDone):
    """A newer fencing token holds the job."""


class AwaitingApproval(EffectNotDone):
    """A person must approve the effect first."""


class InFlight(EffectNotDone):
    """An earlier attempt may still be sending, or its observer cannot tell."""


class Unknown(EffectNotDone):
    """Sent and the answer lost: ``unknown`` until resolved."""


class Cancelled(EffectNotDone):
    """Denied, or resolved never to be sent."""


class Unrecorded(EffectNotDone):
    """perform ran, and its end could not be recorded."""


class LeaseEnding(EffectNotDone):
    """Too little of the lease was left to send."""


_RAISES = {
    Kind.FENCED: Fenced,
    Kind.AWAITING_APPROVAL: AwaitingApproval,
    Kind.IN_FLIGHT: InFlight,
    Kind.UNKNOWN: Unknown,
    Kind.CANCELLED: Cancelled,
    Kind.NOT_SENT: NotSent,
    Kind.UNRECORDED: Unrecorded,
    Kind.LEASE_ENDING: LeaseEnding,
}


@dataclass(frozen=True)
class Outcome:
    """How one attempt ended: ``outcome`` (a :class:`Kind`), the effect ``key``, the far side's
    ``response`` (done or duplicate), the ``reason`` (when not done), the ledger ``state`` an
    in-flight attempt found, the CLI's ``exit_code``, and the ``error`` perform raised."""

    outcome: Kind
    key: str
    response: Optional[str] = None
    reason: Optional[str] = None
    state: Optional[str] = None
    exit_code: int = 0
    error: Optional[BaseException] = field(default=None, compare=False, repr=False)

    @property
    def done(self) -> bool:
        """The effect happened exactly once: sent now, or already (``duplicate``)."""
        return self.outcome in (Kind.DONE, Kind.DUPLICATE)

    def raise_for_outcome(self) -> "Outcome":
        """Returns self when done or duplicate; raises the named exception otherwise."""
        if self.done:
            return self
        raise _RAISES[self.outcome](self)


@dataclass(frozen=True)
class Decision:
    """What an approval, a denial or a resolution did: ``applied`` is False when someone decided
    first, nothing was asked, or (``code`` 5) the effect is still in flight."""

    applied: bool
    message: str
    code: int = 0


def _ms(d: Duration) -> int:
    if isinstance(d, str):
        return _native.parse_duration_ms(d)
    if isinstance(d, (int, float)) and d > 0:
        return int(d * 1000)
    raise UsageError(f"a duration is a string such as '10m' or seconds > 0, not {d!r}")


def _a(v: Any) -> str:
    name = type(v).__name__
    return ("an " if name[:1] in "aeiou" else "a ") + name


def _check_value(v: Any, where: str) -> None:
    """Refuses what the key could not tell apart exactly: a name that is not a string, an
    integer outside 64 bits, a float that is not finite, a value JSON has no form for."""
    if v is None or isinstance(v, (bool, str)):
        return
    if isinstance(v, int):
        if not -2**63 <= v < 2**64:
            raise UsageError(f"{where}: {v} is outside the exact integers (-2**63 to 2**64-1): "
                             "pass it as a string")
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise UsageError(f"{where}: {v} is not a finite number")
        return
    if isinstance(v, Mapping):
        for k, x in v.items():
            if not isinstance(k, str):
                raise UsageError(f"{where}: name {k!r} is {_a(k)}, not a string")
            _check_value(x, f"{where}.{k}")
        return
    if isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            _check_value(x, f"{where}[{i}]")
        return
    raise UsageError(f"{where}: {_a(v)} is not a JSON value")


# One encoder for every call: json.dumps(…, allow_nan=False) builds a new one each time.
_JSON = json.JSONEncoder(allow_nan=False)


def _inputs_json(inputs: Optional[Inputs]) -> str:
    if inputs is not None and type(inputs) is not dict and not isinstance(inputs, Mapping):
        raise UsageError(f"inputs must be a mapping of names to values, not {_a(inputs)}")
    for k, v in (inputs or {}).items():
        if not isinstance(k, str):
            raise UsageError(f"input name {k!r} is {_a(k)}, not a string")
        if type(v) is not str:  # a string is always fine: no need to name where it is
            _check_value(v, f"input {k}")
    return _JSON.encode(dict(inputs or {}))


def _text(what: str, v: Any) -> str:
    if not isinstance(v, str):
        shown = "" if v is None else f" {v!r}"
        raise UsageError(f"{what} must be a string, not {type(v).__name__}{shown}")
    return v


def key(action: str, target: str, inputs: Optional[Inputs] = None) -> str:
    """The effect key of the facts: identical to ``exactly key --action A --target T --input
    k=v…`` for the same facts (a string input there is a string here). Input names must be
    strings, integers within 64 bits (-2**63 to 2**64-1), floats finite, values JSON's: anything
    else raises :class:`UsageError` naming the input, as does a non-string action or target."""
    return _native.key(action, target, inputs)


def open(db: Optional[str] = None) -> "Store":  # noqa: A001 - the module's verb
    """Opens the database as ``--db`` does: a SQLite path or a ``postgres://`` URL; without
    one, ``$EXACTLY_DB``, else ``./exactly.db`` when it exists, else the XDG state folder. A new
    database is created with its tables (no ``exactly init`` needed)."""
    return Store(db or "")


def _response_text(r: Any) -> str:
    """perform's answer as the ledger keeps it. It is never refused: by then the effect was sent
    and must be recorded done. ``str`` as is, None as "", UTF-8 bytes as their text, other
    bytes as ``base64:`` and their Base64, a JSON value as its JSON; anything else as
    ``str(obj)`` (not reversible: return a str or a JSON value to keep the answer whole)."""
    if r is None:
        return ""
    if isinstance(r, (bytes, bytearray)):
        try:
            return bytes(r).decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(bytes(r)).decode("ascii")
    if isinstance(r, str):
        return r
    try:
        return json.dumps(r, allow_nan=False)
    except (TypeError, ValueError):
        return str(r)


def _verdict(v: Any) -> Tuple[int, Optional[str]]:
    if v is HAPPENED or v is True:
        return (0, None)
    if isinstance(v, Happened):
        return (0, None if v.response is None else _response_text(v.response))
    if v is NOT_HAPPENED or v is False:
        return (1, None)
    if v is CANT_TELL or v is None:
        return (2, "the observer can't tell")
    return (2, f"the observer answered {v!r}, not HAPPENED, NOT_HAPPENED or CANT_TELL")


class Store:
    """One open database, thread- and asyncio-safe: each call takes a connection of its own from
    a small pool, with the GIL released while it waits, and no lock is held while perform or
    observe runs (they may call the store themselves)."""

    def __init__(self, db: str):
        self._db = _native.Db(db)

    @property
    def path(self) -> str:
        """The database, as messages show it (a URL's password hidden)."""
        return self._db.path

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # Leases

    def claim(self, job: str, ttl: Duration = "10m", owner: Optional[str] = None,
              renew: bool = True) -> Optional["Lease"]:
        """Claims the job's lease for ``ttl``: a :class:`Lease` with its fencing ``token``, or
        None while another holds it. As a context manager the lease renews itself every third
        of ``ttl`` while the block runs (unless ``renew=False``) and is released at exit.

        Written as ``with store.claim(…) as lease:`` (or ``async with``) while another holds
        the lease, it raises :class:`LeaseHeld` rather than returning None, which a ``with``
        cannot enter: the block never runs without the lease."""
        ms, job = _ms(ttl), _native.job_name(job)
        token, holder, until = self._db.claim(job, ms, owner or _native.default_owner())
        if token is None:
            if _entered_by_with(sys._getframe(1)):
                raise LeaseHeld(job, holder, until)
            return None
        return Lease(self, job, token, ms, owned=True, renew=renew)

    def lease(self, job: str, ttl: Duration = "10m", owner: Optional[str] = None) -> "Lease":
        """:meth:`claim`, raising :class:`LeaseHeld` when another holds the lease."""
        ms, job = _ms(ttl), _native.job_name(job)
        token, holder, until = self._db.claim(job, ms, owner or _native.default_owner())
        if token is None:
            raise LeaseHeld(job, holder, until)
        return Lease(self, job, token, ms, owned=True)

    def renew(self, job: str, token: int, ttl: Duration) -> bool:
        """Extends a lease held with ``token`` to ``ttl`` from now; False when fenced."""
        return self._db.renew(job, token, _ms(ttl))

    def release(self, job: str, token: int) -> bool:
        """Releases a lease held with ``token``; False when fenced."""
        return self._db.release(job, token)

    # Effects

    def effect(self, job: Optional[str] = None, token: Optional[int] = None, *, action: str,
               target: str, inputs: Optional[Inputs] = None, terms: Optional[str] = None,
               needs_approval: bool = False, observe: Optional[Callable[[str], Any]] = None,
               run_id: Optional[str] = None) -> "Effect":
        """Describes one effect under the job's fencing ``token``: ``action`` on ``target``
        with the consequential ``inputs`` (the effect key's facts), the ``terms`` a person
        approves, and an ``observe(key)`` callable asked before any retry of an effect left
        ``submitted`` or ``unknown`` (returns HAPPENED, NOT_HAPPENED or CANT_TELL).

        Without ``job`` and ``token``, under the current lease (:func:`current_lease`: the one
        entered with ``with store.claim(…)``, or the scheduler's under ``exactly run``); a
        :class:`UsageError` when there is none."""
        if token is None:
            lease = current_lease(self, job)
            if lease is None:
                raise _no_lease("store.effect()" if job is None else f"store.effect({job!r})")
            job, token = lease.job, lease.token
        elif job is None:
            raise UsageError("store.effect(token=…) needs the job the token is of")
        # Effect._init, inline (see there why).
        e: Effect = _new(Effect)
        e.store, e.token = self, token
        e.action, e.target = action, target
        e.inputs = {**inputs} if type(inputs) is dict else dict(inputs or {})
        e.terms, e.needs_approval, e.observe = terms, needs_approval, observe
        e._facts = _native.Facts(job, token, run_id, action, target, e.inputs, terms,
                                 needs_approval)
        return e

    def get(self, key: str) -> Optional[Dict[str, Any]]:
        """The ledger row of an effect key (``state``, ``response``, …), or None."""
        return self._db.effect_row(key)

    # People's decisions

    def approve(self, key: str, note: Optional[str] = None, by: Optional[str] = None) -> Decision:
        """Approves an effect awaiting approval (consumed once, by the next attempt)."""
        applied, words = self._db.decide(key, True, note, by)
        return Decision(applied, words, 0 if applied else 1)

    def deny(self, key: str, note: Optional[str] = None, by: Optional[str] = None) -> Decision:
        """Denies an effect awaiting approval: it becomes cancelled."""
        applied, words = self._db.decide(key, False, note, by)
        return Decision(applied, words, 0 if applied else 1)

    def resolve(self, key: str, how: Union[Resolution, str], note: Optional[str] = None,
                evidence: Optional[str] = None, force: bool = False,
                by: Optional[str] = None) -> Decision:
        """Resolves an open effect after checking the far side (``exactly resolve``)."""
        code, words = self._db.resolve(key, Resolution(how).value, note, evidence, force, by)
        return Decision(code == 0, words, code)

    def status(self) -> Dict[str, Any]:
        """The snapshot ``exactly status --json`` prints and the dashboard shows."""
        return self._db.status()


class Lease:
    """A job's lease with its fencing ``token``. As a context manager (sync or async) it renews
    itself in a thread with its own connection and is released at exit; ``lost`` turns True if
    a renewal finds it fenced."""

    def __init__(self, store: Store, job: str, token: int, ttl_ms: int, owned: bool = True,
                 renew: bool = True):
        self.store, self.job, self.token = store, job, token
        self.ttl_ms, self.owned, self.lost = ttl_ms, owned, False
        self._renew = renew and owned
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __repr__(self) -> str:
        return f"Lease(job={self.job!r}, token={self.token})"

    def renew(self, ttl: Optional[Duration] = None) -> bool:
        """Extends the lease to ``ttl`` (default: the claimed one) from now; False when fenced."""
        ok = self.store._db.renew(self.job, self.token, _ms(ttl) if ttl else self.ttl_ms)
        self.lost = self.lost or not ok
        return ok

    def release(self) -> bool:
        """Releases the lease (False when it was already taken over)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return self.store._db.release(self.job, self.token)

    def effect(self, *, action: str, target: str, inputs: Optional[Inputs] = None,
               terms: Optional[str] = None, needs_approval: bool = False,
               observe: Optional[Callable[[str], Any]] = None,
               run_id: Optional[str] = None) -> "Effect":
        """:meth:`Store.effect` under this lease's job and token."""
        # Effect._init, inline (see there why).
        e: Effect = _new(Effect)
        e.store, e.token = self.store, self.token
        e.action, e.target = action, target
        e.inputs = {**inputs} if type(inputs) is dict else dict(inputs or {})
        e.terms, e.needs_approval, e.observe = terms, needs_approval, observe
        e._facts = _native.Facts(self.job, e.token, run_id, action, target, e.inputs, terms,
                                 needs_approval)
        return e

    def _renewer(self) -> None:
        # Its own connection: the main one is busy for as long as a perform runs.
        db = _native.Db(self.store._db.location)
        try:
            while not self._stop.wait(self.ttl_ms / 3000):
                try:
                    if not db.renew(self.job, self.token, self.ttl_ms):
                        self.lost = True
                        return
                except Error:
                    continue  # a busy database: the next third of the lease tries again
        finally:
            db.close()

    def __enter__(self) -> "Lease":
        if self._renew and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._renewer, name=f"exactly-renew-{self.job}",
                                            daemon=True)
            self._thread.start()
        _context.push(_context.LEASES, self)  # the current lease of this thread or task
        return self

    def __exit__(self, *exc: Any) -> None:
        _context.pop(_context.LEASES, self)
        if self.owned:
            self.release()

    async def __aenter__(self) -> "Lease":
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        _context.pop(_context.LEASES, self)  # in this task's context, not the thread's
        if self.owned:
            await asyncio.to_thread(self.release)


_WITH_OPS = frozenset({"SETUP_WITH", "BEFORE_WITH", "BEFORE_ASYNC_WITH", "SETUP_ASYNC_WITH",
                       "LOAD_SPECIAL"})


def _entered_by_with(frame: Any) -> bool:
    """True when the caller's next step enters the value being returned as a context manager
    (``with f() as x:``): CPython's bytecode after the call says so (3.9 to 3.14)."""
    for ins in dis.get_instructions(frame.f_code):
        # f_lasti is the call (3.9, 3.10) or its last inline cache (3.11 on): the next real
        # instruction is what the caller does with the value.
        if ins.offset <= frame.f_lasti or ins.opname in ("CACHE", "EXTENDED_ARG", "COPY"):
            continue  # COPY: 3.14's `with` begins COPY, LOAD_SPECIAL __exit__, …
        return ins.opname in _WITH_OPS
    return False


def scheduled_lease(store: Store) -> Optional[Lease]:
    """Under ``exactly run``: the lease the scheduler claimed for this run (``EXACTLY_JOB``,
    ``EXACTLY_FENCING_TOKEN``), which the scheduler renews and releases; None elsewhere."""
    job, token = os.environ.get("EXACTLY_JOB"), os.environ.get("EXACTLY_FENCING_TOKEN")
    if not job or not token:
        return None
    return Lease(store, job, int(token), _ms("10m"), owned=False, renew=False)


from ._effect import Attempt, Effect, _no_lease, current_key, current_lease  # noqa: E402
from ._effect import _answer, _check_sync, _new, _raised, _refused  # noqa: E402
from ._decorator import effect  # noqa: E402

# What the native side builds and calls on a guarded call (an Outcome in one step, current_key()
# around perform), and the checks whose words are kept here (inputs and facts that are not
# plain, answers that are not a str or None, a raise from perform).
_native.bind(Outcome, {k.value: k for k in Kind}, _context.KEY, _answer, _raised, _inputs_json,
             _text, _check_sync, _refused)

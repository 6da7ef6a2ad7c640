"""What is current in this thread or asyncio task: the leases entered with ``with`` and the key
of the effect whose perform, observer or ``with`` block is running. Context variables, so each
thread and each task has its own (a task inherits its creator's at creation; a new thread starts
with none)."""
from contextvars import ContextVar
from typing import Any, Optional, Tuple

LEASES: "ContextVar[Tuple[Any, ...]]" = ContextVar("exactly_leases", default=())
"""The leases entered (``with lease:``), innermost last."""

ATTEMPTS: "ContextVar[Tuple[Any, ...]]" = ContextVar("exactly_attempts", default=())
"""The effects' ``with`` blocks entered, innermost last."""

KEY: "ContextVar[Optional[str]]" = ContextVar("exactly_key", default=None)
"""The key of the innermost effect whose perform, observer or block is running (None: none is);
each sets it and resets it to the one before when it ends. The native module sets it around
perform (``_native.Db.effect_run``)."""


def push(var: "ContextVar[Tuple[Any, ...]]", v: Any) -> None:
    var.set(var.get() + (v,))


def pop(var: "ContextVar[Tuple[Any, ...]]", v: Any) -> None:
    """Removes the innermost ``v`` (only that one: blocks may end out of order across threads
    sharing nothing but an object)."""
    now = var.get()
    for i in range(len(now) - 1, -1, -1):
        if now[i] is v:
            var.set(now[:i] + now[i + 1:])
            return

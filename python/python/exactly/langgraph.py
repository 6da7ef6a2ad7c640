"""A LangGraph node whose side effect happens once per thread, however often the graph is
resumed::

    from exactly.langgraph import effect_node

    def charge(state):                                   # the node: sends, returns its update
        r = cards.charge(state["customer"], state["cents"], idempotency_key=exactly.current_key())
        return {"charge_id": r.id}

    builder.add_node("charge", effect_node(charge, facts=("customer", "cents"), store=store,
                                           observe=charged))

The effect key is made of the graph's thread (``config["configurable"]["thread_id"]``, the
target), the node's name (the action) and the facts: the state fields named in ``facts`` (the
inputs) — never the run, so a resume after a crash, a retry or a second worker on the same
thread is the same effect. The node's update is the response the ledger keeps: a resume that
finds the effect done gets the same update back without sending (so keep it JSON: dicts, lists,
strings, numbers). An effect that did not end
done (in flight, unknown and not settled, awaiting approval, fenced) raises its
:class:`exactly.EffectNotDone`, so the node does not complete and the checkpointer keeps the
state before it; resuming the thread asks again, and the observer settles an ``unknown``.

A node that runs more than once in a thread sends once per distinct facts: name a field that
tells its runs apart (a tool call's id, a step number). LangGraph itself is imported by the
graph, not here: this module needs nothing but ``exactly``.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import exactly

from ._effect import _default_store, current_lease

__all__ = ["effect_node"]

State = Any
Update = Any


def _update(response: Optional[str]) -> Update:
    """The node's update as the ledger kept it (its JSON), for a resume that finds it done."""
    if not response:
        return None
    try:
        return json.loads(response)
    except ValueError:
        raise exactly.UsageError(
            f"the stored answer is not a node's update (JSON): {response[:80]!r}; an observer "
            "of a LangGraph node answers exactly.Happened(update_dict)") from None


def _field(state: State, name: str) -> Any:
    if isinstance(state, Mapping):
        if name not in state:
            raise exactly.UsageError(f"the state has no field {name!r} (named in facts=)")
        return state[name]
    if not hasattr(state, name):
        raise exactly.UsageError(f"the state has no field {name!r} (named in facts=)")
    return getattr(state, name)


def effect_node(fn: Callable[..., Any], *, facts: Sequence[str] = (),
                store: Optional[exactly.Store] = None, name: Optional[str] = None,
                observe: Optional[Callable[[str, State], Any]] = None,
                terms: Union[None, str, Callable[[State], str]] = None,
                needs_approval: bool = False, ttl: exactly.Duration = "1m",
                wait: Optional[float] = None) -> Callable[..., Any]:
    """Wraps the LangGraph node ``fn(state)`` (or ``fn(state, config)``; sync or ``async``)
    that performs a side effect and returns its state update. ``facts`` names the state fields
    the effect is about; ``name`` is the node's name (default: the one LangGraph runs it as);
    ``observe(key, state)`` answers whether the effect happened (``exactly.Happened(update)``,
    ``NOT_HAPPENED``, ``CANT_TELL``); ``store`` is the ledger (default ``exactly.open()``).

    The effect runs under the current lease when there is one (``with store.claim(…)`` around
    the graph's ``invoke``, or ``exactly run``); else under the thread's own lease, job
    ``langgraph:THREAD``, claimed for ``ttl`` for the node's duration (waiting up to ``wait``
    seconds, default twice ``ttl``, while a worker that died holding it lets it run out)."""
    takes_config = "config" in inspect.signature(fn).parameters
    is_async = inspect.iscoroutinefunction(fn)
    names = tuple(facts)

    def describe(state: State, config: Any) -> "tuple[exactly.Store, str, Dict[str, Any]]":
        conf = (config or {}).get("configurable") or {}
        thread = conf.get("thread_id")
        if thread is None:
            raise exactly.UsageError(
                "a LangGraph effect node needs the thread: invoke the graph with "
                "config={'configurable': {'thread_id': …}} and a checkpointer")
        node = name or ((config or {}).get("metadata") or {}).get("langgraph_node")
        if not node:
            raise exactly.UsageError("the node's name is unknown here: give effect_node name=")
        s = store if store is not None else _default_store()
        return s, str(thread), dict(
            action=str(node), target=str(thread),
            inputs={n: _field(state, n) for n in names},
            terms=terms(state) if callable(terms) else terms, needs_approval=needs_approval,
            observe=(lambda k: observe(k, state)) if observe else None)

    def call(state: State, config: Any, got: List[Update]) -> Callable[[str], Any]:
        args = (state, config) if takes_config else (state,)
        if is_async:
            async def asend(k: str) -> Update:
                got.append(await fn(*args))
                return got[-1]
            return asend

        def send(k: str) -> Update:
            got.append(fn(*args))
            return got[-1]
        return send

    def ended(out: exactly.Outcome, got: List[Update]) -> Update:
        out.raise_for_outcome()
        # Sent now: the update as the node made it; found done: as the ledger kept it.
        return got[-1] if got and out.outcome == exactly.Kind.DONE else _update(out.response)

    # `config` by that name and unannotated (or RunnableConfig): LangGraph passes it then.
    if is_async:
        async def anode(state: State, config=None) -> Update:  # type: ignore[no-untyped-def]
            s, thread, args = describe(state, config)
            got: List[Update] = []
            lease = current_lease(s)
            if lease is not None:
                return ended(await s.effect(lease.job, lease.token, **args).arun(
                    call(state, config, got)), got)
            held = await asyncio.to_thread(_claim, s, thread, ttl, wait)
            async with held:
                return ended(await held.effect(**args).arun(call(state, config, got)), got)
        return _named(anode, fn)

    def node(state: State, config=None) -> Update:  # type: ignore[no-untyped-def]
        s, thread, args = describe(state, config)
        got: List[Update] = []
        lease = current_lease(s)
        if lease is not None:
            return ended(s.effect(lease.job, lease.token, **args).run(
                call(state, config, got)), got)
        with _claim(s, thread, ttl, wait) as held:
            return ended(held.effect(**args).run(call(state, config, got)), got)
    return _named(node, fn)


def _claim(store: exactly.Store, thread: str, ttl: exactly.Duration,
           wait: Optional[float]) -> exactly.Lease:
    """The thread's lease, waiting while another holds it (a worker that died holding it lets
    it run out)."""
    job = f"langgraph:{thread}"
    limit = wait if wait is not None else 2 * exactly._ms(ttl) / 1000
    deadline = time.monotonic() + limit
    while True:
        lease = store.claim(job, ttl=ttl)
        if lease is not None:
            return lease
        if time.monotonic() >= deadline:
            return store.lease(job, ttl=ttl)  # LeaseHeld, naming who holds it
        time.sleep(0.05)


def _named(node: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    # Not functools.wraps: its __wrapped__ would show LangGraph fn's signature, without config.
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        if hasattr(fn, attr):
            setattr(node, attr, getattr(fn, attr))
    return node

"""``@exactly.effect``: a function that performs an effect, guarded by the ledger. The key's
facts come from the function's arguments, named (``target=``, ``inputs=``) or derived from its
named parameters; the lease is the one passed first, else the current one."""
from __future__ import annotations

import functools
import inspect
import sys
from typing import (TYPE_CHECKING, Any, Callable, Coroutine, Dict, Optional, Sequence, Tuple,
                    TypeVar, Union, cast, overload)

from ._effect import _no_lease, current_lease
from ._native import UsageError

if TYPE_CHECKING:
    if sys.version_info >= (3, 10):
        from typing import Concatenate, ParamSpec, Protocol
    else:
        from typing_extensions import Concatenate, ParamSpec, Protocol
    from . import Effect, Inputs, Lease, Outcome

    P = ParamSpec("P")
    R_co = TypeVar("R_co", covariant=True)

    class _Guarded(Protocol[P, R_co]):
        """A decorated function: called with its own arguments, after a :class:`Lease` or
        without one under a current lease."""

        @overload
        def __call__(self, lease: Lease, /, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

        @overload
        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    class _TakesKey(Protocol[P, R_co]):
        """A function whose first parameter is named ``key``."""

        def __call__(self, key: str, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    class _EffectDecorator(Protocol):
        """What ``@exactly.effect(action, target=…)`` makes of ``fn(key, *args)``."""

        @overload
        def __call__(  # type: ignore[overload-overlap, unused-ignore]
            self, fn: Callable[Concatenate[str, P], Coroutine[Any, Any, Any]]
        ) -> _Guarded[P, Coroutine[Any, Any, Outcome]]: ...

        @overload
        def __call__(
            self, fn: Callable[Concatenate[str, P], Any]
        ) -> _Guarded[P, Outcome]: ...

    class _DerivedDecorator(Protocol):
        """What ``@exactly.effect(action)`` makes of ``fn(key, *args)`` or ``fn(*args)``: the
        parameter named ``key`` first, if any, is the key's, the others the caller's."""

        @overload
        def __call__(  # type: ignore[overload-overlap, unused-ignore]
            self, fn: _TakesKey[P, Coroutine[Any, Any, Any]]
        ) -> _Guarded[P, Coroutine[Any, Any, Outcome]]: ...

        @overload
        def __call__(  # type: ignore[overload-overlap, unused-ignore]
            self, fn: _TakesKey[P, Any]
        ) -> _Guarded[P, Outcome]: ...

        @overload
        def __call__(  # type: ignore[overload-overlap, unused-ignore]
            self, fn: Callable[P, Coroutine[Any, Any, Any]]
        ) -> _Guarded[P, Coroutine[Any, Any, Outcome]]: ...

        @overload
        def __call__(self, fn: Callable[P, Any]) -> _Guarded[P, Outcome]: ...

_NAMED = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
          inspect.Parameter.KEYWORD_ONLY)


def _derive(action: str, fn: Callable[..., Any], skip: int, target: Optional[str],
            exclude: Sequence[str]) -> Tuple[str, Tuple[str, ...]]:
    """The derived rule: the target is the parameter named ``target``, else the first named
    one; the inputs are all the other named parameters; ``exclude`` takes parameters out
    (non-consequential ones: a client, a logger). ``*args``/``**kwargs`` could carry facts
    the key would miss, so they must be excluded by name."""
    params = list(inspect.signature(fn).parameters.values())[skip:]
    names = [p.name for p in params]
    where = f"@exactly.effect({action!r}) on {getattr(fn, '__qualname__', fn)!r}"
    for x in exclude:
        if x not in names:
            raise UsageError(f"{where}: exclude names {x!r}, which is not a parameter")
    for p in params:
        if p.kind not in _NAMED and p.name not in exclude:
            star = "*" if p.kind == inspect.Parameter.VAR_POSITIONAL else "**"
            raise UsageError(
                f"{where}: the key's facts are the named parameters, and {star}{p.name} could "
                f"carry more: name it in exclude=, or give target= and inputs=")
    named = [p.name for p in params if p.kind in _NAMED and p.name not in exclude]
    if target is None:
        if not named:
            raise UsageError(f"{where}: no parameter to be the target (give target=)")
        target = "target" if "target" in named else named[0]
    return target, tuple(n for n in named if n != target)


def _target_text(where: str, v: Any) -> str:
    # str(obj) of anything else could differ from run to run (an address): a new key each time.
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    raise UsageError(f"{where}: the target is {type(v).__name__} {v!r}, not a str or an int: "
                     "give target= a parameter or a callable that makes it a string")


@overload
def effect(action: str, *, target: Union[str, Callable[..., str]],
           inputs: Union[Sequence[str], Callable[..., "Inputs"], None] = None,
           terms: Union[None, str, Callable[..., str]] = None, needs_approval: bool = False,
           observe: Optional[Callable[..., Any]] = None) -> "_EffectDecorator": ...


@overload
def effect(action: str, *, inputs: Union[Sequence[str], Callable[..., "Inputs"], None] = None,
           exclude: Sequence[str] = (), terms: Union[None, str, Callable[..., str]] = None,
           needs_approval: bool = False,
           observe: Optional[Callable[..., Any]] = None) -> "_DerivedDecorator": ...


def effect(action: str, *, target: Union[None, str, Callable[..., str]] = None,
           inputs: Union[Sequence[str], Callable[..., "Inputs"], None] = None,
           exclude: Sequence[str] = (), terms: Union[None, str, Callable[..., str]] = None,
           needs_approval: bool = False, observe: Optional[Callable[..., Any]] = None) -> Any:
    """Decorates a function that performs an effect; the decorated function is called with its
    own arguments (after a :class:`Lease`, or with none under a current lease: :func:`current_lease`)
    and gives an :class:`Outcome` (an awaitable one for an ``async def``, run by
    :meth:`Effect.arun`).

    Explicit: ``target`` names the argument that is the target (or computes it), ``inputs`` the
    consequential arguments (or computes the dict; none when not given), and the function
    receives the key as its first argument::

        @exactly.effect("send-invoice", target="customer", inputs=("month",))
        def send_invoice(key, customer, month, amount): ...

    Derived, with no ``target``: the target is the parameter named ``target``, else the first;
    the inputs every other named parameter except those in ``exclude`` (a function with
    ``*args`` or ``**kwargs`` must exclude them). A first parameter named ``key`` receives the
    key; a function without one reads it with :func:`current_key`::

        @exactly.effect("charge", exclude=("client",))
        def charge(customer, cents, client):
            return client.charge(customer, cents, idempotency_key=exactly.current_key())

    The target must be a str or an int, the inputs JSON values. ``observe`` receives the key
    and the same arguments."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        first = next(iter(sig.parameters), None)
        derived = target is None
        takes_key = not derived or first == "key"
        skip = 1 if takes_key else 0
        ins: Union[Sequence[str], Callable[..., Inputs]] = inputs if inputs is not None else ()
        tgt: Union[str, Callable[..., str]]
        if derived:
            named_target, named_inputs = _derive(action, fn, skip, None, exclude)
            tgt = named_target
            if inputs is None:
                ins = named_inputs
        else:
            tgt = cast("Union[str, Callable[..., str]]", target)
        where = f"@exactly.effect({action!r}) on {fn.__qualname__!r}"
        is_async = inspect.iscoroutinefunction(fn)

        def describe(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Effect, Tuple[Any, ...]]:
            from . import Lease
            lease: Optional[Lease] = None
            if args and isinstance(args[0], Lease):
                lease, args = args[0], args[1:]
            if lease is None:
                lease = current_lease()
                if lease is None:
                    raise _no_lease(f"{fn.__qualname__}()")
            bound = sig.bind(*((None,) * skip), *args, **kwargs)
            bound.apply_defaults()
            facts = dict(list(bound.arguments.items())[skip:])
            if callable(tgt):
                t = tgt(**facts)
            else:
                if tgt not in facts:
                    raise UsageError(f"{where}: the target {tgt!r} was not given")
                t = _target_text(where, facts[tgt]) if derived else str(facts[tgt])
            i = ins(**facts) if callable(ins) else {n: facts[n] for n in ins}
            tm = terms(**facts) if callable(terms) else terms
            obs = (lambda k: observe(k, *args, **kwargs)) if observe else None
            return lease.effect(action=action, target=t, inputs=i, terms=tm,
                                needs_approval=needs_approval, observe=obs), args

        def perform(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Callable[[str], Any]:
            if takes_key:
                return lambda k: fn(k, *args, **kwargs)
            return lambda k: fn(*args, **kwargs)

        if is_async:
            @functools.wraps(fn)
            async def arun(*args: Any, **kwargs: Any) -> Outcome:
                eff, args = describe(args, kwargs)
                return await eff.arun(perform(args, kwargs))
            return arun

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Outcome:
            eff, args = describe(args, kwargs)
            return eff.run(perform(args, kwargs))
        return run

    return wrap

"""The per-thread "current strategy / replica context" stack, low enough that anything may use it.

TF keeps this stack on the default graph, behind a ``LazyLoader`` cycle between
``distribute_lib`` and ``distribution_strategy_context``. Here it lives in a module that imports
nothing from mwms_mpi and holds the strategy and context objects opaquely, so the strategy layer
(above) and the values layer (below it) can both read it without an import cycle
(docs/architecture.md, "Layers"). What each context means for an API call (TF's
``_require_*`` checks, ``enter_or_assert_strategy`` and the "Mixing different strategies"
error) is decided here too, once, for both layers.

Semantics, as in TF:

- The stack is per thread. A thread that has entered no scope (a new ``threading.Thread``
  included) sees the process default entry: TF's default strategy in its default replica
  context. That is what replica threads need: each starts clean and enters its own replica
  context, and a scope entered in one replica thread is invisible to the others.
- Entering and leaving are save/restore of the whole stack (``push`` returns a token that
  ``reset`` restores, and ``scope`` does both in ``try/finally``), so an exception, or a callee
  that forgot to leave, cannot leave a stale entry behind.
- The default entry is registered by the distribute layer (``set_default_factory``) and built
  lazily on first use, under a lock, so importing this module creates nothing.

A ``threading.local`` is used rather than ``contextvars``: a context variable would follow
``asyncio`` tasks and, in newer Pythons (``sys.flags.thread_inherit_context``), new threads,
whereas TF's stack is strictly per thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, SupportsInt

__all__ = [
    "CommunicatorLike",
    "ContextEntry",
    "ExtendedLike",
    "ReplicaContextLike",
    "StrategyLike",
    "Token",
    "current",
    "enter_or_assert_strategy",
    "get_default",
    "has_strategy",
    "in_cross_replica_context",
    "in_replica_function",
    "push",
    "require_cross_replica_or_default",
    "require_replica_context",
    "reset",
    "scope",
    "set_default_factory",
    "stack",
    "thread_scope",
]


# -- the typed seams: what the layers below the strategy use of it -----------------------------
#
# The strategy layer (distribute/, layer 4) is above values/ (layer 3) and beside train/ and
# optimizers/; they see a strategy, its ``extended`` and its communicator only through these
# protocols, so ``mypy`` checks both sides of the seam (the concrete classes are checked against
# them where they are put into a ``ContextEntry`` or handed to a variable) and nothing reaches
# a private attribute by ``getattr``. Each protocol lists only what is used below. A reduction
# op and ``CommunicationOptions`` are ``Any`` here: this module imports nothing from mwms_mpi.


class CommunicatorLike(Protocol):
    """What the layers above ``collective/`` call on a strategy's communicator.

    Structural, because this layer cannot import ``mwms_mpi.collective.Communicator`` (layer
    2), which satisfies it. It is also what ``collective.call_context.api_call`` needs of a
    communicator (``size``, ``calls``, ``refuse``), so one can be passed there as it is.

    Attributes:
      rank: this process's rank in the communicator.
      size: the number of ranks.
      name: the communicator's name, for messages.
    """

    rank: int
    size: int
    name: str

    @property
    def calls(self) -> int:
        """The number of calls numbered so far (each agreed by every rank)."""
        ...

    def min_max(self, value: int = 0, purpose: str = "min_max") -> tuple[int, int]:
        """``(min, max)`` of ``value`` over every rank, agreed as ``purpose``."""
        ...

    def refuse(self, error: Exception) -> None:
        """Raises ``error``'s agreed refusal on every rank (a public API's argument error)."""
        ...


class ExtendedLike(Protocol):
    """What the values, train and optimizer layers use of ``strategy.extended``.

    ``_create_variable`` is TF's own name for the hook ``Variable(...)`` calls inside a scope
    (``StrategyExtended._create_variable``); it is a member here so the call is typed, not
    looked up by name.
    """

    @property
    def communicator(self) -> CommunicatorLike | None:
        """The communicator across workers, or ``None`` (one worker, or no collectives)."""
        ...

    @property
    def should_checkpoint(self) -> bool:
        """Whether this worker writes the real checkpoint files (the chief)."""
        ...

    def _create_variable(self, next_creator: Callable[..., Any], **kwargs: Any) -> Any: ...

    def reduce_to(
        self,
        reduce_op: Any,
        value: Any,
        destinations: Any,
        options: Any = None,
    ) -> Any:
        """``tf.distribute.StrategyExtended.reduce_to``."""
        ...

    def batch_reduce_to(
        self,
        reduce_op: Any,
        value_destination_pairs: Sequence[tuple[Any, Any]],
        options: Any = None,
    ) -> list[Any]:
        """``tf.distribute.StrategyExtended.batch_reduce_to``."""
        ...

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        """``tf.distribute.StrategyExtended.broadcast_to``."""
        ...

    def update(
        self,
        var: Any,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        group: bool = True,
    ) -> Any:
        """``tf.distribute.StrategyExtended.update``."""
        ...

    def colocate_vars_with(self, colocate_with_variable: Any) -> AbstractContextManager[None]:
        """``tf.distribute.StrategyExtended.colocate_vars_with``."""
        ...


class StrategyLike(Protocol):
    """What the layers below the strategy use of a ``tf.distribute.Strategy``.

    ``_extended`` is the attribute behind ``extended``: :func:`require_cross_replica_or_default`
    compares it by identity on every ``reduce``, where the property would be one more call.
    """

    @property
    def extended(self) -> ExtendedLike:
        """``tf.distribute.Strategy.extended``."""
        ...

    @property
    def _extended(self) -> ExtendedLike: ...

    @property
    def num_replicas_in_sync(self) -> int:
        """``tf.distribute.Strategy.num_replicas_in_sync``."""
        ...

    @property
    def cluster_resolver(self) -> Any:
        """``tf.distribute.Strategy.cluster_resolver`` (``None`` without a cluster)."""
        ...

    def scope(self) -> AbstractContextManager[Any]:
        """``tf.distribute.Strategy.scope``."""
        ...

    def reduce(self, reduce_op: Any, value: Any, axis: Any) -> Any:
        """``tf.distribute.Strategy.reduce``."""
        ...

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """``tf.distribute.Strategy.experimental_local_results``."""
        ...


class ReplicaContextLike(Protocol):
    """What the layers below the strategy use of a ``tf.distribute.ReplicaContext``."""

    @property
    def strategy(self) -> StrategyLike:
        """The strategy this replica runs under."""
        ...

    @property
    def replica_id_in_sync_group(self) -> SupportsInt:
        """The replica's id in ``[0, num_replicas_in_sync)`` (an int32 scalar, or an int)."""
        ...

    def merge_call(
        self,
        merge_fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """``tf.distribute.ReplicaContext.merge_call``."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class ContextEntry:
    """One level of the stack: TF's ``_ThreadMode`` (strategy, cross-replica ctx, replica ctx).

    In cross-replica context (inside ``strategy.scope()``) ``cross_replica_context`` is the
    strategy and ``replica_context`` is ``None``; inside a replica function it is the other way
    round; the default entry has the default strategy and the default replica context.

    Attributes:
      strategy: the current strategy object (``None`` only in the empty default, before the
        distribute layer registered its default).
      cross_replica_context: the strategy when in cross-replica context, else ``None``.
      replica_context: the current replica context object, else ``None``.
      default_scope: pushed by the default strategy's ``scope()`` (``default_scope_entry``).
    """

    strategy: StrategyLike | None
    cross_replica_context: StrategyLike | None
    replica_context: ReplicaContextLike | None
    default_scope: bool = False


Token = tuple[ContextEntry, ...]
"""A saved stack, as returned by :func:`push` and :func:`stack`; restored by :func:`reset`."""

_EMPTY_DEFAULT = ContextEntry(None, None, None)


class _ThreadStack(threading.local):
    # A class attribute, so a thread that never assigned sees the empty stack.
    entries: Token = ()


_local = _ThreadStack()
_default_lock = threading.RLock()  # reentrant, so a factory that reads the stack fails clearly
_building = False
_default_factory: Callable[[], ContextEntry] | None = None
_default_entry: ContextEntry | None = None


def set_default_factory(factory: Callable[[], ContextEntry] | None) -> None:
    """Registers how to build the process default entry (the default strategy's context):
    ``factory`` returns that ``ContextEntry``. The distribute layer calls this at import; the
    factory runs once, on the first :func:`current` that finds an empty stack. Registering again
    drops the built default, so a test may install its own; ``None`` unregisters (the default
    is then all ``None``)."""
    global _default_factory, _default_entry
    with _default_lock:
        _default_factory = factory
        _default_entry = None


def get_default() -> ContextEntry:
    """Returns the process default entry, building it on first use: the entry the registered
    factory built, or ``ContextEntry(None, None, None)`` when no factory is registered.

    Raises:
      RuntimeError: if the factory itself asks for the default (it would recurse forever).
    """
    global _default_entry, _building
    entry = _default_entry
    if entry is not None:
        return entry
    with _default_lock:
        if _default_entry is not None:
            return _default_entry
        if _default_factory is None:
            return _EMPTY_DEFAULT
        if _building:
            raise RuntimeError("The default distribution context was requested while being built.")
        _building = True
        try:
            _default_entry = _default_factory()
        finally:
            _building = False
        return _default_entry


def current() -> ContextEntry:
    """Returns this thread's innermost entry, or the process default when its stack is empty."""
    entries = _local.entries
    if entries:
        return entries[-1]
    return get_default()


def stack() -> Token:
    """Returns this thread's stack, innermost last (empty: the default applies).

    A thread that starts replica work can pass this to :func:`thread_scope` in the new thread to
    start from the same entries.
    """
    return _local.entries


def push(entry: ContextEntry) -> Token:
    """Makes ``entry`` current in this thread and returns the token that undoes it.

    For objects with separate ``__enter__``/``__exit__`` (``strategy.scope()``); everything
    else should use :func:`scope`.

    Args:
      entry: the entry to make current.

    Returns:
      The previous stack, to pass to :func:`reset`.
    """
    previous = _local.entries
    _local.entries = (*previous, entry)
    return previous


def reset(token: Token) -> None:
    """Restores this thread's stack to ``token``, as saved by :func:`push` or :func:`stack`."""
    _local.entries = token


@contextlib.contextmanager
def scope(entry: ContextEntry) -> Iterator[ContextEntry]:
    """Makes ``entry`` current for the ``with`` block, and restores the stack however it ends.

    Args:
      entry: the entry to make current.

    Yields:
      ``entry``.
    """
    previous = push(entry)
    try:
        yield entry
    finally:
        _local.entries = previous


@contextlib.contextmanager
def thread_scope(entries: Token) -> Iterator[None]:
    """Installs a whole stack (usually another thread's :func:`stack`) for the ``with`` block.

    Replica threads use it to start from the entries of the thread that launched them; on exit
    the thread's own stack comes back.

    Args:
      entries: the stack to install, innermost last.
    """
    previous = _local.entries
    _local.entries = tuple(entries)
    try:
        yield
    finally:
        _local.entries = previous


# -- what the contexts mean: TF's checks, one home for the strategy and the values layers ------


def in_cross_replica_context() -> bool:
    """``tf.distribute.in_cross_replica_context()``: in ``scope()`` or a merge function."""
    return current().cross_replica_context is not None


def in_replica_function() -> bool:
    """Whether a replica context other than the default one is current: inside
    ``strategy.run`` / ``call_for_each_replica`` (the default strategy's ``run`` included). TF's
    test ``get_replica_context() not in (None, _get_default_replica_context())``
    (``StrategyExtendedV2.update``), the one home of it: outside any strategy the default
    replica context is current, and inside ``scope()`` or a merge function there is none."""
    ctx = current().replica_context
    return ctx is not None and ctx is not get_default().replica_context


def has_strategy() -> bool:
    """``tf.distribute.has_strategy()``: whether a non-default strategy is current."""
    return current().strategy is not get_default().strategy


def default_scope_entry() -> ContextEntry:
    """What the default strategy's ``scope()`` pushes. As TF's ``_DefaultDistributionContext``
    it changes no context (in the default strategy's ``run`` or merge function too): the current
    entry again, marked; at top level the default entry itself, which nothing else pushes (and
    ``require_cross_replica_or_default`` knows by identity)."""
    entry = current()
    return entry if entry is get_default() else dataclasses.replace(entry, default_scope=True)


def default_scope_entered() -> bool:
    """Whether the default strategy's ``scope()`` is entered in this thread (replica threads
    inherit the stack): an entry ``default_scope_entry`` made is on it."""
    default = _default_entry
    return any(entry is default or entry.default_scope for entry in _local.entries)


def check_default_scope_creator() -> None:
    """The check of the variable creator TF's default scope installs (its
    ``_require_strategy_scope_strategy(default)``), for a strategy's creator to call where TF
    calls ``next_creator``: inside the default scope only the default strategy makes variables.

    Raises:
      RuntimeError: "Mixing different tf.distribute.Strategy objects: <current> is not
        <default>", in a strategy's scope entered inside the default one.
    """
    entry = current()
    default = get_default().strategy
    if entry.strategy is not default and default_scope_entered():
        raise _wrong_strategy_scope(default, entry)


def _wrong_strategy_scope(strategy: Any, entry: ContextEntry) -> RuntimeError:
    """TF's error for a call made outside ``strategy``'s scope, or inside another's."""
    if entry.strategy is get_default().strategy:
        return RuntimeError(f'Need to be inside "with strategy.scope()" for {strategy}')
    return RuntimeError(
        f"Mixing different tf.distribute.Strategy objects: {entry.strategy} is not {strategy}"
    )


def require_cross_replica_or_default(extended: Any, error_message: str | None = None) -> None:
    """Raises unless in ``extended``'s cross-replica context or the default replica context.

    TF's ``_require_cross_replica_or_default_context_extended``.

    Raises:
      RuntimeError: in a replica context, or in another strategy's scope (TF's messages).
    """
    entries = _local.entries  # current(), read inline: every cross-replica API checks this
    entry = entries[-1] if entries else (_default_entry or get_default())
    cross = entry.cross_replica_context
    if cross is not None and cross._extended is extended:
        return
    if entry is _default_entry:  # built by now: the entry was read
        return
    strategy = extended._container_strategy()
    if entry.strategy is not strategy:
        raise _wrong_strategy_scope(strategy, entry)
    raise RuntimeError(
        error_message
        or "Method requires being in cross-replica context, use get_replica_context().merge_call()"
    )


def require_replica_context(replica_ctx: Any) -> None:
    """Raises unless ``replica_ctx`` is this thread's current replica context (TF's check).

    Raises:
      RuntimeError: outside ``call_for_each_replica``, or in another replica context.
    """
    entry = current()
    if entry.replica_context is replica_ctx:
        return
    if entry.replica_context is None:
        raise RuntimeError("Need to be inside `call_for_each_replica()`")
    if entry.strategy is replica_ctx.strategy:
        raise RuntimeError("Mismatching ReplicaContext.")
    raise RuntimeError(
        f"Mismatching tf.distribute.Strategy objects: {entry.strategy} is not "
        f"{replica_ctx.strategy}."
    )


_IN_SCOPE_ALREADY: AbstractContextManager[Any] = contextlib.nullcontext()


def enter_or_assert_strategy(strategy: Any) -> AbstractContextManager[Any]:
    """Enters ``strategy``'s scope outside any strategy; inside one, asserts it is ``strategy``.

    Used as ``with enter_or_assert_strategy(s):``. A plain function returning the scope (or a
    shared no-op context when ``strategy`` is current already), not a generator context: every
    variable read and assign asks it, and a generator's frames cost several of them per call.

    Raises:
      RuntimeError: inside another strategy's scope (TF's "Mixing different" error), raised
        by the call itself, before the ``with`` block is entered.
    """
    entry = current()
    if entry.strategy is get_default().strategy:
        return strategy.scope()
    if entry.strategy is not strategy:
        raise _wrong_strategy_scope(strategy, entry)
    return _IN_SCOPE_ALREADY

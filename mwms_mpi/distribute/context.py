"""The module functions that say which strategy and context this thread is in (TF's names)."""

from __future__ import annotations

from typing import Any, cast

from mwms_mpi import _context
from mwms_mpi.distribute.distribute_lib import Strategy
from mwms_mpi.distribute.replica_context import ReplicaContext


def get_replica_context() -> ReplicaContext | None:
    """Returns the current ``tf.distribute.ReplicaContext`` or ``None``.

    ``None`` in cross-replica context (inside ``strategy.scope()`` but outside ``run``, or in a
    ``merge_call`` function); the default replica context outside any strategy.
    """
    # the distribute layer is the only writer of the stack: its entries hold its own classes
    return cast("ReplicaContext | None", _context.current().replica_context)


def get_cross_replica_context() -> Strategy | None:
    """Returns the current strategy if in a cross-replica context, else ``None``.

    TF 2.21's ``distribute_lib.get_cross_replica_context`` (exported by neither ``tf.distribute``
    nor ``tf.compat.v1``): the thread mode's cross-replica context, so ``None`` outside any
    strategy too (the default replica context is current there; exactly one of this and
    ``get_replica_context()`` is ``None``).
    """
    return cast("Strategy | None", _context.current().cross_replica_context)


def in_cross_replica_context() -> bool:
    """Returns ``True`` if in a cross-replica context (``scope()`` or a ``merge_call`` fn)."""
    return _context.in_cross_replica_context()


def get_strategy() -> Strategy:
    """Returns the current ``tf.distribute.Strategy`` object (the default one if none)."""
    return cast(Strategy, _context.current().strategy)


def has_strategy() -> bool:
    """Return if there is a current non-default ``tf.distribute.Strategy``."""
    return _context.has_strategy()


_global_tokens: list[Any] = []


def experimental_set_strategy(strategy: Strategy | None) -> None:
    """Set a ``tf.distribute.Strategy`` as current without ``with strategy.scope()``.

    ``None`` removes the strategy set this way.

    Raises:
      RuntimeError: if called inside a ``with strategy.scope():`` block.
    """
    old_scope = _global_tokens.pop() if _global_tokens else None
    if old_scope is not None:
        old_scope.__exit__(None, None, None)
    if has_strategy():
        raise RuntimeError("Must not be called inside a `tf.distribute.Strategy` scope.")
    if strategy is not None:
        new_scope = strategy.scope()
        new_scope.__enter__()
        _global_tokens.append(new_scope)

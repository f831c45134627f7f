"""TF's ``DistributedDelegate`` operators: Python operators on a ``Mirrored`` act on one
component, the current replica's (the first outside a replica context).

A ``Mirrored`` holds equal values on every replica, so any component gives the same answer;
TF's ``values.DistributedDelegate`` defines the arithmetic, comparison, bitwise, indexing and
unary operators this way (``Mirrored((7, 8)) + 1 == 8``: its ``testOperatorOverride``). The
results are the component's own results (new values; nothing is written).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from mwms_mpi import _context


def current_component(values: tuple[Any, ...]) -> Any:
    """The current replica's value of ``values`` (one per local replica), else the first."""
    ctx = _context.current().replica_context
    if ctx is None:
        return values[0]
    return values[int(ctx.replica_id_in_sync_group) % len(values)]


def _forward(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: Any, other: Any) -> Any:
        return op(self._get(), other)

    return method


def _reflected(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: Any, other: Any) -> Any:
        return op(other, self._get())

    return method


def _unary(op: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def method(self: Any) -> Any:
        return op(self._get())

    return method


class DelegateOperators:
    """The operators of TF's ``DistributedDelegate``, on ``self._get()``."""

    __slots__ = ()

    def _get(self) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    __add__ = _forward(operator.add)
    __radd__ = _reflected(operator.add)
    __sub__ = _forward(operator.sub)
    __rsub__ = _reflected(operator.sub)
    __mul__ = _forward(operator.mul)
    __rmul__ = _reflected(operator.mul)
    __truediv__ = _forward(operator.truediv)
    __rtruediv__ = _reflected(operator.truediv)
    __floordiv__ = _forward(operator.floordiv)
    __rfloordiv__ = _reflected(operator.floordiv)
    __mod__ = _forward(operator.mod)
    __rmod__ = _reflected(operator.mod)
    __lt__ = _forward(operator.lt)
    __le__ = _forward(operator.le)
    __gt__ = _forward(operator.gt)
    __ge__ = _forward(operator.ge)
    __and__ = _forward(operator.and_)
    __rand__ = _reflected(operator.and_)
    __or__ = _forward(operator.or_)
    __ror__ = _reflected(operator.or_)
    __xor__ = _forward(operator.xor)
    __rxor__ = _reflected(operator.xor)
    __getitem__ = _forward(operator.getitem)
    __matmul__ = _forward(operator.matmul)
    __rmatmul__ = _reflected(operator.matmul)
    __rpow__ = _reflected(operator.pow)
    __invert__ = _unary(operator.invert)
    __neg__ = _unary(operator.neg)
    __abs__ = _unary(operator.abs)

    def __pow__(self, other: Any, modulo: Any = None) -> Any:
        return pow(self._get(), other, modulo)

"""ReplicaContext: what a replica function can call (TF's ``ReplicaContext``).

``all_reduce`` and ``all_gather`` go through ``merge_call`` (as TF's eager multi-worker path
does): the merge function runs once per worker in cross-replica context, names itself and the
value's nested structure to the communicator's agreement (so ``{"a": x, "b": y}`` on one worker
and ``{"a": x, "c": y}`` on another raise instead of summing ``b`` with ``c``) and calls the
strategy's batch reduction or gather. A value this replica cannot convert raises inside that
agreement too, so the other workers raise with it instead of waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _context, nest
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.distribute._types import StrategyProtocol
from mwms_mpi.types import CommunicationOptions, ReduceOp, as_reduce_op, reduce_op_and_text
from mwms_mpi.values import IndexedSlices
from mwms_mpi.values.convert import as_array
from mwms_mpi.values.structure import of as structure_of


class ReplicaContext:
    """A class with a collection of APIs that can be called in a replica context.

    Args:
      strategy: the ``Strategy`` this context belongs to.
      replica_id_in_sync_group: the global id of the replica.
    """

    def __init__(self, strategy: StrategyProtocol, replica_id_in_sync_group: int) -> None:
        self._strategy = strategy
        self._replica_id = int(replica_id_in_sync_group)
        self._entry = _context.ContextEntry(strategy, None, self)
        self._merge_entry = _context.ContextEntry(strategy, strategy, None)
        self._tokens: list[_context.Token] = []

    def __enter__(self) -> ReplicaContext:
        self._tokens.append(_context.push(self._entry))
        return self

    def __exit__(self, *exc: object) -> None:
        _context.reset(self._tokens.pop())

    @property
    def strategy(self) -> StrategyProtocol:
        """The current ``tf.distribute.Strategy`` object."""
        return self._strategy

    @property
    def num_replicas_in_sync(self) -> int:
        """Returns number of replicas that are kept in sync."""
        return self._strategy.num_replicas_in_sync

    @property
    def replica_id_in_sync_group(self) -> Any:
        """Returns the id of the replica, in ``[0, num_replicas_in_sync)`` (an int32 tensor)."""
        return np.int32(self._replica_id)

    @property
    def devices(self) -> Any:
        """Returns the devices this replica is to be executed on, as a tuple of strings.

        TF's ``(device_util.current(),)``: eagerly, outside any ``tf.device`` (which mwms_mpi
        has not), the current device is ``''``. The strategies' replica contexts
        (``MirroredReplicaContext``) answer their replica's devices instead.

        Raises:
          RuntimeError: unless this is the current replica context (TF checks it first).
        """
        _context.require_replica_context(self)
        return ("",)

    def merge_call(
        self,
        merge_fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Merge args across replicas and run ``merge_fn`` in a cross-replica context.

        ``merge_fn(strategy, *args, **kwargs)`` runs once per worker with ``PerReplica`` values
        regrouped from every local replica's arguments; each replica gets its part of the
        result back. As in TF, only ``kwargs=None`` becomes ``{}`` and ``args`` is unpacked as
        given (``*args``, ``**kwargs``: Python's own errors for a non-iterable or a list).
        """
        _context.require_replica_context(self)
        return self._merge_call(merge_fn, args, {} if kwargs is None else kwargs)

    def _merge_call(self, merge_fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """TF's default implementation, for one replica without a replica thread (the default
        strategy's contexts): ``merge_fn``'s result itself, unselected."""
        with _context.scope(self._merge_entry):
            return merge_fn(self._strategy, *args, **kwargs)

    def all_reduce(
        self,
        reduce_op: ReduceOp | str,
        value: Any,
        options: CommunicationOptions | None = None,
    ) -> Any:
        """All-reduces ``value`` (a nest of arrays or ``IndexedSlices``) across replicas.

        Returns:
          A nest of the same structure holding the reduced values (numpy arrays).
        """
        op, op_text = reduce_op_and_text(reduce_op)
        structure, failed, sparse = "", None, False
        try:
            structure = structure_of(value)
            flat = [_reduce_leaf(v) for v in nest.flatten(value)]
            sparse = any(type(v) is IndexedSlices for v in flat)
        except Exception as exc:  # any (2**70 overflows): raised in the agreement, everywhere
            flat, failed = [], exc

        def batch_all_reduce(strategy: StrategyProtocol, *value_flat: Any) -> list[Any]:
            ext = strategy.extended
            api = "ReplicaContext.all_reduce"
            with api_call(ext._communicator, api, op_text, structure=structure):
                if failed is not None:
                    raise failed
                checked = op if op is not None else as_reduce_op(reduce_op)
                return ext.batch_reduce_to(checked, [(v, v) for v in value_flat], options)

        reduced = self.merge_call(batch_all_reduce, args=flat)
        if not sparse:  # TF's custom_gradient wrapper returns tensors (identities)
            reduced = [as_array(r) if _python_leaf(r) else r for r in reduced]
        return nest.pack_sequence_as(value, reduced)

    def _update(
        self,
        var: Any,
        fn: Callable[..., Any],
        args: Any = (),
        kwargs: dict[str, Any] | None = None,
        group: bool = True,
    ) -> Any:
        """TF's private ``ReplicaContext._update`` (TF's tests call it): ``fn(component,
        *args, **kwargs)`` on each component of ``var``, in a ``merge_call``; returns the local
        replica's result."""
        extended: Any = self._strategy.extended
        return extended._replica_ctx_update(var, fn, args, kwargs or {}, group)

    def all_gather(self, value: Any, axis: int, options: CommunicationOptions | None = None) -> Any:
        """All-gathers ``value`` (a nest of arrays) across replicas along ``axis``.

        Raises:
          NotImplementedError: for ``IndexedSlices``.
        """
        structure, failed = "", None
        try:
            structure = structure_of(value)
            flat = nest.flatten(value)
            if any(isinstance(v, IndexedSlices) for v in flat):
                raise NotImplementedError("all_gather does not support IndexedSlices")
            flat = [_reduce_leaf(v) for v in flat]
        except Exception as exc:  # any: raised in the agreement, on every worker
            flat, failed = [], exc

        def batch_all_gather(strategy: StrategyProtocol, *value_flat: Any) -> list[Any]:
            ext = strategy.extended
            api, axis_text = "ReplicaContext.all_gather", str(axis)
            with api_call(ext._communicator, api, axis=axis_text, structure=structure):
                if failed is not None:
                    raise failed
                return [ext._gather_to(v, v, axis, options) for v in value_flat]

        gathered = self.merge_call(batch_all_gather, args=flat)
        # TF's custom_gradient wrapper returns tensors (identities), as for all_reduce
        gathered = [as_array(g) if _python_leaf(g) else g for g in gathered]
        return nest.pack_sequence_as(value, gathered)


class DefaultReplicaContext(ReplicaContext):
    """The replica context outside any strategy: replica 0 of 1, ids as Python ints (TF's)."""

    @property
    def replica_id_in_sync_group(self) -> int:
        """``0``, a Python int (TF's ``_DefaultReplicaContext``)."""
        return 0


def _python_leaf(value: Any) -> bool:
    """A leaf TF's ``all_reduce`` hands to ``batch_reduce_to`` unconverted: a Python number,
    string or ``None`` (not a tensor, so TF's ``_batch_reduce_destination`` is the value)."""
    return value is None or isinstance(value, bool | int | float | complex | str | bytes)


def _reduce_leaf(value: Any) -> Any:
    """One leaf of ``all_reduce`` (``all_gather``) as ``batch_reduce_to`` (``_gather_to``)
    receives it. TF converts nothing there: a Python leaf reaches the strategy as it is, so
    MirroredStrategy fails reading its ``dtype`` in a reduction (AttributeError) and returns
    one that every replica passed (the same object: TF's regroup keeps it unwrapped) from a
    gather, MultiWorkerMirroredStrategy refuses it as a destination (ValueError) and the
    default strategy returns it (converted after, as TF's gradient wrapper converts it).
    Arrays, variables and other libraries' arrays are converted here, where every API takes
    values in (``as_array``); ``IndexedSlices`` pass."""
    if type(value) is IndexedSlices or _python_leaf(value):
        return value
    return as_array(value)

"""Reductions across replicas: TF's CrossDeviceOps template and its implementations.

``CrossDeviceOps`` is TF's template: its public ``reduce``/``batch_reduce``/``broadcast``/
``_gather`` convert and validate their arguments, take TF's shortcut for one value on one
worker, and call the ``*_implementation`` methods that subclasses override.
``ReductionToOneDevice`` (and the single-worker ``NcclAllReduce``/``HierarchicalCopyAllReduce``)
sum a worker's replicas in-process, in replica order; ``collective_ops.CollectiveAllReduce``
is the implementation across workers. ``MEAN`` is the sum divided by the number of replicas
(TF's ``truediv`` dtypes, ``values.convert.truediv``); sparse ``IndexedSlices`` are
concatenated, never densified. TF's rules for values that are not per-replica
(``reduce_non_distributed_value``) and for destinations live here too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _arrays
from mwms_mpi.distribute import cross_device_utils as utils
from mwms_mpi.types import CommunicationOptions, ReduceOp
from mwms_mpi.values import DistributedValues, IndexedSlices, Mirrored, PerReplica, regroup
from mwms_mpi.values._base import VariableBase
from mwms_mpi.values.convert import as_array, is_tensor
from mwms_mpi.values.foreign import is_foreign_array

__all__ = [
    "CrossDeviceOps",
    "HierarchicalCopyAllReduce",
    "NcclAllReduce",
    "ReductionToOneDevice",
    "as_array",
    "check_component_devices",
    "check_device_spec",
    "check_devices",
    "check_devices_match",
    "reduce_non_distributed_value",
    "validate_destinations",
]


def _is_destination(destinations: Any) -> bool:
    return isinstance(
        destinations,
        DistributedValues | VariableBase | np.ndarray | np.generic | IndexedSlices | str,
    ) or _arrays.is_device_array(destinations)  # a Python number is none (TF refuses it)


def validate_destinations(destinations: Any) -> None:
    """Validates the ``destinations`` is one of the expected types (TF's check).

    Raises:
      ValueError: for another type, or an empty device string.
    """
    kind = type(destinations)
    if kind is str:
        if not destinations:
            raise ValueError("destinations can not be empty")
        return
    if kind is np.ndarray or kind is PerReplica or kind is Mirrored:  # a batch's usual kinds
        return
    if not _is_destination(destinations):
        raise ValueError(
            "destinations must be one of a `DistributedValues` object, a tf.Variable object, "
            "or a device string."
        )
    if isinstance(destinations, str) and not destinations:
        raise ValueError("destinations can not be empty")


def reduce_non_distributed_value(
    reduce_op: ReduceOp, value: Any, destinations: Any, num_replicas_in_graph: int
) -> Any:
    """Reduces a value that is not a ``DistributedValues`` (TF's rule, its corners included).

    A value that is not a tensor (a Python number or list; arrays and variables are tensors
    here) and is all zeros reduces to zeros (a Python number then fails on ``.shape``, as in
    TF); ``MEAN`` returns the value (arrays copied: a result never aliases the caller's
    array); ``SUM`` is allowed only with one replica and broadcasts the value to
    ``destinations``.

    Raises:
      ValueError: for a ``DistributedValues``, ``SUM`` with more than one replica, or invalid
        ``destinations``.
      AttributeError: for a Python number equal to zero (TF's own failure).
    """
    if isinstance(value, DistributedValues):
        raise ValueError(
            "You are passing a `DistributedValues` to `reduce_non_distributed_value`, which is "
            "not allowed."
        )
    if type(value) is not np.ndarray and is_foreign_array(value):  # results are numpy (CuPy)
        value = as_array(value)
    if not is_tensor(value) and np.all(np.asarray(value == 0)):
        return np.zeros(value.shape, dtype=value.dtype)
    if reduce_op == ReduceOp.MEAN:
        return _arrays.array_copy(value) if _is_array(value) else value
    if num_replicas_in_graph != 1:
        raise ValueError(
            f"A non-DistributedValues value {value} cannot be reduced with the given reduce op "
            f"{reduce_op}."
        )
    validate_destinations(destinations)
    # TF's simple_broadcast: get_devices_from(destinations) first (a string, the usual
    # destination, straight to its cached parse: a steady-state reduce's call count)
    if type(destinations) is str:
        check_device_spec(destinations)
    else:
        check_devices(destinations)
    return utils.mirror(as_array(value).copy(), destinations)


def check_component_devices(value: DistributedValues) -> None:
    """TF's ``get_devices_from(value)`` of a ``DistributedValues``: the device of each
    component, read as ``v.device`` (``DistributedValues._devices``). Only tensors have one
    (arrays and numpy scalars here, as numpy 2's do in TF): a Python number, string, ``None``
    or list fails on the read. TF's own failure, kept (docs/architecture.md, "Deliberate
    differences").

    Raises:
      AttributeError: for the first component that is not a tensor (TF's message).
    """
    for component in value._values:
        if not is_tensor(component):
            raise AttributeError(f"'{type(component).__name__}' object has no attribute 'device'")


_DEVICE_TYPES = frozenset({"CPU", "GPU", "TPU", "CUSTOM", "EPU"})  # TF's _VALID_DEVICE_TYPES


@functools.lru_cache(maxsize=256)
def check_device_spec(spec: str) -> None:
    """TF's parse of a device string (``DeviceSpec._string_to_components``), for its errors
    only: where TF canonicalizes a destination string, one it cannot parse fails. Cached: the
    answer depends on the string alone (an error is not cached, so it is raised every time).

    Raises:
      ValueError: for an unknown attribute, two device types, or a non-integer index (TF's
        messages; the last is Python's ``int()``).
    """
    device_type = None
    for y in (part.split(":") for part in spec.split("/")):
        ly = len(y)
        if ly == 2 and y[0] in ("job", "replica", "task"):
            if y[0] != "job":
                int(y[1])  # TF's setters: _as_int_or_none
        elif (ly in (1, 2) and y[0].upper() in _DEVICE_TYPES) or (ly == 3 and y[0] == "device"):
            if device_type is not None:
                raise ValueError(
                    f"Multiple device types are not allowed while parsing the device spec: {spec}."
                )
            device_type = y[0].upper() if ly < 3 else y[1]
            if ly > 1 and y[-1] != "*":
                int(y[-1])
        elif y[0] != "":
            raise ValueError(
                f"Unknown attribute '{y[0]}' is encountered while parsing the device spec: "
                f"'{spec}'."
            )


def check_devices(value: Any) -> None:
    """TF's ``get_devices_from`` for its errors: a ``DistributedValues``'s components must be
    tensors, a string must parse as a device (arrays and variables have a device)."""
    if isinstance(value, DistributedValues):
        check_component_devices(value)
    elif isinstance(value, str):
        check_device_spec(value)


def check_devices_match(left: Any, right: Any) -> None:
    """TF's ``_devices_match(left, right)`` for its errors: nothing when ``left is right``,
    else the devices of ``left`` then of ``right`` (:func:`check_devices`)."""
    if left is not right:
        check_devices(left)
        check_devices(right)


def _is_array(value: Any) -> bool:
    """A numpy or CuPy array (results must never alias one)."""
    return isinstance(value, np.ndarray) or _arrays.is_device_array(value)


def check_pairs(value_destination_pairs: Sequence[Any]) -> list[Any]:
    """``value_destination_pairs`` as a list, each element checked to be a pair.

    Raises:
      ValueError: for an element that is not a ``(value, destinations)`` pair.
    """
    pairs = list(value_destination_pairs)
    for pair in pairs:
        if (type(pair) is not tuple and not isinstance(pair, list)) or len(pair) != 2:
            raise ValueError(
                "batch_reduce_to: each element of value_destination_pairs must be a "
                f"(value, destinations) pair, got {pair!r}"
            )
    return pairs


def _normalize_pairs(value_destination_pairs: Sequence[Any]) -> list[tuple[Any, Any]]:
    """TF's ``_normalize_value_destination_pairs``: pairs of (value, destinations) checked.

    Each value as the implementations receive it (``cross_device_utils.replica_value``). A
    batch whose values and destinations are all plain arrays comes back as
    ``cross_device_utils.ArrayPairs``: for those, the rules hold as they are (an array is a
    valid destination and its own one replica's value), decided here once for the batch.

    Raises:
      ValueError: for an element that is not a ``(value, destinations)`` pair, or invalid
        destinations.
    """
    pairs = utils.ArrayPairs()
    plain = True
    append, validate, replica_value = pairs.append, validate_destinations, utils.replica_value
    for pair in value_destination_pairs:  # per gradient: names bound once, outside the loop
        if type(pair) is not tuple or len(pair) != 2:
            (pair,) = check_pairs([pair])  # a list pair passes; anything else raises
            pair = tuple(pair)
        value, destinations = pair
        if type(value) is np.ndarray and type(destinations) is np.ndarray:
            append(pair)  # both rules' answer for two plain arrays: the pair as it is
            continue
        plain = False
        value = replica_value(value)  # TF converts the value before it checks destinations
        validate(destinations)
        append((value, destinations))
    return pairs if plain else list(pairs)


def _kept_or_copied(value: Any) -> Any:
    """A variable as it is (TF returns it), anything else as a fresh array."""
    return value if isinstance(value, VariableBase) else as_array(value).copy()


class CrossDeviceOps:
    """Base class for cross-device reduction and broadcasting algorithms (TF's template).

    The public methods convert and validate; subclasses override ``reduce_implementation``,
    ``batch_reduce_implementation``, ``broadcast_implementation`` and
    ``_gather_implementation``.
    """

    # TF's property: the workers each running this program (an implementation across workers
    # sets its own); a plain attribute, read on every reduction.
    _num_between_graph_workers: int = 1

    def reduce(
        self,
        reduce_op: ReduceOp,
        per_replica_value: Any,
        destinations: Any,
        options: CommunicationOptions | None = None,
    ) -> Any:
        """Reduces ``per_replica_value`` to ``destinations``.

        Args:
          reduce_op: a ``ReduceOp`` (SUM or MEAN).
          per_replica_value: a ``DistributedValues``, or an array-like treated as one value.
          destinations: a ``DistributedValues``, an array, a variable or a device string.
          options: a ``CommunicationOptions``, merged over the strategy's.

        Returns:
          A ``Mirrored`` over ``destinations`` (the value itself for one destination).

        Raises:
          ValueError: if ``destinations`` is not valid.
        """
        per_replica_value, shortcut = self._prepare(per_replica_value, destinations)
        if shortcut is not None:
            return shortcut
        return self.reduce_implementation(reduce_op, per_replica_value, destinations, options)

    def batch_reduce(
        self,
        reduce_op: ReduceOp,
        value_destination_pairs: Sequence[tuple[Any, Any]],
        options: CommunicationOptions | None = None,
    ) -> list[Any]:
        """Reduces many ``(value, destinations)`` pairs in one batch.

        Returns:
          A list of ``Mirrored`` values (or plain values for one destination), in order.

        Raises:
          ValueError: for an element that is not a pair, or invalid destinations.
        """
        pairs = _normalize_pairs(value_destination_pairs)
        first = utils.local_values(pairs[0][0]) if pairs else ()
        if self._num_between_graph_workers == 1 and len(first) == 1:
            for v, d in pairs:  # TF's _all_devices_match reads every pair's devices
                check_devices_match(v, d)
            # TF regroups the values themselves: a variable (its components regroup to their
            # container) comes back as itself; an array as a copy ("Results are values")
            return [
                regroup(tuple(_kept_or_copied(x) for x in utils.local_values(v)), Mirrored)
                for v, _ in pairs
            ]
        return self.batch_reduce_implementation(reduce_op, pairs, options)

    def broadcast(self, tensor: Any, destinations: Any) -> Any:
        """Broadcasts ``tensor`` to ``destinations`` (a ``Mirrored`` of copies)."""
        validate_destinations(destinations)
        return self.broadcast_implementation(tensor, destinations)

    def _gather(
        self,
        per_replica_value: Any,
        destinations: Any,
        axis: int,
        options: CommunicationOptions | None = None,
    ) -> Any:
        """Concatenates every replica's value along ``axis``, in replica-id order.

        Raises:
          NotImplementedError: for ``IndexedSlices``.
        """
        if isinstance(per_replica_value, IndexedSlices):
            raise NotImplementedError("gather/all_gather does not support IndexedSlices")
        per_replica_value, shortcut = self._prepare(per_replica_value, destinations)
        if shortcut is not None:
            return shortcut
        return self._gather_implementation(per_replica_value, destinations, axis, options)

    def _prepare(self, per_replica_value: Any, destinations: Any) -> tuple[Any, Any]:
        """The value converted, destinations checked, and TF's shortcut.

        Returns:
          The value (a ``DistributedValues``, or an array: one replica's value, passed on as
          it is), and the result when there is one value on one worker (a copy of it on each
          destination: nothing to reduce or gather), else ``None``.
        """
        per_replica_value = utils.replica_value(per_replica_value)
        validate_destinations(destinations)
        values = utils.local_values(per_replica_value)
        if len(values) == 1 and self._num_between_graph_workers == 1:
            check_devices_match(per_replica_value, destinations)  # TF's _devices_match
            return per_replica_value, utils.mirror(as_array(values[0]).copy(), destinations)
        return per_replica_value, None

    def reduce_implementation(
        self,
        reduce_op: ReduceOp,
        per_replica_value: Any,
        destinations: Any,
        options: CommunicationOptions | None,
    ) -> Any:
        """Implementation of ``reduce`` (for subclass implementers).

        ``per_replica_value`` is a ``DistributedValues``, or an array (one replica's value), as
        TF documents it ("or a ``tf.Tensor`` like object"); ``cross_device_utils.local_values``
        gives its values either way.
        """
        raise NotImplementedError("_reduce method must be implemented in descendants.")

    def batch_reduce_implementation(
        self,
        reduce_op: ReduceOp,
        value_destination_pairs: Sequence[tuple[Any, Any]],
        options: CommunicationOptions | None,
    ) -> list[Any]:
        """Implementation of ``batch_reduce`` (for subclass implementers).

        Each value is a ``DistributedValues`` or an array, as for ``reduce_implementation``.
        """
        raise NotImplementedError(
            "batch_reduce_implementation method must be implemented in descendants."
        )

    def broadcast_implementation(self, tensor: Any, destinations: Any) -> Any:
        """Implementation of ``broadcast``: a copy of ``tensor`` on each destination (the first
        too: a result never aliases the caller's array)."""
        return utils.mirror(as_array(tensor).copy(), destinations)

    def _gather_implementation(
        self, per_replica_value: Any, destinations: Any, axis: int, options: Any
    ) -> Any:
        raise NotImplementedError("_gather method must be implemented in descendants.")


class _LocalReduction(CrossDeviceOps):
    """Reduces one worker's replicas in-process, in replica order (no communication)."""

    _accumulation_fn: Callable[[list[Any]], Any] | None = None

    def reduce_implementation(
        self,
        reduce_op: ReduceOp,
        per_replica_value: Any,
        destinations: Any,
        options: CommunicationOptions | None,
    ) -> Any:
        """Sums (MEAN: averages) the replicas' values, then copies the result to each device."""
        values = utils.local_values(per_replica_value)
        reduced = utils.simple_reduce(values, reduce_op, self._accumulation_fn)
        return self.broadcast(reduced, destinations)

    def batch_reduce_implementation(
        self,
        reduce_op: ReduceOp,
        value_destination_pairs: Sequence[tuple[Any, Any]],
        options: CommunicationOptions | None,
    ) -> list[Any]:
        """``reduce_implementation`` of each pair."""
        return [
            self.reduce_implementation(reduce_op, value, destinations, options)
            for value, destinations in value_destination_pairs
        ]

    def _gather_implementation(
        self, per_replica_value: Any, destinations: Any, axis: int, options: Any
    ) -> Any:
        gathered = utils.concat_for_gather(utils.local_values(per_replica_value), axis)
        return self.broadcast(gathered.copy(), destinations)


class ReductionToOneDevice(_LocalReduction):
    """A CrossDeviceOps implementation that copies values to one device to reduce.

    Args:
      reduce_to_device: the intermediate device to reduce to (a device string; informational).
      accumulation_fn: a function adding a list of arrays; ``add_n`` in replica order by
        default.
    """

    def __init__(
        self,
        reduce_to_device: str | None = None,
        accumulation_fn: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        self.reduce_to_device = reduce_to_device
        self._accumulation_fn = accumulation_fn

    def reduce_implementation(
        self,
        reduce_op: ReduceOp,
        per_replica_value: Any,
        destinations: Any,
        options: CommunicationOptions | None,
    ) -> Any:
        """TF's: the device to reduce to comes from ``destinations`` (the value's when they
        are empty), read before the sum (:func:`check_devices`), then the in-process sum."""
        # TF's check_destinations: a tensor or variable by its device (always set here)
        given = is_tensor(destinations) or bool(destinations)
        check_devices(destinations if given else per_replica_value)
        return super().reduce_implementation(reduce_op, per_replica_value, destinations, options)


class _AllReduceCrossDeviceOps(_LocalReduction):
    """All-reduce algorithms for one worker (TF's ``AllReduceCrossDeviceOps``), in-process."""

    def __init__(self, all_reduce_alg: str = "nccl", num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(
                f"NCCL all-reduce requires num_packs >= 0, but {num_packs} is specified"
            )
        self._all_reduce_alg = all_reduce_alg
        self._num_packs = num_packs


class NcclAllReduce(_AllReduceCrossDeviceOps):
    """NCCL all-reduce for one worker's replicas; here an in-process sum in replica order.

    Args:
      num_packs: a non-negative integer; the number of packs to split values into.

    Raises:
      ValueError: if ``num_packs`` is negative.
    """

    def __init__(self, num_packs: int = 1) -> None:
        super().__init__("nccl", num_packs)


class HierarchicalCopyAllReduce(_AllReduceCrossDeviceOps):
    """Hierarchical copy all-reduce for one worker; here an in-process sum in replica order.

    Args:
      num_packs: a non-negative integer; the number of packs to split values into.

    Raises:
      ValueError: if ``num_packs`` is negative.
    """

    def __init__(self, num_packs: int = 1) -> None:
        if num_packs < 0:
            raise ValueError(
                f"HierarchicalCopy requires num_packs >= 0, but {num_packs} is specified"
            )
        super().__init__("hierarchical_copy", num_packs)

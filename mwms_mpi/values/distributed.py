"""DistributedValues, PerReplica and Mirrored, and TF's regroup/select_replica over nests."""

from __future__ import annotations

import collections.abc as abc
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from mwms_mpi import _arrays, nest
from mwms_mpi.values._base import VariableBase
from mwms_mpi.values.convert import is_tensor
from mwms_mpi.values.delegate import DelegateOperators, current_component


class DistributedValues:
    """Base class for representing distributed values (``tf.distribute.DistributedValues``).

    A subclass instance holds one value per local replica of this worker, in local replica
    order. ``values`` is that tuple; ``Strategy.experimental_local_results`` returns it too.

    Args:
      values: the per-replica values, one per local replica.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Sequence[Any]) -> None:
        self._values = tuple(values)

    @property
    def values(self) -> tuple[Any, ...]:
        """Returns the per-replica values, in local replica order."""
        return self._values

    @property
    def _primary(self) -> Any:
        """The value of the first local replica."""
        return self._values[0]

    def _get_on_device_or_primary(self) -> Any:
        return self._values[0]

    def __len__(self) -> int:
        return len(self._values)

    def __str__(self) -> str:
        body = ",\n".join(f"  {i}: {v}" for i, v in enumerate(self._values))
        return f"{type(self).__name__}:{{\n{body}\n}}"

    def __repr__(self) -> str:
        body = ",\n".join(f"  {i}: {v!r}" for i, v in enumerate(self._values))
        return f"{type(self).__name__}:{{\n{body}\n}}"


class PerReplica(DistributedValues):
    """Holds a map from replica to unsynchronized values (TF's ``PerReplica``)."""

    __slots__ = ()


class Mirrored(DelegateOperators, DistributedValues):
    """Holds a map from replica to values which are kept in sync (TF's ``Mirrored``).

    As TF's ``DistributedDelegate``, attribute reads that ``Mirrored`` does not define, and
    Python's operators, go to one component (``_get``: the current replica's, else the first),
    so ``mirrored.shape``, ``mirrored.dtype`` or ``mirrored + 1`` work (``delegate.py``).
    """

    __slots__ = ()

    def _get(self) -> Any:
        return current_component(self._values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._get(), name)  # the same component the operators use

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        return np.asarray(_arrays.to_host(self._values[0]), dtype=dtype)


def is_mirrored(value: Any) -> bool:
    """Whether ``value`` is kept in sync across replicas (a ``Mirrored``)."""
    return isinstance(value, Mirrored)


def value_container(value: Any) -> Any:
    """Returns the container ``value`` belongs to (a distributed variable), or ``value``.

    TF's ``distribute_utils.value_container``, the one home of the rule (``regroup`` and
    ``StrategyExtended.value_container`` call it): a component's live distributed variable;
    the value itself when it belongs to none, or its variable is gone (the weak reference
    answers ``None``: TF returns the value, not ``None``). A distributed variable holds
    ``_distributed_container = None``, so it is its own container, as TF's ``isinstance``
    test makes it.
    """
    container = getattr(value, "_distributed_container", None)
    if container is not None and callable(container):
        found = container()
        if found is not None:
            return found
    return value


class _HasWorkerDevices(Protocol):
    @property
    def worker_devices(self) -> tuple[str, ...]: ...


def local_results(extended: _HasWorkerDevices, value: Any) -> tuple[Any, ...]:
    """TF's ``StrategyExtendedV2._local_results``: ``value``'s parts, one per local replica.

    The one home of the rule, bound as ``StrategyExtended._local_results`` (so that
    ``strategy.reduce`` reaches it in one call); only the default strategy has its own,
    ``(value,)``, as in TF. A distributed value gives its components; a nest gives one copy
    per local replica with every ``DistributedValues`` in it indexed, distributed variables
    included (TF's ``get_values``; ``select_replica`` keeps variables whole); anything else
    gives ``(value,)``.

    Args:
      extended: the strategy's extended object (its ``worker_devices`` count the replicas).
      value: what ``run`` or a reduction returned, or a variable.
    """
    if type(value) is np.ndarray:  # the common result (a k = 1 reduction): not a nest
        return (value,)
    if isinstance(value, DistributedValues):
        return value._values
    if nest.is_nested(value):
        return tuple(
            nest.map_structure(functools.partial(_component, i), value)
            for i in range(len(extended.worker_devices))
        )
    return (value,)


def _component(index: int, x: Any) -> Any:
    return x._values[index] if isinstance(x, DistributedValues) else x


def regroup(values: Sequence[Any], wrap_class: Any = PerReplica, always_wrap: bool = False) -> Any:
    """Makes a nest per-replica into a nest of PerReplica/Mirrored values (TF's rule).

    Lists, tuples, namedtuples and mappings are regrouped element-wise; leaves that are the
    same object on every replica are returned unwrapped unless ``always_wrap``.

    Args:
      values: one nest per local replica, all of the same structure.
      wrap_class: the class wrapping each leaf (or a callable taking the tuple of values).
      always_wrap: wrap even leaves that are the same object on every replica.

    Returns:
      The regrouped nest.

    Raises:
      AssertionError: if the replicas' structures differ (TF's regroup asserts; the message
        here names both).
    """
    v0 = values[0]
    if isinstance(v0, list):
        _check_lengths(values, list)
        return [
            regroup(tuple(v[i] for v in values), wrap_class, always_wrap) for i in range(len(v0))
        ]
    if isinstance(v0, tuple):
        _check_lengths(values, tuple)
        regrouped = tuple(
            regroup(tuple(v[i] for v in values), wrap_class, always_wrap) for i in range(len(v0))
        )
        if hasattr(v0, "_fields"):
            return v0._make(regrouped)  # type: ignore[attr-defined]
        return regrouped
    if isinstance(v0, abc.Mapping):
        keys = set(v0.keys())
        for v in values[1:]:
            if not isinstance(v, abc.Mapping) or set(v.keys()) != keys:
                raise AssertionError(  # TF's class: its regroup asserts
                    f"Replicas returned different structures: keys {sorted(map(str, keys))} "
                    f"and {v!r}"
                )
        mapping_type: Any = type(v0)
        return mapping_type(
            {key: regroup(tuple(v[key] for v in values), wrap_class, always_wrap) for key in v0}
        )
    same = all(v is v0 for v in values[1:])
    if same and not always_wrap:
        container = value_container(v0)
        return container
    container = value_container(v0)
    if container is not v0 and all(value_container(v) is container for v in values[1:]):
        return container
    return wrap_class(tuple(values))


def update_regroup(
    local_results: Callable[[Any], tuple[Any, ...]], updates: Sequence[Any], group: bool
) -> Any:
    """What ``extended.update`` returns: the per-device results regrouped (TF's rule).

    With ``group=False``, a tuple of the local results per leaf. With ``group=True``, a leaf
    that is one object on every device (or one device's result) is returned as is; results
    that are tensors (arrays, variables: read now, as TF's ``identity`` reads them) become a
    ``Mirrored``; other per-device objects are dropped (TF groups them into an op: ``None``).

    Args:
      local_results: the strategy's ``experimental_local_results``.
      updates: one result per local device, in device order.
      group: TF's ``group`` argument.
    """
    if not group:
        return nest.map_structure(local_results, regroup(updates, Mirrored))
    return regroup(updates, _grouped_mirrored)


def _grouped_mirrored(values: tuple[Any, ...]) -> Any:
    if len(values) == 1:
        return Mirrored(values)
    if not all(is_tensor(v) for v in values):
        return None
    return Mirrored(tuple(_identity(v) for v in values))


def _identity(value: Any) -> Any:
    if isinstance(value, VariableBase):
        return value.read_value()
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def _check_lengths(values: Sequence[Any], kind: type) -> None:
    v0: Any = values[0]
    rest: Sequence[Any] = values[1:]
    for v in rest:
        if not isinstance(v, list | tuple) or not isinstance(v, kind) or len(v) != len(v0):
            length = len(v) if isinstance(v, list | tuple) else "?"
            raise AssertionError(  # TF's class: its regroup asserts
                f"Values to regroup had different structures: {type(v).__name__} of length "
                f"{length} and {kind.__name__} of length "
                f"{len(v0)}: {v!r}, {v0!r}"
            )


def _select(replica_id: int, x: Any) -> Any:
    if isinstance(x, DistributedValues) and not isinstance(x, VariableBase):  # not a variable
        return x._values[replica_id]
    return x


def select_replica(replica_id: int, structured: Any) -> Any:
    """Specializes a nest of regular and per-replica values for one local replica.

    Args:
      replica_id: the local replica index.
      structured: a nest that may hold ``DistributedValues``.

    Returns:
      The nest with every ``DistributedValues`` (other than distributed variables) replaced by
      its value for ``replica_id``.
    """
    if isinstance(structured, DistributedValues):
        return _select(replica_id, structured)
    if not nest.is_nested(structured):
        return structured
    return nest.map_structure(lambda x: _select(replica_id, x), structured)


def select_replica_mirrored(replica_id: int, structured: Any) -> Any:
    """As :func:`select_replica`, after checking every distributed value is ``Mirrored``.

    Raises:
      TypeError: if a ``DistributedValues`` in ``structured`` is not mirrored.
    """
    for x in nest.flatten(structured):
        if isinstance(x, DistributedValues) and not is_mirrored(x):
            raise TypeError(f"Expected value to be mirrored across replicas: {x} in {structured}.")
    return select_replica(replica_id, structured)

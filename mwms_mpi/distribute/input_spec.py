"""PerReplicaSpec and Optional: the type specs and optionals a distributed iterator hands out."""

from __future__ import annotations

from typing import Any

from mwms_mpi.data import TensorSpec, _optional
from mwms_mpi.values import DistributedValues

__all__ = ["Optional", "PerReplicaSpec"]


class PerReplicaSpec:
    """Type specification of a ``PerReplica`` value: one spec per local replica.

    Args:
      *value_specs: the spec of each replica's value.
    """

    __slots__ = ("_value_specs",)

    def __init__(self, *value_specs: Any) -> None:
        self._value_specs = tuple(value_specs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PerReplicaSpec):
            return NotImplemented
        return self._value_specs == other._value_specs

    def __hash__(self) -> int:
        return hash(self._value_specs)

    def __repr__(self) -> str:
        return f"PerReplicaSpec{self._value_specs!r}"


class Optional(_optional.Optional):
    """Represents a value that may or may not be present (``tf.experimental.Optional``); a
    distributed iterator's: the spec of a ``PerReplica`` value is a ``PerReplicaSpec``."""

    __slots__ = ()

    @staticmethod
    def _spec_of(value: Any) -> Any:
        if isinstance(value, DistributedValues):
            return PerReplicaSpec(*[TensorSpec.from_tensor(v) for v in value.values])
        return TensorSpec.from_tensor(value)

"""PerReplicaSpec and Optional: the type specs and optionals a distributed iterator hands out."""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi.data import TensorSpec
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


class Optional:
    """Represents a value that may or may not be present (``tf.experimental.Optional``).

    Make one with ``Optional.from_value(value)`` or ``Optional.empty(element_spec)``.
    """

    __slots__ = ("_element_spec", "_has_value", "_value")

    def __init__(self, value: Any, has_value: bool, element_spec: Any) -> None:
        self._value = value
        self._has_value = has_value
        self._element_spec = element_spec

    @staticmethod
    def empty(element_spec: Any) -> Optional:
        """Returns an ``Optional`` that has no value."""
        return Optional(None, False, element_spec)

    @staticmethod
    def from_value(value: Any) -> Optional:
        """Returns an ``Optional`` that wraps the given value."""
        return Optional(value, True, nest.map_structure(_spec_of, value))

    def has_value(self, name: str | None = None) -> np.ndarray:
        """Returns a 0-d boolean array that is True if this optional has a value."""
        del name
        return np.array(self._has_value)

    def get_value(self, name: str | None = None) -> Any:
        """Returns the value wrapped by this optional.

        Raises:
          InvalidArgumentError: if this optional has no value.
        """
        del name
        if not self._has_value:
            raise errors.InvalidArgumentError(
                None,
                "OptionalGetValue",
                "The given optional does not have a value. [Op:OptionalGetValue]",
            )
        return self._value

    @property
    def element_spec(self) -> Any:
        """The type specification of an element of this optional."""
        return self._element_spec


def _spec_of(value: Any) -> Any:
    if isinstance(value, DistributedValues):
        return PerReplicaSpec(*[TensorSpec.from_tensor(v) for v in value.values])
    return TensorSpec.from_tensor(value)

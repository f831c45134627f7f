"""``tf.experimental.Optional``: what ``get_next_as_optional`` returns, here so that a dataset's
own iterator (the default strategy's distributed iterator) hands one out as TF's does;
``distribute/input_spec.py`` extends it with the spec of a ``PerReplica``."""

from __future__ import annotations

from typing import Any, Self

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi.data.tensor_spec import TensorSpec


class Optional:
    """Represents a value that may or may not be present (``tf.experimental.Optional``).

    Make one with ``Optional.from_value(value)`` or ``Optional.empty(element_spec)``.
    """

    __slots__ = ("_element_spec", "_has_value", "_value")

    def __init__(self, value: Any, has_value: bool, element_spec: Any) -> None:
        self._value = value
        self._has_value = has_value
        self._element_spec = element_spec

    @classmethod
    def empty(cls, element_spec: Any) -> Self:
        """Returns an ``Optional`` that has no value."""
        return cls(None, False, element_spec)

    @classmethod
    def from_value(cls, value: Any) -> Self:
        """Returns an ``Optional`` that wraps the given value; its spec is the value's."""
        return cls(value, True, nest.map_structure(cls._spec_of, value))

    @staticmethod
    def _spec_of(value: Any) -> Any:
        return TensorSpec.from_tensor(value)

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

"""``tf.TensorSpec`` for numpy: what a dataset's elements look like, unknown dims as ``None``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["DatasetSpec", "TensorSpec"]


class TensorSpec:
    """Describes the type of an array: its shape (``None`` for an unknown dim) and dtype.

    Args:
      shape: the shape of the array; an unknown dimension is ``None``.
      dtype: the numpy dtype (anything ``np.dtype`` accepts).
      name: an optional name, kept for TF's signature.
    """

    __slots__ = ("_dtype", "_name", "_shape")

    def __init__(self, shape: Any, dtype: Any = np.float32, name: str | None = None) -> None:
        self._shape: tuple[int | None, ...] = tuple(
            None if dim is None else int(dim) for dim in shape
        )
        self._dtype = np.dtype(dtype)
        self._name = name

    @classmethod
    def from_tensor(cls, tensor: Any, name: str | None = None) -> TensorSpec:
        """Returns the ``TensorSpec`` that describes ``tensor`` (a numpy array or scalar)."""
        array = np.asarray(tensor)
        return cls(array.shape, array.dtype, name)

    @property
    def shape(self) -> tuple[int | None, ...]:
        """The shape, as a tuple of ints and ``None`` for unknown dims."""
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype."""
        return self._dtype

    @property
    def name(self) -> str | None:
        """The optional name."""
        return self._name

    def is_compatible_with(self, spec_or_tensor: Any) -> bool:
        """Returns True if ``spec_or_tensor`` (a spec or an array) fits this spec.

        Dtypes must be equal; shapes must have the same rank, and each known dim of either side
        must equal the other's dim where that is known.
        """
        other = (
            spec_or_tensor
            if isinstance(spec_or_tensor, TensorSpec)
            else TensorSpec.from_tensor(spec_or_tensor)
        )
        if self._dtype != other.dtype or len(self._shape) != len(other.shape):
            return False
        return all(
            a is None or b is None or a == b for a, b in zip(self._shape, other.shape, strict=True)
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorSpec):
            return NotImplemented
        return (self._shape, self._dtype, self._name) == (other.shape, other.dtype, other.name)

    def __hash__(self) -> int:
        return hash((self._shape, self._dtype.str, self._name))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self._shape}, dtype={self._dtype.name}, name={self._name!r})"


class DatasetSpec:
    """``tf.data.DatasetSpec``: the type of an element that is itself a dataset (``window``'s
    elements, the window ``group_by_window`` hands its ``reduce_func``).

    Args:
      element_spec: the element spec of the nested dataset.
      dataset_shape: the shape of the dataset value (``()``: one dataset).
      make: (no TF counterpart) wraps a pipeline node into a dataset, so that a function of
        such elements can be run on a probe dataset to infer its result's spec (TF traces it
        symbolically); not part of equality.
    """

    __slots__ = ("_dataset_shape", "_element_spec", "make")

    def __init__(
        self, element_spec: Any, dataset_shape: Any = (), make: Callable[[Any], Any] | None = None
    ) -> None:
        self._element_spec = element_spec
        self._dataset_shape: tuple[int | None, ...] = tuple(dataset_shape)
        self.make = make

    @property
    def element_spec(self) -> Any:
        """The element spec of the nested dataset."""
        return self._element_spec

    @property
    def shape(self) -> tuple[int | None, ...]:
        """The shape of the dataset value (``()``)."""
        return self._dataset_shape

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DatasetSpec):
            return NotImplemented
        return (self._element_spec, self._dataset_shape) == (
            other.element_spec,
            other.shape,
        )

    def __hash__(self) -> int:
        return hash(self._dataset_shape)

    def __repr__(self) -> str:
        shape = ", ".join("None" if d is None else str(d) for d in self._dataset_shape)
        return f"DatasetSpec({self._element_spec}, TensorShape([{shape}]))"

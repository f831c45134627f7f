"""IndexedSlices: a sparse set of rows of a dense array, as ``tf.IndexedSlices`` holds it."""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi import _arrays


class IndexedSlices:
    """A sparse representation of a set of tensor slices at given indices (``tf.IndexedSlices``).

    The dense array it represents has ``dense[indices[i]] = values[i]``; rows listed more than
    once add up when densified (``tf.convert_to_tensor`` does the same).

    Args:
      values: an array of any dtype with shape ``[D0, D1, ..., Dn]``.
      indices: a 1-D integer array with shape ``[D0]``.
      dense_shape: a 1-D integer array (or sequence) giving the dense shape, or ``None``.
    """

    __slots__ = ("_dense_shape", "_indices", "_values")

    def __init__(self, values: Any, indices: Any, dense_shape: Any = None) -> None:
        self._values = values
        self._indices = indices
        self._dense_shape = dense_shape

    @property
    def values(self) -> Any:
        """A `Tensor` containing the values of the slices."""
        return self._values

    @property
    def indices(self) -> Any:
        """A 1-D `Tensor` containing the indices of the slices."""
        return self._indices

    @property
    def dense_shape(self) -> Any:
        """A 1-D `Tensor` containing the shape of the corresponding dense tensor."""
        return self._dense_shape

    @property
    def dtype(self) -> Any:
        """The `DType` of elements in this tensor."""
        return self._values.dtype

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The shape of the dense tensor, or ``None`` when ``dense_shape`` is unknown."""
        if self._dense_shape is None:
            return None
        return tuple(int(d) for d in np.asarray(self._dense_shape).reshape(-1))

    @property
    def name(self) -> str:
        """The name of this `IndexedSlices` (TF graph names do not exist here)."""
        return ""

    @property
    def device(self) -> str:
        """The device of the values (always the host here)."""
        return "/job:localhost/replica:0/task:0/device:CPU:0"

    def copy(self) -> IndexedSlices:
        """A copy whose arrays are new (as ``ndarray.copy``): a result never aliases its input."""
        return IndexedSlices(self._values.copy(), self._indices.copy(), self._dense_shape)

    def __neg__(self) -> IndexedSlices:
        return IndexedSlices(-self._values, self._indices, self._dense_shape)

    def __repr__(self) -> str:
        shape = f", dense_shape={self._dense_shape}" if self._dense_shape is not None else ""
        return f"IndexedSlices(indices={self._indices}, values={self._values}{shape})"

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        dense = to_dense(self)
        return dense if dtype is None else dense.astype(dtype)

    # nest.Composite: how expand_composites=True sees these (TF's IndexedSlicesSpec).
    def _nest_components(self) -> list[Any]:
        """``[values, indices, dense_shape]``, without ``dense_shape`` when it is None (TF's)."""
        parts = [self._values, self._indices]
        return parts if self._dense_shape is None else [*parts, self._dense_shape]

    @classmethod
    def _nest_from_components(cls, components: list[Any]) -> IndexedSlices:
        """The inverse of :meth:`_nest_components`."""
        return cls(*components)

    def _nest_type_spec(self) -> tuple[Any, str]:
        """TF's ``IndexedSlicesSpec``: two match when their three dtypes do (and a dense_shape
        is there or not in both); shapes never stop a match (they have a common supertype)."""
        values, indices = _dtype_and_shape(self._values), _dtype_and_shape(self._indices)
        dense: Any = None
        shape: list[Any] = [None, *values[1][1:]]
        if self._dense_shape is not None:
            dense = _dtype_and_shape(self._dense_shape)
            try:
                shape = list(self.shape or ())
            except TypeError:  # a device array: its values stay on the device
                shape = [None] * (dense[1][0] if dense[1] else 0)
        names = [f"tf.{d[0]}" if d else "None" for d in (values, indices, dense)]
        text = (
            f"IndexedSlicesSpec({_shape_text(shape)}, {', '.join(names)}, "
            f"{_shape_text(indices[1])})"
        )
        return (names[0], names[1], names[2]), text


def _dtype_and_shape(array: Any) -> tuple[str, list[Any]]:
    if not hasattr(array, "dtype") or not hasattr(array, "shape"):
        array = np.asarray(array)
    return str(array.dtype), list(array.shape)


def _shape_text(dims: Any) -> str:
    return "TensorShape([" + ", ".join(str(d) for d in dims) + "])"


def to_dense(slices: IndexedSlices) -> np.ndarray:
    """Returns the dense array ``slices`` represents (repeated rows add up).

    Raises:
      ValueError: if ``dense_shape`` is unknown.
    """
    shape = slices.shape
    if shape is None:
        raise ValueError("Cannot convert an IndexedSlices with an unknown dense_shape to dense.")
    xp = _arrays.array_module(slices.values)  # CuPy values make a dense array on their GPU
    values = xp.asarray(slices.values)
    dense = xp.zeros(shape, dtype=values.dtype)
    xp.add.at(dense, xp.asarray(slices.indices), values)
    return dense

"""``Dataset.padded_batch`` as TF 2.21's ``padded_batch_op``: its arguments' checks (padded
shapes, padding values, their structures) and the node that pads every batch.

A component's padded shape has one entry per dim: a size, or -1 (``None``) for "the longest
in this batch". The node is a ``Batch`` (same batch size, cardinality and drop rule), so the
distribution's ``compute_batch_size`` sees through it as TF's ``ComputeBatchSize`` does
through ``PaddedBatchDatasetV2``.
"""

from __future__ import annotations

import collections.abc as abc
import operator
from collections.abc import Iterator
from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi._constant import to_array
from mwms_mpi._tf_text import tf_api_dtype_name
from mwms_mpi.data import _pipeline
from mwms_mpi.data.tensor_spec import TensorSpec


def shape_text(shape: tuple[int | None, ...]) -> str:
    """A shape as ``str(tf.TensorShape)`` prints it: ``()``, ``(5,)``, ``(None, 3)``."""
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _as_dims(value: Any) -> tuple[int | None, ...]:
    """``tf.TensorShape(value)``'s dims: a non-iterable is one dim; each dim is None or an
    ``__index__``-able value >= 0.

    Raises:
      TypeError, ValueError: ``value`` is no shape (TF then converts it as a tensor).
    """
    if value is None:
        raise ValueError("unknown rank")  # TF: as_list() of an unknown shape
    try:
        dims = list(value)
    except TypeError:
        dims = [value]
    result: list[int | None] = []
    for dim in dims:
        if dim is None:
            result.append(None)
            continue
        size = operator.index(dim)  # TypeError for floats and arrays, as TF's Dimension
        if size < 0:
            raise ValueError(f"Dimension {size} must be >= 0")
        result.append(size)
    return tuple(result)


def padded_shape(value: Any, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """One component's padded shape (None: the batch's longest), as TF's
    ``_padded_shape_to_tensor``: a shape, else an int64 vector (-1 for unknown).

    Raises:
      ValueError: not a vector, or not compatible with ``input_shape`` (another rank, or a
        size below the input's static size).
      TypeError: a vector not of int64.
    """
    try:
        dims = _as_dims(value)
    except (TypeError, ValueError):
        if isinstance(value, np.ndarray):
            array = value
        else:
            try:
                array = to_array(value, np.int64)  # TF's preferred dtype
            except (TypeError, ValueError):
                array = to_array(value)
        if array.ndim != 1:
            raise ValueError(
                f"Padded shape {value} must be a `tf.int64` vector tensor, but its shape was "
                f"{shape_text(array.shape)}."
            ) from None
        if array.dtype != np.int64:
            raise TypeError(
                f"Padded shape {value} must be a `tf.int64` vector tensor, but its element "
                f"type was {tf_api_dtype_name(array.dtype)}."
            ) from None
        for d in array:
            if d < -1:  # TF's constant_value_as_shape
                raise ValueError(f"Dimension {d} must be >= 0") from None
        dims = tuple(None if d == -1 else int(d) for d in array)
    if len(dims) != len(input_shape) or any(
        p is not None and i is not None and p < i for p, i in zip(dims, input_shape, strict=True)
    ):
        raise ValueError(
            f"The padded shape {shape_text(dims)} is not compatible with the shape "
            f"{shape_text(input_shape)} of the corresponding input component."
        )
    return dims


def is_structure(value: Any) -> bool:
    """Whether tf.data's ``nest`` sees ``value`` as a structure: a tuple or a mapping (a list
    is one value there, converted to one tensor)."""
    return isinstance(value, tuple | abc.Mapping)


def flatten_up_to(shallow: Any, value: Any, input_type: str | None = None) -> list[Any]:
    """``value``'s parts at the leaves of ``shallow``, as tf.data's ``nest.flatten_up_to``:
    below a leaf of ``shallow`` anything is one part; tuples and mappings are structures, a
    list is a leaf. ``input_type`` names ``value``'s leaves in the error (TF's default padding
    values are ``ndarray``).

    Raises:
      TypeError, ValueError: TF's messages for a structure that does not match.
    """
    if not is_structure(shallow):
        return [value]
    if not is_structure(value):
        raise TypeError(
            "If shallow structure is a sequence, input must also be a sequence. Input has "
            f"type: '{input_type or type(value).__name__}'."
        )
    if isinstance(shallow, abc.Mapping) != isinstance(value, abc.Mapping):
        raise TypeError(
            "The two structures don't have the same sequence type. Input structure has type "
            f"{type(value)}, while shallow structure has type {type(shallow)}."
        )
    if len(value) != len(shallow):
        raise ValueError(
            "The two structures don't have the same sequence length. Input structure has "
            f"length {len(value)}, while shallow structure has length {len(shallow)}."
        )
    if isinstance(shallow, abc.Mapping):
        if set(value) != set(shallow):
            raise ValueError(
                f"The two structures don't have the same keys. Input structure has keys "
                f"{sorted(value)}, while shallow structure has keys {sorted(shallow)}."
            )
        return [
            part
            for key in sorted(shallow)
            for part in flatten_up_to(shallow[key], value[key], input_type)
        ]
    return [
        part
        for s, v in zip(shallow, value, strict=True)
        for part in flatten_up_to(s, v, input_type)
    ]


def padding_value(value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """One component's padding value (None: 0, or False), as TF's ``_padding_value_to_tensor``.

    Raises:
      ValueError: not a scalar.
      TypeError: not of the component's dtype (Python ints are int32, floats float32).
    """
    if value is None:
        return np.zeros((), dtype)
    array = to_array(value)
    if array.ndim:
        raise ValueError(
            "Invalid `padding_values`. `padding_values` values should be scalars, but got "
            f"{shape_text(array.shape)}."
        )
    if array.dtype != dtype:
        raise TypeError(
            f"Invalid `padding_values`. `padding_values` values type <dtype: "
            f"'{tf_api_dtype_name(array.dtype)}'> does not match type <dtype: "
            f"'{tf_api_dtype_name(dtype)}'> of the corresponding input component."
        )
    return array


def padding_values(values: Any, spec: Any) -> list[np.ndarray]:
    """Every component's padding value: ``values`` in the element's structure (a None part
    takes the default), or one value for every component."""
    flat_spec = nest.flatten(spec)
    if values is None:
        return [padding_value(None, s.dtype) for s in flat_spec]
    if is_structure(values):  # TF merges them into the defaults first: those must fit
        flatten_up_to(values, spec, input_type="ndarray")
    if is_structure(spec) and not is_structure(values):
        parts = [values] * len(flat_spec)
    else:
        parts = flatten_up_to(spec, values)
    return [padding_value(v, s.dtype) for v, s in zip(parts, flat_spec, strict=True)]


class PaddedBatch(_pipeline.Batch):
    """Batches of ``batch_size`` elements, each component padded to its padded shape (None:
    the batch's longest) with its padding value."""

    def __init__(
        self,
        node: _pipeline.Node,
        batch_size: int,
        drop_remainder: bool,
        shapes: list[tuple[int | None, ...]],
        values: list[np.ndarray],
    ) -> None:
        super().__init__(node, batch_size, drop_remainder)
        self.shapes = shapes
        self.values = values

    def element_spec(self) -> Any:
        spec = self.inputs[0].element_spec()
        dim = self.batch_size if self.drop_remainder else None
        flat = [
            TensorSpec((dim, *shape), s.dtype)
            for shape, s in zip(self.shapes, nest.flatten(spec), strict=True)
        ]
        return nest.pack_sequence_as(spec, flat)

    def row_source(self, peek: bool = False) -> tuple[Any, Iterator[int]] | None:
        return None

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        pending: list[Any] = []
        for element in self.inputs[0].iterate(peek):
            pending.append(element)
            if len(pending) == self.batch_size:
                yield self._pad(pending)
                pending = []
        if pending and not self.drop_remainder:
            yield self._pad(pending)

    def _pad(self, elements: list[Any]) -> Any:
        """The batch of ``elements``, padded.

        Raises:
          DataLossError: an element is larger than its padded shape (TF's kernel error).
        """
        columns = zip(*(nest.flatten(e) for e in elements), strict=True)
        batched = []
        for column, shape, value in zip(columns, self.shapes, self.values, strict=True):
            target = tuple(
                max(a.shape[d] for a in column) if size is None else size
                for d, size in enumerate(shape)
            )
            out = np.full((len(column), *target), value, dtype=value.dtype)
            for index, array in enumerate(column):
                if any(n > t for n, t in zip(array.shape, target, strict=True)):
                    raise errors.DataLossError(
                        None,
                        "IteratorGetNext",
                        "Attempted to pad to a smaller size than the input element. "
                        "[Op:IteratorGetNext]",
                    )
                region: tuple[int | slice, ...] = (index, *(slice(0, n) for n in array.shape))
                out[region] = array
            batched.append(out)
        return nest.pack_sequence_as(elements[0], batched)

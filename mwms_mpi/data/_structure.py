"""Elements as tf.data sees them: tuples and dicts nest, lists convert as tf.constant does."""

from __future__ import annotations

import collections.abc as abc
from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi._constant import to_array
from mwms_mpi.data.tensor_spec import TensorSpec


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def normalize(value: Any, lists_as_tuples: bool = False) -> Any:
    """Returns ``value`` as an element: tuples, namedtuples and dicts nest, leaves are arrays.

    Args:
      value: a dataset element or a function's result.
      lists_as_tuples: treat lists as tuples (as TF does for a function's return value) rather
        than as values to convert (as it does for ``from_tensor_slices`` input).

    Returns:
      The same structure with numpy arrays at the leaves.
    """
    if isinstance(value, abc.Mapping):
        items = [(key, normalize(item, lists_as_tuples)) for key, item in value.items()]
        mapping: Any = type(value)
        return dict(items) if mapping is dict else mapping(items)
    if _is_namedtuple(value):
        return type(value)(*(normalize(item, lists_as_tuples) for item in value))
    if isinstance(value, tuple) or (lists_as_tuples and isinstance(value, list)):
        return tuple(normalize(item, lists_as_tuples) for item in value)
    return to_array(value)


def spec_of(element: Any) -> Any:
    """The structure of ``TensorSpec`` describing ``element`` (a normalized element)."""
    return nest.map_structure(TensorSpec.from_tensor, element)


def relax(spec_a: Any, spec_b: Any) -> Any:
    """The most specific spec that both specs fit: differing dims become ``None``."""

    def one(a: TensorSpec, b: TensorSpec) -> TensorSpec:
        if len(a.shape) != len(b.shape):
            raise ValueError(f"Cannot relax {a} and {b}: their ranks differ.")
        shape = [x if x == y else None for x, y in zip(a.shape, b.shape, strict=True)]
        return TensorSpec(shape, a.dtype)

    return nest.map_structure(one, spec_a, spec_b)


def batch_dim_spec(spec: Any, dim: int | None) -> Any:
    """``spec`` with a leading dim ``dim`` added to every component."""
    return nest.map_structure(lambda s: TensorSpec((dim, *s.shape), s.dtype), spec)


def stack(elements: Sequence[Any]) -> Any:
    """Stacks same-structure elements into one batched element, with TF's shape error.

    Raises:
      InvalidArgumentError: two elements differ in a component's shape.
    """
    columns = [nest.flatten(element) for element in elements]
    stacked = []
    for index, column in enumerate(zip(*columns, strict=True)):
        first = column[0].shape
        for position, array in enumerate(column[1:], start=1):
            if array.shape != first:
                raise errors.InvalidArgumentError(
                    None,
                    "BatchDatasetV2",
                    f"Cannot batch tensors with different shapes in component {index}. First "
                    f"element had shape {list(first)} and element {position} had shape "
                    f"{list(array.shape)}.",
                )
        stacked.append(np.stack(column))
    return nest.pack_sequence_as(elements[0], stacked)


def gather(element: Any, indices: Sequence[int]) -> Any:
    """Rows ``indices`` of every component of a batched element, stacked: fresh arrays equal
    to ``stack([row(element, i) for i in indices])``, made by one fancy index each."""
    where = np.asarray(indices, dtype=np.intp)
    return nest.map_structure(lambda a: a[where], element)


def row(element: Any, index: int) -> Any:
    """Row ``index`` of every component of a batched element (fresh arrays, 0-d for scalars)."""
    return nest.map_structure(lambda a: a[index, ...].copy(), element)


def slice_element(element: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of every component of a batched element (fresh arrays)."""
    return nest.map_structure(lambda a: a[start:stop].copy(), element)


def batch_dim(element: Any) -> int:
    """The leading dim shared by every component of a batched element.

    Raises:
      InvalidArgumentError: the components' leading dims differ.
    """
    dims = {a.shape[0] for a in nest.flatten(element)}
    if len(dims) != 1:
        raise errors.InvalidArgumentError(
            None,
            "UnbatchDataset",
            "Input element must have the same batch size in each component. Component 0 had "
            f"size {nest.flatten(element)[0].shape[0]} but another component had a different "
            "size.",
        )
    return dims.pop()


def to_numpy(element: Any) -> Any:
    """An element as ``as_numpy_iterator`` yields it: 0-d arrays become numpy scalars."""
    return nest.map_structure(lambda a: a[()] if a.ndim == 0 else a, element)

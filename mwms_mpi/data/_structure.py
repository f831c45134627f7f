"""Elements as tf.data sees them: tuples and dicts nest, lists convert as tf.constant does."""

from __future__ import annotations

import collections.abc as abc
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi._constant import to_array
from mwms_mpi._tf_text import tf_shape_string
from mwms_mpi.data.tensor_spec import DatasetSpec, TensorSpec


def _is_namedtuple(value: Any) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def normalize(value: Any, _count: list[int] | None = None) -> Any:
    """Returns ``value`` as an element: tuples, namedtuples and dicts nest, leaves are arrays.

    Lists are values to convert, as ``tf.convert_to_tensor`` converts them (a function's result
    goes through :func:`normalize_result` first, which makes a top-level list a tuple): one
    holding arrays is packed in their dtype, as TF packs a list of tensors (``[x, x]`` of int64
    ``x`` is int64; ``_autopack.py``), one of Python values follows ``tf.constant``'s rule.
    Each leaf is converted under TF's name for it, ``component_<i>`` in flattening order (a
    dict's keys sorted), which TF's ``Pack`` errors end with.

    Raises:
      ValueError: a dict inside a list (TF cannot convert it to a tensor).
    """
    count = [0] if _count is None else _count
    if is_dataset(value):  # a function's window (``window``'s elements): a dataset component
        count[0] += 1
        return value
    if isinstance(value, abc.Mapping):
        converted = {key: normalize(value[key], count) for key in _flattening_order(value)}
        items = [(key, converted[key]) for key in value]
        mapping: Any = type(value)
        return dict(items) if mapping is dict else mapping(items)
    if _is_namedtuple(value):
        return type(value)(*(normalize(item, count) for item in value))
    if isinstance(value, tuple):
        return tuple(normalize(item, count) for item in value)
    if isinstance(value, list):
        _refuse_mappings(value)
    count[0] += 1
    return to_array(value, name=f"component_{count[0] - 1}")


def _flattening_order(mapping: abc.Mapping[Any, Any]) -> list[Any]:
    """A mapping's keys in ``tf.nest``'s flattening order: sorted where they sort."""
    try:
        return sorted(mapping)
    except TypeError:
        return list(mapping)


def normalize_result(value: Any) -> Any:
    """A ``map``/``filter`` function's result as an element.

    TF's function tracing turns only a top-level list into a tuple; a list anywhere below is one
    tensor (``lambda x: (x, [x, x])`` gives a scalar and a ``(2,)`` vector). ``None`` is an
    element without components (refused by the callers, as TF refuses it).
    """
    if value is None:
        return ()
    if isinstance(value, list):
        count = [0]  # one numbering over the tuple's components, as TF flattens it
        return tuple(normalize(item, count) for item in value)
    return normalize(value)


def _refuse_mappings(values: list[Any] | tuple[Any, ...]) -> None:
    """TF's error for a dict inside a list it converts (``from_tensor_slices([{'a': 1}])``)."""
    for item in values:
        if isinstance(item, abc.Mapping):
            raise ValueError(
                f"Attempt to convert a value ({item!r}) with an unsupported type "
                f"({type(item)}) to a Tensor."
            )
        if isinstance(item, list | tuple):
            _refuse_mappings(item)


def no_components_error(op: str, attr: str) -> errors.InvalidArgumentError:
    """TF's error for an element with no tensor in it (``from_tensors(())``, ``map`` returning
    ``()`` or ``None``): its dataset op cannot have zero output types."""
    return errors.InvalidArgumentError(
        None,
        op,
        f"Length for attr '{attr}' of 0 must be at least minimum 1\n\t; NodeDef: "
        f"{{{{node {op}}}}}; Op<name={op}; ...> [Op:{op}]",
    )


def is_dataset(value: Any) -> bool:
    """Whether ``value`` is a dataset (a component of ``window``'s elements)."""
    return hasattr(value, "_node") and hasattr(value, "element_spec")


def spec_of(element: Any) -> Any:
    """The structure of ``TensorSpec`` describing ``element`` (a normalized element); a dataset
    component is a ``DatasetSpec``."""

    def one(leaf: Any) -> Any:
        if is_dataset(leaf):
            return DatasetSpec(leaf.element_spec, make=leaf._then)
        return TensorSpec.from_tensor(leaf)

    return nest.map_structure(one, element)


def relax(spec_a: Any, spec_b: Any) -> Any:
    """The most specific spec that both specs fit: differing dims become ``None``."""

    def one(a: Any, b: Any) -> Any:
        if isinstance(a, DatasetSpec) or isinstance(b, DatasetSpec):
            if not (isinstance(a, DatasetSpec) and isinstance(b, DatasetSpec)):
                raise ValueError(f"Cannot relax {a} and {b}: one is a dataset.")
            return DatasetSpec(relax(a.element_spec, b.element_spec), a.shape, make=a.make)
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
                    f"element had shape {tf_shape_string(first)} and element {position} had "
                    f"shape {tf_shape_string(array.shape)}.",
                )
        stacked.append(np.stack(column))
    return nest.pack_sequence_as(elements[0], stacked)


def copy_into_batch(elements: Sequence[Any]) -> Any:
    """Stacks what a ``map`` hands to a ``batch``, as TF's fused ``MapAndBatchDataset`` (TF's
    ``map_and_batch_fusion``, on by default, rewrites ``map(f).batch(n)`` into it): each
    component of each element is copied into the slot of the first element's shape when it has
    as many elements (so ``[3,2]`` after ``[2,3]`` comes back reshaped), element by element.

    Raises:
      InvalidArgumentError: a component has another number of elements than the first's.
    """
    columns = [nest.flatten(element) for element in elements]
    chips = [array.shape for array in columns[0]]
    for row in columns[1:]:
        for array, chip in zip(row, chips, strict=True):
            if array.size != math.prod(chip):
                raise errors.InvalidArgumentError(
                    None,
                    "MapAndBatchDataset",
                    "Cannot add tensor to the batch: number of elements does not match. Shapes "
                    f"are: [tensor]: {tf_shape_string(array.shape)}, [batch]: "
                    f"{tf_shape_string(chip)}",
                )
    stacked = [
        np.stack([array.reshape(chip) for array in column])
        for column, chip in zip(zip(*columns, strict=True), chips, strict=True)
    ]
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


def copy_element(element: Any) -> Any:
    """A copy of ``element``'s arrays (a dataset component, ``window``'s, is kept: a dataset is
    immutable, as TF's tensors are)."""
    return nest.map_structure(lambda a: a if is_dataset(a) else np.copy(a), element)


def to_numpy(element: Any) -> Any:
    """An element as ``as_numpy_iterator`` yields it: 0-d arrays become numpy scalars.

    Raises:
      TypeError: a component is a dataset (``window``'s elements; TF's message).
    """

    def one(a: Any) -> Any:
        if not isinstance(a, np.ndarray) and hasattr(a, "element_spec"):
            raise TypeError(
                "`tf.data.Dataset.as_numpy_iterator()` is not supported for datasets that "
                f"produce values of type {type(a)}"
            )
        return a[()] if a.ndim == 0 else a

    return nest.map_structure(one, element)

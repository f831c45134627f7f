"""Datasets of windows and of chosen inputs: ``window``, ``group_by_window`` (and
``bucket_by_sequence_length`` on it) and ``choose_from_datasets`` (TF 2.21's
``WindowDataset``, ``GroupByWindowDataset`` and ``DirectedInterleaveDataset``).

A window is a dataset (a ``_pipeline.Elements`` node) of the input elements it holds; the nodes
get a ``make`` function that wraps a node into the caller's ``Dataset`` class (this layer does
not import ``dataset.py``).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi._tf_text import tf_api_dtype_name
from mwms_mpi.data import _combine, _functions, _structure
from mwms_mpi.data._pipeline import INFINITE, UNKNOWN, Elements, Node
from mwms_mpi.data._stateful import tf_spec_text
from mwms_mpi.data.tensor_spec import DatasetSpec, TensorSpec

Make = Callable[[Node], Any]
_END = object()


class Window(Node):
    """TF's ``WindowDataset``: a buffer of ``(size - 1) * stride + 1`` input elements, every
    ``stride``-th one forms a window, then the buffer moves ``shift`` elements on (reading and
    dropping the input elements a shift larger than the buffer skips, as TF does). Each element
    is the input's structure with a window dataset per component."""

    def __init__(
        self, node: Node, size: int, shift: int, stride: int, drop: bool, make: Make
    ) -> None:
        self.inputs = (node,)
        self.size, self.shift, self.stride, self.drop = size, shift, stride, drop
        self.make = make

    def element_spec(self) -> Any:
        return nest.map_structure(
            lambda s: DatasetSpec(s, make=self.make), self.inputs[0].element_spec()
        )

    def cardinality(self) -> int:
        """TF's ``WindowDatasetOp`` cardinality."""
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        if self.drop:
            rest = n - ((self.size - 1) * self.stride + 1)
            return 0 if rest < 0 else rest // self.shift + 1
        return n // self.shift + (0 if n % self.shift == 0 else 1)

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        elements = self.inputs[0].iterate(peek)
        target = (self.size - 1) * self.stride + 1
        buffer: list[Any] = []
        done = False
        while True:
            while not done and len(buffer) < target:
                element = next(elements, _END)
                if element is _END:
                    done = True
                else:
                    buffer.append(element)
            if not buffer or (self.drop and len(buffer) < target):
                return
            taken = buffer[:: self.stride]
            if self.shift >= len(buffer):
                for _ in range(self.shift - len(buffer)):
                    if done or next(elements, _END) is _END:
                        done = True
                        break
                buffer = []
            else:
                buffer = buffer[self.shift :]
            yield self._window(taken)

    def _window(self, taken: list[Any]) -> Any:
        spec = self.inputs[0].element_spec()
        return nest.map_structure(
            lambda s, *parts: self.make(Elements(list(parts), s)), spec, *taken
        )


def int64_scalar(value: Any, what: str) -> np.ndarray:
    """A function's result converted as TF's ``convert_to_tensor(value, dtype=tf.int64)`` in
    ``group_by_window``'s ``key_func`` and ``window_size_func`` wrappers, then checked to be a
    scalar.

    Raises:
      ValueError: an array of another dtype (TF's message; it names TF's symbolic tensor, here
        the value), or not a scalar (TF's message).
      TypeError: a Python float or bool.
    """
    if isinstance(value, tuple | list):  # TF packs a structure of tensors into one
        value = _structure.normalize(list(value))
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype != np.int64:
            raise ValueError(
                "Tensor conversion requested dtype int64 for Tensor with dtype "
                f"{tf_api_dtype_name(array.dtype)}: {value!r}"
            )
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
        array = np.asarray(value, np.int64)
    else:
        raise TypeError(f"Expected int64, but got {value!r} of type '{type(value).__name__}'.")
    if array.ndim:
        raise ValueError(
            f"Invalid `{what}`. `{what}` must return a single `tf.int64` scalar tensor but its "
            f"return type is {tf_spec_text(TensorSpec(array.shape, np.int64))}."
        )
    return array


def _dataset_or_error(result: Any) -> Any:
    """``result`` if it is a dataset, else TF's error for ``reduce_func``."""
    if hasattr(result, "_node") and hasattr(result, "element_spec"):
        return result

    def spec(value: Any) -> Any:
        if hasattr(value, "_node") and hasattr(value, "element_spec"):
            return DatasetSpec(value.element_spec)
        return _structure.spec_of(_structure.normalize(value))

    structure = tuple(result) if isinstance(result, list) else result  # TF's top-level list
    text = tf_spec_text(nest.map_structure(spec, structure))
    raise TypeError(
        "Invalid `reduce_func`. `reduce_func` must return a single `tf.data.Dataset` object but "
        f"its return type is {text}."
    )


class GroupByWindow(Node):
    """TF's ``GroupByWindowDataset``: input elements go to the group of their key; a group of
    its key's window size (``window_size_func(key)``, once per key and iteration) is handed to
    ``reduce_func(key, window)`` and the returned dataset's elements come out. At the end of
    the input the groups left are flushed in increasing key order (TF's ``std::map``)."""

    def __init__(
        self,
        node: Node,
        key_func: Callable[..., Any],
        reduce_func: Callable[..., Any],
        size_func: Callable[[np.ndarray], Any],
        make: Make,
        spec: Any = None,
    ) -> None:
        self.inputs = (node,)
        self.key_func, self.reduce_func, self.size_func = key_func, reduce_func, size_func
        self.make = make
        in_spec = node.element_spec()
        probe = _functions._probe(in_spec, 2)
        try:  # TF traces key_func here: its type errors come now
            self._key(probe)
        except (ValueError, TypeError):
            raise
        except Exception:  # a function that refuses zeros fails on the element that fails it
            pass
        self._size(np.asarray(0, np.int64))
        window = self.make(Elements([probe], in_spec))
        result = _dataset_or_error(self.reduce_func(np.asarray(0, np.int64), window))
        self.spec = result.element_spec if spec is None else spec

    def _key(self, element: Any) -> int:
        key = self.key_func(*element) if type(element) is tuple else self.key_func(element)
        return int(int64_scalar(key, "key_func"))

    def _size(self, key: np.ndarray) -> int:
        return int(int64_scalar(self.size_func(key), "window_size_func"))

    def element_spec(self) -> Any:
        return self.spec

    def cardinality(self) -> int:
        return INFINITE if self.inputs[0].cardinality() == INFINITE else UNKNOWN

    def _flush(self, key: int, group: list[Any], peek: bool) -> Iterator[Any]:
        window = self.make(Elements(group, self.inputs[0].element_spec()))
        result = _dataset_or_error(self.reduce_func(np.asarray(key, np.int64), window))
        yield from result._node.iterate(peek)

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        groups: dict[int, list[Any]] = {}
        sizes: dict[int, int] = {}
        for element in self.inputs[0].iterate(peek):
            key = self._key(element)
            if key not in sizes:
                size = self._size(np.asarray(key, np.int64))
                if size <= 0:
                    raise errors.InvalidArgumentError(
                        None,
                        "IteratorGetNext",
                        f"Window size must be greater than zero, but got {size}. "
                        "[Op:IteratorGetNext]",
                    )
                sizes[key] = size
            group = groups.setdefault(key, [])
            group.append(element)
            if len(group) == sizes[key]:
                del groups[key]
                yield from self._flush(key, group, peek)
        for key in sorted(groups):
            yield from self._flush(key, groups[key], peek)


def common_spec(specs: list[Any]) -> Any:
    """TF's ``most_specific_common_supertype`` of the inputs' element specs (same structure,
    dtypes and ranks; differing dims become None).

    Raises:
      TypeError: the specs have no common supertype (TF's message).
    """
    spec = specs[0]
    for index, other in enumerate(specs[1:], start=1):
        try:
            spec = nest.map_structure(_combine.supertype, spec, other)
        except (TypeError, ValueError):
            raise TypeError(
                "Invalid `datasets`. `datasets` must have compatible element specs.\n Dataset 0 "
                f"element_spec={tf_spec_text(specs[0])}.\nDataset {index} "
                f"element_spec={tf_spec_text(other)}."
            ) from None
    return spec


class DirectedInterleave(Node):
    """TF's ``DirectedInterleaveDataset`` (``choose_from_datasets``): each choice (an int64
    scalar) takes the next element of that input; an exhausted input ends the dataset with
    ``stop_on_empty_dataset``, else its choices are skipped until every input is exhausted."""

    def __init__(self, selector: Node, nodes: list[Node], stop_on_empty: bool) -> None:
        self.inputs = (selector, *nodes)
        self.stop_on_empty = stop_on_empty
        self.spec = common_spec([n.element_spec() for n in nodes])

    def element_spec(self) -> Any:
        return self.spec

    def cardinality(self) -> int:
        """TF's: infinite if any data input is, else unknown."""
        infinite = any(n.cardinality() == INFINITE for n in self.inputs[1:])
        return INFINITE if infinite else UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        count = len(self.inputs) - 1
        sources = [n.iterate(peek) for n in self.inputs[1:]]
        exhausted = [False] * count
        active = count
        for choice in self.inputs[0].iterate(peek):
            index = int(choice)
            if not 0 <= index < count:
                raise errors.InvalidArgumentError(
                    None,
                    "IteratorGetNext",
                    f"Selector index out of range: {index} >= {count} [Op:IteratorGetNext]",
                )
            if exhausted[index]:
                continue
            element = next(sources[index], _END)
            if element is not _END:
                yield element
                continue
            if self.stop_on_empty:
                return
            exhausted[index] = True
            active -= 1
            if not active:
                return

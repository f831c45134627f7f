"""Datasets made of several datasets: ``Dataset.zip`` and ``Dataset.concatenate`` (TF 2.21).

Their pipeline nodes have more than one input; the pipeline rewrites that walk a dataset's
inputs (``distribute.py``: rebatches, auto-sharding) rebuild every input
(:meth:`Node.with_inputs`).
"""

from __future__ import annotations

import collections.abc as abc
from collections.abc import Iterator
from typing import Any

from mwms_mpi import nest
from mwms_mpi.data import _pipeline
from mwms_mpi.data.tensor_spec import DatasetSpec, TensorSpec


def zip_structure(args: tuple[Any, ...], datasets: Any) -> Any:
    """The structure ``Dataset.zip(*args, datasets=...)`` zips (TF's argument rules).

    Raises:
      TypeError: no dataset, or both ``*args`` and ``datasets``.
    """
    if not args and datasets is None:
        raise TypeError("Must pass at least one dataset to `zip`.")
    if args and datasets is not None:
        raise TypeError("Both `*args` and `datasets` cannot be set.")
    return datasets if not args else (args[0] if len(args) == 1 else args)


def merged_options(datasets: list[Any]) -> Any:
    """The inputs' options merged, later inputs' set fields winning (as TF merges them)."""
    options = datasets[0].options()
    for dataset in datasets[1:]:
        options = options.merge(dataset.options())
    return options


def flatten_datasets(datasets: Any, kind: type) -> list[Any]:
    """The datasets of a (nested) structure, in ``nest`` order; TF's ``zip`` errors otherwise.

    Raises:
      TypeError: a Python list in the structure (TF: use a tuple), or a leaf that is not a
        dataset (``kind``).
    """
    if isinstance(datasets, list):
        raise TypeError(
            "Invalid input to `zip`. Inputs are expected to be (nested) structures of "
            "`tf.data.Dataset` objects. Python `list` is not supported and you should use "
            "`tuple` instead."
        )
    if isinstance(datasets, abc.Mapping):  # children in sorted-key order, as nest packs them
        return [d for k in sorted(datasets) for d in flatten_datasets(datasets[k], kind)]
    if isinstance(datasets, tuple):
        return [d for item in datasets for d in flatten_datasets(item, kind)]
    if not isinstance(datasets, kind):
        raise TypeError(
            "Invalid input to `zip`. Inputs are expected to be (nested) structures of "
            f"`tf.data.Dataset` objects but encountered object of type {type(datasets)}."
        )
    return [datasets]


class Zip(_pipeline.Node):
    """Elements of its inputs side by side, in the structure the datasets were given in; as
    long as the shortest input."""

    joins_batches = True

    def __init__(self, structure: Any, nodes: list[_pipeline.Node]) -> None:
        self.structure = structure
        self.inputs = tuple(nodes)

    def element_spec(self) -> Any:
        return nest.pack_sequence_as(self.structure, [n.element_spec() for n in self.inputs])

    def cardinality(self) -> int:
        sizes = [n.cardinality() for n in self.inputs]
        if _pipeline.UNKNOWN in sizes:
            return _pipeline.UNKNOWN
        finite = [s for s in sizes if s != _pipeline.INFINITE]
        return min(finite) if finite else _pipeline.INFINITE

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        iterators = [n.iterate(peek) for n in self.inputs]
        while True:
            parts = []
            for iterator in iterators:
                part = next(iterator, _END)
                if part is _END:
                    return
                parts.append(part)
            yield nest.pack_sequence_as(self.structure, parts)


_END = object()


class Concatenate(_pipeline.Node):
    """Its first input's elements, then its second's, all in the first's structure (a dict
    element keeps the first input's key order, as TF packs every element in the common spec)."""

    joins_batches = True

    def __init__(self, first: _pipeline.Node, second: _pipeline.Node) -> None:
        self.inputs = (first, second)
        self._spec = common_spec(first.element_spec(), second.element_spec())

    def element_spec(self) -> Any:
        return self._spec

    def cardinality(self) -> int:
        """TF's: infinite if either input is (even when the other is unknown), else unknown if
        either is, else the sum."""
        a, b = (n.cardinality() for n in self.inputs)
        if _pipeline.INFINITE in (a, b):
            return _pipeline.INFINITE
        if _pipeline.UNKNOWN in (a, b):
            return _pipeline.UNKNOWN
        return a + b

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        yield from self.inputs[0].iterate(peek)
        for element in self.inputs[1].iterate(peek):
            yield nest.pack_sequence_as(self._spec, nest.flatten(element))


def common_spec(spec_a: Any, spec_b: Any) -> Any:
    """The most specific spec both element specs fit (TF's ``most_specific_common_supertype``:
    differing dimensions become unknown).

    Raises:
      TypeError: the structures, dtypes or ranks differ (TF's "Incompatible dataset elements").
    """
    try:
        return nest.map_structure(supertype, spec_a, spec_b)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"Incompatible dataset elements:\n  {spec_a} vs.   {spec_b}") from exc


def supertype(a: Any, b: Any) -> Any:
    """TF's ``most_specific_common_supertype`` of two component specs: a ``TensorSpec`` of
    the same dtype and rank with differing dims unknown; a ``DatasetSpec`` (windows) of the
    element specs' common spec.

    Raises:
      TypeError, ValueError: no common supertype.
    """
    if isinstance(a, DatasetSpec) and isinstance(b, DatasetSpec) and a.shape == b.shape:
        element = nest.map_structure(supertype, a.element_spec, b.element_spec)
        return DatasetSpec(element, a.shape, make=a.make)
    if not (isinstance(a, TensorSpec) and isinstance(b, TensorSpec)):
        raise TypeError(f"No common supertype of {a} and {b}.")
    if a.dtype != b.dtype or len(a.shape) != len(b.shape):
        raise TypeError(f"No common supertype of {a} and {b}.")
    shape = [x if x == y else None for x, y in zip(a.shape, b.shape, strict=True)]
    return TensorSpec(shape, a.dtype)

"""A dataset's pipeline nodes: each knows its element spec, its cardinality and how to iterate."""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi.data import _structure
from mwms_mpi.data.tensor_spec import TensorSpec

INFINITE = -1
UNKNOWN = -2
INT64_MAX = 2**63 - 1


class Node:
    """A step of a pipeline. ``iterate(peek)`` yields normalized elements; ``peek`` iterations
    (used only to infer an element spec) leave per-epoch state such as shuffle seeds alone."""

    inputs: tuple[Node, ...] = ()
    preserves_batch = False  # compute_batch_size walks through it (TF's pass-through ops)
    # compute_batch_size takes its inputs' batch size where they all agree (TF's multiple-input
    # ops: zip, concatenate)
    joins_batches = False
    # A ``batch`` right after it stacks as TF's fused MapAndBatchDataset (a ``map``)
    fuses_into_batch = False

    def element_spec(self) -> Any:
        return self.inputs[0].element_spec()

    def cardinality(self) -> int:
        return self.inputs[0].cardinality()

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        raise NotImplementedError

    def row_source(self, peek: bool = False) -> tuple[Any, Iterator[int]] | None:
        """``(element, row indices)`` when what ``iterate`` yields is exactly those rows of one
        batched ``element`` (``from_tensor_slices``, possibly shuffled), else None.

        Lets ``Batch`` gather a whole batch with one fancy index per component instead of
        copying each row and stacking them: the per-row Python work was most of the input
        pipeline's time in a training step. Called where ``iterate`` would be, with the same
        side effects (a shuffle's epoch count), so the two orders are the same.
        """
        return None

    def with_input(self, node: Node) -> Node:
        """A copy of this node reading from ``node`` (for pipeline rewrites)."""
        return self.with_inputs((node,))

    def with_inputs(self, nodes: tuple[Node, ...]) -> Node:
        """A copy of this node reading from ``nodes`` (a zip or a concatenation has several)."""
        clone = copy.copy(self)
        clone.inputs = nodes
        return clone


class TensorSlices(Node):
    def __init__(self, element: Any) -> None:
        self.element = element
        flat = nest.flatten(element)
        if not flat:
            raise ValueError("Invalid `element`. `element` should not be empty.")
        for array in flat:
            if array.ndim == 0:
                raise ValueError("Unbatching a tensor is only supported for rank >= 1")
        sizes = [array.shape[0] for array in flat]
        for size in sizes[1:]:
            if size != sizes[0]:
                raise ValueError(f"Dimensions {sizes[0]} and {size} are not compatible")
        self.size = sizes[0]

    def element_spec(self) -> Any:
        return nest.map_structure(lambda a: TensorSpec(a.shape[1:], a.dtype), self.element)

    def cardinality(self) -> int:
        return self.size

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for index in range(self.size):
            yield _structure.row(self.element, index)

    def row_source(self, peek: bool = False) -> tuple[Any, Iterator[int]] | None:
        if not all(type(a) is np.ndarray for a in nest.flatten(self.element)):
            return None  # numpy's fancy index only; other arrays take the row path
        return self.element, iter(range(self.size))


class Tensors(Node):
    def __init__(self, element: Any) -> None:
        if not nest.flatten(element):
            raise _structure.no_components_error("TensorDataset", "Toutput_types")
        self.element = element

    def element_spec(self) -> Any:
        return _structure.spec_of(self.element)

    def cardinality(self) -> int:
        return 1

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        yield _structure.copy_element(self.element)


class Elements(Node):
    """A window: the given elements, with the input's element spec (TF's ``WindowDataset``
    helper dataset; its cardinality is the number of elements)."""

    def __init__(self, elements: list[Any], spec: Any) -> None:
        self.elements = elements
        self.spec = spec

    def element_spec(self) -> Any:
        return self.spec

    def cardinality(self) -> int:
        return len(self.elements)

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for element in self.elements:
            yield _structure.copy_element(element)


class Range(Node):
    def __init__(self, start: int, stop: int, step: int, dtype: np.dtype[Any]) -> None:
        self.values = range(start, stop, step)
        self.dtype = dtype

    def element_spec(self) -> Any:
        return TensorSpec((), self.dtype)

    def cardinality(self) -> int:
        """TF's ``RangeCardinality``: infinite once ``stop`` reaches the int64 maximum (how
        ``enumerate`` makes an endless counter), else the count of values."""
        if self.values.stop >= INT64_MAX:
            return INFINITE
        return len(self.values)

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for value in self.values:  # wrapped into the output type, as TF's cast wraps it
            yield np.asarray(value, dtype=np.int64).astype(self.dtype)


class Batch(Node):
    preserves_batch = True  # as the batch node itself: compute_batch_size stops here

    def __init__(self, node: Node, batch_size: int, drop_remainder: bool) -> None:
        self.inputs = (node,)
        self.batch_size = batch_size
        self.drop_remainder = drop_remainder

    def element_spec(self) -> Any:
        dim = self.batch_size if self.drop_remainder else None
        return _structure.batch_dim_spec(self.inputs[0].element_spec(), dim)

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return n // self.batch_size + (0 if self.drop_remainder or n % self.batch_size == 0 else 1)

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        source = self.inputs[0].row_source(peek)
        if source is not None:
            yield from self._gathered(*source)
            return
        fused = self.inputs[0].fuses_into_batch  # TF's map_and_batch_fusion
        stack = _structure.copy_into_batch if fused else _structure.stack
        pending: list[Any] = []
        for element in self.inputs[0].iterate(peek):
            pending.append(element)
            if len(pending) == self.batch_size:
                yield stack(pending)
                pending = []
        if pending and not self.drop_remainder:
            yield stack(pending)

    def _gathered(self, element: Any, indices: Iterator[int]) -> Iterator[Any]:
        """The batches of rows ``indices`` of ``element``: what stacking those rows gives (fresh
        arrays, same dtypes and shapes), one fancy index per component."""
        while True:
            pending = list(itertools.islice(indices, self.batch_size))  # one C loop a batch
            if len(pending) < self.batch_size:
                break
            yield _structure.gather(element, pending)
        if pending and not self.drop_remainder:
            yield _structure.gather(element, pending)


class Unbatch(Node):
    def __init__(self, node: Node) -> None:
        self.inputs = (node,)
        specs = nest.flatten(node.element_spec())
        if any(not spec.shape for spec in specs):
            raise ValueError("Cannot unbatch an input with scalar components.")
        known = sorted({s.shape[0] for s in specs if s.shape[0] is not None})
        if len(known) > 1:
            raise ValueError(
                "`unbatch()` is only supported for datasets of elements whose components have "
                f"a matching leading dimension. Encountered both {known[0]} and {known[1]}."
            )
        dims = {s.shape[0] for s in specs}
        # the rows per element when every component's leading dim is static (TF's cardinality)
        self.rows: int | None = dims.pop() if len(dims) == 1 else None

    def element_spec(self) -> Any:
        spec = self.inputs[0].element_spec()
        return nest.map_structure(lambda s: TensorSpec(s.shape[1:], s.dtype), spec)

    def cardinality(self) -> int:
        """TF's: the input's times the static leading dim; infinite and unknown stay so, and
        without a static leading dim the count is unknown."""
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return UNKNOWN if self.rows is None else n * self.rows

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        return _rows(self.inputs[0].iterate(peek))


class Rebatch(Node):
    """TF's ``Dataset.rebatch`` (RebatchDatasetV2): unbatch, then batch with cycling sizes."""

    def __init__(self, node: Node, batch_sizes: list[int], drop_remainder: bool) -> None:
        if any(not spec.shape for spec in nest.flatten(node.element_spec())):
            raise ValueError(
                "Invalid `batch_sizes`. Expected dataset with rank of >= 1 but found a dataset "
                "with scalar elements. Fix the issue by adding the `batch` transformation to "
                "the dataset."
            )
        self.inputs = (node,)
        self.batch_sizes = batch_sizes
        self.drop_remainder = drop_remainder
        self.element_spec()  # TF computes it when the dataset is made: its ValueError there

    def element_spec(self) -> Any:
        """TF's ``_compute_static_batch_dim``: the one batch size when the sizes are all equal
        and no partial batch can form (``drop_remainder``, or the input's known batch dims
        agree and are a multiple of it; numpy's ``x % 0`` is 0, so a size of 0 counts).

        Raises:
          ValueError: the input's known batch dims differ (TF's message).
        """
        spec = self.inputs[0].element_spec()
        sizes = set(self.batch_sizes)
        dim: int | None = None
        if len(sizes) == 1:
            size = sizes.pop()
            if self.drop_remainder:
                return nest.map_structure(lambda s: TensorSpec((size, *s.shape[1:]), s.dtype), spec)
            known = [s.shape[0] for s in nest.flatten(spec) if s.shape[0] is not None]
            if any(d != known[0] for d in known):
                raise ValueError(
                    f"Invalid `input_dataset.` The batch dimension of component 0 is {known[0]}, "
                    f"while the batch dimension of component i is {np.asarray(known)}."
                )
            if known and (size == 0 or known[0] % size == 0):
                dim = size
        return nest.map_structure(lambda s: TensorSpec((dim, *s.shape[1:]), s.dtype), spec)

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        return INFINITE if n == INFINITE else UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        if not any(self.batch_sizes):
            raise zero_batch_sizes_error(self.batch_sizes)
        rows = _rows(self.inputs[0].iterate(peek))
        position = 0
        exhausted = False
        while True:
            size = self.batch_sizes[position % len(self.batch_sizes)]
            position += 1
            taken: list[Any] = []
            while len(taken) < size:
                row = next(rows, None)
                if row is None:
                    exhausted = True
                    break
                taken.append(row)
            if exhausted and size > 0 and not taken:
                return
            if exhausted and len(taken) < size and self.drop_remainder:
                return
            yield _stack_rows(taken, self.inputs[0].element_spec())
            if exhausted and size > 0:
                return


def zero_batch_sizes_error(sizes: list[int]) -> errors.InvalidArgumentError:
    """Our refusal of batch sizes that are all 0, where TF yields empty batches forever: at
    ``Dataset.rebatch``, and when iterated for a distribution's rebatch that no auto-shard
    rewrite replaced (TF makes it, and DATA sharding makes it a legacy rebatch)."""
    return errors.InvalidArgumentError(
        None,
        "RebatchDatasetV2",
        f"batch_sizes {sizes} are all 0: the dataset would yield empty batches forever. "
        "[Op:RebatchDatasetV2]",
    )


class LegacyRebatch(Node):
    """TF's legacy RebatchDataset: each element split into ``num_replicas`` pieces of
    ``ceil(batch / num_replicas)`` rows (the last ones shorter, possibly empty)."""

    def __init__(self, node: Node, num_replicas: int) -> None:
        self.inputs = (node,)
        self.num_replicas = num_replicas
        if any(not spec.shape for spec in nest.flatten(node.element_spec())):
            raise ValueError(
                "Invalid `input_dataset`. Expected a dataset whose elements have rank >= 1 but "
                "found a dataset whose elements are scalars. Fix the issue by adding the `batch` "
                "transformation to the dataset."
            )

    def element_spec(self) -> Any:
        n = self.num_replicas

        def one(spec: TensorSpec) -> TensorSpec:
            dim = spec.shape[0]
            new = dim // n if dim is not None and dim % n == 0 else None
            return TensorSpec((new, *spec.shape[1:]), spec.dtype)

        return nest.map_structure(one, self.inputs[0].element_spec())

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        return INFINITE if n == INFINITE else UNKNOWN

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for element in self.inputs[0].iterate(peek):
            size = _structure.batch_dim(element)
            piece = math.ceil(size / self.num_replicas)
            for index in range(self.num_replicas):
                start = min(index * piece, size)
                yield _structure.slice_element(element, start, min(start + piece, size))


class Shard(Node):
    preserves_batch = True

    def __init__(self, node: Node, num_shards: int, index: int) -> None:
        self.inputs = (node,)
        self.num_shards = num_shards
        self.index = index

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return n // self.num_shards + (1 if self.index < n % self.num_shards else 0)

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for position, element in enumerate(self.inputs[0].iterate(peek)):
            if position % self.num_shards == self.index:
                yield element


class Repeat(Node):
    preserves_batch = True

    def __init__(self, node: Node, count: int) -> None:
        self.inputs = (node,)
        self.count = count

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if self.count < 0:
            return 0 if n == 0 else INFINITE
        if self.count == 0:
            return 0
        return n if n < 0 else n * self.count

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        epoch = 0
        while self.count < 0 or epoch < self.count:
            produced = False
            for element in self.inputs[0].iterate(peek):
                produced = True
                yield element
            if not produced:  # an empty input repeated forever is empty, as in TF
                return
            epoch += 1


class Take(Node):
    preserves_batch = True

    def __init__(self, node: Node, count: int) -> None:
        self.inputs = (node,)
        self.count = count

    def cardinality(self) -> int:
        """TF's formula, kept for negative counts (which take everything): ``take(-1)`` keeps
        the input's cardinality, ``take(-2)`` of a finite input says -2 (``min(n, count)``)."""
        n = self.inputs[0].cardinality()
        if n == UNKNOWN:
            return UNKNOWN
        if n == INFINITE:
            return self.count
        return n if self.count == INFINITE else min(n, self.count)

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        if self.count == 0:
            return
        for taken, element in enumerate(self.inputs[0].iterate(peek), start=1):
            yield element
            if taken == self.count:
                return


class Skip(Node):
    preserves_batch = True

    def __init__(self, node: Node, count: int) -> None:
        self.inputs = (node,)
        self.count = count

    def cardinality(self) -> int:
        n = self.inputs[0].cardinality()
        if n < 0:
            return n
        return 0 if self.count < 0 else max(0, n - self.count)

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        for position, element in enumerate(self.inputs[0].iterate(peek)):
            if self.count >= 0 and position >= self.count:
                yield element


class Prefetch(Node):
    preserves_batch = True

    def __init__(self, node: Node, buffer_size: int) -> None:
        self.inputs = (node,)
        self.buffer_size = buffer_size

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        return self.inputs[0].iterate(peek)


class Cache(Node):
    """In-memory cache: the first complete pass is recorded and replayed afterwards."""

    preserves_batch = True

    def __init__(self, node: Node) -> None:
        self.inputs = (node,)
        self.elements: list[Any] | None = None

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        if self.elements is not None:
            for element in self.elements:
                yield _structure.copy_element(element)
            return
        recorded = []
        for element in self.inputs[0].iterate(peek):
            recorded.append(_structure.copy_element(element))
            yield element
        if not peek:
            self.elements = recorded


class Fail(Node):
    """Raises ``error`` when iterated (TF reports auto-shard failures on the first ``next``)."""

    def __init__(self, node: Node, error: Exception) -> None:
        self.inputs = (node,)
        self.error = error

    def iterate(self, peek: bool = False) -> Iterator[Any]:
        raise self.error
        yield  # pragma: no cover


def _rows(elements: Iterator[Any]) -> Iterator[Any]:
    for element in elements:
        for index in range(_structure.batch_dim(element)):
            yield _structure.row(element, index)


def _stack_rows(rows: list[Any], spec: Any) -> Any:
    """``rows`` stacked; none: an empty batch whose unknown dims are 0 (TF's RebatchDatasetV2
    for a batch size of 0)."""
    if rows:
        return _structure.stack(rows)
    return nest.map_structure(
        lambda s: np.zeros((0, *[0 if d is None else d for d in s.shape[1:]]), s.dtype), spec
    )

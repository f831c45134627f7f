"""``tf.data.Dataset`` in numpy, in-process: the lazy pipeline subset that distribution needs."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi.data import _combine, _functions, _pipeline, _shuffle, _structure
from mwms_mpi.data.options import Options

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "Dataset", "OwnedIterator"]

AUTOTUNE = -1
INFINITE_CARDINALITY = _pipeline.INFINITE
UNKNOWN_CARDINALITY = _pipeline.UNKNOWN


def _int_arg(value: Any, op: str) -> int:
    """An integer argument given as a Python or numpy integer (or 0-d integer array)."""
    if value is None:
        raise ValueError(
            f"Attempt to convert a value (None) with an unsupported type ({type(None)}) to a "
            "Tensor."
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Integral | np.ndarray):
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype int64")
    array = np.asarray(value)
    if array.ndim or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype int64")
    return int(array)


def _invalid(op: str, message: str) -> errors.InvalidArgumentError:
    return errors.InvalidArgumentError(None, op, f"{message} [Op:{op}]")


class OwnedIterator:
    """An iterator over a dataset, as ``iter(dataset)`` returns it in TF."""

    def __init__(self, dataset: Dataset) -> None:
        self._element_spec = dataset.element_spec
        self._elements = dataset._node.iterate()

    @property
    def element_spec(self) -> Any:
        """The type specification of an element of this iterator."""
        return self._element_spec

    def __iter__(self) -> OwnedIterator:
        return self

    def __next__(self) -> Any:
        return next(self._elements)

    def get_next(self) -> Any:
        """Returns the next element.

        Raises:
          OutOfRangeError: the end of the sequence is reached.
        """
        try:
            return next(self._elements)
        except StopIteration:
            raise errors.OutOfRangeError(None, "IteratorGetNext", "End of sequence") from None


class Dataset:
    """Represents a potentially large set of elements, as ``tf.data.Dataset``.

    Elements are nests (tuples, namedtuples, dicts) of numpy arrays; iterating yields them
    (scalars as 0-d arrays, as TF yields 0-d tensors), ``as_numpy_iterator`` yields them as TF's
    does (scalars as numpy scalars). Build one with ``from_tensor_slices``, ``from_tensors`` or
    ``range`` and chain transformations; nothing runs until the dataset is iterated.
    """

    def __init__(self, node: _pipeline.Node, options: Options | None = None) -> None:
        self._node = node
        self._options = options if options is not None else Options()

    def _then(self, node: _pipeline.Node) -> Dataset:
        return Dataset(node, self._options)

    # Sources.

    @staticmethod
    def from_tensor_slices(tensors: Any, name: str | None = None) -> Dataset:
        """Creates a ``Dataset`` whose elements are slices of the given tensors.

        Args:
          tensors: A dataset element, whose components have the same first dimension. Tuples,
            namedtuples and dicts are structures; lists and Python scalars are converted like
            ``tf.constant``.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          ValueError: the components are scalars or their first dimensions differ.
        """
        del name
        if tensors is None:
            raise ValueError("Invalid `element`. `element` should not be empty.")
        element = _structure.normalize(tensors)
        return Dataset(_pipeline.TensorSlices(_copy(element)))

    @staticmethod
    def from_tensors(tensors: Any, name: str | None = None) -> Dataset:
        """Creates a ``Dataset`` with a single element, comprising the given tensors.

        Args:
          tensors: A dataset "element".
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.
        """
        del name  # None has no components: Tensors raises TF's InvalidArgumentError for it
        element = () if tensors is None else _structure.normalize(tensors)
        return Dataset(_pipeline.Tensors(_copy(element)))

    @staticmethod
    def range(*args: Any, output_type: Any = np.int64, name: str | None = None) -> Dataset:
        """Creates a ``Dataset`` of a step-separated range of values, like Python's ``range``.

        Args:
          *args: follows the same semantics as python's range: ``(stop)``, ``(start, stop)``
            or ``(start, stop, step)``.
          output_type: the dtype of the elements (default ``np.int64``).
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `RangeDataset`.

        Raises:
          ValueError: if len(args) == 0.
          InvalidArgumentError: if step is zero.
        """
        del name
        if not 1 <= len(args) <= 3:
            raise ValueError(
                "Invalid `args`. The length of `args` should be between 1 and 3 but was "
                f"{len(args)}."
            )
        # TF takes a bool as its int (range(True) is [0]); _int_arg refuses bools elsewhere
        values = [_int_arg(int(a) if isinstance(a, bool) else a, "RangeDataset") for a in args]
        start, stop, step = (0, values[0], 1) if len(values) == 1 else (*values, 1)[:3]
        if step == 0:
            raise _invalid("RangeDataset", "step must be a non-zero integer.")
        return Dataset(_pipeline.Range(start, stop, step, np.dtype(output_type)))

    @staticmethod
    def zip(*args: Any, datasets: Any = None, name: str | None = None) -> Dataset:
        """Zips datasets (``zip(a, b)``, or one nested structure: ``zip((a, (b, c)))``): each
        element is the inputs' elements in that structure, until the shortest input ends.

        Raises:
          TypeError: no dataset, both ``*args`` and ``datasets``, a list, a leaf not a dataset.
        """
        del name
        structure = _combine.zip_structure(args, datasets)
        flat = _combine.flatten_datasets(structure, Dataset)
        node = _combine.Zip(structure, [d._node for d in flat])
        return Dataset(node, _combine.merged_options(flat))

    def concatenate(self, dataset: Dataset, name: str | None = None) -> Dataset:
        """This dataset's elements, then ``dataset``'s (their common, most specific spec).

        Raises:
          TypeError: the element structures, dtypes or ranks differ.
        """
        del name
        node = _combine.Concatenate(self._node, dataset._node)
        return Dataset(node, _combine.merged_options([self, dataset]))

    # Transformations.

    def batch(
        self,
        batch_size: int,
        drop_remainder: bool = False,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Combines consecutive elements of this dataset into batches.

        Args:
          batch_size: the number of consecutive elements of this dataset to combine in a
            single batch.
          drop_remainder: whether the last batch should be dropped in the case it has fewer
            than `batch_size` elements; the default behavior is not to drop the smaller batch.
          num_parallel_calls: accepted for TF's signature; batching is sequential here.
          deterministic: accepted for TF's signature; the order is always deterministic.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          InvalidArgumentError: ``batch_size`` is not positive.
        """
        del num_parallel_calls, deterministic, name
        size = _int_arg(batch_size, "BatchDatasetV2")
        if size <= 0:
            raise _invalid("BatchDatasetV2", "Batch size must be greater than zero.")
        return self._then(_pipeline.Batch(self._node, size, bool(drop_remainder)))

    def unbatch(self, name: str | None = None) -> Dataset:
        """Splits elements of a dataset into multiple elements along their first dimension.

        Raises:
          ValueError: an element component is a scalar.
        """
        del name
        return self._then(_pipeline.Unbatch(self._node))

    def rebatch(
        self, batch_size: Any, drop_remainder: bool = False, name: str | None = None
    ) -> Dataset:
        """Creates a ``Dataset`` that rebatches the elements from this dataset.

        ``rebatch(N)`` is functionally equivalent to ``unbatch().batch(N)``; with a list of
        sizes, the output batch sizes cycle through the list.

        Args:
          batch_size: An integer, or a list of integers, the size(s) of the new batches.
          drop_remainder: whether the last batch should be dropped if it is smaller.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.
        """
        del name
        sizes = [_int_arg(size, "RebatchDatasetV2") for size in np.ravel(np.asarray(batch_size))]
        if not sizes or any(size < 0 for size in sizes):
            raise _invalid("RebatchDatasetV2", "batch_sizes must be non-negative and not empty.")
        if not any(sizes):  # TF yields empty batches forever here; we refuse instead
            raise _invalid(
                "RebatchDatasetV2",
                f"batch_sizes {sizes} are all 0: the dataset would yield empty batches forever.",
            )
        return self._then(_pipeline.Rebatch(self._node, sizes, bool(drop_remainder)))

    def shard(self, num_shards: int, index: int, name: str | None = None) -> Dataset:
        """Creates a ``Dataset`` that includes only 1/``num_shards`` of this dataset.

        Element ``i`` of this dataset is kept if ``i % num_shards == index``.

        Args:
          num_shards: the number of shards operating in parallel.
          index: the worker index.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          InvalidArgumentError: if `num_shards` or `index` are illegal values.
        """
        del name
        shards = _int_arg(num_shards, "ShardDataset")
        position = _int_arg(index, "ShardDataset")
        if shards <= 0:
            raise _invalid(
                "ShardDataset",
                f"Number of shards must be greater than zero (currently num_shards = {shards}).",
            )
        if not 0 <= position < shards:
            raise _invalid(
                "ShardDataset",
                f"Index must be between 0 and {shards - 1} (currently index = {position}).",
            )
        return self._then(_pipeline.Shard(self._node, shards, position))

    def repeat(self, count: int | None = None, name: str | None = None) -> Dataset:
        """Repeats this dataset so each original value is seen ``count`` times.

        Args:
          count: the number of times the dataset should be repeated. The default behavior (if
            `count` is `None` or `-1`) is for the dataset be repeated indefinitely.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.
        """
        del name
        times = -1 if count is None else _int_arg(count, "RepeatDataset")
        return self._then(_pipeline.Repeat(self._node, times))

    def shuffle(
        self,
        buffer_size: int,
        seed: int | None = None,
        reshuffle_each_iteration: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Randomly shuffles the elements of this dataset with a buffer of ``buffer_size``.

        The order is a deterministic function of ``seed`` (not TF's own order: its random
        generator cannot be reproduced). Without a seed, a random one is drawn here, so every
        process shuffles differently: pass the same seed on every worker.

        Args:
          buffer_size: the number of elements from this dataset from which the new dataset will
            sample; ``UNKNOWN_CARDINALITY`` buffers the whole dataset.
          seed: (Optional.) the random seed that will be used to create the distribution.
          reshuffle_each_iteration: (Optional.) whether the shuffle order should be different
            for each epoch. Defaults to `True`.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          InvalidArgumentError: ``buffer_size`` is not positive nor ``UNKNOWN_CARDINALITY``.
        """
        del name
        size = _int_arg(buffer_size, "ShuffleDatasetV3")
        if size <= 0 and size != UNKNOWN_CARDINALITY:
            raise _invalid(
                "ShuffleDatasetV3",
                "buffer_size must be greater than zero or UNKNOWN_CARDINALITY",
            )
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1, np.uint64)[0])
        else:
            seed = _int_arg(seed, "ShuffleDatasetV3")
        reshuffle = True if reshuffle_each_iteration is None else bool(reshuffle_each_iteration)
        return self._then(_shuffle.Shuffle(self._node, size, seed, reshuffle))

    def map(
        self,
        map_func: Callable[..., Any],
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        name: str | None = None,
    ) -> Dataset:
        """Maps ``map_func`` across the elements of this dataset.

        A tuple element is passed to ``map_func`` as separate arguments; any other element
        (a dict, a namedtuple, an array) as one argument. A returned top-level list becomes a
        tuple; inner lists and Python values are converted like ``tf.constant``.

        Args:
          map_func: A function mapping a dataset element to another dataset element.
          num_parallel_calls: accepted for TF's signature; elements are mapped in order.
          deterministic: accepted for TF's signature.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.
        """
        del num_parallel_calls, deterministic, name
        return self._then(_functions.Map(self._node, map_func))

    def filter(self, predicate: Callable[..., Any], name: str | None = None) -> Dataset:
        """Filters this dataset according to ``predicate``.

        Args:
          predicate: A function mapping a dataset element to a boolean.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: The `Dataset` containing the elements of this dataset for which
          `predicate` is `True`.

        Raises:
          ValueError: (when iterated) ``predicate`` returns something other than a bool scalar.
        """
        del name
        return self._then(_functions.Filter(self._node, predicate))

    def take(self, count: int, name: str | None = None) -> Dataset:
        """Creates a ``Dataset`` with at most ``count`` elements from this dataset.

        Args:
          count: the number of elements of this dataset that should be taken to form the new
            dataset. If `count` is -1, or if `count` is greater than the size of this dataset,
            the new dataset will contain all elements of this dataset.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.
        """
        del name
        return self._then(_pipeline.Take(self._node, _int_arg(count, "TakeDataset")))

    def skip(self, count: int, name: str | None = None) -> Dataset:
        """Creates a ``Dataset`` that skips ``count`` elements from this dataset.

        Args:
          count: the number of elements of this dataset that should be skipped to form the new
            dataset. If `count` is greater than the size of this dataset, the new dataset will
            contain no elements. If `count` is -1, skips the entire dataset.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.
        """
        del name
        return self._then(_pipeline.Skip(self._node, _int_arg(count, "SkipDataset")))

    def prefetch(self, buffer_size: int, name: str | None = None) -> Dataset:
        """Creates a ``Dataset`` that prefetches elements from this dataset (a no-op here).

        Raises:
          InvalidArgumentError: ``buffer_size`` is below -1 (``AUTOTUNE``).
        """
        del name
        size = _int_arg(buffer_size, "PrefetchDataset")
        if size < AUTOTUNE:
            raise _invalid(
                "PrefetchDataset",
                "buffer_size must be >= 0 or set buffer_size to be -1 for auto-tuning",
            )
        return self._then(_pipeline.Prefetch(self._node, size))

    def cache(self, filename: str = "", name: str | None = None) -> Dataset:
        """Caches the elements in this dataset in memory (a ``filename`` is not supported).

        The first complete iteration is recorded; later iterations replay it.
        """
        del name
        if filename:
            raise NotImplementedError("mwms_mpi datasets cache in memory only (filename='').")
        return self._then(_pipeline.Cache(self._node))

    def with_options(self, options: Options, name: str | None = None) -> Dataset:
        """Returns a new ``Dataset`` with the given options set.

        The options are "global" in the sense they apply to the entire dataset. If options are
        set multiple times, they are merged as long as different options do not use different
        non-default values.

        Args:
          options: A `tf.data.Options` that identifies the options the use.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset` with the given options.
        """
        del name
        if not isinstance(options, Options):
            raise AttributeError(f"'{type(options).__name__}' object has no attribute '_to_proto'")
        return Dataset(self._node, self._options.merge(options))

    def options(self) -> Options:
        """Returns the options for this dataset and its inputs."""
        return self._options._copy()

    # Inspection and iteration.

    @property
    def element_spec(self) -> Any:
        """The type specification of an element of this dataset (``TensorSpec`` leaves)."""
        return self._node.element_spec()

    def cardinality(self) -> np.ndarray:
        """Returns the cardinality of the dataset, if known.

        Returns:
          A 0-d int64 array: the number of elements, or ``INFINITE_CARDINALITY`` (-1), or
          ``UNKNOWN_CARDINALITY`` (-2) when it cannot be known without iterating.
        """
        return np.asarray(self._node.cardinality(), dtype=np.int64)

    def __len__(self) -> int:
        n = self._node.cardinality()
        if n == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown.")
        return n

    def __bool__(self) -> bool:
        return True  # as in TF: never falls back on __len__

    def __iter__(self) -> OwnedIterator:
        return OwnedIterator(self)

    def as_numpy_iterator(self) -> Iterator[Any]:
        """Returns an iterator which converts all elements of the dataset to numpy.

        As in TF, 0-d values come out as numpy scalars and arrays as numpy arrays.
        """
        for element in self._node.iterate():
            yield _structure.to_numpy(element)

    def __repr__(self) -> str:
        return f"<{type(self._node).__name__}Dataset element_spec={self.element_spec}>"


def _copy(element: Any) -> Any:
    # The dataset owns its data: later changes to the caller's arrays do not leak in.
    return nest.map_structure(np.array, element)

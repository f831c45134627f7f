"""The ``tf.data.Dataset`` methods that group elements into windows or pick among datasets
(``window``, ``group_by_window``, ``bucket_by_sequence_length``, ``choose_from_datasets``,
``counter``), as TF 2.21 eager does them.

A mixin of ``DatasetOps`` (``_transformations``), so of ``Dataset``: each method checks its
arguments as TF does and adds a node from ``_windows``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self

import numpy as np

from mwms_mpi import errors, nest
from mwms_mpi._constant import to_array
from mwms_mpi._tf_text import tf_api_dtype_name
from mwms_mpi.data import _combine, _padded, _pipeline, _random, _resample, _structure, _windows
from mwms_mpi.data._arguments import attr_bool, bool_arg, int_arg, invalid
from mwms_mpi.data._padded import shape_text
from mwms_mpi.data._stateful import tf_spec_text
from mwms_mpi.data.tensor_spec import TensorSpec

_INT32 = np.iinfo(np.int32)


class WindowOps:
    """``Dataset``'s window and choice methods."""

    _node: _pipeline.Node

    def _then(self, node: _pipeline.Node) -> Self:
        raise NotImplementedError

    def window(
        self,
        size: Any,
        shift: Any = None,
        stride: Any = 1,
        drop_remainder: Any = False,
        name: str | None = None,
    ) -> Self:
        """Returns a dataset of "windows": each element is this dataset's element structure
        with a dataset of ``size`` (or fewer, at the end) consecutive values per component.

        Window ``i`` starts at input element ``i * shift`` and takes every ``stride``-th
        element. Iterate a window, or ``flat_map`` it (``lambda w: w.batch(size)``); as in TF,
        ``as_numpy_iterator`` refuses such a dataset.

        Args:
          size: the number of elements of the input dataset to combine into a window (> 0).
          shift: (Optional.) the number of input elements by which the window moves in each
            iteration (default ``size``; > 0).
          stride: (Optional.) the stride of the input elements in the sliding window (> 0).
          drop_remainder: whether the last windows should be dropped if their size is smaller
            than ``size``.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset` of (nests of) windows.

        Raises:
          TypeError: an argument of another type; InvalidArgumentError: ``size``, ``shift`` or
            ``stride`` is not positive (TF's messages).
        """
        del name
        count = int_arg(size, "WindowDataset")
        step = count if shift is None else int_arg(shift, "WindowDataset")
        every = int_arg(stride, "WindowDataset")
        drop = bool_arg(drop_remainder)
        for value, what in ((count, "size"), (step, "shift"), (every, "stride")):
            if value <= 0:
                raise invalid("WindowDataset", f"Window {what} must be greater than zero.")
        return self._then(_windows.Window(self._node, count, step, every, drop, self._then))

    def group_by_window(
        self,
        key_func: Callable[..., Any],
        reduce_func: Callable[[Any, Any], Any],
        window_size: Any = None,
        window_size_func: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> Self:
        """Groups windows of elements by key and reduces them.

        ``key_func(element)`` gives an int64 scalar key; elements of a key gather until there
        are ``window_size`` (or ``window_size_func(key)``) of them, then ``reduce_func(key,
        window)`` (the window a dataset) returns the dataset whose elements come out. The
        groups left at the end are reduced in increasing key order. The cardinality is unknown
        (infinite for an infinite input).

        Args:
          key_func: maps an element (a tuple as separate arguments) to an int64 scalar.
          reduce_func: maps a key and a dataset of up to ``window_size`` elements to a dataset.
          window_size: an int64 scalar, the number of consecutive elements matching the same
            key to combine in a single batch.
          window_size_func: maps a key to an int64 scalar window size.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          ValueError: neither or both of ``window_size`` and ``window_size_func``, or a
            function returns no int64 scalar; TypeError: ``reduce_func`` returns no dataset;
            InvalidArgumentError (when iterated): a window size is not positive.
        """
        return self._grouped(key_func, reduce_func, window_size, window_size_func, name)

    def _grouped(
        self,
        key_func: Callable[..., Any],
        reduce_func: Callable[[Any, Any], Any],
        window_size: Any,
        window_size_func: Callable[[Any], Any] | None,
        name: str | None,
        spec: Any = None,
    ) -> Self:
        del name
        if (window_size is not None and window_size_func) or not (
            window_size is not None or window_size_func
        ):
            raise ValueError(
                "Either the `window_size` argument or the `window_size_func` argument must be "
                "specified."
            )
        if window_size is not None:
            size = window_size
            if isinstance(size, np.integer | np.ndarray) and np.asarray(size).dtype.kind in "iu":
                size = np.asarray(size, np.int64)  # TF converts numpy ints to int64

            def window_size_func(key: Any) -> Any:
                del key
                return size

        assert window_size_func is not None
        node = _windows.GroupByWindow(
            self._node, key_func, reduce_func, window_size_func, self._then, spec
        )
        return self._then(node)

    def bucket_by_sequence_length(
        self,
        element_length_func: Callable[..., Any],
        bucket_boundaries: Sequence[int],
        bucket_batch_sizes: Sequence[int],
        padded_shapes: Any = None,
        padding_values: Any = None,
        pad_to_bucket_boundary: bool = False,
        no_padding: bool = False,
        drop_remainder: bool = False,
        name: str | None = None,
    ) -> Self:
        """A transformation that buckets elements by length and batches (pads) each bucket.

        TF's Python composition: ``group_by_window`` keyed by the bucket of
        ``element_length_func(element)`` (an int32 scalar; bucket ``i`` holds lengths in
        ``[boundaries[i-1], boundaries[i])``), window sizes from ``bucket_batch_sizes``, each
        window ``padded_batch``-ed (``batch``-ed with ``no_padding``). The element spec is
        TF's: the batch dim and dims padded to a bucket boundary are unknown.

        Args:
          element_length_func: maps an element to an int32 scalar, its length.
          bucket_boundaries: the upper length boundaries of the buckets (ints).
          bucket_batch_sizes: the batch size per bucket; one more than the boundaries.
          padded_shapes: (Optional.) as ``padded_batch``'s; default the input's shapes.
          padding_values: (Optional.) as ``padded_batch``'s; default 0.
          pad_to_bucket_boundary: pad unknown dims to the bucket's boundary minus 1 (every
            length must be below the last boundary).
          no_padding: batch without padding.
          drop_remainder: drop each bucket's last smaller batch.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          ValueError: ``len(bucket_batch_sizes) != len(bucket_boundaries) + 1``; TypeError:
            a length that is not int32 (TF's op error); InternalError (when iterated): a length
            of the last bucket with ``pad_to_bucket_boundary``.
        """
        if len(bucket_batch_sizes) != (len(bucket_boundaries) + 1):
            raise ValueError(
                "`len(bucket_batch_sizes)` must equal `len(bucket_boundaries) + 1` but "
                f"`len(bucket_batch_sizes)={len(bucket_batch_sizes)}` and "
                f"`len(bucket_boundaries)={len(bucket_boundaries)}`."
            )
        boundaries = [int(b) for b in bucket_boundaries]
        batch_sizes = np.asarray(bucket_batch_sizes, np.int64)
        lows = [int(_INT32.min), *boundaries]
        highs = [*boundaries, int(_INT32.max)]

        def bucket_id(*args: Any) -> np.ndarray:
            length = _structure.normalize_result(element_length_func(*args))
            if not isinstance(length, np.ndarray) or length.dtype != np.int32:
                dtype = tf_api_dtype_name(np.asarray(length).dtype)
                raise TypeError(
                    f"Input 'y' of 'LessEqual' Op has type {dtype} that does not match type "
                    "int32 of argument 'x'."
                )
            hits = [
                i for i, (lo, hi) in enumerate(zip(lows, highs, strict=True)) if lo <= length < hi
            ]
            return np.asarray(min(hits) if hits else _pipeline.INT64_MAX, np.int64)

        spec = self._node.element_spec()
        flat = nest.flatten(spec)
        shapes = _padded_dims(spec, padded_shapes)

        def batching(key: np.ndarray, window: Any) -> Any:
            size = batch_sizes[int(key)]
            if no_padding:
                return window.batch(size, drop_remainder=drop_remainder)
            filler = None
            if pad_to_bucket_boundary:
                if int(key) >= len(boundaries):
                    raise _boundary_error(int(key), len(boundaries))
                filler = boundaries[int(key)] - 1
            padded = [[filler if d is None else d for d in s] for s in shapes]
            shaped = nest.pack_sequence_as(spec, padded)
            return window.padded_batch(size, shaped, padding_values, drop_remainder=drop_remainder)

        def out(s: TensorSpec, dims: tuple[int | None, ...]) -> TensorSpec:
            kept = s.shape if no_padding else (None if pad_to_bucket_boundary else d for d in dims)
            return TensorSpec((None, *kept), s.dtype)

        result_spec = nest.pack_sequence_as(
            spec, [out(s, d) for s, d in zip(flat, shapes, strict=True)]
        )
        return self._grouped(
            lambda *args: bucket_id(*args),
            batching,
            None,
            lambda key: batch_sizes[int(key)],
            name,
            result_spec,
        )

    @classmethod
    def choose_from_datasets(
        cls, datasets: Sequence[Any], choice_dataset: Any, stop_on_empty_dataset: bool = True
    ) -> Self:
        """Creates a dataset that deterministically chooses elements from ``datasets``: each
        element of ``choice_dataset`` (int64 scalars) is the index of the dataset whose next
        element comes next. The element spec is the inputs' most specific common one; the
        cardinality is infinite if an input is, else unknown.

        Args:
          datasets: a non-empty list of datasets with compatible structure.
          choice_dataset: a dataset of int64 scalars in ``[0, len(datasets))``.
          stop_on_empty_dataset: end when a chosen dataset is exhausted (default); else skip
            the choices of exhausted datasets until all are.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          ValueError: ``datasets`` is empty; TypeError: ``choice_dataset`` is no dataset of
            int64 scalars, or the datasets' specs are incompatible (TF's messages);
            InvalidArgumentError (when iterated): a choice out of range.
        """
        if not datasets:
            raise ValueError("Invalid `datasets`. `datasets` should not be empty.")
        if not isinstance(choice_dataset, cls):
            raise TypeError(
                "Invalid `choice_dataset`. `choice_dataset` should be a `tf.data.Dataset` but "
                f"is {type(choice_dataset)}."
            )
        choice_spec = choice_dataset._node.element_spec()
        if not (
            isinstance(choice_spec, TensorSpec)
            and choice_spec.dtype == np.int64
            and choice_spec.shape == ()
        ):
            raise TypeError(
                "Invalid `choice_dataset`. Elements of `choice_dataset` must be scalar "
                f"`tf.int64` tensors but are {tf_spec_text(choice_spec)}."
            )
        inputs = list(datasets)
        node = _windows.DirectedInterleave(
            choice_dataset._node, [d._node for d in inputs], bool(stop_on_empty_dataset)
        )
        return cls(node, _combine.merged_options(inputs))  # type: ignore[call-arg]

    @classmethod
    def random(
        cls, seed: Any = None, rerandomize_each_iteration: Any = None, name: str | None = None
    ) -> Self:
        """Creates a ``Dataset`` of pseudorandom int64 values in ``[0, 2**32)``, forever.

        With a ``seed`` the values are TF 2.21's, bit for bit (its Philox stream for
        ``(87654321, seed % (2**31 - 1))``, TF's seeds without a global seed: this package has no
        ``tf.random.set_seed``); every iteration repeats them unless
        ``rerandomize_each_iteration``, which gives each iteration of this dataset TF's next
        seeds. Without a seed the values are random, as TF's (not TF's values).

        Raises:
          TypeError: a seed that is not an integer (TF's message).
        """
        del name
        seeds = _random.op_seeds(seed)
        rerandomize = attr_bool(rerandomize_each_iteration, "rerandomize_each_iteration", False)
        return cls(_random.Random(seeds, rerandomize))  # type: ignore[call-arg]

    @classmethod
    def sample_from_datasets(
        cls,
        datasets: Sequence[Any],
        weights: Any = None,
        seed: Any = None,
        stop_on_empty_dataset: bool = False,
        rerandomize_each_iteration: Any = None,
    ) -> Any:
        """Samples elements at random from the datasets in ``datasets``.

        TF's composition: ``choose_from_datasets`` with choices drawn by TF's
        ``StatelessMultinomial`` from ``log(weights)`` (uniform without weights), seeded by
        pairs of ``Dataset.random(seed)``; with a ``seed`` the choices are TF 2.21's (for
        weights other than uniform, up to TF's float32 ``log``, which may differ from numpy's
        in the last bit). Datasets of weight 0 in a list are dropped first; one dataset left is
        returned itself, as TF does.

        Args:
          datasets: a non-empty list of datasets with compatible structure.
          weights: (Optional.) a list or float array of ``len(datasets)`` weights, or a
            dataset of such float vectors (one per element); default uniform.
          seed: (Optional.) the random seed.
          stop_on_empty_dataset: end when a chosen dataset is exhausted (TF's default: no,
            its choices are skipped).
          rerandomize_each_iteration: (Optional.) new choices for each iteration.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          ValueError: no datasets, or weights of another length or shape; TypeError: weights
            that are not float32 or float64 (TF's messages).
        """
        if not datasets:
            raise ValueError("Invalid `datasets`. `datasets` should not be empty.")
        inputs = list(datasets)
        chosen = cls.random(seed, rerandomize_each_iteration).batch(2)  # type: ignore[attr-defined]
        if isinstance(weights, cls):
            pairs = cls.zip((weights, chosen))  # type: ignore[attr-defined]
            selector = pairs.map(
                lambda row, s: _random.stateless_categorical(_log(np.ravel(row)), s)
            )
        else:
            logits = _logits(inputs, weights)
            if len(inputs) == 1:
                return inputs[0]
            selector = chosen.map(lambda s: _random.stateless_categorical(logits, s))
        node = _windows.DirectedInterleave(
            selector._node, [d._node for d in inputs], bool(stop_on_empty_dataset)
        )
        return cls(node, _combine.merged_options(inputs))  # type: ignore[call-arg]

    def rejection_resample(
        self,
        class_func: Callable[..., Any],
        target_dist: Any,
        initial_dist: Any = None,
        seed: Any = None,
        name: str | None = None,
    ) -> Any:
        """Resamples elements to reach a target distribution: elements ``(class_func(x),
        x)``, rejected or repeated per class.

        TF 2.21's composition (``data/_resample.py``): per-class acceptance from TF's float32
        arithmetic (``initial_dist`` given, else estimated per batch of 32), TF's seeded
        uniform draws, ``sample_from_datasets`` with the original elements; with a ``seed`` the
        elements are TF's (its float32 ``log`` of the mixing weights may differ from numpy's
        in the last bit). Without a seed the draws are random.

        Args:
          class_func: maps an element to its class, an int32 scalar in ``[0, num_classes)``.
          target_dist: floats, the target distribution over the classes.
          initial_dist: (Optional.) floats, the input's class distribution.
          seed: (Optional.) the random seed.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.
        """
        del name
        return _resample.rejection_resample(self, class_func, target_dist, initial_dist, seed)

    @classmethod
    def counter(
        cls, start: Any = 0, step: Any = 1, dtype: Any = np.int64, name: str | None = None
    ) -> Self:
        """Creates a ``Dataset`` that counts from ``start`` in steps of ``step`` forever.

        TF's composition, ``from_tensors(0).repeat().scan(start, ...)``: values of ``dtype``
        (integers wrap around), an infinite cardinality.

        Raises:
          TypeError: ``start`` or ``step`` cannot be converted to ``dtype`` (TF's message).
        """
        del name
        first = to_array(start, dtype)
        increment = to_array(step, dtype)

        def advance(state: np.ndarray, _: Any) -> tuple[np.ndarray, np.ndarray]:
            with np.errstate(over="ignore"):
                return np.asarray(state + increment, state.dtype), state

        return cls.from_tensors(0).repeat(None).scan(first, advance)  # type: ignore[attr-defined]


def _padded_dims(spec: Any, padded_shapes: Any) -> list[tuple[int | None, ...]]:
    """``padded_shapes or`` the input's shapes, one tuple of dims per component (None:
    unknown), as TF's ``make_padded_shapes`` flattens them."""
    if not padded_shapes:
        return [s.shape for s in nest.flatten(spec)]
    flat = _padded.flatten_up_to(spec, padded_shapes)
    return [tuple(None if d is None or d == -1 else int(d) for d in shape) for shape in flat]


def _logits(datasets: list[Any], weights: Any) -> np.ndarray:
    """TF's ``log(weights)`` for ``sample_from_datasets`` (``datasets`` loses the inputs of a
    listed weight of 0, in place, as TF skips them).

    Raises:
      ValueError: weights of another length or shape; TypeError: not float32 or float64.
    """
    if weights is None:
        return np.ones(len(datasets), np.float32)
    if isinstance(weights, np.ndarray):  # an array is a tensor: no skipping, TF's shape check
        if weights.ndim != 1 or weights.shape[0] != len(datasets):
            raise ValueError(
                "Invalid `weights`. The shape of `weights` should be compatible with "
                f"`[len(datasets)]` but is {shape_text(weights.shape)}."
            )
        array = weights
    else:
        if len(datasets) != len(weights):
            raise ValueError(
                "Invalid `weights`. `weights` should have the same length as `datasets` but got "
                f"`len(weights)={len(weights)}` vs. `len(datasets)={len(datasets)}`."
            )
        kept = [(d, w) for d, w in zip(datasets, weights, strict=True) if w > 0]
        if not kept:
            kept = [(datasets[0].take(0), 1.0)]
        datasets[:] = [d for d, _ in kept]
        array = to_array([w for _, w in kept])
    if array.dtype not in (np.float32, np.float64):
        raise TypeError(
            "Invalid `weights`. `weights` type must be either `tf.float32` or `tf.float64` but "
            f"is <dtype: '{tf_api_dtype_name(array.dtype)}'>."
        )
    return _log(array)


def _log(weights: np.ndarray) -> np.ndarray:
    """``log(weights)`` in their dtype; a weight of 0 is -inf (never chosen), as in TF."""
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(weights))


def _boundary_error(bucket: int, last: int) -> errors.InternalError:
    """TF's failed ``assert_less`` in ``bucket_by_sequence_length``'s batching function."""
    return errors.InternalError(
        None,
        "IteratorGetNext",
        "Got error code INVALID_ARGUMENT and message: {\nassertion failed: [When "
        "pad_to_bucket_boundary=True, elements must have length < max(bucket_boundaries).] "
        f"[Condition x < y did not hold element-wise:] [x (args_0:0) = ] [{bucket}] "
        f"[y (Const_1:0) = ] [{last}]\n}} [Op:IteratorGetNext]",
    )

"""The ``tf.data.Dataset`` methods beyond the core pipeline (``enumerate``, ``padded_batch``,
``flat_map``, ``interleave``, ``reduce``, ``take_while``, ``apply``, ``get_single_element``,
``unique``, ``scan``), as TF 2.21 eager does them.

A mixin of :class:`~mwms_mpi.data.dataset.Dataset` (which stays under the module size limit):
each method checks its arguments as TF does and adds a node from its own module
(``_padded``, ``_nested``, ``_stateful``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

from mwms_mpi import nest
from mwms_mpi.data import _nested, _padded, _pipeline, _stateful
from mwms_mpi.data._arguments import bool_arg, int_arg, invalid
from mwms_mpi.data._window_ops import WindowOps

_AUTOTUNE = -1


class DatasetOps(WindowOps):
    """``Dataset``'s methods that are not part of the pipeline distribution rewrites (and,
    from ``WindowOps``, the window and choice methods)."""

    _node: _pipeline.Node

    def _then(self, node: _pipeline.Node) -> Self:
        raise NotImplementedError

    def enumerate(self, start: Any = 0, name: str | None = None) -> Self:
        """Enumerates the elements of this dataset: ``(counter, element)`` pairs, the counter
        an int64 scalar from ``start``.

        As TF: ``zip((range(start, int64 max), self))``, so the cardinality is this dataset's
        and a counter that reaches the int64 maximum ends the dataset.

        Args:
          start: an integer scalar, the first counter value.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.
        """
        del name
        counter = type(self).range(start, _pipeline.INT64_MAX)  # type: ignore[attr-defined]
        return type(self).zip((counter, self))  # type: ignore[attr-defined]

    def padded_batch(
        self,
        batch_size: Any,
        padded_shapes: Any = None,
        padding_values: Any = None,
        drop_remainder: Any = False,
        name: str | None = None,
    ) -> Self:
        """Combines consecutive elements of this dataset into padded batches.

        Each component is padded to its padded shape: a size per dim, or ``None``/-1 for the
        longest in the batch (the default: the input's static shape, unknown dims padded to
        the longest). Padding values default to 0 (``False`` for bools).

        Args:
          batch_size: the number of consecutive elements to combine in a single batch.
          padded_shapes: (Optional.) a shape-like (list, tuple, int, int64 vector) per
            component, in the element's structure.
          padding_values: (Optional.) a scalar per component of its dtype (Python ints are
            int32, floats float32, as in TF), in the element's structure or one for all.
          drop_remainder: whether the last batch should be dropped if it is smaller.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          ValueError, TypeError: TF's errors for padded shapes and padding values;
          InvalidArgumentError: ``batch_size`` is not positive; DataLossError (when iterated):
          an element is larger than its padded shape.
        """
        del name
        size = int_arg(batch_size, "PaddedBatchDatasetV2")
        spec = self._node.element_spec()
        input_shapes = [s.shape for s in nest.flatten(spec)]
        if padded_shapes is None:
            shapes = input_shapes
        else:
            parts = _padded.flatten_up_to(spec, padded_shapes)
            shapes = [_padded.padded_shape(p, s) for p, s in zip(parts, input_shapes, strict=True)]
        values = _padded.padding_values(padding_values, spec)
        drop = bool_arg(drop_remainder)
        if size <= 0:
            raise invalid("PaddedBatchDatasetV2", "Batch size must be greater than zero.")
        return self._then(_padded.PaddedBatch(self._node, size, drop, shapes, values))

    def flat_map(self, map_func: Callable[..., Any], name: str | None = None) -> Self:
        """Maps ``map_func`` (element -> dataset) across this dataset and flattens the result.

        A tuple element is passed as separate arguments, as in ``map``. The cardinality is
        unknown (TF's).

        Args:
          map_func: A function mapping a dataset element to a dataset.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          TypeError: ``map_func`` returns a tuple, list or dict; AttributeError: it returns a
            tensor or value (TF's own error for that).
        """
        del name
        return self._then(_nested.FlatMap(self._node, map_func))

    def interleave(
        self,
        map_func: Callable[..., Any],
        cycle_length: Any = None,
        block_length: Any = None,
        num_parallel_calls: Any = None,
        deterministic: bool | None = None,
        name: str | None = None,
    ) -> Self:
        """Maps ``map_func`` across this dataset and interleaves the results.

        ``cycle_length`` datasets are open at a time and ``block_length`` consecutive elements
        are taken from each in turn, in TF's ``InterleaveDataset`` order. The default (and
        ``AUTOTUNE``) ``cycle_length`` is TF's: the number of CPUs this process may run on, so
        the order depends on the machine, as in TF. With ``num_parallel_calls`` the order is the
        same (TF's deterministic default); ``deterministic=False`` keeps it too here.

        Args:
          map_func: A function mapping a dataset element to a dataset.
          cycle_length: (Optional.) the number of input elements processed concurrently.
          block_length: (Optional.) the number of consecutive elements from each input element
            before cycling to another (default 1).
          num_parallel_calls: (Optional.) checked as TF checks it; elements are read in order.
          deterministic: (Optional.) accepted for TF's signature.
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          InvalidArgumentError: a non-positive ``cycle_length`` (other than ``AUTOTUNE``),
            ``block_length`` or ``num_parallel_calls`` (other than ``AUTOTUNE``).
        """
        del deterministic, name
        op = "InterleaveDataset" if num_parallel_calls is None else "ParallelInterleaveDatasetV4"
        node = _nested.Interleave(self._node, map_func, 1, 1)  # TF traces before the checks
        cycle = -1 if cycle_length is None else int_arg(cycle_length, op)
        block = 1 if block_length is None else int_arg(block_length, op)
        calls = _AUTOTUNE
        if num_parallel_calls is not None:
            calls = int_arg(num_parallel_calls, op)
            if calls <= 0 and calls != _AUTOTUNE:
                raise invalid(op, "num_parallel_calls must be greater than zero.")
        if cycle <= 0 and cycle != _AUTOTUNE:
            raise invalid(op, "cycle_length must be greater than zero.")
        if block <= 0:
            raise invalid(op, "block_length must be greater than zero.")
        if num_parallel_calls is not None and _AUTOTUNE not in (cycle, calls) and calls > cycle:
            raise invalid(
                op,
                "If `cycle_length` is set to a fixed value, `num_parallel_calls` must be either "
                "`tf.data.AUTOTUNE` or a value less than or equal to `cycle_length`. However, "
                f"`num_parallel_calls` is {calls} and `cycle_length` is {cycle}",
            )
        node.cycle_length = _nested.default_cycle_length() if cycle == _AUTOTUNE else cycle
        node.block_length = block
        return self._then(node)

    def reduce(
        self, initial_state: Any, reduce_func: Callable[..., Any], name: str | None = None
    ) -> Any:
        """Reduces the input dataset to a single element: ``reduce_func(state, element)`` from
        ``initial_state`` over every element (the element is one argument, even a tuple).

        Args:
          initial_state: an element (Python ints are int32, as in TF) representing the
            initial state of the transformation.
          reduce_func: A function that maps ``(old_state, input_element)`` to ``new_state``,
            of the initial state's structure and dtypes (its shapes may change).
          name: (Optional.) A name for the tf.data operation.

        Returns:
          The final state: arrays (0-d for scalars) in the initial state's structure.

        Raises:
          TypeError: the new state's dtypes differ from the initial state's (TF's message).
        """
        del name
        state = _stateful.initial_state(initial_state)
        return _stateful.reduce(self._node, state, reduce_func)

    def scan(
        self, initial_state: Any, scan_func: Callable[..., Any], name: str | None = None
    ) -> Self:
        """A transformation that scans a function across an input dataset: ``scan_func(state,
        element) -> (new_state, output)``; the outputs are the elements. The cardinality is the
        input's.

        Args:
          initial_state: an element, the initial state of the accumulator.
          scan_func: A function that maps ``(old_state, input_element)`` to
            ``(new_state, output_element)``; the new state keeps the initial state's structure
            and dtypes (its shapes may change: they are relaxed, as TF retraces).
          name: (Optional.) A name for the tf.data operation.

        Returns:
          Dataset: A `Dataset`.

        Raises:
          TypeError: the result is not a pair, or the new state's dtypes differ (TF's).
        """
        del name
        state = _stateful.initial_state(initial_state)
        return self._then(_stateful.Scan(self._node, state, scan_func))

    def take_while(self, predicate: Callable[..., Any], name: str | None = None) -> Self:
        """A transformation that stops dataset iteration based on a ``predicate`` (a tuple
        element is passed as separate arguments). The cardinality is unknown.

        Raises:
          ValueError: ``predicate`` does not return a bool scalar (when it is made, as TF's).
        """
        del name
        return self._then(_stateful.TakeWhile(self._node, predicate))

    def unique(self, name: str | None = None) -> Self:
        """A transformation that discards duplicate elements (the first occurrence stays).

        Supported: one component of ``int32``, ``int64`` or strings, of any shape (elements
        of different shapes differ). The cardinality is unknown.

        Raises:
          TypeError: another dtype; InvalidArgumentError: more than one component (TF's).
        """
        del name
        return self._then(_stateful.Unique(self._node))

    def apply(self, transformation_func: Callable[[Any], Any]) -> Self:
        """Applies a transformation function to this dataset.

        Raises:
          TypeError: ``transformation_func`` does not return a dataset (TF's message).
        """
        dataset = transformation_func(self)
        if not isinstance(dataset, type(self)):
            raise TypeError(
                "`transformation_func` must return a `tf.data.Dataset` object. Got "
                f"{type(dataset)}."
            )
        return dataset

    def get_single_element(self, name: str | None = None) -> Any:
        """Returns the single element of the dataset (arrays, 0-d for scalars).

        Raises:
          InvalidArgumentError: the dataset does not have exactly one element (TF's).
        """
        del name
        return _stateful.single_element(self._node)

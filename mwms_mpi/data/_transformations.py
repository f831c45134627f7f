"""The ``tf.data.Dataset`` methods beyond the core pipeline (``enumerate``, ``padded_batch``,
``flat_map``, ``interleave``, ``reduce``, ``take_while``, ``apply``, ``get_single_element``,
``unique``, ``scan``), as TF 2.21 eager does them.

A mixin of :class:`~mwms_mpi.data.dataset.Dataset` (which stays under the module size limit):
each method checks its arguments as TF does and adds a node from its own module
(``_padded``, ``_nested``, ``_stateful``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mwms_mpi import nest
from mwms_mpi.data import _padded, _pipeline
from mwms_mpi.data._arguments import int_arg, invalid

if TYPE_CHECKING:
    from mwms_mpi.data.dataset import Dataset


def _bool_arg(value: Any) -> bool:
    """A bool argument as TF converts it to a ``tf.bool`` tensor (no ints).

    Raises:
      TypeError: not a Python or numpy bool.
    """
    if isinstance(value, bool | np.bool_) or (
        isinstance(value, np.ndarray) and value.dtype == np.bool_ and value.ndim == 0
    ):
        return bool(value)
    raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype bool")


class DatasetOps:
    """``Dataset``'s methods that are not part of the pipeline distribution rewrites."""

    _node: _pipeline.Node

    def _then(self, node: _pipeline.Node) -> Dataset:
        raise NotImplementedError

    def enumerate(self, start: Any = 0, name: str | None = None) -> Dataset:
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
    ) -> Dataset:
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
        drop = _bool_arg(drop_remainder)
        if size <= 0:
            raise invalid("PaddedBatchDatasetV2", "Batch size must be greater than zero.")
        return self._then(_padded.PaddedBatch(self._node, size, drop, shapes, values))

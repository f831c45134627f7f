"""The ``tf.data.Dataset`` methods beyond the core pipeline (``enumerate``, ``padded_batch``,
``flat_map``, ``interleave``, ``reduce``, ``take_while``, ``apply``, ``get_single_element``,
``unique``, ``scan``), as TF 2.21 eager does them.

A mixin of :class:`~mwms_mpi.data.dataset.Dataset` (which stays under the module size limit):
each method checks its arguments as TF does and adds a node from its own module
(``_padded``, ``_nested``, ``_stateful``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mwms_mpi.data import _pipeline

if TYPE_CHECKING:
    from mwms_mpi.data.dataset import Dataset


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

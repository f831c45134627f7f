"""``Sum``, ``Mean`` and ``MeanMetricWrapper``: Keras 3.15.1's reduction metrics.

The weighting is Keras's ``reduce_to_samplewise_values``, kept as it is because results must
equal Keras's: a ``sample_weight`` of lower rank than the values first averages (``Mean``) or
sums (``Sum``) the values over the axes it lacks, so a scalar weight turns a whole batch into
one sample of that weight (``Mean([1, 3, 5, 7], sample_weight=2)`` adds 8 to ``total`` and 2
to ``count``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi.metrics import _ops
from mwms_mpi.metrics._metric import Metric

Reducer = Callable[[np.ndarray, Any], np.ndarray]


def reduce_to_samplewise_values(
    values: Any, sample_weight: Any, reduce_fn: Reducer, dtype: np.dtype[Any]
) -> tuple[np.ndarray, np.ndarray | None]:
    """Keras's per-sample values and weights: weighted, and reduced to rank 1 (or 0).

    Raises:
      InvalidArgumentError: ``sample_weight`` does not broadcast to the values' shape, or
        the values were averaged to float32 for an integer metric's weights (TF's ``Mul``
        refuses two dtypes).
    """
    values = _ops.cast(values, dtype)
    weights = None
    if sample_weight is not None:
        weights = _ops.convert(sample_weight, dtype)
        values, weights = _ops.squeeze_or_expand_to_same_rank(values, weights)
        weight_ndim, values_ndim = weights.ndim, values.ndim
        if values_ndim > weight_ndim:
            values = reduce_fn(values, tuple(range(weight_ndim, values_ndim)))
        weights = _ops.broadcast_to(weights, values.shape)
        values = _ops.multiply(values, weights)
        if weight_ndim > 1:
            weights = reduce_fn(weights, tuple(range(1, weight_ndim)))
    if values.ndim > 1:
        values = reduce_fn(values, tuple(range(1, values.ndim)))
    return values, weights


class Sum(Metric):
    """Computes the (weighted) sum of the given values (``keras.metrics.Sum``).

    Args:
      name: the metric's name.
      dtype: the dtype of the result; float32 by default.
    """

    def __init__(self, name: str | None = "sum", dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable((), "zeros", dtype=self._dtype, name="total")

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        """Adds the (weighted) sum of ``values`` to the replica's total.

        Args:
          values: the values, of any shape.
          sample_weight: optional weights, broadcastable as Keras broadcasts them.
        """
        values, _ = reduce_to_samplewise_values(values, sample_weight, _ops.sum_, self._dtype)
        self.add_to(self.total, _ops.sum_(values))

    def result(self) -> np.ndarray:
        """The sum (over every replica of every worker in cross-replica context)."""
        return self.read(self.total).astype(self._dtype)


class Mean(Metric):
    """Computes the (weighted) mean of the given values (``keras.metrics.Mean``).

    Args:
      name: the metric's name.
      dtype: the dtype of the result; float32 by default.
    """

    def __init__(self, name: str | None = "mean", dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable((), "zeros", dtype=self._dtype, name="total")
        self.count = self.add_variable((), "zeros", dtype=self._dtype, name="count")

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        """Adds the (weighted) values to the replica's total and their weight to its count.

        Args:
          values: the values, of any shape; each row of axis 0 is one sample.
          sample_weight: optional weights, broadcastable as Keras broadcasts them.
        """
        values, weights = reduce_to_samplewise_values(values, sample_weight, _ops.mean, self._dtype)
        self.add_to(self.total, _ops.sum_(values))
        if weights is not None:
            num_samples: Any = _ops.sum_(weights)
        elif values.ndim >= 1:
            num_samples = values.shape[0]
        else:
            num_samples = 1
        self.add_to(self.count, _ops.cast(num_samples, self._dtype))

    def result(self) -> np.ndarray:
        """``total / count`` (0 while ``count`` is 0), over every replica in cross-replica
        context."""
        # Keras divides in result_type(dtype, dtype, float): integer metrics give float32.
        dtype = self._dtype if self._dtype.kind == "f" else _ops.FLOAT32
        total = self.read(self.total).astype(dtype)
        return _ops.divide_no_nan(total, self.read(self.count).astype(dtype))


class MeanMetricWrapper(Mean):
    """The ``Mean`` of a per-sample function ``fn(y_true, y_pred, **kwargs)``.

    Args:
      fn: the per-sample function.
      name: the metric's name.
      dtype: the dtype of the result; float32 by default.
      **kwargs: passed on to ``fn``.
    """

    def __init__(
        self, fn: Callable[..., Any], name: str | None = None, dtype: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self._fn = fn
        self._fn_kwargs = kwargs

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:  # type: ignore[override]
        """Adds ``fn(y_true, y_pred)`` per sample, weighted by ``sample_weight``.

        Args:
          y_true: the ground truth.
          y_pred: the predictions.
          sample_weight: optional weights, broadcastable as Keras broadcasts them.
        """
        values = self._fn(y_true, y_pred, **self._fn_kwargs)
        super().update_state(values, sample_weight=sample_weight)

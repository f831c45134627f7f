"""``MeanSquaredError`` (Keras 3.15.1): the ``Mean`` of the per-sample squared error.

The per-sample value averages over the last axis only (Keras's ``mean_squared_error``), so a
rank-1 ``y_true``/``y_pred`` pair is one sample, and integer inputs are squared as integers and
averaged in float32, as Keras does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi.metrics import _ops
from mwms_mpi.metrics._reduction import MeanMetricWrapper


def mean_squared_error(y_true: Any, y_pred: Any) -> np.ndarray:
    """``mean(square(y_true - y_pred), axis=-1)`` in ``y_pred``'s dtype (float32 for integers)."""
    y_pred = _ops.convert(y_pred)
    y_true = _ops.convert(y_true, y_pred.dtype)
    y_true, y_pred = _ops.squeeze_or_expand_to_same_rank(y_true, y_pred)
    error = _ops.subtract(y_true, y_pred)
    return _ops.mean(np.square(error), axis=-1)


class MeanSquaredError(MeanMetricWrapper):
    """The mean squared error between labels and predictions (``keras.metrics.MeanSquaredError``).

    Args:
      name: the metric's name.
      dtype: the dtype of the result; float32 by default.
    """

    def __init__(self, name: str = "mean_squared_error", dtype: Any = None) -> None:
        super().__init__(fn=mean_squared_error, name=name, dtype=dtype)

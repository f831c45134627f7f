"""``Accuracy``, ``SparseCategoricalAccuracy`` and ``CategoricalAccuracy`` (Keras 3.15.1).

Each is the ``Mean`` of a per-sample match (1.0 or 0.0, float32) as Keras computes it:
``Accuracy`` compares values exactly (there is no threshold: 0.6 does not match 1), after
converting ``y_true`` to ``y_pred``'s dtype (so float labels truncate against integer
predictions); the categorical ones compare the first index of the largest prediction with the
label (``SparseCategoricalAccuracy``: an integer label, converted to ``y_pred``'s dtype; a
trailing axis of 1 is squeezed) or with the one-hot label's own first largest index.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi.metrics import _ops
from mwms_mpi.metrics._reduction import MeanMetricWrapper


def accuracy(y_true: Any, y_pred: Any) -> np.ndarray:
    """1.0 where ``y_true`` equals ``y_pred`` exactly, else 0.0 (float32)."""
    y_pred = _ops.convert(y_pred)
    y_true = _ops.convert(y_true, y_pred.dtype)
    y_true, y_pred = _ops.squeeze_or_expand_to_same_rank(y_true, y_pred)
    return _ops.elementwise(np.equal, "Equal", y_true, y_pred).astype(np.float32)


def categorical_accuracy(y_true: Any, y_pred: Any) -> np.ndarray:
    """1.0 where the largest entries of one-hot ``y_true`` and of ``y_pred`` are at the same
    index (ties: the first), else 0.0 (float32)."""
    labels = _ops.argmax(y_true, axis=-1)
    y_pred = _ops.convert(y_pred)
    labels = _ops.convert(labels, y_pred.dtype)
    shape = labels.shape
    reshape = labels.ndim == y_pred.ndim
    if reshape:
        labels = _ops.squeeze(labels, -1)
    predicted = _ops.argmax(y_pred, axis=-1)
    if predicted.dtype != labels.dtype:
        predicted = predicted.astype(labels.dtype)
    matches = _ops.elementwise(np.equal, "Equal", labels, predicted)
    matches = matches.astype(np.float32)
    return matches.reshape(shape) if reshape else matches


def sparse_categorical_accuracy(y_true: Any, y_pred: Any) -> np.ndarray:
    """1.0 where the integer label ``y_true`` is the first index of ``y_pred``'s largest entry,
    else 0.0 (float32)."""
    y_pred = _ops.convert(y_pred)
    labels = _ops.convert(y_true, y_pred.dtype)
    shape = labels.shape
    reshape = labels.ndim == y_pred.ndim and labels.shape[-1] == 1
    if reshape:
        labels = np.squeeze(labels, -1)
    predicted = _ops.argmax(y_pred, axis=-1)
    if predicted.dtype != labels.dtype:
        predicted = predicted.astype(labels.dtype)
    matches = _ops.elementwise(np.equal, "Equal", labels, predicted)
    matches = matches.astype(np.float32)
    if reshape:
        matches = matches.reshape(shape)
    if matches.ndim > 1 and matches.shape[-1] == 1:
        matches = np.squeeze(matches, -1)
    return matches


class Accuracy(MeanMetricWrapper):
    """How often predictions equal labels (``keras.metrics.Accuracy``).

    Args:
      name: the metric's name.
      dtype: the dtype of the result; float32 by default.
    """

    def __init__(self, name: str = "accuracy", dtype: Any = None) -> None:
        super().__init__(fn=accuracy, name=name, dtype=dtype)


class CategoricalAccuracy(MeanMetricWrapper):
    """How often predictions match one-hot labels (``keras.metrics.CategoricalAccuracy``).

    Args:
      name: the metric's name.
      dtype: the dtype of the result; float32 by default.
    """

    def __init__(self, name: str = "categorical_accuracy", dtype: Any = None) -> None:
        super().__init__(fn=categorical_accuracy, name=name, dtype=dtype)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """How often predictions match integer labels (``keras.metrics.SparseCategoricalAccuracy``).

    Args:
      name: the metric's name.
      dtype: the dtype of the result; float32 by default.
    """

    def __init__(self, name: str = "sparse_categorical_accuracy", dtype: Any = None) -> None:
        super().__init__(fn=sparse_categorical_accuracy, name=name, dtype=dtype)

"""Keras 3's metrics as sync-on-read variables of the current strategy (``keras.metrics``).

Made inside ``strategy.scope()``, a metric's ``update_state`` in replica context (inside
``strategy.run``) updates that replica's share, and ``result()`` in cross-replica context is
the value over every replica of every worker, as a Keras metric under ``tf.distribute`` gives.
Names, constructor arguments and results are Keras 3.15.1's (the Keras TF 2.21 installs).
"""

from mwms_mpi.metrics._accuracy import (
    Accuracy,
    CategoricalAccuracy,
    SparseCategoricalAccuracy,
    categorical_accuracy,
    sparse_categorical_accuracy,
)
from mwms_mpi.metrics._metric import Metric
from mwms_mpi.metrics._reduction import Mean, MeanMetricWrapper, Sum
from mwms_mpi.metrics._regression import MeanSquaredError, mean_squared_error

__all__ = [
    "Accuracy",
    "CategoricalAccuracy",
    "Mean",
    "MeanMetricWrapper",
    "MeanSquaredError",
    "Metric",
    "SparseCategoricalAccuracy",
    "Sum",
    "categorical_accuracy",
    "mean_squared_error",
    "sparse_categorical_accuracy",
]

"""``tf.data.experimental``: the cardinality constants and the options' classes."""

from __future__ import annotations

from mwms_mpi.data.dataset import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from mwms_mpi.data.options import (
    AutoShardPolicy,
    AutotuneAlgorithm,
    AutotuneOptions,
    DistributeOptions,
    ExternalStatePolicy,
    OptimizationOptions,
    ServiceOptions,
    ThreadingOptions,
)

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "AutoShardPolicy",
    "AutotuneAlgorithm",
    "AutotuneOptions",
    "DistributeOptions",
    "ExternalStatePolicy",
    "OptimizationOptions",
    "ServiceOptions",
    "ThreadingOptions",
]

"""``tf.data.experimental``: the cardinality constants and the distribution options."""

from __future__ import annotations

from mwms_mpi.data.dataset import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from mwms_mpi.data.options import AutoShardPolicy, DistributeOptions

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "AutoShardPolicy",
    "DistributeOptions",
]

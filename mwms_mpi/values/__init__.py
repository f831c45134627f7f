"""Distributed values (PerReplica, Mirrored) and IndexedSlices: plain containers, no MPI."""

from mwms_mpi.values.distributed import (
    DistributedValues,
    Mirrored,
    PerReplica,
    is_mirrored,
    regroup,
    select_replica,
    select_replica_mirrored,
    value_container,
)
from mwms_mpi.values.indexed_slices import IndexedSlices

__all__ = [
    "DistributedValues",
    "IndexedSlices",
    "Mirrored",
    "PerReplica",
    "is_mirrored",
    "regroup",
    "select_replica",
    "select_replica_mirrored",
    "value_container",
]

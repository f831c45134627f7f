"""The tf.distribute.cluster_resolver mirror, plus MPIClusterResolver."""

from mwms_mpi.cluster.mpi import MPIClusterResolver
from mwms_mpi.cluster.resolver import (
    ClusterResolver,
    SimpleClusterResolver,
    UnionClusterResolver,
    UnionResolver,
)
from mwms_mpi.cluster.slurm import SlurmClusterResolver
from mwms_mpi.cluster.tfconfig import TFConfigClusterResolver

__all__ = [
    "ClusterResolver",
    "MPIClusterResolver",
    "SimpleClusterResolver",
    "SlurmClusterResolver",
    "TFConfigClusterResolver",
    "UnionClusterResolver",
    "UnionResolver",
]

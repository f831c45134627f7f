"""Who is who in the job: cluster specs, resolvers (TF_CONFIG, Slurm, MPI), launcher detection."""

from mwms_mpi.cluster.launcher import LauncherInfo, check_world_size, detect_launcher
from mwms_mpi.cluster.mpi import MPIClusterResolver, check_mpi_world
from mwms_mpi.cluster.resolver import (
    ClusterResolver,
    SimpleClusterResolver,
    UnionClusterResolver,
    UnionResolver,
)
from mwms_mpi.cluster.slurm import SlurmClusterResolver
from mwms_mpi.cluster.spec import ClusterSpec
from mwms_mpi.cluster.tfconfig import TFConfigClusterResolver

__all__ = [
    "ClusterResolver",
    "ClusterSpec",
    "LauncherInfo",
    "MPIClusterResolver",
    "SimpleClusterResolver",
    "SlurmClusterResolver",
    "TFConfigClusterResolver",
    "UnionClusterResolver",
    "UnionResolver",
    "check_mpi_world",
    "check_world_size",
    "detect_launcher",
]

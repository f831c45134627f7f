"""The only package that moves data between ranks (MPI, NCCL); it knows nothing of replicas."""

from mwms_mpi.collective.communicator import Communicator, CommunicatorStats
from mwms_mpi.collective.ops import Op
from mwms_mpi.collective.packing import group_by_size

__all__ = ["Communicator", "CommunicatorStats", "Op", "group_by_size"]

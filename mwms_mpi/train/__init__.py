"""The tf.train mirror: ClusterSpec, Checkpoint, CheckpointManager, CheckpointOptions,
latest_checkpoint."""

from mwms_mpi.cluster.spec import ClusterSpec
from mwms_mpi.train.checkpoint import Checkpoint
from mwms_mpi.train.checkpoint_management import CheckpointManager, latest_checkpoint
from mwms_mpi.train.checkpoint_options import CheckpointOptions

__all__ = [
    "Checkpoint",
    "CheckpointManager",
    "CheckpointOptions",
    "ClusterSpec",
    "latest_checkpoint",
]

"""The tf.train mirror: ClusterSpec, Checkpoint, CheckpointManager, latest_checkpoint."""

from mwms_mpi.cluster.spec import ClusterSpec
from mwms_mpi.train.checkpoint import Checkpoint
from mwms_mpi.train.checkpoint_management import CheckpointManager, latest_checkpoint

__all__ = ["Checkpoint", "CheckpointManager", "ClusterSpec", "latest_checkpoint"]

"""The tf.train mirror: ClusterSpec (more names join as they are written)."""

from mwms_mpi.cluster.spec import ClusterSpec

__all__ = ["ClusterSpec"]

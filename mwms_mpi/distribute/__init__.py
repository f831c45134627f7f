"""The tf.distribute mirror: public names re-exported from the private modules."""

from mwms_mpi.distribute import cluster_resolver

__all__ = ["cluster_resolver"]

"""The tf.distribute mirror: public names re-exported from the private modules."""

from mwms_mpi.distribute import cluster_resolver, experimental
from mwms_mpi.distribute.collective_all_reduce_strategy import MultiWorkerMirroredStrategy
from mwms_mpi.distribute.context import (
    experimental_set_strategy,
    get_cross_replica_context,
    get_replica_context,
    get_strategy,
    has_strategy,
    in_cross_replica_context,
)
from mwms_mpi.distribute.cross_device_ops import (
    CrossDeviceOps,
    HierarchicalCopyAllReduce,
    NcclAllReduce,
    ReductionToOneDevice,
)
from mwms_mpi.distribute.distribute_lib import (
    ReplicaContext,
    RunOptions,
    Strategy,
    StrategyExtended,
)
from mwms_mpi.distribute.input_context import InputContext, InputOptions, InputReplicationMode
from mwms_mpi.distribute.input_lib import DistributedDataset, DistributedIterator
from mwms_mpi.distribute.mirrored_strategy import MirroredStrategy
from mwms_mpi.types import ReduceOp
from mwms_mpi.values import DistributedValues, Mirrored, PerReplica

__all__ = [
    "CrossDeviceOps",
    "DistributedDataset",
    "DistributedIterator",
    "DistributedValues",
    "HierarchicalCopyAllReduce",
    "InputContext",
    "InputOptions",
    "InputReplicationMode",
    "Mirrored",
    "MirroredStrategy",
    "MultiWorkerMirroredStrategy",
    "NcclAllReduce",
    "PerReplica",
    "ReduceOp",
    "ReductionToOneDevice",
    "ReplicaContext",
    "RunOptions",
    "Strategy",
    "StrategyExtended",
    "cluster_resolver",
    "experimental",
    "experimental_set_strategy",
    "get_cross_replica_context",
    "get_replica_context",
    "get_strategy",
    "has_strategy",
    "in_cross_replica_context",
]

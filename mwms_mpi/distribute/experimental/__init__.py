"""The tf.distribute.experimental mirror: the deprecated MWMS alias, options, ValueContext,
preemption handling, and our ElasticHandler."""

from mwms_mpi.distribute.collective_all_reduce_strategy import (
    _CollectiveAllReduceStrategyExperimental as MultiWorkerMirroredStrategy,
)
from mwms_mpi.distribute.elastic import ElasticHandler
from mwms_mpi.distribute.failure_handling import (
    PreemptionCheckpointHandler,
    TerminationConfig,
)
from mwms_mpi.distribute.input_context import ValueContext
from mwms_mpi.types import (
    CollectiveCommunication,
    CommunicationImplementation,
    CommunicationOptions,
)

__all__ = [
    "CollectiveCommunication",
    "CommunicationImplementation",
    "CommunicationOptions",
    "ElasticHandler",
    "MultiWorkerMirroredStrategy",
    "PreemptionCheckpointHandler",
    "TerminationConfig",
    "ValueContext",
]

"""mwms_mpi: TensorFlow's MultiWorkerMirroredStrategy semantics over MPI, for numpy/CuPy arrays.

Importing the package never initialises MPI; that happens on the first collective.
"""

from mwms_mpi import _interpreter

_interpreter.check()  # first: another Python than the venv's gets one message saying so

from mwms_mpi import _lifecycle, _logging, config, data, distribute, errors, metrics, nn, train
from mwms_mpi._name_scope import get_current_name_scope, name_scope
from mwms_mpi.train.module import Module
from mwms_mpi.types import VariableAggregation, VariableSynchronization
from mwms_mpi.values import IndexedSlices, Variable

__all__ = [
    "IndexedSlices",
    "Module",
    "Variable",
    "VariableAggregation",
    "VariableSynchronization",
    "config",
    "data",
    "distribute",
    "errors",
    "get_current_name_scope",
    "metrics",
    "name_scope",
    "nn",
    "train",
]
__version__ = "0.1.0"

_logging.configure()  # the rank in every record, warnings only unless MWMS_MPI_LOG_LEVEL says
_lifecycle.install_abort_hook()  # a multi-rank job ends when one rank fails (touches no MPI)

"""The ``tf.data`` mirror: a numpy, in-process ``Dataset`` and the options distribution reads."""

from mwms_mpi.data import experimental
from mwms_mpi.data.dataset import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset
from mwms_mpi.data.options import Options
from mwms_mpi.data.tensor_spec import DatasetSpec, TensorSpec

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "Dataset",
    "DatasetSpec",
    "Options",
    "TensorSpec",
    "experimental",
]

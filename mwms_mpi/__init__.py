"""mwms_mpi: TensorFlow's MultiWorkerMirroredStrategy semantics over MPI, for numpy/CuPy arrays.

Importing the package never initialises MPI; that happens on the first collective.
"""

from mwms_mpi import data, distribute, errors, train

__all__ = ["data", "distribute", "errors", "train"]
__version__ = "0.1.0"

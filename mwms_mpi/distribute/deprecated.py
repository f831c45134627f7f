"""The older names of the strategy API (the seeds' TF 2.0-2.2 programs), kept working.

Each deprecated name warns once per process with a ``DeprecationWarning`` naming its
replacement, then does what TF does: ``make_dataset_iterator`` and ``make_input_fn_iterator``
return TF 1.x-style iterators (``get_next``, ``initialize``) over the distributed dataset,
``experimental_make_numpy_dataset`` makes a dataset of a numpy nest's slices.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np

from mwms_mpi import nest
from mwms_mpi.data import Dataset

_warned: set[str] = set()
_lock = threading.Lock()


def warn_once(old: str, new: str) -> None:
    """Warns (``DeprecationWarning``, once per process) that ``old`` is deprecated for ``new``."""
    with _lock:
        if old in _warned:
            return
        _warned.add(old)
    warnings.warn(f"{old} is deprecated: use {new} instead.", DeprecationWarning, stacklevel=3)


class DistributedIteratorV1:
    """TF's ``DistributedIteratorV1`` (``make_dataset_iterator``/``make_input_fn_iterator``).

    Args:
      dataset: the ``DistributedDataset`` to iterate over.
    """

    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset
        self._iterator = iter(dataset)

    def get_next(self) -> Any:
        """The next element: one value per local replica (``PerReplica`` or a plain value).

        Raises:
          OutOfRangeError: at the end of the data (TF's eager iterator raises it too).
        """
        return self._iterator.get_next()

    def get_next_as_optional(self) -> Any:
        """The next element as an ``Optional``, empty at the end of the data on every worker."""
        return self._iterator.get_next_as_optional()

    def __iter__(self) -> DistributedIteratorV1:
        return self

    def __next__(self) -> Any:
        return next(self._iterator)

    @property
    def element_spec(self) -> Any:
        """The type specification of an element."""
        return self._iterator.element_spec

    def initialize(self) -> None:
        """Restarts the iteration from the dataset's beginning and returns ``None``, as TF's
        eager ``DistributedIteratorV1.initialize`` does (it recreates each worker's iterator
        and groups no ops)."""
        warn_once("DistributedIteratorV1.initialize", "the iterator's initializer property")
        self._restart()

    @property
    def initializer(self) -> None:
        """Restarts the iteration too, and is ``None`` (TF eagerly: an empty group of the
        recreated iterators' initializers)."""
        self._restart()
        return None

    def _restart(self) -> None:
        self._iterator = iter(self._dataset)


def numpy_dataset(numpy_input: Any) -> Dataset:
    """The dataset of ``numpy_input``'s slices along the first axis (TF's numpy dataset).

    Raises:
      AttributeError: for a leaf that is not a numpy array (TF's own failure on ``.shape``).
    """
    for leaf in nest.flatten(numpy_input):
        if not isinstance(leaf, np.ndarray):
            raise AttributeError(f"'{type(leaf).__name__}' object has no attribute 'shape'")
    return Dataset.from_tensor_slices(numpy_input)

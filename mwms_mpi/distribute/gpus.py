"""The GPUs of a worker's replicas: which one each replica uses, and putting values on them.

A strategy whose replicas run on GPUs (``worker_devices`` are ``GPU:i``, from the resolver's
``num_accelerators``) binds the calling thread to its first replica's GPU when it is built (the
rank's GPU: ``node_local_rank % visible GPUs`` for ``MPIClusterResolver``), runs each further
local replica's thread on its own GPU, makes variables created from CuPy values on each
replica's GPU, and (``InputOptions.experimental_fetch_to_device``, TF's default) hands each
replica its batch on its GPU. Without CuPy or a visible GPU there is nothing to place: device
names stay names and values stay numpy, as before. CuPy is imported only here, and only when a
strategy runs on GPUs.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _arrays, _env, nest

# CuPy's switch to per-thread default streams (read when CuPy is imported).
PER_THREAD_STREAM_ENV = "CUPY_CUDA_PER_THREAD_DEFAULT_STREAM"


class GpuPlacement:
    """The CUDA devices of a worker's local replicas, in replica order.

    Args:
      ids: the CUDA device number (as this process sees them) of each local replica.
    """

    def __init__(self, ids: Sequence[int]) -> None:
        import cupy

        self._cupy = cupy
        self.ids = tuple(int(i) for i in ids)

    def bind(self) -> None:
        """Makes the first replica's GPU the calling thread's current device."""
        self._cupy.cuda.Device(self.ids[0]).use()

    @contextlib.contextmanager
    def replica(self, i: int) -> Iterator[None]:
        """Runs the block (replica ``i``'s thread) with replica ``i``'s GPU current."""
        with self._cupy.cuda.Device(self.ids[i]):
            yield

    def place(self, value: Any, i: int) -> Any:
        """A device array on replica ``i``'s GPU (a copy if it is on another, ordered after its
        source's work: ``_arrays.onto``); else ``value``."""
        if not _arrays.is_device_array(value) or value.device.id == self.ids[i]:
            return value
        return _arrays.onto(value, self._cupy.cuda.Device(self.ids[i]))

    def fetch(self, element: Any, i: int) -> Any:
        """An input element with its numpy arrays copied onto replica ``i``'s GPU."""

        def to_device(leaf: Any) -> Any:
            host = isinstance(leaf, np.ndarray) and not _arrays.is_device_array(leaf)
            if host and leaf.dtype.kind in "biufc":  # (the tests' CuPy stand-in is an ndarray)
                with self._cupy.cuda.Device(self.ids[i]):
                    return self._cupy.asarray(leaf)
            return self.place(leaf, i)

        return nest.map_structure(to_device, element)


def gpu_count() -> int:
    """How many GPUs CuPy sees in this process (0 without CuPy, a driver or a device)."""
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device: CPU only
        return 0


def placement_for(devices: Sequence[str], ids: Sequence[int] | None = None) -> GpuPlacement | None:
    """The placement of replicas on ``devices``, or ``None`` when they are not usable GPUs.

    Args:
      devices: the replicas' canonical device names (``.../device:GPU:1``).
      ids: the CUDA device of each replica, when the resolver knows them (the node-local
        rank's GPU); else each name's index.
    """
    if not devices or any(":GPU:" not in d.upper() for d in devices):
        return None
    count = gpu_count()
    if count == 0:
        return None
    if len(devices) > 1 and _env.env_str(PER_THREAD_STREAM_ENV) == "1":  # CuPy's own test
        raise ValueError(
            f"{PER_THREAD_STREAM_ENV}=1 with {len(devices)} GPU replicas per worker: each "
            "replica's thread would queue its work on a stream of its own, which the thread "
            "that sums the replicas' values does not wait for (stale gradients). Unset it, or "
            "run one replica (one GPU) per MPI rank."
        )
    if ids is None or len(ids) != len(devices):
        ids = [int(d.rsplit(":", 1)[-1]) for d in devices]
    return GpuPlacement([i % count for i in ids])

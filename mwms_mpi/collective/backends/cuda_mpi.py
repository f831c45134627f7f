"""Device arrays handed to a CUDA-aware MPI (mpi4py reads their CUDA array interface).

Used only when every rank's MPI is known to be CUDA-aware (``cuda_aware.py``; a device pointer
given to any other MPI kills the process). Measured through Intel MPI with ``I_MPI_OFFLOAD=1``
(docs/gpus.md, "Measured on one H100"; 2 ranks): device pointers cost about 180 us a call for
small buffers, where pinned staging costs tens, and win from tens of megabytes up (64 MB: 26 ms
against 30 ms pipelined staging). So buffers below ``min_device_bytes`` (agreed with the
transport) are staged; the rule reads only the agreed byte count, so every rank takes the same
path. The stream is synchronised before MPI reads the buffer: MPI knows nothing of CUDA streams.

An in-place ``Allreduce`` on device pointers took 1.33-1.35x as long as the same call out of
place (Intel MPI 2021.14, offload on, 2 ranks on one H200: 11.5 against 8.7 ms at 16 MB, 44.3
against 32.8 ms at 64 MB), and a packed batch is reduced in place in its pack buffer, so a call
in place is made out of place from a device copy of the buffer (a copy of 64 MB takes tens of
microseconds on the device; the copy lives for the call).

Only blocking device-pointer calls were measured under Intel MPI: calls under a deadline (the
nonblocking MPI forms) are staged until a device test shows ``Iallreduce`` on device pointers
works there.

Broadcasts are always staged: on the GPU machine ``Bcast`` of a device buffer of 1 MB and more
killed the receiving rank (SIGSEGV inside Intel MPI 2021.14 with ``I_MPI_OFFLOAD=1``; every
dtype of 4 bytes and up at 256 Ki elements, while smaller buffers, ``Allreduce`` in place and out
of place, MAX/MIN and ``Allgatherv`` were correct: docs/gpus.md, "What a CUDA-aware MPI was
probed for"). A broadcast moves a variable's initial value once, so staging costs little.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

from mwms_mpi.collective.backends.staging import StagingBackend
from mwms_mpi.collective.deadline import Completion
from mwms_mpi.collective.ops import Op


class CudaMPIBackend:
    """Device arrays to MPI directly from ``min_device_bytes`` up, staged below.

    Args:
      mpi: the ``mpi4py.MPI`` module.
      staging: the staging backend for small buffers and calls under a deadline.
      min_device_bytes: the smallest buffer handed to MPI as a device pointer.
    """

    name = "cuda_mpi"
    device: int | None = None  # MPI takes a pointer on any device
    errors: tuple[type[Exception], ...] = ()  # MPI's are the communicator's already

    def __init__(
        self, mpi: types.ModuleType, staging: StagingBackend, min_device_bytes: int
    ) -> None:
        self._ops = {Op.SUM: mpi.SUM, Op.MAX: mpi.MAX, Op.MIN: mpi.MIN}
        self._staging = staging
        self._runtime = staging.runtime
        self.min_device_bytes = int(min_device_bytes)

    @property
    def xp(self) -> types.ModuleType:
        """The device array module."""
        return self._staging.xp

    def supports(self, array: object) -> bool:
        """Device arrays."""
        return self._staging.supports(array)

    def is_sendable(self, array: Any) -> bool:
        """A C-contiguous device array."""
        return self._staging.is_sendable(array)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A new device array."""
        return self._staging.empty(shape, dtype)

    def close(self) -> None:
        """Drops the staging backend's pinned buffers."""
        self._staging.close()

    def direct(self, nbytes: int, blocking: bool) -> bool:
        """Whether a buffer of ``nbytes`` (agreed) goes to MPI as a device pointer."""
        return blocking and nbytes >= self.min_device_bytes

    def all_reduce(
        self, comm: Any, send: Any | None, recv: Any, op: Op, blocking: bool
    ) -> Completion | None:
        """``Allreduce`` on device pointers, or staged (small, or under a deadline)."""
        if not self.direct(recv.nbytes, blocking):
            return self._staging.all_reduce(comm, send, recv, op, blocking)
        if send is None:  # in place costs 1.35x out of place (above): reduce from a copy
            send = recv.copy()
        self._runtime.synchronize(self._runtime.current_stream())
        comm.Allreduce(send, recv, self._ops[op])
        return None

    def all_gatherv(
        self, comm: Any, send: Any, recv: Any, counts: Sequence[int], blocking: bool
    ) -> Completion | None:
        """``Allgatherv`` on device pointers, or staged."""
        if not self.direct(recv.nbytes, blocking):
            return self._staging.all_gatherv(comm, send, recv, counts, blocking)
        displs = [0] * len(counts)
        for i in range(1, len(counts)):
            displs[i] = displs[i - 1] + counts[i - 1]
        self._runtime.synchronize(self._runtime.current_stream())
        comm.Allgatherv(send, [recv, (list(counts), displs)])
        return None

    def broadcast(self, comm: Any, buf: Any, root: int, blocking: bool) -> Completion | None:
        """Staged, whatever its size: ``Bcast`` on device pointers crashed Intel MPI (above)."""
        return self._staging.broadcast(comm, buf, root, blocking)


def make(mpi: types.ModuleType, transport: Any, comm: Any, device: int | None) -> CudaMPIBackend:
    """The CUDA-aware backend with the communicator's agreed crossover and chunk sizes."""
    del comm, device
    staging = StagingBackend(mpi, transport.chunk_bytes, transport.pipeline_bytes)
    return CudaMPIBackend(mpi, staging, transport.min_device_bytes)

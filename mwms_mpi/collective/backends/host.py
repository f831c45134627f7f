"""Collectives on numpy arrays through mpi4py's buffer API: no pickling on the data path."""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi import _arrays
from mwms_mpi.collective import host_memory
from mwms_mpi.collective.deadline import Completion
from mwms_mpi.collective.ops import Op


class HostBackend:
    """numpy buffers handed to MPI directly (``Allreduce``, ``Allgatherv``, ``Bcast``)."""

    name = "host"
    device: int | None = None
    errors: tuple[type[Exception], ...] = ()  # MPI's are the communicator's already
    xp: Any = np

    def __init__(self, mpi: types.ModuleType) -> None:
        self._ops = {Op.SUM: mpi.SUM, Op.MAX: mpi.MAX, Op.MIN: mpi.MIN}
        self._in_place = mpi.IN_PLACE

    def supports(self, array: object) -> bool:
        """numpy arrays and scalars (the strategy layer converts Python values first); never a
        device array, whatever its type derives from."""
        return isinstance(array, np.ndarray | np.generic) and not _arrays.is_device_array(array)

    def is_sendable(self, array: Any) -> bool:
        """Whether MPI can read ``array`` as it is: a C-contiguous, native-order ndarray."""
        return type(array) is np.ndarray and array.flags.c_contiguous and array.dtype.isnative

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A new uninitialised numpy array (a large one on huge pages: ``host_memory.py``)."""
        return host_memory.empty(shape, dtype)

    def all_reduce(
        self, comm: Any, send: Any | None, recv: Any, op: Op, blocking: bool
    ) -> Completion | None:
        """``Allreduce``/``Iallreduce``; ``send=None`` reduces ``recv`` in place."""
        source = self._in_place if send is None else send
        if blocking:
            comm.Allreduce(source, recv, self._ops[op])
            return None
        request: Completion = comm.Iallreduce(source, recv, self._ops[op])
        return request

    def all_gatherv(
        self, comm: Any, send: Any, recv: Any, counts: Sequence[int], blocking: bool
    ) -> Completion | None:
        """``Allgatherv``/``Iallgatherv`` with per-rank element counts; ``Allgather`` when the
        counts are equal (the same list on every rank, so every rank makes the same call;
        MPICH's ``Allgather`` measured 1.3x faster at 256 KB and 2 ranks)."""
        if counts and counts.count(counts[0]) == len(counts):
            if blocking:
                comm.Allgather(send, recv)
                return None
            gathered: Completion = comm.Iallgather(send, recv)
            return gathered
        displs = [0] * len(counts)
        for i in range(1, len(counts)):
            displs[i] = displs[i - 1] + counts[i - 1]
        spec = [recv, (list(counts), displs)]
        if blocking:
            comm.Allgatherv(send, spec)
            return None
        request: Completion = comm.Iallgatherv(send, spec)
        return request

    def broadcast(self, comm: Any, buf: Any, root: int, blocking: bool) -> Completion | None:
        """``Bcast``/``Ibcast`` of ``buf`` from ``root``."""
        if blocking:
            comm.Bcast(buf, root)
            return None
        request: Completion = comm.Ibcast(buf, root)
        return request

    def close(self) -> None:
        """Nothing to release."""

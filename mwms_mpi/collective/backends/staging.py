"""Device arrays through host MPI: device -> pinned host buffer -> MPI -> device. Always available.

Measured on one H100 with 2 ranks (docs/gpus.md, "Measured on one H100"): naive staging
(pageable copies) costs 1.1-2x the host collective; a pinned buffer alone helps small and
medium sizes; cutting a large buffer in 4 MB chunks, so that the copies of one chunk overlap
the collective of another, beats the host collective from 16-64 MB on (64 MB: 30 ms against
53 ms). So a buffer up to ``pipeline_bytes`` is one pinned copy each way on the caller's
stream; a larger one is copied to the host chunk by chunk on a side stream (an event per
chunk), each chunk reduced as soon as it has landed, and copied back on a second side stream.

Which MPI calls a buffer takes (one, or one per chunk) depends only on its byte count, which
every rank agreed, and on the chunk sizes agreed when the communicator was built
(``transport.py``). Under a deadline, every MPI call is started in order before the call
returns its :class:`StagedCompletion` (copies to the host are local and bounded), so ranks
issue the same nonblocking collectives in the same order; polling then copies results back as
their requests complete, and the completion is done when the last copy has landed.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi.collective.backends.device import CupyRuntime, DeviceRuntime
from mwms_mpi.collective.backends.pinned import PinnedPool, view
from mwms_mpi.collective.deadline import Completion
from mwms_mpi.collective.ops import Op

Pair = tuple[Any, Any]  # (source, destination) of one copy


class _Piece:
    """One MPI call of a staged collective, with the copies before and after it."""

    __slots__ = ("call", "ins", "outs")

    def __init__(
        self, ins: Sequence[Pair], call: Callable[[bool], Any], outs: Sequence[Pair]
    ) -> None:
        self.ins = ins  # (device, host) copies
        self.call = call  # call(blocking) -> an MPI request when not blocking
        self.outs = outs  # (host, device) copies


class StagedCompletion:
    """A staged collective in flight: MPI requests started, copies back made as they complete.

    ``Test`` never blocks (MPI's ``Test``, CUDA event queries). ``buffers`` go back to the pool
    once everything has landed; a completion abandoned at a deadline keeps them.
    """

    def __init__(
        self,
        runtime: DeviceRuntime,
        pool: PinnedPool,
        pieces: Sequence[_Piece],
        requests: list[Any],
        stream: Any,
        buffers: list[np.ndarray],
    ) -> None:
        self._runtime = runtime
        self._pool = pool
        self._pieces = pieces
        self._requests = requests
        self._stream = stream
        self._buffers = buffers
        self._landed: list[Any] = [None] * len(pieces)

    def Test(self) -> bool:
        """Whether every piece has been reduced and copied back (advances the copies)."""
        runtime = self._runtime
        finished = True
        for i, piece in enumerate(self._pieces):
            if self._landed[i] is None:
                request = self._requests[i]
                if request is not None and not request.Test():
                    finished = False
                    continue
                self._requests[i] = None
                for host, device in piece.outs:
                    runtime.to_device(host, device, self._stream)
                self._landed[i] = runtime.record(self._stream)
            if not runtime.done(self._landed[i]):
                finished = False
        if finished and self._buffers:
            for buffer in self._buffers:
                self._pool.give(buffer)
            self._buffers = []
        return finished


class StagingBackend:
    """Collectives on device arrays through pinned host buffers and the host MPI calls.

    Args:
      mpi: the ``mpi4py.MPI`` module.
      chunk_bytes: the size of one chunk of a pipelined buffer.
      pipeline_bytes: buffers above this are cut in chunks.
      runtime: CUDA's streams and copies (CuPy unless a test gives another).
    """

    name = "staging"
    device: int | None = None  # copies run on each array's own device
    errors: tuple[type[Exception], ...] = ()  # MPI's are the communicator's already

    def __init__(
        self,
        mpi: types.ModuleType,
        chunk_bytes: int,
        pipeline_bytes: int,
        runtime: DeviceRuntime | None = None,
    ) -> None:
        self._ops = {Op.SUM: mpi.SUM, Op.MAX: mpi.MAX, Op.MIN: mpi.MIN}
        self._in_place = mpi.IN_PLACE
        self._runtime: DeviceRuntime = runtime if runtime is not None else CupyRuntime()
        self.chunk_bytes = max(1, int(chunk_bytes))
        self.pool = PinnedPool(self._runtime.pinned, self.chunk_bytes, self._runtime.release_pinned)
        self.pipeline_bytes = int(pipeline_bytes)

    @property
    def xp(self) -> types.ModuleType:
        """The device array module."""
        return self._runtime.xp

    @property
    def runtime(self) -> DeviceRuntime:
        """The CUDA seam (the CUDA-aware and NCCL backends share it)."""
        return self._runtime

    def supports(self, array: object) -> bool:
        """Device arrays."""
        return self._runtime.supports(array)

    def is_sendable(self, array: Any) -> bool:
        """A C-contiguous device array (device arrays are always in native byte order)."""
        return self._runtime.supports(array) and bool(array.flags.c_contiguous)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A new device array."""
        return self._runtime.empty(shape, dtype)

    def close(self) -> None:
        """Drops the pooled pinned buffers and gives their memory back."""
        self.pool.clear()

    def bounds(self, count: int, itemsize: int) -> list[tuple[int, int]]:
        """The element ranges of the MPI calls for ``count`` elements: one, or one per chunk."""
        if count * itemsize <= self.pipeline_bytes:
            return [(0, count)]
        step = max(1, self.chunk_bytes // itemsize)
        return [(a, min(count, a + step)) for a in range(0, count, step)]

    # -- the collectives ----------------------------------------------------------------------

    def all_reduce(
        self, comm: Any, send: Any | None, recv: Any, op: Op, blocking: bool
    ) -> Completion | None:
        """The element-wise reduction, chunk by chunk when large; ``send=None``: in place."""
        src = (recv if send is None else send).reshape(-1)
        out = recv.reshape(-1)
        buffer = self.pool.take(recv.nbytes)
        host = view(buffer, (out.size,), out.dtype)
        mpi_op, in_place = self._ops[op], self._in_place
        if blocking and recv.nbytes <= self.pipeline_bytes:  # the small-message path, direct
            runtime = self._runtime
            stream = runtime.current_stream()
            runtime.to_host(src, host, stream)
            runtime.synchronize(stream)
            comm.Allreduce(in_place, host, mpi_op)
            runtime.to_device(host, out, stream)
            runtime.synchronize(stream)
            self.pool.give(buffer)
            return None
        pieces = []
        for a, b in self.bounds(out.size, out.dtype.itemsize):
            chunk = host[a:b]

            def call(blocking: bool, chunk: np.ndarray = chunk) -> Any:
                if blocking:
                    return comm.Allreduce(in_place, chunk, mpi_op)
                return comm.Iallreduce(in_place, chunk, mpi_op)

            pieces.append(_Piece([(src[a:b], chunk)], call, [(chunk, out[a:b])]))
        return self._run(recv, pieces, [buffer], blocking)

    def all_gatherv(
        self, comm: Any, send: Any, recv: Any, counts: Sequence[int], blocking: bool
    ) -> Completion | None:
        """``Allgatherv`` of every rank's ``send`` (``counts[r]`` elements) through the host."""
        send_buffer, recv_buffer = self.pool.take(send.nbytes), self.pool.take(recv.nbytes)
        host_send = view(send_buffer, (send.size,), send.dtype)
        host_recv = view(recv_buffer, (recv.size,), recv.dtype)
        displs = [0] * len(counts)
        for i in range(1, len(counts)):
            displs[i] = displs[i - 1] + counts[i - 1]
        spec = [host_recv, (list(counts), displs)]

        def call(blocking: bool) -> Any:
            if blocking:
                return comm.Allgatherv(host_send, spec)
            return comm.Iallgatherv(host_send, spec)

        ins = [(send.reshape(-1), host_send)] if send.size else []
        piece = _Piece(ins, call, [(host_recv, recv.reshape(-1))])
        return self._run(recv, [piece], [send_buffer, recv_buffer], blocking)

    def broadcast(self, comm: Any, buf: Any, root: int, blocking: bool) -> Completion | None:
        """``Bcast`` of root's ``buf`` through the host."""
        buffer = self.pool.take(buf.nbytes)
        host = view(buffer, (buf.size,), buf.dtype)

        def call(blocking: bool) -> Any:
            return comm.Bcast(host, root) if blocking else comm.Ibcast(host, root)

        ins = [(buf.reshape(-1), host)] if comm.Get_rank() == root else []
        piece = _Piece(ins, call, [(host, buf.reshape(-1))])
        return self._run(buf, [piece], [buffer], blocking)

    # -- the pipeline ---------------------------------------------------------------------------

    def _run(
        self, result: Any, pieces: list[_Piece], buffers: list[np.ndarray], blocking: bool
    ) -> Completion | None:
        runtime = self._runtime
        current = runtime.current_stream()
        if blocking and len(pieces) == 1:  # one copy each way, on the caller's stream
            down = up = current
        else:
            down, up = runtime.side_streams(result)
            runtime.wait(down, runtime.record(current))  # the inputs are ready on the caller's
        copied = []
        for piece in pieces:
            for device, host in piece.ins:
                runtime.to_host(device, host, down)
            copied.append(runtime.record(down))
        try:
            if not blocking:
                requests = []
                for piece, event in zip(pieces, copied, strict=True):  # every rank: same calls
                    runtime.synchronize(event)
                    requests.append(piece.call(False))
                return StagedCompletion(runtime, self.pool, pieces, requests, up, buffers)
            for piece, event in zip(pieces, copied, strict=True):
                runtime.synchronize(event)
                piece.call(True)
                for host, device in piece.outs:
                    runtime.to_device(host, device, up)
        except BaseException:
            # MPI raised in mid-pipeline: the buffers are dropped, not pooled, so no copy into
            # or out of them may still be queued (their memory would go back to CUDA's pinned
            # pool while a copy writes it).
            runtime.synchronize(down)
            runtime.synchronize(up)
            raise
        runtime.synchronize(up)
        for buffer in buffers:
            self.pool.give(buffer)
        return None


def make(mpi: types.ModuleType, transport: Any, comm: Any, device: int | None) -> StagingBackend:
    """The staging backend with the communicator's agreed chunk sizes."""
    del comm, device
    return StagingBackend(mpi, transport.chunk_bytes, transport.pipeline_bytes)

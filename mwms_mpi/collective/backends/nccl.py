"""Device arrays through NCCL (``cupy.cuda.nccl``): one NCCL communicator per ``Communicator``.

The NCCL communicator is made from the ``Communicator``'s MPI ranks on its first device call:
rank 0 makes the unique id, MPI broadcasts it (:func:`exchange_unique_id`), every rank joins.
Every rank is in that call (it was agreed, and its agreed layout names NCCL), so making it
there is collective, and a numpy program on a GPU cluster never pays for an NCCL set-up.
``ncclCommInitRank`` waits for every rank and cannot be bounded, so under a deadline the first
call first waits, polled, for every rank at an ``Ibarrier`` (:class:`FirstCall`): a rank that
never comes is the call's ``DeadlineExceededError``, not a hang in NCCL's set-up. (A rank that
dies between that barrier and its own ``ncclCommInitRank`` still hangs the others there.) NCCL
refuses two ranks on one GPU, so ranks sharing one never get here (``transport.py`` found them
from their PCI bus ids first). Collectives are queued on the caller's current CuPy stream and
return at once, as TF's NCCL collectives do: later work on that stream sees the result.

What NCCL lacks is done another way: gathers of uneven sizes are one broadcast per rank in an
NCCL group, as bytes, so every dtype goes (equal sizes: one ``ncclAllGather``); dtypes NCCL has
no type for (16-bit integers) are staged through host MPI, a choice that reads only the agreed
dtype. Under a deadline a call is followed by an event that is polled, with NCCL's asynchronous
error asked at each poll; when the deadline passes or that error comes, the NCCL communicator is
aborted (``abort``, called by the call state when it poisons the communicator).

NCCL cannot run two ranks on the one GPU of the project's GPU machine, so its multi-rank path
is exercised there at one rank only (docs/gpus.md).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

from mwms_mpi.collective.backends.staging import StagingBackend
from mwms_mpi.collective.deadline import Completion
from mwms_mpi.collective.ops import Op

_NCCL_TYPES = {
    "int8": "NCCL_INT8",
    "uint8": "NCCL_UINT8",
    "int32": "NCCL_INT32",
    "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64",
    "uint64": "NCCL_UINT64",
    "float16": "NCCL_FLOAT16",
    "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64",
    "complex64": "NCCL_FLOAT32",  # a SUM of complex numbers is a SUM of their reals
    "complex128": "NCCL_FLOAT64",
}
_NCCL_OPS = {Op.SUM: "NCCL_SUM", Op.MAX: "NCCL_MAX", Op.MIN: "NCCL_MIN"}


def exchange_unique_id(comm: Any, make_id: Callable[[], Any]) -> Any:
    """Rank 0's ``make_id()`` on every rank of ``comm`` (one MPI broadcast; collective).

    If rank 0 fails to make it, every rank raises (rank 0's error named), instead of the
    others waiting for an id that never comes.

    Raises:
      RuntimeError: on every rank, when rank 0 could not make the id.
    """
    message: tuple[str, Any] = ("", None)
    if comm.Get_rank() == 0:
        try:
            message = ("id", make_id())
        except Exception as exc:
            message = ("error", f"{type(exc).__name__}: {exc}")
    what, value = comm.bcast(message, root=0)
    if what != "id":
        raise RuntimeError(f"NCCL: rank 0 could not make the communicator's unique id: {value}")
    return value


class NcclCompletion:
    """An NCCL call in flight under a deadline: an event after it, polled; ``abort`` on expiry."""

    def __init__(self, event: Any, backend: NcclBackend) -> None:
        self._event = event
        self._backend = backend

    def Test(self) -> bool:
        """Whether the call has completed on the GPU; raises NCCL's asynchronous error (a
        remote rank failed, a network error), after aborting the communicator, instead of
        waiting for an event that never comes."""
        self._backend.check_async_error()
        return bool(self._event.done)

    def abort(self) -> None:
        """Aborts the NCCL communicator (the call never completed on some rank)."""
        self._backend.abort()


class FirstCall:
    """A call under a deadline made before the NCCL communicator exists. Polled, the first one
    waits for every rank at an MPI ``Ibarrier``, then makes the communicator (every rank is
    there, so NCCL's set-up cannot wait for one that never comes), issues its call and polls
    its event; the calls started after it in the same collective (a batch's packs) wait for it
    to be issued, so every rank issues them in the same order.

    Args:
      barrier: the ``Ibarrier`` every rank posts at its first device call (``None`` for the
        calls queued behind it).
      before: the call queued before this one (``None`` for the first).
      issue: makes the communicator if needed, issues the call and returns its completion.
    """

    def __init__(
        self, barrier: Any, before: FirstCall | None, issue: Callable[[], NcclCompletion]
    ) -> None:
        self._barrier = barrier
        self._before = before
        self._issue = issue
        self.issued: NcclCompletion | None = None

    def Test(self) -> bool:
        """Whether the call has completed (issuing it once its turn came)."""
        if self.issued is None:
            if self._before is not None and self._before.issued is None:
                return False
            if self._barrier is not None and not self._barrier.Test():
                return False
            self.issued = self._issue()
        return self.issued.Test()

    def abort(self) -> None:
        """Aborts the NCCL communicator if the call was issued (else nothing was made)."""
        if self.issued is not None:
            self.issued.abort()


class NcclBackend:
    """Collectives on device arrays over one NCCL communicator, made on first use.

    Args:
      comm: the communicator's data MPI communicator (for the unique id only).
      staging: the staging backend, for dtypes NCCL has no type for.
      device: the CUDA device of this rank's NCCL communicator (``None``: the current one).
    """

    name = "nccl"

    def __init__(self, comm: Any, staging: StagingBackend, device: int | None) -> None:
        import cupy
        from cupy.cuda import nccl

        self._cupy = cupy
        self._nccl = nccl
        self.errors: tuple[type[Exception], ...] = (nccl.NcclError,)
        self._staging = staging
        self._mpi_comm = comm
        self._rank, self._size = comm.Get_rank(), comm.Get_size()
        self.device = cupy.cuda.runtime.getDevice() if device is None else int(device)
        self._made: Any = None  # the NCCL communicator, once the first device call made it
        self._first_calls: FirstCall | None = None  # the last call queued before it was made
        self._types = {k: getattr(nccl, v) for k, v in _NCCL_TYPES.items()}
        self._ops = {k: getattr(nccl, v) for k, v in _NCCL_OPS.items()}
        self._bytes = nccl.NCCL_UINT8
        self._aborted = False

    @property
    def _comm(self) -> Any:
        """The NCCL communicator, made on first use (collective: see the module docstring)."""
        if self._made is None:
            uid = exchange_unique_id(self._mpi_comm, self._nccl.get_unique_id)
            with self._cupy.cuda.Device(self.device):
                self._made = self._nccl.NcclCommunicator(self._size, uid, self._rank)
        return self._made

    @property
    def xp(self) -> types.ModuleType:
        """``cupy``."""
        module: types.ModuleType = self._cupy
        return module

    def supports(self, array: object) -> bool:
        """CuPy arrays."""
        return isinstance(array, self._cupy.ndarray)

    def is_sendable(self, array: Any) -> bool:
        """A C-contiguous CuPy array."""
        return isinstance(array, self._cupy.ndarray) and bool(array.flags.c_contiguous)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """``cupy.empty`` on the NCCL communicator's device."""
        with self._cupy.cuda.Device(self.device):
            return self._cupy.empty(shape, dtype=dtype)

    def check_async_error(self) -> None:
        """``ncclCommGetAsyncError``: raises ``NcclError`` (translated by the call, which
        poisons the communicator) after aborting the NCCL communicator, if NCCL reports one."""
        if self._made is None or self._aborted:
            return
        try:
            self._made.check_async_error()
        except self._nccl.NcclError:
            self.abort()
            raise

    def abort(self) -> None:
        """Aborts the NCCL communicator (after a deadline: the collective cannot complete)."""
        if not self._aborted and self._made is not None:
            self._aborted = True
            self._made.abort()

    def close(self) -> None:
        """Destroys the NCCL communicator (an aborted one is left alone) and the pinned pool."""
        if not self._aborted and self._made is not None:
            self._aborted = True
            self._made.destroy()
        self._staging.close()

    def _start(self, issue: Callable[[Any, Any], None], blocking: bool) -> Completion | None:
        """``issue(nccl_comm, stream)`` on the current stream: at once when blocking or once the
        communicator exists (then an event to poll under the deadline), else as a
        :class:`FirstCall` (the set-up waits for every rank first, polled)."""
        stream = self._cupy.cuda.get_current_stream()

        def now() -> NcclCompletion:
            issue(self._comm, stream)
            return NcclCompletion(stream.record(), self)

        if blocking:
            issue(self._comm, stream)
            return None
        if self._made is None:  # the barrier first; later calls queued behind the last one
            last = self._first_calls
            barrier = self._mpi_comm.Ibarrier() if last is None else None
            self._first_calls = FirstCall(barrier, last, now)
            return self._first_calls
        return now()

    def all_reduce(
        self, comm: Any, send: Any | None, recv: Any, op: Op, blocking: bool
    ) -> Completion | None:
        """``ncclAllReduce`` on the current stream; 16-bit integers are staged."""
        nccl_type = self._types.get(recv.dtype.name)
        if nccl_type is None:
            return self._staging.all_reduce(comm, send, recv, op, blocking)
        src = recv if send is None else send
        count = recv.size * (2 if recv.dtype.kind == "c" else 1)
        nccl_op = self._ops[op]

        def issue(nccl_comm: Any, stream: Any) -> None:
            nccl_comm.allReduce(src.data.ptr, recv.data.ptr, count, nccl_type, nccl_op, stream.ptr)

        return self._start(issue, blocking)

    def all_gatherv(
        self, comm: Any, send: Any, recv: Any, counts: Sequence[int], blocking: bool
    ) -> Completion | None:
        """Every rank's ``send`` into ``recv``, as bytes: one ``ncclAllGather`` when the
        (agreed) counts are equal, else one ``ncclBroadcast`` per rank in a group."""
        itemsize = recv.dtype.itemsize
        nccl = self._nccl

        def issue(nccl_comm: Any, stream: Any) -> None:  # nccl_comm made before any group
            if counts and all(c == counts[0] for c in counts):
                if counts[0]:
                    nccl_comm.allGather(
                        send.data.ptr, recv.data.ptr, counts[0] * itemsize, self._bytes, stream.ptr
                    )
                return
            offset = 0
            nccl.groupStart()
            try:
                for root, count in enumerate(counts):
                    if count:
                        target = recv.data.ptr + offset * itemsize
                        source = send.data.ptr if root == self._rank else target
                        nccl_comm.broadcast(
                            source, target, count * itemsize, self._bytes, root, stream.ptr
                        )
                    offset += count
            finally:
                nccl.groupEnd()

        return self._start(issue, blocking)

    def broadcast(self, comm: Any, buf: Any, root: int, blocking: bool) -> Completion | None:
        """``ncclBroadcast`` of root's ``buf``, in place, as bytes."""

        def issue(nccl_comm: Any, stream: Any) -> None:
            ptr = buf.data.ptr
            nccl_comm.broadcast(ptr, ptr, buf.nbytes, self._bytes, root, stream.ptr)

        return self._start(issue, blocking)


def make(mpi: types.ModuleType, transport: Any, comm: Any, device: int | None) -> NcclBackend:
    """The NCCL backend (its NCCL communicator is made on its first device call)."""
    staging = StagingBackend(mpi, transport.chunk_bytes, transport.pipeline_bytes)
    return NcclBackend(comm, staging, device)

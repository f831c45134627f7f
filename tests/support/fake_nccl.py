"""An NCCL double for the fake CuPy: ``cupy.cuda.nccl``'s API, the data really moved over MPI.

``fake_cupy.install()`` puts this module's API in ``cupy.cuda.nccl``, so that the package's NCCL
backend (``mwms_mpi/collective/backends/nccl.py``) runs on machines without a GPU. It checks what
a GPU would not tell a test, and does not check CUDA itself:

* **Arguments, as NCCL takes them**: integer pointers into fake device memory (a host buffer, a
  pointer on another device, or a count that runs past its allocation is an error, as the
  illegal access would be on a GPU), datatypes and reduction ops from NCCL's enums only (NCCL
  has no bool and no complex type), roots in range, a live communicator.
* **Meaning**: a reduction's datatype must be the dtype of the buffer its pointer came from (a
  complex buffer may be reduced as its real component type, for SUM and AVG only); in-place
  calls must be exactly in place (NCCL leaves partial overlap undefined).
* **Call order**: every rank's calls on a communicator, with their counts, types, ops and roots,
  are gathered over MPI at every call (at ``groupEnd`` for grouped calls) and compared; ranks
  that differ raise on every rank, naming each rank's call, instead of exchanging garbage or
  hanging. Each communicator keeps its log (``calls``).
* **Streams**: the stream must be a live stream of the communicator's device and (the backend's
  contract, docs/gpus.md) the caller's current stream there. Results are not written at once:
  they are queued on that stream (``fake_streams.py``) and land when the caller orders itself
  after it, so a result read on another stream without an event reads stale bytes.
* **Groups**: grouped calls run at the outermost ``groupEnd``; ``groupEnd`` without
  ``groupStart`` is NCCL's invalid usage; touching device memory while a group holds calls
  (a ``groupStart`` never ended) is an error.

The data: every rank's send bytes travel to every rank with one MPI ``allgather`` on an MPI
communicator made for the NCCL communicator (the ranks find each other through the unique id,
which names its maker's world rank), and the reduction is done in numpy in NCCL's datatype, in
rank order. So results are real numbers from the other ranks, never a copy of the local value.
Limits: the maker of a unique id must join the communicator it names; point-to-point calls and
bfloat16 are not modelled. ``fake_nccl_calls.py`` holds the enums, the errors and one call;
``fake_nccl_rendezvous.py`` how the ranks meet.
"""

from __future__ import annotations

import itertools
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tests.support import fake_streams
from tests.support.fake_nccl_calls import (
    INVALID_ARGUMENT,
    INVALID_USAGE,
    NCCL_AVG,
    NCCL_BFLOAT16,
    NCCL_SUM,
    OPS,
    REMOTE_ERROR,
    TYPES,
    UNHANDLED_CUDA_ERROR,
    Call,
    DisciplineError,
    Failed,
    NcclError,
    Prepared,
    reduce_payloads,
)
from tests.support.fake_nccl_rendezvous import rendezvous, world

available = True
NCCL_UNIQUE_ID_BYTES = 128
_MAGIC = (0x6D, 0x77, 0x6D, 0x73)

expect_current_stream = True  # the backend's contract; the double's own tests turn it off
_serials = itertools.count(1)  # unique ids made here
_made = itertools.count(1)  # communicators joined here
_group = threading.local()  # .depth, .calls: [(communicator, prepared or failed call)]
_live: weakref.WeakSet[NcclCommunicator] = weakref.WeakSet()


def get_version() -> int:
    return 22809


def get_build_version() -> int:
    return 22809


def get_unique_id() -> tuple[int, ...]:
    """A unique id naming this process (its world rank) as the communicator's meeting point."""
    head = (*_MAGIC, world().Get_rank(), next(_serials), os.getpid() & 0x7FFFFFFF)
    return head + (0,) * (NCCL_UNIQUE_ID_BYTES - len(head))


def groupStart() -> None:
    _group.depth = getattr(_group, "depth", 0) + 1
    if _group.depth == 1:
        _group.calls = []


def groupEnd() -> None:
    """Runs the grouped calls at the outermost end, one exchange per communicator."""
    depth = getattr(_group, "depth", 0)
    if depth == 0:
        raise NcclError(INVALID_USAGE, "groupEnd() without groupStart()")
    _group.depth = depth - 1
    if depth > 1:
        return
    calls, _group.calls = _group.calls, []
    order: list[NcclCommunicator] = []
    for comm, _ in calls:
        if comm not in order:
            order.append(comm)
    for comm in order:
        comm._run([call for c, call in calls if c is comm])


def _check_no_open_group() -> None:
    if getattr(_group, "depth", 0) and _group.calls:
        names = ", ".join(call.what() for _, call in _group.calls)
        raise DisciplineError(
            f"fake NCCL: device memory used while an NCCL group holds calls that have not run "
            f"({names}): groupStart() without groupEnd()?"
        )


fake_streams._access_hooks.append(_check_no_open_group)


def communicators() -> list[NcclCommunicator]:
    """The live NCCL communicators of this process (for tests reading their call logs)."""
    return sorted(_live, key=lambda c: c.serial)


class NcclCommunicator:
    """``cupy.cuda.nccl.NcclCommunicator(ndev, commId, rank)``: joins the ranks of ``commId``.

    Collective over its ``ndev`` ranks (the id's maker among them). The communicator belongs
    to the current device.
    """

    def __init__(self, ndev: int, commId: Sequence[int], rank: int) -> None:
        if not isinstance(ndev, int) or ndev < 1 or not isinstance(rank, int):
            raise NcclError(INVALID_ARGUMENT, f"nranks {ndev!r}, rank {rank!r}")
        if not 0 <= rank < ndev:
            raise NcclError(INVALID_ARGUMENT, f"rank {rank} outside 0..{ndev - 1}")
        uid = tuple(commId)
        if len(uid) != NCCL_UNIQUE_ID_BYTES or uid[:4] != _MAGIC:
            raise NcclError(INVALID_ARGUMENT, "the unique id was not made by get_unique_id()")
        self.serial = next(_made)  # this process's count, for ordering its communicators
        self._rank, self._size = rank, ndev
        self._device = fake_streams.current_device()
        maker, made = int(uid[4]), int(uid[5])
        members = rendezvous(maker, made, ndev, rank)
        mpi_world = world()
        group = mpi_world.Get_group().Incl(members)
        self._mpi = mpi_world.Create_group(group, tag=made % 30000)
        group.Free()
        self.members = members  # world ranks, in NCCL rank order
        self.calls: list[Call] = []  # this rank's calls, in order (compared at every call)
        self._state = "live"
        self._async_error: NcclError | None = None
        _live.add(self)

    @property
    def state(self) -> str:
        """``"live"``, ``"destroyed"`` or ``"aborted"``."""
        return self._state

    # -- CuPy's API ---------------------------------------------------------------------------

    def device_id(self) -> int:
        return self._device

    def rank_id(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def destroy(self) -> None:
        self._state = "destroyed"
        _live.discard(self)

    def abort(self) -> None:
        self._state = "aborted"
        _live.discard(self)

    def check_async_error(self) -> None:
        """Raises the error :meth:`fail_asynchronously` planted (NCCL's asynchronous errors:
        a remote rank or the network failed while calls were in flight)."""
        if self._async_error is not None:
            raise self._async_error

    def fail_asynchronously(self, text: str) -> None:
        """Test hook: from now on ``check_async_error`` raises ``NcclError(text)``."""
        self._async_error = NcclError(REMOTE_ERROR, text)

    def allReduce(
        self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int, stream: int
    ) -> None:
        self._submit(
            "allReduce",
            lambda: self._reduction("allReduce", sendbuf, recvbuf, count, datatype, op, stream),
        )

    def reduce(
        self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int, root: int, stream: int
    ) -> None:
        self._submit(
            "reduce",
            lambda: self._reduction("reduce", sendbuf, recvbuf, count, datatype, op, stream, root),
        )

    def reduceScatter(
        self, sendbuf: int, recvbuf: int, recvcount: int, datatype: int, op: int, stream: int
    ) -> None:
        self._submit(
            "reduceScatter",
            lambda: self._reduction(
                "reduceScatter", sendbuf, recvbuf, recvcount, datatype, op, stream
            ),
        )

    def broadcast(
        self, sendbuf: int, recvbuf: int, count: int, datatype: int, root: int, stream: int
    ) -> None:
        self._submit(
            "broadcast", lambda: self._broadcast(sendbuf, recvbuf, count, datatype, root, stream)
        )

    def bcast(self, buff: int, count: int, datatype: int, root: int, stream: int) -> None:
        self._submit(
            "broadcast", lambda: self._broadcast(buff, buff, count, datatype, root, stream)
        )

    def allGather(self, sendbuf: int, recvbuf: int, count: int, datatype: int, stream: int) -> None:
        self._submit(
            "allGather", lambda: self._all_gather(sendbuf, recvbuf, count, datatype, stream)
        )

    # -- checks ----------------------------------------------------------------------------------

    def _common(
        self, kind: str, count: int, datatype: int, stream: int, root: int | None
    ) -> tuple[fake_streams.Stream, np.dtype]:
        if self._state != "live":
            raise NcclError(INVALID_USAGE, f"{kind} on a communicator that was {self._state}")
        for name, value in (("count", count), ("datatype", datatype), ("stream", stream)):
            if not isinstance(value, int | np.integer) or isinstance(value, bool):
                raise TypeError(f"fake NCCL: {kind}: {name} must be an integer, not {value!r}")
        if count < 0:
            raise NcclError(INVALID_ARGUMENT, f"{kind}: count {count}")
        if datatype not in TYPES:
            modelled = "not modelled by the double" if datatype == NCCL_BFLOAT16 else "invalid"
            raise NcclError(INVALID_ARGUMENT, f"{kind}: datatype {datatype!r} ({modelled})")
        if root is not None and not 0 <= root < self._size:
            raise NcclError(INVALID_ARGUMENT, f"{kind}: root {root} outside 0..{self._size - 1}")
        found = fake_streams.lookup(int(stream), self._device)
        if found is None:
            raise NcclError(
                UNHANDLED_CUDA_ERROR, f"{kind}: stream {stream:#x} is not a live stream"
            )
        if found.device_id != self._device:
            raise NcclError(
                UNHANDLED_CUDA_ERROR,
                f"{kind}: {found!r} for a communicator on device {self._device}",
            )
        current = fake_streams.current_stream(self._device)
        if expect_current_stream and found is not current:
            raise DisciplineError(
                f"fake NCCL: {kind} queued on {found!r}, but the caller's current stream on "
                f"device {self._device} is {current!r}: results would not be ordered before "
                "the caller's later work (docs/gpus.md: collectives run on the current stream)"
            )
        return found, TYPES[datatype][1]

    def _buffer(
        self, kind: str, role: str, ptr: int, nbytes: int, dtype: np.dtype, op: int | None
    ) -> np.ndarray | None:
        """Checks ``nbytes`` at ``ptr``; returns the allocation's owner (``None`` if empty)."""
        if not isinstance(ptr, int | np.integer) or isinstance(ptr, bool):
            raise TypeError(f"fake NCCL: {kind}: {role} must be an integer pointer, not {ptr!r}")
        if nbytes == 0:
            return None
        found = fake_streams.find(int(ptr))
        if found is None:
            raise NcclError(
                UNHANDLED_CUDA_ERROR,
                f"{kind}: {role} {ptr:#x} is not in any device allocation (a host buffer?)",
            )
        if found.device != self._device:
            raise NcclError(
                UNHANDLED_CUDA_ERROR,
                f"{kind}: {role} is on device {found.device}, the communicator on device "
                f"{self._device}",
            )
        if ptr + nbytes > found.high:
            raise NcclError(
                UNHANDLED_CUDA_ERROR,
                f"{kind}: {role} {ptr:#x} + {nbytes} bytes runs {ptr + nbytes - found.high} "
                f"bytes past its allocation of {found.high - found.low} bytes (illegal access)",
            )
        given = fake_streams.pointer_dtype(int(ptr), found)
        if op is not None and given is not None and given != dtype:
            component = np.dtype(given.char.lower()) if given.kind == "c" else None
            if given.kind != "c" or component != dtype or op not in (NCCL_SUM, NCCL_AVG):
                raise DisciplineError(
                    f"fake NCCL: {kind} of a {given} buffer ({role}) as {dtype} with "
                    f"NCCL_{OPS[op]}: NCCL would reduce the bytes as {dtype}"
                )
        return found.owner

    @staticmethod
    def _overlap(kind: str, a: int, b: int, nbytes_a: int, nbytes_b: int, allowed: int) -> None:
        """Send and receive ranges must be disjoint or exactly ``send == allowed``."""
        if nbytes_a and nbytes_b and a != allowed and a < b + nbytes_b and b < a + nbytes_a:
            raise DisciplineError(
                f"fake NCCL: {kind}: send [{a:#x}, +{nbytes_a}) and receive [{b:#x}, +{nbytes_b}) "
                "overlap without being in place (undefined in NCCL)"
            )

    def _reduction(
        self,
        kind: str,
        send: int,
        recv: int,
        count: int,
        datatype: int,
        op: int,
        stream: int,
        root: int | None = None,
    ) -> Prepared:
        s, dtype = self._common(kind, count, datatype, stream, root)
        if not isinstance(op, int | np.integer) or op not in OPS:
            raise NcclError(INVALID_ARGUMENT, f"{kind}: reduction op {op!r}")
        if op == NCCL_AVG and dtype.kind != "f":
            raise DisciplineError(f"fake NCCL: {kind}: NCCL_AVG of {dtype} is not modelled")
        n = count * dtype.itemsize
        in_bytes = n * self._size if kind == "reduceScatter" else n
        out_bytes = 0 if kind == "reduce" and root != self._rank else n
        owners = [self._buffer(kind, "sendbuf", send, in_bytes, dtype, op)]
        owners.append(self._buffer(kind, "recvbuf", recv, out_bytes, dtype, op))
        in_place = recv + self._rank * n if kind == "reduceScatter" else recv
        self._overlap(kind, send, recv, in_bytes, out_bytes, in_place)
        rank = self._rank

        def finish(payloads: list[Any]) -> tuple[int, np.ndarray] | None:
            if not out_bytes:
                return None
            reduced = reduce_payloads(payloads, dtype, op)
            if kind == "reduceScatter":
                reduced = reduced[rank * n : (rank + 1) * n]
            return recv, reduced

        call = Call(kind, count, int(datatype), int(op), root)
        return Prepared(call, s, (send, in_bytes), finish, [o for o in owners if o is not None])

    def _broadcast(
        self, send: int, recv: int, count: int, datatype: int, root: int, stream: int
    ) -> Prepared:
        s, dtype = self._common("broadcast", count, datatype, stream, root)
        n = count * dtype.itemsize
        owners = [self._buffer("broadcast", "recvbuf", recv, n, dtype, None)]
        source = None
        if self._rank == root:  # NCCL reads sendbuf on the root only
            owners.append(self._buffer("broadcast", "sendbuf", send, n, dtype, None))
            self._overlap("broadcast", send, recv, n, n, recv)
            source = (send, n)

        def finish(payloads: list[Any]) -> tuple[int, np.ndarray]:
            return recv, payloads[root]

        call = Call("broadcast", count, int(datatype), None, root)
        return Prepared(call, s, source, finish, [o for o in owners if o is not None])

    def _all_gather(self, send: int, recv: int, count: int, datatype: int, stream: int) -> Prepared:
        s, dtype = self._common("allGather", count, datatype, stream, None)
        n = count * dtype.itemsize
        owners = [self._buffer("allGather", "sendbuf", send, n, dtype, None)]
        owners.append(self._buffer("allGather", "recvbuf", recv, n * self._size, dtype, None))
        self._overlap("allGather", send, recv, n, n * self._size, recv + self._rank * n)

        def finish(payloads: list[Any]) -> tuple[int, np.ndarray]:
            return recv, np.concatenate(payloads)

        call = Call("allGather", count, int(datatype), None, None)
        return Prepared(call, s, (send, n), finish, [o for o in owners if o is not None])

    # -- running ---------------------------------------------------------------------------------

    def _submit(self, kind: str, prepare: Callable[[], Prepared]) -> None:
        """Checks the call, then runs it (or holds it until ``groupEnd``). A call that fails its
        checks still takes part in the exchange, so that every rank raises, none hangs."""
        try:
            item: Prepared | Failed = prepare()
        except Exception as exc:
            item = Failed(kind, exc)
        if getattr(_group, "depth", 0):
            _group.calls.append((self, item))
        else:
            self._run([item])

    def _run(self, items: Sequence[Prepared | Failed]) -> None:
        """One MPI exchange of these calls with every rank; compared, then landed."""
        mine = [
            (None, f"{type(i.error).__name__}: {i.error}")
            if isinstance(i, Failed)
            else (i.call, i.payload())
            for i in items
        ]
        everyone: list[list[tuple[Call | None, Any]]] = self._mpi.allgather(mine)
        start = len(self.calls)
        self.calls.extend(i.call for i in items if isinstance(i, Prepared))
        failed = [
            f"rank {r}: {text}"
            for r, theirs in enumerate(everyone)
            for call, text in theirs
            if call is None
        ]
        if failed:
            for item in items:
                if isinstance(item, Failed):
                    raise item.error
            raise DisciplineError(f"fake NCCL: another rank's call failed: {'; '.join(failed)}")
        sequences = [[call for call, _ in theirs] for theirs in everyone]
        if any(seq != sequences[0] for seq in sequences):
            listing = "; ".join(
                f"rank {r}: {', '.join(map(str, seq)) or 'nothing'}"
                for r, seq in enumerate(sequences)
            )
            raise DisciplineError(
                f"fake NCCL: communicator {self.serial}: the ranks' NCCL calls differ from call "
                f"{start}: {listing}"
            )
        for i, item in enumerate(items):
            assert isinstance(item, Prepared)
            item.land([theirs[i][1] for theirs in everyone])


def module_attributes() -> dict[str, Any]:
    """What ``cupy.cuda.nccl`` holds (``fake_cupy.install`` builds the module from it)."""
    from tests.support import fake_nccl_calls

    names = {n: getattr(fake_nccl_calls, n) for n in dir(fake_nccl_calls) if n.startswith("NCCL_")}
    api = ["available", "NcclError", "NcclCommunicator", "get_unique_id", "get_version"]
    api += ["get_build_version", "groupStart", "groupEnd", "NCCL_UNIQUE_ID_BYTES"]
    return {**names, **{n: globals()[n] for n in api}}

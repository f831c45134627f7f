"""The one object that moves data between ranks: collectives with layouts checked and deadlines.

A ``Communicator`` owns two duplicates of the communicator it is given (never ``COMM_WORLD``
itself): one carries data, the other the small agreements on layouts and gather counts, so a
rank waiting in an agreement can never be matched with another rank's data collective.

* **Layouts are agreed** on first use: every rank contributes a digest; a mismatch raises
  ``InvalidArgumentError`` on every rank. Whether to agree depends only on state every rank
  shares (the layouts so far), so ranks whose calls match decide alike; ``MWMS_MPI_CHECK=always``
  agrees on every call. A seen layout costs nothing extra.
* **Deadlines.** With ``timeout_seconds`` the nonblocking form is polled; on expiry the rank
  raises ``DeadlineExceededError`` and the communicator is *poisoned*: MPI cannot cancel a
  collective, so its buffers are kept, it is never freed, and later calls raise
  ``UnavailableError``. Without one, ``stall.py`` warns about long waits.
* **Fresh results**, never aliasing the caller's inputs or a cached buffer; **one thread** only.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from threading import get_ident
from time import monotonic
from typing import Any, NamedTuple, NoReturn

import numpy as np

from mwms_mpi import errors
from mwms_mpi._mpi import mpi
from mwms_mpi.collective import packing
from mwms_mpi.collective.backends import CollectiveBackend, default_backends, select
from mwms_mpi.collective.deadline import Completion, Deadline, wait_all
from mwms_mpi.collective.dtypes import contiguous, native, normalize_axis, wire_dtype
from mwms_mpi.collective.ops import Op
from mwms_mpi.collective.pool import BufferPool, Slot
from mwms_mpi.collective.signature import ANY, Layout, digest, mismatch_message
from mwms_mpi.collective.stall import process_watch, watched
from mwms_mpi.types import CommunicationOptions

CHECK_ENV = "MWMS_MPI_CHECK"  # "first" (default): agree on a layout's first use; "always"
_MAX_LAYOUTS = 4096  # seen layouts kept; eviction is FIFO, hence the same on every rank
_names = itertools.count()


class CommunicatorStats(NamedTuple):
    """Counts for tests and benchmarks: calls made and layout agreements run."""

    calls: int
    agreements: int


class Communicator:
    """Collectives over an MPI communicator, for numpy (and, with GPU backends, CuPy) arrays.

    Args:
      comm: the mpi4py communicator whose ranks take part; ``COMM_WORLD`` when ``None``. It is
        duplicated, never used directly.
      options: default ``CommunicationOptions``; each call's ``options`` are merged on top
        with TF's rule.
      name: a name for error messages; distinct names are made when ``None``.
      backends: the ordered backends to try (the default list when ``None``).
    """

    def __init__(
        self,
        comm: Any = None,
        *,
        options: CommunicationOptions | None = None,
        name: str | None = None,
        backends: Sequence[CollectiveBackend] | None = None,
    ) -> None:
        MPI = mpi()
        base = MPI.COMM_WORLD if comm is None else comm
        self._data = base.Dup()
        self._check = base.Dup()
        self.rank: int = self._data.Get_rank()
        self.size: int = self._data.Get_size()
        self.name = name or f"collective-{next(_names)}"
        self._options = options or CommunicationOptions()
        self._backends = list(backends) if backends is not None else default_backends(MPI)
        self._host = select(self._backends, np.empty(0))
        self._by_type: dict[type, CollectiveBackend] = {}
        self._seen: dict[Any, Any] = {}  # agreed layouts -> plan (None if nothing to plan)
        self._reductions: dict[Any, Slot] = {}  # agreed all_reduce layouts -> result buffers
        self._always_check = os.environ.get(CHECK_ENV, "first").lower() == "always"
        self._blocking = self._options.timeout_seconds is None
        self._owner = get_ident()
        self._mpi_error: type[Exception] = MPI.Exception
        self._poison: str | None = None
        self._abandoned: list[Any] = []  # requests and buffers of timed-out collectives
        self._closed = False
        self._usable = True  # False once poisoned or closed: one check on the fast path
        self._pool = BufferPool()
        self._calls = 0
        self._agreements = 0
        self._busy: tuple[str, int, float] | None = None  # the call in flight, for the watch
        process_watch().watch(self)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the duplicated communicators; a poisoned one is left alone (freeing can hang)."""
        if self._closed:
            return
        self._closed = True
        self._usable = False
        if self._poison is None:
            self._check.Free()
            self._data.Free()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stats(self) -> CommunicatorStats:
        """How many calls and layout agreements this communicator has made."""
        return CommunicatorStats(self._calls, self._agreements)

    @property
    def poisoned(self) -> str | None:
        """Why this communicator can no longer be used, or ``None``."""
        return self._poison

    # -- public collectives ------------------------------------------------------------------

    def all_reduce(
        self, array: Any, op: Op = Op.SUM, options: CommunicationOptions | None = None
    ) -> Any:
        """Reduces ``array`` element-wise over all ranks; every rank gets the same new array.

        Args:
          array: a numpy (or backend-supported) array of the same shape and dtype on every rank.
          op: ``Op.SUM``, ``Op.MAX`` or ``Op.MIN``.
          options: merged over the communicator's default ``CommunicationOptions``.

        Raises:
          InvalidArgumentError: if the ranks' shapes, dtypes or ops differ, or the dtype cannot
            be reduced with ``op`` (bool only with MAX/MIN, complex only with SUM).
          DeadlineExceededError: if ``timeout_seconds`` passed before all ranks joined.
          UnavailableError: if an earlier failure poisoned this communicator.
        """
        seq = self._enter("all_reduce")
        try:  # not @watched: the hot path marks its end in `finally` itself, one frame less
            backend = self._by_type.get(type(array)) or self._backend(array)
            fast = options is None and self._blocking
            deadline = None if fast else self._deadline(self._options.merge(options))
            key = (op, native(array.dtype), array.shape)  # a function of the layout alone
            slot = self._reductions.get(key)
            if slot is None or self._always_check:
                layout = Layout("all_reduce", op.value, ((array.dtype.name, array.shape),))
                self._agree("all_reduce", seq, layout, deadline)
                wire_dtype(array.dtype, op, "all_reduce", seq, self.rank)
                slot = self._pool.slot(array.shape, native(array.dtype))
                self._remember(self._reductions, key, slot)
            recv = slot.take(backend.empty)
            if backend.is_sendable(array):
                send = array
            else:  # one copy, into the result, which is then reduced in place
                backend.xp.copyto(recv, array)
                send = None
            wire = recv
            if slot.dtype.kind == "b":  # MPI has no MAX/MIN for C bool: send bytes
                wire = recv.view(np.uint8)
                send = None if send is None else send.view(np.uint8)
            if recv.size:
                if deadline is None:
                    backend.all_reduce(self._data, send, wire, op, True)
                else:
                    request = backend.all_reduce(self._data, send, wire, op, False)
                    self._complete("all_reduce", seq, deadline, [request], (send, recv))
            return recv
        except self._mpi_error as exc:
            raise self._internal("all_reduce", seq, exc) from exc
        finally:
            self._busy = None

    @watched
    def batch_all_reduce(
        self,
        arrays: Sequence[Any],
        op: Op = Op.SUM,
        options: CommunicationOptions | None = None,
    ) -> list[Any]:
        """Reduces many arrays with one MPI call per pack (TF's ``group_by_size`` packing).

        Packs are filled in reversed order, as TF's CollectiveAllReduce does, with
        ``bytes_per_pack`` from the merged options (0: one pack); the arrays of a pack that share
        a dtype are flattened into one fresh buffer and reduced in place. Results come back in
        the caller's order, with the original shapes and dtypes.

        Raises:
          As :meth:`all_reduce`, naming the first array whose layout differs.
        """
        arrays = list(arrays)
        first = arrays[0] if arrays else np.empty(0)
        seq, backend, opts, deadline = self._begin("batch_all_reduce", first, options)
        dtypes, shapes = tuple([native(a.dtype) for a in arrays]), tuple([a.shape for a in arrays])
        key = ("batch_all_reduce", op, opts.bytes_per_pack, dtypes, shapes)
        try:
            plan = self._seen.get(key)
            if plan is None or self._always_check:
                layout = Layout(
                    "batch_all_reduce",
                    op.value,
                    tuple((a.dtype.name, a.shape) for a in arrays),
                    (("bytes_per_pack", opts.bytes_per_pack),),
                )
                self._agree("batch_all_reduce", seq, layout, deadline)
                plan = self._plan_batch(arrays, backend, op, opts.bytes_per_pack, seq)
                self._remember(self._seen, key, plan)
            out: list[Any] = [None] * len(arrays)
            requests: list[Completion | None] = []
            blocking = deadline is None
            for chunk in plan:
                buffer = self._pool.take((chunk.total,), chunk.dtype, backend.empty)
                alone = arrays[chunk.segments[0].position] if len(chunk.segments) == 1 else None
                if alone is not None and alone.dtype == chunk.dtype and backend.is_sendable(alone):
                    send = alone.reshape(-1)  # nothing to pack: reduce out of place
                else:
                    send = None
                    packing.pack(chunk, arrays, buffer)
                requests.append(backend.all_reduce(self._data, send, buffer, op, blocking))
                packing.unpack(buffer, chunk, out)
            self._complete("batch_all_reduce", seq, deadline, requests, (arrays, out))
            for i, a in enumerate(arrays):
                if out[i] is None:  # no elements: nothing was sent
                    out[i] = backend.empty(a.shape, native(a.dtype))
                elif a.dtype.kind == "b":
                    out[i] = out[i].view(np.bool_)
            return out
        except self._mpi_error as exc:
            raise self._internal("batch_all_reduce", seq, exc) from exc

    @watched
    def all_gather(
        self, array: Any, axis: int = 0, options: CommunicationOptions | None = None
    ) -> Any:
        """Concatenates every rank's ``array`` along ``axis``, in rank order.

        Sizes along ``axis`` may differ between ranks (``Allgatherv``); every other dimension,
        the rank of the array and the dtype must agree.

        Raises:
          ValueError: for a 0-d array or an ``axis`` out of range.
          InvalidArgumentError: if the ranks' dtypes or other dimensions differ.
        """
        seq, backend, _, deadline = self._begin("all_gather", array, options)
        axis = normalize_axis(array, axis, "all_gather")
        xp = backend.xp
        send = contiguous(backend, array if axis == 0 else xp.moveaxis(array, axis, 0))
        layout = Layout(
            "all_gather", "", ((array.dtype.name, (ANY, *send.shape[1:])),), (("axis", axis),)
        )
        (recv,) = self._gather_rows("all_gather", seq, [send], layout, backend, deadline)
        return recv if axis == 0 else xp.ascontiguousarray(xp.moveaxis(recv, 0, axis))

    @watched
    def all_gather_sparse(
        self, values: Any, indices: Any, options: CommunicationOptions | None = None
    ) -> tuple[Any, Any]:
        """Gathers ``IndexedSlices``-style ``(values, indices)`` pairs from every rank.

        TF reduces sparse values by concatenating every replica's slices (not by densifying);
        this gathers both arrays along axis 0 with one count exchange. Row counts may differ.

        Raises:
          ValueError: if ``values`` and ``indices`` have different numbers of rows.
        """
        seq, backend, _, deadline = self._begin("all_gather_sparse", values, options)
        if values.ndim < 1 or indices.ndim != 1 or values.shape[0] != indices.shape[0]:
            raise ValueError(
                f"all_gather_sparse on rank {self.rank}: values of shape {values.shape} and "
                f"indices of shape {indices.shape} must have the same number of rows"
            )
        items = ((values.dtype.name, (ANY, *values.shape[1:])), (indices.dtype.name, (ANY,)))
        parts = [contiguous(backend, values), contiguous(backend, indices)]
        layout = Layout("all_gather_sparse", "", items)
        gathered = self._gather_rows("all_gather_sparse", seq, parts, layout, backend, deadline)
        return gathered[0], gathered[1]

    @watched
    def broadcast(
        self, array: Any, root: int = 0, options: CommunicationOptions | None = None
    ) -> Any:
        """Returns a new array holding ``root``'s ``array`` on every rank.

        Every rank passes an array of the same shape and dtype; only ``root``'s content is used.
        """
        seq, backend, _, deadline = self._begin("broadcast", array, options)
        key = ("broadcast", root, native(array.dtype), array.shape)
        try:
            if self._always_check or key not in self._seen:
                layout = Layout(
                    "broadcast", "", ((array.dtype.name, array.shape),), (("root", root),)
                )
                self._agree("broadcast", seq, layout, deadline)
                self._remember(self._seen, key, None)
            buf = self._pool.take(array.shape, native(array.dtype), backend.empty)
            if self.rank == root:
                backend.xp.copyto(buf, array)
            if buf.size:
                request = backend.broadcast(self._data, buf, root, deadline is None)
                self._complete("broadcast", seq, deadline, [request], buf)
            return buf
        except self._mpi_error as exc:
            raise self._internal("broadcast", seq, exc) from exc

    @watched
    def barrier(self, options: CommunicationOptions | None = None) -> None:
        """Returns once every rank has called ``barrier`` (with the merged timeout)."""
        seq, _, _, deadline = self._begin("barrier", None, options)
        key = ("barrier",)
        try:
            if self._always_check or key not in self._seen:
                self._agree("barrier", seq, Layout("barrier", "", ()), deadline)
                self._remember(self._seen, key, None)
            if deadline is None:
                self._data.Barrier()
            else:
                self._complete("barrier", seq, deadline, [self._data.Ibarrier()], None)
        except self._mpi_error as exc:
            raise self._internal("barrier", seq, exc) from exc

    # -- machinery ---------------------------------------------------------------------------

    def _enter(self, op_name: str) -> int:
        """Numbers the call; refuses it on a poisoned or closed communicator or foreign thread."""
        if not self._usable or get_ident() != self._owner:
            self._refuse(op_name)
        self._calls += 1
        self._busy = (op_name, self._calls, monotonic())
        return self._calls

    def _refuse(self, op_name: str) -> NoReturn:
        where = f"{op_name} on rank {self.rank} (communicator {self.name})"
        if self._poison is not None:
            text = f"{where}: unusable after an earlier failure: {self._poison}. Rebuild the "
            raise errors.UnavailableError(
                None, op_name, text + "strategy or end the job.", rank=self.rank
            )
        if self._closed:
            raise ValueError(f"{op_name}: communicator {self.name} is closed")
        raise RuntimeError(
            f"{op_name}: communicator {self.name} is used from a thread other than the one "
            "that created it; MPI is called from one thread only"
        )

    def _begin(
        self, op_name: str, array: Any, options: CommunicationOptions | None
    ) -> tuple[int, CollectiveBackend, CommunicationOptions, Deadline | None]:
        """Checks the call is allowed; its number, backend, merged options and deadline."""
        seq = self._enter(op_name)
        backend = self._host if array is None else self._backend(array)
        opts = self._options if options is None else self._options.merge(options)
        return seq, backend, opts, self._deadline(opts)

    def _backend(self, array: Any) -> CollectiveBackend:
        kind = type(array)
        backend = self._by_type.get(kind)
        if backend is None:
            backend = self._by_type[kind] = select(self._backends, array)
        return backend

    def _deadline(self, opts: CommunicationOptions) -> Deadline | None:
        """``None`` means: no timeout, call the blocking form."""
        return None if opts.timeout_seconds is None else Deadline(opts.timeout_seconds)

    def _complete(
        self,
        op_name: str,
        seq: int,
        deadline: Deadline | None,
        requests: Sequence[Completion | None],
        keepalive: object,
    ) -> None:
        """Waits for nonblocking requests against the deadline; poisons on expiry."""
        if deadline is None:
            return
        pending = [r for r in requests if r is not None]
        if wait_all(pending, deadline):
            return
        self._abandoned.append((pending, keepalive))
        self._usable = False
        waited = deadline.elapsed()
        self._poison = (
            f"{op_name} #{seq} on rank {self.rank} of {self.size} (communicator {self.name}) "
            f"timed out after {waited:.1f} s (timeout_seconds={deadline.timeout_seconds})"
        )
        raise errors.DeadlineExceededError(
            None,
            op_name,
            f"{self._poison}: not every rank joined it. A rank may have failed, skipped this "
            "collective or called another; MPI cannot cancel it, so this communicator is now "
            "unusable.",
            rank=self.rank,
        )

    def _agree(self, op_name: str, seq: int, layout: Layout, deadline: Deadline | None) -> None:
        """Checks that every rank passed ``layout``; raises on every rank if not."""
        d = digest(layout)
        send = np.array([d, -d], dtype=np.int64)
        recv = np.empty(2, dtype=np.int64)
        self._complete(
            op_name,
            seq,
            deadline,
            [self._host.all_reduce(self._check, send, recv, Op.MAX, deadline is None)],
            (send, recv),
        )
        self._agreements += 1
        if recv[0] != -recv[1]:
            self._raise_mismatch(op_name, seq, layout)

    @staticmethod
    def _remember(seen: dict[Any, Any], key: Any, plan: Any) -> None:
        """Marks a layout as agreed; evicts the oldest first, so every rank evicts alike."""
        if len(seen) >= _MAX_LAYOUTS:
            del seen[next(iter(seen))]
        seen[key] = plan

    def _plan_batch(
        self,
        arrays: Sequence[Any],
        backend: CollectiveBackend,
        op: Op,
        bytes_per_pack: int,
        seq: int,
    ) -> tuple[packing.Chunk, ...]:
        """The packing plan of an agreed batch layout, made once per layout."""
        for a in arrays:
            if select(self._backends, a) is not backend:
                raise TypeError(
                    f"batch_all_reduce #{seq}: all arrays must be of one kind, got "
                    f"{type(arrays[0]).__name__} and {type(a).__name__}"
                )
        wires = [wire_dtype(a.dtype, op, "batch_all_reduce", seq, self.rank) for a in arrays]
        return packing.plan_batch(wires, [a.shape for a in arrays], bytes_per_pack)

    def _gather_rows(
        self,
        op_name: str,
        seq: int,
        parts: Sequence[Any],
        layout: Layout,
        backend: CollectiveBackend,
        deadline: Deadline | None,
    ) -> list[Any]:
        """Gathers contiguous ``parts`` (same row count here) along axis 0 from every rank.

        One small ``Allgather`` on the agreement communicator carries each rank's row count and
        layout digest, so every call is checked; then one ``Allgatherv`` per part moves data.
        """
        try:
            send = np.array([parts[0].shape[0], digest(layout)], dtype=np.int64)
            table = np.empty((self.size, 2), dtype=np.int64)
            if deadline is None:
                self._check.Allgather(send, table)
            else:
                requests = [self._check.Iallgather(send, table)]
                self._complete(op_name, seq, deadline, requests, (send, table))
            self._agreements += 1
            if (table[:, 1] != table[0, 1]).any():
                self._raise_mismatch(op_name, seq, layout)
            rows = [int(r) for r in table[:, 0]]
            out = [
                self._pool.take((sum(rows), *p.shape[1:]), p.dtype, backend.empty) for p in parts
            ]
            if sum(rows):
                requests = []
                for part, recv in zip(parts, out, strict=True):
                    row_size = int(np.prod(part.shape[1:], dtype=np.int64))
                    counts = [r * row_size for r in rows]
                    requests.append(
                        backend.all_gatherv(self._data, part, recv, counts, deadline is None)
                    )
                self._complete(op_name, seq, deadline, requests, (parts, out))
            return out
        except self._mpi_error as exc:
            raise self._internal(op_name, seq, exc) from exc

    def _raise_mismatch(self, op_name: str, seq: int, layout: Layout) -> None:
        # Every rank is here (all completed the agreement), so this pickled gather is safe.
        layouts = self._check.allgather(layout)
        raise errors.InvalidArgumentError(
            None,
            op_name,
            mismatch_message(op_name, seq, self.rank, layouts, self.name),
            rank=self.rank,
        )

    def _internal(self, op_name: str, seq: int, exc: Exception) -> errors.InternalError:
        """Translates an MPI library error; the communicator's state is unknown after it."""
        self._poison = f"{op_name} #{seq} on rank {self.rank} failed in MPI: {exc}"
        self._usable = False
        return errors.InternalError(None, op_name, self._poison, rank=self.rank)

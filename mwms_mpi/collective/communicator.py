"""The one object that moves data between ranks: every call agreed, deadlines, lost ranks.

A ``Communicator`` owns two duplicates of the communicator it is given (never ``COMM_WORLD``
itself): one carries data, the other the agreements (``agreement.py``), so a rank waiting in an
agreement can never be matched with another rank's data collective.

* **Every call is agreed** before its data moves: a mismatch of kind, op, dtype, shape, root,
  options or of what the user called raises ``InvalidArgumentError`` on every rank, and the
  communicator stays usable (TF poisons its collective group there; nothing moved here). A rank
  that finds its own arguments invalid takes that into the agreement (:meth:`refuse`), so no
  rank is left waiting.
* **Deadlines, poisoning, lost ranks** (``calls.py``, ``watch.py``): an expired deadline
  raises ``DeadlineExceededError`` and poisons the communicator (MPI cannot cancel a
  collective); a call a departed peer never entered fails instead of waiting forever.
* **Results are values**: never aliasing the caller's inputs, never written again
  (``pool.py``); one thread only.
* **Host and device arrays.** numpy arrays go through host MPI; CuPy arrays through the one
  transport (NCCL, CUDA-aware MPI or staging) every rank agreed when the communicator was
  built (``transport.py``), which each device call's agreed layout names. Results stay on the
  device of the arrays they came from.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from mwms_mpi._logging import get_logger
from mwms_mpi._mpi import mpi, spans_world, world_ranks
from mwms_mpi.cluster import check_mpi_world
from mwms_mpi.collective import timeline, transport
from mwms_mpi.collective.agreement import VALUE_LIMIT, Agreement
from mwms_mpi.collective.backends import CollectiveBackend, default_backends, select
from mwms_mpi.collective.dtypes import contiguous, gatherable, native
from mwms_mpi.collective.gathers import gather_rows
from mwms_mpi.collective.plans import Plans
from mwms_mpi.collective.pool import BufferPool
from mwms_mpi.collective.reductions import ARGUMENT_ERRORS, Reductions
from mwms_mpi.collective.signature import Layout, digest
from mwms_mpi.collective.transport import Transport
from mwms_mpi.collective.watch import process_watch, watched
from mwms_mpi.types import CommunicationOptions

_log = get_logger(__name__)

_names = itertools.count()
_BARRIER = Layout("barrier", "", ())
_BARRIER_DIGEST = digest(_BARRIER)


class CommunicatorStats(NamedTuple):
    """Counts for tests and benchmarks: calls made and agreements run."""

    calls: int
    agreements: int


class Communicator(Reductions):
    """Collectives over an MPI communicator, for numpy (and, with GPU backends, CuPy) arrays.

    Construction is collective over ``comm``'s ranks.

    Args:
      comm: the mpi4py communicator whose ranks take part; ``COMM_WORLD`` when ``None``. It is
        duplicated, never used directly.
      options: default ``CommunicationOptions``; each call's ``options`` are merged on top
        with TF's rule.
      name: a name for error messages; distinct names are made when ``None``.
      backends: the ordered backends to try (the default list when ``None``: host MPI, then
        the agreed transport's backend for CuPy arrays).
      device: the CUDA device this rank's CuPy arrays live on: ``"current"`` (CuPy's current
        device, if CuPy and a GPU are there), a device number, or ``None`` (no GPU: CuPy
        arrays, if any, are staged or handed to a CUDA-aware MPI, never to NCCL).

    Raises:
      RuntimeError: if the launcher started several processes but this MPI world has one.
      ValueError: on every rank, if the ranks' ``MWMS_MPI_CHECK`` modes differ, or the
        device transport cannot be what ``options.implementation`` asks (NCCL for ranks
        that share a GPU).
    """

    def __init__(
        self,
        comm: Any = None,
        *,
        options: CommunicationOptions | None = None,
        name: str | None = None,
        backends: Sequence[CollectiveBackend] | None = None,
        device: int | str | None = "current",
    ) -> None:
        MPI = mpi()
        check_mpi_world()
        base = MPI.COMM_WORLD if comm is None else comm
        self._data = base.Dup()
        self.rank: int = self._data.Get_rank()
        self.size: int = self._data.Get_size()
        self.name = name or f"collective-{next(_names)}"
        try:
            agreement = Agreement(base.Dup(), MPI, self.name)
        except Exception:  # raised on every rank (a disagreement found at construction)
            self._data.Free()
            raise
        options = options or CommunicationOptions()
        try:  # collective: every rank gets the same transport, or the same error
            self._transport, facts = transport.agree(
                self._data, MPI, options.implementation, device
            )
            gpu = facts[self.rank].gpu
            self._backends = (
                list(backends)
                if backends is not None
                else default_backends(MPI, self._transport, self._data, gpu)
            )
        except Exception:
            agreement.close()
            self._data.Free()
            raise
        self._state = timeline.call_state(agreement, self.name, world_ranks(self._data), options)
        self._options = self._state.options
        self._host = select(self._backends, np.empty(0))
        self._by_type: dict[type, CollectiveBackend] = {}
        self._pool = BufferPool()
        self._plans = Plans(self.rank, self.size, self._pool)
        self._reduce_plans = self._plans.reduces
        # MPI's errors and the backends' libraries' (NCCL's), translated alike
        self._mpi_error = (MPI.Exception, *(e for b in self._backends for e in b.errors))
        process_watch().register(self._state, spans_world(base))
        if self._transport.warning:
            _log.warning(self._transport.warning)
        _log.info("%s", self.describe())

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the duplicated communicators; a poisoned one is left alone (freeing can hang)."""
        state = self._state
        if state.closed:
            return
        state.closed = True
        state.usable = False
        self._pool.clear(close=True)  # free buffers go now, leased ones with their last view
        if state.poisoned is None:
            for backend in self._backends:
                backend.close()
            state.agreement.close()
            self._data.Free()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def calls(self) -> int:
        """The number of calls this communicator has numbered (each agreed by every rank)."""
        return self._state.agreement.calls

    @property
    def stats(self) -> CommunicatorStats:
        """How many calls and agreements this communicator has made."""
        agreement = self._state.agreement
        return CommunicatorStats(agreement.calls, agreement.agreements)

    @property
    def transport(self) -> Transport:
        """The agreed transport of this communicator's device (CuPy) arrays."""
        return self._transport

    def describe(self) -> str:
        """One line: the communicator, its ranks, and how host and device arrays move."""
        t = self._transport
        device = t.name
        if t.name == transport.CUDA_MPI:
            device += f" (device pointers from {t.min_device_bytes} bytes, staged below)"
        elif t.name == transport.STAGING:
            device += f" (pinned; chunks of {t.chunk_bytes} bytes above {t.pipeline_bytes})"
        return (
            f"communicator {self.name}: rank {self.rank} of {self.size}; numpy arrays: host "
            f"MPI; CuPy arrays: {device}, {t.requested}: {t.reason}"
        )

    @property
    def poisoned(self) -> str | None:
        """Why this communicator can no longer be used, or ``None``."""
        return self._state.poisoned

    # -- public collectives ------------------------------------------------------------------

    @watched
    def all_gather(
        self, array: Any, axis: int = 0, options: CommunicationOptions | None = None
    ) -> Any:
        """Concatenates every rank's ``array`` along ``axis``, in rank order.

        Sizes along ``axis`` may differ between ranks (``Allgatherv``); every other dimension,
        the rank of the array and the dtype must agree.

        Raises:
          ValueError: on every rank, for a 0-d array or an ``axis`` out of range on any rank.
          InvalidArgumentError: if the ranks' dtypes or other dimensions differ.
        """
        n = self._state.begin("all_gather")
        deadline = self._state.merged(options)
        try:
            backend = self._backend(array)
            plan = self._plans.gather(array, axis, backend)
            xp = backend.xp
            axis = plan.axis
            send = contiguous(backend, array if axis == 0 else xp.moveaxis(array, axis, 0))
        except ARGUMENT_ERRORS as exc:
            self._state.refuse("all_gather", exc, deadline)
        try:
            (recv,) = gather_rows(
                self._state,
                self._data,
                self._pool,
                ("all_gather", n),
                [send],
                plan,
                backend,
                deadline,
            )
        except self._mpi_error as exc:
            raise self._state.internal("all_gather", n, exc) from exc
        return recv if axis == 0 else xp.ascontiguousarray(xp.moveaxis(recv, 0, axis))

    @watched
    def all_gather_sparse(
        self, values: Any, indices: Any, options: CommunicationOptions | None = None
    ) -> tuple[Any, Any]:
        """Gathers ``IndexedSlices``-style ``(values, indices)`` pairs from every rank.

        TF reduces sparse values by concatenating every replica's slices (not by densifying);
        this gathers both arrays along axis 0 in rank order. Row counts may differ.

        Raises:
          ValueError: on every rank, if ``values`` and ``indices`` have different numbers of
            rows on any rank.
        """
        n = self._state.begin("all_gather_sparse")
        deadline = self._state.merged(options)
        try:
            backend = self._backend(values)
            plan = self._plans.gather_sparse(values, indices, backend)
            parts = [contiguous(backend, values), contiguous(backend, indices)]
        except ARGUMENT_ERRORS as exc:
            self._state.refuse("all_gather_sparse", exc, deadline)
        call = ("all_gather_sparse", n)
        try:
            gathered = gather_rows(
                self._state, self._data, self._pool, call, parts, plan, backend, deadline
            )
        except self._mpi_error as exc:
            raise self._state.internal("all_gather_sparse", n, exc) from exc
        return gathered[0], gathered[1]

    @watched
    def broadcast(
        self, array: Any, root: int = 0, options: CommunicationOptions | None = None
    ) -> Any:
        """Returns a new array holding ``root``'s ``array`` on every rank.

        Every rank passes an array of the same shape and dtype; only ``root``'s content is used.

        Raises:
          ValueError: on every rank, if ``root`` is not a rank of this communicator.
        """
        n = self._state.begin("broadcast")
        deadline = self._state.merged(options)
        try:
            backend = self._backend(array)
            if type(root) is not int or not 0 <= root < self.size:
                raise ValueError(
                    f"broadcast: root {root!r} is not a rank of communicator {self.name} "
                    f"(ranks 0 to {self.size - 1})"
                )
            gatherable(array.dtype, "broadcast")
            plan = self._plans.broadcast(array, root, backend)
        except ARGUMENT_ERRORS as exc:
            self._state.refuse("broadcast", exc, deadline)
        try:
            self._state.agree("broadcast", plan.digest, plan.layout, deadline)
            buf = self._pool.take(array.shape, native(array.dtype), backend.empty, backend.name)
            if self.rank == root:
                backend.xp.copyto(buf, array)
            if buf.size:
                request = backend.broadcast(self._data, buf, root, deadline is None)
                self._state.complete("broadcast", n, deadline, [request], buf)
            return buf
        except self._mpi_error as exc:
            raise self._state.internal("broadcast", n, exc) from exc

    @watched
    def barrier(self, options: CommunicationOptions | None = None) -> None:
        """Returns once every rank has called ``barrier`` (the agreement itself synchronises)."""
        n = self._state.begin("barrier")
        try:
            self._state.agree("barrier", _BARRIER_DIGEST, _BARRIER, self._state.merged(options))
        except self._mpi_error as exc:
            raise self._state.internal("barrier", n, exc) from exc

    @watched
    def min_max(
        self,
        value: int = 0,
        purpose: str = "min_max",
        options: CommunicationOptions | None = None,
    ) -> tuple[int, int]:
        """Agrees an integer across ranks: its (minimum, maximum) over every rank, in one call.

        The one primitive for "do all ranks say yes" (``min == 1``), "does any" (``max == 1``)
        and "do all hold the same value" (``min == max``); also for a public API that decides
        to move no data, so that a rank which would communicate is told instead of waiting.
        It costs one agreement.

        Args:
          value: this rank's integer, below 2**62 in magnitude.
          purpose: what is agreed, e.g. ``"end of data"``; part of the agreed call, so ranks
            agreeing different things raise, and named in that error.
          options: merged over the communicator's default ``CommunicationOptions``.

        Raises:
          ValueError: on every rank, if ``value`` is not an integer below 2**62 in magnitude.
          InvalidArgumentError: if the ranks' purposes (or calls) differ.
        """
        n = self._state.begin("min_max")
        deadline = self._state.merged(options)
        try:
            if not isinstance(value, int | np.integer) or not -VALUE_LIMIT < value < VALUE_LIMIT:
                raise ValueError(f"min_max: {value!r} is not an integer below 2**62 in magnitude")
            plan = self._plans.agreement(purpose)
        except ARGUMENT_ERRORS as exc:
            self._state.refuse("min_max", exc, deadline)
        try:
            return self._state.agree("min_max", plan.digest, plan.layout, deadline, int(value))
        except self._mpi_error as exc:
            raise self._state.internal("min_max", n, exc) from exc

    def refuse(self, error: Exception) -> None:
        """Takes an error this rank found in its arguments into the next call's agreement.

        For public APIs (``call_context.api_call``) failing on one rank before any collective:
        every rank raises, this one ``error``; returns if no call can be made (caller re-raises).
        """
        self._state.refuse_if_possible(error)

    # -- machinery ---------------------------------------------------------------------------

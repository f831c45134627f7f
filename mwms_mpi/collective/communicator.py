"""The one object that moves data between ranks: every call agreed, deadlines, lost ranks.

A ``Communicator`` owns two duplicates of the communicator it is given (never ``COMM_WORLD``
itself): one carries data, the other the agreements (``agreement.py``), so a rank waiting in an
agreement can never be matched with another rank's data collective.

* **Every call is agreed** before its data moves: a mismatch of kind, op, dtype, shape, root,
  options or of what the user called raises ``InvalidArgumentError`` on every rank, and the
  communicator stays usable (TF poisons its collective group there; nothing moved here). A rank
  that finds its own arguments invalid takes that into the agreement (:meth:`refuse`), so no
  rank is left waiting.
* **One call template** (``protocol.py``): each collective below is its plan step
  (``plans.py``) and its data step (``data_path.py``) in ``CallProtocol.run``, which numbers,
  refuses, agrees, waits and translates errors once for all (docs/architecture.md, "One call").
* **Deadlines, poisoning, lost ranks** (``protocol.py``, ``watch.py``): an expired deadline
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

from mwms_mpi._logging import get_logger
from mwms_mpi._mpi import mpi, spans_world, world_ranks
from mwms_mpi.cluster import check_mpi_world
from mwms_mpi.collective import fence, timeline, transport, ulfm
from mwms_mpi.collective.agreement import Agreement
from mwms_mpi.collective.backends import CollectiveBackend, default_backends
from mwms_mpi.collective.data_path import DataPath
from mwms_mpi.collective.ops import Op
from mwms_mpi.collective.plans import Plans
from mwms_mpi.collective.pool import BufferPool
from mwms_mpi.collective.protocol import CallProtocol
from mwms_mpi.collective.transport import Transport
from mwms_mpi.collective.watch import process_watch
from mwms_mpi.types import CommunicationOptions

_log = get_logger(__name__)

_names = itertools.count()


class CommunicatorStats(NamedTuple):
    """Counts for tests and benchmarks: calls made and agreements run."""

    calls: int
    agreements: int


class Communicator:
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
        arrays, if any, are staged or handed to a CUDA-aware MPI, never to NCCL). Where CuPy
        is installed, ``"current"`` imports it and initialises CUDA here, where the ranks
        agree their transport together (docs/gpus.md, "Installing"); ``None`` never does.

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
        pool = BufferPool()
        # MPI's errors and the backends' libraries' (NCCL's), translated alike
        library_errors = (MPI.Exception, *(e for b in self._backends for e in b.errors))
        ranks = world_ranks(self._data)
        failures = (
            ulfm.ProcessFailures(MPI, (self._data, agreement.comm)) if ulfm.enabled(MPI) else None
        )
        self._calls = CallProtocol(
            agreement,
            self.name,
            ranks,
            options,
            library_errors,
            timeline.call_hook(agreement, self.name, ranks),
            failures,
        )
        self._device = device
        self._plans = Plans(self.name, self.rank, self.size, pool, self._backends)
        self._path = DataPath(self._data, self._calls, pool, self._plans.host)
        self._pool = pool
        process_watch().register(self._calls, spans_world(base))
        if self._transport.warning:
            _log.warning(self._transport.warning)
        _log.info("%s", self.describe())

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the duplicated communicators; a poisoned one is left alone (freeing can hang)."""
        calls = self._calls
        if calls.closed:
            return
        calls.closed = True
        self._pool.clear(close=True)  # free buffers go now, leased ones with their last view
        if calls.poisoned is None:
            for backend in self._backends:
                backend.close()
            calls.agreement.close()
            self._data.Free()

    def shrink(self, name: str | None = None) -> Communicator:
        """A new communicator of the ranks that survived a peer's failure, in their order.

        Collective over the survivors, each after its call on this communicator raised
        ``UnavailableError`` with ``failed_ranks`` (or at any time, to leave out ranks that
        failed since). This communicator is revoked and stays unusable; the new one agrees its
        own calls from call 1, with the same options and device. Only where MPI's fault
        tolerance is on (Open MPI launched with ``mpiexec --with-ft ulfm``: docs/elastic.md).

        Raises:
          RuntimeError: where it is not on (this MPI, or this launch, cannot shrink).
        """
        MPI = mpi()
        if not ulfm.enabled(MPI):
            raise RuntimeError(
                f"Communicator.shrink on rank {self.rank} (communicator {self.name}): "
                f"{ulfm.describe(MPI)}"
            )
        failures = self._calls.failures
        assert failures is not None  # made at construction wherever ULFM is enabled
        failures.revoke()
        if self._calls.poisoned is None:
            self._calls.poisoned = f"shrunk on rank {self.rank}: its survivors went on in a new one"
        survivors = ulfm.shrink(self._data, MPI)
        try:
            options = self._calls.options
            shrunk = Communicator(
                survivors, options=options, name=name or f"{self.name}-shrunk", device=self._device
            )
        finally:
            survivors.Free()  # the new communicator holds its own duplicates
        fence.end(sorted(set(self.world_ranks) - set(shrunk.world_ranks)))  # fence.py
        return shrunk

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def calls(self) -> int:
        """The number of calls this communicator has numbered (each agreed by every rank)."""
        return self._calls.agreement.calls

    @property
    def stats(self) -> CommunicatorStats:
        """How many calls and agreements this communicator has made."""
        agreement = self._calls.agreement
        return CommunicatorStats(agreement.calls, agreement.agreements)

    @property
    def world_ranks(self) -> tuple[int, ...]:
        """The ``COMM_WORLD`` rank of each of this communicator's ranks, in its order."""
        return self._calls.world_ranks

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
        return self._calls.poisoned

    # -- public collectives: each is its plan step and its data step in the call template ----

    def all_reduce(
        self,
        array: Any,
        op: Op | str = Op.SUM,
        options: CommunicationOptions | None = None,
        out: Any = None,
    ) -> Any:
        """Reduces ``array`` element-wise over all ranks; every rank gets the same new array.

        The result is a new array that the library never writes again (docs/architecture.md,
        "Results are values"), unless the caller gives ``out``.

        Args:
          array: a numpy (or backend-supported) array of the same shape and dtype on every rank.
          op: ``Op.SUM``, ``Op.MAX`` or ``Op.MIN`` (or the name).
          options: merged over the communicator's default ``CommunicationOptions``.
          out: where to write the result instead (zero-copy): a writable C-contiguous array of
            ``array``'s kind, shape and native dtype, that is ``array`` itself (reduced in
            place) or shares no memory with it. Whether ``out`` is given is agreed like any
            other argument.

        Returns:
          The new result, or ``out``.

        Raises:
          InvalidArgumentError: if the ranks' calls differ, or the dtype cannot be reduced with
            ``op`` (bool only with MAX/MIN, complex only with SUM).
          ValueError: on every rank, if ``out`` is not as described on some rank.
          DeadlineExceededError: if ``timeout_seconds`` passed before all ranks joined.
          UnavailableError: if an earlier failure poisoned this communicator or a peer left.
        """
        return self._calls.run(
            "all_reduce", options, self._plans.all_reduce, self._path.all_reduce, array, op, out
        )

    def all_reduce_addends(
        self,
        addends: Sequence[Any],
        op: Op | str = Op.SUM,
        options: CommunicationOptions | None = None,
        divisor: int = 1,
    ) -> Any:
        """Reduces this rank's ``addends`` together, then across ranks, in one result buffer.

        A worker's local replicas each hold one addend: they are combined (``op``) straight into
        the buffer that the collective then reduces in place, so reducing k addends costs one
        result buffer whatever k is. Every rank passes as many addends, of one shape and dtype.
        With op determinism on, a float SUM is the exact sum of every rank's addends, divided by
        ``divisor`` (a MEAN's replica count) before its one rounding.

        Raises:
          InvalidArgumentError: on every rank, if the addends' shapes or dtypes differ on any
            rank, or as :meth:`all_reduce`.
          ValueError: for a ``divisor`` other than 1 on anything but a float SUM.
        """
        addends = self._listed("all_reduce", addends)
        if len(addends) == 1 and divisor == 1:
            return self.all_reduce(addends[0], op, options)
        plan, step = self._plans.addends, self._path.all_reduce_addends
        return self._calls.run("all_reduce", options, plan, step, addends, op, divisor)

    def batch_all_reduce(
        self,
        arrays: Sequence[Any],
        op: Op | str = Op.SUM,
        options: CommunicationOptions | None = None,
        divisor: int = 1,
    ) -> list[Any]:
        """Reduces many arrays with one MPI call per pack (TF's ``group_by_size`` packing).

        Packs are filled in reversed order, as TF's CollectiveAllReduce does, with
        ``bytes_per_pack`` from the merged options (0: one pack); the arrays of a pack that share
        a dtype are flattened into one fresh buffer and reduced in place. Results come back in
        the caller's order, with the original shapes and dtypes. An empty list is agreed too.

        With op determinism on, the float arrays' sums are exact, one group per dtype, and a
        ``divisor`` (a MEAN's replica count) divides each exact sum before its one rounding.

        Raises:
          As :meth:`all_reduce`, naming the first array whose layout differs.
          ValueError: for a ``divisor`` other than 1 on anything but float SUMs.
        """
        arrays = self._listed("batch_all_reduce", arrays)
        plan, step = self._plans.batch, self._path.batch_all_reduce
        return self._calls.run("batch_all_reduce", options, plan, step, arrays, op, divisor)

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
        return self._calls.run(
            "all_gather", options, self._plans.gather, self._path.all_gather, array, axis
        )

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
        plan, step = self._plans.gather_sparse, self._path.all_gather_sparse
        return self._calls.run("all_gather_sparse", options, plan, step, values, indices)

    def broadcast(
        self, array: Any, root: int = 0, options: CommunicationOptions | None = None
    ) -> Any:
        """Returns a new array holding ``root``'s ``array`` on every rank.

        Every rank passes an array of the same shape and dtype; only ``root``'s content is used.

        Raises:
          ValueError: on every rank, if ``root`` is not a rank of this communicator.
        """
        return self._calls.run(
            "broadcast", options, self._plans.broadcast, self._path.broadcast, array, root
        )

    def barrier(self, options: CommunicationOptions | None = None) -> None:
        """Returns once every rank has called ``barrier`` (the agreement itself synchronises)."""
        self._calls.run("barrier", options, self._plans.barrier, DataPath.nothing)

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
        return self._calls.run(
            "min_max", options, self._plans.min_max, DataPath.agreed, value, purpose
        )

    def _listed(self, op_name: str, values: Any) -> list[Any]:
        """``values`` as a list; anything that is not iterable is refused on every rank."""
        if type(values) is list:
            return values
        try:
            return list(values)
        except TypeError:
            error = TypeError(
                f"{op_name}: expected a sequence of arrays, got {type(values).__name__}"
            )
            self._calls.refuse_if_possible(error)
            raise error from None

    def refuse(self, error: Exception) -> None:
        """Takes an error this rank found in its arguments into the next call's agreement.

        For public APIs (``call_context.api_call``) failing on one rank before any collective:
        every rank raises, this one ``error``; returns if no call can be made (caller re-raises).
        """
        self._calls.refuse_if_possible(error)

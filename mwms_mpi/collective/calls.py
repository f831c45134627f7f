"""How one call of a communicator is made: numbered, agreed, waited for, poisoned or refused.

``CallState`` is the part of a :class:`~mwms_mpi.collective.Communicator` that the process watch
(``watch.py``) reads and that every collective goes through: the call in flight (``busy``),
the agreement (``agreement.py``), deadlines, the poisoned state after a timeout or an MPI error,
and peers that left the job. The communicator itself only moves data.
"""

from __future__ import annotations

from collections.abc import Sequence
from threading import get_ident
from typing import Any, NoReturn

from mwms_mpi import errors
from mwms_mpi.collective import call_context
from mwms_mpi.collective.agreement import Agreement
from mwms_mpi.collective.call_context import CallContext
from mwms_mpi.collective.deadline import Completion, Deadline, wait_all
from mwms_mpi.collective.signature import Layout
from mwms_mpi.collective.stall import Busy, describe_call
from mwms_mpi.types import CommunicationOptions


class CallState:
    """The calls of one communicator.

    Args:
      agreement: the communicator's agreement (it numbers the calls).
      name: the communicator's name, for messages.
      world_ranks: the ``COMM_WORLD`` rank of each of the communicator's ranks.
      options: the communicator's default ``CommunicationOptions``.
    """

    def __init__(
        self,
        agreement: Agreement,
        name: str,
        world_ranks: tuple[int, ...],
        options: CommunicationOptions,
    ) -> None:
        self.agreement = agreement
        self.id = agreement.id
        self.rank = agreement.rank
        self.size = agreement.size
        self.name = name
        self.world_ranks = world_ranks
        self.options = options
        self.blocking = deadline(options) is None  # calls without options never poll
        self.owner = get_ident()
        self.busy: Busy | None = None  # the call in flight, for the watch
        self.poisoned: str | None = None
        self.closed = False
        self.departed: tuple[int, int] | None = None  # (world rank, calls it completed)
        self.usable = True  # False once poisoned, closed or a peer left: one check per call
        self._abandoned: list[Any] = []  # requests and buffers of timed-out collectives

    @property
    def calls(self) -> int:
        """The number of calls made so far."""
        return self.agreement.calls

    def begin(self, op_name: str, context: CallContext | None = None) -> int:
        """Numbers the call; refuses it on a poisoned or closed communicator or foreign thread.

        Args:
          op_name: the collective.
          context: what the user called, when the caller has read it already.
        """
        if not self.usable or get_ident() != self.owner:
            self._check_usable(op_name)
        n = self.agreement.calls + 1
        self.busy = (op_name, n, context or call_context.current())
        return n

    def merged(self, options: CommunicationOptions | None) -> Deadline | None:
        """The deadline of a call made with ``options`` (merged over the defaults)."""
        return deadline(self.options if options is None else self.options.merge(options))

    def _check_usable(self, op_name: str) -> None:
        where = f"{op_name} on rank {self.rank} (communicator {self.name})"
        if self.poisoned is not None:
            text = f"{where}: unusable after an earlier failure ({self.poisoned}). Rebuild the "
            raise errors.UnavailableError(
                None, op_name, text + "strategy or end the job.", rank=self.rank
            )
        if self.closed:
            raise ValueError(f"{op_name}: communicator {self.name} is closed")
        if get_ident() != self.owner:
            raise RuntimeError(
                f"{op_name}: communicator {self.name} is used from a thread other than the one "
                "that created it; MPI is called from one thread only"
            )
        self.check_departed(op_name, self.agreement.calls + 1)

    def check_departed(self, op_name: str, n: int) -> None:
        """Raises if a peer left the job before call ``n``, which it can therefore never join."""
        departed = self.departed
        if departed is not None and n > departed[1]:
            world_rank, completed = departed
            what = describe_call(op_name, n, call_context.current())
            raise errors.UnavailableError(
                None,
                op_name,
                f"{what} on rank {self.rank} of {self.size} (communicator {self.name}): rank "
                f"{world_rank} left the job after its call {completed} on this communicator "
                "and will never join this one",
                rank=self.rank,
            )

    def lost(self, world_rank: int, completed: int) -> None:
        """Called by the watch: ``world_rank`` left the job after ``completed`` calls here."""
        if self.departed is None or completed < self.departed[1]:
            self.departed = (world_rank, completed)
        self.usable = False

    def agree(
        self,
        op_name: str,
        layout_digest: int,
        layout: Layout,
        deadline: Deadline | None,
        value: int = 0,
    ) -> tuple[int, int]:
        """Runs the call's agreement; the values' (min, max), or raises on every rank."""
        request = self.agreement.start(layout_digest, value, deadline is None)
        if request is not None:
            self.complete(op_name, self.agreement.calls + 1, deadline, [request], None)
        return self.agreement.finish(op_name, layout)

    def refuse(self, op_name: str, error: Exception, deadline: Deadline | None) -> NoReturn:
        """Agrees that this rank's arguments are invalid; raises on every rank."""
        request = self.agreement.start(self.agreement.invalid_digest(error), 0, deadline is None)
        if request is not None:
            self.complete(op_name, self.agreement.calls + 1, deadline, [request], None)
        self.agreement.finish_refusal(op_name, error)

    def refuse_if_possible(self, error: Exception) -> None:
        """:meth:`refuse` for a public API's own error; returns if no call can be made now."""
        if self.closed or self.poisoned is not None or get_ident() != self.owner:
            return
        n = self.agreement.calls + 1
        if self.departed is not None and n > self.departed[1]:
            return
        self.busy = ("refuse", n, call_context.current())
        try:
            self.refuse("refuse", error, self.merged(None))
        finally:
            self.busy = None

    def complete(
        self,
        op_name: str,
        n: int,
        deadline: Deadline | None,
        requests: Sequence[Completion | None],
        keepalive: object,
    ) -> None:
        """Waits for nonblocking requests against the deadline; poisons on expiry or loss."""
        if deadline is None:
            return
        pending = [r for r in requests if r is not None]
        try:
            if wait_all(pending, deadline, lambda: self.check_departed(op_name, n)):
                return
        except errors.UnavailableError as exc:
            self._abandon(pending, keepalive, str(exc))
            raise
        waited = deadline.elapsed()
        what = describe_call(op_name, n, call_context.current())
        self._abandon(
            pending,
            keepalive,
            f"{what} on rank {self.rank} of {self.size} (communicator {self.name}) timed out "
            f"after {waited:.1f} s (timeout_seconds={deadline.timeout_seconds})",
        )
        raise errors.DeadlineExceededError(
            None,
            op_name,
            f"{self.poisoned}: not every rank joined it. A rank may have failed, skipped this "
            "collective or called another; MPI cannot cancel it, so this communicator is now "
            "unusable.",
            rank=self.rank,
        )

    def _abandon(self, pending: list[Any], keepalive: object, why: str) -> None:
        """Poisons the communicator, keeping the in-flight requests and buffers alive; a
        request that can be aborted (an NCCL call: its communicator) is aborted."""
        self._abandoned.append((pending, keepalive))
        for request in pending:
            abort = getattr(request, "abort", None)
            if abort is not None:
                abort()
        self.usable = False
        self.poisoned = why

    def internal(self, op_name: str, n: int, exc: Exception) -> errors.InternalError:
        """Translates an error of MPI (or of a backend's library, such as NCCL); the
        communicator's state is unknown after it."""
        where = "in MPI" if type(exc).__module__.startswith("mpi4py") else f"({type(exc).__name__})"
        self.poisoned = f"{op_name} (call {n}) on rank {self.rank} failed {where}: {exc}"
        self.usable = False
        return errors.InternalError(None, op_name, self.poisoned, rank=self.rank)


def deadline(opts: CommunicationOptions) -> Deadline | None:
    """``None`` means: no timeout, call the blocking form (as in TF, 0 or less disables it)."""
    timeout = opts.timeout_seconds
    return None if timeout is None or timeout <= 0 else Deadline(timeout)

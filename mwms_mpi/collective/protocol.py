"""The one call template every collective goes through, and the state of a communicator's calls.

:meth:`CallProtocol.run` is the protocol of a call, written once (docs/architecture.md, "One
call"): it refuses a call on a poisoned, closed or foreign-thread communicator, numbers the
call and marks it busy for the process watch (``watch.py``), works out the deadline, asks the
collective for its plan (an error the caller's arguments caused is taken into the agreement:
``arguments.py``), agrees the plan with every rank (or, with ``MWMS_MPI_CHECK=first``, skips a
layout seen before), runs the collective's data step, and translates an MPI (or NCCL) error into
``InternalError``, poisoning the communicator. A collective supplies only its plan and its data
step; the data step hands what it started to :meth:`CallProtocol.wait`, which completes it under
the deadline (and returns at once for a call without one, whose MPI calls were blocking).

The timeline (``timeline.py``) is a :class:`CallHook` the template calls when a call starts, is
agreed and ends; without one the template pays one ``is None`` test per event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from threading import get_ident
from typing import Any, NoReturn, Protocol, TypeVar

from mwms_mpi import _lifecycle, errors
from mwms_mpi.collective import call_context, fence
from mwms_mpi.collective.agreement import Agreement
from mwms_mpi.collective.arguments import is_refusable, refusable
from mwms_mpi.collective.call_context import current as current_context
from mwms_mpi.collective.deadline import Completion, Deadline, wait_all
from mwms_mpi.collective.signature import Layout
from mwms_mpi.collective.stall import Busy, describe_call
from mwms_mpi.collective.ulfm import ProcessFailures
from mwms_mpi.types import CommunicationOptions

_P = TypeVar("_P", bound="Plan")
_R = TypeVar("_R")


class Plan(Protocol):
    """What the template needs of a collective's plan: what is agreed, and whether
    ``MWMS_MPI_CHECK=first`` may trust it after its first agreement (only plans that agree no
    value: a gather's row count or a ``min_max`` value must be exchanged on every call)."""

    @property
    def layout(self) -> Layout: ...

    @property
    def digest(self) -> int: ...

    @property
    def skippable(self) -> bool: ...


class CallHook(Protocol):
    """Told of each call's start, agreement and end (the timeline)."""

    def started(self, busy: Busy) -> None: ...

    def agreed(self, layout: Layout | None, value: int) -> None: ...

    def ended(self, busy: Busy) -> None: ...


def deadline_of(opts: CommunicationOptions) -> Deadline | None:
    """``None`` means: no timeout, call the blocking form (as in TF, 0 or less disables it)."""
    timeout = opts.timeout_seconds
    return None if timeout is None or timeout <= 0 else Deadline(timeout)


class CallProtocol:
    """The calls of one communicator: the template, and what the process watch reads.

    Args:
      agreement: the communicator's agreement (it numbers the calls).
      name: the communicator's name, for messages.
      world_ranks: the ``COMM_WORLD`` rank of each of the communicator's ranks.
      options: the communicator's default ``CommunicationOptions``.
      library_errors: the exceptions of MPI and of the backends' libraries, translated into
        ``InternalError``.
      hook: told of every call (the timeline), or ``None``.
      failures: where ULFM is on, what tells a peer's process failure from another MPI
        error and revokes the communicator's MPI communicators (``ulfm.py``); else ``None``.
    """

    def __init__(
        self,
        agreement: Agreement,
        name: str,
        world_ranks: tuple[int, ...],
        options: CommunicationOptions,
        library_errors: tuple[type[Exception], ...],
        hook: CallHook | None = None,
        failures: ProcessFailures | None = None,
    ) -> None:
        self.agreement = agreement
        self.name = name
        self.world_ranks = world_ranks
        self.options = options
        self.blocking = deadline_of(options) is None  # calls without options never poll
        self.owner = get_ident()
        self.hook = hook
        self.busy: Busy | None = None  # the call in flight, for the watch
        self.deadline: Deadline | None = None  # the deadline of the call in flight
        self.poisoned: str | None = None
        self.closed = False
        self.departed: tuple[int, int] | None = None  # (world rank, calls it completed)
        self._library_errors = library_errors
        self.failures = failures
        self._abandoned: list[Any] = []  # requests and buffers of timed-out collectives

    @property
    def id(self) -> int:
        """The communicator's id, the same on every member rank."""
        return self.agreement.id

    @property
    def rank(self) -> int:
        """This rank in the communicator."""
        return self.agreement.rank

    @property
    def size(self) -> int:
        """The communicator's number of ranks."""
        return self.agreement.size

    @property
    def calls(self) -> int:
        """The number of calls made so far."""
        return self.agreement.calls

    @property
    def usable(self) -> bool:
        """Whether calls can be made: not poisoned, not closed, no peer lost (derived)."""
        return self.poisoned is None and not self.closed and self.departed is None

    # -- the template ------------------------------------------------------------------------

    def run(
        self,
        name: str,
        options: CommunicationOptions | None,
        plan: Callable[[CommunicationOptions, Any, Any, Any], tuple[_P, int]],
        step: Callable[[_P, tuple[int, int], Any, Any, Any], _R],
        a: Any = None,
        b: Any = None,
        c: Any = None,
    ) -> _R:
        """Makes one call of collective ``name``: ``plan(opts, a, b, c)`` then, once every rank
        agreed the plan, ``step(plan, agreed, a, b, c)``.

        ``a``, ``b``, ``c`` are the collective's own arguments (at most three; ``None`` where it
        has fewer), passed as they are: a ``*args`` tuple would cost more than the call's
        Python at 4 KB.

        Args:
          name: the collective, for messages and the watch.
          options: the call's ``CommunicationOptions`` (merged over the communicator's).
          plan: returns the call's plan and this rank's value to agree on (a gather's row
            count, ``min_max``'s value; else 0), from the merged options and the arguments; it
            raises on invalid arguments (refused on every rank: ``arguments.py``).
          step: moves the data: given the plan, the agreed (minimum, maximum) of the ranks'
            values and the arguments; it hands what it starts to :meth:`wait`.

        Raises:
          UnavailableError, ValueError, RuntimeError: the communicator is poisoned, lost a
            peer, is closed, or is used from another thread.
          InvalidArgumentError: the ranks' calls differ.
          DeadlineExceededError: the call outran its deadline.
          InternalError: MPI (or a backend's library) failed.
        """
        context = current_context()
        if (
            self.poisoned is not None
            or self.closed
            or self.departed is not None
            or get_ident() != self.owner
        ):
            self._check_usable(name)
        agreement = self.agreement
        n = agreement.calls + 1
        busy = self.busy = (name, n, context)
        hook = self.hook
        if hook is not None:
            hook.started(busy)
        try:
            merged: CommunicationOptions | None
            if options is None:
                merged = self.options
                if not self.blocking:  # else it stays None: every call's finally clears it
                    self.deadline = deadline_of(merged)
            else:
                merged = self._merged(options)
            try:
                if merged is None:
                    text = f"{name}: options must be a CommunicationOptions, got {options!r}"
                    raise refusable(TypeError(text))
                planned, value = plan(merged, a, b, c)
            except Exception as exc:
                if not is_refusable(exc):
                    raise  # a bug of the package: never the caller's bad argument
                self._refuse(name, exc, context)
            if agreement.every_call and self.deadline is None:  # the hot path, inline
                agreed = agreement.agree_now(name, planned.digest, planned.layout, context, value)
                trusted = False
            elif (
                planned.skippable and not agreement.every_call and agreement.trusts(planned.digest)
            ):
                agreement.skip()  # MWMS_MPI_CHECK=first: a layout this rank agreed before
                agreed, trusted = (value, value), True
            else:
                agreed, trusted = self._agree(name, planned, context, value), False
            if hook is not None:
                hook.agreed(None if trusted else planned.layout, value)
            return step(planned, agreed, a, b, c)
        except self._library_errors as exc:
            failures = self.failures
            if failures is not None and failures.is_failure(exc):
                raise self.peer_failed(name, n, failures) from exc
            raise self.internal(name, n, exc) from exc
        finally:
            self.busy = self.deadline = None
            if hook is not None:
                hook.ended(busy)

    def _merged(self, options: object) -> CommunicationOptions | None:
        """The communicator's options merged with the call's (TF's rule), and the call's
        deadline set; ``None`` for an object of another type, refused in the plan step under
        the communicator's own deadline."""
        if not isinstance(options, CommunicationOptions):
            self.deadline = deadline_of(self.options)
            return None
        merged = self.options.merge(options)
        self.deadline = deadline_of(merged)
        return merged

    def _agree(
        self, name: str, plan: Plan, context: call_context.CallContext | None, value: int
    ) -> tuple[int, int]:
        """Runs the call's agreement: the values' (min, max), or raises on every rank."""
        agreement = self.agreement
        if self.deadline is None:
            agreed = agreement.agree_now(name, plan.digest, plan.layout, context, value)
        else:
            self.wait([agreement.start(plan.digest, context, value, False)], None)
            agreed = agreement.finish(name, plan.layout)
        if not agreement.every_call and plan.skippable:
            agreement.trust(plan.digest)
        return agreed

    def _refuse(
        self, name: str, error: Exception, context: call_context.CallContext | None
    ) -> NoReturn:
        """Agrees that this rank's arguments are invalid; raises on every rank."""
        agreement = self.agreement
        blocking = self.deadline is None
        request = agreement.start(agreement.invalid_digest(error), context, 0, blocking)
        if request is not None:
            self.wait([request], None)
        agreement.finish_refusal(name, error)

    def refuse_if_possible(self, error: Exception) -> None:
        """Takes a public API's own error into a call of its own, so that every rank raises;
        returns if no call can be made now (the caller re-raises)."""
        if self.closed or self.poisoned is not None or get_ident() != self.owner:
            return
        n = self.agreement.calls + 1
        if self.departed is not None and n > self.departed[1]:
            return
        context = call_context.current()
        busy = self.busy = ("refuse", n, context)
        hook = self.hook
        if hook is not None:
            hook.started(busy)
        try:
            self.deadline = deadline_of(self.options)
            self._refuse("refuse", error, context)
        finally:
            self.busy = self.deadline = None
            if hook is not None:
                hook.ended(busy)

    # -- completion --------------------------------------------------------------------------

    def wait(self, requests: Sequence[Completion | None], keepalive: object) -> None:
        """Completes what the call in flight started, against its deadline; poisons the
        communicator on expiry or a lost peer. Returns at once without a deadline (the MPI
        calls were blocking). ``keepalive`` (the buffers) is kept alive if abandoned."""
        deadline = self.deadline
        if deadline is None:
            return
        busy = self.busy
        assert busy is not None, "wait outside a call"
        op_name, n, context = busy
        pending = [r for r in requests if r is not None]
        try:
            if wait_all(pending, deadline, lambda: self.check_departed(op_name, n)):
                return
        except errors.UnavailableError as exc:
            self._abandon(pending, keepalive, str(exc))
            raise
        waited = deadline.elapsed()
        what = describe_call(op_name, n, context)
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
        self.poisoned = why

    def peer_failed(
        self, op_name: str, n: int, failures: ProcessFailures
    ) -> errors.UnavailableError:
        """A peer's process failed (ULFM): the communicator is revoked, so that every other
        survivor's call fails now too instead of waiting, and poisoned; the error names the
        ranks MPI knows failed (``Communicator.shrink`` goes on without them)."""
        failures.revoke()
        _lifecycle.note_peer_failure()  # MPI_Finalize must not be reached now
        lost = failures.failed_world_ranks()
        fence.end(lost)  # a frozen rank declared failed must not live on (fence.py)
        who = f"rank(s) {list(lost)} of COMM_WORLD" if lost else "a peer (MPI did not say which)"
        what = describe_call(op_name, n, call_context.current())
        self.poisoned = (
            f"{what} on rank {self.rank} of {self.size} (communicator {self.name}): {who} "
            "failed; the communicator is revoked on every survivor"
        )
        error = errors.UnavailableError(
            None,
            op_name,
            f"{self.poisoned}. A Communicator can go on with the survivors "
            "(Communicator.shrink, docs/elastic.md); a strategy cannot yet",
            rank=self.rank,
        )
        error.failed_ranks = lost
        return error

    def internal(self, op_name: str, n: int, exc: Exception) -> errors.InternalError:
        """Translates an error of MPI (or of a backend's library, such as NCCL); the
        communicator's state is unknown after it."""
        where = "in MPI" if type(exc).__module__.startswith("mpi4py") else f"({type(exc).__name__})"
        self.poisoned = f"{op_name} (call {n}) on rank {self.rank} failed {where}: {exc}"
        return errors.InternalError(None, op_name, self.poisoned, rank=self.rank)

    # -- usability ---------------------------------------------------------------------------

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

"""Naming a collective that has waited long, so a silent wait says what it waits for.

A rank whose peer is slow, skipped a collective, or died without a word (killed by a signal)
waits in a blocking MPI call. mpi4py releases the GIL while it waits, so the process watch
(``watch.py``) can notice that a collective has been running for ``MWMS_MPI_STALL_WARNING``
seconds (60 by default; 0 turns the warning off) and log which op, which call and which rank
are waiting, without touching MPI. It costs the hot path two attribute writes per call: the
wait is timed from when the watch first saw the call (its period, at most 1 s, is the error).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from mwms_mpi import _env
from mwms_mpi.collective.call_context import CallContext

STALL_ENV = "MWMS_MPI_STALL_WARNING"
DEFAULT_STALL_SECONDS = 60.0

Busy = tuple[str, int, "CallContext | None"]
"""A call in flight: (collective, call number, what the user called)."""


def describe_call(op_name: str, n: int, context: CallContext | None) -> str:
    """``"Strategy.reduce (all_reduce, call 3)"``, or ``"all_reduce (call 3)"`` without context."""
    if context is None or not context[0]:
        return f"{op_name} (call {n})"
    return f"{context[0]} ({op_name}, call {n})"


class Watched(Protocol):
    """What the watch reads: ``busy`` is the call in flight or ``None``."""

    busy: Busy | None
    rank: int
    size: int
    name: str


class StallCheck:
    """Finds the collectives that have waited longer than ``seconds`` (0: never)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._seen: dict[int, tuple[int, float, int]] = {}  # id -> (call, first seen, warnings)

    def check(self, comms: Iterable[Watched], now: float) -> list[str]:
        """Warning texts for collectives waiting longer than the threshold (each named once
        per doubling of its wait, so a long stall is repeated, not flooded)."""
        if self.seconds <= 0:
            return []
        found = []
        for comm in comms:
            busy = comm.busy
            if busy is None:
                self._seen.pop(id(comm), None)
                continue
            op_name, n, context = busy
            seen = self._seen.get(id(comm))
            if seen is None or seen[0] != n:
                self._seen[id(comm)] = (n, now, 0)
                continue
            _, start, count = seen
            waited = now - start
            if waited < self.seconds * (2**count):
                continue
            self._seen[id(comm)] = (n, start, count + 1)
            found.append(
                f"{describe_call(op_name, n, context)} on rank {comm.rank} of {comm.size} "
                f"(communicator "
                f"{comm.name}) has waited {waited:.0f} s for the other ranks: one may be slow, "
                "may be doing something else, or may have died without a word (killed by a "
                "signal). Set CommunicationOptions(timeout_seconds=...) to turn the wait into "
                "a DeadlineExceededError, and launch with `python -m mwms_mpi.run` (and "
                "`srun --kill-on-bad-exit=1` under Slurm) so that a failing rank ends the job."
            )
        return found


def seconds_from_env(environ: _env.Environ = None) -> float:
    """The stall threshold from ``MWMS_MPI_STALL_WARNING`` (60 s when unset; 0 turns it off).

    Raises:
      ValueError: naming the variable, unless it is a finite number >= 0.
    """
    return _env.env_float(
        STALL_ENV,
        DEFAULT_STALL_SECONDS,
        minimum=0,
        what="seconds a collective may wait before it is named; 0 turns the warning off",
        environ=environ,
    )

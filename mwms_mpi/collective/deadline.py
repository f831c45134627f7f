"""Waiting on nonblocking MPI requests against a deadline, since MPI cannot cancel a collective.

``timeout_seconds`` (``CommunicationOptions``) is honoured by starting the nonblocking form of a
collective and polling it until it completes or the deadline passes. A rank that polls also
yields the processor with a growing sleep, which matters when ranks oversubscribe cores.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

_log = logging.getLogger("mwms_mpi")

# Poll without sleeping this many times first: small collectives finish within microseconds.
_SPIN_POLLS = 32
_MAX_PAUSE_S = 1e-3


class Completion(Protocol):
    """What a backend hands back for an operation in flight (``mpi4py.MPI.Request`` fits)."""

    def Test(self) -> bool: ...


class Deadline:
    """A point in time after which waiting stops, plus when to warn that a wait is stalling.

    Args:
      timeout_seconds: seconds from now, or ``None`` to wait forever.
      stall_warning_seconds: log a warning once a wait has lasted this long (``None``: never).
    """

    __slots__ = ("at", "stall_at", "start", "timeout_seconds")

    def __init__(self, timeout_seconds: float | None, stall_warning_seconds: float | None) -> None:
        self.start = time.monotonic()
        self.timeout_seconds = timeout_seconds
        self.at = None if timeout_seconds is None else self.start + timeout_seconds
        self.stall_at = (
            None if stall_warning_seconds is None else self.start + stall_warning_seconds
        )

    def elapsed(self) -> float:
        """Seconds since the deadline was set."""
        return time.monotonic() - self.start


def wait_all(
    requests: Sequence[Completion],
    deadline: Deadline,
    describe: Callable[[], str],
) -> bool:
    """Polls ``requests`` until all complete (True) or the deadline passes (False).

    Args:
      requests: operations in flight, all started on this rank.
      deadline: when to give up, and when to log a stall warning (once).
      describe: builds the text naming the operation, for the stall warning.
    """
    pending = [r for r in requests]
    polls = 0
    pause = 1e-6
    warned = False
    while pending:
        pending = [r for r in pending if not r.Test()]
        if not pending:
            return True
        polls += 1
        if polls <= _SPIN_POLLS:
            continue
        now = time.monotonic()
        if deadline.at is not None and now >= deadline.at:
            return False
        if not warned and deadline.stall_at is not None and now >= deadline.stall_at:
            warned = True
            _log.warning(
                "%s has waited %.1f s for the other ranks: a rank may have skipped this "
                "collective, called another, or be stuck",
                describe(),
                now - deadline.start,
            )
        time.sleep(pause)
        pause = min(pause * 2.0, _MAX_PAUSE_S)
    return True

"""A watchdog that warns when a collective has waited long, so a silent hang names its cause.

A rank whose peers skipped a collective, called another one, or died waits forever in a
blocking MPI call (TF's MWMS hangs the same way). mpi4py releases the GIL while it waits, so a
daemon thread can notice that a collective has been running for ``MWMS_MPI_STALL_WARNING``
seconds (60 by default; 0 turns the watch off) and log which op, which call number and which
rank are waiting, without touching MPI. It costs the hot path two attribute writes per call.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

STALL_ENV = "MWMS_MPI_STALL_WARNING"
DEFAULT_STALL_SECONDS = 60.0

_log = logging.getLogger("mwms_mpi")
_F = TypeVar("_F", bound=Callable[..., Any])


class Watched(Protocol):
    """What the watch reads: ``_busy`` is ``(op name, call number, start time)`` or ``None``."""

    _busy: tuple[str, int, float] | None
    rank: int
    size: int
    name: str


def watched(method: _F) -> _F:
    """Marks the end of a collective method, however it ends, so the watch stops timing it."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        finally:
            self._busy = None

    return call  # type: ignore[return-value]


class StallWatch:
    """One daemon thread per process, looking at every live communicator now and then."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._comms: weakref.WeakSet[Any] = weakref.WeakSet()
        self._warned: dict[int, tuple[int, int]] = {}  # id(comm) -> (call number, warnings)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, comm: Watched) -> None:
        """Adds ``comm``; starts the thread on first use (never when the watch is off)."""
        if self.seconds <= 0:
            return
        with self._lock:
            self._comms.add(comm)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="mwms_mpi-stall-watch", daemon=True
                )
                self._thread.start()

    def check(self, now: float) -> list[str]:
        """Warning texts for collectives waiting longer than the threshold (each named once
        per doubling of its wait, so a long stall is repeated, not flooded)."""
        found = []
        for comm in list(self._comms):
            busy = comm._busy
            if busy is None:
                continue
            op_name, seq, start = busy
            waited = now - start
            seen_seq, count = self._warned.get(id(comm), (-1, 0))
            count = count if seen_seq == seq else 0
            if waited < self.seconds * (2**count):
                continue
            self._warned[id(comm)] = (seq, count + 1)
            found.append(
                f"{op_name} #{seq} on rank {comm.rank} of {comm.size} (communicator "
                f"{comm.name}) has waited {waited:.0f} s for the other ranks: one may have "
                "failed, skipped this collective or called another. Set "
                "CommunicationOptions(timeout_seconds=...) to turn this into a "
                "DeadlineExceededError, or MWMS_MPI_CHECK=always to check every call's layout."
            )
        return found

    def _run(self) -> None:
        period = min(1.0, self.seconds / 4)
        while True:
            time.sleep(period)
            for text in self.check(time.monotonic()):
                _log.warning(text)


def _seconds_from_env() -> float:
    value = os.environ.get(STALL_ENV)
    return DEFAULT_STALL_SECONDS if not value else float(value)


@functools.cache
def process_watch() -> StallWatch:
    """The process's one watch, configured from ``MWMS_MPI_STALL_WARNING`` on first use."""
    return StallWatch(_seconds_from_env())

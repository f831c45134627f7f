"""Which ranks failed with the same error, found in a bounded exchange before the job aborts.

When every rank runs the same code, every rank usually fails the same way, and N copies of
one traceback bury the message. Before aborting, a failing rank contributes a digest of its
report to a nonblocking all-gather on a communicator kept for this alone (made when the first
multi-rank communicator is, a moment every rank shares). If every rank joins within
:data:`WAIT_S`, the lowest rank of each group of equal reports prints that report once, naming
the group; otherwise (some ranks are not failing, or not yet) each prints its own, as before.
The requests left pending do not matter: the job is aborted next.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi import _mpi

WAIT_S = 1.0
_comm: Any = None


def prepare() -> None:
    """Makes the exchange's communicator (collective over ``COMM_WORLD``; once)."""
    global _comm
    if _comm is None:
        _comm = _mpi.mpi().COMM_WORLD.Dup()


def digest(report: str) -> int:
    """A digest of a failure's report, equal on ranks whose reports are equal."""
    return int.from_bytes(hashlib.blake2b(report.encode(), digest_size=7).digest(), "little")


def _wait(start: Callable[[], Any], seconds: float) -> bool:
    """Whether the exchange ``start()`` begins completes within ``seconds``.

    An MPI error is ``False`` too, never raised: a peer's failure seen through ULFM
    (``mpiexec --with-ft ulfm``) fails this exchange, and the failure being reported must
    still be printed, not replaced by the exchange's own.
    """
    MPI = _mpi.mpi()
    deadline = time.monotonic() + seconds
    try:
        request = start()
        while not request.Test():
            if time.monotonic() > deadline:
                return False
            time.sleep(1e-3)
    except MPI.Exception:
        return False
    return True


def same_failure(report: str, seconds: float = WAIT_S) -> list[int] | None:
    """The ranks (this one included) that failed with this ``report``, if every rank reported
    within ``seconds``; ``None`` otherwise, or where there is no exchange to make."""
    if _comm is None or _comm.Get_size() < 2:
        return None
    send = np.array([digest(report)], dtype=np.int64)
    table = np.zeros(_comm.Get_size(), dtype=np.int64)
    if not _wait(lambda: _comm.Iallgather(send, table), seconds):
        return None
    return [rank for rank, key in enumerate(table.tolist()) if key == send[0]]


def printed(seconds: float = WAIT_S) -> None:
    """Waits (bounded) until every rank has printed its part, so no abort cuts a report off."""
    if _comm is not None:
        _wait(_comm.Ibarrier, seconds)

"""Which ranks failed with the same error, found in a bounded exchange before the job aborts.

When every rank runs the same code, every rank usually fails the same way, and N copies of
one traceback bury the message. Before aborting, a failing rank contributes a digest of its
report to a nonblocking all-gather on a communicator kept for this alone (made when the first
multi-rank communicator is, a moment every rank shares). If every rank joins within
:data:`WAIT_S`, the lowest rank of each group of equal reports prints that report once, naming
the group; otherwise (some ranks are not failing, or not yet) each prints its own, as before.
The requests left pending do not matter: the job is aborted next.

In elastic mode (``python -m mwms_mpi.run --elastic``, docs/elastic.md) a rank that fails
alone does not abort the job: it sends its report to every other rank on the same
communicator (:func:`tell_peers`) and ends itself, and the survivors, after they shrank, read
it (:func:`report_of`), through receives posted in advance.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _mpi

WAIT_S = 1.0
REPORT_TAG = 0x4D5A  # a failing rank's report, sent to its peers in elastic mode
REPORT_BYTES = 16384  # a report's longest text (its end is kept)
_comm: Any = None
# Elastic mode: reports travel on a communicator of their own, since a failed exchange on
# _comm (a peer already lost) was measured to hold back later sends on it.
_report_comm: Any = None
_reports: dict[int, Any] = {}  # elastic mode: the receive posted for each peer's report


def prepare(elastic: bool = False) -> None:
    """Makes the exchange's communicator (collective over ``COMM_WORLD``; once); in elastic
    mode also posts a receive for each peer's report (:func:`report_of`)."""
    global _comm, _report_comm
    if _comm is None:
        _comm = _mpi.mpi().COMM_WORLD.Dup()
        if elastic:
            _report_comm = _mpi.mpi().COMM_WORLD.Dup()
            for peer in range(_report_comm.Get_size()):
                _post(peer)


def _post(peer: int) -> None:
    """Posts the receive of ``peer``'s report (never this rank's own)."""
    if _report_comm is not None and peer != _report_comm.Get_rank():
        buffer = bytearray(REPORT_BYTES + 4096)  # the pickled report fits
        _reports[peer] = _report_comm.irecv(buffer, source=peer, tag=REPORT_TAG)


def renew_receives(peers: Sequence[int]) -> None:
    """Posts again the receives of ``peers`` (live ranks) that have ended, with a message or
    an error from a failure: without a posted receive a later report would not be matched,
    and its sender (a synchronous send) would wait for that match until it gives up."""
    if not _reports:
        return
    MPI = _mpi.mpi()
    for peer in peers:
        request = _reports.get(peer)
        if request is None or _done(request, MPI):
            _post(peer)


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


def tell_peers(report: str, seconds: float = WAIT_S) -> None:
    """Sends ``report`` to every other rank without waiting for them to receive it (small
    messages go eagerly), waiting at most ``seconds`` for the sends to leave this process.
    A peer that failed before is skipped: MPI refuses a send to it (ULFM)."""
    comm = _report_comm
    if comm is None:
        return
    MPI = _mpi.mpi()
    me, size = comm.Get_rank(), comm.Get_size()
    report = report[-REPORT_BYTES // 4 :]  # at most REPORT_BYTES of UTF-8
    requests = []
    for peer in range(size):
        if peer != me:
            with contextlib.suppress(MPI.Exception):  # ends once the peer matched it
                requests.append(comm.issend(report, dest=peer, tag=REPORT_TAG))
    deadline = time.monotonic() + seconds
    while requests and time.monotonic() < deadline:
        requests = [r for r in requests if not _done(r, MPI)]
        time.sleep(1e-3)


def _done(request: Any, MPI: Any) -> bool:
    """Whether ``request`` completed, or failed (its peer is gone: nothing more to wait for)."""
    try:
        return bool(request.Test())
    except MPI.Exception:
        return True


def peers_alive() -> bool:
    """Elastic mode: whether a peer of this rank is alive, as far as MPI knows (ULFM)."""
    comm = _report_comm
    if comm is None or comm.Get_size() < 2:
        return False
    try:
        failed = comm.Get_failed()
    except Exception:  # MPI cannot say: assume the peers live, as before any failure
        return True
    try:
        return int(failed.Get_size()) < comm.Get_size() - 1
    finally:
        failed.Free()


def report_of(world_rank: int, seconds: float = 0.2) -> str | None:
    """The report that ``world_rank`` sent before it left (:func:`tell_peers`), or ``None``
    (it died without one, or it has not arrived within ``seconds``). The receive was posted
    in advance (:func:`prepare`): ULFM refuses to match a new one from a failed rank, even
    for a message already here."""
    request = _reports.get(world_rank)
    if request is None:
        return None
    MPI = _mpi.mpi()
    deadline = time.monotonic() + seconds
    try:
        while True:
            done, report = request.test()
            if done:
                return str(report)
            if time.monotonic() > deadline:
                return None
            time.sleep(1e-3)
    except MPI.Exception:
        return None

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
it (:func:`report_of`), through receives posted in advance. Where a peer is lost already, the
all-gather cannot complete; the reports themselves then say whether any rank will go on: if
every peer not known to have failed sent one too (:func:`every_live_peer_left`), none will,
and the failing ranks end the job with their status instead of leaving it (all ranks ended
by ``SIGKILL`` would end a ULFM job with status 0).
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
END_TAG = 0x4D5B  # elastic mode: a survivor's "my program ended", sent to its live peers
END_WAIT_S = 600.0  # how long a survivor ending non-zero waits for its live peers to end
REPORT_BYTES = 16384  # a report's longest text (its end is kept)
_comm: Any = None
# Elastic mode: reports travel on a communicator of their own, since a failed exchange on
# _comm (a peer already lost) was measured to hold back later sends on it.
_report_comm: Any = None
_reports: dict[int, Any] = {}  # elastic mode: the receive posted for each peer's report
# Elastic mode: the reports received, by peer, as sent: (failed, report). Kept here because a
# completed receive gives its message once (a request tested without reading it loses it).
_arrived: dict[int, tuple[bool, str]] = {}


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
    """Posts again the receives of ``peers`` (live ranks) that ended with an error from a
    failure: without a posted receive a later report would not be matched, and its sender (a
    synchronous send) would wait for that match until it gives up.

    A receive that holds a report is kept: a peer counted live here can have raised already
    (at its next step, before this rank's recovery ended) and be leaving; its report is read
    after the next shrink (:func:`report_of`). A rank sends one report at most."""
    if not _reports:
        return
    for peer in peers:
        if peer not in _reports or (_report_ended(peer) and peer not in _arrived):
            _post(peer)


def _report_ended(peer: int) -> bool:
    """Whether the receive of ``peer``'s report ended: its report arrived (kept in
    :data:`_arrived`, never lost to a later test) or the receive failed (the peer is gone)."""
    if peer in _arrived:
        return True
    try:
        done, message = _reports[peer].test()
    except _mpi.mpi().Exception:
        return True
    if done:
        failed, report = message
        _arrived[peer] = (bool(failed), str(report))
    return bool(done)


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


def tell_peers(report: str, failed: bool = True, seconds: float = WAIT_S) -> None:
    """Sends ``report`` to every other rank without waiting for them to receive it (small
    messages go eagerly), waiting at most ``seconds`` for the sends to leave this process.
    A peer that failed before is skipped: MPI refuses a send to it (ULFM).

    ``failed=False``: the rank leaves as a lost machine would (told to stop), not after a
    failure: :func:`report_of` gives no report for it, but it counts as having left
    (:func:`every_live_peer_left`)."""
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
                requests.append(comm.issend((failed, report), dest=peer, tag=REPORT_TAG))
    _pending_after(requests, seconds, _done)


def _pending_after(items: list[Any], seconds: float, ended: Callable[[Any], bool]) -> list[Any]:
    """Polls ``items`` (requests, or peers whose report is awaited) for at most ``seconds``;
    returns those not ``ended`` by then."""
    deadline = time.monotonic() + seconds
    while True:
        items = [item for item in items if not ended(item)]
        if not items or time.monotonic() > deadline:
            return items
        time.sleep(1e-3)


def _done(request: Any) -> bool:
    """Whether ``request`` completed, or failed (its peer is gone: nothing more to wait for)."""
    try:
        return bool(request.Test())
    except _mpi.mpi().Exception:
        return True


def peers_alive() -> bool:
    """Elastic mode: whether a peer of this rank is alive, as far as MPI knows (ULFM)."""
    comm = _report_comm
    return comm is not None and bool(_live_peers(comm, _mpi.mpi()))


def every_live_peer_left(seconds: float = WAIT_S) -> bool:
    """Elastic mode: whether every peer not known to have failed sent its report
    (:func:`tell_peers`) within ``seconds``, or failed meanwhile: then no rank goes on.

    Called by a rank about to leave, after it told its peers.
    """
    comm = _report_comm
    if comm is None:
        return False
    MPI = _mpi.mpi()
    peers = _live_peers(comm, MPI)
    if any(peer not in _reports for peer in peers):
        return False
    return not _pending_after(peers, seconds, _report_ended)


def end_with_live_peers(waits: bool, seconds: float = END_WAIT_S) -> None:
    """Elastic mode, a survivor whose program ended: tells its live peers so, and, if
    ``waits`` (it ends non-zero), waits at most ``seconds`` until each live peer has said so
    too or failed.

    A launcher ends the whole job when one process exits non-zero: a survivor that ended with
    status 1 (a lost rank had failed) ended the others while they still printed their results
    or saved (measured under Open MPI: a survivor's last output lost). A survivor that ends 0
    does not wait; its message lets the others go.
    """
    comm = _report_comm
    if comm is None:
        return
    MPI = _mpi.mpi()
    peers = _live_peers(comm, MPI)
    sends = []
    for peer in peers:
        with contextlib.suppress(MPI.Exception):  # a peer failed meanwhile
            sends.append(comm.isend(None, dest=peer, tag=END_TAG))
    pending = []
    if waits:
        for peer in peers:
            with contextlib.suppress(MPI.Exception):
                pending.append(comm.irecv(source=peer, tag=END_TAG))
    _pending_after(pending, seconds, _done)
    _pending_after(sends, WAIT_S, _done)  # sent before the end


def _live_peers(comm: Any, MPI: Any) -> list[int]:
    """The ranks of ``comm`` other than this one that MPI does not know to have failed."""
    me, size = comm.Get_rank(), comm.Get_size()
    known: set[int] = set()
    with contextlib.suppress(Exception):  # MPI cannot say: every peer counts as live
        failed, group = comm.Get_failed(), comm.Get_group()
        try:
            ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), group)
            known = {int(r) for r in ranks}
        finally:
            failed.Free()
            group.Free()
    return [peer for peer in range(size) if peer != me and peer not in known]


def report_of(world_rank: int, seconds: float = 0.2) -> str | None:
    """The report that ``world_rank`` sent before it left after a failure (:func:`tell_peers`),
    or ``None`` (it died without one, left as told to stop, or the report has not arrived
    within ``seconds``). The receive was posted in advance (:func:`prepare`): ULFM refuses to
    match a new one from a failed rank, even for a message already here."""
    if world_rank not in _reports:
        return None
    _pending_after([world_rank], seconds, _report_ended)
    failed, report = _arrived.get(world_rank, (False, ""))
    return report if failed else None

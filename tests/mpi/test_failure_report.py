"""Elastic mode's report exchange (``_failure_report``) keeps every report that arrived.

A rank that fails alone in elastic mode sends its traceback to its peers and leaves; each
survivor reads it after its shrink (``report_of``), from a receive posted in advance, and
posts again, at the end of every recovery, the receives that ended (``renew_receives``). A
report that had arrived from a peer still counted live there (it raised at its next step,
before this rank's recovery ended) was taken for an ended receive and replaced unread: the
survivors then counted the rank as a lost machine, and the job ended with status 0 after its
traceback. The exchange is plain point-to-point, so these run on every MPI of CI; the whole
path under ULFM is ``tests/e2e/test_elastic.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mwms_mpi import _failure_report
from tests.support.mpi import world

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(30)]

SENDER = 1


@pytest.fixture
def exchange(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh elastic exchange (its own communicators and posted receives), freed after."""
    monkeypatch.setattr(_failure_report, "_comm", None)
    monkeypatch.setattr(_failure_report, "_report_comm", None)
    monkeypatch.setattr(_failure_report, "_reports", {})
    monkeypatch.setattr(_failure_report, "_arrived", {})
    _failure_report.prepare(elastic=True)
    yield
    for request in _failure_report._reports.values():
        if request:  # still posted (not null): no report came
            request.Cancel()
            request.Wait()
    _failure_report._report_comm.Free()
    _failure_report._comm.Free()


def _peers(comm: object) -> list[int]:
    size, me = comm.Get_size(), comm.Get_rank()  # type: ignore[attr-defined]
    return [peer for peer in range(size) if peer != me]


def test_a_report_that_arrived_before_the_receives_are_renewed_is_still_read(
    exchange: None,
) -> None:
    comm = _failure_report._report_comm
    report = f"rank {SENDER} of {comm.Get_size()}: KeyError: 'rank 1 lost its batch'"
    if comm.Get_rank() == SENDER:
        _failure_report.tell_peers(report)  # a synchronous send: matched when it returns
    world_comm = world()
    world_comm.Barrier()
    world_comm.Free()
    if comm.Get_rank() != SENDER:
        _failure_report.renew_receives(_peers(comm))  # the end of a recovery, SENDER live
        assert _failure_report.report_of(SENDER) == report
        assert _failure_report.report_of(SENDER) == report  # read again: the same report
        for peer in _peers(comm):
            if peer != SENDER:
                assert _failure_report.report_of(peer, seconds=0.0) is None


def test_a_rank_leaving_sees_every_peer_left_and_the_reports_stay_readable(
    exchange: None,
) -> None:
    """Every rank fails and tells the others: each sees that none goes on, and reading the
    reports for that does not take them away from a later ``report_of``."""
    comm = _failure_report._report_comm
    me = comm.Get_rank()
    _failure_report.tell_peers(f"rank {me}: failed")
    assert _failure_report.every_live_peer_left(seconds=10.0)
    for peer in _peers(comm):
        assert _failure_report.report_of(peer, seconds=0.0) == f"rank {peer}: failed"


def test_a_rank_told_to_stop_leaves_without_a_report(exchange: None) -> None:
    comm = _failure_report._report_comm
    if comm.Get_rank() == SENDER:
        _failure_report.tell_peers("terminated (SIGTERM)", failed=False)
    world_comm = world()
    world_comm.Barrier()
    world_comm.Free()
    if comm.Get_rank() != SENDER:
        _failure_report.renew_receives(_peers(comm))
        assert _failure_report.report_of(SENDER) is None

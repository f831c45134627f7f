"""Polling with a deadline: completes, or expires."""

from __future__ import annotations

import time

from mwms_mpi.collective.deadline import Deadline, wait_all


class _DoneAfter:
    """A request that completes after a given number of polls (a stand-in for MPI.Request)."""

    def __init__(self, polls: int) -> None:
        self.left = polls

    def Test(self) -> bool:
        self.left -= 1
        return self.left < 0


def test_completes_when_every_request_does() -> None:
    requests = [_DoneAfter(3), _DoneAfter(100)]
    assert wait_all(requests, Deadline(5.0))
    assert all(r.left < 0 for r in requests)


def test_expires_after_the_timeout() -> None:
    start = time.monotonic()
    assert not wait_all([_DoneAfter(10**9)], Deadline(0.2))
    assert 0.2 <= time.monotonic() - start < 1.0

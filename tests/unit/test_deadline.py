"""Polling with a deadline: completes, expires, and warns once about a stall."""

from __future__ import annotations

import logging
import time

import pytest

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
    assert wait_all(requests, Deadline(5.0, None), lambda: "op")
    assert all(r.left < 0 for r in requests)


def test_expires_after_the_timeout() -> None:
    start = time.monotonic()
    assert not wait_all([_DoneAfter(10**9)], Deadline(0.2, None), lambda: "op")
    assert 0.2 <= time.monotonic() - start < 1.0


def test_stall_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mwms_mpi"):
        assert not wait_all([_DoneAfter(10**9)], Deadline(0.3, 0.05), lambda: "all_reduce #3")
    warnings = [r for r in caplog.records if "all_reduce #3" in r.getMessage()]
    assert len(warnings) == 1

"""Polling with a deadline: completes, expires, or is interrupted (a peer left)."""

from __future__ import annotations

import time

import pytest

from mwms_mpi import errors
from mwms_mpi.collective.deadline import Deadline, wait_all
from mwms_mpi.collective.protocol import CallProtocol
from mwms_mpi.collective.protocol import deadline_of as deadline
from mwms_mpi.types import CommunicationOptions


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


def test_an_interrupt_stops_the_wait() -> None:
    calls = []

    def interrupt() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("a peer left")

    try:
        wait_all([_DoneAfter(10**9)], Deadline(30.0), interrupt)
    except RuntimeError as exc:
        assert str(exc) == "a peer left"
    else:
        raise AssertionError("the interrupt did not stop the wait")


def test_zero_or_negative_timeouts_mean_no_deadline_as_in_tf() -> None:
    # TF 2.21, two workers with one 4 s late: timeout_seconds=0 and -1 both waited and succeeded.
    assert deadline(CommunicationOptions()) is None
    assert deadline(CommunicationOptions(timeout_seconds=0)) is None
    assert deadline(CommunicationOptions(timeout_seconds=-1.5)) is None
    found = deadline(CommunicationOptions(timeout_seconds=2))
    assert found is not None and found.timeout_seconds == 2


class _Abortable(_DoneAfter):
    """A request in flight that can be aborted, as an NCCL call's completion can."""

    def __init__(self) -> None:
        super().__init__(10**9)
        self.aborted = 0

    def abort(self) -> None:
        self.aborted += 1


class _Agreement:
    """The agreement's fields a call state reads (no collective is made here)."""

    id, rank, size, calls = 0, 0, 1, 0


def test_an_expired_deadline_aborts_what_can_be_aborted() -> None:
    state = CallProtocol(_Agreement(), "c", (0,), CommunicationOptions(), ())  # type: ignore[arg-type]
    request, plain = _Abortable(), _DoneAfter(10**9)
    state.busy, state.deadline = ("all_reduce", 1, None), Deadline(0.05)  # a call in flight
    with pytest.raises(errors.DeadlineExceededError):
        state.wait([request, plain], None)
    assert request.aborted == 1 and state.poisoned is not None and not state.usable

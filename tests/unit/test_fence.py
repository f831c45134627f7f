"""``collective/fence.py``: a rank MPI declared failed is ended only if its process is the one
gathered (same host, pid and start time) and still lives; checked on real processes, with the
table ``prepare`` would gather set by hand (no MPI)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from mwms_mpi.collective import fence

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def stopped() -> Iterator[subprocess.Popen[bytes]]:
    """A child process stopped by SIGSTOP, as a frozen rank is."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while fence._stat(child.pid)[0] != "T" and time.monotonic() < deadline:  # type: ignore[index]
        time.sleep(0.01)
    yield child
    child.kill()
    child.wait()


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> list[fence.Process]:
    processes = [fence._this_process()]
    monkeypatch.setattr(fence, "_processes", processes)
    monkeypatch.setattr(fence, "_me", 0)
    monkeypatch.setattr(fence, "_ended", set())
    return processes


def _started(pid: int) -> int:
    stat = fence._stat(pid)
    assert stat is not None
    return int(stat[19])


def test_a_stopped_process_of_a_failed_rank_on_this_host_is_ended(
    stopped: subprocess.Popen[bytes], table: list[fence.Process]
) -> None:
    table.append((socket.gethostname(), stopped.pid, _started(stopped.pid)))
    assert fence.end([1]) == [1]
    assert stopped.wait(timeout=10) == -signal.SIGKILL
    assert fence.end([1]) == []  # once


@pytest.mark.parametrize("which", ["another host", "another start", "this rank", "no such rank"])
def test_nothing_else_is_signalled(
    stopped: subprocess.Popen[bytes], table: list[fence.Process], which: str
) -> None:
    host, started = socket.gethostname(), _started(stopped.pid)
    if which == "another host":
        host += "-elsewhere"
    if which == "another start":  # the pid was given to another process since
        started += 1
    table.append((host, stopped.pid, started))
    rank = {"this rank": 0, "no such rank": 7}.get(which, 1)
    assert fence.end([rank]) == []
    assert stopped.poll() is None  # still there, stopped


def test_a_dead_process_not_yet_reaped_is_left_alone(table: list[fence.Process]) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = _started(child.pid)
    deadline = time.monotonic() + 10
    while fence._stat(child.pid)[0] != "Z" and time.monotonic() < deadline:  # type: ignore[index]
        time.sleep(0.01)
    table.append((socket.gethostname(), child.pid, started))
    assert fence.end([1]) == []  # a crash, not a freeze: nothing to end
    assert child.wait() == 0


def test_without_a_table_nothing_is_signalled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fence, "_processes", None)
    assert fence.end([0, 1]) == []

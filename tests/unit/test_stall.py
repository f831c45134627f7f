"""The stall check names a collective that has waited too long, once per doubling of the wait."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import pytest

from mwms_mpi.collective.protocol import CallProtocol
from mwms_mpi.collective.signature import Layout
from mwms_mpi.collective.stall import StallCheck
from mwms_mpi.types import CommunicationOptions


@dataclass(eq=False)
class _State:
    """The attributes the check reads from a communicator's call state."""

    busy: tuple[str, int, object] | None = None
    rank: int = 1
    size: int = 4
    name: str = "c"


class _Agreement:
    """The agreement's part the call template uses, agreeing at once (no MPI)."""

    id, rank, size, calls, agreements, every_call = 0, 1, 4, 0, 0, True

    def agree_now(self, *args: object) -> tuple[int, int]:
        self.calls += 1
        return 0, 0


class _Plan(NamedTuple):
    layout: Layout = Layout("x", "", ())
    digest: int = 1
    skippable: bool = False


def _plan(opts: object, *args: object) -> tuple[_Plan, int]:
    return _Plan(), 0


def test_names_the_op_call_rank_wait_and_the_runner() -> None:
    check = StallCheck(10.0)
    state = _State(("all_reduce", 7, None))
    assert check.check([state], 100.0) == []  # first seen: the wait is timed from here
    assert check.check([state], 105.0) == []
    (text,) = check.check([state], 111.0)
    assert text.startswith("all_reduce (call 7) on rank 1 of 4 (communicator c) has waited 11 s")
    assert "timeout_seconds" in text and "python -m mwms_mpi.run" in text
    assert "--kill-on-bad-exit" in text
    assert check.check([state], 115.0) == []  # once ...
    assert len(check.check([state], 121.0)) == 1  # ... then again when the wait has doubled
    state.busy = ("all_reduce", 8, ("Strategy.reduce", "SUM", "", ""))  # a new call starts
    assert check.check([state], 200.0) == []  # the count again, and names the user's call
    (text,) = check.check([state], 211.0)
    assert text.startswith("Strategy.reduce (all_reduce, call 8) on rank 1 of 4")
    state.busy = None
    assert check.check([state], 10_000.0) == []


def test_the_call_template_clears_the_busy_mark_however_a_call_ends() -> None:
    calls = CallProtocol(_Agreement(), "c", (1,), CommunicationOptions(), ())  # type: ignore[arg-type]
    seen = []

    def step(plan: _Plan, agreed: tuple[int, int], fail: bool, *_: object) -> str:
        seen.append(calls.busy)
        if fail:
            raise RuntimeError("boom")
        return "done"

    assert calls.run("x", None, _plan, step, False) == "done" and calls.busy is None
    with pytest.raises(RuntimeError):
        calls.run("x", None, _plan, step, True)
    assert calls.busy is None
    assert seen == [("x", 1, None), ("x", 2, None)]  # marked busy while the data moved

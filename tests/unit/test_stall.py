"""The stall watch names a collective that has waited too long, once per doubling of the wait."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mwms_mpi.collective.stall import StallWatch, watched


@dataclass(eq=False)
class _Comm:
    """The attributes the watch reads from a Communicator."""

    _busy: tuple[str, int, float] | None = None
    rank: int = 1
    size: int = 4
    name: str = "c"

    @watched
    def collective(self, fail: bool) -> str:
        if fail:
            raise RuntimeError("boom")
        return "done"


def test_names_the_op_call_rank_and_wait() -> None:
    watch = StallWatch(10.0)
    comm = _Comm(("all_reduce", 7, 100.0))
    watch._comms.add(comm)
    assert watch.check(105.0) == []
    (text,) = watch.check(111.0)
    assert text.startswith("all_reduce #7 on rank 1 of 4 (communicator c) has waited 11 s")
    assert "timeout_seconds" in text
    assert watch.check(115.0) == []  # once ...
    assert len(watch.check(121.0)) == 1  # ... then again when the wait has doubled
    comm._busy = ("barrier", 8, 200.0)  # a new call starts the count again
    assert len(watch.check(211.0)) == 1
    comm._busy = None
    assert watch.check(10_000.0) == []


def test_watched_methods_clear_the_busy_mark_however_they_end() -> None:
    comm = _Comm(("x", 1, 0.0))
    assert comm.collective(False) == "done" and comm._busy is None
    comm._busy = ("x", 2, 0.0)
    with pytest.raises(RuntimeError):
        comm.collective(True)
    assert comm._busy is None


def test_off_at_zero_seconds() -> None:
    watch = StallWatch(0.0)
    watch.watch(_Comm())
    assert watch._thread is None

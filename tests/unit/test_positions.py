"""The rule a failing rank applies to a peer's answer (``collective/positions.py``).

A peer's call can never complete while the asker stays out of collectives when it is numbered
past the calls the asker completed on that communicator; a call the asker completed too (the
peer is only finishing it) or one on a communicator the asker is not in proves nothing.
"""

from __future__ import annotations

from types import SimpleNamespace

from mwms_mpi.collective.call_context import CallContext
from mwms_mpi.collective.positions import CallInFlight, Position, blocked_calls, calls_in_flight


def _state(comm_id: int, busy: tuple[str, int, CallContext | None] | None) -> SimpleNamespace:
    return SimpleNamespace(id=comm_id, name=f"comm-{comm_id}", busy=busy)


def test_calls_in_flight_name_each_busy_call_as_the_stall_warning_does() -> None:
    context: CallContext = ("Strategy.reduce", "SUM", "None", "array", "", "")
    states = [
        _state(7, ("all_reduce", 3, context)),
        _state(8, None),
        _state(9, ("gather", 1, None)),
    ]
    assert calls_in_flight(states) == (
        CallInFlight(7, "comm-7", 3, "Strategy.reduce (all_reduce, call 3)"),
        CallInFlight(9, "comm-9", 1, "gather (call 1)"),
    )


def test_only_calls_past_the_askers_completed_calls_are_blocked() -> None:
    calls = (
        CallInFlight(7, "a", 4, "all_reduce (call 4)"),  # asker completed 3: blocked
        CallInFlight(8, "b", 2, "all_reduce (call 2)"),  # asker completed 2: finishing
        CallInFlight(9, "c", 5, "all_reduce (call 5)"),  # asker not a member: unknown
    )
    position = Position(0, "token", calls, None)
    assert blocked_calls(position, {7: 3, 8: 2}) == [calls[0]]
    assert blocked_calls(position, {7: 4, 8: 2}) == []
    assert blocked_calls(Position(0, "token", (), None), {7: 0}) == []

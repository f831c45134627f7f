"""Where a rank is: the answer a peer's watch gives to "where are you?" on the control channel.

A rank that stopped calling collectives (a test that failed an assertion on it alone) cannot
tell a slow peer from one blocked for ever in a collective it will never enter. It asks
(:class:`Ask`); each peer's watch thread answers at once with its :class:`Position`: the
collectives it has in flight (the watch reads them without touching the blocked main thread)
and an opaque status its owner supplies (the pytest plugin's test and phase). The asker decides
with :func:`blocked_calls`, by the rule of lost ranks (``watch.py``): a call numbered past the
calls the asker completed on that communicator can never complete while the asker stays out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from mwms_mpi.collective.stall import Busy, describe_call


class Ask(NamedTuple):
    """A rank's question; ``token`` comes back in each answer, so a late answer is told apart."""

    world_rank: int
    token: Any


class CallInFlight(NamedTuple):
    """One collective a rank has in flight: its communicator and call, and how to name it."""

    comm_id: int
    comm_name: str
    call: int
    text: str  # ``describe_call``: "Strategy.reduce (all_reduce, call 3)"


class Position(NamedTuple):
    """A rank's answer: its collectives in flight and its owner's status, when it answered."""

    world_rank: int
    token: Any
    calls: tuple[CallInFlight, ...]
    status: Any


def calls_in_flight(comms: Iterable[Any]) -> tuple[CallInFlight, ...]:
    """The calls in flight of ``comms`` (call states with ``busy``, ``id`` and ``name``)."""
    found = []
    for comm in comms:
        busy: Busy | None = comm.busy  # one read: the main thread may clear it meanwhile
        if busy is not None:
            op_name, n, context = busy
            found.append(CallInFlight(comm.id, comm.name, n, describe_call(op_name, n, context)))
    return tuple(found)


def blocked_calls(position: Position, completed: Mapping[int, int]) -> list[CallInFlight]:
    """The calls of ``position`` that cannot complete while the asker makes no call.

    Args:
      position: a peer's answer.
      completed: the asker's completed calls per communicator id (only communicators the asker
        belongs to: ids are the same on every member rank).
    """
    return [
        call
        for call in position.calls
        if call.comm_id in completed and call.call > completed[call.comm_id]
    ]

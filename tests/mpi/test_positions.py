"""A peer's watch answers "where are you?" while its main thread waits in a collective.

The plugin's fail-fast (``mwms_mpi.testing``) rests on this: rank 0 holds back from a reduce
that the other ranks have entered, asks them where they are, and each answers from its watch
thread with its call in flight (numbered past rank 0's completed calls, so ``blocked_calls``
finds it) and the plugin's status (this test, its call phase). Then rank 0 joins the reduce.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi.collective.positions import Position, blocked_calls
from mwms_mpi.collective.watch import process_watch
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver
from tests.support.mpi import all_ranks_ok, rank_size

pytestmark = pytest.mark.mpi

ASK_PERIOD_S = 0.5
ANSWER_LIMIT_S = 30.0  # rank 0 joins the reduce after this, answered or not: no hang


def _ask_until_blocked(completed: dict[int, int], size: int) -> dict[int, Position]:
    """Rank 0: asks every peer until each answers that it is blocked (or the limit passes)."""
    watch = process_watch()
    token = ("test_positions", os.getpid())
    positions: dict[int, Position] = {}
    limit = time.monotonic() + ANSWER_LIMIT_S
    next_ask = 0.0
    while time.monotonic() < limit:
        if time.monotonic() >= next_ask:
            assert watch.ask(token), "no question went out"
            next_ask = time.monotonic() + ASK_PERIOD_S
        for position in watch.answers(token):
            positions[position.world_rank] = position
        if len(positions) == size - 1 and all(
            blocked_calls(p, completed) for p in positions.values()
        ):
            break
        time.sleep(0.01)
    return positions


def test_a_peer_waiting_in_a_reduce_answers_with_its_call(test_comm: Any) -> None:
    rank, size = rank_size()
    strategy = ds.MultiWorkerMirroredStrategy(
        cluster_resolver=MPIClusterResolver(num_accelerators={"CPU": 1})
    )
    strategy.reduce("SUM", np.ones(2), axis=None)  # the control channel exists by now
    if size == 1:  # no communicator, no channel
        assert not process_watch().ask("nobody"), "a one-rank world has no one to ask"
        return
    comm = strategy.extended.communicator
    assert comm is not None
    problems: list[str] = []
    if rank == 0:
        completed = process_watch().completed_calls()
        positions = _ask_until_blocked(completed, size)
        expected = rf"Strategy\.reduce \(all_reduce, call {comm.calls + 1}\)"
        if sorted(positions) != list(range(1, size)):
            problems.append(f"answers from {sorted(positions)}")
        for peer, position in sorted(positions.items()):
            blocked = blocked_calls(position, completed)
            if len(blocked) != 1 or not re.fullmatch(expected, blocked[0].text):
                problems.append(f"rank {peer}: {position}")
            status = position.status
            if not isinstance(status, dict) or not (
                status["test"].endswith(
                    "::" + test_a_peer_waiting_in_a_reduce_answers_with_its_call.__name__
                )
                and status["when"] == "call"
                and status["agreeing"] is None
            ):
                problems.append(f"rank {peer}'s status: {status!r}")
    total = strategy.reduce("SUM", np.ones(2), axis=None)  # rank 0 joins: everyone goes on
    if total.tolist() != [size, size]:
        problems.append(f"reduce gave {total}")
    assert all_ranks_ok(test_comm, not problems), problems

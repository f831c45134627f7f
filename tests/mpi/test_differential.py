"""MultiWorkerMirroredStrategy against real TF 2.21 at this world size, k=1 and k=2, per rank.

The scenarios are ``tests/support/differential.py``; TF's outcomes for the same number of
workers and local replicas, worker by worker, are pinned in ``tests/support/tf_pins.json``
(written by real TF 2.21 workers on a loopback TF_CONFIG; the command is in that module's
docstring). Every rank compares its own outcomes with its worker's, and the ranks agree on
pass/fail before asserting.
"""

from __future__ import annotations

from typing import Any

import pytest

from mwms_mpi._mpi import mpi
from tests.support.differential import SCENARIOS, OursBackend, differences, pinned
from tests.support.mpi import all_ranks_ok

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_strategy_matches_tf(strategy: Any, test_comm: Any, scenario: str) -> None:
    comm = mpi().COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    k = len(strategy.extended.worker_devices)
    tf = pinned(f"mwms_n{size}_k{k}", rank)[scenario]  # skips where TF was not run at this size
    ours = SCENARIOS[scenario](OursBackend(), strategy)
    found = differences(tf, ours)
    assert all_ranks_ok(test_comm, not found), found

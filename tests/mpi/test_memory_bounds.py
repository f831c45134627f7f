"""Memory stays bounded when shapes change from call to call (variable-length batches).

Issue 23, item 10: 4,000 ``strategy.reduce`` calls, each with a new shape, grew each rank's
RSS by ~520 MB (a pool slot and plans per shape, the pool up to 1 GB). Now results are pooled
by size class and plans are bounded: the growth after ``gc.collect()`` stays under 50 MB.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from tests.support.mpi import all_ranks_ok

pytestmark = pytest.mark.mpi

CALLS = 4000
LIMIT_MB = 50.0


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_reduce_of_a_new_shape_each_call_grows_rss_by_less_than_50_mb(test_comm: Any) -> None:
    strategy = ds.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    strategy.reduce("SUM", np.ones(8, np.float32), axis=None)  # plans and caches of a first call
    gc.collect()
    before = rss_mb()
    wrong = []
    for i in range(CALLS):
        n = 1 + (i * 7919) % (1 << 18)  # up to 1 MB of float32, a new shape almost every call
        shape = (n,) if i % 2 else (1, n)
        result = strategy.reduce("SUM", np.full(shape, 2.0, np.float32), axis=None)
        if result.shape != shape or not (result == 2.0 * workers).all():
            wrong.append(i)
    gc.collect()
    growth = rss_mb() - before
    ok = not wrong and growth < LIMIT_MB
    assert all_ranks_ok(test_comm, ok), (
        f"rank {test_comm.Get_rank()}: RSS grew by {growth:.1f} MB over {CALLS} calls "
        f"(limit {LIMIT_MB} MB); wrong results at calls {wrong[:5]}"
    )

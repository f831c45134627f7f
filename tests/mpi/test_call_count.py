"""How many of the package's own functions one steady-state ``strategy.reduce`` runs.

Issue "One call protocol": each rule has one home and each collective goes through one call
template, so a steady-state ``strategy.reduce("SUM", x, axis=None)`` under
MultiWorkerMirroredStrategy (k = 1, after two warm-up calls) calls at most 15 package functions
in one process. Counted as the ``call`` events ``sys.setprofile`` sees in frames whose file is
inside the package, from entry to return (``__enter__``/``__exit__`` included). Across ranks the
value goes through TF's ``CrossDeviceOps`` template and one collective call: that path is
bounded too, so that a rule or a protocol step added twice shows up here (docs/architecture.md,
"The path of one strategy.reduce", lists the functions).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver
from tests.support.mpi import all_ranks_ok, rank_size

pytestmark = pytest.mark.mpi

PACKAGE = os.path.dirname(mwms_mpi.__file__) + os.sep
ONE_PROCESS_LIMIT = 15  # the bound
ACROSS_RANKS_LIMIT = 31  # measured when the template landed: a regression guard


def _package_calls(fn: Any) -> tuple[Any, list[str]]:
    """``fn()``'s result and the package functions it called, in order."""
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            path = frame.f_code.co_filename[len(PACKAGE) :]
            calls.append(f"{path}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, calls


def test_a_steady_state_reduce_calls_few_package_functions(test_comm: Any) -> None:
    _, size = rank_size()
    strategy = ds.MultiWorkerMirroredStrategy(
        cluster_resolver=MPIClusterResolver(num_accelerators={"CPU": 1})
    )
    x = np.arange(1000, dtype=np.float32)
    for _ in range(2):  # warm-up: plans, cached digests, the default context
        strategy.reduce("SUM", x, axis=None)
    result, calls = _package_calls(lambda: strategy.reduce("SUM", x, axis=None))
    limit = ONE_PROCESS_LIMIT if size == 1 else ACROSS_RANKS_LIMIT
    ok = np.array_equal(result, x * size) and len(calls) <= limit
    assert all_ranks_ok(test_comm, ok), f"{len(calls)} calls (limit {limit}):\n" + "\n".join(calls)

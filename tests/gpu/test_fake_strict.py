"""The fake CuPy can fail: device memory read before its stream ran holds the wrong bytes.

``make test-gpu-fake`` trusts the fake to catch a missing synchronisation or an unordered copy
(docs/testing.md, "GPU suites"): a write to fake device memory lands only when its stream runs,
and until then the memory holds its old bytes, or poison when it was just allocated. These
tests show that on every rank: MPI handed an unsynchronised device buffer reduces poison, and
the package's CUDA-aware backend with its synchronisation taken out gives a wrong sum, where
the same calls with it give the numpy reference. Under a real CuPy they do not apply.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

from mwms_mpi.collective import Op
from mwms_mpi.collective.backends.cuda_mpi import CudaMPIBackend
from mwms_mpi.collective.backends.staging import StagingBackend
from tests.gpu.conftest import FAKE
from tests.support.mpi import all_ranks_ok

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(not FAKE, reason="tests the fake CuPy's model of device memory"),
]


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


def _sum(n: int, size: int) -> np.ndarray:
    return np.arange(n, dtype=np.float64) * size + size * (size + 1) / 2


def test_mpi_reads_poison_from_a_buffer_whose_stream_did_not_run(
    cp: types.ModuleType, test_comm: Any
) -> None:
    MPI = _mpi()
    x = cp.arange(8, dtype=cp.float64) + (test_comm.rank + 1)  # lands when the stream runs
    y = np.empty(8)
    test_comm.Allreduce(x, y, MPI.SUM)  # the fake's memory is host memory: MPI reads it as is
    stale = not np.array_equal(y, _sum(8, test_comm.size))
    cp.cuda.get_current_stream().synchronize()
    test_comm.Allreduce(x, y, MPI.SUM)
    assert all_ranks_ok(test_comm, stale and np.array_equal(y, _sum(8, test_comm.size)))


@pytest.mark.parametrize("synchronised", [True, False])
def test_cuda_mpi_without_its_synchronisation_sums_wrong_bytes(
    cp: types.ModuleType, test_comm: Any, synchronised: bool
) -> None:
    MPI = _mpi()
    backend = CudaMPIBackend(MPI, StagingBackend(MPI, 1 << 20, 1 << 22), min_device_bytes=0)
    if not synchronised:
        backend._runtime = types.SimpleNamespace(  # the deletion a reviewer could miss
            synchronize=lambda _: None, current_stream=backend._runtime.current_stream
        )
    x = cp.arange(16, dtype=cp.float64) + (test_comm.rank + 1)
    assert backend.all_reduce(test_comm, None, x, Op.SUM, True) is None
    right = np.array_equal(cp.asnumpy(x), _sum(16, test_comm.size))
    assert all_ranks_ok(test_comm, right == synchronised)

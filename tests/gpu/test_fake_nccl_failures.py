"""NCCL failures through the double, in jobs of their own (a poisoned communicator ends its job).

NCCL reports a remote rank's or the network's failure asynchronously
(``ncclCommGetAsyncError``): a call in flight never completes, so a deadline's poll must ask for
that error, abort the NCCL communicator and raise on every rank, instead of waiting for an
event that never comes. A communicator poisoned so aborts its job at exit (MPI cannot finalize
with NCCL's call in flight), so the program runs under its own ``mpiexec``.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.gpu.conftest import FAKE
from tests.support.launch import run_mpi

pytestmark = pytest.mark.skipif(not FAKE, reason="tests the NCCL double of the fake CuPy")

FAKE_RUN = str(Path(__file__).resolve().parents[1] / "support" / "fake_cupy_run.py")


def _run(tmp_path: Path, name: str, program: str, timeout: int) -> Any:
    """``program`` at 2 ranks over the fake CuPy, a GPU of its own per rank, in its own job."""
    path = tmp_path / name
    path.write_text(program)
    env = {"MWMS_TEST_FAKE_CUPY": "1", "MWMS_TEST_FAKE_CUPY_OWN_GPUS": "1"}
    return run_mpi(2, [sys.executable, FAKE_RUN, path], timeout=timeout, env=env)


PROGRAM = textwrap.dedent(
    """
    import cupy as cp
    from mpi4py import MPI

    from mwms_mpi import errors
    from mwms_mpi.collective import Communicator, Op
    from mwms_mpi.types import CommunicationOptions
    from tests.support import fake_nccl

    c = Communicator(options=CommunicationOptions(implementation="NCCL"), name="async")
    assert c.transport.name == "nccl", c.describe()
    c.all_reduce(cp.ones(3, cp.float32), Op.SUM)  # makes the NCCL communicator
    made = max(fake_nccl.communicators(), key=lambda m: m.serial)
    made.fail_asynchronously("a peer's connection was lost")
    try:
        deadline = CommunicationOptions(timeout_seconds=30)
        c.all_reduce(cp.ones(3, cp.float32), Op.SUM, options=deadline)
        print(f"rank {c.rank}: NO ERROR", flush=True)
    except errors.InternalError as exc:
        print(f"rank {c.rank}: InternalError [{exc}] nccl {made.state}", flush=True)
    try:
        c.all_reduce(cp.ones(3, cp.float32), Op.SUM)
        print(f"rank {c.rank}: USABLE AFTER THE ERROR", flush=True)
    except errors.UnavailableError:
        print(f"rank {c.rank}: unusable afterwards", flush=True)
    """
)


def test_an_asynchronous_nccl_error_raises_on_every_rank_and_aborts(tmp_path: Path) -> None:
    result = _run(tmp_path, "async_error.py", PROGRAM, timeout=120)
    out = result.output
    for rank in range(2):
        assert f"rank {rank}: InternalError [" in out, result.describe()
        assert f"rank {rank}: unusable afterwards" in out, result.describe()
    assert "a peer's connection was lost" in out and "nccl aborted" in out, result.describe()
    assert "NO ERROR" not in out and "USABLE AFTER" not in out, result.describe()
    assert not result.killed  # the deadline's poll found the error: no hang


FIRST_CALL = textwrap.dedent(
    """
    import time

    import cupy as cp
    from mpi4py import MPI

    from mwms_mpi.collective import Op
    from mwms_mpi.collective.backends.nccl import NcclBackend
    from mwms_mpi.collective.backends.staging import StagingBackend
    from mwms_mpi.collective.deadline import Deadline, wait_all
    from tests.support import fake_nccl

    comm = MPI.COMM_WORLD.Dup()
    backend = NcclBackend(comm, StagingBackend(MPI, 4 << 20, 16 << 20), None)
    if comm.rank == 0:  # rank 1 never makes its first NCCL call
        x = cp.ones(3, cp.float32)
        started = time.monotonic()
        first = backend.all_reduce(comm, None, x, Op.SUM, False)
        done = wait_all([first], Deadline(2.0))
        took = time.monotonic() - started
        print(f"rank 0: done={done} after {took:.1f} s, made {len(fake_nccl.communicators())}")
        MPI.COMM_WORLD.Barrier()
    else:
        MPI.COMM_WORLD.Barrier()  # after rank 0 gave up: its barrier may complete now
        comm.Ibarrier().Wait()
    comm.Barrier()
    print(f"rank {comm.rank}: finished", flush=True)
    """
)


def test_a_first_nccl_call_a_rank_never_makes_ends_at_the_deadline(tmp_path: Path) -> None:
    # ncclCommInitRank waits for every rank: made inside a call under a deadline, a rank that
    # never comes would hang the others whatever the deadline said. The first call waits at an
    # MPI Ibarrier first, polled.
    result = _run(tmp_path, "first_call.py", FIRST_CALL, timeout=60)
    assert not result.killed, result.describe()  # before: rank 0 hung in the id's broadcast
    assert "rank 0: done=False after 2." in result.output, result.describe()
    assert "made 0" in result.output, result.describe()  # no NCCL set-up was entered
    for rank in range(2):
        assert f"rank {rank}: finished" in result.output, result.describe()


QUEUED = textwrap.dedent(
    """
    import cupy as cp
    import numpy as np
    from mpi4py import MPI

    from mwms_mpi.collective import Op
    from mwms_mpi.collective.backends.nccl import NcclBackend
    from mwms_mpi.collective.backends.staging import StagingBackend
    from mwms_mpi.collective.deadline import Deadline, wait_all

    comm = MPI.COMM_WORLD.Dup()
    backend = NcclBackend(comm, StagingBackend(MPI, 4 << 20, 16 << 20), None)
    sizes = (5, 3, 8)  # three calls started before the communicator exists (a batch's packs)
    xs = [cp.full(n, comm.rank + 1, cp.float32) for n in sizes]
    calls = [backend.all_reduce(comm, None, x, Op.SUM, False) for x in xs]
    polled = calls if comm.rank % 2 else calls[::-1]  # the ranks poll in other orders
    done = wait_all(polled, Deadline(30.0))
    total = comm.size * (comm.size + 1) // 2
    ok = done and all(np.array_equal(cp.asnumpy(x), np.full(n, total)) for x, n in zip(xs, sizes))
    print(f"rank {comm.rank}: ok={ok}", flush=True)
    backend.close()
    """
)


def test_calls_started_before_the_nccl_communicator_are_issued_in_order(tmp_path: Path) -> None:
    result = _run(tmp_path, "queued.py", QUEUED, timeout=60)
    for rank in range(2):
        assert f"rank {rank}: ok=True" in result.output, result.describe()

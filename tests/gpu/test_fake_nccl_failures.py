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

import pytest

from tests.gpu.conftest import FAKE
from tests.support.launch import run_mpi

pytestmark = pytest.mark.skipif(not FAKE, reason="tests the NCCL double of the fake CuPy")

FAKE_RUN = str(Path(__file__).resolve().parents[1] / "support" / "fake_cupy_run.py")

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
    program = tmp_path / "async_error.py"
    program.write_text(PROGRAM)
    env = {"MWMS_TEST_FAKE_CUPY": "1", "MWMS_TEST_FAKE_CUPY_OWN_GPUS": "1"}
    result = run_mpi(2, [sys.executable, FAKE_RUN, program], timeout=120, env=env)
    out = result.output
    for rank in range(2):
        assert f"rank {rank}: InternalError [" in out, result.describe()
        assert f"rank {rank}: unusable afterwards" in out, result.describe()
    assert "a peer's connection was lost" in out and "nccl aborted" in out, result.describe()
    assert "NO ERROR" not in out and "USABLE AFTER" not in out, result.describe()
    assert not result.killed  # the deadline's poll found the error: no hang

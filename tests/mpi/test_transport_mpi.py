"""The transport decision as a communicator makes it: gathered from every rank, the same on all.

On the CPU (no CuPy or no GPU) every rank reports no GPU, so CuPy arrays would be staged unless
every rank's MPI is CUDA-aware; NCCL asked for without GPUs warns as TF does and falls back to
RING. The CUDA-support query runs against the libmpi mpi4py really loaded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from mwms_mpi.collective import Communicator, transport
from mwms_mpi.collective.cuda_aware import cuda_support, loaded_libmpi
from mwms_mpi.types import CommunicationOptions
from tests.support.mpi import all_ranks_ok

pytestmark = pytest.mark.mpi


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


def _expected_query(MPI: Any) -> set[int | None]:
    """What docs/gpus.md ("Which MPIs are CUDA-aware") records for each library (none is CUDA-aware
    except Intel MPI with I_MPI_OFFLOAD=1)."""
    banner = MPI.Get_library_version()
    if "Intel" in banner:
        return {1} if os.environ.get("I_MPI_OFFLOAD") == "1" else {0}
    if banner.startswith("MPICH"):
        return {0}  # the mpich wheel: ch4 without CUDA
    return {0, None}  # Open MPI without CUDA says 0; a library without the symbol says nothing


def test_cuda_support_asks_the_loaded_library() -> None:
    MPI = _mpi()
    library = loaded_libmpi(MPI)
    assert library is not None and "libmpi" in os.path.basename(library)
    support = cuda_support(MPI, {})
    assert support.library == library
    assert support.query in _expected_query(MPI)
    assert support.aware == (support.query == 1)
    assert cuda_support(MPI, {"MWMS_MPI_CUDA_AWARE": "1"}).aware


def test_local_facts_of_a_cpu_run() -> None:
    MPI = _mpi()
    env = {transport.CHUNK_BYTES_ENV: "1024", "MWMS_MPI_CUDA_AWARE": "1"}
    facts = transport.local_facts(MPI, None, env)
    assert facts.host == MPI.Get_processor_name() and facts.gpu is None and facts.bus_id is None
    assert facts.tuning == (
        transport.DEFAULT_MIN_DEVICE_BYTES,
        1024,
        transport.DEFAULT_PIPELINE_BYTES,
    )
    assert facts.cuda_aware and facts.error == ""
    broken = transport.local_facts(MPI, None, {transport.MIN_DEVICE_BYTES_ENV: "lots"})
    assert "Environment variable MWMS_MPI_CUDA_MPI_MIN_BYTES='lots' is not an integer" in (
        broken.error
    )
    assert not transport.local_facts(MPI, None, {"MWMS_MPI_CUDA_AWARE": "0"}).cuda_aware


@pytest.fixture(scope="module")
def comm() -> Iterator[Communicator]:
    c = Communicator(name="transport")
    yield c
    c.close()


def test_every_rank_has_the_same_transport(comm: Communicator, test_comm: Any) -> None:
    everyone = test_comm.allgather(comm.transport)
    assert all_ranks_ok(test_comm, all(t == everyone[0] for t in everyone))
    facts = transport.local_facts(_mpi(), "current")
    if facts.gpu is None and not facts.cuda_aware:
        assert comm.transport.name == "staging"
    text = comm.describe()
    assert comm.transport.name in text and f"of {comm.size}" in text


def test_nccl_without_gpus_warns_and_falls_back(
    test_comm: Any, caplog: pytest.LogCaptureFixture
) -> None:
    if transport.local_facts(_mpi(), "current").gpu is not None:
        pytest.skip("this rank has a GPU: NCCL is not refused for want of one")
    logger = logging.getLogger("mwms_mpi")
    logger.propagate = True
    try:
        with caplog.at_level(logging.WARNING, logger="mwms_mpi"):
            c = Communicator(options=CommunicationOptions(implementation="NCCL"), device=None)
    finally:
        logger.propagate = False
    try:
        assert c.transport.requested == "RING" and c.transport.name in ("staging", "cuda_mpi")
        assert transport.NCCL_WITHOUT_GPU in caplog.text
    finally:
        c.close()


def test_tuning_that_differs_between_ranks_raises_on_every_rank(comm: Communicator) -> None:
    name = transport.CHUNK_BYTES_ENV
    before = os.environ.get(name)
    os.environ[name] = str(4096 + (comm.rank % 2))
    try:
        if comm.size == 1:
            Communicator(device=None).close()  # one rank agrees with itself
        else:
            with pytest.raises(ValueError, match="differently"):
                Communicator(device=None)
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before

"""The collectives on CuPy arrays, against numpy references on every rank, at any world size.

Every rank draws the same hypothesis examples, builds its data from (example, rank) on the
host, moves it to its GPU, and compares the device result (which must still be a CuPy array,
on the same GPU, of the same dtype) with a serial numpy reduction of every rank's data. The
transport is whatever the communicator's ranks agreed (``MWMS_TEST_EXPECT_TRANSPORT`` says
which one the run must get): staging under a non-CUDA-aware MPI, CUDA-aware MPI under Intel MPI
with ``I_MPI_OFFLOAD=1``, NCCL where every rank has a GPU of its own. Under the fake CuPy the
same tests also run through the NCCL double with a fake GPU per rank (``nccl-gpu-per-rank``).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mwms_mpi import errors
from mwms_mpi._config import switches
from mwms_mpi.cli.bench import environment
from mwms_mpi.collective import Communicator, Op, transport
from mwms_mpi.types import CommunicationOptions
from tests.gpu.conftest import FAKE, expected_transport, gpu_per_rank
from tests.mpi.test_collective_properties import NUMERIC, reductions, shapes
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array, reduce_reference

pytestmark = pytest.mark.mpi

# Sizes around the staging pipeline and the CUDA-aware crossover set below (bytes).
SMALL_TUNING = {
    transport.MIN_DEVICE_BYTES_ENV: "256",
    transport.CHUNK_BYTES_ENV: "64",
    transport.PIPELINE_BYTES_ENV: "128",
}


NCCL_OPTIONS = CommunicationOptions(implementation="NCCL")


@pytest.fixture(
    scope="module",
    params=["default", "small-tuning", *(["nccl-gpu-per-rank"] if FAKE else [])],
)
def comm(request: pytest.FixtureRequest, cp: types.ModuleType) -> Iterator[Communicator]:
    """The default transport, then the same with tiny chunks and crossover (every path); under
    the fake, NCCL with a fake GPU per rank too (on GPUs the default is NCCL where it can be)."""
    if request.param == "nccl-gpu-per-rank":
        with gpu_per_rank():
            c = Communicator(options=NCCL_OPTIONS, name="gpu-nccl")
    else:
        env = SMALL_TUNING if request.param == "small-tuning" else None
        with environment(env or {}):
            c = Communicator(name=f"gpu-{request.param}")
    yield c
    c.close()


def _same(cp: types.ModuleType, got: Any, want: np.ndarray, device: Any) -> bool:
    return (
        isinstance(got, cp.ndarray)
        and got.device == device
        and got.shape == want.shape
        and got.dtype == want.dtype
        and np.array_equal(cp.asnumpy(got), want)
    )


def test_the_transport_is_agreed_and_expected(comm: Communicator, test_comm: Any) -> None:
    everyone = test_comm.allgather(comm.transport)
    assert all_ranks_ok(test_comm, all(t == everyone[0] for t in everyone))
    want = expected_transport(comm.size)
    if comm.transport.requested == "NCCL":
        want = "nccl"
    if want is not None:
        assert comm.transport.name == want, comm.describe()
    assert comm.transport.name in comm.describe()


@given(reductions(), st.integers(0, 3))
def test_all_reduce_on_device_equals_numpy(
    cp: types.ModuleType, comm: Communicator, test_comm: Any, case: tuple, seed: int
) -> None:
    op, batch = case
    shape, dtype = batch[0]
    everyone = [rank_array(shape, dtype, r, seed) for r in range(comm.size)]
    x = cp.asarray(everyone[comm.rank])
    got = comm.all_reduce(x, op)
    ok = _same(cp, got, reduce_reference(op, everyone), x.device)
    ok = ok and np.array_equal(cp.asnumpy(x), everyone[comm.rank])  # the input is untouched
    assert all_ranks_ok(test_comm, ok), f"rank {comm.rank}: {got!r}"


@given(reductions(), st.sampled_from([0, 1, 32, 4096]), st.integers(0, 3))
def test_batch_all_reduce_on_device_equals_numpy(
    cp: types.ModuleType,
    comm: Communicator,
    test_comm: Any,
    case: tuple,
    bytes_per_pack: int,
    seed: int,
) -> None:
    op, batch = case
    everyone = [
        [rank_array(s, d, r, seed + i) for i, (s, d) in enumerate(batch)] for r in range(comm.size)
    ]
    arrays = [cp.asarray(a) for a in everyone[comm.rank]]
    got = comm.batch_all_reduce(arrays, op, CommunicationOptions(bytes_per_pack=bytes_per_pack))
    want = [reduce_reference(op, [e[i] for e in everyone]) for i in range(len(batch))]
    device = arrays[0].device
    ok = len(got) == len(want) and all(
        _same(cp, g, w, device) for g, w in zip(got, want, strict=True)
    )
    assert all_ranks_ok(test_comm, ok), f"rank {comm.rank}: {got!r}"


@given(shapes.filter(lambda s: len(s) >= 1), st.sampled_from([*NUMERIC, "bool"]), st.data())
def test_all_gather_on_device_uneven(
    cp: types.ModuleType, comm: Communicator, test_comm: Any, shape: tuple, dtype: str, data: Any
) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=comm.size, max_size=comm.size))

    def part(r: int) -> np.ndarray:
        s = list(shape)
        s[axis] = sizes[r]
        return rank_array(tuple(s), dtype, r)

    x = cp.asarray(part(comm.rank))
    got = comm.all_gather(x, axis=axis)
    want = np.concatenate([part(r) for r in range(comm.size)], axis=axis)
    assert all_ranks_ok(test_comm, _same(cp, got, want, x.device))


# 2 MB and up: Intel MPI's Bcast of such a device buffer killed the receiving rank on the GPU
# machine (the cuda_mpi backend stages broadcasts since; scripts/gpu/probe_cuda_mpi.py found it).
@pytest.mark.parametrize(
    ("shape", "dtype"), [((300, 7), "float32"), ((512, 1024), "float32"), ((300, 1000), "int64")]
)
def test_broadcast_on_device(
    cp: types.ModuleType, comm: Communicator, test_comm: Any, shape: tuple, dtype: str
) -> None:
    root = comm.size - 1
    x = cp.asarray(rank_array(shape, dtype, comm.rank))
    got = comm.broadcast(x, root=root)
    ok = _same(cp, got, rank_array(shape, dtype, root), x.device)
    assert all_ranks_ok(test_comm, ok)


@pytest.mark.parametrize("count", [1, 1000, 100_000])
def test_collectives_under_a_deadline(
    cp: types.ModuleType, comm: Communicator, test_comm: Any, count: int
) -> None:
    """``timeout_seconds``: the calls poll (CUDA events, MPI requests) and complete."""
    options = CommunicationOptions(timeout_seconds=60)
    everyone = [rank_array((count,), "float32", r) for r in range(comm.size)]
    x = cp.asarray(everyone[comm.rank])
    reduced = comm.all_reduce(x, Op.SUM, options)
    batch = comm.batch_all_reduce([x, x[: count // 2]], Op.MAX, options)
    gathered = comm.all_gather(x, 0, options)
    ok = _same(cp, reduced, reduce_reference(Op.SUM, everyone), x.device)
    half = [e[: count // 2] for e in everyone]
    ok = ok and _same(cp, batch[0], reduce_reference(Op.MAX, everyone), x.device)
    ok = ok and _same(cp, batch[1], reduce_reference(Op.MAX, half), x.device)
    ok = ok and _same(cp, gathered, np.concatenate(everyone), x.device)
    assert all_ranks_ok(test_comm, ok) and comm.poisoned is None


def test_numpy_on_one_rank_and_cupy_on_another_is_refused_everywhere(
    cp: types.ModuleType, comm: Communicator
) -> None:
    if comm.size == 1:
        pytest.skip("needs two ranks")
    host = np.ones(8, np.float32)
    x = host if comm.rank == 0 else cp.asarray(host)
    with pytest.raises(errors.InvalidArgumentError, match=r"arrays (cupy != numpy|numpy != cupy)"):
        comm.all_reduce(x)
    assert comm.all_reduce(cp.asarray(host)).shape == (8,)  # still usable: nothing moved


def test_host_and_device_arrays_in_one_call_are_refused_everywhere(
    cp: types.ModuleType, comm: Communicator
) -> None:
    host = np.ones(4, np.float32)
    arrays = [cp.asarray(host), cp.asarray(host)]
    if comm.rank == comm.size - 1:
        arrays[1] = host
    with pytest.raises(errors.InvalidArgumentError, match="host and device arrays mixed"):
        comm.batch_all_reduce(arrays)
    with pytest.raises(errors.InvalidArgumentError, match="host and device arrays mixed"):
        comm.all_reduce_addends(arrays)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.fake_gpu_not_evidence
def test_deterministic_sums_on_device_are_numpys_bits(
    cp: types.ModuleType, comm: Communicator, test_comm: Any, dtype: str
) -> None:
    """With op determinism on, device addends are staged through the host: the same bits."""
    rng = np.random.default_rng(comm.rank)
    mine = (rng.standard_normal(1000) * 10.0 ** rng.integers(-8, 8, 1000)).astype(dtype)
    before = switches.op_determinism
    switches.op_determinism = True
    try:
        on_host = comm.all_reduce(mine, Op.SUM)
        on_device = comm.all_reduce(cp.asarray(mine), Op.SUM)
        batch = comm.batch_all_reduce([cp.asarray(mine), cp.asarray(mine[:10])], Op.SUM)
    finally:
        switches.op_determinism = before
    ok = isinstance(on_device, cp.ndarray) and cp.asnumpy(on_device).tobytes() == on_host.tobytes()
    ok = ok and cp.asnumpy(batch[0]).tobytes() == on_host.tobytes()
    assert all_ranks_ok(test_comm, ok)

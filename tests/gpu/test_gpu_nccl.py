"""NCCL: its collectives, on the caller's stream, and its refusal of ranks that share a GPU.

NCCL refuses two ranks on one device (docs/gpus.md, "Transports"), so on a machine with one GPU
its multi-rank path (the unique id made on rank 0 and broadcast over MPI, the collectives, the
abort) runs at one rank only; ``tests/mpi/test_staging.py`` runs the id exchange through MPI at
any size. Under the fake CuPy (``make test-gpu-fake``, every CI run) each rank gets a fake GPU
of its own and the NCCL double (``tests/support/fake_nccl.py``) runs these tests at every world
size: it checks the calls' arguments and order across ranks, their stream and groups, and moves
the data over MPI, so a wrong routing fails here by error or by value. With several ranks on one
GPU, asking for NCCL must fail on every rank, naming the ranks and the GPU, before NCCL starts.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mwms_mpi.collective import Communicator, Op, transport
from mwms_mpi.types import CommunicationOptions
from tests.gpu.conftest import gpu_per_rank
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array, reduce_reference

pytestmark = pytest.mark.mpi

NCCL = CommunicationOptions(implementation="NCCL")


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


def _everyone_facts(test_comm: Any) -> list[transport.DeviceFacts]:
    return test_comm.allgather(transport.local_facts(_mpi(), "current"))


@pytest.fixture(scope="module")
def nccl(cp: types.ModuleType, test_comm: Any) -> Iterator[Communicator]:
    with gpu_per_rank():  # the fake: a GPU per rank; real GPUs: the machine's layout
        facts = _everyone_facts(test_comm)
        if not all(f.nccl for f in facts):
            pytest.skip("NCCL does not load here (cupy.cuda.nccl.available is False)")
        if transport.shared_gpus(facts):
            pytest.skip("ranks share a GPU: NCCL refuses them (see the test of that refusal)")
        c = Communicator(options=NCCL, name="nccl")
    yield c
    c.close()


def test_nccl_is_the_transport(nccl: Communicator) -> None:
    assert nccl.transport.name == "nccl" and "nccl" in nccl.describe()


@pytest.mark.parametrize(
    ("dtype", "op"),
    [
        ("float32", Op.SUM),
        ("float64", Op.MAX),
        ("int64", Op.MIN),
        ("complex64", Op.SUM),
        ("int16", Op.SUM),  # NCCL has no int16: staged
        ("bool", Op.MAX),
        ("float16", Op.SUM),
        ("uint8", Op.SUM),
    ],
)
def test_nccl_all_reduce(
    cp: types.ModuleType, nccl: Communicator, test_comm: Any, dtype: str, op: Op
) -> None:
    everyone = [rank_array((1000, 3), dtype, r) for r in range(nccl.size)]
    got = nccl.all_reduce(cp.asarray(everyone[nccl.rank]), op)
    ok = isinstance(got, cp.ndarray) and np.array_equal(
        cp.asnumpy(got), reduce_reference(op, everyone)
    )
    assert all_ranks_ok(test_comm, ok)


@pytest.mark.parametrize("timeout", [None, 60])
def test_nccl_batch_gather_broadcast(
    cp: types.ModuleType, nccl: Communicator, test_comm: Any, timeout: float | None
) -> None:
    options = CommunicationOptions(timeout_seconds=timeout)
    everyone = [rank_array((100,), "float32", r) for r in range(nccl.size)]
    x = cp.asarray(everyone[nccl.rank])
    batch = nccl.batch_all_reduce([x, x[:7].astype(cp.int32)], Op.SUM, options)
    gathered = nccl.all_gather(x[: nccl.rank + 1], 0, options)
    root = nccl.size - 1
    cast = nccl.broadcast(x, root, options)
    cp.cuda.get_current_stream().synchronize()
    ok = np.array_equal(cp.asnumpy(batch[0]), reduce_reference(Op.SUM, everyone))
    sevens = [e[:7].astype(np.int32) for e in everyone]
    ok = ok and np.array_equal(cp.asnumpy(batch[1]), reduce_reference(Op.SUM, sevens))
    want = np.concatenate([e[: r + 1] for r, e in enumerate(everyone)])
    ok = ok and np.array_equal(cp.asnumpy(gathered), want)
    ok = ok and np.array_equal(cp.asnumpy(cast), everyone[root])
    assert all_ranks_ok(test_comm, ok) and nccl.poisoned is None


@pytest.mark.parametrize("non_blocking", [False, True])
def test_nccl_collectives_on_the_callers_stream(
    cp: types.ModuleType, nccl: Communicator, test_comm: Any, non_blocking: bool
) -> None:
    """Under a stream of the caller's, the collectives queue on it: read there, the results
    are complete (the double refuses another stream, and lands results on the one given)."""
    everyone = [rank_array((257,), "float64", r, 3) for r in range(nccl.size)]
    sizes = [(r * 5) % 7 for r in range(nccl.size)]
    stream = cp.cuda.Stream(non_blocking=non_blocking)
    with stream:
        x = cp.asarray(everyone[nccl.rank])
        reduced = nccl.all_reduce(x, Op.MAX)
        batch = nccl.batch_all_reduce([x, x[:9]], Op.SUM)
        gathered = nccl.all_gather(x[: sizes[nccl.rank]], 0)
        cast = nccl.broadcast(x, 0)
        got = [cp.asnumpy(v) for v in (reduced, *batch, gathered, cast)]
    want = [
        reduce_reference(Op.MAX, everyone),
        reduce_reference(Op.SUM, everyone),
        reduce_reference(Op.SUM, [e[:9] for e in everyone]),
        np.concatenate([e[:n] for e, n in zip(everyone, sizes, strict=True)]),
        everyone[0],
    ]
    ok = all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    assert all_ranks_ok(test_comm, ok) and nccl.poisoned is None


def test_nccl_for_ranks_sharing_a_gpu_is_refused_on_every_rank(
    cp: types.ModuleType, test_comm: Any
) -> None:
    facts = _everyone_facts(test_comm)
    shared = transport.shared_gpus(facts)
    if not shared:
        pytest.skip("no two ranks share a GPU here")
    host, bus, ranks = shared[0]
    want = f"ranks {', '.join(map(str, ranks))} share one GPU (PCI bus {bus} on host {host})"
    with pytest.raises(ValueError, match=want.replace("(", r"\(").replace(")", r"\)")):
        Communicator(options=NCCL, name="nccl-shared")
    # AUTO on the same ranks quietly takes another transport.
    auto = Communicator(name="auto-shared")
    try:
        assert auto.transport.name in ("cuda_mpi", "staging")
    finally:
        auto.close()


def test_an_array_on_another_gpu_than_nccls_is_refused_on_every_rank(
    cp: types.ModuleType, nccl: Communicator, test_comm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NCCL queues on the current device's stream for its communicator's device: an array on
    # another GPU (or another current device) was CUDA's invalid-resource-handle on that rank
    # alone, the others left waiting in NCCL. The plan step refuses it, so every rank raises.
    from tests.gpu.conftest import FAKE

    if FAKE:
        from tests.support.fake_cupy import GPUS_ENV

        monkeypatch.setenv(GPUS_ENV, "2")
    elif cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs per rank")
    mine = nccl_device = cp.cuda.runtime.getDevice()
    other = 1 - nccl_device
    last = test_comm.size - 1
    seen = []
    for case in ("array", "current"):
        with cp.cuda.Device(other if test_comm.rank == last and case == "array" else mine):
            x = cp.ones(4, cp.float32)
        try:
            with cp.cuda.Device(other if test_comm.rank == last and case == "current" else mine):
                nccl.all_reduce(x, Op.SUM)
            seen.append("no error")
        except Exception as exc:
            seen.append(f"{type(exc).__name__}: {exc}")
    ok = all(f"on rank {last}" in s for s in seen)
    if test_comm.rank == last:
        ok = ok and f"the array is on GPU {other}" in seen[0] and f"on GPU {mine}" in seen[0]
        ok = ok and f"the current device is GPU {other}" in seen[1]
    total = cp.asnumpy(nccl.all_reduce(cp.ones(4, cp.float32), Op.SUM))  # still usable
    ok = ok and bool((total == test_comm.size).all())
    assert all_ranks_ok(test_comm, ok), seen

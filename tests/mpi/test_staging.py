"""The device backends' host-side logic through real MPI, on the CPU, at any world size.

The staging pipeline (one copy each way, or chunks whose copies overlap the collectives; the
nonblocking form polled under a deadline) and the CUDA-aware backend's size crossover run here
with ``tests/support/host_runtime.py`` in place of CUDA: its copies run late, in stream order,
so a pipeline that reads a host buffer before its copy was waited for fails the numpy
reference. MPI is real. ``tests/gpu/`` runs the same backends on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mwms_mpi.collective import Op
from mwms_mpi.collective.backends.cuda_mpi import CudaMPIBackend
from mwms_mpi.collective.backends.nccl import exchange_unique_id
from mwms_mpi.collective.backends.staging import StagingBackend
from mwms_mpi.collective.deadline import Deadline, wait_all
from tests.support.host_runtime import HostRuntime
from tests.support.mpi import all_ranks_ok, world
from tests.support.reference import rank_array, reduce_reference

pytestmark = pytest.mark.mpi

CHUNK = 64  # bytes: a pipelined buffer of a few hundred bytes has several chunks
PIPELINE = 128


@pytest.fixture(scope="module")
def comm() -> Iterator[Any]:
    c = world()
    yield c
    c.Free()


def _mpi() -> Any:
    from mpi4py import MPI

    return MPI


def _backend() -> tuple[StagingBackend, HostRuntime]:
    runtime = HostRuntime()
    return StagingBackend(_mpi(), CHUNK, PIPELINE, runtime), runtime


@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize("blocking", [True, False])
@pytest.mark.parametrize("op", [Op.SUM, Op.MAX])
@pytest.mark.parametrize(
    ("count", "dtype", "pieces"),
    [  # one copy each way up to PIPELINE bytes, else one per CHUNK-byte chunk (worked by hand)
        (1, "float64", 1),  # 8 B
        (16, "int32", 1),  # 64 B
        (32, "int32", 1),  # 128 B = PIPELINE: still one piece
        (33, "int32", 3),  # 132 B: 16 + 16 + 1 elements
        (101, "float32", 7),  # 404 B: 6 chunks of 16 elements and one of 5
        (300, "int64", 38),  # 2400 B: 37 chunks of 8 elements and one of 4
    ],
)
def test_staged_all_reduce_equals_numpy(
    comm: Any,
    test_comm: Any,
    count: int,
    dtype: str,
    pieces: int,
    op: Op,
    blocking: bool,
    in_place: bool,
) -> None:
    backend, runtime = _backend()
    everyone = [rank_array((count,), dtype, r, count) for r in range(comm.size)]
    recv = np.zeros(count, dtype)
    send = None
    if in_place:
        recv[...] = everyone[comm.rank]
    else:
        send = everyone[comm.rank].copy()
    request = backend.all_reduce(comm, send, recv, op, blocking)
    if blocking:
        assert request is None
    else:
        assert request is not None and wait_all([request], Deadline(30.0))
    ok = np.array_equal(recv, reduce_reference(op, everyone)) and runtime.pending() == 0
    ok = ok and runtime.copies == {"to_host": pieces, "to_device": pieces}
    assert all_ranks_ok(test_comm, ok), f"rank {comm.rank}: {recv}"


def test_chunks_follow_the_agreed_sizes() -> None:
    backend, _ = _backend()
    assert backend.bounds(32, 4) == [(0, 32)]  # 128 bytes: not above PIPELINE
    assert backend.bounds(33, 4) == [(0, 16), (16, 32), (32, 33)]  # 16 floats a chunk
    assert backend.bounds(0, 8) == [(0, 0)]


def test_pinned_buffers_are_reused_across_calls(comm: Any) -> None:
    backend, runtime = _backend()
    x = np.ones(200, np.float32)
    for _ in range(5):
        backend.all_reduce(comm, None, x, Op.SUM, True)
        request = backend.all_reduce(comm, None, x, Op.SUM, False)
        assert request is not None and wait_all([request], Deadline(30.0))
    assert runtime.pinned_calls == 1  # one buffer, taken and given back ten times
    assert np.all(x == comm.size**10)


def test_calls_in_flight_together_get_their_own_buffers(comm: Any, test_comm: Any) -> None:
    backend, runtime = _backend()
    a = np.full(300, comm.rank + 1, np.int64)
    b = np.full(300, 2 * (comm.rank + 1), np.int64)
    ra = backend.all_reduce(comm, None, a, Op.SUM, False)
    rb = backend.all_reduce(comm, None, b, Op.SUM, False)
    assert ra is not None and rb is not None and wait_all([rb, ra], Deadline(30.0))
    total = comm.size * (comm.size + 1) // 2
    ok = bool(np.all(a == total) and np.all(b == 2 * total)) and runtime.pinned_calls == 2
    assert all_ranks_ok(test_comm, ok)


@pytest.mark.parametrize("blocking", [True, False])
def test_staged_all_gatherv_uneven(comm: Any, test_comm: Any, blocking: bool) -> None:
    backend, _ = _backend()
    counts = [(r * 3) % 4 for r in range(comm.size)]  # rank 0 sends nothing
    parts = [rank_array((c,), "float64", r) for r, c in enumerate(counts)]
    recv = np.zeros(sum(counts), np.float64)
    request = backend.all_gatherv(comm, parts[comm.rank], recv, counts, blocking)
    if request is not None:
        assert wait_all([request], Deadline(30.0))
    assert all_ranks_ok(test_comm, np.array_equal(recv, np.concatenate(parts)))


@pytest.mark.parametrize("blocking", [True, False])
def test_staged_broadcast(comm: Any, test_comm: Any, blocking: bool) -> None:
    backend, _ = _backend()
    root = comm.size - 1
    buf = rank_array((5, 3), "int32", comm.rank)
    request = backend.broadcast(comm, buf, root, blocking)
    if request is not None:
        assert wait_all([request], Deadline(30.0))
    assert all_ranks_ok(test_comm, np.array_equal(buf, rank_array((5, 3), "int32", root)))


def test_cuda_mpi_stages_below_the_crossover_only(comm: Any, test_comm: Any) -> None:
    # Host buffers stand in for device pointers (MPI takes both): which path each size takes
    # shows in the staging copies.
    staging, runtime = _backend()
    backend = CudaMPIBackend(_mpi(), staging, min_device_bytes=256)
    small = np.full(63, comm.rank, np.float32)  # 252 bytes: staged
    large = np.full(64, comm.rank, np.float32)  # 256 bytes: directly
    backend.all_reduce(comm, None, small, Op.SUM, True)
    staged_small = runtime.copies["to_host"]
    backend.all_reduce(comm, None, large, Op.SUM, True)
    direct_large = runtime.copies["to_host"] == staged_small
    request = backend.all_reduce(comm, None, large, Op.SUM, False)  # a deadline: staged
    assert request is not None and wait_all([request], Deadline(30.0))
    total = comm.size * (comm.size - 1) // 2
    # Both are above PIPELINE (128 B), so staged in CHUNK-byte (16-float) chunks: 16+16+16+15
    # and 4 x 16 elements.
    small_pieces, large_pieces = 4, 4
    ok = staged_small == small_pieces and direct_large
    ok = ok and runtime.copies["to_host"] == small_pieces + large_pieces
    ok = ok and bool(np.all(small == total) and np.all(large == total * comm.size))
    assert all_ranks_ok(test_comm, ok)


class _RecordsInPlace:
    """``comm`` that remembers whether each ``Allreduce`` was given ``MPI.IN_PLACE``."""

    def __init__(self, comm: Any) -> None:
        self._comm, self.in_place = comm, []

    def Allreduce(self, send: Any, *args: Any) -> Any:
        self.in_place.append(send is _mpi().IN_PLACE)
        return self._comm.Allreduce(send, *args)


def test_cuda_mpi_reduces_out_of_place(comm: Any, test_comm: Any) -> None:
    # In place on device pointers took 1.35x as long as out of place on the GPU machine (Intel
    # MPI, docs/gpus.md, "Measured on one H200"), and a packed batch is reduced in its pack
    # buffer: the backend reduces from a copy instead, and the buffer still holds the sum.
    staging, _ = _backend()
    backend = CudaMPIBackend(_mpi(), staging, min_device_bytes=256)
    recording = _RecordsInPlace(comm)
    buf = np.arange(64, dtype=np.float32) + comm.rank  # 256 bytes: directly
    assert backend.all_reduce(recording, None, buf, Op.SUM, True) is None
    expected = comm.size * np.arange(64, dtype=np.float32) + comm.size * (comm.size - 1) // 2
    ok = recording.in_place == [False] and np.array_equal(buf, expected)
    assert all_ranks_ok(test_comm, ok)


def test_cuda_mpi_stages_every_broadcast(comm: Any, test_comm: Any) -> None:
    # Intel MPI's Bcast of a device buffer of 1 MB and more killed the receiving rank on the
    # GPU machine (docs/gpus.md, "What a CUDA-aware MPI was probed for"): above the crossover
    # too, a broadcast goes through the host copies.
    staging, runtime = _backend()
    backend = CudaMPIBackend(_mpi(), staging, min_device_bytes=256)
    buf = np.full(64, comm.rank, np.float32)  # 256 bytes: an all-reduce would go directly
    root = comm.size - 1
    assert backend.broadcast(comm, buf, root, True) is None
    ok = runtime.copies["to_device"] > 0 and bool(np.all(buf == root))
    assert all_ranks_ok(test_comm, ok)


class _FailsAtCall:
    """``comm`` whose ``number``-th ``Allreduce`` raises (an MPI error in mid-pipeline)."""

    def __init__(self, comm: Any, number: int) -> None:
        self._comm, self._left = comm, number

    def Allreduce(self, *args: Any) -> Any:
        self._left -= 1
        if self._left == 0:
            raise RuntimeError("MPI failed here")
        return self._comm.Allreduce(*args)


def test_an_mpi_error_mid_pipeline_leaves_no_copy_queued(comm: Any, test_comm: Any) -> None:
    # The pinned buffer is dropped (never pooled again) when MPI raises; a copy into or out of
    # it still queued on a side stream would then write memory CUDA may hand to someone else.
    staging, runtime = _backend()
    x = np.arange(101, dtype=np.float32)  # 7 chunks: the error at the 3rd
    with pytest.raises(RuntimeError, match="MPI failed here"):
        staging.all_reduce(_FailsAtCall(comm, 3), None, x, Op.SUM, True)
    assert runtime.pending() == 0
    assert staging.pool.allocations == 1 and staging.pool.kept_bytes == 0
    test_comm.Barrier()  # the ranks' first two chunks were real collectives: all are past them


def test_unique_id_travels_from_rank_0(comm: Any, test_comm: Any) -> None:
    made = []

    def make_id() -> tuple[int, ...]:
        made.append(1)
        return tuple(range(128))  # NCCL's id: 128 chars

    got = exchange_unique_id(comm, make_id)
    ok = got == tuple(range(128)) and len(made) == (1 if comm.rank == 0 else 0)
    assert all_ranks_ok(test_comm, ok)


def test_unique_id_failure_on_rank_0_raises_everywhere(comm: Any) -> None:
    def broken() -> Any:
        raise OSError("libnccl.so.2: cannot open shared object file")

    with pytest.raises(RuntimeError, match=r"rank 0 could not make.*libnccl"):
        exchange_unique_id(comm, broken)

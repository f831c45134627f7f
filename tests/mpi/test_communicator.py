"""Communicator collectives at any world size, checked on every rank against numpy references."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mwms_mpi import errors
from mwms_mpi.collective import Communicator, Op
from mwms_mpi.types import CommunicationOptions
from tests.support.mpi import world
from tests.support.reference import rank_array, reduce_reference

pytestmark = pytest.mark.mpi

DTYPES = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "complex64",
    "complex128",
]
SHAPES = [(), (0,), (1,), (7,), (3, 4), (2, 0, 3), (2, 3, 4)]


@pytest.fixture(scope="module")
def comm() -> Iterator[Communicator]:
    # One communicator per module: MPICH runs out of context ids after ~2000 Dups.
    c = Communicator(name="test-communicator")
    yield c
    c.close()


def _everyone(c: Communicator, shape: tuple[int, ...], dtype: str, seed: int = 0) -> list:
    return [rank_array(shape, dtype, r, seed) for r in range(c.size)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_all_reduce_sum_matches_numpy(comm: Communicator, shape: tuple, dtype: str) -> None:
    inputs = _everyone(comm, shape, dtype)
    mine = inputs[comm.rank]
    before = mine.copy()
    out = comm.all_reduce(mine)
    assert out.dtype == np.dtype(dtype) and out.shape == shape
    np.testing.assert_array_equal(out, reduce_reference(Op.SUM, inputs))
    np.testing.assert_array_equal(mine, before)  # the input is never reduced in place
    assert not np.shares_memory(out, mine)


@pytest.mark.parametrize("op", [Op.MAX, Op.MIN])
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool"])
def test_all_reduce_max_min(comm: Communicator, op: Op, dtype: str) -> None:
    inputs = _everyone(comm, (5, 2), dtype, seed=3)
    out = comm.all_reduce(inputs[comm.rank], op)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, reduce_reference(op, inputs))


def test_all_reduce_of_non_contiguous_and_byte_swapped_inputs(comm: Communicator) -> None:
    inputs = [np.arange(24, dtype=np.float64).reshape(4, 6) * (r + 1) for r in range(comm.size)]
    out = comm.all_reduce(inputs[comm.rank][:, ::2])
    np.testing.assert_array_equal(out, sum(x[:, ::2] for x in inputs))
    swapped = np.arange(5, dtype=">i4") * (comm.rank + 1)
    out = comm.all_reduce(swapped)
    assert out.dtype == np.dtype("int32")
    np.testing.assert_array_equal(out, np.arange(5) * sum(range(1, comm.size + 1)))


def test_all_reduce_of_a_numpy_scalar_gives_a_0d_array(comm: Communicator) -> None:
    out = comm.all_reduce(np.float32(1.5))
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.float32
    assert out == 1.5 * comm.size


def test_results_are_fresh_and_recycled_only_when_dropped(comm: Communicator) -> None:
    x = np.ones(1024, dtype=np.float32)
    first = comm.all_reduce(x)
    second = comm.all_reduce(x)
    assert not np.shares_memory(first, second)
    view = first[:10]
    del first
    third = comm.all_reduce(x * 2)
    assert not np.shares_memory(third, view)  # a live view keeps its buffer out of reuse
    np.testing.assert_array_equal(view, comm.size)


def test_bool_sum_and_complex_max_are_refused_on_every_rank(comm: Communicator) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="MAX or MIN only"):
        comm.all_reduce(np.ones(3, dtype=bool))
    with pytest.raises(errors.InvalidArgumentError, match="cannot be reduced with MAX"):
        comm.all_reduce(np.ones(3, dtype=np.complex64), Op.MAX)
    np.testing.assert_array_equal(comm.all_reduce(np.ones(2)), [comm.size] * 2)  # still usable


@pytest.mark.parametrize("bytes_per_pack", [0, 1, 64, 1 << 20])
def test_batch_all_reduce_matches_numpy(comm: Communicator, bytes_per_pack: int) -> None:
    layout = [
        ((3, 4), "float32"),
        ((), "float64"),
        ((0,), "float32"),
        ((5,), "int32"),
        ((2, 2), "float32"),
        ((7,), "complex64"),
        ((1,), "float16"),
    ]
    everyone = [
        [rank_array(s, d, r, seed=i) for i, (s, d) in enumerate(layout)] for r in range(comm.size)
    ]
    opts = CommunicationOptions(bytes_per_pack=bytes_per_pack)
    out = comm.batch_all_reduce(everyone[comm.rank], Op.SUM, opts)
    assert len(out) == len(layout)
    for i, (shape, dtype) in enumerate(layout):
        assert out[i].shape == shape and out[i].dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out[i], reduce_reference(Op.SUM, [e[i] for e in everyone]))


def test_batch_all_reduce_max_with_bools_and_empty_batch(comm: Communicator) -> None:
    arrays = [rank_array((4,), "bool", comm.rank), rank_array((3,), "uint8", comm.rank)]
    out = comm.batch_all_reduce(arrays, Op.MAX)
    assert out[0].dtype == np.bool_
    for i, dtype in enumerate(["bool", "uint8"]):
        expected = reduce_reference(
            Op.MAX, [rank_array((4,) if i == 0 else (3,), dtype, r) for r in range(comm.size)]
        )
        np.testing.assert_array_equal(out[i], expected)
    assert comm.batch_all_reduce([]) == []


def test_every_call_is_agreed_once(comm: Communicator) -> None:
    x = np.ones((17, 3), dtype=np.float32)
    comm.all_reduce(x)
    before = comm.stats
    for _ in range(5):
        comm.all_reduce(x)
        comm.batch_all_reduce([x, x])
    comm.all_gather(x)
    comm.broadcast(x)
    comm.barrier()
    comm.min_max(3)
    # one agreement per call, seen layouts included, and nothing else on the agreement path
    assert comm.stats.calls == before.calls + 14
    assert comm.stats.agreements == before.agreements + 14


def test_byte_order_is_not_part_of_the_layout(comm: Communicator) -> None:
    # A byte-swapped array is its native twin on the wire (it is converted first), so a rank
    # passing ">f8" where the others pass "<f8" makes the same call and gets the same result.
    native = np.arange(19 * 2, dtype=np.float64).reshape(19, 2)
    swapped = native.astype(native.dtype.newbyteorder())
    comm.all_reduce(native)
    comm.batch_all_reduce([native, native[0]])
    comm.broadcast(native)
    mine = swapped if comm.rank == 0 else native
    np.testing.assert_array_equal(comm.all_reduce(swapped), native * comm.size)
    np.testing.assert_array_equal(comm.all_reduce(mine), native * comm.size)
    out = comm.batch_all_reduce([mine, mine[0]])
    np.testing.assert_array_equal(out[1], native[0] * comm.size)
    np.testing.assert_array_equal(comm.broadcast(mine), native)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_all_gather_uneven_sizes_in_rank_order(comm: Communicator, axis: int) -> None:
    def contribution(r: int) -> np.ndarray:
        shape = [2, 3]
        shape[axis] = r % 3  # uneven, including zero rows
        return rank_array(shape, "int32", r)

    out = comm.all_gather(contribution(comm.rank), axis=axis)
    expected = np.concatenate([contribution(r) for r in range(comm.size)], axis=axis)
    np.testing.assert_array_equal(out, expected)
    assert out.flags.c_contiguous


def test_all_gather_bool_and_errors(comm: Communicator) -> None:
    out = comm.all_gather(np.array([comm.rank % 2 == 0]))
    np.testing.assert_array_equal(out, [r % 2 == 0 for r in range(comm.size)])
    with pytest.raises(ValueError, match="0-d"):
        comm.all_gather(np.float32(1.0))
    with pytest.raises(ValueError, match="out of range"):
        comm.all_gather(np.ones(3), axis=1)


def test_all_gather_sparse_concatenates_slices(comm: Communicator) -> None:
    def slices(r: int) -> tuple[np.ndarray, np.ndarray]:
        n = (r + 1) % 3
        return rank_array((n, 2), "float32", r), np.arange(n, dtype=np.int64) + 10 * r

    values, indices = comm.all_gather_sparse(*slices(comm.rank))
    np.testing.assert_array_equal(values, np.concatenate([slices(r)[0] for r in range(comm.size)]))
    np.testing.assert_array_equal(indices, np.concatenate([slices(r)[1] for r in range(comm.size)]))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", ">f8"])
def test_broadcast_from_every_root(comm: Communicator, dtype: str) -> None:
    for root in range(comm.size):
        mine = rank_array((2, 3), dtype, comm.rank)
        out = comm.broadcast(mine, root=root)
        np.testing.assert_array_equal(out, rank_array((2, 3), dtype, root))
        assert not np.shares_memory(out, mine)


def test_timeouts_that_do_not_expire_change_nothing(comm: Communicator) -> None:
    # Every call first, then every check: a rank whose result is wrong must not leave the
    # others waiting for it in the next collective (30 s here).
    opts = CommunicationOptions(timeout_seconds=30)
    everyone = _everyone(comm, (3, 3), "float64")
    x = everyone[comm.rank]
    uneven = x[: 1 + comm.rank % 2]  # unequal row counts (Allgatherv) beside equal (Allgather)
    reduced = comm.all_reduce(x, options=opts)
    batch = comm.batch_all_reduce([x, x[0]], options=opts)
    comm.barrier(options=opts)
    broadcasts = [comm.broadcast(x, root=root, options=opts) for root in range(comm.size)]
    gathered = comm.all_gather(x, options=opts)
    gathered_uneven = comm.all_gather(uneven, options=opts)

    total = reduce_reference(Op.SUM, everyone)
    np.testing.assert_array_equal(reduced, total)
    assert [o.shape for o in batch] == [(3, 3), (3,)]
    np.testing.assert_array_equal(batch[0], total)
    np.testing.assert_array_equal(batch[1], reduce_reference(Op.SUM, [e[0] for e in everyone]))
    for root, out in enumerate(broadcasts):
        np.testing.assert_array_equal(out, everyone[root])
    np.testing.assert_array_equal(gathered, np.concatenate(everyone))
    want = np.concatenate([a[: 1 + r % 2] for r, a in enumerate(everyone)])
    np.testing.assert_array_equal(gathered_uneven, want)


@pytest.mark.mpi(min_size=2)
def test_shape_mismatch_raises_on_every_rank_naming_both_shapes(comm: Communicator) -> None:
    cols = 42 if comm.rank == 1 else 41
    with pytest.raises(errors.InvalidArgumentError) as info:
        comm.all_reduce(np.ones((3, cols), dtype=np.float32))
    text = str(info.value)
    assert f"on rank {comm.rank}" in text
    assert "(3, 41) float32" in text and "(3, 42) float32" in text
    assert info.value.op == "all_reduce" and info.value.rank == comm.rank
    comm.barrier()  # the communicator is still consistent and usable


@pytest.mark.mpi(min_size=2)
def test_mismatched_kinds_ops_and_dtypes_are_named(comm: Communicator) -> None:
    x = np.zeros(43, dtype=np.float32)
    with pytest.raises(errors.InvalidArgumentError, match=r"op (MAX != SUM|SUM != MAX)"):
        comm.all_reduce(x, Op.MAX if comm.rank == 0 else Op.SUM)
    with pytest.raises(errors.InvalidArgumentError, match="dtype"):
        comm.all_reduce(x.astype(np.float64) if comm.rank == 0 else x)
    with pytest.raises(errors.InvalidArgumentError, match="collective"):
        if comm.rank == 0:
            comm.broadcast(np.zeros(44))
        else:
            comm.all_reduce(np.zeros(47))
    with pytest.raises(errors.InvalidArgumentError, match=r"shape \(\*, [23]\) float32"):
        comm.all_gather(np.zeros((1, 2 + (comm.rank == 1)), dtype=np.float32))
    with pytest.raises(errors.InvalidArgumentError, match=r"array 1: shape \((45|46),\)"):
        comm.batch_all_reduce([x, np.zeros(45 + (comm.rank == 1))])


def test_closed_and_foreign_thread_use_is_refused() -> None:
    import threading

    c = Communicator(name="short-lived")
    box: list[BaseException] = []

    def use() -> None:
        try:
            c.all_reduce(np.ones(1))
        except RuntimeError as exc:
            box.append(exc)

    t = threading.Thread(target=use)
    t.start()
    t.join()
    assert box and "thread" in str(box[0])
    c.close()
    c.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        c.all_reduce(np.ones(1))


def test_world_facts_agree_with_mpi() -> None:
    w = world()
    try:
        c = Communicator()
        assert (c.rank, c.size) == (w.Get_rank(), w.Get_size())
        c.close()
    finally:
        w.Free()


def _peak_bytes(fn: Any) -> int:
    """Peak bytes allocated while ``fn`` runs (numpy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("k", [2, 3])
def test_local_addends_are_reduced_in_one_buffer(comm: Communicator, k: int) -> None:
    n = (1 << 21) + k  # 8 MB of float32, a layout no other call uses: no pooled buffer yet
    addends = [np.full(n, r + 1, dtype=np.float32) for r in range(k)]
    box: list[np.ndarray] = []
    peak = _peak_bytes(lambda: box.append(comm.all_reduce_addends(addends)))
    np.testing.assert_array_equal(box[0], np.full(n, comm.size * k * (k + 1) / 2))
    assert peak < 1.25 * 4 * n, f"peak {peak} bytes for one {4 * n}-byte result"


def test_addends_of_different_layouts_are_refused(comm: Communicator) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="local replicas passed different"):
        comm.all_reduce_addends([np.ones(3), np.ones(4)])
    np.testing.assert_array_equal(comm.all_reduce_addends([np.ones(2)] * 2), [2 * comm.size] * 2)

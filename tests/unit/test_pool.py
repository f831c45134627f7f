"""The result-buffer pool hands memory out again only when its lease, its owner, is finalised."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from mwms_mpi.collective import pool as pool_module
from mwms_mpi.collective.pool import POOL_MIN_BYTES, BufferPool, size_class

F4 = np.dtype("float32")
BIG = (POOL_MIN_BYTES // 4,)  # a float32 result just large enough to be pooled


def address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def test_memory_comes_back_only_when_nothing_reaches_it() -> None:
    pool = BufferPool()
    a = pool.host(BIG, F4)
    held = address(a)
    del a
    assert address(pool.host(BIG, F4)) == held  # dropped: recycled


@pytest.mark.parametrize(
    "view",
    [
        lambda a: a.reshape(2, -1),
        lambda a: a[1:],
        lambda a: a[::-1],
        lambda a: np.asarray(a),
        lambda a: a.view(np.int32),
        lambda a: memoryview(a),
        lambda a: a.reshape(2, -1)[:, ::2].T,
        lambda a: np.frombuffer(a, dtype=np.uint8),
    ],
    ids=["reshape", "slice", "reversed", "asarray", "view", "memoryview", "nested", "frombuffer"],
)
def test_any_view_keeps_the_memory_out_of_reuse(view) -> None:  # type: ignore[no-untyped-def]
    # The defect this replaced: a reference count on the returned array missed views, whose
    # base is the object owning the memory, and the next call overwrote them.
    pool = BufferPool()
    a = pool.host(BIG, F4)
    a[...] = 7
    held, kept = address(a), view(a)
    del a
    gc.collect()
    for _ in range(3):
        b = pool.host(BIG, F4)
        assert address(b) != held
        b[...] = -1
    assert np.array_equal(np.asarray(kept), np.asarray(view(np.full(BIG, 7, F4))))
    del kept
    gc.collect()
    assert address(pool.host(BIG, F4)) == held


def test_results_of_a_class_share_buffers_across_shapes() -> None:
    # Variable-length batches: a new shape each call reuses the few buffers of its size class.
    pool = BufferPool()
    seen = set()
    for rows in range(1000, 1100):
        a = pool.host((rows, 40), F4)  # 160,000 to 176,000 bytes: one or two classes
        assert a.shape == (rows, 40) and a.dtype == F4 and a.flags.c_contiguous
        seen.add(address(a))
        del a
    assert len(seen) <= 2


def test_size_classes_waste_at_most_a_quarter() -> None:
    for n in [POOL_MIN_BYTES, POOL_MIN_BYTES + 1, 3_000_000, (1 << 26) + 5, 12345678]:
        c = size_class(n)
        assert n <= c <= n * 1.25
    assert size_class(1 << 20) == 1 << 20


def test_small_device_and_odd_dtypes_are_fresh() -> None:
    pool = BufferPool()
    assert not pool.source((16,), F4, np.empty, "host").pooled
    assert not pool.source(BIG, F4, np.empty, "nccl").pooled
    assert not pool.source((1 << 20,), np.dtype("U4"), np.empty, "host").pooled
    assert pool.source(BIG, F4, np.empty, "host").pooled


def test_free_buffers_are_bounded_per_class_and_in_bytes(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(pool_module, "PER_CLASS", 2)
    pool = BufferPool(max_free_bytes=3 * POOL_MIN_BYTES)
    kept = [pool.host(BIG, F4) for _ in range(5)]
    assert len({address(k) for k in kept}) == 5  # all in use: all distinct
    del kept
    gc.collect()
    assert pool.free_bytes() == 2 * POOL_MIN_BYTES  # two kept of five
    other = pool.host((POOL_MIN_BYTES,), F4)  # another class, four times as large
    del other
    # Keeping it would pass the byte limit even with the other class's free buffers gone: it
    # goes itself; the older class's buffers were let go first.
    assert pool.free_bytes() <= 3 * POOL_MIN_BYTES
    middle = pool.host((POOL_MIN_BYTES // 2,), F4)  # a class twice as large as BIG's
    pool.host(BIG, F4)  # taken and dropped at once: BIG's class keeps one free buffer
    del middle  # fits beside it, exactly at the limit
    assert pool.free_bytes() == 3 * POOL_MIN_BYTES
    pool.clear()
    assert pool.free_bytes() == 0


def test_many_classes_never_keep_more_than_the_limit() -> None:
    # The review's program: six classes, four buffers each, given back while idle.
    pool = BufferPool(max_free_bytes=8 << 20)
    held = [
        pool.host((s,), np.uint8)
        for s in (3 << 20, 5 << 20, 7 << 20, 9 << 20, 11 << 20, 13 << 20)
        for _ in range(4)
    ]
    del held
    gc.collect()
    assert pool.free_bytes() <= 8 << 20
    small = BufferPool(max_free_bytes=4 << 20)
    a = small.host((16 << 20,), np.uint8)
    del a
    assert small.free_bytes() == 0


def test_a_closed_pool_keeps_nothing() -> None:
    pool = BufferPool()
    a = pool.host(BIG, F4)
    b = pool.host(BIG, F4)
    del a
    assert pool.free_bytes() == POOL_MIN_BYTES
    pool.clear(close=True)
    assert pool.free_bytes() == 0
    del b  # its lease ends after the close: the buffer goes
    assert pool.free_bytes() == 0


def test_a_lease_finalised_in_another_thread_gives_back() -> None:
    pool = BufferPool()
    a = pool.host(BIG, F4)
    held = address(a)
    box = [a]
    del a
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert address(pool.host(BIG, F4)) == held


def test_a_leased_result_is_an_ordinary_array() -> None:
    pool = BufferPool()
    a = pool.host((3, POOL_MIN_BYTES // 12), F4)
    assert type(a) is np.ndarray and a.flags.writeable and a.flags.c_contiguous
    a[...] = 2.5
    assert float(a.sum()) == 2.5 * a.size
    assert np.array_equal(np.copy(a), a)
    b = pool.host((3, POOL_MIN_BYTES // 12), F4)
    assert not np.shares_memory(a, b)

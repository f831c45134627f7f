"""The result-buffer pool hands a buffer out again only when nothing else references it."""

from __future__ import annotations

import numpy as np

from mwms_mpi.collective.pool import BufferPool

F4 = np.dtype("float32")


def test_reuses_only_unreferenced_buffers() -> None:
    pool = BufferPool()
    a = pool.take((3,), F4, np.empty)
    b = pool.take((3,), F4, np.empty)
    assert a is not b
    a_id = id(a)
    del a
    c = pool.take((3,), F4, np.empty)
    assert id(c) == a_id


def test_views_and_memoryviews_keep_a_buffer_out_of_reuse() -> None:
    pool = BufferPool()
    a = pool.take((4,), F4, np.empty)
    view, held = a[1:], id(a)
    del a
    assert id(pool.take((4,), F4, np.empty)) != held
    del view
    b = pool.take((4,), F4, np.empty)
    mv, held = memoryview(b), id(b)
    del b
    assert id(pool.take((4,), F4, np.empty)) != held
    del mv


def test_limits_per_key_and_bytes() -> None:
    pool = BufferPool(per_key=2, max_bytes=1024)
    kept = [pool.take((8,), F4, np.empty) for _ in range(5)]
    assert len({id(k) for k in kept}) == 5  # all in use: all distinct
    pool.take((1024,), F4, np.empty)  # 4 KB > max_bytes: not pooled
    assert pool.slot((1024,), F4)._buffers == []
    pool.clear()
    assert pool.take((8,), F4, np.empty) is not kept[0]

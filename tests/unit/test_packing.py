"""Packing: TF's group_by_size rule, reversed-order plans, and pack/unpack round trips."""

from __future__ import annotations

import numpy as np
import pytest

from mwms_mpi.collective.packing import group_by_size, pack, plan_batch, unpack


# Expected values printed by TF 2.21's own rule, run as:
#   /tmp/tfvenv/bin/python -c "from tensorflow.python.distribute import cross_device_utils as c;
#     print(c.group_by_size([tf.zeros([n]) ...], bytes_per_pack))"  (sizes in bytes below)
@pytest.mark.parametrize(
    ("sizes", "bytes_per_pack", "expected"),
    [
        ([4, 4, 4, 4], 0, [[0, 1, 2, 3]]),
        ([4, 4, 4, 4], 4, [[0, 1], [2, 3]]),
        ([4, 4, 4, 4], 7, [[0, 1], [2, 3]]),
        ([4, 4, 4, 4], 8, [[0, 1, 2], [3]]),
        ([100, 1, 1, 100, 1], 50, [[0], [1, 2, 3], [4]]),
        ([1, 1, 1, 1, 1], 1, [[0, 1], [2, 3], [4]]),
        ([40, 4, 8], 3, [[0], [1], [2]]),
    ],
)
def test_group_by_size_matches_tf(sizes: list, bytes_per_pack: int, expected: list) -> None:
    assert group_by_size(sizes, bytes_per_pack) == expected


def test_group_by_size_of_nothing() -> None:
    assert group_by_size([], 0) == []
    assert group_by_size([], 10) == []


def test_plan_packs_in_reversed_order_and_splits_dtypes() -> None:
    f32, i64 = np.dtype("float32"), np.dtype("int64")
    shapes = [(2,), (3,), (0,), (4,)]
    dtypes = [f32, i64, f32, f32]
    chunks = plan_batch(dtypes, shapes, bytes_per_pack=0)
    # one pack, reversed: positions 3, 2 (empty: left out), 1, 0; float32 first (met first)
    assert [c.dtype for c in chunks] == [f32, i64]
    assert [s.position for s in chunks[0].segments] == [3, 0]
    assert [s.offset for s in chunks[0].segments] == [0, 4]
    assert chunks[0].total == 6
    assert [s.position for s in chunks[1].segments] == [1]


def test_plan_respects_bytes_per_pack() -> None:
    f32 = np.dtype("float32")
    chunks = plan_batch([f32] * 4, [(1,)] * 4, bytes_per_pack=4)
    # reversed order 3, 2, 1, 0 grouped as TF does: [[3, 2], [1, 0]]
    assert [[s.position for s in c.segments] for c in chunks] == [[3, 2], [1, 0]]


def test_pack_unpack_round_trip_casts_and_views() -> None:
    arrays = [np.arange(6, dtype=">f4").reshape(2, 3), np.arange(10.0, dtype=np.float32)[::3]]
    dtypes = [np.dtype("float32"), np.dtype("float32")]
    (chunk,) = plan_batch(dtypes, [a.shape for a in arrays], 0)
    buffer = np.empty(chunk.total, dtype=np.float32)
    pack(chunk, arrays, buffer)
    out: list = [None, None]
    unpack(buffer, chunk, out)
    for got, want in zip(out, arrays, strict=True):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.float32 and np.shares_memory(got, buffer)

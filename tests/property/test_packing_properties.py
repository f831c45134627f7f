"""Property tests of batch packing: every array is packed once, and unpacking restores it."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mwms_mpi.collective.packing import group_by_size, pack, plan_batch, unpack

DTYPES = [np.dtype(d) for d in ("float16", "float32", "float64", "int8", "int32", "uint8")]
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)
batches = st.lists(st.tuples(shapes, st.sampled_from(DTYPES)), min_size=0, max_size=12)


@given(st.lists(st.integers(0, 64), max_size=20), st.integers(0, 100))
def test_group_by_size_keeps_order_and_fills_packs(sizes: list, bytes_per_pack: int) -> None:
    packs = group_by_size(sizes, bytes_per_pack)
    assert [i for p in packs for i in p] == list(range(len(sizes)))
    assert all(packs)
    if bytes_per_pack == 0:
        assert len(packs) <= 1
    for p in packs[:-1]:  # every pack but the last holds more than bytes_per_pack
        assert sum(sizes[i] for i in p) > bytes_per_pack


@given(batches, st.sampled_from([0, 1, 7, 64, 1 << 20]))
def test_plan_round_trip(batch: list, bytes_per_pack: int) -> None:
    arrays = [np.arange(int(np.prod(s)), dtype=d).reshape(s) for s, d in batch]
    chunks = plan_batch([a.dtype for a in arrays], [a.shape for a in arrays], bytes_per_pack)
    seen = [s.position for c in chunks for s in c.segments]
    nonempty = [i for i, a in enumerate(arrays) if a.size]
    assert sorted(seen) == nonempty and len(seen) == len(set(seen))
    out: list = [None] * len(arrays)
    for chunk in chunks:
        assert all(arrays[s.position].dtype == chunk.dtype for s in chunk.segments)
        buffer = np.empty(chunk.total, dtype=chunk.dtype)
        pack(chunk, arrays, buffer)
        unpack(buffer, chunk, out)
    for i in nonempty:
        np.testing.assert_array_equal(out[i], arrays[i])
        assert out[i].shape == arrays[i].shape

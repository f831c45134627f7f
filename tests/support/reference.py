"""Serial numpy references for multi-rank tests, built from what every rank contributed.

Each rank's data is a pure function of (shape, dtype, rank, seed), so every rank can rebuild
every other rank's contribution and compute the expected result without communicating. Values
are small integers, so float sums are exact in any order and can be compared bitwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mwms_mpi.collective import Op


def rank_array(shape: Sequence[int], dtype: np.dtype | str, rank: int, seed: int = 0) -> np.ndarray:
    """Deterministic small-integer data for ``rank`` (bool: a rank-dependent pattern)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    base = (np.arange(count, dtype=np.int64) * 7 + rank * 13 + seed * 31) % 11 - 5
    if dtype.kind == "b":
        return ((base + rank) % 3 == 0).reshape(shape)
    if dtype.kind == "u":
        base = np.abs(base)
    if dtype.kind == "c":
        return (base + 1j * base[::-1]).astype(dtype).reshape(shape)
    return base.astype(dtype).reshape(shape)


def reduce_reference(op: Op, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """``op`` over the ranks' arrays, in numpy, with numpy's result dtype kept to the input's."""
    stacked = np.stack(list(arrays))
    if op is Op.SUM:
        return stacked.sum(axis=0, dtype=stacked.dtype)
    if op is Op.MAX:
        return stacked.max(axis=0)
    return stacked.min(axis=0)

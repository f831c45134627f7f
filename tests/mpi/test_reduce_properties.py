"""Hypothesis property tests of the strategy's reduce paths, at any world size, k = 1 and 2.

Each global replica g contributes ``rank_array(shape, dtype, g, seed)``; every rank rebuilds
every replica's contribution and checks ``strategy.reduce``, ``extended.batch_reduce_to`` and
``ReplicaContext.all_reduce`` against numpy. Examples are derandomized (conftest's profile), so
every rank draws the same ones, and pass/fail is agreed across ranks before asserting.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mwms_mpi.distribute as ds
from mwms_mpi.types import CommunicationOptions, ReduceOp
from tests.support.mpi import all_ranks_ok
from tests.support.reference import rank_array

pytestmark = pytest.mark.mpi

FLOATS = ["float16", "float32", "float64"]
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)
values = st.lists(
    st.tuples(shapes, st.sampled_from([*FLOATS, "int32", "int64"])), min_size=1, max_size=6
)


def _per_replica(strategy: Any, shape: tuple, dtype: str, seed: int) -> Any:
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: rank_array(shape, dtype, int(ctx.replica_id_in_sync_group), seed)
    )


def _expected(strategy: Any, op: ReduceOp, shape: tuple, dtype: str, seed: int) -> np.ndarray:
    n = strategy.num_replicas_in_sync
    total = np.stack([rank_array(shape, dtype, g, seed) for g in range(n)]).sum(
        axis=0, dtype=np.dtype(dtype)
    )
    if op is ReduceOp.SUM:
        return np.asarray(total)
    return np.asarray(np.true_divide(total, np.asarray(n).astype(total.dtype)))


def _same(got: Any, want: np.ndarray) -> bool:
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    tol = 1e-3 if want.dtype == np.float16 else 1e-6
    return bool(np.allclose(got, want, rtol=tol, atol=0))


@settings(max_examples=25)
@given(
    shapes,
    st.sampled_from(FLOATS),
    st.sampled_from([ReduceOp.SUM, ReduceOp.MEAN]),
    st.integers(0, 5),
)
def test_strategy_reduce(
    strategy: Any, test_comm: Any, shape: tuple, dtype: str, op: ReduceOp, seed: int
) -> None:
    got = strategy.reduce(op, _per_replica(strategy, shape, dtype, seed), axis=None)
    want = _expected(strategy, op, shape, dtype, seed)
    assert all_ranks_ok(test_comm, _same(got, want)), f"{got!r} != {want!r}"


@settings(max_examples=25)
@given(values, st.sampled_from([0, 1, 64, 1 << 20]), st.integers(0, 5))
def test_batch_reduce_to_sum(
    strategy: Any, test_comm: Any, batch: list, bytes_per_pack: int, seed: int
) -> None:
    pairs = []
    for i, (shape, dtype) in enumerate(batch):
        value = _per_replica(strategy, shape, dtype, seed + i)
        pairs.append((value, value))
    options = CommunicationOptions(bytes_per_pack=bytes_per_pack)
    got = strategy.extended.batch_reduce_to(ReduceOp.SUM, pairs, options=options)
    ok = len(got) == len(batch)
    for i, (shape, dtype) in enumerate(batch):
        want = _expected(strategy, ReduceOp.SUM, shape, dtype, seed + i)
        for local in strategy.experimental_local_results(got[i]):
            ok = ok and _same(local, want)
    assert all_ranks_ok(test_comm, ok)


@settings(max_examples=20)
@given(values, st.integers(0, 5))
def test_replica_all_reduce_of_a_nest(
    strategy: Any, test_comm: Any, batch: list, seed: int
) -> None:
    def step() -> dict[str, Any]:
        g = int(ds.get_replica_context().replica_id_in_sync_group)
        nest = {f"v{i}": rank_array(s, d, g, seed + i) for i, (s, d) in enumerate(batch)}
        return ds.get_replica_context().all_reduce(ReduceOp.SUM, nest)

    result = strategy.run(step)
    ok = True
    for i, (shape, dtype) in enumerate(batch):
        want = _expected(strategy, ReduceOp.SUM, shape, dtype, seed + i)
        for local in strategy.experimental_local_results(result[f"v{i}"]):
            ok = ok and _same(local, want)
    assert all_ranks_ok(test_comm, ok)

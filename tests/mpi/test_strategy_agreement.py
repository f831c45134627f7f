"""The public API's calls are agreed too: what the user called, not only the data, must match.

``strategy.reduce("SUM")`` and ``("MEAN")`` move the same bytes; so do ``axis=None`` and
``axis=1`` of suitably shaped values; a Mirrored value reduced with MEAN moves nothing; an
empty batch moves nothing. Each divergence between workers raises on every worker, k = 1 and
k = 2 local replicas, and the strategy keeps working afterwards. Bad arguments get TF's error
on every worker.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.values import IndexedSlices, Mirrored
from tests.support.mpi import odd_rank, rank_size, still_works

pytestmark = pytest.mark.mpi


def _locals(strategy: Any, value: Any) -> list[np.ndarray]:
    """Every local replica's value of a result (a plain array: itself)."""
    return [np.asarray(v) for v in strategy.experimental_local_results(value)]


def _raises_everywhere(strategy: Any, call: Any, text: str, want: np.ndarray) -> None:
    """``call`` raises on every worker when they disagree; alone (world size 1), where nothing
    can disagree, it returns ``want`` on every local replica (a serial numpy reference)."""
    _, size = rank_size()
    if size == 1:
        got = call()
        got = got[0] if isinstance(got, list) else got
        for local in _locals(strategy, got):
            np.testing.assert_array_equal(local, want)
            assert local.dtype == want.dtype
        return
    with pytest.raises(errors.InvalidArgumentError) as info:
        call()
    assert text in str(info.value), str(info.value)
    still_works(strategy)


def test_sum_on_one_worker_and_mean_on_another(strategy: Any) -> None:
    n = strategy.num_replicas_in_sync
    value = strategy.run(lambda: np.ones(4, np.float32))
    np.testing.assert_array_equal(strategy.reduce("mean", value, axis=None), np.ones(4))
    op = "mean" if odd_rank() else "sum"
    _raises_everywhere(
        strategy,
        lambda: strategy.reduce(op, value, axis=None),
        "Strategy.reduce on rank",
        np.full(4, n, np.float32),
    )


def test_another_axis_on_one_worker(strategy: Any) -> None:
    # (4,) with axis=None and (4, 1) with axis=1 both reduce a (4,) array across workers.
    shape, axis = ((4,), None) if odd_rank() else ((4, 1), 1)
    value = strategy.run(lambda: np.ones(shape, np.float32))
    want = np.full(4, strategy.num_replicas_in_sync, np.float32)  # alone: (4, 1) over axis 1
    _raises_everywhere(strategy, lambda: strategy.reduce("sum", value, axis=axis), "axis", want)


def test_different_shapes_after_hundreds_of_reduces(strategy: Any) -> None:
    value = strategy.run(lambda: np.ones(6, np.float32))
    n = strategy.num_replicas_in_sync
    for _ in range(200):
        out = strategy.reduce("sum", value, axis=None)
    np.testing.assert_array_equal(out, np.full(6, n, np.float32))
    odd_value = strategy.run(lambda: np.ones(5 if odd_rank() else 6, np.float32))
    _raises_everywhere(
        strategy,
        lambda: strategy.reduce("sum", odd_value, axis=None),
        "shape",
        np.full(6, n, np.float32),
    )


def test_a_mirrored_mean_on_one_worker_and_a_per_replica_value_on_another(strategy: Any) -> None:
    k = len(strategy.extended.worker_devices)
    per_replica = strategy.run(lambda: np.ones(2, np.float32))
    mirrored = Mirrored(tuple(np.ones(2, np.float32) for _ in range(k)))
    value = mirrored if odd_rank() else per_replica
    with strategy.scope():
        out = strategy.extended.reduce_to("mean", mirrored, mirrored)  # everywhere: no data moves
    assert out is mirrored
    _raises_everywhere(
        strategy,
        lambda: strategy.extended.reduce_to("mean", value, value),
        "MEAN of a Mirrored value",
        np.ones(2, np.float32),
    )


def test_an_empty_batch_on_one_worker(strategy: Any) -> None:
    value = strategy.run(lambda: np.ones(2, np.float32))
    pairs = [] if odd_rank() else [(value, value)]
    assert strategy.extended.batch_reduce_to("sum", []) == []  # everywhere: agreed, empty
    # the batch's structure ([] against [.]) is compared before its layout
    _raises_everywhere(
        strategy,
        lambda: strategy.extended.batch_reduce_to("sum", pairs),
        "structure",
        np.full(2, strategy.num_replicas_in_sync, np.float32),
    )


def test_dense_and_sparse_values_in_another_order(strategy: Any) -> None:
    def step() -> Any:
        dense = np.ones(2, np.float32)
        sparse = IndexedSlices(np.ones((1, 2), np.float32), np.array([0]), np.array([3, 2]))
        # same shapes either way: only the order of dense and sparse values differs
        values = (
            (sparse, np.ones((1, 2), np.float32)) if odd_rank() else (dense.reshape(1, 2), sparse)
        )
        ctx = ds.get_replica_context()
        assert ctx is not None
        return ctx.all_reduce("sum", values)

    if rank_size()[1] == 1:  # alone: both values summed over the local replicas
        dense, sparse = strategy.run(step)
        n = strategy.num_replicas_in_sync
        for local in _locals(strategy, dense):
            np.testing.assert_array_equal(local, np.full((1, 2), n, np.float32))
        for local in strategy.experimental_local_results(sparse):
            assert isinstance(local, IndexedSlices)
            np.testing.assert_array_equal(np.asarray(local.values), np.ones((n, 2), np.float32))
            np.testing.assert_array_equal(np.asarray(local.indices), np.zeros(n))
        return
    with pytest.raises(errors.InvalidArgumentError) as info:
        strategy.run(step)
    for text in ("structure", "(IndexedSlices, .)", "(., IndexedSlices)"):
        assert text in str(info.value), str(info.value)
    still_works(strategy)


def test_a_pair_that_is_not_a_pair_on_one_worker(strategy: Any) -> None:
    value = strategy.run(lambda: np.ones(2, np.float32))
    pairs = [(value,)] if odd_rank() else [(value, value)]
    expected = ValueError if odd_rank() or rank_size()[1] == 1 else errors.InvalidArgumentError
    if rank_size()[1] == 1:
        pairs = [(value,)]
    with pytest.raises(expected, match="pair"):
        strategy.extended.batch_reduce_to("sum", pairs)
    still_works(strategy)


@pytest.mark.parametrize("op", [None, 3, "max"])
def test_a_reduce_op_that_is_not_one_is_refused_everywhere(strategy: Any, op: Any) -> None:
    value = strategy.run(lambda: np.ones(2, np.float32))
    with pytest.raises(ValueError, match="ReduceOp"):
        strategy.reduce(op, value, axis=None)
    still_works(strategy)


def test_a_scalar_reduced_along_an_axis_gets_tf_error(strategy: Any) -> None:
    value = strategy.run(lambda: np.float32(1.0))
    for op in ("sum", "mean"):
        with pytest.raises(ValueError, match="Invalid reduction dimension 0 for input with 0"):
            strategy.reduce(op, value, axis=0)
    still_works(strategy)


def test_gathering_strings_across_workers_is_refused_everywhere(strategy: Any) -> None:
    value = strategy.run(lambda: np.array(["a", "b"]))
    k = len(strategy.extended.worker_devices)
    if rank_size()[1] == 1 and k == 1:  # one replica in all: nothing is gathered (as TF)
        assert strategy.gather(value, axis=0).tolist() == [b"a", b"b"]  # TF's tf.string
        return
    # TF 2.21's collective gather kernel takes float16/32/64, int32 and int64 only.
    with pytest.raises(TypeError, match="DataType string not in list of allowed values"):
        strategy.gather(value, axis=0)
    still_works(strategy)

"""MultiWorkerMirroredStrategy at any world size, k=1 and k=2 CPU replicas per rank (issue 4, 1-12).

Every expected value is computed serially from what each global replica contributes, on every
rank. Replica r (global id) contributes data derived from r alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi._mpi import mpi
from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver, SimpleClusterResolver
from mwms_mpi.distribute.collective_all_reduce_strategy import CollectiveAllReduceExtended
from mwms_mpi.train import ClusterSpec
from mwms_mpi.types import CommunicationOptions, ReduceOp
from mwms_mpi.values import IndexedSlices, Mirrored, PerReplica

pytestmark = pytest.mark.mpi


def _rank_size() -> tuple[int, int]:
    comm = mpi().COMM_WORLD
    return comm.Get_rank(), comm.Get_size()


def _k(s: Any) -> int:
    return len(s.extended.worker_devices)


def _rid() -> int:
    ctx = ds.get_replica_context()
    assert ctx is not None
    return int(ctx.replica_id_in_sync_group)


# 1 ---------------------------------------------------------------------------------------


def test_num_replicas_and_unique_replica_ids(strategy: Any) -> None:
    rank, size = _rank_size()
    k = _k(strategy)
    assert strategy.num_replicas_in_sync == k * size
    ids = strategy.experimental_local_results(strategy.run(_rid))
    assert list(ids) == [rank * k + i for i in range(k)]
    gathered = strategy.gather(strategy.run(lambda: np.array([_rid()])), axis=0)
    np.testing.assert_array_equal(gathered, np.arange(k * size))


# 2 ---------------------------------------------------------------------------------------


def test_reduce_sum_of_ones_in_and_out_of_scope(strategy: Any) -> None:
    ones = strategy.run(lambda: np.float32(1.0))
    out = strategy.reduce(ReduceOp.SUM, ones, axis=None)
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.float32
    assert out == strategy.num_replicas_in_sync
    with strategy.scope():
        assert strategy.reduce("sum", strategy.run(lambda: np.float32(1)), axis=None) == out


# 3 ---------------------------------------------------------------------------------------


def test_reduce_with_axis_weights_by_element_count(strategy: Any) -> None:
    n = strategy.num_replicas_in_sync
    x = strategy.run(lambda: np.array([1.0, 2.0], np.float32))
    mean = strategy.reduce("MEAN", x, axis=0)
    assert mean.dtype == np.float32 and mean == 1.5
    assert strategy.reduce("SUM", x, axis=0) == 3 * n
    uneven = strategy.run(lambda: np.full(_rid() + 1, _rid() + 1, np.float64))
    expected = sum((r + 1) ** 2 for r in range(n)) / sum(r + 1 for r in range(n))
    assert strategy.reduce("MEAN", uneven, axis=0) == pytest.approx(expected, rel=1e-12)
    ints = strategy.run(lambda: np.array([1, 2], np.int32))
    assert strategy.reduce("MEAN", ints, axis=0).dtype == np.float64  # TF's truediv
    assert strategy.reduce("SUM", ints, axis=0).dtype == np.int32


# 4 ---------------------------------------------------------------------------------------


def test_host_values_reduce_one_term_per_worker(strategy: Any) -> None:
    _, size = _rank_size()
    v = np.array(1.0, np.float32)
    ext = strategy.extended
    if size == 1 and _k(strategy) > 1:  # TF: SUM of a non-distributed value over 2 replicas
        with pytest.raises(ValueError, match="cannot be reduced"):
            strategy.reduce("SUM", v, axis=None)
        with pytest.raises(ValueError, match="cannot be reduced"):
            ext.reduce_to("SUM", v, v)
        assert [float(r) for r in ext.batch_reduce_to("SUM", [(v, v), (v, v)])] == [1.0, 1.0]
        return
    assert strategy.reduce("SUM", v, axis=None) == size
    assert ext.reduce_to("SUM", v, v) == size
    assert [float(r) for r in ext.batch_reduce_to("SUM", [(v, v), (v, v)])] == [size, size]
    assert strategy.reduce("MEAN", v, axis=None) == 1.0


# 5 ---------------------------------------------------------------------------------------


def test_reduce_to_mirrored_mean_is_identity_and_strings_accepted(strategy: Any) -> None:
    k = _k(strategy)
    m = Mirrored(tuple(np.array([2.0], np.float32) for _ in range(k)))
    assert strategy.extended.reduce_to("MEAN", m, m) is m
    assert strategy.extended.reduce_to(ReduceOp.MEAN, m, m) is m
    pr = strategy.run(lambda: np.float32(_rid()))
    n = strategy.num_replicas_in_sync
    for op in ("sum", "SUM", "Sum"):
        assert strategy.reduce(op, pr, axis=None) == n * (n - 1) / 2
    with pytest.raises(ValueError, match=r"^'PROD' is not a valid ReduceOp$"):  # TF 2.21's
        strategy.reduce("prod", pr, axis=None)


# 6 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("bytes_per_pack", [0, 1, 64])
def test_replica_all_reduce_on_nests(strategy: Any, bytes_per_pack: int) -> None:
    n = strategy.num_replicas_in_sync
    options = CommunicationOptions(bytes_per_pack=bytes_per_pack)

    def fn() -> Any:
        ctx = ds.get_replica_context()
        r = _rid()
        # "a" is an array: TF 2.21 refuses a Python number here (test_reduce_python_values.py)
        nested = {"a": np.float32(1.0), "b": [np.arange(3, dtype=np.float64) * r, (np.int64(r),)]}
        return ctx.all_reduce("sum", nested, options), ctx.all_reduce("mean", np.float32(r))

    for total, mean in zip(
        *map(strategy.experimental_local_results, strategy.run(fn)), strict=True
    ):
        assert set(total) == {"a", "b"} and isinstance(total["b"], list)
        assert total["a"].dtype == np.float32 and total["a"] == n
        np.testing.assert_array_equal(total["b"][0], np.arange(3) * n * (n - 1) / 2)
        assert isinstance(total["b"][1], tuple) and total["b"][1][0] == n * (n - 1) // 2
        assert mean == pytest.approx((n - 1) / 2)


def test_replica_all_reduce_mean_of_ints(strategy: Any) -> None:
    out = strategy.experimental_local_results(
        strategy.run(
            lambda: ds.get_replica_context().all_reduce("MEAN", np.array([3, 4], np.int32))
        )
    )
    n = strategy.num_replicas_in_sync
    for o in out:  # TF: a pass-through with one replica, truediv (float64) otherwise
        assert o.dtype == (np.int32 if n == 1 else np.float64)
        np.testing.assert_array_equal(o, [3, 4])


# 7 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_and_all_gather_uneven_in_replica_order(strategy: Any, axis: int) -> None:
    n = strategy.num_replicas_in_sync

    def value(r: int) -> np.ndarray:
        shape = (r + 1, 2) if axis == 0 else (2, r + 1)
        return np.full(shape, r, np.int32)

    expected = np.concatenate([value(r) for r in range(n)], axis=axis)
    pr = strategy.run(lambda: value(_rid()))
    np.testing.assert_array_equal(strategy.gather(pr, axis=axis), expected)
    gathered = strategy.run(lambda: ds.get_replica_context().all_gather(value(_rid()), axis))
    for g in strategy.experimental_local_results(gathered):
        np.testing.assert_array_equal(g, expected)


def test_all_gather_dtype_mismatch_between_local_replicas_raises(strategy: Any) -> None:
    if _k(strategy) == 1:
        pytest.skip("needs two local replicas")
    per_replica = PerReplica((np.zeros(1, np.float32), np.zeros(1, np.int32)))
    both = r"(float32\[1\] and int32\[1\]|int32\[1\] and float32\[1\])"
    with pytest.raises(errors.InvalidArgumentError, match=f"^all_gather: replicas passed {both}"):
        strategy.gather(per_replica, axis=0)
    both = r"(float64\[1\] and float64\[1, 1\]|float64\[1, 1\] and float64\[1\])"
    with pytest.raises(errors.InvalidArgumentError, match=f"^all_gather: replicas passed {both}"):
        strategy.gather(PerReplica((np.zeros(1), np.zeros((1, 1)))), axis=0)


@pytest.mark.parametrize("what", ["dtype", "rank"])
def test_all_gather_mismatch_between_workers_raises_on_every_rank(strategy: Any, what: str) -> None:
    rank, size = _rank_size()
    if size == 1:
        pytest.skip("needs two workers")
    # Rank 0 differs from every other rank: each rank's message names its own layout first,
    # then a rank whose layout differs (the agreement's words, the same at every world size).
    if what == "dtype":
        mine = np.zeros(2, np.float32 if rank == 0 else np.int32)
        layouts, kind = (r"\(\*,\) float32", r"\(\*,\) int32"), "dtype "
    else:
        mine = np.zeros((2,) if rank == 0 else (2, 1), np.float32)
        layouts, kind = (r"\(\*,\) float32", r"\(\*, 1\) float32"), ""
    own, other = (layouts[0], layouts[1]) if rank == 0 else (layouts[1], layouts[0])
    expected = rf"^Strategy\.gather on rank {rank}: {kind}{own} != {other} on rank \d+ "
    with pytest.raises(errors.InvalidArgumentError, match=expected):
        strategy.gather(strategy.run(lambda: mine), axis=0)


# 8 ---------------------------------------------------------------------------------------


DENSE_SHAPE = (3, 2)


def _slice_parts(r: int) -> tuple[np.ndarray, np.ndarray]:
    """Replica r's sparse gradient: 1 or 2 rows (repeated indices), row r % 3."""
    rows = r % 2 + 1
    return np.array([[r + 1.0, 2.0]] * rows, np.float32), np.array([r % 3] * rows, np.int64)


def _slices(r: int) -> IndexedSlices:
    return IndexedSlices(*_slice_parts(r), np.array(DENSE_SHAPE, np.int64))


def _densify(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The dense tensor of sparse rows, in plain numpy (rows at a repeated index add up)."""
    dense = np.zeros(DENSE_SHAPE, np.float64)
    np.add.at(dense, indices, values)
    return dense


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_indexed_slices_reduce_concatenates_every_replicas_rows(strategy: Any, op: str) -> None:
    # TF all-gathers the rows in replica order and, for MEAN, divides the values by the number
    # of replicas (test_strategy_local.py pins TF's output); never densified.
    n = strategy.num_replicas_in_sync
    out = strategy.reduce(op, strategy.run(lambda: _slices(_rid())), axis=None)
    assert isinstance(out, IndexedSlices)
    values = np.concatenate([_slice_parts(r)[0] for r in range(n)])
    indices = np.concatenate([_slice_parts(r)[1] for r in range(n)])
    if op == "MEAN":  # float32 / n, correctly rounded (a float64 quotient rounds to the same)
        values = (values.astype(np.float64) / n).astype(np.float32)
    np.testing.assert_array_equal(out.indices, indices)
    assert out.values.dtype == np.float32
    np.testing.assert_array_equal(out.values, values)
    np.testing.assert_array_equal(np.asarray(out.dense_shape), DENSE_SHAPE)
    dense = sum(_densify(*_slice_parts(r)) for r in range(n)) / (n if op == "MEAN" else 1)
    np.testing.assert_allclose(_densify(out.values, out.indices), dense, rtol=1e-6)


def test_batch_reduce_mixed_dense_and_sparse_in_order(strategy: Any) -> None:
    n = strategy.num_replicas_in_sync
    dense = strategy.run(lambda: np.float32(_rid()))
    sparse = strategy.run(lambda: _slices(_rid()))
    pairs = [(dense, dense), (sparse, sparse), (dense, dense)]
    out = [
        strategy.experimental_local_results(o)[0]
        for o in strategy.extended.batch_reduce_to("MEAN", pairs)
    ]
    assert out[0] == out[2] == pytest.approx((n - 1) / 2)
    assert isinstance(out[1], IndexedSlices)
    expected = sum(_densify(*_slice_parts(r)) for r in range(n)) / n
    np.testing.assert_allclose(_densify(out[1].values, out[1].indices), expected, rtol=1e-6)
    np.testing.assert_array_equal(
        out[1].indices, np.concatenate([_slice_parts(r)[1] for r in range(n)])
    )


# 9 ---------------------------------------------------------------------------------------


def test_merge_call_runs_once_with_regrouped_args(strategy: Any) -> None:
    rank, _ = _rank_size()
    k = _k(strategy)
    calls: list[Any] = []

    def merge_fn(s: Any, value: Any) -> Any:
        calls.append(value)
        assert ds.in_cross_replica_context() and ds.get_replica_context() is None
        return s.extended.reduce_to("SUM", value, value)

    out = strategy.experimental_local_results(
        strategy.run(
            lambda: ds.get_replica_context().merge_call(merge_fn, args=(np.float32(_rid()),))
        )
    )
    assert len(calls) == 1
    local = [float(x) for x in strategy.experimental_local_results(calls[0])]
    assert local == [rank * k + i for i in range(k)]
    n = strategy.num_replicas_in_sync
    assert [float(o) for o in out] == [n * (n - 1) / 2] * k


def test_exceptions_in_replica_and_merge_functions_propagate(strategy: Any) -> None:
    def bad_fn() -> None:
        raise KeyError("in fn")

    def bad_merge() -> None:
        ds.get_replica_context().merge_call(lambda s: (_ for _ in ()).throw(KeyError("in merge")))

    with pytest.raises(KeyError, match="in fn"):
        strategy.run(bad_fn)
    with pytest.raises(KeyError, match="in merge"):
        strategy.run(bad_merge)


def test_different_merge_call_counts_raise(strategy: Any) -> None:
    if _k(strategy) == 1:
        pytest.skip("needs two local replicas")

    def fn() -> int:
        if _rid() % 2 == 0:
            ds.get_replica_context().merge_call(lambda s: None)
        return 1

    with pytest.raises(RuntimeError, match="different number of"):
        strategy.run(fn)
    ones = strategy.run(lambda: np.float32(1))
    assert strategy.reduce("SUM", ones, axis=None) == strategy.num_replicas_in_sync


# 10 --------------------------------------------------------------------------------------


def test_replica_and_cross_replica_contexts(strategy: Any) -> None:
    default_ctx = ds.get_replica_context()
    assert default_ctx is not None and not ds.in_cross_replica_context() and not ds.has_strategy()
    with strategy.scope():
        assert ds.get_replica_context() is None and ds.in_cross_replica_context()
        assert ds.get_strategy() is strategy and ds.has_strategy()
        inside = strategy.run(
            lambda: (ds.get_replica_context() is not None, ds.in_cross_replica_context())
        )
    # True is one object on every replica, so regroup returns it unwrapped (as TF does).
    assert inside == (True, False)
    assert ds.get_replica_context() is default_ctx


def test_distribute_values_from_function(strategy: Any) -> None:
    rank, _ = _rank_size()
    k = _k(strategy)
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: (ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync)
    )
    ids, totals = values
    assert isinstance(ids, PerReplica)
    assert list(ids.values) == [rank * k + i for i in range(k)]
    assert set(totals.values) == {strategy.num_replicas_in_sync}


# 11 --------------------------------------------------------------------------------------


def test_chief_and_task(strategy: Any) -> None:
    rank, _ = _rank_size()
    ext = strategy.extended
    assert ext.should_checkpoint == ext.should_save_summary == (rank == 0)
    assert ext.experimental_between_graph and ext.experimental_should_init
    assert strategy.cluster_resolver.task_type == "worker"
    assert strategy.cluster_resolver.task_id == rank
    assert isinstance(strategy, ds.experimental.MultiWorkerMirroredStrategy)
    assert issubclass(ds.experimental.MultiWorkerMirroredStrategy, ds.MultiWorkerMirroredStrategy)


def test_single_replica_passes_values_through(strategy: Any) -> None:
    if strategy.num_replicas_in_sync != 1:
        pytest.skip("one replica in all")
    ints = strategy.run(lambda: np.array([1, 2], np.int32))
    assert strategy.reduce("MEAN", ints, axis=None).dtype == np.int32  # TF: no division at all
    assert strategy.gather(np.float32(1), axis=0) == 1.0  # TF returns a 0-d value as is


def test_construction_errors() -> None:
    rank, size = _rank_size()
    with pytest.raises(ValueError, match="communication_options must be"):
        ds.MultiWorkerMirroredStrategy(communication_options=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be an instance of"):
        ds.MultiWorkerMirroredStrategy(cluster_resolver=object())  # type: ignore[arg-type]
    cluster = ClusterSpec({"worker": [f"h:{i}" for i in range(size)]})
    resolver = SimpleClusterResolver(cluster, task_type="worker", task_id=(rank + 1) % size)
    with pytest.raises(ValueError, match="cannot be set at the same time"):
        CollectiveAllReduceExtended(None, resolver, CommunicationOptions(), devices=["/cpu:0"])  # type: ignore[arg-type]
    if size > 1:
        with pytest.raises(ValueError, match="must be the MPI rank"):
            ds.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


def test_workers_with_different_replica_counts_raise_on_every_rank() -> None:
    # TF leaves it undefined; here the replica ids, MEAN denominators and input splits would
    # silently differ between workers (k = GPUs // ranks on the node differs with uneven
    # placement), so construction refuses it on every rank.
    rank, size = _rank_size()
    if size == 1:
        pytest.skip("needs two workers")
    resolver = MPIClusterResolver(num_accelerators={"CPU": 2 if rank == 0 else 1})
    with pytest.raises(ValueError, match="same number of local replicas"):
        ds.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


# 12 --------------------------------------------------------------------------------------


def test_merge_fn_pattern_reduce_to_destinations_then_update(strategy: Any) -> None:
    k = _k(strategy)
    n = strategy.num_replicas_in_sync
    var = Mirrored(tuple(np.zeros(3, np.float64) for _ in range(k)))  # a variable's components

    def apply(s: Any, grad: Any) -> Any:
        reduced = s.extended.reduce_to("SUM", grad, var)
        return s.extended.update(var, lambda v, g: np.add(v, g, out=v), args=(reduced,))

    def step() -> Any:
        return ds.get_replica_context().merge_call(apply, args=(np.arange(3.0) * _rid(),))

    strategy.run(step)
    for component in var.values:
        np.testing.assert_array_equal(component, np.arange(3.0) * n * (n - 1) / 2)

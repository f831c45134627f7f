"""Distributed variables under MultiWorkerMirroredStrategy, any world size, k=1 and k=2 (issue 5).

Global replica r (of N = k * world size) contributes r + 1; every expected value is computed
serially on every rank. Multi-worker TF behaviour was checked with two TF 2.21 processes on a
127.0.0.1 TF_CONFIG loopback (k=1 each, so N=2); the literal output is quoted. Every error
TF raises locally is raised on every rank before any collective, so no rank is left waiting.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi._mpi import mpi
from mwms_mpi.types import ReduceOp
from mwms_mpi.values import MirroredVariable, SyncOnReadVariable

pytestmark = pytest.mark.mpi

A = mwms_mpi.VariableAggregation
S = mwms_mpi.VariableSynchronization


def _rank() -> int:
    return int(mpi().COMM_WORLD.Get_rank())


def _k(s: Any) -> int:
    return len(s.extended.worker_devices)


def _rid() -> np.float32:
    ctx = ds.get_replica_context()
    assert ctx is not None
    return np.float32(ctx.replica_id_in_sync_group)


def _components(v: Any) -> list[Any]:
    return [c.numpy().tolist() for c in v.values]


def test_creation_broadcasts_the_chiefs_initial_value(strategy: Any) -> None:
    # TF (2 workers, each Variable(np.full(3, index + 1.0))): init broadcast [1.0, 1.0, 1.0] on
    # worker0 and worker1.
    rank, k = _rank(), _k(strategy)
    rng = np.random.default_rng(1000 + rank)  # a different value on every rank
    with strategy.scope():
        v = mwms_mpi.Variable(rng.standard_normal(4))
        w = mwms_mpi.Variable(lambda: np.full((2, 2), rank + 1, np.int64), name="w")
    chief = np.random.default_rng(1000).standard_normal(4)
    assert type(v) is MirroredVariable and v.dtype == np.float64
    for c in v.values:
        np.testing.assert_array_equal(c.numpy(), chief)  # bitwise: a copy, not arithmetic
    assert _components(w) == [[[1, 1], [1, 1]]] * k and w.dtype == np.int64
    assert [c.name for c in w.values] == ["w:0"] + [f"w/replica_{i}:0" for i in range(1, k)]
    # Reads are fresh arrays, never the component's storage.
    r = v.read_value()
    r[:] = 0
    np.testing.assert_array_equal(v.numpy(), chief)


def test_creation_errors_raise_on_every_rank_before_any_collective(strategy: Any) -> None:
    with strategy.scope():
        with pytest.raises(ValueError, match=re.escape("`NONE` variable synchronization mode")):
            mwms_mpi.Variable(1.0, synchronization=S.NONE)
        with pytest.raises(
            ValueError, match=re.escape("aggregation=MEAN and a non-floating dtype")
        ):
            mwms_mpi.Variable(np.arange(3), aggregation=A.MEAN)
        with pytest.raises(
            TypeError, match=re.escape("Cannot convert 1.5 to EagerTensor of dtype int32")
        ):
            mwms_mpi.Variable(1.5, dtype=np.int32)
        # The strategy still works: the next creation is a collective every rank joins.
        v = mwms_mpi.Variable(float(_rank()))
    assert _components(v) == [0.0] * _k(strategy)


def test_creation_with_mismatched_shapes_fails_on_every_rank(strategy: Any) -> None:
    if mpi().COMM_WORLD.Get_size() == 1:
        pytest.skip("needs two ranks")
    with strategy.scope(), pytest.raises(errors.InvalidArgumentError, match=re.escape("broadcast")):
        mwms_mpi.Variable(np.zeros(3 + _rank(), np.float32))


# TF (2 workers, k=1, N=2; Variable(10.0, aggregation=agg); replica r runs assign_add(r + 1)):
#   worker0 mirrored NONE replica assign_add(rid+1) [11.0]      worker1 ... [12.0]
#   worker0 mirrored SUM replica assign_add(rid+1) [13.0]       worker1 ... [13.0]
#   worker0 mirrored MEAN replica assign_add(rid+1) [11.5]      worker1 ... [11.5]
#   worker0 mirrored ONLY_FIRST_REPLICA replica assign_add(rid+1) [11.0]   worker1 ... [12.0]
#   (ONLY_FIRST_REPLICA takes each worker's own first replica: TF's broadcast_to is local)
@pytest.mark.parametrize("aggregation", list(A), ids=lambda a: a.name)
@pytest.mark.parametrize("op", ["assign", "assign_add", "assign_sub"])
def test_mirrored_writes_in_replica_context(strategy: Any, aggregation: Any, op: str) -> None:
    rank, k = _rank(), _k(strategy)
    n = strategy.num_replicas_in_sync
    contributions = np.arange(n, dtype=np.float64) + 1  # replica r contributes r + 1
    local = contributions[rank * k : rank * k + k]
    if aggregation == A.NONE:
        deltas = list(local)
    elif aggregation == A.SUM:
        deltas = [contributions.sum()] * k
    elif aggregation == A.MEAN:
        deltas = [contributions.mean()] * k
    else:
        deltas = [local[0]] * k
    apply = {"assign": lambda d: d, "assign_add": lambda d: 10 + d, "assign_sub": lambda d: 10 - d}
    with strategy.scope():
        v = mwms_mpi.Variable(10.0, aggregation=aggregation)
    strategy.run(lambda: getattr(v, op)(_rid() + 1))
    assert _components(v) == [np.float32(apply[op](d)) for d in deltas]
    # Cross-replica: the value goes to every component as is.
    before = _components(v)
    getattr(v, op)(2.0)
    after = {"assign": lambda c: 2.0, "assign_add": lambda c: c + 2, "assign_sub": lambda c: c - 2}
    assert _components(v) == [float(np.float32(after[op](c))) for c in before]


def test_global_step_only_first_replica_and_int_sum(strategy: Any) -> None:
    n, k = strategy.num_replicas_in_sync, _k(strategy)
    with strategy.scope():
        step = mwms_mpi.Variable(0, aggregation=A.ONLY_FIRST_REPLICA)
        total = mwms_mpi.Variable(0, aggregation=A.SUM)
    for _ in range(3):
        strategy.run(lambda: step.assign_add(1))
        strategy.run(lambda: total.assign_add(np.int32(1)))
    assert _components(step) == [3] * k and step.dtype == np.int32
    assert _components(total) == [3 * n] * k and total.dtype == np.int32


def test_sum_of_a_python_value_in_replica_context(strategy: Any) -> None:
    # TF (one worker, k=2): RAISES ValueError A non-DistributedValues value 1.0 cannot be reduced
    # with the given reduce op ReduceOp.SUM. With several workers TF all-reduces the one host
    # value per worker instead (CollectiveAllReduceExtended._reduce_to); TF, 2 workers, k=1,
    # Variable(10.0, SUM), assign_add(1.0): worker0 SUM python const [12.0], worker1 [12.0].
    n, k, size = strategy.num_replicas_in_sync, _k(strategy), mpi().COMM_WORLD.Get_size()
    with strategy.scope():
        v = mwms_mpi.Variable(10.0, aggregation=A.SUM)
    if size == 1 and k > 1:
        with pytest.raises(
            ValueError, match=re.escape("A non-DistributedValues value 1.0 cannot be")
        ):
            strategy.run(lambda: v.assign_add(1.0))
    else:
        strategy.run(lambda: v.assign_add(1.0))
        assert _components(v) == [10.0 + (size if k > 1 else n)] * k


# TF (2 workers, k=1; Variable(4.0, ON_READ); replica r runs assign_add(r + 1) -> [5.] / [6.]):
#   worker0 onread SUM cross read 11.0                  worker1 onread SUM cross read 11.0
#   worker0 onread SUM assign 8 comps [4.0] 8.0         worker1 ... [4.0] 8.0
#   worker0 onread MEAN cross read 5.5                  worker1 ... 5.5
#   worker0 onread ONLY_FIRST_REPLICA cross read 5.0    worker1 ... 6.0  (own first replica)
def test_sync_on_read_reads_and_writes(strategy: Any) -> None:
    rank, k, n = _rank(), _k(strategy), strategy.num_replicas_in_sync
    contributions = 4.0 + np.arange(n) + 1
    local = contributions[rank * k : rank * k + k]
    expected = {
        A.SUM: contributions.sum(),
        A.MEAN: contributions.mean(),
        A.ONLY_FIRST_REPLICA: local[0],
    }
    for aggregation in A:
        with strategy.scope():
            v = mwms_mpi.Variable(4.0, synchronization=S.ON_READ, aggregation=aggregation)
        assert type(v) is SyncOnReadVariable and not v.trainable
        strategy.run(lambda v=v: v.assign_add(_rid() + 1))
        assert _components(v) == list(local)  # replica-context writes stay local
        mine = strategy.experimental_local_results(strategy.run(lambda v=v: v.read_value()))
        assert [float(x) for x in mine] == list(local)
        if aggregation == A.NONE:
            with pytest.raises(
                ValueError, match=re.escape("Could not convert from `tf.VariableAggregation`")
            ):
                v.read_value()
            v.assign(8.0, read_value=False)
            assert _components(v) == [8.0] * k
            continue
        assert float(v.read_value()) == pytest.approx(expected[aggregation])
        # TF: np.asarray(v) of a scalar reads through the aggregated tensor's __array__, which
        # numpy refuses (ValueError) unless the read is the first component (ONLY_FIRST_REPLICA,
        # MEAN of one replica): tests/unit/test_variable_conversions_tf.py; with a dtype it reads
        read = np.asarray(v, v.dtype)
        assert float(v.numpy()) == float(read) == pytest.approx(expected[aggregation])
        assert float(v.assign(8.0)) == 8.0
        assert _components(v) == [8.0 / n if aggregation == A.SUM else 8.0] * k
        if aggregation == A.SUM:
            with pytest.raises(
                ValueError, match=re.escape("does not support `assign_add` in cross-replica")
            ):
                v.assign_add(1.0)
            with pytest.raises(
                ValueError, match=re.escape("does not support `assign_sub` in cross-replica")
            ):
                v.assign_sub(1.0)
        else:
            assert float(v.assign_add(1.0)) == 9.0 and _components(v) == [9.0] * k


def test_update_group_and_update_non_slot(strategy: Any) -> None:
    k = _k(strategy)
    with strategy.scope():
        v = mwms_mpi.Variable(np.zeros(2, np.float32))
    values = strategy.experimental_distribute_values_from_function(
        lambda ctx: np.full(2, ctx.replica_id_in_sync_group, np.float32)
    )
    out = strategy.extended.update(v, lambda c, x: c.assign_add(x), args=(values,), group=False)
    base = _rank() * k
    assert isinstance(out, tuple) and len(out) == k
    assert _components(v) == [[float(base + i)] * 2 for i in range(k)]
    # TF 2.21: the per-device results, not the variable: one replica's UnreadVariable (read
    # when used), or a Mirrored of the values read after the update.
    result = strategy.extended.update(v, lambda c: c.assign([5.0, 5.0]))
    if k == 1:
        assert isinstance(result, mwms_mpi.Variable) and result.name == "UnreadVariable"
    else:
        assert type(result).__name__ == "Mirrored" and len(result.values) == k
    assert _components(v) == [[5.0, 5.0]] * k
    results = strategy.extended.update_non_slot(
        strategy.extended.non_slot_devices([v]), lambda x: x * 2, args=(3.0,), group=False
    )
    assert list(results) == [6.0] * k
    assert strategy.extended.value_container(v.values[-1]) is v
    assert strategy.extended.variable_created_in_scope(v)


def test_seed_step_fn_merge_fn(strategy: Any) -> None:
    # TF (2 workers): worker0 seed 2.0, worker1 seed 2.0 (= num_replicas_in_sync)
    def step_fn(var: Any) -> None:
        def merge_fn(strategy: Any, value: Any, var: Any) -> None:
            reduced = strategy.extended.reduce_to(ReduceOp.SUM, value, destinations=var)
            strategy.extended.update(var, lambda var, value: var.assign_add(value), args=(reduced,))

        ds.get_replica_context().merge_call(merge_fn, args=(np.float32(1.0), var))

    with strategy.scope():
        v = mwms_mpi.Variable(0.0)
    strategy.run(step_fn, args=(v,))
    assert _components(v) == [float(strategy.num_replicas_in_sync)] * _k(strategy)


def test_creation_inside_run(strategy: Any) -> None:
    made = strategy.run(lambda: mwms_mpi.Variable(np.float32(_rank() + 7)))
    assert type(made) is MirroredVariable
    assert _components(made) == [7.0] * _k(strategy)  # the chief's first replica's value


def test_a_list_initial_value_of_two_dtypes_fails_as_in_tf(strategy: Any) -> None:
    # TF 2.21, one worker: with MultiWorkerMirroredStrategy().scope(): tf.Variable([i32, i64])
    # -> InvalidArgumentError "cannot compute Pack as input #1(zero-based) was expected to be a
    # int32 tensor but is a int64 tensor [Op:Pack] name: packed" (its creator converts the
    # initial value with no name; a MirroredStrategy's says "initial_value"). Every rank raises
    # before the broadcast.
    value = [np.array(1, np.int32), np.array(2, np.int64)]
    with strategy.scope(), pytest.raises(errors.InvalidArgumentError) as info:
        mwms_mpi.Variable(value)
    assert str(info.value).endswith("tensor [Op:Pack] name: packed")

"""MirroredStrategy (one worker, k threads) and size-1 MWMS semantics, checked against TF 2.21.

The expected values and dtypes below were printed by TF 2.21 (MirroredStrategy on two logical
CPUs, MultiWorkerMirroredStrategy with no TF_CONFIG).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.distribute.cross_device_ops import as_array, reduce_non_distributed_value
from mwms_mpi.types import ReduceOp, VariableAggregation
from mwms_mpi.values import IndexedSlices, Mirrored, PerReplica


@pytest.fixture(scope="module")
def ms2() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _rid() -> int:
    ctx = ds.get_replica_context()
    assert ctx is not None
    return int(ctx.replica_id_in_sync_group)


def test_as_array_converts_like_tf_constant() -> None:
    assert as_array(1.0).dtype == np.float32 and as_array(1).dtype == np.int32
    assert as_array(2**40).dtype == np.int64 and as_array(True).dtype == np.bool_
    assert as_array([1.0, 2.0]).dtype == np.float32 and as_array([[1, 2]]).dtype == np.int32
    x = np.arange(3, dtype=np.int16)
    assert as_array(x) is x and as_array(np.float64(1)).shape == ()
    with pytest.raises(ValueError, match="unsupported type"):
        as_array({"a": 1})


def test_devices_and_replicas(ms2: ds.MirroredStrategy) -> None:
    assert ms2.num_replicas_in_sync == 2
    assert ms2.extended.worker_devices == (
        "/job:localhost/replica:0/task:0/device:CPU:0",
        "/job:localhost/replica:0/task:0/device:CPU:1",
    )
    assert not ms2.extended.experimental_between_graph and ms2.extended.should_checkpoint
    with pytest.raises(ValueError, match="duplicates"):
        ds.MirroredStrategy(["/cpu:0", "/cpu:0"])


def test_run_uses_one_thread_per_replica(ms2: ds.MirroredStrategy) -> None:
    main = threading.get_ident()
    out = ms2.run(lambda: (threading.get_ident() != main, np.int32(_rid())))
    assert out[0] is True
    assert isinstance(out[1], PerReplica) and [int(v) for v in out[1].values] == [0, 1]


def test_tf_results_two_replicas(ms2: ds.MirroredStrategy) -> None:
    ones = ms2.run(lambda: np.float32(1))
    assert ms2.reduce("sum", ones, axis=None) == 2.0
    with pytest.raises(
        ValueError, match=r"cannot be reduced with the given reduce op ReduceOp\.SUM"
    ):
        ms2.reduce("SUM", 1.0, axis=None)
    assert ms2.reduce("MEAN", 1.0, axis=None) == 1.0
    ints = ms2.run(lambda: np.array([1, 2], np.int32))
    assert ms2.reduce("MEAN", ints, axis=None).dtype == np.float64  # TF: float64 [1., 2.]
    i16 = ms2.run(lambda: np.array([1, 2], np.int16))
    assert ms2.reduce("MEAN", i16, axis=None).dtype == np.float32
    assert ms2.reduce("SUM", ints, axis=0).dtype == np.int32  # TF: 6, int32
    nested = ms2.run(lambda: {"a": np.float32(1), "b": (np.float32(2),)})
    assert ms2.reduce("SUM", nested, axis=None) == {"a": 2.0, "b": (4.0,)}
    m = ms2.extended.reduce_to("SUM", ones, ones)
    assert isinstance(m, Mirrored) and len(m.values) == 2
    assert ms2.extended.reduce_to("MEAN", m, m) is m
    # TF 2.21 raises a bare AssertionError from `assert not is_mirrored(value)`; ours names it,
    # so that an unrelated internal `assert` cannot pass for it.
    with pytest.raises(AssertionError, match=r"^reduce_to\(SUM\) of a Mirrored value"):
        ms2.extended.reduce_to("SUM", m, m)
    # TF 2.21: a bare AssertionError (`assert not isinstance(reduce_op, VariableAggregation)`);
    # ours names it (it was a ValueError).
    with pytest.raises(
        AssertionError, match=r"^reduce_to: reduce_op must be a ReduceOp, not a Variable"
    ):
        ms2.extended.reduce_to(VariableAggregation.SUM, ones, ones)


def test_indexed_slices_mean_divides_values(ms2: ds.MirroredStrategy) -> None:
    isl = ms2.run(lambda: IndexedSlices(np.array([[1.0, 2.0]]), np.array([1]), np.array([3, 2])))
    out = ms2.reduce("MEAN", isl, axis=None)
    np.testing.assert_array_equal(out.values, [[0.5, 1.0], [0.5, 1.0]])  # TF's output
    np.testing.assert_array_equal(out.indices, [1, 1])


def test_merge_call_and_contexts(ms2: ds.MirroredStrategy) -> None:
    seen = []

    def merge_fn(s: ds.Strategy, v: PerReplica) -> PerReplica:
        seen.append((ds.in_cross_replica_context(), ds.get_replica_context(), v.values))
        return v

    out = ms2.run(lambda: ds.get_replica_context().merge_call(merge_fn, args=(np.int32(_rid()),)))
    assert seen == [(True, None, (0, 1))] and [int(x) for x in out.values] == [0, 1]


def test_errors_propagate_and_mismatched_merge_calls(ms2: ds.MirroredStrategy) -> None:
    def bad() -> None:
        if _rid() == 1:
            raise KeyError("replica 1")
        ds.get_replica_context().merge_call(lambda s: None)

    with pytest.raises(KeyError, match="replica 1"):
        ms2.run(bad)

    def mismatch() -> None:
        if _rid() == 0:
            ds.get_replica_context().merge_call(lambda s: None)

    with pytest.raises(RuntimeError, match="different number of"):
        ms2.run(mismatch)
    assert threading.active_count() < 10  # every replica thread ended


@pytest.mark.timeout(20)
def test_a_replica_that_swallows_the_stop_is_not_left_waiting(ms2: ds.MirroredStrategy) -> None:
    # Replica 0 pauses in merge_call; replica 1 raises, so replica 0 is told to stop. If its code
    # catches that and reaches merge_call again, nobody will ever resume it: it must not wait.
    def fn() -> None:
        ctx = ds.get_replica_context()
        if _rid() == 1:
            raise KeyError("replica 1")
        try:
            ctx.merge_call(lambda s: None)
        except Exception:
            ctx.merge_call(lambda s: None)

    with pytest.raises(KeyError, match="replica 1"):
        ms2.run(fn)


def test_one_replica_results_are_fresh_arrays() -> None:
    # With one replica in all nothing is reduced, but results must still not be the caller's
    # arrays: in-place updates of a result would otherwise write into the input at world size 1
    # only (with more workers every result is a new array).
    s = ds.MirroredStrategy()
    x = np.arange(3.0)
    results = [
        s.reduce("SUM", x, axis=None),
        s.reduce("MEAN", x, axis=None),
        s.reduce("SUM", s.run(lambda: x), axis=None),
        s.gather(s.run(lambda: x), axis=0),
        s.run(lambda: ds.get_replica_context().all_reduce("SUM", x)),
        s.extended.reduce_to("SUM", x, x),
        s.extended.batch_reduce_to("MEAN", [(x, x)])[0],
    ]
    for r in results:
        assert not np.shares_memory(r, x)
        np.testing.assert_array_equal(r, x)


def test_bool_sum_of_two_replicas_raises_as_in_tf(ms2: ds.MirroredStrategy) -> None:
    # TF 2.21: InvalidArgumentError "Value for attr 'T' of bool is not in the list of allowed
    # values" (and the collective layer refuses bool SUM across workers alike).
    bools = ms2.run(lambda: np.array([True, False]))
    with pytest.raises(errors.InvalidArgumentError, match="bool"):
        ms2.reduce("SUM", bools, axis=None)


def test_replica_context_methods_require_context(ms2: ds.MirroredStrategy) -> None:
    def fn() -> None:
        ms2.reduce("SUM", 1.0, axis=None)

    with pytest.raises(RuntimeError, match="cross-replica context"):
        ms2.run(fn)
    other = ds.MirroredStrategy()
    with ms2.scope(), pytest.raises(RuntimeError, match="Mixing different"), other.scope():
        pass


def test_default_strategy() -> None:
    default = ds.get_strategy()
    assert not ds.has_strategy() and ds.get_replica_context() is not None
    assert ds.get_cross_replica_context() is None  # TF 2.21: the default replica context is current
    assert default.reduce("SUM", 3.0, axis=None) == 3.0
    assert default.experimental_local_results(1.0) == (1.0,)
    assert default.run(lambda: 5) == 5
    with pytest.raises(  # TF 2.21's words
        RuntimeError, match=r"^worker_devices\(\) method unsupported by default tf\.distribute"
    ):
        _ = default.extended.worker_devices


def test_reduce_non_distributed_value() -> None:
    # TF 2.21: only a non-tensor of zeros short-cuts to zeros; arrays are tensors here, and a
    # Python zero fails on `.shape` inside TF's own check.
    with pytest.raises(ValueError, match="cannot be reduced with the given reduce op"):
        reduce_non_distributed_value(ReduceOp.SUM, np.zeros(3), "/cpu:0", 2)
    with pytest.raises(AttributeError, match=r"^'float' object has no attribute 'shape'$"):
        reduce_non_distributed_value(ReduceOp.SUM, 0.0, "/cpu:0", 2)  # TF 2.21's own failure
    with pytest.raises(ValueError, match="destinations must be one of"):
        reduce_non_distributed_value(ReduceOp.SUM, np.ones(1), object(), 1)


def test_reduce_with_an_axis_densifies_indexed_slices() -> None:
    """TF's ``reduce_sum`` densifies an ``IndexedSlices`` (MEAN counts every dense row): TF 2.21
    gave these with two replicas, values ``[[1, 2], [3, 4]] + 100 * r``, indices ``[0, 1 + r]``,
    dense shape ``[4, 2]`` (it raised AttributeError here before)."""
    s = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def slices() -> mwms_mpi.IndexedSlices:
        r = int(ds.get_replica_context().replica_id_in_sync_group)
        values = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32) + 100 * r
        return mwms_mpi.IndexedSlices(values, np.array([0, 1 + r]), np.array([4, 2]))

    value = s.run(slices)
    assert s.reduce("SUM", value, axis=0).tolist() == [208.0, 212.0]
    assert s.reduce("MEAN", value, axis=0).tolist() == [26.0, 26.5]
    assert s.reduce("MEAN", value, axis=1).tolist() == [51.5, 1.75, 51.75, 0.0]

"""CrossDeviceOps and its implementations under ``MirroredStrategy(cross_device_ops=...)``.

Two CPU replicas; replica r contributes ``X * (r + 1)`` (X = [1, 2, 3], float32, or its int32
twin), so every expected value is a numpy expression of the two contributions (small integers:
sums are exact, a MEAN's halving too). The literals marked "TF 2.21" were printed by
``tensorflow-cpu==2.21.0`` for the same calls on two logical CPUs
(``tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=...)``), run once
outside this repository: ``ReductionToOneDevice``, ``NcclAllReduce`` and
``HierarchicalCopyAllReduce`` gave the same values, dtypes and kinds (``Mirrored``, a lone
tensor, ``PerReplica``) for every call below, except that TF's ``NcclAllReduce`` has no CPU
kernel (its batch reductions and ``ReplicaContext.all_reduce`` of floats raise
``InvalidArgumentError: No OpKernel was registered to support Op 'NcclAllReduce'``), where
mwms_mpi sums in-process as README says ("local (in-process) reductions").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi.types import ReduceOp
from mwms_mpi.values import Mirrored, PerReplica

X = np.array([1.0, 2.0, 3.0], np.float32)
SUM, MEAN = ReduceOp.SUM, ReduceOp.MEAN

OPS: dict[str, Callable[[], ds.CrossDeviceOps]] = {
    "ReductionToOneDevice": ds.ReductionToOneDevice,
    "NcclAllReduce": ds.NcclAllReduce,
    "HierarchicalCopyAllReduce": ds.HierarchicalCopyAllReduce,
    "NcclAllReduce(num_packs=0)": lambda: ds.NcclAllReduce(num_packs=0),
    "HierarchicalCopyAllReduce(num_packs=2)": lambda: ds.HierarchicalCopyAllReduce(num_packs=2),
    "ReductionToOneDevice(reduce_to_device)": lambda: ds.ReductionToOneDevice("/cpu:1"),
}

# TF 2.21, every implementation above: SUM [3, 6, 9], MEAN [1.5, 3, 4.5] (float32); int32
# values SUM to int32 and MEAN to float64 (truediv).
TF_SUM, TF_MEAN = [3.0, 6.0, 9.0], [1.5, 3.0, 4.5]


def _rid() -> int:
    ctx = ds.get_replica_context()
    assert ctx is not None
    return int(ctx.replica_id_in_sync_group)


def _inputs(dtype: Any = np.float32) -> list[np.ndarray]:
    """What each replica contributes (fresh arrays, kept by the test to check aliasing)."""
    return [X.astype(dtype) * (r + 1) for r in range(2)]


def _reference(op: ReduceOp, values: list[np.ndarray]) -> np.ndarray:
    """SUM in the values' dtype; MEAN a true division by 2 (int32: float64, as TF's truediv)."""
    total = values[0] + values[1]
    if op == SUM:
        return total
    return total / 2 if total.dtype.kind == "f" else total.astype(np.float64) / 2


def _parts(result: Any) -> tuple[str, tuple[np.ndarray, ...]]:
    """The result's kind as TF prints it (Mirrored, PerReplica, a lone array) and its arrays."""
    if isinstance(result, Mirrored | PerReplica):
        return type(result).__name__, tuple(result.values)
    assert isinstance(result, np.ndarray), type(result)
    return "array", (result,)


def _check(
    result: Any,
    kind: str,
    expected: np.ndarray,
    tf_values: list[float],
    inputs: list[np.ndarray],
    copies: int = 2,
) -> None:
    """``result`` is ``kind`` with ``copies`` equal, fresh arrays: numpy's and TF's values."""
    got_kind, arrays = _parts(result)
    assert got_kind == kind and len(arrays) == copies, (got_kind, arrays)
    for i, a in enumerate(arrays):
        assert a.dtype == expected.dtype, (a.dtype, expected.dtype)
        np.testing.assert_array_equal(a, expected)
        np.testing.assert_array_equal(a, np.array(tf_values, expected.dtype))
        assert not any(np.shares_memory(a, x) for x in inputs), "a result aliases an input"
        assert not any(np.shares_memory(a, b) for b in arrays[i + 1 :]), "copies share memory"


@pytest.fixture(params=list(OPS), scope="module")
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def ops(name: str) -> ds.CrossDeviceOps:
    return OPS[name]()


@pytest.fixture(scope="module")
def strategy(ops: ds.CrossDeviceOps) -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=ops)


@pytest.mark.parametrize("op", [SUM, MEAN], ids=["SUM", "MEAN"])
def test_the_ops_methods_reduce_to_each_destination(
    strategy: ds.MirroredStrategy, ops: ds.CrossDeviceOps, op: ReduceOp
) -> None:
    tf_values = TF_SUM if op == SUM else TF_MEAN
    xs = _inputs()
    pr = strategy.run(lambda: xs[_rid()])
    want = _reference(op, xs)
    _check(ops.reduce(op, pr, pr), "Mirrored", want, tf_values, xs)
    _check(ops.reduce(op, pr, "/cpu:0"), "array", want, tf_values, xs, copies=1)  # TF: a tensor
    first, second = ops.batch_reduce(op, [(pr, pr), (pr, "/cpu:1")])
    _check(first, "Mirrored", want, tf_values, xs)
    _check(second, "array", want, tf_values, xs, copies=1)
    ints = _inputs(np.int32)
    pri = strategy.run(lambda: ints[_rid()])
    _check(ops.reduce(op, pri, pri), "Mirrored", _reference(op, ints), tf_values, ints)
    host = np.array([7.0], np.float32)  # one value, no replicas: TF gives it to each device
    _check(ops.reduce(op, host, pr), "Mirrored", host, [7.0], [host])


def test_the_ops_broadcast_copies_to_each_destination(
    strategy: ds.MirroredStrategy, ops: ds.CrossDeviceOps
) -> None:
    pr = strategy.run(lambda: np.float32(_rid()))
    value = np.array([5.0, 6.0], np.float32)
    kind, arrays = _parts(ops.broadcast(value, pr))
    assert kind == "Mirrored" and len(arrays) == 2  # TF 2.21: Mirrored([5., 6.], [5., 6.])
    for a in arrays:
        np.testing.assert_array_equal(a, [5.0, 6.0])
        assert a.dtype == np.float32
    kind, arrays = _parts(ops.broadcast(value, "/cpu:1"))  # TF 2.21: the tensor [5., 6.]
    assert kind == "array"
    np.testing.assert_array_equal(arrays[0], [5.0, 6.0])


@pytest.mark.parametrize("op", [SUM, MEAN], ids=["SUM", "MEAN"])
def test_strategy_apis_through_the_given_ops(strategy: ds.MirroredStrategy, op: ReduceOp) -> None:
    tf_values = TF_SUM if op == SUM else TF_MEAN
    xs = _inputs()
    pr = strategy.run(lambda: xs[_rid()])
    want = _reference(op, xs)
    _check(strategy.reduce(op, pr, axis=None), "array", want, tf_values, xs, copies=1)
    _check(strategy.extended.reduce_to(op, pr, pr), "Mirrored", want, tf_values, xs)
    for out in strategy.extended.batch_reduce_to(op, [(pr, pr), (pr, pr)]):
        _check(out, "Mirrored", want, tf_values, xs)
    # TF 2.21: the results of run() are PerReplica, [3, 6] (SUM) or [1.5, 3] (MEAN)
    halves = [x[:2] for x in xs]
    out = strategy.run(lambda: ds.get_replica_context().all_reduce(op, halves[_rid()]))
    _check(out, "PerReplica", _reference(op, halves), tf_values[:2], halves)
    ints = [x[:2] for x in _inputs(np.int32)]
    out = strategy.run(lambda: ds.get_replica_context().all_reduce(op, ints[_rid()]))
    _check(out, "PerReplica", _reference(op, ints), tf_values[:2], ints)
    axis0 = strategy.reduce(op, pr, axis=0)  # TF 2.21: 18.0 (SUM), 3.0 (MEAN)
    assert axis0.dtype == np.float32 and axis0.shape == ()
    assert axis0 == (np.concatenate(xs).sum() / (1 if op == SUM else 6))


def test_gather_and_broadcast_to_through_the_given_ops(strategy: ds.MirroredStrategy) -> None:
    xs = _inputs()
    pr = strategy.run(lambda: xs[_rid()])
    gathered = strategy.gather(pr, axis=0)  # TF 2.21: [1, 2, 3, 2, 4, 6]
    _check(gathered, "array", np.concatenate(xs), [1.0, 2.0, 3.0, 2.0, 4.0, 6.0], xs, copies=1)
    ones = [np.array([1.0], np.float32) * (r + 1) for r in range(2)]
    out = strategy.run(lambda: ds.get_replica_context().all_gather(ones[_rid()], 0))
    _check(out, "PerReplica", np.concatenate(ones), [1.0, 2.0], ones)  # TF 2.21: [1, 2] each
    kind, arrays = _parts(strategy.extended.broadcast_to(np.array([5.0], np.float32), pr))
    assert kind == "Mirrored" and [a.tolist() for a in arrays] == [[5.0], [5.0]]  # TF 2.21


def _max_of(values: list[np.ndarray]) -> np.ndarray:
    return np.max(np.stack(values), axis=0)


def test_reduction_to_one_device_uses_the_accumulation_fn_where_tf_does() -> None:
    # TF 2.21 with accumulation_fn = the element-wise max. The ops' own reductions use it (MEAN
    # divides its result by the replica count); reduce_to and Strategy.reduce to CPU devices
    # take a fresh ReductionToOneDevice (TF's MirroredExtended._reduce_to), and int32 values
    # the in-process one (TF's _get_cross_device_ops): both ignore it.
    ops = ds.ReductionToOneDevice(accumulation_fn=_max_of)
    s = ds.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=ops)
    xs, ints = _inputs(), _inputs(np.int32)
    pr = s.run(lambda: xs[_rid()])
    pri = s.run(lambda: ints[_rid()])
    high = np.maximum(xs[0], xs[1])
    _check(ops.reduce(SUM, pr, pr), "Mirrored", high, [2.0, 4.0, 6.0], xs)
    _check(ops.reduce(MEAN, pr, pr), "Mirrored", high / 2, [1.0, 2.0, 3.0], xs)
    _check(ops.reduce(SUM, pri, pri), "Mirrored", np.maximum(*ints), [2, 4, 6], ints)
    int_mean = np.maximum(*ints).astype(np.float64) / 2
    _check(ops.reduce(MEAN, pri, pri), "Mirrored", int_mean, [1.0, 2.0, 3.0], ints)
    for op, tf_high in ((SUM, [2.0, 4.0, 6.0]), (MEAN, [1.0, 2.0, 3.0])):
        want = high if op == SUM else high / 2
        for out in s.extended.batch_reduce_to(op, [(pr, pr)]):
            _check(out, "Mirrored", want, tf_high, xs)
        out = s.run(lambda op=op: ds.get_replica_context().all_reduce(op, xs[_rid()]))
        _check(out, "PerReplica", want, tf_high, xs)
        plain = _reference(op, xs)
        tf_plain = TF_SUM if op == SUM else TF_MEAN
        _check(s.reduce(op, pr, axis=None), "array", plain, tf_plain, xs, copies=1)
        _check(s.extended.reduce_to(op, pr, pr), "Mirrored", plain, tf_plain, xs)
        out = s.run(lambda op=op: ds.get_replica_context().all_reduce(op, ints[_rid()]))
        _check(out, "PerReplica", _reference(op, ints), tf_plain, ints)


class _Recording(ds.ReductionToOneDevice):
    """A user's CrossDeviceOps: records which implementation methods the strategy calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def reduce_implementation(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("reduce")
        return super().reduce_implementation(*args, **kwargs)

    def batch_reduce_implementation(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("batch")
        return super().batch_reduce_implementation(*args, **kwargs)

    def broadcast_implementation(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("broadcast")
        return super().broadcast_implementation(*args, **kwargs)

    def _gather_implementation(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("gather")
        return super()._gather_implementation(*args, **kwargs)


def test_a_users_cross_device_ops_is_called_where_tf_calls_it() -> None:
    # TF 2.21, the same subclass of tf.distribute.ReductionToOneDevice, SUM and MEAN alike.
    ops = _Recording()
    s = ds.MirroredStrategy(["/cpu:0", "/cpu:1"], cross_device_ops=ops)
    xs, ints = _inputs(), _inputs(np.int32)
    pr = s.run(lambda: xs[_rid()])
    cases: list[tuple[str, Callable[[], Any], list[str]]] = [
        ("ops.reduce", lambda: ops.reduce(SUM, pr, pr), ["reduce", "broadcast"]),
        ("ops.reduce to a device", lambda: ops.reduce(MEAN, pr, "/cpu:0"), ["reduce", "broadcast"]),
        (
            "ops.batch_reduce",
            lambda: ops.batch_reduce(SUM, [(pr, pr), (pr, "/cpu:1")]),
            ["batch", "reduce", "broadcast", "reduce", "broadcast"],
        ),
        ("Strategy.reduce", lambda: s.reduce(SUM, pr, axis=None), []),
        ("reduce_to", lambda: s.extended.reduce_to(MEAN, pr, pr), []),
        (
            "batch_reduce_to",
            lambda: s.extended.batch_reduce_to(SUM, [(pr, pr), (pr, pr)]),
            ["batch", "reduce", "broadcast", "reduce", "broadcast"],
        ),
        (
            "all_reduce",
            lambda: s.run(lambda: ds.get_replica_context().all_reduce(MEAN, xs[_rid()])),
            ["batch", "reduce", "broadcast"],
        ),
        (
            "all_reduce of int32",
            lambda: s.run(lambda: ds.get_replica_context().all_reduce(SUM, ints[_rid()])),
            [],
        ),
        ("ops.broadcast", lambda: ops.broadcast(X, pr), ["broadcast"]),
        ("Strategy.gather", lambda: s.gather(pr, axis=0), ["gather", "broadcast"]),
        ("broadcast_to", lambda: s.extended.broadcast_to(X, pr), ["broadcast"]),
        (
            "all_gather",
            lambda: s.run(lambda: ds.get_replica_context().all_gather(xs[_rid()], 0)),
            ["gather", "broadcast"],
        ),
    ]
    for what, call, expected in cases:
        ops.calls.clear()
        call()
        assert ops.calls == expected, what


def test_negative_num_packs_are_refused_in_tf_words() -> None:
    with pytest.raises(
        ValueError, match=r"^NCCL all-reduce requires num_packs >= 0, but -1 is specified$"
    ):
        ds.NcclAllReduce(num_packs=-1)
    with pytest.raises(
        ValueError, match=r"^HierarchicalCopy requires num_packs >= 0, but -1 is specified$"
    ):
        ds.HierarchicalCopyAllReduce(num_packs=-1)


def test_a_broadcast_is_not_the_callers_array() -> None:
    # CrossDeviceOps.broadcast_implementation mirrored as_array(tensor) itself, so component 0
    # of the Mirrored was the input: a later edit of the input changed one replica's copy and
    # not the other's (TF's copies are tensors on each device). Strategy.extended.broadcast_to
    # of MirroredStrategy and MultiWorkerMirroredStrategy went the same way.
    s = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])
    pr = s.run(lambda: np.float32(_rid()))
    value = np.array([5.0, 6.0], np.float32)
    out = s.extended.broadcast_to(value, pr)
    value[0] = 99.0
    assert [a.tolist() for a in s.experimental_local_results(out)] == [[5.0, 6.0], [5.0, 6.0]]

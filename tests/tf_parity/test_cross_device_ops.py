"""Ported from TF 2.21's ``tensorflow/python/distribute/cross_device_ops_test.py``.

TF's ``CollectiveOpsTest`` drives the private ``CollectiveAllReduce`` of one or two processes
directly; its public counterpart, ported here, is the strategy's own cross-device ops:
``extended.reduce_to`` / ``extended.batch_reduce_to`` / ``gather`` in cross-replica context and
``ReplicaContext.all_reduce`` in replica context, with the same inputs by global replica id and
the same ``CommunicationOptions`` (AUTO and RING; NCCL needs GPUs). TF's outcomes are pinned in
``pins/test_cross_device_ops.json``; methods left out are listed in README.md.
"""

from __future__ import annotations

from typing import Any

from tests.support.differential import Backend, Outcomes, Scenarios
from tests.tf_parity import _ops
from tests.tf_parity._parity import parity_tests

IMPLEMENTATIONS = ("AUTO", "RING")


def _reduce(b: Backend, s: Any, make: Any, ops: tuple[str, ...]) -> Outcomes:
    """``reduce_to(op, v, v, options)`` of the per-replica ``make(rid)`` for every
    implementation and op."""
    o: Outcomes = {}
    for implementation in IMPLEMENTATIONS:
        options = _ops.communication_options(b, implementation)
        for op in ops:
            value = _ops.per_replica(b, s, make)
            o[f"{implementation}_{op}"] = b.outcome(
                lambda op=op, value=value, options=options: s.extended.reduce_to(
                    op, value, value, options
                )
            )
    return o


def _batch_reduce(b: Backend, s: Any, make: Any, size: int, ops: tuple[str, ...]) -> Outcomes:
    """``batch_reduce_to`` of ``size`` per-replica values, the i-th being ``make(rid)[i]``."""
    o: Outcomes = {}
    for implementation in IMPLEMENTATIONS:
        options = _ops.communication_options(b, implementation)
        for op in ops:
            pairs = []
            for i in range(size):
                value = _ops.per_replica(b, s, lambda rid, i=i: make(rid)[i])
                pairs.append((value, value))
            o[f"{implementation}_{op}"] = b.outcome(
                lambda op=op, pairs=pairs, options=options: s.extended.batch_reduce_to(
                    op, pairs, options
                )
            )
    return o


DENSE = [1.0, 2.0, 3.0, 4.0]
SPARSE = [
    ([[1.0], [2.0]], [0, 1]),
    ([[3.0], [4.0]], [1, 2]),
    ([[5.0], [6.0]], [7, 8]),
    ([[7.0], [8.0]], [3, 2]),
]


def reduce_dense(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testReduceDense: replica i holds ``[1, 2, 3, 4][i]``."""
    return _reduce(b, s, lambda rid: b.constant(DENSE[rid]), ("SUM", "MEAN"))


def reduce_sparse(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testReduceSparse: IndexedSlices of dense shape [10, 1], SUM (TF runs
    it only in a tf.function; this is the eager call)."""

    def make(rid: int) -> Any:
        values, indices = SPARSE[rid]
        return _ops.indexed_slices(b, values, indices, [10, 1])

    return _reduce(b, s, make, ("SUM",))


def reduce_sparse_variable_length(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testReduceSparseVariableLength: one and three rows (alternating by
    replica id beyond TF's two replicas)."""
    inputs = [([[1.0]], [0]), ([[2.0], [3.0], [4.0]], [0, 1, 2])]

    def make(rid: int) -> Any:
        values, indices = inputs[rid % 2]
        return _ops.indexed_slices(b, values, indices, [10, 1])

    return _reduce(b, s, make, ("SUM",))


def batch_reduce_dense(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testBatchReduceDense: replica i holds ``[[1, 2], [3, 4], ...][i]``."""
    data = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]
    return _batch_reduce(b, s, lambda rid: [b.constant(x) for x in data[rid]], 2, ("SUM", "MEAN"))


BATCH_SPARSE = [
    [([[1.0], [2.0]], [0, 1], [10, 1]), ([[3.0], [4.0]], [1, 2], [5, 1])],
    [([[5.0], [6.0]], [1, 2], [10, 1]), ([[7.0], [8.0]], [0, 1], [5, 1])],
    [([[9.0], [10.0]], [3, 4], [10, 1]), ([[11.0], [12.0]], [3, 4], [5, 1])],
    [([[13.0], [14.0]], [8, 9], [10, 1]), ([[15.0], [16.0]], [3, 4], [5, 1])],
]


def batch_reduce_sparse(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testBatchReduceSparse: two IndexedSlices per replica, SUM."""
    return _batch_reduce(
        b, s, lambda rid: [_ops.indexed_slices(b, *x) for x in BATCH_SPARSE[rid]], 2, ("SUM",)
    )


def batch_reduce_mixed(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testBatchReduceMixedDenseAndSparse: two scalars and two
    IndexedSlices per replica (TF's two replicas' inputs, alternating by replica id)."""
    dense = [[1.0, 2.0], [3.0, 4.0]]

    def make(rid: int) -> list[Any]:
        scalars = [b.constant(x) for x in dense[rid % 2]]
        return scalars + [_ops.indexed_slices(b, *x) for x in BATCH_SPARSE[rid % 2]]

    return _batch_reduce(b, s, make, 4, ("SUM",))


def _all_reduce(b: Backend, s: Any, make: Any, ops: tuple[str, ...]) -> Outcomes:
    """``ReplicaContext.all_reduce(op, make(), options)`` in every replica."""
    o: Outcomes = {}
    for implementation in IMPLEMENTATIONS:
        options = _ops.communication_options(b, implementation)
        for op in ops:

            def fn(op: str = op, options: Any = options) -> Any:
                return b.ctx().all_reduce(op, make(), options=options)

            o[f"{implementation}_{op}"] = b.outcome(
                lambda fn=fn: list(s.experimental_local_results(s.run(fn)))
            )
    return o


def all_reduce_dense(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testAllReduceDense: 1.0, then the tuple (1.0, 2.0) (TF 2.21 skips
    this method for a CI image bug; the program is ported)."""
    o = _all_reduce(b, s, lambda: b.constant(1.0), ("SUM", "MEAN"))
    batch = _all_reduce(b, s, lambda: (b.constant(1.0), b.constant(2.0)), ("SUM", "MEAN"))
    o.update({f"batch_{k}": v for k, v in batch.items()})
    return o


def _slices(b: Backend, value: float, index: int) -> Any:
    return _ops.indexed_slices(b, [[value]], [index], [5, 1])


def all_reduce_sparse(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testAllReduceSparse: one IndexedSlices, then a tuple of two (TF 2.21
    skips this method for a CI image bug; the program is ported)."""
    o = _all_reduce(b, s, lambda: _slices(b, 1.0, 0), ("SUM", "MEAN"))
    batch = _all_reduce(b, s, lambda: (_slices(b, 1.0, 0), _slices(b, 3.0, 2)), ("SUM", "MEAN"))
    o.update({f"batch_{k}": v for k, v in batch.items()})
    return o


def all_reduce_mixed(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testAllReduceMixedDenseAndSparse: slices, scalar, slices, scalar."""

    def make() -> Any:
        return (_slices(b, 1.0, 0), b.constant(1.0), _slices(b, 3.0, 2), b.constant(2.0))

    return _all_reduce(b, s, make, ("SUM",))


def all_gather_same_shape(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testAllGatherSameShape: ``[[[1, 2], [1, 2]]]`` from every replica,
    gathered along axes 0, 1 and 2 (``Strategy.gather``, the public face of ``_gather``)."""
    o: Outcomes = {}
    for axis in (0, 1, 2):
        value = _ops.per_replica(b, s, lambda rid: b.constant([[[1, 2], [1, 2]]], dtype="float32"))
        o[f"axis_{axis}"] = b.outcome(lambda axis=axis, value=value: s.gather(value, axis=axis))
    return o


def collective_v2_control_flow(b: Backend, s: Any) -> Outcomes:
    """CollectiveOpsTest.testCollectiveV2ControlFlow: a SUM reduce_to of ``[1.0]`` (in TF, in
    both branches of a ``tf.cond``), averaged over the local results."""
    options = _ops.communication_options(b, "RING")
    value = _ops.per_replica(b, s, lambda rid: b.constant([1.0]))

    def body() -> Any:
        reduced = list(
            s.experimental_local_results(s.extended.reduce_to("SUM", value, value, options))
        )
        total = reduced[0]
        for x in reduced[1:]:
            total = _ops.add(b, total, x)
        return total / len(reduced)

    return {"result": b.outcome(body)}


SCENARIOS: Scenarios = {
    "CollectiveOpsTest.testReduceDense": reduce_dense,
    "CollectiveOpsTest.testReduceSparse": reduce_sparse,
    "CollectiveOpsTest.testReduceSparseVariableLength": reduce_sparse_variable_length,
    "CollectiveOpsTest.testBatchReduceDense": batch_reduce_dense,
    "CollectiveOpsTest.testBatchReduceSparse": batch_reduce_sparse,
    "CollectiveOpsTest.testBatchReduceMixedDenseAndSparse": batch_reduce_mixed,
    "CollectiveOpsTest.testAllReduceDense": all_reduce_dense,
    "CollectiveOpsTest.testAllReduceSparse": all_reduce_sparse,
    "CollectiveOpsTest.testAllReduceMixedDenseAndSparse": all_reduce_mixed,
    "CollectiveOpsTest.testAllGatherSameShape": all_gather_same_shape,
    "CollectiveOpsTest.testCollectiveV2ControlFlow": collective_v2_control_flow,
}

FAILING: dict[str, str] = {}

test_m2, test_mwms = parity_tests(SCENARIOS, __file__, FAILING)

"""Ported from TF 2.21's ``tensorflow/python/distribute/strategy_common_test.py``.

Each scenario is keyed by the TF test method it comes from; TF's outcomes are pinned in
``pins/test_strategy_common.json`` (``_parity.py`` has the command). A ``tf.function`` wrapper
in TF's test is ported as the eager program it wraps; graph-only, TPU and GPU methods are listed
in README.md with the reason they are left out.
"""

from __future__ import annotations

from typing import Any

from tests.support.differential import Backend, Outcomes
from tests.tf_parity._parity import parity_tests


def capture_replica_id(b: Backend, s: Any) -> Outcomes:
    """StrategyTest.testCaptureReplicaId: ``run`` of a function reading the replica id, after
    creating a plain variable (TF's test makes g stateful so it is traced twice)."""
    b.Variable(0.0)
    return {"run": b.outcome(lambda: s.run(lambda: b.ctx().replica_id_in_sync_group))}


def merge_call_init_scope(b: Backend, s: Any) -> Outcomes:
    """StrategyTest.testMergeCallInitScope: a merge_call's constant, plus one, in every replica
    (``ops.init_scope`` has no eager effect)."""

    def replica_fn() -> Any:
        y = b.ctx().merge_call(lambda _: b.constant(11))
        return y + 1

    with s.scope():
        return {"local": b.outcome(lambda: s.experimental_local_results(s.run(replica_fn)))}


def _local_result(b: Backend, s: Any, fn: Any) -> Outcomes:
    with s.scope():
        return {"local": b.outcome(lambda: s.experimental_local_results(s.run(fn)))}


def local_result_dictionary(b: Backend, s: Any) -> Outcomes:
    """StrategyLocalResultTest.testLocalResultForDictionary."""
    return _local_result(b, s, lambda: {"a": b.constant(1.0), "b": b.constant(2.0)})


def local_result_list(b: Backend, s: Any) -> Outcomes:
    """StrategyLocalResultTest.testLocalResultForList."""
    return _local_result(b, s, lambda: [b.constant(1.0), b.constant(2.0)])


def local_result_tuple(b: Backend, s: Any) -> Outcomes:
    """StrategyLocalResultTest.testLocalResultForTuple."""
    return _local_result(b, s, lambda: (b.constant(1.0), b.constant(2.0), b.constant(3.0)))


def local_result_nested(b: Backend, s: Any) -> Outcomes:
    """StrategyLocalResultTest.testLocalResultForNestedStruct."""
    return _local_result(
        b,
        s,
        lambda: (
            {"a": b.constant(1.0), "b": b.constant(2.0)},
            {"a": b.constant(4.0), "b": b.constant(6.0)},
        ),
    )


def local_result_no_tensor(b: Backend, s: Any) -> Outcomes:
    """StrategyLocalResultTest.testLocalResultForNestedStructWithoutTensor: Python floats."""
    return _local_result(b, s, lambda: {"a": 1.0, "b": 2.0})


def local_result_scalar(b: Backend, s: Any) -> Outcomes:
    """StrategyLocalResultTest.testLocalResultForScalarValue: ``extended._get_local_replica_id``
    (private in TF, called by TF's test) of the replica id."""
    return _local_result(
        b, s, lambda: s.extended._get_local_replica_id(b.ctx().replica_id_in_sync_group)
    )


def local_result_dict_replicas(b: Backend, s: Any) -> Outcomes:
    """StrategyLocalResultTest.testLocalResultForDictionaryDifferentReplicas."""

    def fn() -> Any:
        rid = s.extended._get_local_replica_id(b.ctx().replica_id_in_sync_group)
        return {"a": b.constant(float(rid + 1)), "b": b.constant(float(rid + 2))}

    return _local_result(b, s, fn)


def local_result_tensor(b: Backend, s: Any) -> Outcomes:
    """StrategyLocalResultTest.testLocalResultForTensor."""
    return _local_result(b, s, lambda: b.constant([2.0, 3.0]))


def reduce_basic(b: Backend, s: Any) -> Outcomes:
    """ReduceTest.testBasic: SUM of ones from experimental_distribute_values_from_function,
    in and out of the scope (eager; TF's tf.function variant is the same call traced)."""
    value = s.experimental_distribute_values_from_function(lambda _: b.constant(1.0))
    o: Outcomes = {}
    with s.scope():
        o["in_scope"] = b.outcome(lambda: s.reduce(b.ds.ReduceOp.SUM, value=value, axis=None))
    o["out_of_scope"] = b.outcome(lambda: s.reduce(b.ds.ReduceOp.SUM, value=value, axis=None))
    return o


def reduce_axis(b: Backend, s: Any) -> Outcomes:
    """ReduceTest.testAxis: MEAN and SUM over axis 0 of a replica function's constant."""
    x = s.run(lambda: b.constant([1.0, 2.0]))
    return {
        "mean": b.outcome(lambda: s.reduce(b.ds.ReduceOp.MEAN, x, axis=0)),
        "sum": b.outcome(lambda: s.reduce(b.ds.ReduceOp.SUM, x, axis=0)),
    }


def dense_update(b: Backend, s: Any) -> Outcomes:
    """ReplicaCtxUpdateTest.testDenseUpdate, for each of assign/assign_add/assign_sub:
    ``ReplicaContext._update`` (private in TF, called by TF's test) with a tensor then a Python
    literal, on a MirroredVariable of 5."""
    o: Outcomes = {}
    fns = {
        "assign": lambda var, value: var.assign(value),
        "assign_add": lambda var, value: var.assign_add(value),
        "assign_sub": lambda var, value: var.assign_sub(value),
    }
    for name, update in fns.items():
        with s.scope():
            v = b.Variable(5.0)

        def replica_fn(v: Any = v, update: Any = update) -> None:
            ctx = b.ctx()
            ctx._update(v, update, args=(b.constant(2.0),))
            ctx._update(v, update, args=(1.0,))

        o[name] = b.outcome(lambda replica_fn=replica_fn: s.run(replica_fn))
        o[name + "_after"] = b.describe(list(s.experimental_local_results(v)))
    return o


def _ctx_all_reduce(b: Backend, s: Any, make: Any) -> Outcomes:
    def replica_fn() -> Any:
        return s.extended._replica_ctx_all_reduce(b.ds.ReduceOp.SUM, make())

    return {"first": b.outcome(lambda: s.experimental_local_results(s.run(replica_fn))[0])}


def _nested(b: Backend) -> Any:
    return (
        b.constant(1.0),
        b.indexed_slices([[1.0]], [0], [5, 1]),
        b.constant(2.0),
        b.indexed_slices([[2.0]], [1], [5, 1]),
    )


def replica_ctx_all_reduce_dense(b: Backend, s: Any) -> Outcomes:
    """ReplicaCtxAllReduceTest.testDense: ``extended._replica_ctx_all_reduce`` (private in TF,
    called by TF's test) of 1.0."""
    return _ctx_all_reduce(b, s, lambda: b.constant(1.0))


def replica_ctx_all_reduce_sparse(b: Backend, s: Any) -> Outcomes:
    """ReplicaCtxAllReduceTest.testSparse (eager program): of an IndexedSlices."""
    return _ctx_all_reduce(b, s, lambda: b.indexed_slices([[1.0]], [0], [5, 1]))


def replica_ctx_all_reduce_nested(b: Backend, s: Any) -> Outcomes:
    """ReplicaCtxAllReduceTest.testNestedInput (eager program): of a tuple of dense and
    IndexedSlices values."""
    return _ctx_all_reduce(b, s, lambda: _nested(b))


def replica_ctx_sync_on_read(b: Backend, s: Any) -> Outcomes:
    """ReplicaCtxAllReduceTest.testSyncOnReadVariableInput: a replica assigns 3 * its id to an
    ON_READ/ONLY_FIRST_REPLICA variable, then all-reduces the variable (SUM)."""
    with s.scope():
        var = b.Variable(
            0.0,
            synchronization=b.VariableSynchronization.ON_READ,
            aggregation=b.VariableAggregation.ONLY_FIRST_REPLICA,
        )

    def replica_fn() -> Any:
        var.assign(b.constant(b.rid() * 3.0))
        return b.ctx().all_reduce(b.ds.ReduceOp.SUM, var)

    return {"run": b.outcome(lambda: s.experimental_local_results(s.run(replica_fn)))}


def _all_reduce(b: Backend, s: Any, op: Any, make: Any) -> Outcomes:
    def replica_fn() -> Any:
        return b.ctx().all_reduce(op, make())

    return {"first": b.outcome(lambda: s.experimental_local_results(s.run(replica_fn))[0])}


def all_reduce_dense(b: Backend, s: Any) -> Outcomes:
    """AllReduceTest.testDense: SUM of 1.0 in replica context."""
    return _all_reduce(b, s, b.ds.ReduceOp.SUM, lambda: b.constant(1.0))


def all_reduce_sparse(b: Backend, s: Any) -> Outcomes:
    """AllReduceTest.testSparse (eager program): MEAN of an IndexedSlices stays IndexedSlices."""
    o = _all_reduce(b, s, b.ds.ReduceOp.MEAN, lambda: b.indexed_slices([[1.0]], [0], [5, 1]))

    def dense() -> Any:
        got = s.experimental_local_results(
            s.run(
                lambda: b.ctx().all_reduce(
                    b.ds.ReduceOp.MEAN, b.indexed_slices([[1.0]], [0], [5, 1])
                )
            )
        )[0]
        return b.to_dense(got)

    o["dense"] = b.outcome(dense)
    return o


def all_reduce_sparse_tuple(b: Backend, s: Any) -> Outcomes:
    """AllReduceTest.testSparseTuple (eager program): SUM of a list of two IndexedSlices."""
    return _all_reduce(
        b,
        s,
        b.ds.ReduceOp.SUM,
        lambda: [b.indexed_slices([[1.0]], [0], [5, 1]), b.indexed_slices([[2.0]], [0], [5, 1])],
    )


def all_reduce_nested(b: Backend, s: Any) -> Outcomes:
    """AllReduceTest.testNestedInput (eager program): SUM of dense and IndexedSlices values."""
    return _all_reduce(b, s, b.ds.ReduceOp.SUM, lambda: _nested(b))


def dataset_from_function(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testDatasetFromFunction: the first batch of
    a sharded, repeated range(100) through distribute_datasets_from_function, and its sum
    (TF raises ValueError at 4 replicas: 10 is not divisible by 4)."""

    def dataset_fn(ctx: Any) -> Any:
        batch = ctx.get_per_replica_batch_size(10)
        d = b.data.Dataset.range(100).repeat().batch(batch)
        return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)

    def first() -> Any:
        it = iter(s.distribute_datasets_from_function(dataset_fn))
        return s.experimental_local_results(it.get_next())

    return {"local": b.outcome(first), "sum": b.outcome(lambda: b.reduce_sum(first()))}


def last_partial_batch_dataset(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testSimpleInputFromDatasetLastPartialBatch:
    the second (partial) batch of range(14).batch(8) through experimental_distribute_dataset."""

    def second() -> Any:
        dataset = b.data.Dataset.range(14).batch(8, drop_remainder=False)
        it = iter(s.experimental_distribute_dataset(dataset))
        s.run(lambda x: x, args=(next(it),))
        return s.run(lambda x: x, args=(next(it),))

    return {"second": b.outcome(second)}


def last_partial_batch_fn(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testSimpleInputFromFnLastPartialBatch."""

    def dataset_fn(ctx: Any) -> Any:
        batch = ctx.get_per_replica_batch_size(8)
        d = b.data.Dataset.range(14).batch(batch, drop_remainder=False)
        return d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)

    def second() -> Any:
        it = iter(s.distribute_datasets_from_function(dataset_fn))
        s.run(lambda x: x, args=(next(it),))
        return s.run(lambda x: x, args=(next(it),))

    return {"second": b.outcome(second)}


def reduce_host_tensor(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testReduceHostTensor."""
    return {"sum": b.outcome(lambda: s.reduce(b.ds.ReduceOp.SUM, b.constant(1.0), axis=None))}


def reduce_to_host_tensor(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testReduceToHostTensor."""
    value = b.constant(1.0)
    return {"sum": b.outcome(lambda: s.extended.reduce_to(b.ds.ReduceOp.SUM, value, value))}


def batch_reduce_to_host_tensor(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testBatchReduceToHostTensor."""
    value = b.constant(1.0)
    pairs = [(value, value), (value, value)]
    return {"sum": b.outcome(lambda: s.extended.batch_reduce_to(b.ds.ReduceOp.SUM, pairs))}


def reduce_device_tensors(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testReduceDeviceTensors."""
    value = s.run(lambda: b.constant(1.0))
    return {"sum": b.outcome(lambda: s.reduce(b.ds.ReduceOp.SUM, value, axis=None))}


def reduce_to_device_tensors(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testReduceToDeviceTensors."""
    value = s.run(lambda: b.constant(1.0))
    return {"sum": b.outcome(lambda: s.extended.reduce_to(b.ds.ReduceOp.SUM, value, value))}


def batch_reduce_to_device_tensors(b: Backend, s: Any) -> Outcomes:
    """DistributedCollectiveAllReduceStrategyTest.testBatchReduceToDeviceTensors."""
    value = s.run(lambda: b.constant(1.0))
    pairs = [(value, value), (value, value)]
    return {"sum": b.outcome(lambda: s.extended.batch_reduce_to(b.ds.ReduceOp.SUM, pairs))}


def cluster_resolver_property(b: Backend, s: Any) -> Outcomes:
    """StrategyClusterResolverTest.testClusterResolverProperty: the resolver is None for
    MirroredStrategy; for MWMS it is the same object in the scope, has the resolver members,
    and names this worker's task (in a cluster of several workers, as TF's test runs it: a
    single TF worker has no TF_CONFIG and names no task, see README.md)."""
    resolver = s.cluster_resolver
    o: Outcomes = {"is_none": resolver is None}
    if resolver is None:
        return o
    with s.scope():
        o["same_in_scope"] = s.cluster_resolver is resolver
    for name in ("cluster_spec", "master", "num_accelerators", "task_id", "task_type"):
        o["has_" + name] = hasattr(resolver, name)
    if s.num_replicas_in_sync > 1:  # one worker: TF has no TF_CONFIG (None), ours 'worker'/0
        o["task_id"] = b.describe(resolver.task_id)
        o["task_type"] = b.describe(resolver.task_type)
    return o


SCENARIOS = {
    "StrategyTest.testCaptureReplicaId": capture_replica_id,
    "StrategyTest.testMergeCallInitScope": merge_call_init_scope,
    "StrategyLocalResultTest.testLocalResultForDictionary": local_result_dictionary,
    "StrategyLocalResultTest.testLocalResultForList": local_result_list,
    "StrategyLocalResultTest.testLocalResultForTuple": local_result_tuple,
    "StrategyLocalResultTest.testLocalResultForNestedStruct": local_result_nested,
    "StrategyLocalResultTest.testLocalResultForNestedStructWithoutTensor": local_result_no_tensor,
    "StrategyLocalResultTest.testLocalResultForScalarValue": local_result_scalar,
    "StrategyLocalResultTest.testLocalResultForDictionaryDifferentReplicas": (
        local_result_dict_replicas
    ),
    "StrategyLocalResultTest.testLocalResultForTensor": local_result_tensor,
    "ReduceTest.testBasic": reduce_basic,
    "ReduceTest.testAxis": reduce_axis,
    "ReplicaCtxUpdateTest.testDenseUpdate": dense_update,
    "ReplicaCtxAllReduceTest.testDense": replica_ctx_all_reduce_dense,
    "ReplicaCtxAllReduceTest.testSparse": replica_ctx_all_reduce_sparse,
    "ReplicaCtxAllReduceTest.testNestedInput": replica_ctx_all_reduce_nested,
    "ReplicaCtxAllReduceTest.testSyncOnReadVariableInput": replica_ctx_sync_on_read,
    "AllReduceTest.testDense": all_reduce_dense,
    "AllReduceTest.testSparse": all_reduce_sparse,
    "AllReduceTest.testSparseTuple": all_reduce_sparse_tuple,
    "AllReduceTest.testNestedInput": all_reduce_nested,
    "DistributedCollectiveAllReduceStrategyTest.testDatasetFromFunction": dataset_from_function,
    "DistributedCollectiveAllReduceStrategyTest.testSimpleInputFromDatasetLastPartialBatch": (
        last_partial_batch_dataset
    ),
    "DistributedCollectiveAllReduceStrategyTest.testSimpleInputFromFnLastPartialBatch": (
        last_partial_batch_fn
    ),
    "DistributedCollectiveAllReduceStrategyTest.testReduceHostTensor": reduce_host_tensor,
    "DistributedCollectiveAllReduceStrategyTest.testReduceToHostTensor": reduce_to_host_tensor,
    "DistributedCollectiveAllReduceStrategyTest.testBatchReduceToHostTensor": (
        batch_reduce_to_host_tensor
    ),
    "DistributedCollectiveAllReduceStrategyTest.testReduceDeviceTensors": reduce_device_tensors,
    "DistributedCollectiveAllReduceStrategyTest.testReduceToDeviceTensors": (
        reduce_to_device_tensors
    ),
    "DistributedCollectiveAllReduceStrategyTest.testBatchReduceToDeviceTensors": (
        batch_reduce_to_device_tensors
    ),
    "StrategyClusterResolverTest.testClusterResolverProperty": cluster_resolver_property,
}

FAILING: dict[str, str] = {}

test_m2, test_mwms = parity_tests(SCENARIOS, __file__, FAILING)

"""Ported from TF 2.21's ``tensorflow/python/distribute/mirrored_strategy_test.py``.

TF runs these methods on MirroredStrategy over two devices; here each eager program runs in
every configuration (M2 and MultiWorkerMirroredStrategy at 1, 2 and 4 workers), and the pins
(``pins/test_mirrored_strategy.json``) hold what TF 2.21 returned in each. Variables are made
inside ``extended.call_for_each_replica`` where TF's test makes them there. Methods left out
(graph mode, name scopes, GPUs, tracing counts, bodies in ``strategy_test_lib``) are listed in
README.md with the reason.
"""

from __future__ import annotations

from typing import Any

from tests.support.differential import Backend, Outcomes, Scenarios
from tests.tf_parity import _configs, _ops
from tests.tf_parity._parity import parity_tests


def _replica_id(b: Backend) -> Any:
    """TF's ``_replica_id()``: the replica id as an int32 tensor."""
    return _ops.identity(b, b.constant(int(b.rid()), dtype="int32"))


def num_replicas_in_sync(b: Backend, s: Any) -> Outcomes:
    """MirroredTwoDeviceDistributionTest.testNumReplicasInSync."""
    return {"num_replicas_in_sync": s.num_replicas_in_sync}


def reduce_to_cpu_nested(b: Backend, s: Any) -> Outcomes:
    """MirroredTwoDeviceDistributionTest.testReduceToCpuNested: SUM of a tuple out of
    ``run`` (``x + 1``, ``x - 1`` of 3.0)."""

    def replica_fn(x: Any) -> Any:
        return _ops.add(b, x, b.constant(1.0)), _ops.add(b, x, b.constant(-1.0))

    with s.scope():
        result = s.run(replica_fn, args=(b.constant(3.0),))
        return {"sum": b.outcome(lambda: s.reduce("SUM", result, axis=None))}


def run_regroup_error(b: Backend, s: Any) -> Outcomes:
    """MirroredTwoDeviceDistributionTest.testRunRegroupError: lists of different lengths per
    replica out of ``call_for_each_replica`` (TF: AssertionError when regrouped in one
    process)."""

    def run_fn() -> Any:
        return list(range(int(b.rid())))

    def call() -> Any:
        with s.scope():
            return s.extended.call_for_each_replica(run_fn)

    return {"result": b.outcome(call)}


def reduce_to_cpu(b: Backend, s: Any) -> Outcomes:
    """MirroredTwoDeviceDistributionTest.testReduceToCpu: SUM of the replica ids."""
    with s.scope():
        result = s.extended.call_for_each_replica(lambda: _replica_id(b))
        return {"sum": b.outcome(lambda: s.reduce("SUM", result, axis=None))}


def reduce_axis_to_cpu(b: Backend, s: Any) -> Outcomes:
    """MirroredTwoDeviceDistributionTest.testReduceAxisToCpu (and
    testReduceAxisToCpuUnknownShape, whose eager program is the same: shapes are always known
    eagerly): SUM and MEAN over axis 0 of per-replica lists of different lengths."""
    o: Outcomes = {}
    for dtype in ("float32", "int32"):

        def replica_fn(dtype: str = dtype) -> Any:
            rid = int(b.rid())
            return _ops.identity(b, b.constant([rid] * (rid + 1), dtype=dtype))

        with s.scope():
            result = s.extended.call_for_each_replica(replica_fn)
            o[f"sum_{dtype}"] = b.outcome(lambda r=result: s.reduce("SUM", r, axis=0))
            o[f"mean_{dtype}"] = b.outcome(lambda r=result: s.reduce("MEAN", r, axis=0))
    return o


def _device_type(device: Any) -> Any:
    """The device type in a device string (``.../device:CPU:0`` -> ``CPU``)."""
    text = str(device).upper()
    for kind in ("GPU", "CPU", "TPU"):
        if f"{kind}:" in text:
            return kind
    return text


def _prefetch(b: Backend, s: Any, to_device: bool) -> Outcomes:
    options = b.ds.InputOptions(experimental_fetch_to_device=to_device)
    dataset = b.data.Dataset.range(100).batch(s.num_replicas_in_sync)
    item = next(iter(s.experimental_distribute_dataset(dataset, options=options)))
    local = list(s.experimental_local_results(item))
    return {
        "item": b.describe(local),
        "worker_device_types": [_device_type(d) for d in s.extended.worker_devices],
    }


def prefetch_to_device(b: Backend, s: Any) -> Outcomes:
    """MirroredTwoDeviceDistributionTest.test_prefetch_to_device_dataset: each replica's
    batch, and the worker devices' type (a tensor's ``.device`` has no counterpart: mwms_mpi's
    tensors are numpy arrays, README.md)."""
    return _prefetch(b, s, True)


def prefetch_to_host(b: Backend, s: Any) -> Outcomes:
    """MirroredTwoDeviceDistributionTest.test_prefetch_to_host_dataset: the same with
    ``experimental_prefetch_to_device=False``."""
    return _prefetch(b, s, False)


def function_in_call_for_each_replica(b: Backend, s: Any) -> Outcomes:
    """MirroredStrategyCallForEachReplicaTest.testFunctionInCallForEachReplica (and
    ...InsideAnotherFunction, the same eager program): replica ids out of
    ``call_for_each_replica``; the function runs once per local replica."""
    calls = []

    def model_fn() -> Any:
        calls.append(1)
        return b.ctx().replica_id_in_sync_group

    with s.scope():
        result = s.extended.call_for_each_replica(model_fn)
        return {
            "local": b.describe(list(s.experimental_local_results(result))),
            "calls": len(calls),
        }


def function_with_merge_call(b: Backend, s: Any) -> Outcomes:
    """MirroredStrategyCallForEachReplicaTest.testFunctionInCallForEachReplicaWithMergeCall:
    an empty merge_call, then 0.0 out of every replica."""

    def model_fn() -> Any:
        b.ctx().merge_call(lambda _: None)
        return 0.0

    with s.scope():
        return {"result": b.outcome(lambda: s.extended.call_for_each_replica(model_fn))}


def _var_in_replica(b: Backend, s: Any, initial: float, **kw: Any) -> Any:
    """``call_for_each_replica(var_fn)`` making a variable in replica context, in scope."""
    return s.extended.call_for_each_replica(lambda: b.Variable(initial, name="foo", **kw))


def _is_mirrored(b: Backend, v: Any) -> Any:
    return type(v).__name__


def _replica_update(
    b: Backend, s: Any, initial: float, method: str, value: Any, **kw: Any
) -> Outcomes:
    """A variable made in replica context, ``method(value(rid))`` in replica context."""
    with s.scope():
        var = _var_in_replica(b, s, initial, **kw)
        o: Outcomes = {"type": _is_mirrored(b, var), "initial": b.outcome(var.read_value)}

        def model_fn() -> Any:
            return getattr(var, method)(value())

        o["update"] = b.outcome(
            lambda: list(s.experimental_local_results(s.extended.call_for_each_replica(model_fn)))
        )
        o["after"] = b.outcome(var.read_value)
        o["components"] = b.describe(list(s.experimental_local_results(var)))
        return o


def _replica_id_value(b: Backend) -> Any:
    return b.constant(b.rid(), dtype="float32")


def assign_no_aggregation(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignMirroredVarReplicaContextWithoutAggregationType."""
    return _replica_update(b, s, 1.0, "assign", lambda: 5.0)


def assign_sum(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignMirroredVarReplicaContextWithSum: a SUM variable
    assigned a non-distributed value in replica context (TF: ValueError with 2 replicas)."""
    return _replica_update(b, s, 1.0, "assign", lambda: 5.0, aggregation=b.VariableAggregation.SUM)


def _cross_replica(
    b: Backend, s: Any, initial: float, steps: list[tuple[str, float, bool]]
) -> Outcomes:
    with s.scope():
        var = _var_in_replica(b, s, initial)
        o: Outcomes = {"type": _is_mirrored(b, var), "initial": b.outcome(var.read_value)}
        for i, (method, value, read_value) in enumerate(steps):
            o[f"{i}_{method}"] = b.outcome(
                lambda method=method, value=value, rv=read_value: getattr(var, method)(
                    value, read_value=rv
                )
            )
            o[f"{i}_components"] = b.describe(list(s.experimental_local_results(var)))
        return o


def assign_cross_replica(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignMirroredVarCrossDeviceContext."""
    return _cross_replica(b, s, 1.0, [("assign", 6.0, True)])


def assign_mean_replica_id(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignMirroredVarReplicaContext: a MEAN variable
    assigned the replica id."""
    mean = b.VariableAggregation.MEAN
    return _replica_update(b, s, 1.0, "assign", lambda: _replica_id_value(b), aggregation=mean)


def assign_mean_single_value(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignMirroredVarReplicaContextWithSingleValue."""
    mean = b.VariableAggregation.MEAN
    return _replica_update(b, s, 1.0, "assign", lambda: 5.0, aggregation=mean)


def assign_add_cross_replica(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignAddMirroredVarCrossDeviceContext (the private
    ``_devices`` check is left out)."""
    return _cross_replica(b, s, 1.0, [("assign_add", 6.0, True), ("assign_add", 2.0, False)])


def assign_add_mean_replica_id(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignAddMirroredVarReplicaContext."""
    mean = b.VariableAggregation.MEAN
    return _replica_update(b, s, 1.0, "assign_add", lambda: _replica_id_value(b), aggregation=mean)


def assign_add_mean_single_value(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignAddMirroredVarReplicaContextWithSingleValue."""
    mean = b.VariableAggregation.MEAN
    return _replica_update(b, s, 1.0, "assign_add", lambda: 5.0, aggregation=mean)


def assign_sub_cross_replica(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignSubMirroredVarCrossDeviceContext."""
    return _cross_replica(b, s, 5.0, [("assign_sub", 2.0, True)])


def assign_sub_mean_replica_id(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignSubMirroredVarReplicaContext."""
    mean = b.VariableAggregation.MEAN
    return _replica_update(b, s, 5.0, "assign_sub", lambda: _replica_id_value(b), aggregation=mean)


def assign_sub_mean_single_value(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableUpdateTest.testAssignSubMirroredVarReplicaContextWithSingleValue."""
    mean = b.VariableAggregation.MEAN
    return _replica_update(b, s, 5.0, "assign_sub", lambda: 1.0, aggregation=mean)


def _sync_on_read_assign(b: Backend, s: Any, aggregation: Any) -> Outcomes:
    with s.scope():
        v = s.extended.call_for_each_replica(
            lambda: b.Variable(
                1.0, synchronization=b.VariableSynchronization.ON_READ, aggregation=aggregation
            )
        )
        o: Outcomes = {"type": type(v).__name__}
        o["read_var"] = b.outcome(lambda: s.extended.read_var(v))
        o["assign"] = b.outcome(lambda: v.assign(6.0))
        o["read_var_after"] = b.outcome(lambda: s.extended.read_var(v))
        o["components"] = b.describe(list(s.experimental_local_results(v)))
        return o


def sync_on_read_sum(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableAssignTest.testAssignReplicaLocalVarSumAggregation."""
    return _sync_on_read_assign(b, s, b.VariableAggregation.SUM)


def sync_on_read_mean(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableAssignTest.testAssignReplicaLocalVarMeanAggregation."""
    return _sync_on_read_assign(b, s, b.VariableAggregation.MEAN)


SCENARIOS: Scenarios = {
    "MirroredTwoDeviceDistributionTest.testNumReplicasInSync": num_replicas_in_sync,
    "MirroredTwoDeviceDistributionTest.testRunRegroupError": run_regroup_error,
    "MirroredTwoDeviceDistributionTest.testReduceToCpu": reduce_to_cpu,
    "MirroredTwoDeviceDistributionTest.testReduceToCpuNested": reduce_to_cpu_nested,
    "MirroredTwoDeviceDistributionTest.testReduceAxisToCpu": reduce_axis_to_cpu,
    "MirroredTwoDeviceDistributionTest.testReduceAxisToCpuUnknownShape": reduce_axis_to_cpu,
    "MirroredTwoDeviceDistributionTest.test_prefetch_to_device_dataset": prefetch_to_device,
    "MirroredTwoDeviceDistributionTest.test_prefetch_to_host_dataset": prefetch_to_host,
    "MirroredStrategyCallForEachReplicaTest.testFunctionInCallForEachReplica": (
        function_in_call_for_each_replica
    ),
    "MirroredStrategyCallForEachReplicaTest."
    "testFunctionInCallForEachReplicaInsideAnotherFunction": function_in_call_for_each_replica,
    "MirroredStrategyCallForEachReplicaTest.testFunctionInCallForEachReplicaWithMergeCall": (
        function_with_merge_call
    ),
    "MirroredVariableUpdateTest.testAssignMirroredVarReplicaContextWithoutAggregationType": (
        assign_no_aggregation
    ),
    "MirroredVariableUpdateTest.testAssignMirroredVarReplicaContextWithSum": assign_sum,
    "MirroredVariableUpdateTest.testAssignMirroredVarCrossDeviceContext": assign_cross_replica,
    "MirroredVariableUpdateTest.testAssignMirroredVarReplicaContext": assign_mean_replica_id,
    "MirroredVariableUpdateTest.testAssignMirroredVarReplicaContextWithSingleValue": (
        assign_mean_single_value
    ),
    "MirroredVariableUpdateTest.testAssignAddMirroredVarCrossDeviceContext": (
        assign_add_cross_replica
    ),
    "MirroredVariableUpdateTest.testAssignAddMirroredVarReplicaContext": (
        assign_add_mean_replica_id
    ),
    "MirroredVariableUpdateTest.testAssignAddMirroredVarReplicaContextWithSingleValue": (
        assign_add_mean_single_value
    ),
    "MirroredVariableUpdateTest.testAssignSubMirroredVarCrossDeviceContext": (
        assign_sub_cross_replica
    ),
    "MirroredVariableUpdateTest.testAssignSubMirroredVarReplicaContext": (
        assign_sub_mean_replica_id
    ),
    "MirroredVariableUpdateTest.testAssignSubMirroredVarReplicaContextWithSingleValue": (
        assign_sub_mean_single_value
    ),
    "SyncOnReadVariableAssignTest.testAssignReplicaLocalVarSumAggregation": sync_on_read_sum,
    "SyncOnReadVariableAssignTest.testAssignReplicaLocalVarMeanAggregation": sync_on_read_mean,
}

FAILING = _configs.failing_in({})

test_m2, test_mwms = parity_tests(SCENARIOS, __file__, FAILING)

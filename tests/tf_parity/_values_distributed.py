"""The DistributedValuesTest and PerReplicaTest scenarios of ``test_values.py``, apart to keep
each module short; keyed there."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.support.differential import Backend, Outcomes


def _local(s: Any, x: Any) -> Any:
    return s.experimental_local_results(x)


def _cast_float32(b: Backend, x: Any) -> Any:
    """``math_ops.cast(x, float32)``: TF's op, or mwms_mpi's tensor conversion then astype."""
    tf = getattr(b, "tf", None)
    if tf is not None:
        return tf.cast(x, tf.float32)
    from mwms_mpi.values.convert import as_array

    return np.asarray(as_array(x)).astype(np.float32)


def _gather(b: Backend, s: Any, value: Any) -> Any:
    """TF's ``distribute/test_util.gather`` with public calls: the components of every replica
    stacked on a new axis 0 (MWMS: ``strategy.gather`` of them expanded; else a local stack)."""
    tf = getattr(b, "tf", None)
    stack = tf.stack if tf is not None else np.stack
    expand = tf.expand_dims if tf is not None else np.expand_dims

    def one(v: Any) -> Any:
        is_distributed = isinstance(v, b.ds.DistributedValues)
        parts = list(_local(s, v)) if is_distributed else [v]
        # TF's stack/expand_dims convert Python numbers as tf.constant does (float32, int32)
        parts = [p if hasattr(p, "dtype") else b.constant(p) for p in parts]
        if not isinstance(s, b.ds.MultiWorkerMirroredStrategy):
            return stack(parts)
        return s.gather(b.per_replica([expand(p, 0) for p in parts]), axis=0)

    if isinstance(value, tuple | list):
        return type(value)(one(v) for v in value)
    return one(value)


def _from_function(b: Backend, s: Any, value_fn: Any) -> Outcomes:
    """The local results (TF's older test) and the gathered values (TF 2.21's test)."""

    def dv() -> Any:
        return s.experimental_distribute_values_from_function(value_fn)

    return {
        "local": b.outcome(lambda: _local(s, dv())),
        "gathered": b.outcome(lambda: _gather(b, s, dv())),
    }


def value_from_tensor(b: Backend, s: Any) -> Outcomes:
    """DistributedValuesTest.testMakeDistributedValueFromTensor: one tensor for every replica."""
    single = b.constant(1)
    return _from_function(b, s, lambda _: single)


def value_numpy_array(b: Backend, s: Any) -> Outcomes:
    """DistributedValuesTest.testMakeDistributedValueSingleNumpyArrayConstant: each replica's
    value, dense, and whether it is the array itself (TF keeps the ndarray; ours has no
    Tensor/ndarray distinction to describe)."""
    array = np.array([1.0, 2.0, 3.0])

    def local() -> Any:
        return _local(s, s.experimental_distribute_values_from_function(lambda _: array))

    return {
        "dense": b.outcome(lambda: [b.to_dense(x) for x in local()]),
        "is_array": b.outcome(lambda: [x is array for x in local()]),
        "gathered": b.outcome(
            lambda: _gather(b, s, s.experimental_distribute_values_from_function(lambda _: array))
        ),
    }


def value_tuple(b: Backend, s: Any) -> Outcomes:
    """DistributedValuesTest.testMakeDistributedValueTupleConstant: a tuple of Python floats."""
    return _from_function(b, s, lambda _: (1.0, 2.0, 3.0))


def value_nested(b: Backend, s: Any) -> Outcomes:
    """DistributedValuesTest.testMakeDistributedValueNestedStructurePerReplica: a tuple scaled
    by the replica id, whole and gathered (TF 2.21's test gathers it; an older one returned a
    list and read it back with ``select_replica``)."""

    def value_fn(ctx: Any) -> Any:
        return tuple(v * ctx.replica_id_in_sync_group for v in (1.0, 2.0, 3.0))

    def dv() -> Any:
        return s.experimental_distribute_values_from_function(value_fn)

    return {"value": b.outcome(dv), "gathered": b.outcome(lambda: _gather(b, s, dv()))}


def value_extract(b: Backend, s: Any) -> Outcomes:
    """DistributedValuesTest.testMakeDistributedValueExtractFromArray: element ``replica id``
    of ``range(num_replicas_in_sync)``."""
    values = range(s.num_replicas_in_sync)
    return _from_function(b, s, lambda ctx: values[ctx.replica_id_in_sync_group])


def value_and_run(b: Backend, s: Any) -> Outcomes:
    """DistributedValuesTest.testMakeDistributedValueAndRun (eager program): the square of each
    replica's value through ``run``."""

    def program() -> Any:
        values = range(s.num_replicas_in_sync)
        dv = s.experimental_distribute_values_from_function(
            lambda ctx: values[ctx.replica_id_in_sync_group]
        )
        return s.run(lambda x: x * x, args=(dv,))

    return {
        "local": b.outcome(lambda: _local(s, program())),
        "gathered": b.outcome(lambda: _gather(b, s, program())),
    }


def per_replica_invalid_context(b: Backend, s: Any) -> Outcomes:
    """PerReplicaTest.testUsePerReplicaInvalidContextGivesError: converting per-replica values
    to a tensor (``cast``) outside a replica context is refused."""
    values = range(s.num_replicas_in_sync)
    dv = s.experimental_distribute_values_from_function(
        lambda ctx: values[ctx.replica_id_in_sync_group]
    )
    return {"cast": b.outcome(lambda: _cast_float32(b, dv))}

"""Ported from ``tensorflow/python/distribute/values_test.py``. TF 2.21's own copy is not
installed; two stored copies were read: a 2022+ one (``DistributedValuesTest`` with
``test_util.gather``, ``PerReplicaTest``, ``DistributedDelegateTest``, ``SyncOnReadVariableTest``)
and a ~2020 one whose ``DistributedVariableTest``, ``MirroredVariableTest``, the rest of
``SyncOnReadVariableTest`` and ``SyncOnReadScatterReplicaTest`` have since moved to other TF test
files; they are kept here under their class names. Methods whose API TF 2.21 no longer has in
``values`` (``regroup``, ``select_replica``), graph-only, TPU, GPU, central-storage, TF1 ``Saver``
and randomness-dependent methods are listed in README.md with their reason.

A ``tf.function`` in TF's test is ported as the eager program; parameterized methods loop over
their parameters inside one scenario. TF's outcomes are pinned in ``pins/test_values.json``.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from tests.support.differential import Backend, Outcomes
from tests.tf_parity._parity import parity_tests
from tests.tf_parity._values_distributed import (
    per_replica_invalid_context,
    value_and_run,
    value_extract,
    value_from_tensor,
    value_nested,
    value_numpy_array,
    value_tuple,
)
from tests.tf_parity._values_on_read import (
    _sync_scatter,
    sync_assign,
    sync_assign_add_sub_sum,
    sync_assign_before_read,
    sync_assign_dtype,
    sync_assign_sum,
    sync_read_cross,
    sync_read_none,
    sync_read_replica,
)


def _local(s: Any, x: Any) -> Any:
    return s.experimental_local_results(x)


def _rid_int(b: Backend) -> Any:
    return b.constant(int(b.rid()))


class _Foo:
    def __init__(self, x: int) -> None:
        self.x = x


def delegate_getattr(b: Backend, s: Any) -> Outcomes:
    """DistributedDelegateTest.testGetAttr (on ``Mirrored``, TF's public DistributedDelegate):
    attributes come from the first component; a missing one is an AttributeError."""
    v = b.mirrored((_Foo(7), _Foo(8)))
    return {"x": b.outcome(lambda: v.x), "y": b.outcome(lambda: v.y)}


_OPS = {
    "add": lambda v: v + 1,
    "radd": lambda v: 3 + v,
    "add_self": lambda v: v + v,
    "sub": lambda v: v - 2,
    "rsub": lambda v: 13 - v,
    "sub_self": lambda v: v - v,
    "mul": lambda v: v * 2,
    "rmul": lambda v: 3 * v,
    "mul_self": lambda v: v * v,
    "div": lambda v: v / 2,
    "rdiv": lambda v: 10.5 / v,
    "floordiv": lambda v: v // 2,
    "rfloordiv": lambda v: 15 // v,
    "mod": lambda v: v % 2,
    "rmod": lambda v: 16 % v,
    "lt": lambda v: v < 12,
    "le": lambda v: v <= 12,
    "gt": lambda v: v > 12,
    "ge": lambda v: v >= 12,
    "rlt": lambda v: 12 < v,  # noqa: SIM300 (the reflected operator)
    "rle": lambda v: 12 <= v,  # noqa: SIM300 (the reflected operator)
    "rgt": lambda v: 12 > v,  # noqa: SIM300 (the reflected operator)
    "rge": lambda v: 12 >= v,  # noqa: SIM300 (the reflected operator)
    "and": lambda v: v & 3,
    "rand": lambda v: 11 & v,
    "or": lambda v: v | 8,
    "ror": lambda v: 16 | v,
    "xor": lambda v: v ^ 3,
    "rxor": lambda v: 11 ^ v,
    "pow": lambda v: pow(v, 3),
    "pow_mod": lambda v: pow(v, 3, 10),
    "rpow": lambda v: pow(2, v),
    "neg": lambda v: -v,
    "invert": lambda v: ~v,
    "abs": lambda v: abs(v),
    "getitem": lambda v: v[2],
}


def delegate_operators(b: Backend, s: Any) -> Outcomes:
    """DistributedDelegateTest.testOperatorOverride (on ``Mirrored((7, 8))``): every operator
    acts on the first component, 7; indexing an int is a TypeError."""
    v = b.mirrored((7, 8))
    return {name: b.outcome(lambda op=op: op(v)) for name, op in _OPS.items()}


def delegate_copy(b: Backend, s: Any) -> Outcomes:
    """DistributedDelegateTest.testCopy: shallow and deep copies delegate like the original."""
    v = b.mirrored((_Foo(7), _Foo(8)))
    return {
        "copy": b.outcome(lambda: copy.copy(v).x),
        "deepcopy": b.outcome(lambda: copy.deepcopy(v).x),
    }


def sync_pass_to_function(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testCanPassToDefFun (eager program): ``v + 1.`` of a MEAN ON_READ
    variable in the cross-replica context."""
    with s.scope():
        v = b.Variable(
            1.0,
            aggregation=b.VariableAggregation.MEAN,
            synchronization=b.VariableSynchronization.ON_READ,
        )
    return {"add1": b.outcome(lambda: v + 1.0)}


def sync_value_cross_replica(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testValueInCrossReplicaContext (public construction; TF builds the
    variable from hand-made components): ``value()`` of an ONLY_FIRST_REPLICA ON_READ variable
    whose replicas hold different values is the first component's."""
    with s.scope():
        v = b.Variable(
            0.0,
            aggregation=b.VariableAggregation.ONLY_FIRST_REPLICA,
            synchronization=b.VariableSynchronization.ON_READ,
        )
    s.run(lambda: v.assign(b.constant(b.rid() + 1.0)))
    return {"value": b.outcome(v.value), "first": b.describe(_local(s, v)[0].read_value())}


def sync_value_default_replica(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testValueInDefaultReplicaContext (eager program): two SUM ON_READ
    variables updated in every replica, added in the cross-replica context."""
    with s.scope():
        v1, v2 = (
            b.Variable(
                0.0,
                aggregation=b.VariableAggregation.SUM,
                synchronization=b.VariableSynchronization.ON_READ,
            )
            for _ in range(2)
        )

    def replica_fn() -> None:
        v1.assign_add(1.0)
        v2.assign_add(2.0)

    o: Outcomes = {"run": b.outcome(lambda: s.run(replica_fn))}
    o["sum"] = b.outcome(lambda: v1 + v2)
    return o


_SYNCS = ("ON_READ", "ON_WRITE")
_AGGS = ("MEAN", "SUM", "ONLY_FIRST_REPLICA")


def extends_variable(b: Backend, s: Any) -> Outcomes:
    """DistributedVariableTest.testExtendsVariable, for every synchronization x aggregation."""
    o: Outcomes = {}
    for sync, agg in itertools.product(_SYNCS, _AGGS):
        with s.scope():
            v = b.Variable(
                1.0,
                synchronization=getattr(b.VariableSynchronization, sync),
                aggregation=getattr(b.VariableAggregation, agg),
            )
        o[f"{sync}_{agg}"] = isinstance(v, b.Variable)
    return o


def assign_signature(b: Backend, s: Any) -> Outcomes:
    """DistributedVariableTest.testAssignSignature: assign/assign_add/assign_sub with
    positional and keyword ``use_locking``, ``name``, ``read_value``, in the cross-replica
    context (not for ON_READ/SUM, as TF's test) and through ``run``."""
    o: Outcomes = {}
    for sync, agg in itertools.product(_SYNCS, _AGGS):
        with s.scope():
            v = b.Variable(
                0.0,
                synchronization=getattr(b.VariableSynchronization, sync),
                aggregation=getattr(b.VariableAggregation, agg),
            )

            def assign(v: Any = v) -> Any:
                one = b.constant(1.0)
                for method in (v.assign, v.assign_add, v.assign_sub):
                    method(one, True, "assign", False)
                    method(one, use_locking=True, name="assign", read_value=False)
                return b.constant(1)

            if not (sync == "ON_READ" and agg == "SUM"):
                o[f"{sync}_{agg}_cross"] = b.outcome(lambda assign=assign: _local(s, assign()))
            o[f"{sync}_{agg}_run"] = b.outcome(lambda assign=assign: _local(s, s.run(assign)))
    return o


def _components(b: Backend, s: Any, v: Any) -> Any:
    return b.describe([c.read_value() for c in _local(s, v)])


def value_in_replica_context(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testValueInReplicaContext (eager): ``assign_add(1.)`` then
    ``value()`` of a MEAN variable in every replica."""
    with s.scope():
        v = b.Variable(1.0, aggregation=b.VariableAggregation.MEAN)

    def f() -> Any:
        v.assign_add(1.0)
        return v.value()

    return {"local": b.outcome(lambda: _local(s, s.run(f)))}


def assign_out_of_scope(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testAssignOutOfScope: assign outside the scope reaches every
    component."""
    with s.scope():
        v = b.Variable(1.0)
    return {
        "assign": b.outcome(lambda: v.assign(3.0)),
        "read": b.outcome(v.read_value),
        "components": _components(b, s, v),
    }


def mean_non_float(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testAssignAggregationMeanDTypeNonFloat: an int32 MEAN variable takes
    neither per-replica values in replica context, but the same value, a mirrored variable, and
    any value in the cross-replica context."""
    o: Outcomes = {}
    with s.scope():
        o["create"] = b.outcome(
            lambda: b.Variable(1, aggregation=b.VariableAggregation.MEAN, dtype="int32")
        )
        if "raises" in o["create"]:  # TF 2.21 refuses MEAN of a non-float variable
            return o
        v = b.Variable(1, aggregation=b.VariableAggregation.MEAN, dtype="int32")
    o["replica_ids"] = b.outcome(lambda: _local(s, s.run(lambda: v.assign(_rid_int(b)))))
    o["same"] = b.outcome(lambda: _local(s, s.run(lambda: v.assign(2))))
    o["after_same"] = b.outcome(v.read_value)
    with s.scope():
        v2 = b.Variable(3, aggregation=b.VariableAggregation.SUM, dtype="int32")
    o["mirrored"] = b.outcome(lambda: _local(s, s.run(lambda: v.assign(v2))))
    o["after_mirrored"] = b.outcome(v.read_value)
    with s.scope():
        o["cross"] = b.outcome(lambda: v.assign(4))
        o["after_cross"] = b.outcome(v.read_value)
    return o


def only_first_replica(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testAggregationOnlyFirstReplica: every replica assigns its id; the
    first replica's value wins."""
    with s.scope():
        v = b.Variable(
            15.0,
            synchronization=b.VariableSynchronization.ON_WRITE,
            aggregation=b.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    return {"local": b.outcome(lambda: _local(s, s.run(lambda: v.assign(b.constant(b.rid())))))}


def init_scope(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testInitScope (eager program): MEAN variables created on the first
    call inside ``run`` (the second from the first's value), then ``assign_add(2)``."""
    obj: dict[str, Any] = {}

    def assign() -> Any:
        if "w" not in obj:
            obj["w"] = b.Variable(0, aggregation=b.VariableAggregation.MEAN)
            obj["v"] = b.Variable(obj["w"].read_value(), aggregation=b.VariableAggregation.MEAN)
        return obj["v"].assign_add(2)

    return {"local": b.outcome(lambda: _local(s, s.run(assign)))}


def assign_add_mean(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testAssignAdd: ``assign_add(2)`` of an int MEAN variable in every
    replica."""
    with s.scope():
        o: Outcomes = {
            "create": b.outcome(lambda: b.Variable(1, aggregation=b.VariableAggregation.MEAN))
        }
        if "raises" in o["create"]:  # TF 2.21 refuses MEAN of a non-float variable
            return o
        v = b.Variable(1, aggregation=b.VariableAggregation.MEAN)
    o["local"] = b.outcome(lambda: _local(s, s.run(lambda: v.assign_add(2))))
    return o


def _scatter(b: Backend, s: Any, init: Any, agg: str, method: str, make: Any) -> Any:
    with s.scope():
        v = b.Variable(init, aggregation=getattr(b.VariableAggregation, agg))
    return b.outcome(lambda: _local(s, s.run(lambda: getattr(v, method)(make()))))


def scatter_sub(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testScatterSub: replica r subtracts [r, r + 1] at [r, r + 1]."""

    def make() -> Any:
        r = int(b.rid())
        return b.indexed_slices([float(r), float(r + 1)], [r, r + 1], [3])

    return {"local": _scatter(b, s, [0.0, 0.0, 0.0], "MEAN", "scatter_sub", make)}


def scatter_add(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testScatterAdd: replica r adds [r, r + 1] at [r, r + 1] (SUM)."""

    def make() -> Any:
        r = int(b.rid())
        return b.indexed_slices([r, r + 1], [r, r + 1], [3])

    return {"local": _scatter(b, s, [0, 0, 0], "SUM", "scatter_add", make)}


def scatter_div(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testScatterDiv: replica r divides element r by r + 2 (SUM)."""

    def make() -> Any:
        r = int(b.rid())
        return b.indexed_slices([r + 2], [r], [3])

    return {"local": _scatter(b, s, [1, 6, 1], "SUM", "scatter_div", make)}


def scatter_mul(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testScatterMul: replica r multiplies element r by r + 2 (MEAN)."""

    def make() -> Any:
        r = int(b.rid())
        return b.indexed_slices([float(r + 2)], [r], [3])

    return {"local": _scatter(b, s, [2.0, 1.0, 1.0], "MEAN", "scatter_mul", make)}


def _scatter_pair(b: Backend, s: Any, method: str, init: Any, value: int, index: int) -> Outcomes:
    make = lambda: b.indexed_slices([value], [index], [3])  # noqa: E731
    return {
        "sum": _scatter(b, s, init, "SUM", method, make),
        "only_first": _scatter(b, s, init, "ONLY_FIRST_REPLICA", method, make),
    }


def scatter_min(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testScatterMin: refused for SUM, applied for ONLY_FIRST_REPLICA."""
    return _scatter_pair(b, s, "scatter_min", [0, 2, 0], 1, 1)


def scatter_max(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testScatterMax."""
    return _scatter_pair(b, s, "scatter_max", [0, 0, 0], 1, 0)


def scatter_update(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testScatterUpdate."""
    return _scatter_pair(b, s, "scatter_update", [0, 0, 0], 3, 1)


def scatter_cross_replica(b: Backend, s: Any) -> Outcomes:
    """MirroredVariableTest.testScatterOpsInCrossReplicaContext: scatter_add on a SUM variable
    and scatter_min on a plain one, in the scope."""
    with s.scope():
        v1 = b.Variable([1, 1, 1], aggregation=b.VariableAggregation.SUM)
        v2 = b.Variable([1, 1, 1])
    value = b.indexed_slices([2], [0], [3])
    with s.scope():
        return {
            "scatter_add": b.outcome(lambda: v1.scatter_add(value)),
            "v1": b.outcome(v1.read_value),
            "scatter_min": b.outcome(lambda: v2.scatter_min(value)),
            "v2": b.outcome(v2.read_value),
        }


_M = "MirroredVariableTest."
_S = "SyncOnReadVariableTest."
_R = "SyncOnReadScatterReplicaTest."
_V = "DistributedValuesTest."

SCENARIOS = {
    _V + "testMakeDistributedValueFromTensor": value_from_tensor,
    _V + "testMakeDistributedValueSingleNumpyArrayConstant": value_numpy_array,
    _V + "testMakeDistributedValueTupleConstant": value_tuple,
    _V + "testMakeDistributedValueNestedStructurePerReplica": value_nested,
    _V + "testMakeDistributedValueExtractFromArray": value_extract,
    _V + "testMakeDistributedValueAndRun": value_and_run,
    "PerReplicaTest.testUsePerReplicaInvalidContextGivesError": per_replica_invalid_context,
    "DistributedDelegateTest.testGetAttr": delegate_getattr,
    "DistributedDelegateTest.testOperatorOverride": delegate_operators,
    "DistributedDelegateTest.testCopy": delegate_copy,
    _S + "testCanPassToDefFun": sync_pass_to_function,
    _S + "testValueInCrossReplicaContext": sync_value_cross_replica,
    _S + "testValueInDefaultReplicaContext": sync_value_default_replica,
    "DistributedVariableTest.testExtendsVariable": extends_variable,
    "DistributedVariableTest.testAssignSignature": assign_signature,
    _M + "testValueInReplicaContext": value_in_replica_context,
    _M + "testAssignOutOfScope": assign_out_of_scope,
    _M + "testAssignAggregationMeanDTypeNonFloat": mean_non_float,
    _M + "testAggregationOnlyFirstReplica": only_first_replica,
    _M + "testInitScope": init_scope,
    _M + "testAssignAdd": assign_add_mean,
    _M + "testScatterSub": scatter_sub,
    _M + "testScatterAdd": scatter_add,
    _M + "testScatterDiv": scatter_div,
    _M + "testScatterMul": scatter_mul,
    _M + "testScatterMin": scatter_min,
    _M + "testScatterMax": scatter_max,
    _M + "testScatterUpdate": scatter_update,
    _M + "testScatterOpsInCrossReplicaContext": scatter_cross_replica,
    _S + "testAssign": sync_assign,
    _S + "testAssignDtypeConversion": sync_assign_dtype,
    _S + "testAssignWithAggregationSum": sync_assign_sum,
    _S + "testAssignAddSubWithAggregationSum": sync_assign_add_sub_sum,
    _S + "testReadValueInReplicaContext": sync_read_replica,
    _S + "testReadValueInCrossReplicaContext": sync_read_cross,
    _S + "testAssignPerReplicaBeforeRead": sync_assign_before_read,
    _S + "testReadValueWithAggregationNoneInCrossReplicaContext": sync_read_none,
    _R + "testScatterSub": _sync_scatter("scatter_sub"),
    _R + "testScatterAdd": _sync_scatter("scatter_add"),
    _R + "testScatterDiv": _sync_scatter("scatter_div"),
    _R + "testScatterMul": _sync_scatter("scatter_mul"),
    _R + "testScatterMin": _sync_scatter("scatter_min"),
    _R + "testScatterMax": _sync_scatter("scatter_max"),
    # TF's testScatterUpdate calls scatter_min (sic) on a [0, 0, 0] variable.
    _R + "testScatterUpdate": _sync_scatter("scatter_update", "scatter_min"),
}

FAILING: dict[str, str] = {}

test_m2, test_mwms = parity_tests(SCENARIOS, __file__, FAILING)

"""The SyncOnRead scenarios of ``test_values.py`` (TF's ``SyncOnReadVariableTest`` and
``SyncOnReadScatterReplicaTest``), apart to keep each module short; keyed there."""

from __future__ import annotations

import itertools
from typing import Any

from tests.support.differential import Backend, Outcomes

_AGGS = ("MEAN", "SUM", "ONLY_FIRST_REPLICA")


def _local(s: Any, x: Any) -> Any:
    return s.experimental_local_results(x)


def _components(b: Backend, s: Any, v: Any) -> Any:
    return b.describe([c.read_value() for c in _local(s, v)])


_ON_READ_AGGS = ("NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA")


def _on_read(b: Backend, s: Any, init: Any, agg: str) -> Any:
    with s.scope():
        return b.Variable(
            init,
            synchronization=b.VariableSynchronization.ON_READ,
            aggregation=getattr(b.VariableAggregation, agg),
        )


def _sync_assign(b: Backend, s: Any, updates: Any) -> Outcomes:
    o: Outcomes = {}
    for (fn, value), agg, cross in itertools.product(updates, _ON_READ_AGGS, (True, False)):
        if cross and agg in ("SUM", "NONE"):
            continue
        v = _on_read(b, s, 0.0, agg)
        key = f"{fn}_{agg}_{'cross' if cross else 'replica'}"

        def update(v: Any = v, fn: str = fn, value: Any = value) -> Any:
            return getattr(v, fn)(value)

        if cross:
            o[key] = b.outcome(update)
        else:
            o[key] = b.outcome(lambda update=update: _local(s, s.run(update)))
        o[key + "_components"] = _components(b, s, v)
    return o


def sync_assign(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testAssign (eager): assign 1 / assign_add 1 / assign_sub -1 for
    each aggregation, in either context (not cross-replica SUM/NONE, as TF's test)."""
    return _sync_assign(b, s, (("assign", 1.0), ("assign_add", 1.0), ("assign_sub", -1.0)))


def sync_assign_dtype(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testAssignDtypeConversion: the same with Python ints."""
    return _sync_assign(b, s, (("assign", 1), ("assign_add", 1), ("assign_sub", -1)))


def sync_assign_sum(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testAssignWithAggregationSum: assigning ``num_replicas`` to a SUM
    variable leaves 1 in each component."""
    v = _on_read(b, s, 0.0, "SUM")
    return {
        "assign": b.outcome(lambda: v.assign(1.0 * s.num_replicas_in_sync)),
        "components": _components(b, s, v),
    }


def sync_assign_add_sub_sum(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testAssignAddSubWithAggregationSum: cross-replica assign_add/sub."""
    v = _on_read(b, s, 0.0, "SUM")
    return {
        "assign_add": b.outcome(lambda: v.assign_add(1.0)),
        "assign_sub": b.outcome(lambda: v.assign_sub(1.0)),
    }


def sync_read_replica(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testReadValueInReplicaContext: ``read_value`` through ``run``
    for each aggregation, against the components."""
    o: Outcomes = {}
    for agg in _ON_READ_AGGS:
        v = _on_read(b, s, 0.0, agg)
        o[agg] = b.outcome(lambda v=v: _local(s, s.run(v.read_value)))
        o[agg + "_components"] = _components(b, s, v)
    return o


def sync_read_cross(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testReadValueInCrossReplicaContext (SUM): each replica assigns its
    id; ``read_value``, ``value`` and the variable read in the cross-replica context."""
    v = _on_read(b, s, 0.0, "SUM")
    return {
        "assign": b.outcome(lambda: _local(s, s.run(lambda: v.assign(b.constant(b.rid()))))),
        "read_value": b.outcome(v.read_value),
        "value": b.outcome(v.value),
        "components": _components(b, s, v),
    }


def sync_assign_before_read(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testAssignPerReplicaBeforeRead: what assign returns per replica."""
    o: Outcomes = {}
    for agg in ("SUM", "MEAN", "ONLY_FIRST_REPLICA"):
        v = _on_read(b, s, 0.0, agg)
        o[agg] = b.outcome(lambda v=v: _local(s, s.run(lambda: v.assign(b.constant(b.rid())))))
    return o


def sync_read_none(b: Backend, s: Any) -> Outcomes:
    """SyncOnReadVariableTest.testReadValueWithAggregationNoneInCrossReplicaContext."""
    v = _on_read(b, s, 0.0, "NONE")
    return {"read_value": b.outcome(v.read_value)}


_SCATTER_DELTAS = {
    "scatter_sub": ([[0.0], [1.0]], [0, 1], [[1.0], [2.0]], [1, 2], [1.0, 1.0, 1.0]),
    "scatter_add": ([[0.0], [1.0]], [0, 1], [[1.0], [2.0]], [1, 2], [1.0, 1.0, 1.0]),
    "scatter_div": ([[2.0], [2.0]], [0, 1], [[3.0], [3.0]], [1, 2], [2.0, 6.0, 1.0]),
    "scatter_mul": ([[2.0], [3.0]], [0, 1], [[4.0], [5.0]], [1, 2], [2.0, 1.0, 1.0]),
    "scatter_min": ([[1.0], [8.0]], [0, 1], [[9.0], [2.0]], [1, 2], [3.0, 4.0, 5.0]),
    "scatter_max": ([[1.0], [8.0]], [0, 1], [[9.0], [2.0]], [1, 2], [3.0, 4.0, 5.0]),
    "scatter_update": ([[1.0], [2.0]], [0, 1], [[3.0], [4.0]], [1, 2], [0.0, 0.0, 0.0]),
}


def _sync_scatter(method: str, call: str | None = None) -> Any:
    """The scenario of one SyncOnReadScatterReplicaTest method: ``method`` names its deltas,
    ``call`` the variable method it calls (default: ``method``)."""

    def scenario(b: Backend, s: Any) -> Outcomes:
        v1, i1, v2, i2, init = _SCATTER_DELTAS[method]
        o: Outcomes = {}
        for agg in _AGGS:
            v = _on_read(b, s, init, agg)
            delta = b.per_replica([b.indexed_slices(v1, i1, [3]), b.indexed_slices(v2, i2, [3])])
            o[agg] = b.outcome(lambda v=v, d=delta: s.run(getattr(v, call or method), args=(d,)))
        return o

    scenario.__doc__ = (
        f"SyncOnReadScatterReplicaTest: ``{call or method}`` of a two-component PerReplica of "
        "IndexedSlices on an ON_READ variable, through ``run``, for each aggregation."
    )
    return scenario

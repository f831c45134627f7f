"""Six behaviours of TF 2.21 that mwms_mpi once differed from (issue 24): the default strategy,
M1/M2 (``MirroredStrategy`` over one and two local CPUs).

Every expected value below is what TF 2.21.0 did when the same program ran under it (scratch
programs under ``/work/tfscratch/known_diffs/``: ``probe1.py`` .. ``probe3.py``, run with
``/work/tfvenv/bin/python``); each test names the TF behaviour it pins. TF is never imported
here. The MultiWorkerMirroredStrategy side is ``tests/mpi/test_tf_known_differences.py``.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import data, errors
from mwms_mpi.types import VariableAggregation
from mwms_mpi.values import Mirrored, MirroredVariable, PerReplica, Variable

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


@pytest.fixture(scope="module")
def m1() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0"])


@pytest.fixture(scope="module")
def m2() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _ints(strategy: Any, value: Any) -> list[Any]:
    return [np.asarray(x).tolist() for x in strategy.experimental_local_results(value)]


# -- 1. the default strategy's input and run methods ----------------------------------------------


def test_default_experimental_distribute_dataset_returns_the_dataset_itself() -> None:
    """TF: ``_DefaultDistributionExtended._experimental_distribute_dataset`` returns
    ``dataset`` (``is``), options or not; iterating it gives its own batches, partial last
    one included; whatever is passed comes back (a list: ``[1, 2]``)."""
    default = ds.get_strategy()
    dataset = data.Dataset.range(5).batch(2)
    assert default.experimental_distribute_dataset(dataset) is dataset
    assert default.experimental_distribute_dataset(dataset, ds.InputOptions()) is dataset
    assert [x.tolist() for x in default.experimental_distribute_dataset(dataset)] == [
        [0, 1],
        [2, 3],
        [4],
    ]
    assert iter(default.experimental_distribute_dataset(dataset)).get_next().tolist() == [0, 1]
    listed = [1, 2]
    assert default.experimental_distribute_dataset(listed) is listed


def test_default_distribute_datasets_from_function_returns_what_fn_returns() -> None:
    """TF: ``dataset_fn(InputContext())``: one pipeline, id 0, one replica in sync; the
    function's return value itself (a dataset, or even ``5``), under both names."""
    default = ds.get_strategy()
    contexts: list[Any] = []
    made = data.Dataset.range(3)

    def fn(ctx: Any) -> Any:
        contexts.append(ctx)
        return made

    assert default.distribute_datasets_from_function(fn) is made
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert default.experimental_distribute_datasets_from_function(fn) is made
    assert [int(x) for x in default.distribute_datasets_from_function(fn)] == [0, 1, 2]
    ctx = contexts[0]
    assert type(ctx) is ds.InputContext
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync) == (1, 0, 1)
    assert ctx.get_per_replica_batch_size(4) == 4
    assert default.distribute_datasets_from_function(lambda _: 5) == 5


def test_default_run_and_local_results() -> None:
    """TF: ``run`` calls ``fn`` once in the default replica context and returns its result
    itself (``is`` for an array); ``experimental_local_results(x)`` is ``(x,)``, ``None``
    and lists included; ``args`` that is not a list or tuple is TF's ``ValueError``."""
    default = ds.get_strategy()
    a = np.array([1.0])
    assert default.run(lambda x: x, args=(a,)) is a
    assert default.run(lambda x=1: x, kwargs={"x": 4}) == 4
    assert default.run(lambda: [1, 2]) == [1, 2]
    assert default.run(ds.get_replica_context) is not None
    assert default.experimental_local_results(None) == (None,)
    assert default.experimental_local_results([1, 2]) == ([1, 2],)
    with pytest.raises(ValueError, match=r"^positional args must be a list or tuple, got"):
        default.run(lambda x: x, args=5)  # type: ignore[arg-type]


def test_default_make_dataset_iterator() -> None:
    """TF: the default strategy's (deprecated) iterators are ``DefaultInputIterator``s over
    the dataset itself: ``get_next`` 0, an optional holding 1, then a full optional and an
    empty one, then ``OutOfRangeError``; ``input_fn`` gets ``InputContext()``; the iterator
    is not iterable (``TypeError``); PER_REPLICA is TF's ``ValueError``."""
    default = ds.get_strategy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        it = default.make_dataset_iterator(data.Dataset.range(3))
        contexts: list[Any] = []

        def input_fn(ctx: Any) -> Any:
            contexts.append(ctx)
            return data.Dataset.range(2)

        from_fn = default.make_input_fn_iterator(input_fn)
        with pytest.raises(ValueError, match=r"^Input replication mode not supported: "):
            default.make_input_fn_iterator(input_fn, ds.InputReplicationMode.PER_REPLICA)
    assert type(it).__name__ == "DefaultInputIterator"
    assert int(it.get_next()) == 0
    assert int(it.get_next_as_optional().get_value()) == 1
    assert [bool(it.get_next_as_optional().has_value()) for _ in range(2)] == [True, False]
    with pytest.raises(errors.OutOfRangeError):
        it.get_next()
    with pytest.raises(TypeError):
        iter(it)  # type: ignore[call-overload]
    assert int(from_fn.get_next()) == 0
    ctx = contexts[0]
    assert (ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync) == (1, 0, 1)


# -- 2. scope mixing ------------------------------------------------------------------------------


def _mixing(current: Any, required: Any) -> str:
    text = f"Mixing different tf.distribute.Strategy objects: {current} is not {required}"
    return "^" + re.escape(text) + "$"


def test_variable_in_strategy_scope_inside_default_scope_is_refused(m2: Any) -> None:
    """TF: the default scope installs a variable creator requiring the default strategy; the
    inner scope enters fine, but a variable made there (or in its ``run``) raises
    ``RuntimeError('Mixing different ...: <M2> is not <default>')``, before its initial value
    is computed and before the MEAN-of-an-int check."""
    default = ds.get_strategy()
    with default.scope():
        with m2.scope():
            assert ds.get_strategy() is m2
            with pytest.raises(RuntimeError, match=_mixing(m2, default)):
                Variable(1.0)
            with pytest.raises(RuntimeError, match=_mixing(m2, default)):
                m2.run(lambda: Variable(1.0))
            calls: list[int] = []  # refused before the initial value, and before its dtype
            with pytest.raises(RuntimeError, match=_mixing(m2, default)):
                Variable(lambda: calls.append(1) or 1.0)
            assert calls == []
            with pytest.raises(RuntimeError, match=_mixing(m2, default)):
                Variable(1, aggregation=VariableAggregation.MEAN)
        assert type(Variable(2.0)) is Variable  # the default scope alone: a plain variable
    with m2.scope():
        assert type(Variable(3.0)) is MirroredVariable  # nothing left behind


def test_default_scope_inside_strategy_scope_must_not_nest(m2: Any) -> None:
    """TF: entering the default scope while a strategy is current raises
    ``RuntimeError('Must not nest tf.distribute.Strategy scopes.')`` (not "Mixing"), in the
    strategy's scope and in its replica functions."""
    default = ds.get_strategy()
    nest = r"^Must not nest tf\.distribute\.Strategy scopes\.$"
    with m2.scope(), pytest.raises(RuntimeError, match=nest), default.scope():
        pass

    seen: list[str] = []

    def in_replica() -> None:
        try:
            with default.scope():
                seen.append("entered")
        except RuntimeError as exc:
            seen.append(str(exc))

    m2.run(in_replica)
    assert seen == ["Must not nest tf.distribute.Strategy scopes."] * 2


def test_two_strategies_scopes_mix(m1: Any, m2: Any) -> None:
    """TF: ``m2.scope()`` then ``m1.scope()`` raises at entry, "Mixing ...: <m2> is not <m1>";
    the same scope twice is fine."""
    with m2.scope():
        with pytest.raises(RuntimeError, match=_mixing(m2, m1)), m1.scope():
            pass
        with m2.scope():
            assert type(Variable(1.0)) is MirroredVariable


def test_default_scope_changes_no_context() -> None:
    """TF: ``_DefaultDistributionContext`` only installs a creator: inside it (and nested in
    itself) the default replica context stays current, there is no cross-replica context and
    no strategy; a default ``merge_call`` may still enter a strategy's scope and make a
    variable."""
    default = ds.get_strategy()
    outside = ds.get_replica_context()
    with default.scope(), default.scope():
        assert ds.get_replica_context() is outside
        assert not ds.in_cross_replica_context()
        assert not ds.has_strategy()
        assert type(Variable(1.0)) is Variable
    other = ds.MirroredStrategy(["/cpu:0"])

    def merge_fn(_: Any) -> Any:
        with other.scope():
            return Variable(1.0)

    assert outside is not None
    assert type(outside.merge_call(merge_fn)) is MirroredVariable


# -- 3. update_non_slot ---------------------------------------------------------------------------


def _variables(strategy: Any) -> tuple[Any, Any]:
    with strategy.scope():
        return Variable(1.0, name="v"), Variable(2.0, name="w")


def test_default_update_non_slot_calls_fn_for_anything() -> None:
    """TF: the default strategy runs ``fn`` once whatever ``colocate_with`` is (an array, a
    variable, a string); ``non_slot_devices(var_list)`` is the variable with the least name;
    ``group=False`` gives ``(result,)``."""
    default = ds.get_strategy()
    v, w = _variables(default)
    assert default.extended.non_slot_devices([w, v]) is v
    for colocate_with in (np.array([1.0]), v, "/cpu:0", (CPU0,)):
        assert default.extended.update_non_slot(colocate_with, lambda: 5.0) == 5.0
    assert default.extended.update_non_slot(v, lambda: 5.0, group=False) == (5.0,)


@pytest.mark.parametrize("bad", ["array", "variable", "string"])
def test_mirrored_update_non_slot_asserts_a_tuple(m1: Any, m2: Any, bad: str) -> None:
    """TF: ``MirroredExtended._update_non_slot`` asserts ``isinstance(colocate_with, tuple)``
    (``AssertionError``) before calling ``fn``: a bare array, a variable or a device string
    is refused, at one replica as at two."""
    for strategy in (m1, m2):
        v, _ = _variables(strategy)
        colocate_with = {"array": np.array([1.0]), "variable": v, "string": "/cpu:0"}[bad]
        calls: list[int] = []
        with pytest.raises(AssertionError, match="update_non_slot"):
            strategy.extended.update_non_slot(colocate_with, calls.append, args=(1,))
        assert calls == []


def test_mirrored_update_non_slot_runs_once_per_colocated_device(m1: Any, m2: Any) -> None:
    """TF: ``fn`` runs once per device of ``colocate_with`` (not per replica): M2's
    ``non_slot_devices`` gives a ``Mirrored`` of two results, a one-device tuple gives the
    plain result; M1 gives the plain result; ``group=False`` gives a tuple."""
    v, w = _variables(m2)
    devices = m2.extended.non_slot_devices([v, w])
    assert devices == (CPU0, CPU1)
    result = m2.extended.update_non_slot(devices, lambda: np.float32(5.0))
    assert type(result) is Mirrored and _ints(m2, result) == [5.0, 5.0]
    ungrouped = m2.extended.update_non_slot(devices, lambda: np.float32(5.0), group=False)
    assert ungrouped == (5.0, 5.0)  # a new result per device: nothing to regroup
    assert m2.extended.update_non_slot((CPU0,), lambda: 5.0) == 5.0
    v1, w1 = _variables(m1)
    assert m1.extended.non_slot_devices([v1, w1]) == (CPU0,)
    assert m1.extended.update_non_slot((CPU0,), lambda: 5.0) == 5.0
    assert m1.extended.update_non_slot((CPU0,), lambda: 5.0, group=False) == (5.0,)


# -- 4. group -------------------------------------------------------------------------------------


def test_group_default_strategy() -> None:
    """TF (eager): ``group`` flattens ``experimental_local_results(value)``; one element is
    returned itself, anything else (or a ``name``) is ``tf.group``'s eager ``None``."""
    default = ds.get_strategy()
    t = np.float32(1.0)
    a = np.array(1.0)
    assert default.group(t) is t
    assert default.group(a) is a
    assert default.group(3) == 3
    assert default.group({"a": t}) is t
    assert default.group([t, t]) is None
    assert default.group([]) is None
    assert default.group(None) is None
    assert default.group(t, name="g") is None
    v, _ = _variables(default)
    assert default.group(v) is v


def test_group_mirrored(m1: Any, m2: Any) -> None:
    """TF (eager): at M2 a tensor is itself, but a list, a ``PerReplica``, a mirrored variable
    or a dict have two local results or more: ``None``; at M1 a replica value is itself and a
    mirrored variable gives its one component."""
    t = np.float32(1.0)
    assert m2.group(t) is t
    assert m2.group([t, t]) is None
    assert m2.group({"a": t}) is None
    per_replica = m2.run(lambda: np.int32(ds.get_replica_context().replica_id_in_sync_group))
    assert type(per_replica) is PerReplica and m2.group(per_replica) is None
    v2, _ = _variables(m2)
    assert m2.group(v2) is None
    assert m1.group(t) is t
    assert m1.group([]) is None
    assert m1.group({"a": t}) is t
    v1, _ = _variables(m1)
    assert m1.group(v1) is v1.values[0]


def test_group_of_an_update_is_none(m1: Any) -> None:
    """TF (eager): an update's result is an ``_UnreadVariable``, whose ``.op`` is ``None``, so
    ``group`` of it is ``None`` (default strategy; M1 in and out of ``run``); a read value is
    itself."""
    default = ds.get_strategy()
    v = Variable(1.0)
    assert default.group(v.assign_add(1.0)) is None
    assert default.group(v.assign_add(1.0, read_value=False)) is None
    w, _ = _variables(m1)
    assert m1.group(w.assign_add(1.0)) is None
    assert m1.group(m1.run(lambda: w.assign_add(1.0))) is None
    read = w.read_value()
    assert m1.group(read) is read


# -- 5. the Mirrored MEAN short-circuit -----------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2], ids=["M1", "M2"])
def test_mean_of_mirrored_is_the_callers_object(m1: Any, m2: Any, k: int) -> None:
    """TF: ``_reduce_to`` returns a ``Mirrored`` value itself for MEAN (``reduce_to(...) is
    mirrored``, whatever the destinations), so ``reduce`` gives its first component
    (``is``); a mirrored variable likewise; SUM fails TF's assertion."""
    strategy = m1 if k == 1 else m2
    mirrored = Mirrored(tuple(np.array([1.0, 2.0], np.float32) for _ in range(k)))
    assert strategy.reduce("MEAN", mirrored, axis=None) is mirrored.values[0]
    assert strategy.extended.reduce_to("MEAN", mirrored, "/cpu:0") is mirrored
    assert strategy.extended.reduce_to("MEAN", mirrored, mirrored) is mirrored
    with pytest.raises(AssertionError):
        strategy.reduce("SUM", mirrored, axis=None)
    with strategy.scope():
        v = Variable([1.0, 2.0])
    assert strategy.reduce("MEAN", v, axis=None) is v.values[0]
    assert strategy.extended.reduce_to("MEAN", v, v) is v
    assert float(strategy.reduce("MEAN", mirrored, axis=0)) == 1.5


# -- 6. unbatched datasets from a function -------------------------------------------------------


def _optional_steps(strategy: Any, dist: Any, steps: int) -> list[Any]:
    it = iter(dist)
    out: list[Any] = []
    for _ in range(steps):
        opt = it.get_next_as_optional()
        has = bool(opt.has_value())
        out.append([has, _ints(strategy, opt.get_value()) if has else None])
    return out


def _get_next_steps(strategy: Any, dist: Any, steps: int) -> list[Any]:
    it = iter(dist)
    out: list[Any] = []
    try:
        for _ in range(steps):
            out.append(_ints(strategy, it.get_next()))
    except errors.OutOfRangeError:
        out.append("OutOfRangeError")
    return out


# TF 2.21, M2: replicas take elements in turn; a step needs one element per replica, so a
# for-loop and get_next drop the odd last one, and get_next_as_optional pads it with 0.
M2_UNBATCHED = {
    5: {
        "iter": [[0, 1], [2, 3]],
        "get_next": [[0, 1], [2, 3], "OutOfRangeError"],
        "optional": [[True, [0, 1]], [True, [2, 3]], [True, [4, 0]], [False, None]],
    },
    6: {
        "iter": [[0, 1], [2, 3], [4, 5]],
        "get_next": [[0, 1], [2, 3], [4, 5], "OutOfRangeError"],
        "optional": [[True, [0, 1]], [True, [2, 3]], [True, [4, 5]], [False, None]],
    },
}


@pytest.mark.parametrize("n", [5, 6])
def test_unbatched_datasets_from_function_m2(m2: Any, n: int) -> None:
    """TF 2.21 at M2 with ``Dataset.range(n)`` unbatched: ``M2_UNBATCHED``; ``dataset_fn``
    is called once with (1 pipeline, id 0, 2 replicas); the element spec is a
    ``PerReplicaSpec`` of two scalar specs."""
    contexts: list[Any] = []

    def fn(ctx: Any) -> Any:
        contexts.append((ctx.num_input_pipelines, ctx.input_pipeline_id, ctx.num_replicas_in_sync))
        return data.Dataset.range(n)

    dist = m2.distribute_datasets_from_function(fn)
    assert contexts == [(1, 0, 2)]
    assert type(dist.element_spec).__name__ == "PerReplicaSpec"
    assert [_ints(m2, e) for e in dist] == M2_UNBATCHED[n]["iter"]
    assert _get_next_steps(m2, dist, 5) == M2_UNBATCHED[n]["get_next"]
    assert _optional_steps(m2, dist, 4) == M2_UNBATCHED[n]["optional"]


def test_unbatched_structured_elements_m2(m2: Any) -> None:
    """TF 2.21 at M2: rows of a matrix go to the replicas in turn ([[0, 1], [2, 3]] then
    [[4, 5], [6, 7]], the fifth row dropped); dicts likewise."""
    rows = m2.distribute_datasets_from_function(
        lambda _: data.Dataset.from_tensor_slices(np.arange(10).reshape(5, 2))
    )
    assert [_ints(m2, e) for e in rows] == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    dicts = m2.distribute_datasets_from_function(
        lambda _: data.Dataset.range(3).map(lambda x: {"a": x})
    )
    got = [[int(d["a"]) for d in m2.experimental_local_results(e)] for e in dicts]
    assert got == [[0, 1]]


def test_unbatched_datasets_from_function_m1(m1: Any) -> None:
    """TF 2.21 at M1: every element, one per step (a plain value, not ``PerReplica``)."""
    dist = m1.distribute_datasets_from_function(lambda _: data.Dataset.range(5))
    assert [_ints(m1, e) for e in dist] == [[0], [1], [2], [3], [4]]
    assert _optional_steps(m1, dist, 6)[-2:] == [[True, [4]], [False, None]]
    assert _get_next_steps(m1, dist, 6) == [[0], [1], [2], [3], [4], "OutOfRangeError"]

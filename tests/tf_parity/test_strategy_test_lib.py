"""Ported from TF 2.21's ``tensorflow/python/distribute/strategy_test_lib.py``: the reusable
``_test_*`` bodies that ``mirrored_strategy_test.py`` and ``collective_all_reduce_strategy_test.py``
call, each ported once here (keyed ``"Base._test_body"``) and run at every configuration.

TF's outcomes are pinned in ``pins/test_strategy_test_lib.json`` (``_parity.py`` has the
command). Where TF's body asserts, the scenario records what TF returned instead, so TF's
behaviour (not its assertion) is the expectation. Bodies left out (graph-only, summaries,
autodiff, TF1-only, OneDevice/remote strategies) are listed in README.md.
"""

from __future__ import annotations

from typing import Any

from tests.support.differential import Backend, Outcomes
from tests.tf_parity._parity import parity_tests


class _TestException(Exception):
    """What TF's ``_raise_exception_fn`` raises: the outcome names it on both backends."""


def _raise_exception_fn(_: Any = None) -> None:
    raise _TestException()


def minimize_loss_eager(b: Backend, s: Any) -> Outcomes:
    """DistributionTestBase._test_minimize_loss_eager: ten steps of ``call_for_each_replica``
    (gradient), ``read_var``, ``reduce_to(SUM, g, destinations=v)`` and
    ``update(v, assign_sub, group=False)`` on a (1, 1) kernel. Two deviations keep it
    deterministic and autodiff-free: the kernel starts at 0.5 (TF: GlorotUniform) and the
    gradient of ``(x @ k - 1)^2`` is written out (TF: ``backprop.implicit_grad``)."""
    with s.scope():
        kernel = b.Variable(b.constant([[0.5]]), name="kernel", trainable=True)
    one = b.constant([[1.0]])

    def grad_fn(x: Any) -> Any:
        y = (x @ kernel.read_value())[0, 0] - 1.0
        return [(2.0 * y * x, kernel)]

    def step() -> tuple[list[Any], list[Any]]:
        g_v = s.extended.call_for_each_replica(grad_fn, args=(one,))
        before, after = [], []
        for g, v in g_v:
            before.append(s.extended.read_var(v))
            g = s.extended.reduce_to(b.ds.ReduceOp.SUM, g, destinations=v)
            s.extended.update(v, lambda v, g: v.assign_sub(0.2 * g), args=(g,), group=False)
            after.append(s.extended.read_var(v))
        return before, after

    o: Outcomes = {}
    for i in range(10):
        before, after = step()
        if i == 0:
            o["before_first"] = b.describe(before)
    o["after_last"] = b.describe(after)
    return o


def replica_id(b: Backend, s: Any) -> Outcomes:
    """DistributionTestBase._test_replica_id: the replica ids ``call_for_each_replica`` sees,
    against ``len(extended.worker_devices)`` (TF's assertion does not hold on an MWMS worker
    past the first: its global id is not below its one local device)."""
    seen: list[int] = []
    with s.scope():
        s.extended.call_for_each_replica(lambda: seen.append(int(b.ctx().replica_id_in_sync_group)))
    return {"ids": sorted(seen), "worker_devices": len(s.extended.worker_devices)}


def _merge_raises_fn() -> None:
    _ctx().merge_call(_raise_exception_fn)


def _call_raises_fn(dist: Any) -> None:
    dist.extended.call_for_each_replica(_raise_exception_fn)


def _merge_call_raises_fn() -> None:
    _ctx().merge_call(_call_raises_fn)


def _call_merge_raises_fn(dist: Any) -> None:
    dist.extended.call_for_each_replica(_merge_raises_fn)


def _merge_call_merge_raises_fn() -> None:
    _ctx().merge_call(_call_merge_raises_fn)


_BACKEND: list[Backend] = []


def _ctx() -> Any:
    return _BACKEND[-1].ctx()


def call_and_merge_exceptions(b: Backend, s: Any) -> Outcomes:
    """DistributionTestBase._test_call_and_merge_exceptions: an exception raised in a replica
    function, in a merge_call, in a call_for_each_replica inside a merge_call, and one level
    deeper, reaches the caller as itself."""
    _BACKEND.append(b)
    try:
        o: Outcomes = {}
        fns = {
            "raise": _raise_exception_fn,
            "merge_raises": _merge_raises_fn,
            "merge_call_raises": _merge_call_raises_fn,
            "merge_call_merge_raises": _merge_call_merge_raises_fn,
        }
        with s.scope():
            for name, fn in fns.items():
                o[name] = b.outcome(lambda fn=fn: s.extended.call_for_each_replica(fn))
        return o
    finally:
        _BACKEND.pop()


def input_fn_iterable(b: Backend, s: Any) -> Outcomes:
    """DistributionTestBase._test_input_fn_iterable with ``_input_fn_to_test_input_context``
    (as mirrored_strategy_test's input-fn tests call it): the InputContext each call sees,
    every element of ``distribute_datasets_from_function(range(8).batch(2))``, the end of the
    data, and the same again from a second iterator."""
    contexts: list[Any] = []

    def input_fn(ctx: Any) -> Any:
        contexts.append((ctx.num_replicas_in_sync, ctx.num_input_pipelines, ctx.input_pipeline_id))
        return b.data.Dataset.range(8).batch(2)

    iterable = s.distribute_datasets_from_function(input_fn)
    o: Outcomes = {}
    for attempt in ("first", "second"):
        iterator = iter(iterable)
        got = []
        for _ in range(4):
            got.append(b.outcome(lambda it=iterator: list(s.experimental_local_results(next(it)))))
            if "raises" in got[-1]:
                break
        o[attempt] = got
        o[attempt + "_end"] = b.outcome(lambda it=iterator: s.experimental_local_results(next(it)))
    o["contexts"] = [list(c) for c in contexts]
    return o


def input_fn_iterator(b: Backend, s: Any) -> Outcomes:
    """DistributionTestBase._test_input_fn_iterator (eager, on ``make_input_fn_iterator`` as
    mirrored_strategy_test's input-fn tests call it): ``initialize()``, each replica's element
    of every step of ``range(8).batch(2)``, the end of the data, and the same after
    re-initializing."""

    def input_fn(ctx: Any) -> Any:
        return b.data.Dataset.range(8).batch(2)

    o: Outcomes = {}
    try:
        iterator = s.make_input_fn_iterator(input_fn)
    except Exception as exc:  # TF's outcome may be the error
        return {"raises": type(exc).__name__}
    for attempt in ("first", "second"):
        o[attempt + "_initialize"] = b.outcome(iterator.initialize)
        got = []
        for _ in range(4):
            got.append(b.outcome(lambda: list(s.experimental_local_results(iterator.get_next()))))
            if "raises" in got[-1]:
                break
        o[attempt] = got
        o[attempt + "_end"] = b.outcome(
            lambda: list(s.experimental_local_results(iterator.get_next()))
        )
    return o


def global_step_update(b: Backend, s: Any) -> Outcomes:
    """DistributionTestBase._test_global_step_update: an int64, non-trainable,
    ONLY_FIRST_REPLICA step variable (TF1's ``get_variable`` there; ``Variable`` here),
    ``assign_add(1)`` and ``read_value`` per replica, then ``strategy.group`` of the updates."""
    with s.scope():
        step = b.Variable(
            b.constant(0, dtype="int64"),
            trainable=False,
            aggregation=b.VariableAggregation.ONLY_FIRST_REPLICA,
        )

        def model_fn() -> Any:
            return step.assign_add(1), step.read_value()

        train_ops, value = s.extended.call_for_each_replica(model_fn)
        o: Outcomes = {"group": b.outcome(lambda: s.group(train_ops))}
        o["values"] = b.describe(s.experimental_local_results(value))
        return o


def trainable_variable(b: Backend, s: Any) -> Outcomes:
    """DistributionTestBase._test_trainable_variable (``Variable``; TF1's ``VariableV1`` has no
    counterpart): the default ``trainable`` of ON_WRITE and ON_READ variables, and explicit."""
    S = b.VariableSynchronization
    with s.scope():
        return {
            "default": b.Variable(1.0).trainable,
            "on_read": b.Variable(1.0, synchronization=S.ON_READ).trainable,
            "on_read_true": b.Variable(1.0, synchronization=S.ON_READ, trainable=True).trainable,
            "on_read_false": b.Variable(1.0, synchronization=S.ON_READ, trainable=False).trainable,
        }


def two_device_run(b: Backend, s: Any) -> Outcomes:
    """TwoDeviceDistributionTestBase._test_run: ``run`` of the replica id plus one, then of a
    dict of it, then with that dict as keyword arguments, read through ``unwrap``."""
    o: Outcomes = {}
    out1 = s.run(lambda: b.ctx().replica_id_in_sync_group + 1)
    o["out1"] = b.outcome(lambda: s.unwrap(out1))
    out2 = s.run(lambda x: {"a": x * 2, "b": x * x}, args=(out1,))
    o["out2_a"] = b.outcome(lambda: s.unwrap(out2["a"]))
    o["out2_b"] = b.outcome(lambda: s.unwrap(out2["b"]))
    out3 = s.run(lambda b, a: a + 2 * b + 2, kwargs=out2)
    o["out3"] = b.outcome(lambda: s.unwrap(out3))
    return o


def _collective_comms(b: Backend, s: Any, op: Any) -> Outcomes:
    """``_test_collective_comms``: ``make_input_fn_iterator`` over
    ``from_tensor_slices(([1., 3.], [[39., 2.], [3., 41.]]))`` and ``experimental_run`` of an
    all-reduce of each element (SUM or MEAN)."""
    inputs = s.make_input_fn_iterator(
        lambda _: b.data.Dataset.from_tensor_slices(
            (b.constant([1.0, 3.0]), b.constant([[39.0, 2.0], [3.0, 41.0]]))
        )
    )
    o: Outcomes = {"initialize": b.outcome(inputs.initialize)}

    def comm_fn(value: Any) -> Any:
        return b.ctx().all_reduce(op, value)

    def outputs() -> Any:
        return [s.experimental_local_results(x) for x in s.experimental_run(comm_fn, inputs)]

    o["outputs"] = b.outcome(outputs)
    return o


def two_device_all_reduce_sum(b: Backend, s: Any) -> Outcomes:
    """TwoDeviceDistributionTestBase._test_all_reduce_sum (through _test_collective_comms)."""
    return _collective_comms(b, s, b.ds.ReduceOp.SUM)


def two_device_all_reduce_mean(b: Backend, s: Any) -> Outcomes:
    """TwoDeviceDistributionTestBase._test_all_reduce_mean (through _test_collective_comms)."""
    return _collective_comms(b, s, b.ds.ReduceOp.MEAN)


SCENARIOS = {
    "DistributionTestBase._test_minimize_loss_eager": minimize_loss_eager,
    "DistributionTestBase._test_replica_id": replica_id,
    "DistributionTestBase._test_call_and_merge_exceptions": call_and_merge_exceptions,
    "DistributionTestBase._test_input_fn_iterable": input_fn_iterable,
    "DistributionTestBase._test_input_fn_iterator": input_fn_iterator,
    "DistributionTestBase._test_global_step_update": global_step_update,
    "DistributionTestBase._test_trainable_variable": trainable_variable,
    "TwoDeviceDistributionTestBase._test_run": two_device_run,
    "TwoDeviceDistributionTestBase._test_all_reduce_sum": two_device_all_reduce_sum,
    "TwoDeviceDistributionTestBase._test_all_reduce_mean": two_device_all_reduce_mean,
}

FAILING: dict[str, str] = {}

test_m2, test_mwms = parity_tests(SCENARIOS, __file__, FAILING)

"""Ported from TF 2.21's ``tensorflow/python/distribute/tf_function_test.py``.

TF's file checks what ``tf.function`` does under a strategy (tracing, device placement of the
traced ops); mwms_mpi has no tracing, so what is ported is the eager meaning of each method:
the values the same calls compute in and out of the strategy's scope (TF's ``tensor.device``
strings have no counterpart: mwms_mpi's tensors are numpy arrays, README.md). TF's outcomes are
pinned in ``pins/test_tf_function.json``.
"""

from __future__ import annotations

from typing import Any

from tests.support.differential import Backend, Outcomes, Scenarios
from tests.tf_parity import _ops
from tests.tf_parity._parity import parity_tests


def _add(b: Backend) -> Any:
    """TF's ``add``: ``ones([]) + 1``."""
    return _ops.add(b, b.constant(1.0), 1.0)


def default_device_with_scope(b: Backend, s: Any) -> Outcomes:
    """TFFunctionTest.testDefaultDeviceInsideFunctionWithScope: ``ones([]) + 1`` in scope,
    in cross-replica context and through ``run``."""
    with s.scope():
        return {
            "cross_replica": b.outcome(lambda: _add(b)),
            "run": b.outcome(lambda: list(s.experimental_local_results(s.run(lambda: _add(b))))),
        }


def default_device_nested(b: Backend, s: Any) -> Outcomes:
    """TFFunctionTest.testDefaultDeviceInsideNestedFunctionWithScope: the same through a
    nested function."""

    def foo() -> Any:
        def bar() -> Any:
            return _add(b)

        return bar()

    with s.scope():
        return {"nested": b.outcome(foo)}


def read_variable(b: Backend, s: Any) -> Outcomes:
    """TFFunctionTest.testReadVariableInsideFunction: component i assigned ``i`` directly
    (TF's ``v._values[i]``, publicly ``experimental_local_results(v)[i]``), then read."""
    with s.scope():
        v = b.Variable(0.0)
        for i, component in enumerate(s.experimental_local_results(v)):
            component.assign(float(i))
    o: Outcomes = {"components": b.describe(list(s.experimental_local_results(v)))}
    with s.scope():
        o["read_in_scope"] = b.outcome(v.read_value)
        o["read_in_replica"] = b.outcome(
            lambda: list(s.experimental_local_results(s.run(v.read_value)))
        )
    return o


def retrace_on_saving(b: Backend, s: Any) -> Outcomes:
    """TFFunctionTest.testRetraceOnSaving: ``v + 1.`` through ``run`` and called directly."""
    with s.scope():
        v = b.Variable(0.0)

    def func() -> Any:
        return _ops.add(b, v, 1.0)

    return {
        "run": b.outcome(lambda: list(s.experimental_local_results(s.run(func)))),
        "direct": b.outcome(func),
    }


SCENARIOS: Scenarios = {
    "TFFunctionTest.testDefaultDeviceInsideFunctionWithScope": default_device_with_scope,
    "TFFunctionTest.testDefaultDeviceInsideNestedFunctionWithScope": default_device_nested,
    "TFFunctionTest.testReadVariableInsideFunction": read_variable,
    "TFFunctionTest.testRetraceOnSaving": retrace_on_saving,
}

FAILING: dict[str, str] = {}

test_m2, test_mwms = parity_tests(SCENARIOS, __file__, FAILING)

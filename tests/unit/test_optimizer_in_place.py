"""Adam writes each new value into its variable's or slot's own storage (``_update_with``).

What that must keep: the bits of Keras's assigns (``test_optimizers.py`` pins those), values
handed out earlier by ``read_only_value()`` never change (docs/architecture.md, "Results are
values"), and a gradient of the wrong shape fails as TF's ``AssignAddVariableOp`` does, with
nothing written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import distribute, errors, optimizers

GRADS = [
    np.array([[0.5, -1.0], [2.0, 0.25]], np.float32),
    np.array([[0.25, 0.5], [-1.0, 3.0]], np.float32),
    np.array([[1.0, 1.0], [-2.0, 0.5]], np.float32),
]
DEVICES = {"one replica": None, "two replicas": ["/cpu:0", "/cpu:1"]}


def _train(devices: list[str] | None, amsgrad: bool, hold: bool) -> tuple[list[Any], list[Any]]:
    """Three Adam steps; with ``hold``, every variable's and slot's copies are read with
    ``read_only_value()`` before each step. Returns (what was held, with a copy of each
    taken when it was read) and every copy's final bytes."""
    strategy = distribute.MirroredStrategy(devices)
    with strategy.scope():
        var = mwms_mpi.Variable(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), name="w")
        opt = optimizers.Adam(0.1, amsgrad=amsgrad)
        opt.build([var])
    held: list[Any] = []
    for grad in GRADS:
        if hold:
            for v in (var, *opt.variables):
                for copy in strategy.experimental_local_results(v):
                    view = copy.read_only_value()
                    held.append((view, np.array(view)))
        strategy.run(lambda g=grad: opt.apply_gradients([(g, var)]))
    final = [
        copy.numpy().tobytes()
        for v in (var, *opt.variables)
        for copy in strategy.experimental_local_results(v)
    ]
    return held, final


@pytest.mark.parametrize("devices", sorted(DEVICES))
@pytest.mark.parametrize("amsgrad", [False, True])
def test_values_handed_out_before_a_step_keep_their_value(devices: str, amsgrad: bool) -> None:
    held, final = _train(DEVICES[devices], amsgrad, hold=True)
    assert held, "nothing was read"
    for view, then in held:
        assert view.tobytes() == then.tobytes(), "a value handed out changed under an update"
    # and the updates themselves are unchanged by the reads (a fresh buffer took the write)
    assert final == _train(DEVICES[devices], amsgrad, hold=False)[1]


@pytest.mark.parametrize("amsgrad", [False, True])
def test_a_gradient_of_a_larger_shape_fails_as_tfs_assign_add(amsgrad: bool) -> None:
    # TF 2.21 + Keras 3: Adam(0.1).apply_gradients([(tf.ones((2, 2)), tf.Variable([1., 2.]))])
    # raises InvalidArgumentError from AssignAddVariableOp: "Cannot update variable with shape
    # [2] using a Tensor with shape [2,2], shapes must be equal."
    var = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32))
    opt = optimizers.Adam(0.1, amsgrad=amsgrad)
    opt.build([var])
    with pytest.raises(
        errors.InvalidArgumentError,
        match=r"Cannot update variable with shape \[2\] using a Tensor with shape \[2,2\], "
        "shapes must be equal.",
    ):
        opt.apply_gradients([(np.ones((2, 2), np.float32), var)])
    assert var.numpy().tolist() == [1.0, 2.0]
    for slot in opt.variables[1:]:
        assert slot.numpy().tolist() == [0.0, 0.0]


def test_a_gradient_that_broadcasts_is_applied_as_keras_applies_it() -> None:
    # TF 2.21 + Keras 3: a gradient of shape (1,) on a (2,) variable broadcasts; one Adam(0.1)
    # step from [1., 2.] gives [0.900001, 1.900001] (float32)
    var = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32))
    optimizers.Adam(0.1).apply_gradients([(np.ones(1, np.float32), var)])
    np.testing.assert_allclose(var.numpy(), [0.900001, 1.900001], rtol=0, atol=1e-6)


def test_a_distributed_variable_takes_an_in_place_step_only_inside_update() -> None:
    strategy = distribute.MirroredStrategy(DEVICES["two replicas"])
    with strategy.scope():
        var = mwms_mpi.Variable(np.array([1.0, 2.0]), name="v")
    with pytest.raises(RuntimeError, match=r"only inside extended\.update"):
        var._update_with(np.add, np.ones(2), "AssignAddVariableOp")
    strategy.extended.update(
        var, lambda v: var._update_with(np.add, np.ones(2), "AssignAddVariableOp")
    )
    for copy in strategy.experimental_local_results(var):
        assert copy.numpy().tolist() == [2.0, 3.0]


def _adam_steps(dtypes: list[Any], rates: list[float]) -> list[bytes]:
    """One variable per dtype, all in each step's apply_gradients; ``rates[i]`` is the learning
    rate set before step i. Returns each variable's final bytes."""
    variables = [mwms_mpi.Variable(np.array([1.0, 2.0], dtype)) for dtype in dtypes]
    opt = optimizers.Adam(rates[0])
    for i, rate in enumerate(rates):
        opt.learning_rate = rate
        grads = [np.array([0.5, -0.25 * (i + 1)], dtype) for dtype in dtypes]
        opt.apply_gradients(zip(grads, variables, strict=True))
    return [v.numpy().tobytes() for v in variables]


def test_a_steps_scalars_follow_its_dtype_step_and_learning_rate() -> None:
    """Adam makes its scalars once per step (``Adam._scalars``): variables of two dtypes in
    one step each get their own dtype's, and a step run again with another learning rate (a
    rollback, as ``ElasticHandler`` makes) uses the new rate."""
    mixed = _adam_steps([np.float32, np.float64], [0.1, 0.1, 0.1])
    assert mixed == _adam_steps([np.float32], [0.1] * 3) + _adam_steps([np.float64], [0.1] * 3)
    assert _adam_steps([np.float32], [0.1, 0.1, 0.01]) != _adam_steps([np.float32], [0.1] * 3)

    var = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32))
    opt = optimizers.Adam(0.1)
    for i in range(2):
        opt.apply_gradients([(np.array([0.5, -0.25 * (i + 1)], np.float32), var)])
    state = [var, *opt.variables]
    saved = [v.read_value() for v in state]
    third = np.array([0.5, -0.75], np.float32)
    opt.apply_gradients([(third, var)])  # step 3 at 0.1
    for v, value in zip(state, saved, strict=True):  # back to step 2
        v.assign(value)
    opt.learning_rate = 0.01
    opt.apply_gradients([(third, var)])  # step 3 again, at 0.01
    # what a fresh optimizer with the same state makes of step 3 at 0.01
    other = mwms_mpi.Variable(saved[0])
    fresh = optimizers.Adam(0.01)
    fresh.build([other])
    for v, value in zip(fresh.variables, saved[1:], strict=True):
        v.assign(value)
    fresh.apply_gradients([(third, other)])
    assert var.numpy().tobytes() == other.numpy().tobytes()

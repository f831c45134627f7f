"""An optimizer in a Checkpoint, as TF programs write it: ``tf.train.Checkpoint(optimizer=opt)``.

TF 2.21 + Keras 3 save the optimizer's step counter and slots (``optimizer/_iterations``,
``optimizer/_variables/<i>``), so a resumed run continues exactly; an optimizer held as an
attribute of a saved object is saved the same way, never skipped silently.
"""

from __future__ import annotations

import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute
from mwms_mpi import optimizers, train


def _steps(opt: optimizers.Optimizer, var: mwms_mpi.Variable, grads: list[np.ndarray]) -> None:
    for g in grads:
        opt.apply_gradients([(g, var)])


@pytest.mark.parametrize("make", [lambda: optimizers.SGD(0.1, momentum=0.9), optimizers.Adam])
@pytest.mark.parametrize("as_attribute", [False, True], ids=["kwarg", "attribute"])
def test_resumed_optimizer_continues_exactly(make, as_attribute: bool, tmp_path: Path) -> None:
    grads = [np.full(3, g, dtype=np.float32) for g in (1.0, -2.0, 0.5, 3.0)]
    straight_var = mwms_mpi.Variable(np.arange(3, dtype=np.float32))
    _steps(make(), straight_var, grads)

    var, opt = mwms_mpi.Variable(np.arange(3, dtype=np.float32)), make()
    _steps(opt, var, grads[:2])
    holder = types.SimpleNamespace(var=var, optimizer=opt)
    ckpt = (
        train.Checkpoint(model=holder) if as_attribute else train.Checkpoint(v=var, optimizer=opt)
    )
    path = ckpt.save(str(tmp_path / "ckpt"))

    var2, opt2 = mwms_mpi.Variable(np.zeros(3, dtype=np.float32)), make()
    opt2.build([var2])
    holder2 = types.SimpleNamespace(var=var2, optimizer=opt2)
    ckpt2 = (
        train.Checkpoint(model=holder2)
        if as_attribute
        else train.Checkpoint(v=var2, optimizer=opt2)
    )
    ckpt2.restore(path).assert_consumed()
    assert int(opt2.iterations.numpy()) == 2
    _steps(opt2, var2, grads[2:])
    np.testing.assert_array_equal(var2.numpy(), straight_var.numpy())


def test_mirrored_slots_round_trip_with_two_replicas(tmp_path: Path) -> None:
    strategy = mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    grads = [np.full(2, g, dtype=np.float32) for g in (1.0, -2.0, 0.5, 3.0)]

    def run_steps(
        var: mwms_mpi.Variable, opt: optimizers.Optimizer, part: list[np.ndarray]
    ) -> None:
        for g in part:
            strategy.run(lambda g=g: opt.apply_gradients([(g, var)]))

    with strategy.scope():
        straight, straight_opt = mwms_mpi.Variable(np.ones(2, np.float32)), optimizers.Adam(0.1)
        var, opt = mwms_mpi.Variable(np.ones(2, np.float32)), optimizers.Adam(0.1)
    run_steps(straight, straight_opt, grads)
    run_steps(var, opt, grads[:2])
    path = train.Checkpoint(v=var, optimizer=opt).write(str(tmp_path / "mirrored"))
    with strategy.scope():
        var2, opt2 = mwms_mpi.Variable(np.zeros(2, np.float32)), optimizers.Adam(0.1)
        opt2.build([var2])
    train.Checkpoint(v=var2, optimizer=opt2).read(path).assert_consumed()  # write's pair
    run_steps(var2, opt2, grads[2:])
    for got, want in zip(var2.values, straight.values, strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("make", [lambda: optimizers.SGD(0.1, momentum=0.9), optimizers.Adam])
def test_apply_outside_the_scope_of_mirrored_variables_raises_as_tf_does(make: Any) -> None:
    """Found with issue 23: outside the strategy's scope only the first replica's copy was
    updated, silently. TF 2.21 + Keras 3 (``apply_outside_scope.py``: a ``MirroredStrategy`` of
    two CPUs, the variable and Adam made in its scope, ``apply_gradients`` outside) raise
    ``RuntimeError: Need to be inside "with strategy.scope()" for <...MirroredStrategy ...>``."""
    strategy = mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        var, opt = mwms_mpi.Variable(np.arange(3, dtype=np.float32)), make()
    with pytest.raises(RuntimeError, match=r'Need to be inside "with strategy.scope\(\)" for'):
        opt.apply_gradients([(np.ones(3, np.float32), var)])
    assert [v.numpy().tolist() for v in var.values] == [[0.0, 1.0, 2.0]] * 2
    with strategy.scope():
        opt.apply_gradients([(np.ones(3, np.float32), var)])
    first, second = (v.numpy() for v in var.values)
    assert first.tobytes() == second.tobytes() and first.tolist() != [0.0, 1.0, 2.0]


def test_the_learning_rate_is_saved_and_restored_as_keras_does(tmp_path: Path) -> None:
    # Keras 3 saves the learning rate (a variable): a program that changed it while training
    # (a schedule by hand, ReduceLROnPlateau) resumes with the rate it had, not its
    # constructor's. TF 2.21: saved with Adam(0.1), restored into Adam(0.5): 0.1, before and
    # after the optimizer is built.
    grad = np.array([1.0, -3.0], np.float32)
    straight, opt = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32)), optimizers.Adam(0.5)
    opt.apply_gradients([(grad, straight)])
    opt.learning_rate = 0.1
    path = train.Checkpoint(v=straight, optimizer=opt).save(str(tmp_path / "ckpt"))
    opt.apply_gradients([(grad, straight)])
    for build_first in (False, True):
        var, resumed = mwms_mpi.Variable(np.zeros(2, np.float32)), optimizers.Adam(0.5)
        if build_first:
            resumed.build([var])
        status = train.Checkpoint(v=var, optimizer=resumed).restore(path)
        assert resumed.learning_rate == 0.1
        resumed.apply_gradients([(grad, var)])
        status.assert_consumed()
        np.testing.assert_array_equal(var.numpy(), straight.numpy())


def test_a_first_step_without_a_gradient_still_makes_that_variables_slots(
    tmp_path: Path,
) -> None:
    # Keras builds the slots of every variable given to the first apply_gradients, a None
    # gradient's too, in that order. Made only for the variables with a gradient, the slots'
    # order depended on the first step, and a resumed run gave a's moments to b and b's to a
    # (silently). TF 2.21 + Keras 3: the resumed run equals the uninterrupted one, bit for bit.
    def grads(step: int) -> list[Any]:
        first = None if step == 0 else np.array([0.3, -0.2], np.float32) * step
        return [first, np.array([0.5, 1.5, -1.0], np.float32) / (step + 1)]

    def run(steps: range, a: Any, b: Any, opt: Any) -> None:
        for step in steps:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                opt.apply_gradients(zip(grads(step), [a, b], strict=True))
            said = [str(w.message) for w in caught]
            assert said == (
                [
                    "Gradients do not exist for variables ['a:0'] when minimizing the "
                    "loss. If using `model.compile()`, did you forget to provide a "
                    "`loss` argument?"
                ]
                if step == 0
                else []
            ), said

    def fresh() -> tuple[Any, Any, Any]:
        a = mwms_mpi.Variable(np.array([1.0, 1.2], np.float32), name="a")
        b = mwms_mpi.Variable(np.array([2.0, 1.8, 1.5], np.float32), name="b")
        return a, b, optimizers.Adam(0.1)

    a, b, opt = fresh()
    run(range(3), a, b, opt)
    a1, b1, opt1 = fresh()
    run(range(2), a1, b1, opt1)
    slots = ["a/momentum:0", "a/velocity:0", "b/momentum:0", "b/velocity:0"]
    assert [v.name for v in opt1.variables[1:]] == slots
    path = train.Checkpoint(a=a1, b=b1, optimizer=opt1).save(str(tmp_path / "ckpt"))
    a2, b2, opt2 = fresh()
    train.Checkpoint(a=a2, b=b2, optimizer=opt2).restore(path)
    run(range(2, 3), a2, b2, opt2)
    np.testing.assert_array_equal(a2.numpy(), a.numpy())
    np.testing.assert_array_equal(b2.numpy(), b.numpy())


def test_apply_gradients_refuses_what_keras_refuses() -> None:
    a = mwms_mpi.Variable(np.array([1.0], np.float32), name="a")
    b = mwms_mpi.Variable(np.array([2.0], np.float32), name="b")
    opt = optimizers.SGD(0.1)
    # TF 2.21: ValueError 'No gradients provided for any variable.', after building
    with pytest.raises(ValueError, match=r"^No gradients provided for any variable\.$"):
        opt.apply_gradients([(None, a)])
    assert [v.name for v in opt.variables] == [opt.iterations.name]
    assert int(opt.iterations.numpy()) == 0
    opt.apply_gradients([(np.ones(1, np.float32), a)])
    # TF 2.21: ValueError 'Unknown variable: <tf.Variable 'b:0' ...>. This optimizer can only be
    # called for the variables it was originally built with. ...'; nothing changes
    with pytest.raises(ValueError, match=r"^Unknown variable: .*b:0.*originally built with"):
        opt.apply_gradients([(np.ones(1, np.float32), a), (np.ones(1, np.float32), b)])
    np.testing.assert_array_equal(a.numpy(), np.float32([0.9]))
    opt2 = optimizers.Adam(0.1)
    opt2.build([a])
    opt2.build([a, b])  # Keras: a second build does nothing
    with pytest.raises(ValueError, match="Unknown variable"):
        opt2.apply_gradients([(np.ones(1, np.float32), b)])

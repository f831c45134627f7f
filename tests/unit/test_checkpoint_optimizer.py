"""An optimizer in a Checkpoint, as TF programs write it: ``tf.train.Checkpoint(optimizer=opt)``.

TF 2.21 + Keras 3 save the optimizer's step counter and slots (``optimizer/_iterations``,
``optimizer/_variables/<i>``), so a resumed run continues exactly; an optimizer held as an
attribute of a saved object is saved the same way, never skipped silently.
"""

from __future__ import annotations

import types
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
    train.Checkpoint(v=var2, optimizer=opt2).restore(path).assert_consumed()
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

"""Keras 3.15.1's optimizer and schedule members as Keras has them (TF 2.21's Keras)::

opt = keras.optimizers.SGD(); v = keras.Variable([1.0, 2.0]); opt.build([v])
type(opt.variables)  # list: a property (ours was a method)
keras.optimizers.Adam().build(var_list=[v])  # Adam, AdamW, RMSprop, Adagrad: var_list
keras.optimizers.schedules.ExponentialDecay(0.1, 1, 0.5, name=None).name  # None
keras.optimizers.schedules.InverseTimeDecay(0.1, 1, 0.5).name  # 'InverseTimeDecay'
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import optimizers
from mwms_mpi.optimizers import schedules


@pytest.mark.parametrize(
    "cls", [optimizers.Adam, optimizers.AdamW, optimizers.RMSprop, optimizers.Adagrad]
)
def test_variables_is_a_list_property_and_build_takes_var_list(cls: type) -> None:
    v = mwms_mpi.Variable([1.0, 2.0])
    opt = cls()
    assert opt.variables == []
    opt.build(var_list=[v])
    assert isinstance(opt.variables, list) and opt.variables[0] is opt.iterations


def test_sgd_builds_with_variables() -> None:
    opt = optimizers.SGD(momentum=0.5)
    opt.build(variables=[mwms_mpi.Variable([1.0])])
    assert len(opt.variables) == 2


def test_schedule_names() -> None:
    assert schedules.ExponentialDecay(0.1, 1, 0.5, name=None).name is None
    assert schedules.InverseTimeDecay(0.1, 1, 0.5, name=None).name is None
    assert schedules.ExponentialDecay(0.1, 1, 0.5).name == "ExponentialDecay"
    assert schedules.InverseTimeDecay(0.1, 1, 0.5).name == "InverseTimeDecay"


# Keras 3.15.1: o = SGD(0.1); v = Variable([1.0, 2.0]); w = Variable([3.0])
#   o.apply([g])                 -> ValueError "When passing `grads` without `variables`, ..."
#   o.apply([]), o.iterations    -> None, 0
#   o.apply([[1, 1], [2]], [v, w]) -> None; v [0.9, 1.9] w [2.8], iterations 1
#   o.apply([[1, 1], [2]])       -> v [0.7999999523162842, 1.7999999523162842]
#                                   w [2.5999999046325684], iterations 2
#   o.apply([[1, 1]])            -> ValueError "... Received a list of 1 gradients, but the
#                                   optimizer is tracking 2 trainable variables."
def test_apply_as_keras() -> None:
    opt = optimizers.SGD(0.1)
    v, w = mwms_mpi.Variable([1.0, 2.0]), mwms_mpi.Variable([3.0])
    g1, g2 = np.ones(2, np.float32), np.full(1, 2.0, np.float32)
    with pytest.raises(
        ValueError, match=re.escape("Call `optimizer.build(trainable_variables)` first. ")
    ):
        opt.apply([g1])
    assert opt.apply([]) is None and opt.iterations is None
    assert opt.apply([g1, g2], [v, w]) is None
    assert (
        v.numpy().tolist() == [np.float32(0.9), np.float32(1.9)]
        and int(opt.iterations.numpy()) == 1
    )
    opt.apply([g1, g2])
    assert (
        v.numpy().tobytes()
        == np.array([0.7999999523162842, 1.7999999523162842], np.float32).tobytes()
    )
    assert w.numpy().tobytes() == np.array([2.5999999046325684], np.float32).tobytes()
    assert int(opt.iterations.numpy()) == 2
    with pytest.raises(
        ValueError,
        match=re.escape(
            "Received a list of 1 gradients, but the optimizer is tracking 2 trainable variables."
        ),
    ):
        opt.apply([g1])

"""Keras 3.15.1's optimizer and schedule members as Keras has them (TF 2.21's Keras)::

opt = keras.optimizers.SGD(); v = keras.Variable([1.0, 2.0]); opt.build([v])
type(opt.variables)  # list: a property (ours was a method)
keras.optimizers.Adam().build(var_list=[v])  # Adam, AdamW, RMSprop, Adagrad: var_list
keras.optimizers.schedules.ExponentialDecay(0.1, 1, 0.5, name=None).name  # None
keras.optimizers.schedules.InverseTimeDecay(0.1, 1, 0.5).name  # 'InverseTimeDecay'
"""

from __future__ import annotations

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

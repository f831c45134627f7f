"""``mwms_mpi.optimizers.schedules`` gives Keras 3.15.1's learning rates bit for bit.

Keras's values (TF 2.21, TF backend: ``schedule(tf.constant(step, tf.int64))``) are pinned in
``keras_schedules_pins.json`` beside this file for every schedule class, with and without its
options, float32 and float64, over the first 400 steps and three large ones. The cosine
schedules show why the C library's float32 ``cosf`` is used: numpy's own differs at some steps.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import optimizers, train
from mwms_mpi.optimizers import schedules

PINS = json.loads((Path(__file__).parent / "keras_schedules_pins.json").read_text())


def _make(name: str) -> schedules.LearningRateSchedule:
    config = PINS["configs"][name]
    kwargs = dict(config["kwargs"])
    if config["float64"]:
        kwargs["initial_learning_rate"] = np.float64(kwargs["initial_learning_rate"])
    return getattr(schedules, config["class"])(**kwargs)


@pytest.mark.parametrize("name", sorted(PINS["configs"]))
def test_keras_bits_at_every_step(name: str) -> None:
    schedule, config = _make(name), PINS["configs"][name]
    got = [schedule(np.int64(step)) for step in PINS["steps"]]
    assert {str(v.dtype) for v in got} == {config["dtype"]}
    assert [float(v).hex() for v in got] == config["values"]


def test_keras_errors() -> None:
    with pytest.raises(ValueError, match=r"Argument `decay_steps` must be > 0\. Received: decay"):
        schedules.ExponentialDecay(0.1, 0, 0.9)
    with pytest.raises(ValueError, match="`first_decay_steps` must be > 0"):
        schedules.CosineDecayRestarts(0.1, 0)
    with pytest.raises(ValueError, match="The length of boundaries should be 1 less than"):
        schedules.PiecewiseConstantDecay([1, 2], [0.1, 0.2])
    with pytest.raises(NotImplementedError, match="must override `__call__"):
        schedules.LearningRateSchedule()(0)
    # Keras's constructor takes a float, a schedule or a callable: not an int
    with pytest.raises(ValueError, match="Argument `learning_rate` should be float"):
        optimizers.SGD(learning_rate=1)
    opt = optimizers.SGD(learning_rate=schedules.ExponentialDecay(0.1, 2, 0.5))
    with pytest.raises(TypeError, match="its learning rate is not settable"):
        opt.learning_rate = 0.2


def test_the_optimizer_reads_the_schedule_at_its_step_count(tmp_path: Path) -> None:
    """The rate is the schedule at ``iterations`` before each step (Keras); a schedule is not
    saved (Keras saves none), the step count is, so a resumed run goes on at the same rates."""
    schedule = schedules.ExponentialDecay(0.5, 1, 0.5)
    var, opt = mwms_mpi.Variable(np.zeros(1, np.float32)), optimizers.SGD(schedule)
    assert float(opt.learning_rate) == 0.5  # before the first step: step count 0
    for _ in range(2):
        opt.apply_gradients([(np.ones(1, np.float32), var)])
    assert var.numpy().tolist() == [-0.75]  # 0.5, then 0.25
    assert float(opt.learning_rate) == 0.125
    path = train.Checkpoint(v=var, optimizer=opt).save(str(tmp_path / "ckpt"))
    again, resumed = mwms_mpi.Variable(np.zeros(1, np.float32)), optimizers.SGD(schedule)
    status = train.Checkpoint(v=again, optimizer=resumed).restore(path)
    resumed.apply_gradients([(np.ones(1, np.float32), again)])  # restores the count first
    status.assert_consumed()
    assert again.numpy().tolist() == [-0.875]
    # a callable of no arguments is called at each step
    rates = iter([0.25, 0.5])
    called = optimizers.SGD(lambda: next(rates))
    w = mwms_mpi.Variable(np.zeros(1, np.float32))
    called.apply_gradients([(np.ones(1, np.float32), w)])
    called.apply_gradients([(np.ones(1, np.float32), w)])
    assert w.numpy().tolist() == [-0.75]

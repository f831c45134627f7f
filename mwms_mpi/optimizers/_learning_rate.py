"""The learning rate as Keras keeps it: a float (Keras's float32 variable), a schedule
(``optimizers.schedules``) called with the step count, or a callable of no arguments.

Keras's rules, one home for every optimizer: which values the constructor takes, which the
``learning_rate`` setter takes, what reading it gives, the value a step uses (evaluated once
per step, before the step counter moves, as Keras's ``_backend_update_step`` reads it), and
the checkpoint value of a float rate (Keras saves only its variable).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi.optimizers.schedules import LearningRateSchedule
from mwms_mpi.values.convert import as_array


def checked(learning_rate: Any) -> Any:
    """``learning_rate`` as the constructor takes it.

    Raises:
      ValueError: for anything but a float (``float`` or a subclass, as ``numpy.float64``), a
        schedule or a callable (Keras's message: an int or a ``numpy.float32`` is refused).
    """
    if isinstance(learning_rate, LearningRateSchedule) or callable(learning_rate):
        return learning_rate
    if not isinstance(learning_rate, float):
        raise ValueError(
            "Argument `learning_rate` should be float, or an instance of LearningRateSchedule, "
            "or a callable (that takes in the current iteration value and returns the "
            f"corresponding learning rate value). Received instead: learning_rate={learning_rate}"
        )
    return float(learning_rate)


def replaced(current: Any, new: Any) -> Any:
    """What the ``learning_rate`` setter leaves: a schedule or callable replaces anything; a
    number replaces a float rate (Keras assigns its variable).

    Raises:
      TypeError: a number where the rate is a schedule (Keras's message).
    """
    if isinstance(new, LearningRateSchedule) or callable(new):
        return new
    if isinstance(current, LearningRateSchedule):
        raise TypeError(
            "This optimizer was created with a `LearningRateSchedule` object as its "
            "`learning_rate` constructor argument, hence its learning rate is not settable. If "
            "you need the learning rate to be settable, you should instantiate the optimizer "
            "with a float `learning_rate` argument."
        )
    return float(new) if isinstance(new, int | float) else float(np.asarray(as_array(new)))


def current(rate: Any, iterations: Any) -> Any:
    """Keras's ``learning_rate`` property: the float; a schedule at the step count (0 before
    the counter exists); a callable's value."""
    if isinstance(rate, LearningRateSchedule):
        count = np.int64(0) if iterations is None else np.asarray(iterations.numpy(), np.int64)
        return rate(count)
    if callable(rate):
        return rate()
    return rate


def for_step(rate: Any, iterations: Any) -> np.ndarray:
    """The rate a step uses, a 0-d array to cast to each variable's dtype: a float as Keras's
    float32 variable holds it; a schedule's or callable's value as TF converts it."""
    if isinstance(rate, float):
        return np.asarray(np.float32(rate))
    return np.asarray(as_array(current(rate, iterations)))


class SavedLearningRate:
    """A float learning rate as a checkpoint value (Keras saves its ``learning_rate`` variable):
    float64, so that a restored rate is the very float the run had."""

    shape = ()
    dtype = np.dtype(np.float64)

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer

    def numpy(self) -> np.ndarray:
        return np.asarray(self._optimizer.learning_rate, np.float64)

    def assign(self, value: Any) -> None:
        self._optimizer.learning_rate = float(np.asarray(value))

"""Keras's learning-rate schedules (``keras.optimizers.schedules``), with Keras's arithmetic.

A schedule is called with the optimizer's step count (its ``iterations`` before the step) and
returns the step's learning rate, a 0-d array in the dtype of ``initial_learning_rate`` as
``tf.constant`` converts it (a Python float: float32). Each schedule repeats Keras's operations
in their order and dtypes (Python numbers become the schedule's dtype where TF converts them,
through float32 where ``tf.cast`` takes them), so the learning rate of every step has Keras's
bits: ``tests/unit/test_schedules.py`` pins Keras 3.15.1's values over 700 steps.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi.values.convert import as_array

__all__ = [
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseTimeDecay",
    "LearningRateSchedule",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
]


def _cast(value: Any, dtype: np.dtype) -> Any:
    """Keras's ``ops.cast`` (``tf.cast``): a Python number becomes a tensor first (a float
    float32, an int int32), then the dtype."""
    return as_array(value).astype(dtype)


def _initial(rate: Any) -> tuple[Any, np.dtype]:
    """The initial rate as ``tf.constant`` converts it (a Python float: float32) and its dtype,
    which is every schedule's dtype (Keras's ``ops.convert_to_tensor``)."""
    initial = as_array(rate)
    return initial, initial.dtype


def _step(step: Any, dtype: np.dtype) -> Any:
    """The step count as the schedule's dtype (a variable is read)."""
    return np.asarray(as_array(step)).astype(dtype)


class LearningRateSchedule:
    """The base class: a callable from the step count to the learning rate."""

    def __call__(self, step: Any) -> Any:
        raise NotImplementedError(
            f"Learning rate schedule '{self.__class__.__name__}' must override `__call__(self, "
            "step)`."
        )


def _check_steps(name: str, value: Any) -> None:
    if value <= 0:
        raise ValueError(f"Argument `{name}` must be > 0. Received: {name}={value}")


class _RateDecay(LearningRateSchedule):
    """The arguments and the step ratio that ``ExponentialDecay`` and ``InverseTimeDecay``
    share (Keras gives both the same constructor).

    Raises:
      ValueError: ``decay_steps`` <= 0 (Keras's message).
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        name: str | None = None,
    ) -> None:
        self.initial_learning_rate, self.decay_steps = initial_learning_rate, decay_steps
        self.decay_rate, self.staircase = decay_rate, staircase
        self.name = name  # Keras keeps an explicit None
        _check_steps("decay_steps", decay_steps)

    def _ratio(self, step: Any) -> tuple[Any, Any]:
        """The initial rate (its dtype the schedule's) and ``step / decay_steps`` in that
        dtype, floored with ``staircase``."""
        initial, dtype = _initial(self.initial_learning_rate)
        p = _step(step, dtype) / _cast(self.decay_steps, dtype)
        return initial, (np.floor(p) if self.staircase else p)


class ExponentialDecay(_RateDecay):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (the exponent floored
    with ``staircase``); ``name`` defaults to ``"ExponentialDecay"``."""

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        name: str | None = "ExponentialDecay",
    ) -> None:
        super().__init__(initial_learning_rate, decay_steps, decay_rate, staircase, name)

    def __call__(self, step: Any) -> Any:
        initial, p = self._ratio(step)
        return np.asarray(initial * _pow(_cast(self.decay_rate, initial.dtype), p))


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[i]`` for ``boundaries[i-1] < step <= boundaries[i]``.

    Raises:
      ValueError: unless there is one more value than boundaries (Keras's message).
    """

    def __init__(
        self, boundaries: Sequence[Any], values: Sequence[Any], name: str = "PiecewiseConstant"
    ) -> None:
        if len(boundaries) != len(values) - 1:
            raise ValueError(
                "The length of boundaries should be 1 less than the length of values. "
                f"Received: boundaries={boundaries} of length {len(boundaries)}, and "
                f"values={values} of length {len(values)}."
            )
        self.boundaries, self.values, self.name = list(boundaries), list(values), name

    def __call__(self, step: Any) -> Any:
        values = [as_array(v) for v in self.values]
        now = as_array(step)
        bounds = [as_array(b).astype(now.dtype) for b in self.boundaries]
        dtype = values[0].dtype
        # Keras's sum of (in range) * value over the ranges: NaN values show everywhere
        result = np.zeros((), dtype)
        result = result + (now <= bounds[0]).astype(dtype) * values[0]
        result = result + (now > bounds[-1]).astype(dtype) * values[-1]
        for low, high, value in zip(bounds[:-1], bounds[1:], values[1:-1], strict=True):
            result = result + ((now > low) & (now <= high)).astype(dtype) * value
        return np.asarray(result)


class PolynomialDecay(LearningRateSchedule):
    """``(initial - end) * (1 - step / decay_steps) ** power + end``, the step capped at
    ``decay_steps`` (or, with ``cycle``, ``decay_steps`` multiplied up past the step).

    Raises:
      ValueError: ``decay_steps`` <= 0 (Keras's message).
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        end_learning_rate: float = 0.0001,
        power: float = 1.0,
        cycle: bool = False,
        name: str = "PolynomialDecay",
    ) -> None:
        self.initial_learning_rate, self.decay_steps = initial_learning_rate, decay_steps
        self.end_learning_rate, self.power, self.cycle = end_learning_rate, power, cycle
        self.name = name
        _check_steps("decay_steps", decay_steps)

    def __call__(self, step: Any) -> Any:
        initial, dtype = _initial(self.initial_learning_rate)
        end = _cast(self.end_learning_rate, dtype)
        power = _cast(self.power, dtype)
        now = _step(step, dtype)
        steps = _cast(self.decay_steps, dtype)
        if self.cycle:  # Keras divides by the Python number, converted to the step's dtype
            ratio = now / dtype.type(self.decay_steps)
            steps = steps * (dtype.type(1.0) if now == 0 else np.ceil(ratio))
        else:
            now = np.minimum(now, steps)
        p = now / steps
        return np.asarray((initial - end) * _pow(dtype.type(1) - p, power) + end)


class InverseTimeDecay(_RateDecay):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)`` (the ratio floored
    with ``staircase``); ``name`` defaults to ``"InverseTimeDecay"``."""

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        decay_rate: float,
        staircase: bool = False,
        name: str | None = "InverseTimeDecay",
    ) -> None:
        super().__init__(initial_learning_rate, decay_steps, decay_rate, staircase, name)

    def __call__(self, step: Any) -> Any:
        initial, p = self._ratio(step)
        dtype = initial.dtype
        denominator = _cast(1, dtype) + _cast(self.decay_rate, dtype) * p
        return np.asarray(initial / denominator)


class CosineDecay(LearningRateSchedule):
    """A cosine from the initial rate (or ``warmup_target`` after a linear warmup of
    ``warmup_steps``) down to ``alpha`` times it over ``decay_steps``, then flat.

    Raises:
      ValueError: ``decay_steps`` <= 0 (Keras's message).
    """

    def __init__(
        self,
        initial_learning_rate: float,
        decay_steps: int,
        alpha: float = 0.0,
        name: str = "CosineDecay",
        warmup_target: float | None = None,
        warmup_steps: int = 0,
    ) -> None:
        self.initial_learning_rate, self.decay_steps, self.alpha = (
            initial_learning_rate,
            decay_steps,
            alpha,
        )
        self.name, self.warmup_target, self.warmup_steps = name, warmup_target, warmup_steps
        _check_steps("decay_steps", decay_steps)

    def _decay(self, now: Any, steps: Any, start: Any, dtype: np.dtype) -> Any:
        fraction = now / steps
        cosine = dtype.type(0.5) * (dtype.type(1.0) + _cos(dtype.type(math.pi) * fraction))
        # (1 - alpha) is a Python double here, converted to the dtype as one number
        decayed = dtype.type(1 - self.alpha) * cosine + dtype.type(self.alpha)
        return start * decayed

    def __call__(self, step: Any) -> Any:
        initial, dtype = _initial(self.initial_learning_rate)
        steps = _cast(self.decay_steps, dtype)
        now = _step(step, dtype)
        if self.warmup_target is None:
            return np.asarray(self._decay(np.minimum(now, steps), steps, initial, dtype))
        target = _cast(self.warmup_target, dtype)
        warmup = _cast(self.warmup_steps, dtype)
        now = np.minimum(now, steps + warmup)
        if now < warmup:
            return np.asarray((target - initial) * (now / warmup) + initial)
        return np.asarray(self._decay(now - warmup, steps, target, dtype))


class CosineDecayRestarts(LearningRateSchedule):
    """Cosine decay over ``first_decay_steps``, restarted with periods ``t_mul`` times longer
    and peaks ``m_mul`` times lower (SGDR).

    Raises:
      ValueError: ``first_decay_steps`` <= 0 (Keras's message).
    """

    def __init__(
        self,
        initial_learning_rate: float,
        first_decay_steps: int,
        t_mul: float = 2.0,
        m_mul: float = 1.0,
        alpha: float = 0.0,
        name: str = "SGDRDecay",
    ) -> None:
        self.initial_learning_rate, self.first_decay_steps = (
            initial_learning_rate,
            first_decay_steps,
        )
        self._t_mul, self._m_mul, self.alpha, self.name = t_mul, m_mul, alpha, name
        _check_steps("first_decay_steps", first_decay_steps)

    def __call__(self, step: Any) -> Any:
        initial, dtype = _initial(self.initial_learning_rate)
        one = dtype.type(1.0)
        alpha = _cast(self.alpha, dtype)
        t_mul, m_mul = _cast(self._t_mul, dtype), _cast(self._m_mul, dtype)
        fraction = _step(step, dtype) / _cast(self.first_decay_steps, dtype)
        if t_mul == one:
            restart = np.floor(fraction)
            fraction = fraction - restart
        else:
            restart = np.floor(_log(one - fraction * (one - t_mul)) / _log(t_mul))
            done = (one - _pow(t_mul, restart)) / (one - t_mul)
            fraction = (fraction - done) / _pow(t_mul, restart)
        factor = _pow(m_mul, restart)
        cosine = dtype.type(0.5) * factor * (one + _cos(dtype.type(math.pi) * fraction))
        decayed = (_cast(1, dtype) - alpha) * cosine + alpha
        return np.asarray(initial * decayed)


@functools.cache
def _c_float_functions() -> dict[str, Any]:
    """The C library's float32 ``cosf``, ``logf`` and ``powf``, which TF's CPU kernels call for
    a scalar (numpy's own float32 ``cos`` and ``log`` differ from them in the last bit at some
    arguments); empty where no C math library is found (numpy's are used then).

    Loaded on first use, by name, else from the symbols the interpreter already has (it links
    the C math library): never ``ctypes.util.find_library``, which runs a subprocess
    (``ldconfig``), something an MPI process should not do.
    """
    library = None
    for path in ("libm.so.6", "libm.dylib", None):
        try:
            library = ctypes.CDLL(path)
            break
        except OSError:
            continue
    found: dict[str, Any] = {}
    for name, arity in (("cosf", 1), ("logf", 1), ("powf", 2)):
        fn = getattr(library, name, None) if library is not None else None
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float] * arity
            found[name] = fn
    return found


def _scalar(fn32: str, fn64: Any, numpy_fn: Any, *args: Any) -> Any:
    """``numpy_fn(*args)`` of 0-d arrays, as TF computes it: the C library's float32 function
    for float32, Python's (the C library's double one) for float64."""
    dtype = np.result_type(*args)
    c_float = _c_float_functions() if dtype == np.float32 else {}
    if fn32 in c_float:
        return np.float32(c_float[fn32](*(float(a) for a in args)))
    if dtype == np.float64:
        try:
            return np.float64(fn64(*(float(a) for a in args)))
        except (ValueError, OverflowError):  # Python raises where C gives NaN or inf
            pass
    return numpy_fn(*args)


def _pow(base: Any, exponent: Any) -> Any:
    return _scalar("powf", math.pow, np.power, base, exponent)


def _cos(x: Any) -> Any:
    return _scalar("cosf", math.cos, np.cos, x)


def _log(x: Any) -> Any:
    return _scalar("logf", math.log, np.log, x)

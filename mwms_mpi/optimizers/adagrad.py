"""Adagrad with Keras's update rule, dense and sparse (its accumulator starts non-zero)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi._arrays import array_module
from mwms_mpi.optimizers import _arguments, _sparse
from mwms_mpi.optimizers.optimizer import Optimizer, dense_grad


class Adagrad(Optimizer):
    """``keras.optimizers.Adagrad``.

    ``accumulator += g**2; var -= lr * g / sqrt(accumulator + epsilon)``, the accumulator
    starting at ``initial_accumulator_value``. An ``IndexedSlices`` gradient follows Keras's
    sparse arithmetic: each slice's square is added to its row in turn (repeated rows add
    ``a**2 + b**2``), and the step is scattered into the variable row by row.

    Args:
      learning_rate: a float or a schedule, 0.001 by default.
      initial_accumulator_value: the accumulators' starting value, 0.1.
      epsilon: added for numerical stability, 1e-7 as in Keras.
      weight_decay, clipnorm, ..., gradient_accumulation_steps, name, **kwargs: Keras's base
        optimizer arguments, in Keras's order (a positional call binds as in Keras): see
        :class:`~mwms_mpi.optimizers.Optimizer`.
    """

    _slot_names = ("accumulator",)

    def __init__(
        self,
        learning_rate: float = 0.001,
        initial_accumulator_value: float = 0.1,
        epsilon: float = 1e-7,
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        use_ema: bool = False,
        ema_momentum: float = 0.99,
        ema_overwrite_frequency: int | None = None,
        loss_scale_factor: float | None = None,
        gradient_accumulation_steps: int | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(learning_rate, **_arguments.base_arguments(locals()), **kwargs)
        self.initial_accumulator_value = initial_accumulator_value
        self.epsilon = epsilon

    def build(self, var_list: Sequence[Any]) -> None:
        """``Optimizer.build``, under this class's Keras name for the argument (``var_list``
        here, ``variables`` in Keras's ``SGD`` and base class)."""
        super().build(var_list)

    def _slot_initial_value(self, slot: str, zeros: Any) -> Any:
        # Keras's Constant initializer: ops.cast(value, dtype) * ones; the cast of a Python
        # float goes through float32 (tf.cast converts it to a float32 tensor first).
        value = zeros.dtype.type(np.float32(self.initial_accumulator_value))
        return array_module(zeros).full_like(zeros, value)

    def _update_step(
        self, var: Any, grad: Any, *slots: Any, step: int, learning_rate: np.ndarray
    ) -> Any:
        # TF divides by zero silently (inf, NaN), so numpy must not warn where Keras does not.
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._adagrad_step(var, grad, *slots, learning_rate=learning_rate)

    def _adagrad_step(self, var: Any, grad: Any, *slots: Any, learning_rate: np.ndarray) -> Any:
        dtype = np.dtype(var.dtype)
        cast = dtype.type
        lr = cast(learning_rate)  # Keras's ops.cast(learning_rate, variable.dtype)
        epsilon = cast(self.epsilon)  # a Python float Keras converts straight to the dtype
        (accumulator,) = slots
        sparse = _sparse.slices_of(grad, dtype)
        if sparse is None:
            g = dense_grad(grad, dtype)
            xp = array_module(g)
            acc_new = accumulator.read_value() + xp.square(g)
            accumulator.assign(acc_new)
            return var.assign_sub((lr * g) / xp.sqrt(acc_new + epsilon))
        indices, values = sparse
        xp = array_module(values)
        acc_new = _sparse.scatter_added(accumulator.read_value(), indices, xp.square(values))
        accumulator.assign(acc_new)
        rows, step_values = _sparse.divide_by_dense(
            indices, lr * values, xp.sqrt(acc_new + epsilon)
        )
        return var.assign(_sparse.scatter_added(var.read_value(), rows, -step_values))

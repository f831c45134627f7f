"""Stochastic gradient descent with optional (Nesterov) momentum, with Keras's update rule."""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi.optimizers import _arguments, _sparse
from mwms_mpi.optimizers.optimizer import Optimizer, dense_grad


class SGD(Optimizer):
    """``keras.optimizers.SGD``: ``v -= lr * g``, or with momentum
    ``m = momentum * m - lr * g; v += m`` (Nesterov: ``v += momentum * m - lr * g``).

    Args:
      learning_rate: a float or a schedule, 0.01 by default as in Keras.
      momentum: a float >= 0.
      nesterov: whether to use Nesterov momentum.
      weight_decay, clipnorm, ..., gradient_accumulation_steps, name, **kwargs: Keras's base
        optimizer arguments, in Keras's order (a positional call binds as in Keras): see
        :class:`~mwms_mpi.optimizers.Optimizer`.

    Raises:
      ValueError: for a negative momentum (Keras's message).
    """

    def __init__(
        self,
        learning_rate: float = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
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
        if not isinstance(momentum, float | int) or momentum < 0 or momentum > 1:
            raise ValueError("`momentum` must be a float between [0, 1].")
        super().__init__(learning_rate, **_arguments.base_arguments(locals()), **kwargs)
        self.momentum = float(momentum)
        self.nesterov = nesterov
        self._slot_names = ("momentum",) if self.momentum else ()

    def _update_step(
        self, var: Any, grad: Any, *slots: Any, step: int, learning_rate: np.ndarray
    ) -> Any:
        dtype = np.dtype(var.dtype)
        lr = dtype.type(learning_rate)  # Keras's ops.cast(learning_rate, variable.dtype)
        sparse = _sparse.slices_of(grad, dtype)
        if not slots and sparse is not None:  # Keras: scatter_sub, row by row (repeats too)
            indices, values = sparse
            return var.assign(_sparse.scatter_added(var.read_value(), indices, -(values * lr)))
        if sparse is not None:  # Keras scales the slices, then adds repeated rows up
            indices, values = sparse
            scaled = _sparse.densify(indices, values * lr, tuple(var.shape))
        else:  # numpy or CuPy: the step runs where the variable lives
            scaled = dense_grad(grad, dtype) * lr
        if not slots:  # read_value=False: nothing reads what these assigns return
            return var.assign_sub(scaled, read_value=False)
        (m,) = slots
        momentum = dtype.type(np.float32(self.momentum))  # Keras's cast goes through float32
        m_new = m.read_value() * momentum - scaled
        m.assign(m_new, read_value=False)
        if self.nesterov:
            return var.assign_add(m_new * momentum - scaled, read_value=False)
        return var.assign_add(m_new, read_value=False)

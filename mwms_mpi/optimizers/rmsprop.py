"""RMSprop with Keras's update rule (plain momentum, optional centering), dense and sparse."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi._arrays import array_module
from mwms_mpi.optimizers import _arguments, _sparse
from mwms_mpi.optimizers.optimizer import Optimizer, dense_grad


class RMSprop(Optimizer):
    """``keras.optimizers.RMSprop``.

    ``velocity = rho * velocity + (1 - rho) * g**2``; centered, also
    ``average_gradient = rho * average_gradient + (1 - rho) * g`` and the denominator
    ``velocity - average_gradient**2 + epsilon``, else ``velocity + epsilon``;
    ``increment = lr * g / sqrt(denominator)``; with momentum
    ``momentum_slot = momentum * momentum_slot + increment; var -= momentum_slot``, else
    ``var -= increment``. An ``IndexedSlices`` gradient follows Keras's sparse arithmetic
    (the increment is scattered into the variable row by row).

    Args:
      learning_rate: a float or a schedule, 0.001 by default.
      rho: the discounting factor for the old gradients, 0.9.
      momentum: a float; above 0 the optimizer keeps a momentum slot (Keras's test).
      epsilon: added for numerical stability, 1e-7 as in Keras.
      centered: whether to normalize by the estimated variance of the gradient.
      weight_decay, clipnorm, ..., gradient_accumulation_steps, name, **kwargs: Keras's base
        optimizer arguments, in Keras's order (a positional call binds as in Keras): see
        :class:`~mwms_mpi.optimizers.Optimizer`.
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        rho: float = 0.9,
        momentum: float = 0.0,
        epsilon: float = 1e-7,
        centered: bool = False,
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
        self.rho, self.momentum, self.epsilon, self.centered = rho, momentum, epsilon, centered
        # Keras builds them in this order: velocities, momentums, average gradients.
        self._slot_names = (
            ("velocity",)
            + (("momentum",) if momentum > 0 else ())
            + (("average_gradient",) if centered else ())
        )

    def build(self, var_list: Sequence[Any]) -> None:
        """``Optimizer.build``, under this class's Keras name for the argument (``var_list``
        here, ``variables`` in Keras's ``SGD`` and base class)."""
        super().build(var_list)

    def _update_step(
        self, var: Any, grad: Any, *slots: Any, step: int, learning_rate: np.ndarray
    ) -> Any:
        # TF divides by zero silently (inf, NaN), so numpy must not warn where Keras does not.
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._rmsprop_step(var, grad, *slots, learning_rate=learning_rate)

    def _rmsprop_step(self, var: Any, grad: Any, *slots: Any, learning_rate: np.ndarray) -> Any:
        # Keras's ops in its order and dtypes: the step's learning rate is cast to the
        # variable's dtype; rho, 1 - rho (a Python double), momentum and epsilon are Python
        # floats that Keras converts straight to the variable's dtype (never through float32).
        dtype = np.dtype(var.dtype)
        cast = dtype.type
        lr = cast(learning_rate)
        rho, one_minus_rho = cast(self.rho), cast(1 - self.rho)
        sparse = _sparse.slices_of(grad, dtype)
        shape = tuple(var.shape)
        velocity = slots[0]
        rest = list(slots[1:])
        momentum = rest.pop(0) if self.momentum > 0 else None
        average_grad = rest.pop(0) if self.centered else None

        if sparse is None:
            g = dense_grad(grad, dtype)
            xp = array_module(g)
            square_part, grad_part = one_minus_rho * xp.square(g), one_minus_rho * g
        else:
            indices, values = sparse
            xp = array_module(values)
            square_part = _sparse.densify(indices, one_minus_rho * xp.square(values), shape)
            grad_part = _sparse.densify(indices, one_minus_rho * values, shape)

        v_new = rho * velocity.read_value() + square_part
        velocity.assign(v_new)
        if average_grad is not None:
            ag_new = rho * average_grad.read_value() + grad_part
            average_grad.assign(ag_new)
            denominator = v_new - xp.square(ag_new) + cast(self.epsilon)
        else:
            denominator = v_new + cast(self.epsilon)
        root = xp.sqrt(denominator)

        if sparse is None:
            increment = (lr * g) / root
        else:
            inc_rows, inc_values = _sparse.divide_by_dense(indices, lr * values, root)
            if momentum is None:
                return var.assign(_sparse.scatter_added(var.read_value(), inc_rows, -inc_values))
            increment = _sparse.densify(inc_rows, inc_values, shape)
        if momentum is None:
            return var.assign_sub(increment)
        m_new = cast(self.momentum) * momentum.read_value() + increment
        momentum.assign(m_new)
        return var.assign_sub(m_new)

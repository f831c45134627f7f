"""Adam with Keras's update rule (bias correction folded into the step size)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mwms_mpi._arrays import array_module
from mwms_mpi.optimizers import _arguments, _sparse
from mwms_mpi.optimizers.optimizer import Optimizer, dense_grad


class Adam(Optimizer):
    """``keras.optimizers.Adam``.

    At step t: ``alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)``,
    ``m += (g - m) * (1 - beta_1)``, ``v += (g**2 - v) * (1 - beta_2)``,
    ``var -= alpha * m / (sqrt(v) + epsilon)`` (AMSGrad keeps the largest ``v`` seen).

    Args:
      learning_rate: a float or a schedule, 0.001 by default.
      beta_1: the decay of the first moment, 0.9.
      beta_2: the decay of the second moment, 0.999.
      epsilon: added for numerical stability, 1e-7 as in Keras.
      amsgrad: whether to use AMSGrad.
      weight_decay, clipnorm, ..., gradient_accumulation_steps, name, **kwargs: Keras's base
        optimizer arguments, in Keras's order (a positional call binds as in Keras): see
        :class:`~mwms_mpi.optimizers.Optimizer`.
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
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
        self.beta_1, self.beta_2, self.epsilon, self.amsgrad = beta_1, beta_2, epsilon, amsgrad
        self._slot_names = (
            ("momentum", "velocity", "velocity_hat") if amsgrad else ("momentum", "velocity")
        )
        self._last_scalars: tuple[tuple[Any, ...], tuple[Any, Any, Any, Any]] | None = None

    def build(self, var_list: Sequence[Any]) -> None:
        """``Optimizer.build``, under this class's Keras name for the argument (``var_list``
        here, ``variables`` in Keras's ``SGD`` and base class)."""
        super().build(var_list)

    def _scalars(self, cast: Any, step: int, rate: np.ndarray) -> tuple[Any, Any, Any, Any]:
        """Keras's scalars of a step in the variables' dtype (``cast``): ``alpha``,
        ``1 - beta_1``, ``1 - beta_2`` and ``epsilon``.

        The same for every variable of a step: made for its first variable, and kept while
        the dtype, the step, the step's rate and the hyperparameters (plain attributes a user
        may change) are the ones they were made from.
        """
        key = (cast, step, rate.dtype, rate.item(), self.beta_1, self.beta_2, self.epsilon)
        if self._last_scalars is not None and self._last_scalars[0] == key:
            return self._last_scalars[1]
        lr = cast(rate)  # Keras's ops.cast(learning_rate, variable.dtype)
        t = cast(step)
        # Keras casts the betas through float32 (a Python float becomes a float32 tensor first)
        beta_1_power = cast(np.float32(self.beta_1)) ** t
        beta_2_power = cast(np.float32(self.beta_2)) ** t
        alpha = lr * np.sqrt(cast(1) - beta_2_power) / (cast(1) - beta_1_power)
        scalars = (alpha, cast(1 - self.beta_1), cast(1 - self.beta_2), cast(self.epsilon))
        self._last_scalars = (key, scalars)
        return scalars

    def _update_step(
        self, var: Any, grad: Any, *slots: Any, step: int, learning_rate: np.ndarray
    ) -> Any:
        # Keras's arithmetic, in the variable's dtype and order, so results match it bitwise.
        cast = np.dtype(var.dtype).type
        sparse = _sparse.slices_of(grad, var.dtype)
        grad = dense_grad(grad, var.dtype)  # numpy or CuPy: the step runs where the variable lives
        xp = array_module(grad)
        # Keras squares a sparse gradient's slices, then adds them up: a**2 + b**2 for a
        # repeated row, not (a + b)**2
        square = (
            xp.square(grad)
            if sparse is None
            else _sparse.densify(sparse[0], xp.square(sparse[1]), tuple(var.shape))
        )
        alpha, keep_1, keep_2, epsilon = self._scalars(cast, step, learning_rate)
        m, v = slots[0], slots[1]
        # Each new value is written into the slot's or variable's own storage (copy-on-write
        # where read_only_value() handed it out: Variable._update_with), in the same elementwise
        # operations as Keras's assigns, so the same bits without a read, an assign's
        # conversion or its copies: m + (g - m) * (1 - beta_1) ...
        delta = grad - m._dense()
        delta *= keep_1
        m_new = m._update_with(xp.add, delta, "AssignAddVariableOp")
        # ... v + (g**2 - v) * (1 - beta_2) ...
        delta = square - v._dense()  # not in place: a gradient may broadcast to the shape
        delta *= keep_2
        v_new = v._update_with(xp.add, delta, "AssignAddVariableOp")
        if self.amsgrad:  # ... the largest v seen ...
            v_new = slots[2]._update_with(xp.maximum, v_new, "AssignVariableOp")
        # ... and var - (m * alpha) / (sqrt(v) + epsilon)
        update = m_new * alpha
        denominator = xp.sqrt(v_new)
        denominator += epsilon
        update /= denominator
        var._update_with(xp.subtract, update, "AssignSubVariableOp")
        return None


class AdamW(Adam):
    """``keras.optimizers.AdamW``: Adam with decoupled weight decay (``weight_decay``, 0.004
    by default), applied as the base class applies it (``Optimizer``).

    Raises:
      ValueError: for ``weight_decay=None`` (Keras's message).
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        weight_decay: float = 0.004,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
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
        super().__init__(
            learning_rate,
            beta_1,
            beta_2,
            epsilon,
            amsgrad,
            **_arguments.base_arguments(locals()),
            **kwargs,
        )
        if self.weight_decay is None:
            raise ValueError("Argument `weight_decay` must be a float. Received: weight_decay=None")

"""Adam with Keras's update rule (bias correction folded into the step size)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mwms_mpi._arrays import array_module
from mwms_mpi.optimizers import _sparse
from mwms_mpi.optimizers.optimizer import Optimizer, dense_grad


class Adam(Optimizer):
    """``keras.optimizers.Adam``.

    At step t: ``alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)``,
    ``m += (g - m) * (1 - beta_1)``, ``v += (g**2 - v) * (1 - beta_2)``,
    ``var -= alpha * m / (sqrt(v) + epsilon)`` (AMSGrad keeps the largest ``v`` seen).

    Args:
      learning_rate: a float, 0.001 by default.
      beta_1: the decay of the first moment, 0.9.
      beta_2: the decay of the second moment, 0.999.
      epsilon: added for numerical stability, 1e-7 as in Keras.
      amsgrad: whether to use AMSGrad.
      name: a name for the optimizer's variables.
    """

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        name: str = "adam",
    ) -> None:
        super().__init__(learning_rate, name)
        self.beta_1, self.beta_2, self.epsilon, self.amsgrad = beta_1, beta_2, epsilon, amsgrad
        self._slot_names = (
            ("momentum", "velocity", "velocity_hat") if amsgrad else ("momentum", "velocity")
        )

    def _update_step(self, var: Any, grad: Any, *slots: Any, step: int) -> Any:
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
        lr = cast(np.float32(self.learning_rate))  # Keras keeps it in a float32 variable
        t = cast(step)
        # Keras casts the betas through float32 (a Python float becomes a float32 tensor first)
        beta_1_power = cast(np.float32(self.beta_1)) ** t
        beta_2_power = cast(np.float32(self.beta_2)) ** t
        alpha = lr * np.sqrt(cast(1) - beta_2_power) / (cast(1) - beta_1_power)
        m, v = slots[0], slots[1]
        m_old, v_old = m.read_value(), v.read_value()
        m_new = m_old + (grad - m_old) * cast(1 - self.beta_1)
        v_new = v_old + (square - v_old) * cast(1 - self.beta_2)
        # read_value=False: nothing reads what these assigns return (building the returned
        # reads cost about 7% of apply_gradients on the demo's small variables)
        m.assign(m_new, read_value=False)
        v.assign(v_new, read_value=False)
        if self.amsgrad:
            v_new = xp.maximum(slots[2].read_value(), v_new)
            slots[2].assign(v_new, read_value=False)
        update = (m_new * alpha) / (xp.sqrt(v_new) + cast(self.epsilon))
        return var.assign_sub(update, read_value=False)

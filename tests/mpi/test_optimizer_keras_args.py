"""Keras's base optimizer arguments under MultiWorkerMirroredStrategy equal a serial reference.

Each replica divides by ``loss_scale_factor`` and clips its own gradient before the all-reduce
(Keras under ``tf.distribute``), and weight decay runs on every copy before the update. The
gradients are ``s_r * [3, 4, 0, 0]`` with ``s_r = (r + 1) / 4`` for replica ``r``: their norms
are exact (``5 * s_r``), and with clip bounds of 5 times a dyadic number every clipped gradient
is a small dyadic multiple of ``[3, 4]``, so the sums over replicas are exact in any order and
the variables are compared bit for bit on every rank, at any world size; ``global_clipnorm``'s
scale ``clip / norm`` is not exact, so that case is compared within the rounding of the sum
(docs/architecture.md, "Floating-point order").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import optimizers
from tests.support.mpi import all_ranks_ok, replica_id

pytestmark = pytest.mark.mpi

STEPS = 2
LR = 0.25  # a float32 learning rate with the same value in float64
INIT = np.array([1.0, -2.0, 0.5, 4.0])
CONFIGS: dict[str, dict[str, Any]] = {
    "clipnorm": {"clipnorm": 1.25},
    "clipvalue": {"clipvalue": 1.25},
    "global_clipnorm": {"global_clipnorm": 2.0},
    "weight_decay_loss_scale": {"weight_decay": 0.5, "loss_scale_factor": 4.0, "clipnorm": 0.3125},
}


def _grad(replica: int) -> np.ndarray:
    return (replica + 1) / 4 * np.array([3.0, 4.0, 0.0, 0.0])


def _clipped(grad: np.ndarray, kw: dict[str, Any]) -> np.ndarray:
    """One replica's gradient as Keras transforms it (``tf.clip_by_norm``'s operations)."""
    grad = grad / kw.get("loss_scale_factor", 1.0)
    if "clipnorm" in kw:
        c = kw["clipnorm"]
        return (grad * c) / max(float(np.sqrt(np.sum(grad * grad))), c)
    if "clipvalue" in kw:
        return np.clip(grad, -kw["clipvalue"], kw["clipvalue"])
    if "global_clipnorm" in kw:
        c, norm = kw["global_clipnorm"], float(np.sqrt(np.sum(grad * grad)))
        return grad * (c * min(1.0 / norm, 1.0 / c))
    return grad


def _reference(kw: dict[str, Any], replicas: int) -> np.ndarray:
    var = INIT.copy()
    for _ in range(STEPS):
        if "weight_decay" in kw:
            var = var - var * kw["weight_decay"] * LR
        total = sum((_clipped(_grad(r), kw) for r in range(replicas)), np.zeros(4))
        var = var - total * LR
    return var


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_replica_clips_its_own_gradient(strategy: Any, test_comm: Any, name: str) -> None:
    kw = CONFIGS[name]
    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        var = mwms_mpi.Variable(INIT.copy())
        opt = optimizers.SGD(LR, **kw)

    def step_fn() -> None:
        opt.apply_gradients([(_grad(replica_id()), var)])

    for _ in range(STEPS):
        strategy.run(step_fn)
    want = _reference(kw, replicas)
    got = [np.asarray(c) for c in strategy.experimental_local_results(var)]
    if name == "global_clipnorm":  # clip / norm is rounded: the sum's order shows
        bound = replicas * STEPS * 8 * np.finfo(np.float64).eps * (1 + np.abs(INIT).max())
        ok = all(np.abs(g - want).max() <= bound for g in got)
        ok = ok and all(g.tobytes() == got[0].tobytes() for g in got)  # copies stay equal
    else:
        ok = all(g.tobytes() == want.tobytes() for g in got)
    # without clipping the step would be far larger: the test sees where clipping happens
    assert replicas == 1 or not np.allclose(want, _reference({}, replicas))
    assert all_ranks_ok(test_comm, ok), (
        f"rank {test_comm.Get_rank()}: {[g.tolist() for g in got]} != {want.tolist()}"
    )

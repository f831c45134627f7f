"""RMSprop and Adagrad under MultiWorkerMirroredStrategy equal a serial numpy reference.

Every replica applies its own gradient (dense, or ``IndexedSlices`` whose rows repeat within
and across replicas); the optimizer sums them over every replica of every worker and updates
every copy alike. The gradients are small multiples of 1/4, so their sum is exact in any order
(such small dyadic rationals add without rounding); the update after it is Keras's arithmetic,
which the serial reference below restates in numpy, so the variables and slots are compared
bit for bit on every rank, at any world size and with 1 or 2 replicas per worker.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import optimizers
from tests.support.mpi import all_ranks_ok, replica_id

pytestmark = pytest.mark.mpi

SHAPE = (5, 2)
STEPS = 3
CONFIGS = {
    "rmsprop": ("RMSprop", {"learning_rate": 0.01}),
    "rmsprop_full": (
        "RMSprop",
        {"learning_rate": 0.02, "rho": 0.8, "momentum": 0.5, "epsilon": 1e-3, "centered": True},
    ),
    "adagrad": ("Adagrad", {"learning_rate": 0.1}),
    "adagrad_iav": (
        "Adagrad",
        {"learning_rate": 0.05, "initial_accumulator_value": 0.5, "epsilon": 1e-3},
    ),
}


def _dense(replica: int, step: int) -> np.ndarray:
    """Replica ``replica``'s dense gradient at ``step``: multiples of 1/4 in [-0.75, 0.75]."""
    k = np.arange(SHAPE[0] * SHAPE[1], dtype=np.float64)
    return (((replica + 1) * (step + 2) * (k + 1)) % 7 - 3).reshape(SHAPE) / 4


def _sparse(replica: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, values)``: two rows, the first repeated by every replica with that id mod 5."""
    indices = np.array([replica % SHAPE[0], (replica + step) % SHAPE[0]], np.int64)
    values = _dense(replica, step)[:2] + 0.25  # never all zero
    return indices, values


def _reference(name: str, kind: str, replicas: int) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """Keras's arithmetic on the summed gradients, serially: the variable and the slots; ``None``
    where a sparse step's root holds a zero or a NaN (centered RMSprop once a row's slices
    outnumber about ``1 / (1 - rho)``: 16 replicas here), where Keras divides the slices by
    another path (its regather, in tests/unit/test_optimizers_rmsprop_adagrad.py)."""
    cls, kw = CONFIGS[name]
    var = np.arange(SHAPE[0] * SHAPE[1], dtype=np.float64).reshape(SHAPE) / 8
    lr = float(np.float32(kw["learning_rate"]))  # Keras's float32 learning-rate variable
    eps = kw.get("epsilon", 1e-7)
    if cls == "Adagrad":
        acc = np.full(SHAPE, float(np.float32(kw.get("initial_accumulator_value", 0.1))))
    rho, mom, centered = kw.get("rho", 0.9), kw.get("momentum", 0.0), kw.get("centered", False)
    v, m, ag = np.zeros(SHAPE), np.zeros(SHAPE), np.zeros(SHAPE)
    for step in range(STEPS):
        if kind == "dense":
            g = sum((_dense(r, step) for r in range(replicas)), np.zeros(SHAPE))
            if cls == "Adagrad":
                acc = acc + g * g
                var = var - (lr * g) / np.sqrt(acc + eps)
                continue
            v = rho * v + (1 - rho) * (g * g)
            if centered:
                ag = rho * ag + (1 - rho) * g
            inc = (lr * g) / np.sqrt((v - ag * ag + eps) if centered else (v + eps))
        else:
            # the all-gather concatenates the replicas' slices in replica order
            rows = [
                (i, val) for r in range(replicas) for i, val in zip(*_sparse(r, step), strict=True)
            ]
            if cls == "Adagrad":
                for i, val in rows:
                    acc[i] = acc[i] + val * val
                root = np.sqrt(acc + eps)
                for i, val in rows:
                    var[i] = var[i] - (lr * val) / root[i]
                continue
            sq, gs = np.zeros(SHAPE), np.zeros(SHAPE)
            for i, val in rows:
                sq[i] = sq[i] + (1 - rho) * (val * val)
                gs[i] = gs[i] + (1 - rho) * val
            v = rho * v + sq
            if centered:
                ag = rho * ag + gs
            with np.errstate(invalid="ignore"):
                root = np.sqrt((v - ag * ag + eps) if centered else (v + eps))
            if bool(((root == 0) | np.isnan(root)).any()):
                return None  # Keras's divide of slices by such a root takes its regather path
            if mom == 0:
                for i, val in rows:
                    var[i] = var[i] - (lr * val) / root[i]
                continue
            inc = np.zeros(SHAPE)
            for i, val in rows:
                inc[i] = inc[i] + (lr * val) / root[i]
        if mom > 0:
            m = mom * m + inc
            var = var - m
        else:
            var = var - inc
    if cls == "Adagrad":
        return var, [acc]
    return var, [v] + ([m] if mom > 0 else []) + ([ag] if centered else [])


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_copy_equals_the_serial_reference(
    strategy: Any, test_comm: Any, name: str, kind: str
) -> None:
    cls, kwargs = CONFIGS[name]
    reference = _reference(name, kind, strategy.num_replicas_in_sync)
    if reference is None:  # the same on every rank: it depends on the replica count only
        pytest.skip(f"Keras's regather path at {strategy.num_replicas_in_sync} replicas")
    with strategy.scope():
        init = np.arange(SHAPE[0] * SHAPE[1], dtype=np.float64).reshape(SHAPE) / 8
        var = mwms_mpi.Variable(init)
        opt = getattr(optimizers, cls)(**kwargs)

    def step_fn(step: int) -> None:
        r = replica_id()
        if kind == "dense":
            grad: Any = _dense(r, step)
        else:
            indices, values = _sparse(r, step)
            grad = mwms_mpi.IndexedSlices(values, indices, np.array(SHAPE, np.int64))
        opt.apply_gradients([(grad, var)])

    for step in range(STEPS):
        strategy.run(step_fn, args=(step,))

    want_var, want_slots = reference
    got = [np.asarray(c) for c in strategy.experimental_local_results(var)]
    slots = opt.variables[1:]
    got_slots = [[np.asarray(c) for c in strategy.experimental_local_results(s)] for s in slots]
    ok = (
        all(g.tobytes() == want_var.tobytes() for g in got)
        and len(got_slots) == len(want_slots)
        and all(
            c.tobytes() == w.tobytes()
            for copies, w in zip(got_slots, want_slots, strict=True)
            for c in copies
        )
        and int(opt.iterations.numpy()) == STEPS
    )
    assert all_ranks_ok(test_comm, ok), (
        f"rank {test_comm.Get_rank()}: {[g.tolist() for g in got]} != {want_var.tolist()}"
    )

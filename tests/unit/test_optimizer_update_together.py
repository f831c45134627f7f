"""``apply_gradients`` updates every variable in one ``extended.update`` when it can.

That path (``Optimizer._update_together``) must give the bits of one update per variable (the
Keras order it replaced) for every optimizer and replica count, and must not be taken where an
update can fail half way: there, one update per variable raises as before, with every copy of
an earlier variable updated and every copy of the failing one untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import distribute, errors, optimizers
from mwms_mpi.optimizers import optimizer as optimizer_module

OPTIMIZERS: dict[str, Callable[[], optimizers.Optimizer]] = {
    "sgd": lambda: optimizers.SGD(0.1),
    "sgd_nesterov": lambda: optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optimizers.Adam(0.01),
    "adam_amsgrad": lambda: optimizers.Adam(0.01, amsgrad=True),
    "rmsprop_centered": lambda: optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "adagrad": lambda: optimizers.Adagrad(0.1),
}
DEVICES = {"one replica": None, "two replicas": ["/cpu:0", "/cpu:1"]}


def _strategy(devices: list[str] | None) -> Any:
    return distribute.MirroredStrategy(devices)


def _grads(step: int, replica: int, dtype: Any) -> list[np.ndarray]:
    rng = np.random.default_rng(100 * step + replica)
    return [rng.standard_normal((3, 2)).astype(dtype), rng.standard_normal(2).astype(dtype)]


def _train(devices: list[str] | None, make: Callable[[], Any], dtype: Any) -> list[bytes]:
    """Every copy of every variable, slot and the step counter after four steps, as bytes."""
    strategy = _strategy(devices)
    with strategy.scope():
        weights = [
            mwms_mpi.Variable(np.linspace(-1.0, 1.0, 6).reshape(3, 2).astype(dtype), name="w"),
            mwms_mpi.Variable(np.array([0.5, -0.5], dtype), name="b"),
        ]
        opt = make()

    def step(i: int) -> None:
        replica = distribute.get_replica_context().replica_id_in_sync_group
        opt.apply_gradients(zip(_grads(i, replica, dtype), weights, strict=True))

    for i in range(4):
        strategy.run(step, args=(i,))
    everything = [*weights, *opt.variables]
    return [
        np.asarray(copy.numpy()).tobytes()
        for var in everything
        for copy in strategy.experimental_local_results(var)
    ]


@pytest.mark.parametrize("devices", sorted(DEVICES))
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_same_bits_as_one_update_per_variable(
    monkeypatch: pytest.MonkeyPatch, devices: str, name: str, dtype: Any
) -> None:
    taken: list[int] = []
    together = optimizer_module.Optimizer._update_together

    def counted(self: Any, *args: Any) -> None:
        taken.append(1)
        together(self, *args)

    monkeypatch.setattr(optimizer_module.Optimizer, "_update_together", counted)
    fused = _train(DEVICES[devices], OPTIMIZERS[name], dtype)
    assert len(taken) == 4, "every step should have taken the one-update path"
    monkeypatch.setattr(optimizer_module, "_updatable_together", lambda *args: False)
    per_variable = _train(DEVICES[devices], OPTIMIZERS[name], dtype)
    assert len(taken) == 4
    assert fused == per_variable


def test_a_shape_mismatch_fails_where_one_update_per_variable_fails() -> None:
    strategy = _strategy(DEVICES["two replicas"])
    with strategy.scope():
        first = mwms_mpi.Variable(np.array([1.0, 2.0]), name="first")
        second = mwms_mpi.Variable(np.array([3.0, 4.0]), name="second")
        opt = optimizers.SGD(0.5)
        opt.build([first, second])

    def step() -> None:
        opt.apply_gradients([(np.array([1.0, 1.0]), first), (np.array([1.0, 1.0, 1.0]), second)])

    with pytest.raises(errors.InvalidArgumentError, match="shapes must be equal"):
        strategy.run(step)
    # the first variable was updated on both copies (the sum of two replicas' 1.0: 2.0 * 0.5)
    for copy in strategy.experimental_local_results(first):
        assert copy.numpy().tolist() == [0.0, 1.0]
    for copy in strategy.experimental_local_results(second):
        assert copy.numpy().tolist() == [3.0, 4.0]
    assert int(opt.iterations.numpy()) == 0


def _adam_once(grad: np.ndarray) -> list[bytes]:
    strategy = _strategy(DEVICES["two replicas"])
    with strategy.scope():
        var = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32))
        opt = optimizers.Adam(0.1)
    strategy.run(lambda: opt.apply_gradients([(grad, var)]))
    return [copy.numpy().tobytes() for copy in strategy.experimental_local_results(var)]


def test_a_gradient_of_another_dtype_goes_one_variable_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A float64 gradient for a float32 variable is cast in the update (Keras's rule); that
    path goes one variable at a time, and gives what the same float32 gradient gives."""
    want = _adam_once(np.array([0.5, -0.25], np.float32))
    monkeypatch.setattr(
        optimizer_module.Optimizer,
        "_update_together",
        lambda *args: pytest.fail("a gradient of another dtype took the one-update path"),
    )
    assert _adam_once(np.array([0.5, -0.25], np.float64)) == want


def test_no_gradient_at_all_is_refused_and_counts_no_step() -> None:
    # TF 2.21 + Keras 3, MirroredStrategy on 2 CPUs: ValueError "No gradients provided for any
    # variable." (it counted a step here before)
    strategy = _strategy(DEVICES["two replicas"])
    with strategy.scope():
        var = mwms_mpi.Variable(np.array([1.0, 2.0]))
        opt = optimizers.SGD(0.5)
        opt.build([var])
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        strategy.run(lambda: opt.apply_gradients([(None, var)]))
    assert int(opt.iterations.numpy()) == 0
    assert var.numpy().tolist() == [1.0, 2.0]

"""SGD and Adam follow Keras's update rules exactly, in and out of a strategy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import distribute, optimizers

GRADS = [np.array([0.5, -1.0, 2.0]), np.array([0.25, 0.5, -1.0]), np.array([1.0, 1.0, 1.0])]

# Keras 3 (TF 2.21) on a float64 tf.Variable([1., 2., 3.]) after the three GRADS above:
#   opt.apply_gradients([(tf.constant(g), v)]) for g in GRADS; print(v.numpy().tolist())
KERAS = {
    "sgd": [0.8249999973922968, 1.949999999254942, 2.7999999970197678],
    "sgd_m": [0.716999999716878, 2.075999995648861, 2.54800000423193],
    "sgd_n": [0.5703000038847328, 2.018399993526936, 2.3932000116050243],
    "adam": [0.9715876709578979, 2.009936302482693, 2.9828477367185218],
    "adam_ams": [0.9715876709578979, 2.009936302482693, 2.9828477367185218],
}


def _make(name: str) -> optimizers.Optimizer:
    return {
        "sgd": lambda: optimizers.SGD(0.1),
        "sgd_m": lambda: optimizers.SGD(0.1, momentum=0.9),
        "sgd_n": lambda: optimizers.SGD(0.1, momentum=0.9, nesterov=True),
        "adam": lambda: optimizers.Adam(0.01),
        "adam_ams": lambda: optimizers.Adam(0.01, amsgrad=True),
    }[name]()


@pytest.mark.parametrize("name", sorted(KERAS))
def test_matches_keras_bitwise(name: str) -> None:
    var = mwms_mpi.Variable(np.array([1.0, 2.0, 3.0]))
    opt = _make(name)
    for g in GRADS:
        opt.apply_gradients([(g, var)])
    assert var.numpy().tolist() == KERAS[name]
    assert int(opt.iterations.numpy()) == 3


@pytest.mark.parametrize("name", sorted(KERAS))
def test_in_a_one_replica_strategy_scope(name: str) -> None:
    strategy = distribute.MirroredStrategy()
    with strategy.scope():
        var = mwms_mpi.Variable(np.array([1.0, 2.0, 3.0]))
        opt = _make(name)

    def step(g: np.ndarray) -> None:
        opt.apply_gradients([(g, var)])

    for g in GRADS:
        strategy.run(step, args=(g,))
    np.testing.assert_allclose(var.numpy(), KERAS[name], rtol=0, atol=1e-15)


def test_none_gradients_are_skipped_and_slots_are_listed() -> None:
    # Keras 3 (TF 2.21): a None gradient's variable is skipped with a UserWarning, and its slots
    # are made all the same by the first call, in the order given
    a, b = mwms_mpi.Variable(np.ones(2)), mwms_mpi.Variable(np.ones(2))
    opt = optimizers.Adam()
    with pytest.warns(UserWarning, match="Gradients do not exist for variables"):
        opt.apply_gradients([(np.ones(2), a), (None, b)])
    assert b.numpy().tolist() == [1.0, 1.0]
    assert len(opt.variables) == 1 + 4  # iterations + m, v of `a`, then of `b`
    opt.build([b])  # built already: nothing more
    assert len(opt.variables) == 1 + 4


def test_bad_momentum() -> None:
    with pytest.raises(ValueError, match="momentum"):
        optimizers.SGD(momentum=-1.0)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_a_variable_from_outside_the_scope_is_refused_as_tf_does(name: str) -> None:
    # TF 2.21 + Keras 3 under MirroredStrategy/MWMS: ValueError "`colocate_vars_with` must only
    # be passed a variable created in this tf.distribute.Strategy.scope(), not: <tf.Variable ...>"
    # (from the slot creation), for SGD without slots too; nothing is updated.
    strategy = distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    outside = mwms_mpi.Variable(np.array([1.0, 2.0]))
    with strategy.scope():
        opt = _make(name)
    message = "`colocate_vars_with` must only be passed a variable created in this"
    with pytest.raises(ValueError, match=message):
        strategy.run(lambda: opt.apply_gradients([(np.ones(2), outside)]))
    with pytest.raises(ValueError, match=message), strategy.scope():
        opt.apply_gradients([(np.ones(2), outside)])
    assert outside.numpy().tolist() == [1.0, 2.0]


def test_extended_update_refuses_a_variable_from_outside_the_scope() -> None:
    # TF 2.21: `strategy.extended.update(v, fn)` with v made outside the scope fails the
    # AssertionError `isinstance(var, values.DistributedVariable)`, in and out of `run`.
    strategy = distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    other = distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    outside = mwms_mpi.Variable(np.array([1.0, 2.0]))
    with other.scope():
        foreign = mwms_mpi.Variable(np.array([1.0, 2.0]))

    def add(v: object) -> object:
        return v.assign_add(np.ones(2))  # type: ignore[attr-defined]

    for var in (outside, foreign):
        with pytest.raises(AssertionError, match="not created in this strategy's scope"):
            strategy.extended.update(var, add)
        with pytest.raises(AssertionError, match="not created in this strategy's scope"):
            strategy.run(
                lambda v=var: distribute.get_replica_context().merge_call(
                    lambda s: s.extended.update(v, add)
                )
            )
    assert outside.numpy().tolist() == [1.0, 2.0] == foreign.numpy().tolist()


# Keras 3.15.1 (TF 2.21.0), two steps of IndexedSlices([[0.3, -0.7], [0.1, 0.9], [1.3, 0.2]],
# [1, 1, 0], [3, 2]) on Variable(ones((3, 2), float32)): Keras applies a sparse gradient row by
# row (SGD: scatter_sub) and squares slices before adding them up (Adam), so a repeated row
# differs from the densified gradient's result in the last bits.
KERAS_REPEATED_ROWS = {
    "sgd": ["0x1.7ae148p-1", "0x1.eb852p-1", "0x1.d70a4p-1", "0x1.eb8522p-1", "0x1p+0", "0x1p+0"],
    "sgd_momentum": [
        "0x1.3ef9dcp-1", "0x1.e24dd4p-1", "0x1.c49ba4p-1", "0x1.e24dd4p-1", "0x1p+0", "0x1p+0"
    ],
    "adam": [
        "0x1.f5c296p-1", "0x1.f5c29ep-1", "0x1.f30c2cp-1", "0x1.fe342cp-1", "0x1p+0", "0x1p+0"
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("sgd", lambda: optimizers.SGD(learning_rate=0.1)),
        ("sgd_momentum", lambda: optimizers.SGD(learning_rate=0.1, momentum=0.9)),
        ("adam", lambda: optimizers.Adam(learning_rate=0.01)),
    ],
)
def test_repeated_rows_of_a_sparse_gradient_as_keras(name: str, make: Any) -> None:
    v = mwms_mpi.Variable(np.ones((3, 2), np.float32))
    opt = make()
    values = np.array([[0.3, -0.7], [0.1, 0.9], [1.3, 0.2]], np.float32)
    for _ in range(2):
        opt.apply_gradients([(mwms_mpi.IndexedSlices(values, np.array([1, 1, 0]), [3, 2]), v)])
    got = [float(x).hex() for x in np.asarray(v.numpy()).ravel()]
    assert got == [float.fromhex(h).hex() for h in KERAS_REPEATED_ROWS[name]]


@pytest.mark.parametrize(
    ("nesterov", "var_hex", "momentum_hex"),
    [
        (False, "0x1.747ae20000000p-1", "0x1.bef9dc0000000p-2"),
        (True, "0x1.e4395a0000000p-1", "0x1.bef9dc0000000p-2"),
    ],
)
def test_sgd_momentum_scales_each_slice_before_adding_repeats_as_keras(
    nesterov: bool, var_hex: str, momentum_hex: str
) -> None:
    # Keras multiplies the slices by the rate, then adds repeated rows: a*lr + b*lr, not
    # (a + b)*lr (the last bit differed). TF 2.21 + Keras 3: SGD(0.3, momentum=0.5), float32
    # zeros(1), IndexedSlices([0.33, -1.3], [0, 0]) twice -> these bits.
    v = mwms_mpi.Variable(np.zeros(1, np.float32))
    opt = optimizers.SGD(0.3, momentum=0.5, nesterov=nesterov)
    grad = mwms_mpi.IndexedSlices(np.array([0.33, -1.3], np.float32), np.array([0, 0]), [1])
    for _ in range(2):
        opt.apply_gradients([(grad, v)])
    assert float(v.numpy()[0]).hex() == var_hex
    assert float(opt.variables[1].numpy()[0]).hex() == momentum_hex

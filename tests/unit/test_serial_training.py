"""The serial training anchor (tests/support/serial_training.py) is right on its own terms.

It is what the training, preemption and GPU tests trust instead of mwms_mpi, so it is checked
against TF 2.21 + Keras 3.15.1 (values recorded here as literals; no test imports TF) and its
hand-written backward pass against central differences. Nothing here imports mwms_mpi.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.support import serial_training as st

GRADS = [np.array([0.5, -1.0, 2.0]), np.array([0.25, 0.5, -1.0]), np.array([1.0, 1.0, 1.0])]

# Keras 3.15.1 (TF 2.21) on a float64 tf.Variable([1., 2., 3.]), after each of GRADS:
#   opt.apply_gradients([(tf.constant(g), v)]); [x.hex() for x in v.numpy().tolist()]
KERAS: dict[str, tuple[Callable[[], st.SGD | st.Adam], list[list[str]]]] = {
    "sgd": (
        lambda: st.SGD(0.05, momentum=0.9),  # keras.optimizers.SGD(0.05, momentum=0.9)
        [
            ["0x1.f333333000000p-1", "0x1.0666666800000p+1", "0x1.7333333000000p+1"],
            ["0x1.e147ae11eb852p-1", "0x1.08f5c28f0a3d7p+1", "0x1.6e147ae1eb852p+1"],
            ["0x1.b78d4fde04189p-1", "0x1.04dd2f15f3b64p+1", "0x1.63126e9c18937p+1"],
        ],
    ),
    "nesterov": (
        lambda: st.SGD(0.05, momentum=0.9, nesterov=True),
        [
            ["0x1.e7ae1479eb852p-1", "0x1.0c28f5c30a3d7p+1", "0x1.67ae1479eb852p+1"],
            ["0x1.d126e97e04189p-1", "0x1.0b43957df3b64p+1", "0x1.6978d50418937p+1"],
            ["0x1.91ff2e5997f62p-1", "0x1.012d772a9c779p+1", "0x1.592a3061a8587p+1"],
        ],
    ),
    "adam": (
        lambda: st.Adam(0.05),  # keras.optimizers.Adam(0.05)
        [
            ["0x1.e6667c2f8c7efp-1", "0x1.06666247a77fbp+1", "0x1.79999d0e92fbdp+1"],
            ["0x1.ce896d8374cb3p-1", "0x1.081abf129420fp+1", "0x1.77e5401b30d77p+1"],
            ["0x1.b743b202266bbp-1", "0x1.065bf6bf7d872p+1", "0x1.7505c5e885f4cp+1"],
        ],
    ),
    "adam_0.01": (
        lambda: st.Adam(0.01),  # keras.optimizers.Adam(0.01)
        [
            ["0x1.fae14c0cb5b04p-1", "0x1.0147ad40bb1a1p+1", "0x1.7eb8529d50985p+1"],
            ["0x1.f61b7c53ac948p-1", "0x1.019ef302b3e1fp+1", "0x1.7e610cd3404fep+1"],
            ["0x1.f173f06fec05ap-1", "0x1.014597bf1a690p+1", "0x1.7dcdf46313ab7p+1"],
        ],
    ),
}

# TF 2.21, float64, the script's initial weights and epoch 0's first (64) and last (28) batch:
# tf.nn.compute_average_loss(sparse_categorical_crossentropy(y, logits, from_logits=True),
# global_batch_size=64), and the gradient of that loss for b1[:3] (tf.GradientTape).
TF_LOSS = {
    0: (
        64,
        2.5462680173065366,
        [-0.03302274650343066, 0.0033854684911537435, -0.020776632169057216],
    ),
    23: (
        28,
        1.1394803977796797,
        [-0.05961593825068272, 0.05581227027520878, -0.020718208546672723],
    ),
}


@pytest.mark.parametrize("name", sorted(KERAS))
def test_update_rules_are_keras_bit_for_bit(name: str) -> None:
    make, want = KERAS[name]
    opt = make()
    params = {"v": np.array([1.0, 2.0, 3.0])}
    for step, g in enumerate(GRADS):
        opt.apply(params, {"v": g})
        assert [x.hex() for x in params["v"].tolist()] == want[step], (name, step + 1)


@pytest.mark.parametrize("batch", sorted(TF_LOSS))
def test_loss_is_tfs_global_batch_average(batch: int) -> None:
    """A full and the partial batch: both divided by the global batch size, 64."""
    x, y = st.digits(np.float64)
    bx, by = list(st.epoch_batches(x, y, 0))[batch]
    size, loss, b1 = TF_LOSS[batch]
    got_loss, grads = st.loss_and_gradients(st.initial_weights(np.float64), bx, by)
    assert len(bx) == size
    np.testing.assert_allclose(got_loss, loss, rtol=1e-14, atol=0)
    np.testing.assert_allclose(grads["b1"][:3], b1, rtol=1e-12, atol=1e-16)


def test_backward_matches_central_differences() -> None:
    """Every gradient entry of a small batch (some ReLUs off) against (L(+h) - L(-h)) / 2h."""
    x, y = st.digits(np.float64)
    params = st.initial_weights(np.float64)
    params["b0"] = np.random.default_rng(1).normal(scale=0.3, size=params["b0"].shape)
    bx, by = x[:5], y[:5]
    _, grads = st.loss_and_gradients(params, bx, by)
    rng = np.random.default_rng(2)
    h = 1e-6
    for name, value in params.items():
        assert grads[name].shape == value.shape, name
        for index in rng.choice(value.size, size=min(value.size, 40), replace=False):
            where = np.unravel_index(index, value.shape)
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][where] += h
            minus[name][where] -= h
            numeric = (
                st.loss_and_gradients(plus, bx, by)[0] - st.loss_and_gradients(minus, bx, by)[0]
            ) / (2 * h)
            assert abs(grads[name][where] - numeric) <= 1e-7, (name, where)


def test_batches_cover_each_epoch_once_and_epochs_differ() -> None:
    x, y = st.digits(np.float64)
    orders = [st.shuffled_order(len(x), st.SEED * 100_003 + e) for e in range(2)]
    for order in orders:
        assert sorted(order.tolist()) == list(range(st.TRAIN_SIZE))
    assert not np.array_equal(orders[0], orders[1])
    sizes = [len(bx) for bx, _ in st.epoch_batches(x, y, 0)]
    assert sizes == [64] * 23 + [28] and st.STEPS_PER_EPOCH == 24


def test_train_returns_the_dump_layout() -> None:
    run = st.train("sgd", 0.05, np.float64, 26)  # into the second epoch
    assert run.weights.shape == (26, 64 * 64 + 64 + 64 * 10 + 10)
    assert run.batch_sizes[23] == 28 and run.batch_sizes[24] == 64
    initial = st.flatten(st.initial_weights(np.float64))
    assert not np.array_equal(run.weights[0], initial)
    assert run.losses[-1] < run.losses[0]  # it learns

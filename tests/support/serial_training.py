"""scripts/train_digits.py's training in serial numpy, sharing no code with mwms_mpi.

The training tests (tests/e2e/test_training_equivalence.py, test_preemption_anchor.py, and the GPU
ones) compare N workers with a 1-worker mwms_mpi run: the N = 1 promise. A defect that does not
depend on the world size (an optimizer's update rule, its step counter, how the update reaches
the variables) changes both sides alike and passes that comparison. This module is the
independent side: one process, the whole global batch at once, no strategy, no collective.

What it computes, each written out here from its definition rather than taken from the package:

- the data: the script's definition (scikit-learn's digits, permuted once by ``seed``, pixels
  / 16, the first 1500 for training) and each epoch's global batches: TF 2.21's seeded shuffle
  (``Dataset.shuffle`` with a buffer holding the whole set, ``reshuffle_each_iteration=False``:
  Philox4x32-10 keyed by TF's seeds ``(87654321, seed mod (2**31 - 1))``; each draw takes the
  element ``value % len`` past the buffer's oldest and moves the oldest into its place) then
  batches of ``global_batch`` in order, the last one partial (28 of 64). mwms_mpi reproduces
  TF's order; it is written out here from TF's kernel (``shuffle_dataset_op.cc``), and
  ``test_the_anchor_trains_on_the_scripts_batches`` (tests/e2e/test_training_equivalence.py)
  says so apart from the weight comparisons if the package's order ever differs;
- the model: ``relu(x @ w0 + b0) @ w1 + b1``, He-initialised as the script does;
- the loss TF's custom training loop uses under a strategy: the sum of the per-example
  cross-entropies divided by the *global* batch size (``compute_average_loss(...,
  global_batch_size=64)``, 64 also for the partial last batch), so the gradient of the global
  batch is one sum, which the strategy's SUM all-reduce of the replicas' gradients must equal;
- the backward pass by hand (softmax minus one-hot, chain rule through the ReLU); and
- Keras 3's update rules (``keras/src/optimizers/sgd.py`` and ``adam.py``), in the variable's
  dtype: the learning rate lives in a float32 variable and is cast to the variable's dtype;
  ``momentum``, ``beta_1`` and ``beta_2`` become tensors through float32 first
  (``ops.cast(0.9, "float64")`` converts the Python float to a float32 tensor, then casts);
  ``1 - beta`` and ``epsilon`` are Python floats, i.e. float64.

  SGD: ``m = m * momentum - g * lr``; ``var += m`` (Nesterov: ``var += m * momentum - g * lr``).
  Adam, at step ``t = iterations + 1``: ``alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)``,
  ``m += (g - m) * (1 - beta_1)``, ``v += (g**2 - v) * (1 - beta_2)``,
  ``var -= (m * alpha) / (sqrt(v) + epsilon)``: epsilon outside the square root, the bias
  correction folded into the step size.

tests/unit/test_serial_training.py checks the update rules against values recorded from Keras
3.15.1 (TF 2.21) bit for bit, and the hand-written backward pass against central differences.

Layout of the result: one row per step, the weights flattened in the order of their sorted
names (``b0, b1, w0, w1``), as the script's ``--dump`` writes each replica's copy.

Tolerance (:data:`TOLERANCE`): the anchor and mwms_mpi do the same arithmetic in another order
(the anchor's whole-batch matmuls against the replicas' partial sums plus an all-reduce, another
softmax), so in float64 they differ by rounding alone. Measured over the 48 steps of the tests'
job: SGD <= 4e-16, Adam <= 2.6e-13 at 1, 2 and 4 workers, 2 x 2 and 1 x 8 replicas (Adam divides
by ``sqrt(v) + 1e-7``, so a gradient near 1e-7 passes its rounding on multiplied by up to
``lr / epsilon``); real TF 2.21 + Keras 3.15.1 running the same job differs from the anchor by
the same amounts (2e-16, 1.3e-13). 1e-11 leaves a factor 40 above that, and is far below what a
wrong rule changes (measured on a copy of the package broken on purpose): an Adam bias
correction without its square root, or epsilon inside the square root, moves step 1 by 0.05;
SGD's learning rate not rounded through float32 (a relative 1.5e-8 of each update) moves step 1
by 1.8e-10 and step 48 by 7e-9.
float32 SGD (:data:`TOLERANCE_FLOAT32`): measured 9e-8 over 24 steps (under one float32
spacing at 1, 1.2e-7); 2e-6 is 20 times that. float32 Adam is not anchored: its epsilon
amplifies float32 rounding to 1e-4 (TF and the anchor differ as much), and the tests train
float32 with SGD only.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

LAYERS = (64, 64, 10)
NAMES = ("b0", "b1", "w0", "w1")  # sorted, as the dump
TRAIN_SIZE = 1500
SEED = 7  # the script's default --seed
GLOBAL_BATCH = 64  # the script's default --global-batch
STEPS_PER_EPOCH = -(-TRAIN_SIZE // GLOBAL_BATCH)  # 24, the last batch has 28 examples

TOLERANCE = 1e-11  # float64, absolute, per weight and step: see the module's docstring
TOLERANCE_FLOAT32 = 2e-6  # float32, SGD only: see the module's docstring

Params = dict[str, np.ndarray]


def digits(dtype: Any, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """The script's training set: digits permuted by ``default_rng(seed)``, pixels / 16."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    return (x[order] / 16.0).astype(dtype)[:TRAIN_SIZE], y[order].astype(np.int64)[:TRAIN_SIZE]


def initial_weights(dtype: Any, seed: int = SEED) -> Params:
    """He initialisation drawn as the script draws it: w0, b0, w1, b1 from one generator."""
    rng = np.random.default_rng(seed)
    params: Params = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(LAYERS)):
        scale = np.sqrt(2 / fan_in)
        params[f"w{i}"] = (rng.standard_normal((fan_in, fan_out)) * scale).astype(dtype)
        params[f"b{i}"] = np.zeros(fan_out, dtype=dtype)
    return params


def _philox_block(counter: list[int], key: list[int]) -> list[int]:
    """One Philox4x32-10 block (Salmon et al., as TF's ``random::PhiloxRandom``)."""
    mask = 0xFFFFFFFF
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & mask, (p0 >> 32) ^ c3 ^ k1, p0 & mask
        if round_ < 9:
            k0, k1 = (k0 + 0x9E3779B9) & mask, (k1 + 0xBB67AE85) & mask
    return [c0, c1, c2, c3]


def shuffled_order(count: int, seed: int) -> np.ndarray:
    """The order TF's (and so mwms_mpi's) ``shuffle(count, seed,
    reshuffle_each_iteration=False)`` yields.

    TF's seeds without a global seed are ``(87654321, seed mod (2**31 - 1))``: the Philox key is
    the first, counter words 2-3 the second, words 0-1 count blocks; each block gives 4 values.
    The buffer holds the whole input; each draw takes the element ``value % len`` past the
    oldest one, and the oldest moves into its place.
    """
    key = [87654321, 0]
    seed2 = seed % (2**31 - 1)
    values: list[int] = []
    for block in range(-(-count // 4)):
        values += _philox_block([block, 0, seed2, 0], key)
    buffer = list(range(count))
    order = []
    for value in values[:count]:
        index = value % len(buffer)
        order.append(buffer[index])
        buffer[index] = buffer[0]
        del buffer[0]
    return np.array(order, dtype=np.int64)


def epoch_batches(
    x: np.ndarray, y: np.ndarray, epoch: int, seed: int = SEED, global_batch: int = GLOBAL_BATCH
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Epoch ``epoch``'s global batches, as the script's ``_epoch_batches`` defines them."""
    order = shuffled_order(len(x), seed * 100_003 + epoch)
    for start in range(0, len(x), global_batch):
        rows = order[start : start + global_batch]
        yield x[rows], y[rows]


def loss_and_gradients(
    params: Params, x: np.ndarray, y: np.ndarray, global_batch: int = GLOBAL_BATCH
) -> tuple[float, Params]:
    """The batch's summed cross-entropy / ``global_batch``, and its gradients by hand."""
    pre = x @ params["w0"] + params["b0"]
    hidden = np.where(pre > 0, pre, 0)
    logits = hidden @ params["w1"] + params["b1"]
    top = logits.max(axis=1, keepdims=True)
    log_norm = top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    picked = np.take_along_axis(logits, y[:, None], axis=1)
    loss = float((log_norm - picked).sum() / global_batch)
    # d loss / d logits = (softmax - one_hot) / global_batch
    one_hot = np.zeros_like(logits)
    one_hot[np.arange(len(y)), y] = 1
    d_logits = (np.exp(logits - log_norm) - one_hot) / global_batch
    d_pre = (d_logits @ params["w1"].T) * (pre > 0)
    grads = {
        "w1": hidden.T @ d_logits,
        "b1": d_logits.sum(axis=0),
        "w0": x.T @ d_pre,
        "b0": d_pre.sum(axis=0),
    }
    return loss, grads


def _through_float32(value: float, dtype: Any) -> Any:
    """A Python float as Keras makes it a tensor of ``dtype``: float32 first, then cast."""
    return np.dtype(dtype).type(np.float32(value))


class SGD:
    """Keras 3's ``SGD(learning_rate, momentum, nesterov)`` on a dict of arrays."""

    def __init__(self, learning_rate: float, momentum: float = 0.0, nesterov: bool = False):
        self.learning_rate, self.momentum, self.nesterov = learning_rate, momentum, nesterov
        self.slots: Params = {}

    def apply(self, params: Params, grads: Params) -> None:
        for name, var in params.items():
            g = grads[name].astype(var.dtype)
            lr = _through_float32(self.learning_rate, var.dtype)  # a float32 variable
            if not self.momentum:
                params[name] = var - g * lr
                continue
            momentum = _through_float32(self.momentum, var.dtype)
            m = self.slots.get(name, np.zeros_like(var)) * momentum - g * lr
            self.slots[name] = m
            params[name] = var + (m * momentum - g * lr if self.nesterov else m)


class Adam:
    """Keras 3's ``Adam(learning_rate, beta_1, beta_2, epsilon)`` on a dict of arrays."""

    def __init__(
        self,
        learning_rate: float,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
    ):
        self.learning_rate, self.beta_1, self.beta_2, self.epsilon = (
            learning_rate,
            beta_1,
            beta_2,
            epsilon,
        )
        self.iterations = 0
        self.m: Params = {}
        self.v: Params = {}

    def apply(self, params: Params, grads: Params) -> None:
        self.iterations += 1
        for name, var in params.items():
            kind = np.dtype(var.dtype).type
            g = grads[name].astype(var.dtype)
            lr = _through_float32(self.learning_rate, var.dtype)
            t = kind(self.iterations)
            beta_1_power = np.power(_through_float32(self.beta_1, var.dtype), t)
            beta_2_power = np.power(_through_float32(self.beta_2, var.dtype), t)
            alpha = lr * np.sqrt(kind(1) - beta_2_power) / (kind(1) - beta_1_power)
            m = self.m.get(name, np.zeros_like(var))
            v = self.v.get(name, np.zeros_like(var))
            m = m + (g - m) * kind(1 - self.beta_1)
            v = v + (g * g - v) * kind(1 - self.beta_2)
            self.m[name], self.v[name] = m, v
            params[name] = var - (m * alpha) / (np.sqrt(v) + kind(self.epsilon))


def make_optimizer(name: str, learning_rate: float) -> SGD | Adam:
    """The script's optimizers: ``sgd`` is SGD with momentum 0.9, ``adam`` Adam's defaults."""
    if name == "sgd":
        return SGD(learning_rate, momentum=0.9)
    if name == "adam":
        return Adam(learning_rate)
    raise ValueError(f"no optimizer {name!r}")


def flatten(params: Params) -> np.ndarray:
    """The weights as one row, in the dump's order (sorted names)."""
    return np.concatenate([params[name].ravel() for name in NAMES])


@dataclass(frozen=True)
class Run:
    """What the anchor trained: every step's weights and loss, and the batches' sizes."""

    weights: np.ndarray  # (steps, number of weights), the dump's layout
    losses: np.ndarray  # (steps,)
    batch_sizes: tuple[int, ...]


def train(optimizer: str, learning_rate: float, dtype: Any, steps: int) -> Run:
    """``steps`` serial training steps of the script's job (epochs follow one another)."""
    x, y = digits(dtype)
    params = initial_weights(dtype)
    opt = make_optimizer(optimizer, learning_rate)
    rows: list[np.ndarray] = []
    losses: list[float] = []
    sizes: list[int] = []
    for epoch in itertools.count():
        for bx, by in epoch_batches(x, y, epoch):
            if len(rows) == steps:
                return Run(np.stack(rows), np.array(losses), tuple(sizes))
            loss, grads = loss_and_gradients(params, bx, by)
            opt.apply(params, grads)
            rows.append(flatten(params))
            losses.append(loss)
            sizes.append(len(bx))
    raise AssertionError("unreachable")  # itertools.count() never ends


def assert_close_to_anchor(got: np.ndarray, want: np.ndarray, what: str, tolerance: float) -> None:
    """Every weight after every step within ``tolerance`` of the anchor's (``want``).

    ``got`` is one replica's dump, (steps, weights); a shape that differs fails, so does an
    empty one. The message names the first step off and how far, which tells a wrong rule
    (off from step 1) from drift.
    """
    assert got.shape == want.shape and got.size > 0, f"{what}: {got.shape}, anchor {want.shape}"
    worst = np.abs(got.astype(np.float64) - want.astype(np.float64)).max(axis=1)
    off = worst > tolerance
    assert not off.any(), (
        f"{what}: differs from the serial anchor by more than {tolerance:g} from step "
        f"{int(np.argmax(off)) + 1} of {len(worst)} ({worst[np.argmax(off)]:.3g} there, "
        f"{worst.max():.3g} at most)"
    )

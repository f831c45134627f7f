"""Keras's base optimizer arguments (``weight_decay``, ``clipnorm``, ``clipvalue``,
``global_clipnorm``, ``loss_scale_factor``, ``exclude_from_weight_decay``, ``AdamW``, and
learning-rate schedules) give
Keras 3.15.1's bits under a two-replica ``MirroredStrategy``.

The expected values are what Keras did with the same programs, pinned in
``keras_base_args_pins.json`` beside this file (its ``about`` holds the recording program; TF is
never imported here): each replica clips its own gradient before the all-reduce, weight decay
runs before the update, ``IndexedSlices`` keep TF's sparse or dense treatment, norms add in TF's
order (``mwms_mpi._tf_sum``), float32 and float64.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute
from mwms_mpi import optimizers
from mwms_mpi.optimizers import schedules

PINS = json.loads((Path(__file__).parent / "keras_base_args_pins.json").read_text())["cases"]


def _run(case: dict[str, Any]) -> dict[str, Any]:
    """The recording program's steps with mwms_mpi: each replica's gradient from its row."""
    strategy = mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    dtype = np.dtype(case["dtype"])
    with strategy.scope():
        variables = [mwms_mpi.Variable(np.asarray(v, dtype), name=n) for n, v in case["inits"]]
        kwargs = dict(case["kwargs"])
        if isinstance(kwargs.get("learning_rate"), dict):  # a schedule, by class and arguments
            rate = kwargs["learning_rate"]
            kwargs["learning_rate"] = getattr(schedules, rate["schedule"])(**rate["kwargs"])
        optimizer = getattr(optimizers, case["opt"])(**kwargs)
    if case["exclude"]:
        exclude = dict(case["exclude"])
        if "var_list" in exclude:
            exclude["var_list"] = [variables[i] for i in exclude["var_list"]]
        optimizer.exclude_from_weight_decay(**exclude)

    def step() -> None:
        replica = int(mwms_mpi.distribute.get_replica_context().replica_id_in_sync_group)
        grads = []
        for k, var in enumerate(variables):
            grad = np.asarray(case["grads"][k], dtype=float).astype(dtype)[replica]
            if case["sparse"]:
                grad = mwms_mpi.IndexedSlices(
                    grad, np.array([0, 0, 1], np.int64), np.array(var.shape, np.int64)
                )
            grads.append(grad)
        optimizer.apply_gradients(zip(grads, variables, strict=True))

    try:
        for _ in range(case["steps"]):
            strategy.run(step)
    except Exception as e:  # the pins hold Keras's error for some cases
        return {"error": [type(e).__name__, str(e)]}
    return {"values": [[float(x).hex() for x in np.asarray(v.numpy()).ravel()] for v in variables]}


@pytest.mark.parametrize("name", sorted(PINS))
def test_keras_bits(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # inf/NaN cases, silent in TF
        assert _run(PINS[name]) == PINS[name]["tf"]


def test_arguments_checked_as_keras_checks_them() -> None:
    with pytest.raises(ValueError, match="Only one of `clipnorm`, `clipvalue` and `global_"):
        optimizers.SGD(clipnorm=1.0, clipvalue=1.0)
    with pytest.raises(ValueError, match=r"Argument\(s\) not recognized: \{'foo': 1\}"):
        optimizers.Adam(foo=1)
    with pytest.raises(ValueError, match="`gradient_accumulation_steps` must be an integer >= 2"):
        optimizers.SGD(gradient_accumulation_steps=1)
    with pytest.raises(ValueError, match="`ema_momentum` must be in the range"):
        optimizers.SGD(use_ema=True, ema_momentum=2.0)
    with pytest.raises(ValueError, match="Argument `weight_decay` must be a float"):
        optimizers.AdamW(weight_decay=None)
    with pytest.warns(UserWarning, match="Argument `decay` is no longer supported"):
        optimizers.SGD(decay=0.1)
    # Keras accepts these and trains with them; mwms_mpi says it does not implement them
    with pytest.raises(NotImplementedError, match="use_ema=True"):
        optimizers.RMSprop(use_ema=True)
    with pytest.raises(NotImplementedError, match="gradient_accumulation_steps=2"):
        optimizers.Adagrad(gradient_accumulation_steps=2)
    sgd = optimizers.SGD(0.1, 0.9, True, weight_decay=0.01, global_clipnorm=2.0)
    assert (sgd.weight_decay, sgd.global_clipnorm, sgd.clipnorm, sgd.clipvalue) == (
        0.01,
        2.0,
        None,
        None,
    )
    assert optimizers.AdamW().weight_decay == 0.004


def test_default_strategy_and_foreign_gradients() -> None:
    """One replica, no strategy: the same transforms on the gradient as given (an object with
    only ``__array__`` is converted first), and an exclusion made after building counts from
    the next step (Keras 3 checks an attribute it never sets)."""

    class ArrayOnly:
        def __init__(self, value: np.ndarray) -> None:
            self._value = value

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return self._value

    w = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32), name="w")
    b = mwms_mpi.Variable(np.array([0.5], np.float32), name="bias")
    opt = optimizers.SGD(0.5, clipnorm=1.0, weight_decay=0.1)
    opt.apply_gradients(
        [(ArrayOnly(np.array([3.0, 4.0], np.float32)), w), (np.ones(1, np.float32), b)]
    )
    f = np.float32
    decayed = np.array([1.0, 2.0], f) - np.array([1.0, 2.0], f) * f(0.1) * f(0.5)
    clipped = (np.array([3.0, 4.0], f) * f(1.0)) / np.maximum(f(5.0), f(1.0))
    np.testing.assert_array_equal(w.numpy(), decayed - clipped * f(0.5))
    opt.exclude_from_weight_decay(var_names=["bias"])
    before = b.numpy()
    opt.apply_gradients([(np.zeros(2, f), w), (np.zeros(1, f), b)])
    np.testing.assert_array_equal(b.numpy(), before)  # excluded: no decay, zero gradient


def test_global_clipnorm_of_mixed_dtypes_raises_tf_errors() -> None:
    """A float32 and a float64 gradient: Keras's norm is float64, and TF refuses the float32
    one, dense (``Mul``) or sparse (the conversion); nothing is updated (found by fuzzing
    against TF 2.21)."""
    v0 = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32), name="v0")
    v1 = mwms_mpi.Variable(np.array([1.0, 2.0], np.float64), name="v1")
    sparse = mwms_mpi.IndexedSlices(np.float32([3.0, 4.0]), np.array([0, 1]), np.array([2]))
    opt = optimizers.SGD(learning_rate=0.1, global_clipnorm=1.0)
    with pytest.raises(
        ValueError,
        match="Incompatible tensor conversion requested to `dtype` float64 for IndexedSlices",
    ):
        opt.apply_gradients([(sparse, v0), (np.float64([3.0, 4.0]), v1)])
    with pytest.raises(mwms_mpi.errors.InvalidArgumentError, match="cannot compute Mul"):
        opt.apply_gradients([(np.float32([3.0, 4.0]), v0), (np.float64([3.0, 4.0]), v1)])
    assert v0.numpy().tolist() == [1.0, 2.0] and v1.numpy().tolist() == [1.0, 2.0]

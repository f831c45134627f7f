"""RMSprop and Adagrad follow Keras 3.15.1's update rules bit for bit, in and out of a strategy.

The expected values are what Keras 3.15.1 (TF 2.21.0, TF backend) did with the same programs,
pinned in ``keras_rmsprop_adagrad_pins.json`` beside this file (its ``about`` names the scratch
program that recorded them; TF is never imported here): every option combination, float32 and
float64 variables, dense gradients and ``IndexedSlices`` with repeated rows, one replica and
``MirroredStrategy`` on two CPUs (each replica its own gradient), the variable after every step.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute
from mwms_mpi import distribute, optimizers, train

PINS = json.loads((Path(__file__).parent / "keras_rmsprop_adagrad_pins.json").read_text())
STEPS = len(PINS["dense"])
CASES = [
    (dtype, name, kind, mode)
    for dtype in ("float32", "float64")
    for name in PINS["configs"]
    for kind in ("dense", "sparse")
    for mode in ("single", "m2")
]


def _make(name: str) -> optimizers.Optimizer:
    cls, kwargs = PINS["configs"][name]
    return getattr(optimizers, cls)(**kwargs)


def _grad(kind: str, step: int, replica: int, dtype: str) -> Any:
    if kind == "dense":
        return np.array(PINS["dense"][step][replica], dtype)
    values, indices = PINS["sparse"][step][replica]
    return mwms_mpi.IndexedSlices(
        np.array(values, dtype), np.array(indices, np.int64), np.array([3, 2], np.int64)
    )


def _keras(dtype: str, name: str, kind: str, mode: str, step: int) -> np.ndarray:
    """Keras's variable after ``step + 1`` steps (its exact bits, NaN included)."""
    hexes = PINS["var_after_each_step"][dtype][name][kind][mode][step]
    return np.array([float.fromhex(h) for h in hexes], dtype).reshape(3, 2)


def _same_bits(got: Any, want: np.ndarray) -> bool:
    got = np.asarray(got)
    return got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)


class _Runner:
    """Applies a case's gradients one step at a time, with one replica or with two."""

    def __init__(self, mode: str, dtype: str, name: str, init: Any = None) -> None:
        self.strategy = (
            mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if mode == "m2" else None
        )
        self.dtype = dtype
        value = np.array(PINS["init"] if init is None else init, dtype)
        if self.strategy is None:
            self.var, self.opt = mwms_mpi.Variable(value), _make(name)
        else:
            with self.strategy.scope():
                self.var, self.opt = mwms_mpi.Variable(value), _make(name)

    def step(self, kind: str, step: int) -> None:
        if self.strategy is None:
            self.opt.apply_gradients([(_grad(kind, step, 0, self.dtype), self.var)])
            return

        def fn() -> None:
            replica = int(distribute.get_replica_context().replica_id_in_sync_group)
            self.opt.apply_gradients([(_grad(kind, step, replica, self.dtype), self.var)])

        self.strategy.run(fn)

    def copies(self) -> list[np.ndarray]:
        return [np.asarray(v.numpy()) for v in getattr(self.var, "values", [self.var])]


@pytest.mark.parametrize(("dtype", "name", "kind", "mode"), CASES)
@pytest.mark.filterwarnings("error::RuntimeWarning")  # TF divides by zero silently
def test_matches_keras_bitwise_after_every_step(
    dtype: str, name: str, kind: str, mode: str
) -> None:
    run = _Runner(mode, dtype, name)
    for step in range(STEPS):
        run.step(kind, step)
        want = _keras(dtype, name, kind, mode, step)
        for copy in run.copies():  # every replica's copy
            assert _same_bits(copy, want), (step, copy.tolist(), want.tolist())
    assert int(run.opt.iterations.numpy()) == STEPS


def test_repeated_rows_are_not_densified_first() -> None:
    """Keras adds each slice's square to the accumulator (``a**2 + b**2``): densifying the
    slices first (``(a + b)**2``) gives other bits, so the sparse pins test the sparse path."""
    run = _Runner("single", "float32", "ada")
    for step in range(STEPS):
        dense = np.asarray(_grad("sparse", step, 0, "float32"))
        run.opt.apply_gradients([(dense, run.var)])
    assert not _same_bits(run.var.numpy(), _keras("float32", "ada", "sparse", "single", STEPS - 1))


def test_defaults_are_keras() -> None:
    for cls in ("RMSprop", "Adagrad"):
        params = inspect.signature(getattr(optimizers, cls)).parameters
        assert params["learning_rate"].default == 0.001
        for key, value in PINS["defaults"][cls].items():
            if key in params:
                assert params[key].default == value, (cls, key)
    assert {"rho", "momentum", "epsilon", "centered"} <= set(
        inspect.signature(optimizers.RMSprop).parameters
    )
    assert {"initial_accumulator_value", "epsilon"} <= set(
        inspect.signature(optimizers.Adagrad).parameters
    )


@pytest.mark.parametrize(
    ("make", "slots"),
    [
        (lambda: optimizers.RMSprop(), ["velocity"]),
        (lambda: optimizers.RMSprop(momentum=0.5), ["velocity", "momentum"]),
        (lambda: optimizers.RMSprop(centered=True), ["velocity", "average_gradient"]),
        (
            lambda: optimizers.RMSprop(momentum=0.5, centered=True),
            ["velocity", "momentum", "average_gradient"],
        ),
        (lambda: optimizers.Adagrad(), ["accumulator"]),
    ],
)
def test_slots_are_mirrored_and_start_as_keras_starts_them(make: Any, slots: list[str]) -> None:
    strategy = mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        a = mwms_mpi.Variable(np.ones((2, 2), np.float64), name="a")
        b = mwms_mpi.Variable(np.ones(3, np.float32), name="b")
        opt = make()
        opt.build([a, b])
    made = opt.variables[1:]
    assert [v.name.split(":")[0] for v in made] == [f"{n}/{s}" for n in "ab" for s in slots]
    # Adagrad's accumulator: Keras's Constant(0.1) casts 0.1 through float32 to the dtype
    start = np.float32(0.1) if slots == ["accumulator"] else 0.0
    for slot, var in zip(made, [a] * len(slots) + [b] * len(slots), strict=True):
        copies = [np.asarray(c.numpy()) for c in slot.values]
        assert len(copies) == 2
        for copy in copies:
            assert copy.dtype == var.dtype and copy.shape == tuple(var.shape)
            assert copy.tobytes() == np.full(copy.shape, start, copy.dtype).tobytes()


# The option combinations with the most slots, for the checkpoint tests.
FULL = ["rms_cm", "ada_iae"]


@pytest.mark.parametrize("name", FULL)
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_checkpoint_round_trip_continues_as_keras(name: str, kind: str, tmp_path: Path) -> None:
    run = _Runner("single", "float32", name)
    for step in range(2):
        run.step(kind, step)
    path = train.Checkpoint(v=run.var, optimizer=run.opt).save(str(tmp_path / "ckpt"))

    resumed = _Runner("single", "float32", name, init=np.zeros((3, 2)))
    resumed.opt.build([resumed.var])
    train.Checkpoint(v=resumed.var, optimizer=resumed.opt).restore(path).assert_consumed()
    assert int(resumed.opt.iterations.numpy()) == 2
    for got, saved in zip(resumed.opt.variables, run.opt.variables, strict=True):
        assert np.asarray(got.numpy()).tobytes() == np.asarray(saved.numpy()).tobytes()
    for step in range(2, STEPS):
        resumed.step(kind, step)
    assert _same_bits(resumed.var.numpy(), _keras("float32", name, kind, "single", STEPS - 1))


@pytest.mark.parametrize("name", FULL)
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_restored_before_its_first_step_continues_as_keras(
    name: str, kind: str, tmp_path: Path
) -> None:
    """Build the model, restore, train (restore-on-create), with two replicas."""
    run = _Runner("m2", "float32", name)
    for step in range(2):
        run.step(kind, step)
    path = train.Checkpoint(v=run.var, optimizer=run.opt).save(str(tmp_path / "ckpt"))

    resumed = _Runner("m2", "float32", name, init=np.zeros((3, 2)))
    status = train.Checkpoint(v=resumed.var, optimizer=resumed.opt).restore(path)
    with pytest.raises(AssertionError, match="Unresolved object in checkpoint"):
        status.assert_consumed()  # the slots do not exist yet (TF says so too)
    for step in range(2, STEPS):
        resumed.step(kind, step)
    status.assert_consumed()
    assert int(resumed.opt.iterations.numpy()) == STEPS
    want = _keras("float32", name, kind, "m2", STEPS - 1)
    for copy in resumed.copies():
        assert _same_bits(copy, want), (copy.tolist(), want.tolist())


@pytest.mark.parametrize("name", ["rms_cm", "ada"])
def test_a_variable_from_outside_the_scope_is_refused_as_tf_does(name: str) -> None:
    strategy = distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    outside = mwms_mpi.Variable(np.array([1.0, 2.0]))
    with strategy.scope():
        opt = _make(name)
    with pytest.raises(ValueError, match="`colocate_vars_with` must only be passed a variable"):
        strategy.run(lambda: opt.apply_gradients([(np.ones(2), outside)]))
    assert outside.numpy().tolist() == [1.0, 2.0]


@pytest.mark.parametrize("name", ["rms_cm", "ada"])
def test_build_outside_the_scope_of_mirrored_variables_raises_as_tf_does(name: str) -> None:
    """Found with these optimizers: ``opt.build([v])`` outside the scope made plain (unmirrored)
    slots, silently. TF 2.21 + Keras 3 (``build_outside.py``: a ``MirroredStrategy`` of two
    CPUs, the variable and Adagrad made in its scope, ``build`` outside) raise
    ``RuntimeError: Need to be inside "with strategy.scope()" for <...MirroredStrategy ...>``."""
    strategy = distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        var, opt = mwms_mpi.Variable(np.ones((3, 2), np.float32)), _make(name)
    with pytest.raises(RuntimeError, match=r'Need to be inside "with strategy.scope\(\)" for'):
        opt.build([var])
    assert opt.variables == []
    with strategy.scope():
        opt.build([var])
    assert all(len(slot.values) == 2 for slot in opt.variables[1:])


# regather.py: Keras Adagrad(0.1, initial_accumulator_value=0.0, epsilon=0.0) on
# tf.Variable(ones((3, 2), float32)), one IndexedSlices step. Rows whose sqrt(accumulator) is 0
# send Keras's divide down its union path, which pairs the slices' values with the sorted union
# of rows when the counts agree, and regathers them through a position table that adds repeated
# rows' positions otherwise (TF's gather then fails; the accumulator was already updated).
TF_UNION_SAME_COUNT = ["0x1.eeeeeep-1"] * 2 + ["0x1.d2349p-1"] * 2 + ["-inf"] * 2
TF_REGATHER_ERROR = "indices[1] = 3 is not in [0, 3)"
TF_ACCUMULATOR_AFTER_ERROR = [[0.0, 0.0], [5.0, 5.0], [0.0, 0.0]]


def _one_sparse_step(values: list[list[float]], indices: list[int]) -> tuple[Any, Any]:
    var = mwms_mpi.Variable(np.ones((3, 2), np.float32))
    opt = optimizers.Adagrad(0.1, initial_accumulator_value=0.0, epsilon=0.0)
    grad = mwms_mpi.IndexedSlices(np.array(values, np.float32), np.array(indices), [3, 2])
    opt.apply_gradients([(grad, var)])
    return var, opt


def test_keras_union_path_pairs_values_with_sorted_rows() -> None:
    var, _ = _one_sparse_step([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]], [1, 1, 0])
    want = np.array([float.fromhex(h) for h in TF_UNION_SAME_COUNT], np.float32).reshape(3, 2)
    assert _same_bits(var.numpy(), want)


def test_keras_regather_past_the_slices_fails_as_tf_does() -> None:
    var = mwms_mpi.Variable(np.ones((3, 2), np.float32))
    opt = optimizers.Adagrad(0.1, initial_accumulator_value=0.0, epsilon=0.0)
    grad = mwms_mpi.IndexedSlices(np.array([[1.0, 1.0], [2.0, 2.0]], np.float32), [1, 1], [3, 2])
    with pytest.raises(mwms_mpi.errors.InvalidArgumentError, match=re.escape(TF_REGATHER_ERROR)):
        opt.apply_gradients([(grad, var)])
    assert var.numpy().tolist() == [[1.0, 1.0]] * 3
    assert opt.variables[1].numpy().tolist() == TF_ACCUMULATOR_AFTER_ERROR
    assert int(opt.iterations.numpy()) == 0

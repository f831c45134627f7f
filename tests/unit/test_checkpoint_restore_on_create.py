"""Restore-on-create (TF's deferred restoration) and the load status, against TF 2.21.

Issue 23, item 4: ``Checkpoint.restore`` before the optimizer had made its slots (build the
model, restore, train) skipped ``iterations`` and the slots, so a resumed run differed from an
uninterrupted one. TF keeps such values and assigns them when the objects are created.

The literals below are what TF 2.21 (``tensorflow-cpu==2.21.0``, Keras 3.15) did with the same
programs, run in a scratch venv outside this repository (TF is never imported here):

* ``restore_on_create_optimizer.py``: Keras ``Adam(0.1)`` on ``tf.Variable(arange(3.0))`` with the
  float32 gradients 1, -2, 0.5, 3 (each a full 3-vector); 2 steps, ``tf.train.Checkpoint(v=v,
  optimizer=opt).save``; a new variable and a new (unbuilt) Adam restored, then 2 more steps;
* ``restore_on_create.py``: a ``tf.Module`` given ``w = [1, 2]``, ``b = 3.0`` and
  ``extra = int64 7`` saved; a new empty ``tf.Module`` restored, then its variables created.

A ``tf.Module`` here is a ``mwms_mpi.Module`` (its attribute sets tell a pending restore, as
``tf.Module``'s do); a plain Python object is walked too, but never changed to notify.
"""

from __future__ import annotations

import copy
import gc
import logging
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute
from mwms_mpi import errors, optimizers, train

GRADS = [np.full(3, g, dtype=np.float32) for g in (1.0, -2.0, 0.5, 3.0)]
# restore_on_create_optimizer.py: v after the 2 steps before the save (TF restores it at once)
TF_V_AFTER_2 = np.array([-0.06338907778263092, 0.9366109371185303, 1.9366109371185303], np.float32)
# ... and after 2 more steps of the restored optimizer: bit for bit the uninterrupted run's
TF_V_AFTER_4 = np.array([-0.08912966400384903, 0.910870373249054, 1.9108703136444092], np.float32)
# ... the status right after the restore, before the optimizer made its slots, and after
TF_STATUS_BEFORE_BUILD = {"assert_existing_objects_matched": "passes", "assert_consumed": "raises"}
TF_STATUS_AFTER_BUILD = {"assert_existing_objects_matched": "passes", "assert_consumed": "passes"}
TF_ITERATIONS_AFTER = 4


class Module(mwms_mpi.Module):
    """A ``tf.Module`` subclass's counterpart."""


class Plain:
    """A plain Python object holding variables (no ``tf.Module`` counterpart: TF refuses it)."""


def _steps(opt: optimizers.Optimizer, var: mwms_mpi.Variable, grads: list[np.ndarray]) -> None:
    for g in grads:
        opt.apply_gradients([(g, var)])


def _status(status: Any, names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            getattr(status, name)()
            out[name] = "passes"
        except AssertionError:
            out[name] = "raises"
    return out


_CHECKS = ("assert_existing_objects_matched", "assert_consumed")


@pytest.mark.parametrize("with_strategy", [False, True], ids=["default", "mirrored-2"])
def test_optimizer_restored_before_its_first_step_continues_exactly(
    tmp_path: Path, with_strategy: bool
) -> None:
    """Item 4's program: build the model, restore, train; the resumed run equals TF's."""
    strategy: Any = (
        mwms_mpi.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if with_strategy else None
    )
    scope: Any = strategy.scope() if strategy else _Nothing()

    def steps(opt: optimizers.Optimizer, var: Any, grads: list[np.ndarray]) -> None:
        for g in grads:  # with 2 replicas, each gets half the gradient: the sum is g
            if strategy is None:
                opt.apply_gradients([(g, var)])
            else:
                strategy.run(lambda g=g: opt.apply_gradients([(g / 2, var)]))

    with scope:
        var, opt = mwms_mpi.Variable(np.arange(3, dtype=np.float32)), optimizers.Adam(0.1)
    steps(opt, var, GRADS[:2])
    np.testing.assert_array_equal(np.asarray(var.numpy()), TF_V_AFTER_2)
    path = train.Checkpoint(v=var, optimizer=opt).save(str(tmp_path / "ckpt"))

    with scope:
        var2, opt2 = mwms_mpi.Variable(np.zeros(3, np.float32)), optimizers.Adam(0.1)
    status = train.Checkpoint(v=var2, optimizer=opt2).restore(path)
    np.testing.assert_array_equal(np.asarray(var2.numpy()), TF_V_AFTER_2)
    assert _status(status, _CHECKS) == TF_STATUS_BEFORE_BUILD
    with pytest.raises(
        AssertionError, match=r"Unresolved object in checkpoint \(root\)\.optimizer"
    ):
        status.assert_consumed()
    steps(opt2, var2, GRADS[2:])
    assert _status(status, _CHECKS) == TF_STATUS_AFTER_BUILD
    assert int(opt2.iterations.numpy()) == TF_ITERATIONS_AFTER
    for value in getattr(var2, "values", [var2]):  # every replica
        got = np.asarray(value.numpy())
        assert got.tobytes() == TF_V_AFTER_4.tobytes(), (got, TF_V_AFTER_4)


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: Any) -> None:
        return None


@pytest.mark.parametrize(
    "make", [lambda: optimizers.SGD(0.1, momentum=0.9), lambda: optimizers.Adam(0.1, amsgrad=True)]
)
def test_every_slot_kind_is_restored_on_creation(tmp_path: Path, make: Any) -> None:
    straight = mwms_mpi.Variable(np.arange(3, dtype=np.float32))
    _steps(make(), straight, GRADS)
    var, opt = mwms_mpi.Variable(np.arange(3, dtype=np.float32)), make()
    _steps(opt, var, GRADS[:2])
    path = train.Checkpoint(model={"v": var}, opt=opt).save(str(tmp_path / "c"))
    var2, opt2 = mwms_mpi.Variable(np.zeros(3, np.float32)), make()
    train.Checkpoint(model={"v": var2}, opt=opt2).restore(path)
    _steps(opt2, var2, GRADS[2:])
    assert var2.numpy().tobytes() == straight.numpy().tobytes()


# -- restore_on_create.py: lazily created variables and attributes set after the restore --------

# TF: the status before any variable is created, after w, after everything, after an extra c
TF_BEFORE = {"assert_existing_objects_matched": "passes", "assert_consumed": "raises"}
TF_AFTER_W = {"assert_existing_objects_matched": "passes", "assert_consumed": "raises"}
TF_AFTER_ALL = {"assert_existing_objects_matched": "passes", "assert_consumed": "passes"}
TF_AFTER_C = {"assert_existing_objects_matched": "raises", "assert_consumed": "raises"}
TF_W_AT_CREATION, TF_B_AT_CREATION, TF_EXTRA_AT_SETATTR = [1.0, 2.0], 3.0, 7
TF_C_NOT_IN_CHECKPOINT = 5.0
TF_W_CREATED_THEN_TRAINED = [11.0, 12.0]  # restored once at creation, then assign_add(10)
TF_SHAPE_ERROR = (
    "Received incompatible tensor with shape (2,) when attempting to restore variable with "
    "shape (3,)"
)
TF_DTYPE_ERROR = (
    "tensor_name = model/b/.ATTRIBUTES/VARIABLE_VALUE; expected dtype double does not equal "
    "original dtype float"
)
SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"  # TF's keys are ours plus this


def _saved_module(tmp_path: Path) -> str:
    module = Module()
    module.w = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32))  # type: ignore[attr-defined]
    module.b = mwms_mpi.Variable(np.float32(3.0))  # type: ignore[attr-defined]
    extra = mwms_mpi.Variable(np.int64(7))
    return train.Checkpoint(model=module, extra=extra).save(str(tmp_path / "c"))


def test_lazily_created_variables_get_their_values_at_creation(tmp_path: Path) -> None:
    path = _saved_module(tmp_path)
    module: Any = Module()
    ckpt = train.Checkpoint(model=module)
    status = ckpt.restore(path)
    assert _status(status, _CHECKS) == TF_BEFORE
    assert type(module).__name__ == "Module" and isinstance(module, Module)
    module.w = mwms_mpi.Variable(np.zeros(2, np.float32))
    assert module.w.numpy().tolist() == TF_W_AT_CREATION
    assert _status(status, _CHECKS) == TF_AFTER_W
    module.b = mwms_mpi.Variable(np.float32(0.0))
    assert float(module.b.numpy()) == TF_B_AT_CREATION
    assert type(module) is Module  # nothing under it waits any more: its own class again
    ckpt.extra = mwms_mpi.Variable(np.int64(0))
    assert int(ckpt.extra.numpy()) == TF_EXTRA_AT_SETATTR
    assert _status(status, _CHECKS) == TF_AFTER_ALL
    module.c = mwms_mpi.Variable(np.float32(5.0))
    assert float(module.c.numpy()) == TF_C_NOT_IN_CHECKPOINT
    assert _status(status, _CHECKS) == TF_AFTER_C
    status.assert_nontrivial_match()


def test_a_value_is_restored_once_then_never_again(tmp_path: Path) -> None:
    path = _saved_module(tmp_path)
    module: Any = Module()
    status = train.Checkpoint(model=module).restore(path)
    module.w = mwms_mpi.Variable(np.zeros(2, np.float32))
    module.w.assign_add(np.full(2, 10.0, np.float32))
    module.b = mwms_mpi.Variable(np.float32(0.0))  # another restore-on-create pass under it
    assert module.w.numpy().tolist() == TF_W_CREATED_THEN_TRAINED
    status.expect_partial()


def test_created_with_the_wrong_shape_or_dtype_raises_tfs_errors(tmp_path: Path) -> None:
    path = _saved_module(tmp_path)
    module: Any = Module()
    train.Checkpoint(model=module).restore(path).expect_partial()
    with pytest.raises(ValueError, match=re.escape(TF_SHAPE_ERROR)):
        module.w = mwms_mpi.Variable(np.zeros(3, np.float32))
    other: Any = Module()
    train.Checkpoint(model=other).restore(path).expect_partial()
    with pytest.raises(errors.InvalidArgumentError, match=TF_DTYPE_ERROR.replace(SUFFIX, "")):
        other.b = mwms_mpi.Variable(np.float64(0.0))
    # TF 2.21 (tf.Module): the assignment raised and left no attribute, for a shape and a dtype
    assert not hasattr(module, "w") and not hasattr(other, "b")


def test_a_later_restore_wins_where_it_has_a_value_and_an_earlier_one_fills_in(
    tmp_path: Path,
) -> None:
    # TF 2.21 (each object takes the newest restore that has a value for it; an earlier
    # restore's values for what the later one lacks stay waiting): w [5, 6] b 3.0 for a module
    # made before both restores and one attached after them; in reversed order w [1, 2] b 3.0.
    # b was dropped with the earlier restore before (0.0).
    first = _saved_module(tmp_path)
    module: Any = Module()
    module.w = mwms_mpi.Variable(np.array([5.0, 6.0], np.float32))
    second = train.Checkpoint(model=module).save(str(tmp_path / "second"))  # has no b

    def build(target: Any) -> Any:
        target.w = mwms_mpi.Variable(np.zeros(2, np.float32))
        target.b = mwms_mpi.Variable(np.float32(0.0))
        return target.w.numpy().tolist(), float(target.b.numpy())

    target: Any = Module()
    ckpt = train.Checkpoint(model=target)
    ckpt.restore(first).expect_partial()
    ckpt.restore(second).expect_partial()
    assert build(target) == ([5.0, 6.0], 3.0)
    late = train.Checkpoint()
    late.restore(first).expect_partial()
    late.restore(second).expect_partial()
    late.model = Module()
    assert build(late.model) == ([5.0, 6.0], 3.0)
    reversed_target: Any = Module()
    ckpt = train.Checkpoint(model=reversed_target)
    ckpt.restore(second).expect_partial()
    ckpt.restore(first).expect_partial()
    assert build(reversed_target) == ([1.0, 2.0], 3.0)
    # TF 2.21: a Checkpoint attribute only the first restore holds: x = 1.0 y = 20.0
    p1 = train.Checkpoint(x=_f32(1.0), y=_f32(10.0)).save(str(tmp_path / "p1"))
    p2 = train.Checkpoint(y=_f32(20.0)).save(str(tmp_path / "p2"))
    both = train.Checkpoint(y=_f32(0.0))
    both.restore(p1)
    both.restore(p2)
    both.x = _f32(0.0)
    assert (float(both.x.numpy()), float(both.y.numpy())) == (1.0, 20.0)


def _f32(value: float) -> Any:
    return mwms_mpi.Variable(np.float32(value))


def test_a_waiting_module_pickles_and_copies_as_itself(tmp_path: Path) -> None:
    path = _saved_module(tmp_path)
    module: Any = Module()
    module.note = "kept"
    train.Checkpoint(model=module).restore(path).expect_partial()
    assert type(module) is Module
    for twin in (pickle.loads(pickle.dumps(module)), copy.copy(module), copy.deepcopy(module)):
        assert type(twin) is Module and twin.note == "kept"


def test_a_plain_object_is_never_changed_and_its_late_values_stay_pending(
    tmp_path: Path,
) -> None:
    """A plain object cannot tell the checkpoint that it gained an attribute; an earlier
    version swapped its class for a notifying subclass while a restore waited (``==``,
    ``type()``, pickles and every attribute set changed). Now nothing about it changes, and a
    value for an attribute it makes later is never assigned behind the caller's back: the
    status reports it (TF refuses such objects outright)."""
    path = _saved_module(tmp_path)
    plain: Any = Plain()
    twin: Any = Plain()
    plain.w = mwms_mpi.Variable(np.zeros(2, np.float32))  # exists: restored now
    status = train.Checkpoint(model=plain).restore(path)
    assert type(plain) is Plain and "Plain" in type(plain).__qualname__
    assert b"mwms_mpi" not in pickle.dumps(plain.__class__)
    assert plain.w.numpy().tolist() == TF_W_AT_CREATION
    plain.b = mwms_mpi.Variable(np.float32(0.0))  # made after the restore: stays 0
    assert float(plain.b.numpy()) == 0.0
    with pytest.raises(AssertionError, match=r"\(root\)\.model\.b"):
        status.assert_consumed()
    status.expect_partial()
    assert type(twin) is type(plain)


def test_a_checkpoint_root_is_read_when_used_and_its_late_attributes_restored(
    tmp_path: Path,
) -> None:
    """``Checkpoint(root=m)`` saves ``m``'s children as they are at each save, and a restore
    gives an attribute ``m`` makes later its value (TF tracks the root object itself)."""
    saved: Any = Module()
    saved.a = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32))
    ckpt = train.Checkpoint(root=saved)
    saved.b = mwms_mpi.Variable(np.float32(3.0))  # after the Checkpoint was made: still saved
    path = ckpt.save(str(tmp_path / "root"))
    target: Any = Module()
    target.a = mwms_mpi.Variable(np.zeros(2, np.float32))
    status = train.Checkpoint(root=target).restore(path)
    assert target.a.numpy().tolist() == [1.0, 2.0]
    target.b = mwms_mpi.Variable(np.float32(0.0))
    assert float(target.b.numpy()) == 3.0
    status.assert_consumed()


def test_unused_values_are_logged_when_the_restore_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """TF logs each value no object took when the restore is garbage collected, unless
    ``expect_partial()`` was called (restore_on_create.py, the end of its log)."""
    path = _saved_module(tmp_path)

    def restore(partial: bool) -> None:
        module: Any = Module()
        module.w = mwms_mpi.Variable(np.zeros(2, np.float32))
        status = train.Checkpoint(model=module).restore(path)
        if partial:
            status.expect_partial()

    with caplog.at_level(logging.WARNING, logger="mwms_mpi.train._restore"):
        restore(partial=True)
        gc.collect()
        assert caplog.text == ""
        restore(partial=False)
        gc.collect()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("Detecting that an object or model or mwms_mpi.train.Checkpoint")
    assert lines[1:] == [
        "Value in checkpoint could not be found in the restored object: (root).extra",
        "Value in checkpoint could not be found in the restored object: (root).model.b",
    ]


def test_restore_none_is_initialization_only(tmp_path: Path) -> None:
    status = train.Checkpoint(model=Module()).restore(None)
    assert type(status).__name__ == "InitializationOnlyStatus"
    assert _status(status, (*_CHECKS, "assert_nontrivial_match")) == {
        "assert_existing_objects_matched": "raises",
        "assert_consumed": "raises",
        "assert_nontrivial_match": "raises",
    }
    assert status.expect_partial() is status


def test_a_modules_private_attributes_are_saved_and_counted_as_tf_module(
    tmp_path: Path,
) -> None:
    # tf.Module tracks every attribute, `_w` too (TF 2.21: restored _w [1.0, 2.0],
    # len(variables) 1). They were skipped: not saved, and assert_consumed passed.
    module: Any = Module()
    module._w = mwms_mpi.Variable(np.array([1.0, 2.0], np.float32))
    assert len(module.variables) == 1
    path = train.Checkpoint(model=module).save(str(tmp_path / "c"))
    later: Any = Module()
    status = train.Checkpoint(model=later).restore(path)
    later._w = mwms_mpi.Variable(np.zeros(2, np.float32))  # restore-on-create, private too
    status.assert_consumed()
    assert later._w.numpy().tolist() == [1.0, 2.0]
    assert len(later.variables) == 1

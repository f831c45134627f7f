"""Checkpoint behaviours a differential run against TF 2.21 found to differ; TF's outputs pinned.

Each expected value below was printed by TF 2.21 (``tf.train.Checkpoint``, ``tf.Variable``,
``tf.Module``) running the same program.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mwms_mpi
from mwms_mpi import errors, train


def _saved(tmp_path: Path) -> str:
    return train.Checkpoint(
        a=mwms_mpi.Variable(np.zeros(2, np.float32)), b=mwms_mpi.Variable(np.zeros(2, np.float32))
    ).save(str(tmp_path / "ck"))


# -- one restore, several values that do not fit ------------------------------------------------


def test_a_dtype_mismatch_is_reported_before_a_shape_mismatch(tmp_path: Path) -> None:
    # TF's RestoreV2 reads (and checks the dtypes of) every value before any is assigned, and
    # the shapes are checked when assigning: "a" of another shape and "b" of another dtype
    # raise InvalidArgumentError about "b", whichever comes first.
    path = _saved(tmp_path)
    ckpt = train.Checkpoint(
        a=mwms_mpi.Variable(np.zeros(3, np.float32)), b=mwms_mpi.Variable(np.zeros(2, np.float64))
    )
    with pytest.raises(errors.InvalidArgumentError, match="tensor_name = b; expected dtype double"):
        ckpt.restore(path)


def test_a_shape_mismatch_names_the_variable_as_tf_does(tmp_path: Path) -> None:
    # TF: "... with shape (3,) and name a:0." (the variable's name, not its checkpoint key)
    path = _saved(tmp_path)
    ckpt = train.Checkpoint(a=mwms_mpi.Variable(np.zeros(3, np.float32), name="a"))
    with pytest.raises(
        ValueError,
        match=r"^Received incompatible tensor with shape \(2,\) when attempting to restore "
        r"variable with shape \(3,\) and name a:0\.$",
    ):
        ckpt.restore(path)


# -- attributes ----------------------------------------------------------------------------------


def test_a_value_that_is_not_trackable_is_a_plain_attribute_of_a_checkpoint(
    tmp_path: Path,
) -> None:
    # TF: `ckpt.a = 3` is allowed (AutoTrackable tracks nothing for it) and reads back 3; a
    # variable tracked under that name before stays saved under it. Only the constructor's
    # keyword arguments must be trackable.
    ckpt = train.Checkpoint()
    ckpt.step = 3
    assert ckpt.step == 3
    ckpt.name = "run"
    assert ckpt.name == "run"
    v = mwms_mpi.Variable(1.5)
    ckpt.a = v
    ckpt.a = None
    assert ckpt.a is None
    path = ckpt.save(str(tmp_path / "ck"))
    v.assign(0.0)
    fresh = mwms_mpi.Variable(0.0)
    train.Checkpoint(a=fresh).restore(path).assert_consumed()
    assert fresh.numpy() == np.float32(1.5)
    ckpt.a = mwms_mpi.Variable(2.0)  # trackable again: tracked and read back
    assert float(ckpt.a.numpy()) == 2.0
    with pytest.raises(ValueError, match="expecting a to be a trackable object"):
        train.Checkpoint(a=3)


def test_a_deferred_value_that_does_not_fit_leaves_no_attribute(tmp_path: Path) -> None:
    # TF: setting the attribute raises (ValueError for a shape, InvalidArgumentError for a
    # dtype) and the object has no such attribute afterwards; the same for a tf.Module. The
    # value was taken off the waiting ones (TF pops the deferred dependency, then restores):
    # a later variable of the right shape keeps its own value.
    path = _saved(tmp_path)
    ckpt = train.Checkpoint()
    ckpt.restore(path)
    with pytest.raises(ValueError, match="Received incompatible tensor"):
        ckpt.a = mwms_mpi.Variable(np.zeros(3, np.float32))
    with pytest.raises(AttributeError, match="'Checkpoint' object has no attribute 'a'"):
        ckpt.a  # noqa: B018
    with pytest.raises(errors.InvalidArgumentError):
        ckpt.b = mwms_mpi.Variable(np.zeros(2, np.float64))
    assert not hasattr(ckpt, "b")
    ckpt.a = mwms_mpi.Variable(np.ones(2, np.float32))
    assert ckpt.a.numpy().tolist() == [1.0, 1.0]

    module = mwms_mpi.Module()
    module.k = mwms_mpi.Variable([1.0, 2.0])
    saved = train.Checkpoint(m=module).save(str(tmp_path / "m"))
    other = mwms_mpi.Module()
    train.Checkpoint(m=other).restore(saved).expect_partial()
    with pytest.raises(ValueError, match="Received incompatible tensor"):
        other.k = mwms_mpi.Variable([0.0, 0.0, 0.0])
    assert not hasattr(other, "k")


def test_save_counter_is_an_int64_scalar_variable() -> None:
    # TF: save_counter.dtype tf.int64, shape (), name 'save_counter:0', trainable False
    counter = train.Checkpoint().save_counter
    assert counter.dtype == np.int64
    assert tuple(counter.shape) == ()
    assert counter.name == "save_counter:0"
    assert counter.trainable is False


# -- paths that are no checkpoint ----------------------------------------------------------------


def test_a_directory_or_a_file_that_is_no_checkpoint_raises_data_loss(tmp_path: Path) -> None:
    # TF 2.21, restore and read alike: with no index next to it, a prefix that exists is opened
    # as a (V1) table and DataLossError names why it is none; a prefix that does not exist
    # raises NotFoundError.
    ckpt = train.Checkpoint(a=mwms_mpi.Variable(0.0))
    saved = Path(ckpt.save(str(tmp_path / "ck")))
    data = next(saved.parent.glob(saved.name + ".data-*"))
    plain = tmp_path / "plain"
    plain.write_text("hello")
    tail = ": perhaps your file is in a different file format and you need to use a different "
    tail += "restore operator?"
    expected = {
        str(tmp_path): f"FAILED_PRECONDITION: {tmp_path}; Is a directory",
        str(plain): "DATA_LOSS: file is too short to be an sstable",
        str(data): "DATA_LOSS: not an sstable (bad magic number)",
    }
    for prefix, why in expected.items():
        for method in (ckpt.restore, ckpt.read):
            with pytest.raises(errors.DataLossError) as raised:
                method(prefix)
            assert raised.value.message == f"Unable to open table file {prefix}: {why}{tail}"
    with pytest.raises(errors.NotFoundError):
        ckpt.restore(str(tmp_path / "missing-1"))


# -- options -------------------------------------------------------------------------------------


def test_options_that_are_no_options_object_raise_tfs_attribute_error(tmp_path: Path) -> None:
    # TF 2.21: `options or CheckpointOptions()`, then an option is read: save, write, restore
    # and read (a None path included) raise before doing anything; CheckpointManager.save
    # after counting the save (the next is ckpt-2), unless checkpoint_interval skips it.
    ckpt = train.Checkpoint(v=mwms_mpi.Variable(1.0))
    message = "'int' object has no attribute 'experimental_enable_async_checkpoint'"
    calls = {
        "save": lambda: ckpt.save(str(tmp_path / "a"), options=3),
        "write": lambda: ckpt.write(str(tmp_path / "b"), options=3),
        "restore": lambda: ckpt.restore(None, options=3),
        "read": lambda: ckpt.read(str(tmp_path / "missing"), options=3),
    }
    for call in calls.values():
        with pytest.raises(AttributeError, match=f"^{message}$"):
            call()
    assert int(ckpt.save_counter) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    manager = train.CheckpointManager(ckpt, str(tmp_path / "m"), max_to_keep=2)
    with pytest.raises(
        AttributeError, match=r"^'int' object has no attribute 'experimental_write_callbacks'$"
    ):
        manager.save(options=3)
    assert manager.save(options=None) == str(tmp_path / "m" / "ckpt-2")
    assert ckpt.save(str(tmp_path / "c"), options=train.CheckpointOptions()).endswith("c-3")


# -- one object under several names --------------------------------------------------------------


def test_an_object_saved_under_several_names_restores_into_one_object(tmp_path: Path) -> None:
    # TF 2.21 saves an object reached under several names once (a node of its object graph,
    # under the name its breadth-first walk reaches first) and binds it, on restore, to the
    # first object reaching it: the others get nothing and are unmatched. Saved as
    # Checkpoint(b=v, a={"x": v}, c=[v]) with v 7.0, restored into
    #   distinct objects: b 7.0, a/x 0.0, c/0 0.0, "Found 2 Python objects that were not bound"
    #   c only: c/0 7.0, consumed; a only: a/x 7.0, consumed
    #   a and c: a/x 7.0 (depth 2, before c), c/0 0.0, 1 not bound
    #   one object w under all three: 7.0, consumed
    #   w under b and c, another under a: 7.0, 7.0, 0.0, 1 not bound
    v = mwms_mpi.Variable(7.0)
    path = train.Checkpoint(b=v, a={"x": v}, c=[v]).save(str(tmp_path / "t"))

    def restored(**objects: object) -> tuple[list[float], str]:
        status = train.Checkpoint(**objects).restore(path)
        try:
            status.assert_consumed()
            outcome = "consumed"
        except AssertionError as exc:
            outcome = str(exc)[: len("Found 2 Python objects that were not bound")]
        leaves = [objects[name] for name in sorted(objects)]
        flat = [
            x["x"] if isinstance(x, dict) else x[0] if isinstance(x, list) else x for x in leaves
        ]
        return [float(x.numpy()) for x in flat], outcome  # type: ignore[attr-defined]

    def var() -> mwms_mpi.Variable:
        return mwms_mpi.Variable(0.0)

    not_bound = "Found {} Python objects that were not bound"
    assert restored(b=var(), a={"x": var()}, c=[var()]) == ([0.0, 7.0, 0.0], not_bound.format(2))
    assert restored(c=[var()]) == ([7.0], "consumed")
    assert restored(a={"x": var()}) == ([7.0], "consumed")
    assert restored(a={"x": var()}, c=[var()]) == ([7.0, 0.0], not_bound.format(1))
    w = var()
    assert restored(b=w, a={"x": w}, c=[w]) == ([7.0, 7.0, 7.0], "consumed")
    w = var()
    assert restored(b=w, a={"x": var()}, c=[w]) == ([0.0, 7.0, 7.0], not_bound.format(1))
    # restore first, then create (TF 2.21): [x] at c and x at b: 7.0, 7.0, consumed; distinct
    # objects: c/0 7.0 (made first, bound), b 0.0, not consumed
    ckpt = train.Checkpoint()
    status = ckpt.restore(path).expect_partial()
    x = var()
    ckpt.c, ckpt.b = [x], x
    assert float(x.numpy()) == 7.0
    status.assert_consumed()
    ckpt = train.Checkpoint()
    status = ckpt.restore(path).expect_partial()
    ckpt.c, ckpt.b = [var()], var()
    assert (float(ckpt.c[0].numpy()), float(ckpt.b.numpy())) == (7.0, 0.0)
    with pytest.raises(AssertionError, match=not_bound.format(1)):
        status.assert_existing_objects_matched()
    index = Path(path + ".index.json")
    recorded = json.loads(index.read_text())
    assert recorded["aliases"] == {"a/x": "b", "c/0": "b"}
    recorded["aliases"] = {"a/x": "missing"}  # forged: names a key the file does not hold
    index.write_text(json.dumps(recorded))
    with pytest.raises(errors.DataLossError, match="incomplete or corrupt"):
        train.Checkpoint(b=var()).restore(path)


# -- save_counter created after a read -----------------------------------------------------------


def test_a_counter_read_before_it_existed_is_bound_when_it_is_created(tmp_path: Path) -> None:
    # TF 2.21: `read` of a saved checkpoint keeps its save_counter value waiting (the counter is
    # made lazily); when the counter is made (reading the property, `restore`, `save`), the
    # waiting value is bound, so the read's status is consumed. Saved twice (counter 2):
    #   read: consumed FAIL, existing ok; then save_counter -> 2: consumed ok, existing ok
    #   read, then restore of another save (counter 1): both statuses consumed; counter 1
    #   read, then save: "u-3", the read's status consumed
    src = train.Checkpoint(c=mwms_mpi.Variable(1.0))
    src.save(str(tmp_path / "s"))
    first = src.save(str(tmp_path / "s"))
    second = train.Checkpoint(c=mwms_mpi.Variable(2.0)).save(str(tmp_path / "t"))

    ckpt = train.Checkpoint(c=mwms_mpi.Variable(0.0))
    status = ckpt.read(first)
    status.assert_existing_objects_matched()
    with pytest.raises(AssertionError, match="save_counter"):
        status.assert_consumed()
    assert int(ckpt.save_counter) == 2
    status.assert_consumed()

    ckpt = train.Checkpoint(c=mwms_mpi.Variable(0.0))
    status = ckpt.read(first)
    later = ckpt.restore(second)
    status.assert_consumed()
    later.assert_consumed()
    assert int(ckpt.save_counter) == 1

    ckpt = train.Checkpoint(c=mwms_mpi.Variable(0.0))
    status = ckpt.read(first)
    assert ckpt.save(str(tmp_path / "u")) == str(tmp_path / "u-3")
    status.assert_consumed()


def test_one_object_under_names_of_several_saved_objects(tmp_path: Path) -> None:
    # TF 2.21, saved as Checkpoint(a=[V(1.0)], b=V(2.0), c=V(3.0)), y restored under:
    #   a/0 and b: 2.0 (b is reached first breadth-first), consumed FAIL (c), existing ok
    #   c, then b set after the restore: 3.0 (the same restore sets an object once),
    #     consumed FAIL (a), existing ok
    #   a/0, b and c: 2.0, consumed ok
    path = train.Checkpoint(
        a=[mwms_mpi.Variable(1.0)], b=mwms_mpi.Variable(2.0), c=mwms_mpi.Variable(3.0)
    ).save(str(tmp_path / "t"))

    def outcome(status: object) -> list[str]:
        found = []
        for check in ("assert_consumed", "assert_existing_objects_matched"):
            try:
                getattr(status, check)()
                found.append("ok")
            except AssertionError:
                found.append("FAIL")
        return found

    y = mwms_mpi.Variable(0.0)
    status = train.Checkpoint(a=[y], b=y).restore(path).expect_partial()
    assert (float(y.numpy()), outcome(status)) == (2.0, ["FAIL", "ok"])
    y = mwms_mpi.Variable(0.0)
    ckpt = train.Checkpoint(c=y)
    status = ckpt.restore(path).expect_partial()
    ckpt.b = y
    assert (float(y.numpy()), outcome(status)) == (3.0, ["FAIL", "ok"])
    y = mwms_mpi.Variable(0.0)
    status = train.Checkpoint(a=[y], b=y, c=y).restore(path)
    assert (float(y.numpy()), outcome(status)) == (2.0, ["ok", "ok"])

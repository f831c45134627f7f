"""mwms_mpi.train.Checkpoint / CheckpointManager in one process: TF 2.21's behaviour, atomicity."""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mwms_mpi import errors, train
from mwms_mpi.train import _format, _state
from mwms_mpi.train import checkpoint as checkpoint_module


class DuckVariable:
    """The variable protocol and nothing else: ``numpy``, ``assign``, ``shape``, ``dtype``."""

    def __init__(self, value: Any) -> None:
        self.value = np.array(value)
        self.assigned = 0

    def numpy(self) -> np.ndarray:
        return self.value.copy()

    def assign(self, value: Any) -> None:
        self.value = np.array(value, dtype=self.value.dtype)
        self.assigned += 1

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.value.dtype


class ReadValueVariable:
    """A variable with ``read_value`` but no ``numpy``."""

    def __init__(self, value: Any) -> None:
        self.value = np.array(value)

    def read_value(self) -> np.ndarray:
        return self.value

    def assign(self, value: Any) -> None:
        self.value = np.array(value)


class Dense:
    def __init__(self) -> None:
        self.kernel = DuckVariable(np.arange(6.0, dtype=np.float32).reshape(2, 3))
        self.bias = np.zeros(3, dtype=np.float32)
        self.units = 3  # not trackable: skipped
        self._private = np.ones(2)  # underscore attributes are not walked


class Model:
    def __init__(self) -> None:
        self.dense = Dense()
        self.layers = [DuckVariable([1, 2]), np.array([7.0])]


def _index(prefix: str) -> dict[str, Any]:
    return json.loads(Path(prefix + ".index.json").read_text())


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- Checkpoint ----------------------------------------------------------------------------------


def test_round_trip_arrays_dicts_and_variables(tmp_path: Path) -> None:
    array = np.arange(4, dtype=np.int64)
    var = DuckVariable([1.5, 2.5])
    nested = {"opt": {"m": np.ones((2, 2)), "step": DuckVariable(np.int64(3)), "lr": 0.1}}
    other = ReadValueVariable([9, 9])
    ckpt = train.Checkpoint(a=array, v=var, d=nested, r=other)
    path = ckpt.save(str(tmp_path / "ckpt"))
    assert path == str(tmp_path / "ckpt-1")
    assert _index(path)["keys"] == ["a", "d/opt/m", "d/opt/step", "r", "v", "save_counter"]

    before = id(array)
    array[:] = -1
    var.assign([0.0, 0.0])
    nested["opt"]["m"][:] = 0
    nested["opt"]["step"].assign(0)
    other.assign([0, 0])
    status = ckpt.restore(path)
    status.assert_consumed()
    assert id(ckpt.a) == before and ckpt.a is array  # restored in place
    np.testing.assert_array_equal(array, [0, 1, 2, 3])
    np.testing.assert_array_equal(var.numpy(), [1.5, 2.5])
    np.testing.assert_array_equal(nested["opt"]["m"], np.ones((2, 2)))
    assert nested["opt"]["step"].numpy() == 3
    assert nested["opt"]["lr"] == 0.1
    np.testing.assert_array_equal(other.value, [9, 9])


def test_object_attributes_lists_and_nested_checkpoints(tmp_path: Path) -> None:
    model = Model()
    ckpt = train.Checkpoint(model=model, inner=train.Checkpoint(x=np.array([5.0])))
    path = ckpt.write(str(tmp_path / "w"))
    assert _index(path)["keys"] == [
        "inner/x",
        "model/dense/bias",
        "model/dense/kernel",
        "model/layers/0",
        "model/layers/1",
    ]  # no save_counter: this Checkpoint never made one (TF 2.21)
    model.dense.kernel.assign(np.zeros((2, 3)))
    model.dense.bias[:] = 4
    model.layers[1][:] = 0
    ckpt.inner.x[:] = 0
    ckpt.read(path).assert_consumed()
    np.testing.assert_array_equal(model.dense.kernel.numpy(), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(model.dense.bias, np.zeros(3))
    assert model.layers[1][0] == 7.0 and ckpt.inner.x[0] == 5.0


def test_root_and_escaped_names(tmp_path: Path) -> None:
    ckpt = train.Checkpoint(root=Dense(), extra={"a/b.c": np.ones(1)})
    path = ckpt.write(str(tmp_path / "r"))
    assert _index(path)["keys"] == ["bias", "kernel", "extra/a.Sb..c"]
    ckpt.read(path).assert_consumed()


def test_save_numbering_state_file_and_latest(tmp_path: Path) -> None:
    ckpt = train.Checkpoint(v=DuckVariable(1.0))
    assert int(ckpt.save_counter) == 0
    assert train.latest_checkpoint(str(tmp_path)) is None
    first = ckpt.save(str(tmp_path / "ckpt"))
    second = ckpt.save(str(tmp_path / "ckpt"))
    assert (first, second) == (str(tmp_path / "ckpt-1"), str(tmp_path / "ckpt-2"))
    assert int(ckpt.save_counter) == 2 and ckpt.save_counter.numpy().dtype == np.int64
    # TF 2.21's Checkpoint.save records only the newest checkpoint, by relative path.
    assert (tmp_path / "checkpoint").read_text() == (
        'model_checkpoint_path: "ckpt-2"\nall_model_checkpoint_paths: "ckpt-2"\n'
    )
    assert train.latest_checkpoint(str(tmp_path)) == second
    assert train.latest_checkpoint(str(tmp_path / "missing")) is None
    # write: no number, no state file change, save_counter unchanged (TF 2.21)
    plain = ckpt.write(str(tmp_path / "plain"))
    assert plain == str(tmp_path / "plain") and int(ckpt.save_counter) == 2
    assert train.latest_checkpoint(str(tmp_path)) == second
    ckpt.save_counter.assign(7)
    ckpt.restore(first)
    assert int(ckpt.save_counter) == 1  # restore (and read) restore save_counter, as in TF


def test_restore_none_and_missing_paths(tmp_path: Path) -> None:
    ckpt = train.Checkpoint(v=DuckVariable(1.0))
    status = ckpt.restore(None)
    assert type(status).__name__ == "InitializationOnlyStatus"
    assert status.expect_partial() is status
    with pytest.raises(AssertionError, match=r"No checkpoint specified \(save_path=None\)"):
        status.assert_consumed()
    missing = str(tmp_path / "missing-7")  # a directory: test_checkpoint_tf_audit.py
    with pytest.raises(errors.NotFoundError, match="Failed to find any matching files"):
        ckpt.restore(missing)
    with pytest.raises(errors.NotFoundError):
        ckpt.read(missing)


def test_partial_matches_and_assertions(tmp_path: Path) -> None:
    saved = train.Checkpoint(v=DuckVariable([1.0, 2.0]), w=np.array(3))
    path = saved.save(str(tmp_path / "c"))
    fewer = train.Checkpoint(v=DuckVariable([0.0, 0.0]))
    status = fewer.restore(path)
    assert status.expect_partial() is status
    status.assert_existing_objects_matched()
    with pytest.raises(AssertionError, match=r"Unresolved object in checkpoint.*: w"):
        status.assert_consumed()
    np.testing.assert_array_equal(fewer.v.numpy(), [1.0, 2.0])
    more = train.Checkpoint(v=DuckVariable([0.0, 0.0]), w=np.array(0), extra=np.array([5.0]))
    status = more.restore(path)
    with pytest.raises(AssertionError, match="1 Python objects that were not bound"):
        status.assert_consumed()
    assert more.extra[0] == 5.0 and more.w == 3


def test_incompatible_shape_restores_nothing(tmp_path: Path) -> None:
    path = train.Checkpoint(a=np.ones(2), v=DuckVariable([1.0, 2.0])).write(str(tmp_path / "c"))
    a, v = np.zeros(2), DuckVariable([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"incompatible tensor with shape \(2,\).*shape \(3,\)"):
        train.Checkpoint(a=a, v=v).restore(path)
    np.testing.assert_array_equal(a, [0.0, 0.0])  # validated before anything was assigned
    with pytest.raises(ValueError, match="read-only"):
        frozen = np.zeros(2)
        frozen.flags.writeable = False
        train.Checkpoint(a=frozen).restore(path)


def test_not_trackable_and_reserved_names() -> None:
    with pytest.raises(ValueError, match="expecting v to be a trackable object"):
        train.Checkpoint(v=1.0)
    with pytest.raises(AttributeError, match="save_counter"):
        train.Checkpoint(save_counter=np.zeros(1))
    with pytest.raises(ValueError, match="dtype object"):
        train.Checkpoint(a=DuckVariable(np.array([None]))).write("/nonexistent/x")
    ckpt = train.Checkpoint()
    ckpt.late = np.ones(1)  # attributes set later are tracked, as in TF
    assert ckpt.late[0] == 1.0


def test_corrupt_or_incomplete_files_raise_data_loss(tmp_path: Path) -> None:
    values = np.arange(1000, dtype=np.float32)
    ckpt = train.Checkpoint(v=values)
    path = ckpt.save(str(tmp_path / "c"))
    data = tmp_path / _index(path)["data_file"]
    index = Path(path + ".index.json")
    good_data, good_index = data.read_bytes(), index.read_bytes()
    target = np.zeros(1000, dtype=np.float32)

    def restore() -> None:
        train.Checkpoint(v=target).restore(path)

    data.write_bytes(good_data[: len(good_data) // 2])
    with pytest.raises(errors.DataLossError, match="bytes, the index says"):
        restore()
    flipped = bytearray(good_data)
    flipped[len(flipped) // 2] ^= 0xFF
    data.write_bytes(bytes(flipped))
    with pytest.raises(errors.DataLossError, match="corrupt"):
        restore()
    data.unlink()
    with pytest.raises(errors.DataLossError, match="missing"):
        restore()
    data.write_bytes(good_data)
    for bad in (good_index[: len(good_index) // 2], b""):
        index.write_bytes(bad)
        with pytest.raises(errors.DataLossError, match="incomplete or corrupt"):
            restore()
    assert not target.any()
    index.write_bytes(good_index)
    restore()
    np.testing.assert_array_equal(target, values)


@pytest.mark.parametrize("stage", ["data", "index", "state"])
def test_interrupted_save_leaves_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    var = DuckVariable([1.0, 2.0])
    ckpt = train.Checkpoint(v=var)
    first = ckpt.save(str(tmp_path / "ckpt"))
    var.assign([3.0, 4.0])

    class Interrupted(Exception):
        pass

    if stage == "data":  # the npz writer fails half way through the temporary file

        def write_array(*args: Any, **kwargs: Any) -> None:
            raise Interrupted

        monkeypatch.setattr(np.lib.format, "write_array", write_array)
    else:
        real_replace = os.replace
        suffix = ".index.json" if stage == "index" else "checkpoint"

        def replace(src: str, dst: str) -> None:
            if str(dst).endswith(suffix):
                raise Interrupted
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(Interrupted):
        ckpt.save(str(tmp_path / "ckpt"))
    monkeypatch.undo()
    assert not [name for name in _files(tmp_path) if ".tmp" in name]  # temp files removed
    if stage != "state":
        assert not (tmp_path / "ckpt-2.index.json").exists()
    assert train.latest_checkpoint(str(tmp_path)) == first
    restored = DuckVariable([0.0, 0.0])
    train.Checkpoint(v=restored).restore(first).assert_consumed()
    np.testing.assert_array_equal(restored.numpy(), [1.0, 2.0])


def test_interrupted_rewrite_of_same_prefix_keeps_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = np.array([1.0])
    ckpt = train.Checkpoint(a=a)
    path = ckpt.write(str(tmp_path / "same"))
    a[0] = 2.0
    real_replace = os.replace

    def replace(src: str, dst: str) -> None:
        if str(dst).endswith(".index.json"):
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        ckpt.write(path)
    monkeypatch.undo()
    ckpt.restore(path)
    assert a[0] == 1.0  # the index still names the old data file, which was not touched
    a[0] = 3.0
    ckpt.write(path)  # a completed rewrite removes the data file it replaced and the orphan
    assert len(_format.data_files(path)) == 1
    a[0] = 0.0
    ckpt.restore(path)
    assert a[0] == 3.0


# -- multi-worker rules, with a stand-in strategy -------------------------------------------------


class _FakeCommunicator:
    def __init__(self, others_failed: int = 0) -> None:
        self.calls = 0
        self.others_failed = others_failed

    def min_max(self, value: int, purpose: str) -> tuple[int, int]:
        assert purpose == "checkpoint written"
        self.calls += 1
        return min(value, self.others_failed), max(value, self.others_failed)


def _fake_strategy(chief: bool, task_id: int, communicator: Any = None) -> Any:
    extended = types.SimpleNamespace(should_checkpoint=chief, communicator=communicator)
    resolver = types.SimpleNamespace(task_id=task_id)
    return types.SimpleNamespace(extended=extended, cluster_resolver=resolver)


def test_non_chief_writes_to_worker_temp_dir_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    communicator = _FakeCommunicator()
    strategy = _fake_strategy(False, 3, communicator)
    monkeypatch.setattr(checkpoint_module, "strategy_for", lambda objects: strategy)
    seen: list[str] = []
    real_write = _format.write_checkpoint

    def spy(prefix: str, *args: Any) -> None:
        seen.append(prefix)
        real_write(prefix, *args)

    monkeypatch.setattr(_format, "write_checkpoint", spy)
    ckpt = train.Checkpoint(v=DuckVariable(1.0))
    manager = train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=1)
    assert manager.save() == str(tmp_path / "ckpt-1")  # the chief's path, on every worker
    assert manager.latest_checkpoint == str(tmp_path / "ckpt-1")
    assert seen == [str(tmp_path / "workertemp_3" / "ckpt-1")]
    assert _files(tmp_path) == []  # nothing in the real directory, temp dir removed
    assert communicator.calls == 1
    communicator.others_failed = 1  # the chief failed: every worker raises
    with pytest.raises(errors.UnknownError, match="failed on another worker"):
        ckpt.save(str(tmp_path / "x"))


# -- CheckpointManager ---------------------------------------------------------------------------


def test_manager_max_to_keep_and_state_file(tmp_path: Path) -> None:
    var = DuckVariable(0.0)
    manager = train.CheckpointManager(train.Checkpoint(v=var), str(tmp_path), max_to_keep=2)
    assert (manager.latest_checkpoint, manager.checkpoints) == (None, [])
    assert manager.directory == str(tmp_path)
    paths = [manager.save() for _ in range(4)]
    assert paths == [str(tmp_path / f"ckpt-{i}") for i in range(1, 5)]
    assert manager.checkpoints == paths[2:] and manager.latest_checkpoint == paths[3]
    assert [n for n in _files(tmp_path) if n.endswith(".index.json")] == [
        "ckpt-3.index.json",
        "ckpt-4.index.json",
    ]
    assert len([n for n in _files(tmp_path) if n.endswith(".npz")]) == 2
    lines = (tmp_path / "checkpoint").read_text().splitlines()
    assert lines[:3] == [
        'model_checkpoint_path: "ckpt-4"',
        'all_model_checkpoint_paths: "ckpt-3"',
        'all_model_checkpoint_paths: "ckpt-4"',
    ]
    assert [line.split(":")[0] for line in lines[3:]] == [
        "all_model_checkpoint_timestamps",
        "all_model_checkpoint_timestamps",
        "last_preserved_timestamp",
    ]
    # An explicit number; save_counter still counts (TF: ckpt-10 then ckpt-6).
    assert manager.save(checkpoint_number=10) == str(tmp_path / "ckpt-10")
    assert manager.save() == str(tmp_path / "ckpt-6")
    assert manager.checkpoints == [str(tmp_path / "ckpt-10"), str(tmp_path / "ckpt-6")]
    # A new manager picks the list up from the state file.
    again = train.CheckpointManager(train.Checkpoint(v=DuckVariable(0.0)), str(tmp_path), 3)
    assert again.checkpoints == manager.checkpoints
    assert again.latest_checkpoint == str(tmp_path / "ckpt-6")


def test_manager_keep_all_and_argument_errors(tmp_path: Path) -> None:
    ckpt = train.Checkpoint(v=DuckVariable(0.0))
    manager = train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=None)
    for _ in range(3):
        manager.save()
    assert len(manager.checkpoints) == 3
    for bad in (0, -1):
        with pytest.raises(
            ValueError, match=f"positive integer or `None` for `max_to_keep`, got {bad}"
        ):
            train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=bad)
    with pytest.raises(ValueError, match="`step_counter` should be passed"):
        train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=1, checkpoint_interval=5)


def test_manager_checkpoint_interval(tmp_path: Path) -> None:
    step = DuckVariable(np.int64(0))
    ckpt = train.Checkpoint(step=step)
    manager = train.CheckpointManager(
        ckpt, str(tmp_path), max_to_keep=5, step_counter=step, checkpoint_interval=2
    )
    saved = []
    for i in range(6):
        step.assign(i)
        saved.append(manager.save())
    names = [None if p is None else os.path.basename(p) for p in saved]
    assert names == ["ckpt-1", None, "ckpt-2", None, "ckpt-3", None]
    assert manager.save(check_interval=False) == str(tmp_path / "ckpt-4")


def test_restore_or_initialize_and_checkpoint_name(tmp_path: Path) -> None:
    called: list[int] = []
    var = DuckVariable(1.0)
    manager = train.CheckpointManager(
        train.Checkpoint(v=var),
        str(tmp_path),
        1,
        checkpoint_name="model",
        init_fn=lambda: called.append(1),
    )
    assert manager.restore_or_initialize() is None and called == [1]
    assert manager.save() == str(tmp_path / "model-1")
    assert train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model-1")
    other = DuckVariable(0.0)
    second = train.CheckpointManager(
        train.Checkpoint(v=other), str(tmp_path), 1, init_fn=lambda: called.append(2)
    )
    assert second.restore_or_initialize() == str(tmp_path / "model-1")
    assert called == [1] and other.numpy() == 1.0


def test_keep_checkpoint_every_n_hours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr("mwms_mpi.train.checkpoint_management.time.time", lambda: clock[0])
    manager = train.CheckpointManager(
        train.Checkpoint(v=np.zeros(1)), str(tmp_path), 1, keep_checkpoint_every_n_hours=1.0
    )
    for step in range(3):
        clock[0] = 1000.0 + 3600.0 * step + 1.0
        manager.save()
    # ckpt-1 came less than an hour after the manager started: deleted. ckpt-2 came an hour
    # after that: preserved, out of the list but on disk (TF's _sweep).
    assert manager.checkpoints == [str(tmp_path / "ckpt-3")]
    indexes = [n for n in _files(tmp_path) if n.endswith(".index.json")]
    assert indexes == ["ckpt-2.index.json", "ckpt-3.index.json"]
    assert "last_preserved_timestamp: 4601.0" in (tmp_path / "checkpoint").read_text()


def test_latest_checkpoint_needs_a_complete_index(tmp_path: Path) -> None:
    path = train.Checkpoint(v=np.zeros(1)).save(str(tmp_path / "ckpt"))
    os.remove(path + ".index.json")
    assert train.latest_checkpoint(str(tmp_path)) is None  # as TF when the files are gone


def test_reads_a_state_file_written_by_tensorflow(tmp_path: Path) -> None:
    train.Checkpoint(v=np.zeros(1)).write(str(tmp_path / "ckpt-4"))
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-4"\nall_model_checkpoint_paths: "ckpt-3"\n'
        'all_model_checkpoint_paths: "ckpt-4"\nall_model_checkpoint_timestamps: 1795374864.98\n'
        "all_model_checkpoint_timestamps: 1795374865.0\nlast_preserved_timestamp: 1795374863.9\n"
    )
    assert train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "ckpt-4")
    manager = train.CheckpointManager(train.Checkpoint(v=np.zeros(1)), str(tmp_path), 5)
    assert manager.checkpoints == [str(tmp_path / "ckpt-3"), str(tmp_path / "ckpt-4")]


def test_state_file_quotes_odd_paths(tmp_path: Path) -> None:
    odd = str(tmp_path / 'a "b"\\é')
    _state.write_state(str(tmp_path), _state.CheckpointState(odd, [odd]))
    text = (tmp_path / "checkpoint").read_text()
    assert text.isascii() and str(tmp_path) not in text  # stored relative to the directory
    read = _state.read_state(str(tmp_path))
    assert read is not None and read.model_checkpoint_path == odd


def test_manager_failed_save_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = train.CheckpointManager(train.Checkpoint(v=np.zeros(1)), str(tmp_path), 1)
    first = manager.save()

    def fail(*args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(_format, "write_checkpoint", fail)
    with pytest.raises(OSError, match="disk full"):
        manager.save()
    monkeypatch.undo()
    assert manager.checkpoints == [first] and manager.latest_checkpoint == first
    assert train.latest_checkpoint(str(tmp_path)) == first


def _keys(path: str) -> list[str]:
    return sorted(_format.read_checkpoint(path).arrays)


def test_save_counter_exists_once_saved_restored_or_read_as_tf(tmp_path: Path) -> None:
    # TF creates save_counter lazily: by save(), restore() or reading the property. A write()
    # of a Checkpoint that has none holds no counter (TF 2.21: only 'v'), and restoring that
    # into a Checkpoint that saved three times kept its counter: before, it became 0, and the
    # next save overwrote a-1.
    export = train.Checkpoint(v=DuckVariable(1.0)).write(str(tmp_path / "w"))
    assert _keys(export) == ["v"]
    saver = train.Checkpoint(v=DuckVariable(0.0))
    for _ in range(3):
        saver.save(str(tmp_path / "a"))
    assert "save_counter" in _keys(saver.write(str(tmp_path / "w2")))
    status = saver.restore(export)
    assert int(saver.save_counter) == 3
    assert saver.save(str(tmp_path / "a")) == str(tmp_path / "a-4")
    # TF: the counter exists and the checkpoint has none: both assertions raise
    for check in (status.assert_consumed, status.assert_existing_objects_matched):
        with pytest.raises(AssertionError):
            check()
    # TF 2.21: a fresh Checkpoint's restore() creates its counter (unmatched, so
    # assert_consumed raises); read() does not (it passes); the counter stays 0
    fresh = train.Checkpoint(v=DuckVariable(0.0))
    with pytest.raises(AssertionError):
        fresh.restore(export).assert_consumed()
    assert int(fresh.save_counter) == 0
    train.Checkpoint(v=DuckVariable(0.0)).read(export).assert_consumed()
    touched = train.Checkpoint(v=DuckVariable(0.0))
    assert int(touched.save_counter) == 0  # reading the property creates it, as TF's
    assert "save_counter" in _keys(touched.write(str(tmp_path / "w3")))


def test_manager_never_saves_twice_at_one_step(tmp_path: Path) -> None:
    # TF 2.21: with checkpoint_interval, a save at the step of the last one returns None, even
    # with check_interval=False (it saved again: ckpt-2, save_counter 2)
    step = DuckVariable(np.int64(3))
    ckpt = train.Checkpoint(step=step)
    manager = train.CheckpointManager(
        ckpt, str(tmp_path), max_to_keep=5, step_counter=step, checkpoint_interval=2
    )
    assert manager.save() == str(tmp_path / "ckpt-1")
    assert manager.save(check_interval=False) is None
    assert int(ckpt.save_counter) == 1


def test_a_manager_adopts_only_the_checkpoints_a_manager_kept(tmp_path: Path) -> None:
    # TF 2.21: a state file without timestamps (Checkpoint.save's) gives the manager no
    # checkpoints to manage, so it never deletes them (it deleted ckpt-1 here: max_to_keep=1)
    ckpt = train.Checkpoint(v=DuckVariable(0.0))
    first = ckpt.save(str(tmp_path / "ckpt"))
    manager = train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=1)
    assert manager.checkpoints == []
    assert manager.latest_checkpoint == first
    manager.save()
    manager.save()
    assert manager.checkpoints == [str(tmp_path / "ckpt-3")]
    assert os.path.exists(first + ".index.json")
    assert not os.path.exists(str(tmp_path / "ckpt-2.index.json"))
    # a manager's own state file: its checkpoints are adopted, as before
    again = train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=1)
    assert again.checkpoints == [str(tmp_path / "ckpt-3")]


def test_dict_keys_that_are_not_strings_are_refused_as_tf(tmp_path: Path) -> None:
    # TF 2.21 refuses to save (or restore) a dict with a non-string key that maps to a
    # trackable. They were saved as str(key): {1: a, "1": b} gave both b's value on restore.
    message = (
        r"Unable to save the object \{1: .*\} \(a dictionary wrapper constructed automatically "
        r"on attribute assignment\)\. The wrapped dictionary contains a non-string key which "
        r"maps to a trackable object or mutable data structure\."
    )
    for d in ({1: DuckVariable(1.0), "1": DuckVariable(2.0)}, {1: np.ones(2)}, {1: []}):
        with pytest.raises(ValueError, match=message):
            train.Checkpoint(d=d).save(str(tmp_path / "a"))
    path = train.Checkpoint(d={"1": DuckVariable(2.0), 2: "not trackable"}).write(
        str(tmp_path / "b")
    )
    with pytest.raises(ValueError, match="non-string key"):
        train.Checkpoint(d={1: DuckVariable(0.0), "1": DuckVariable(0.0)}).read(path)


def test_a_keyword_argument_named_as_a_child_of_root_is_refused_as_tf() -> None:
    # TF 2.21: ValueError "Cannot create a Checkpoint with keyword argument x if root.x already
    # exists." (root.x was then silently not saved); the same object under both names is fine
    root = types.SimpleNamespace(x=DuckVariable(1.0), y=[1])
    for name in ("x", "y"):
        with pytest.raises(
            ValueError,
            match=f"^Cannot create a Checkpoint with keyword argument {name} if root.{name} "
            "already exists.$",
        ):
            train.Checkpoint(root=root, **{name: DuckVariable(2.0)})
    train.Checkpoint(root=root, x=root.x, z=DuckVariable(3.0))
    root.n = 3  # not trackable: not a child of root, so the name is free (TF)
    train.Checkpoint(root=root, n=DuckVariable(3.0))


def test_small_manager_and_read_rules_as_tf(tmp_path: Path) -> None:
    # TF 2.21: read(None) is an InitializationOnlyStatus, as restore(None)
    status = train.Checkpoint(v=DuckVariable(0.0)).read(None)
    assert type(status).__name__ == "InitializationOnlyStatus"
    # TF: max_to_keep is compared, not type-checked (2.0 keeps two)
    ckpt = train.Checkpoint(v=DuckVariable(0.0))
    manager = train.CheckpointManager(ckpt, str(tmp_path / "f"), max_to_keep=2.0)
    for _ in range(3):
        manager.save()
    assert [os.path.basename(p) for p in manager.checkpoints] == ["ckpt-2", "ckpt-3"]
    # TF: keep_checkpoint_every_n_hours=0 is off (falsy): swept checkpoints are deleted
    manager = train.CheckpointManager(
        ckpt, str(tmp_path / "h"), max_to_keep=1, keep_checkpoint_every_n_hours=0
    )
    for _ in range(3):
        manager.save()
    assert sorted(p.name for p in (tmp_path / "h").glob("*.index.json")) == ["ckpt-6.index.json"]


def test_one_object_under_two_names_takes_the_first_names_value_as_tf(tmp_path: Path) -> None:
    # TF 2.21: Checkpoint(a=w, b=w) restoring a checkpoint whose a and b differ: w = 1.0 (the
    # first path's); it took the last one's (2.0)
    path = train.Checkpoint(a=DuckVariable(1.0), b=DuckVariable(2.0)).save(str(tmp_path / "c"))
    shared = DuckVariable(0.0)
    train.Checkpoint(a=shared, b=shared).restore(path).assert_consumed()
    assert float(shared.value) == 1.0

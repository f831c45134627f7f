"""No file named inside a checkpoint reaches outside its directory; corrupt metadata is reported.

Checkpoint directories are shared between people on clusters, so an index or a state file is
untrusted input: each case below plants one (``..``, an absolute path, a symlink out) and checks
the error and that nothing outside the directory was read, changed or deleted. Corrupt metadata
follows TF 2.21: a corrupt index is ``DataLossError`` naming the file; a state file that cannot
be parsed is logged and ignored ("Checkpoint ignored"), as TF's ``get_checkpoint_state`` does.
"""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import types
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mwms_mpi import errors, train
from mwms_mpi.train import _format, _state
from mwms_mpi.train import checkpoint as checkpoint_module

VICTIM = b"precious data\n"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """``tmp_path/ckpts`` (the checkpoint directory) and ``tmp_path/victim.txt`` beside it."""
    directory = tmp_path / "ckpts"
    directory.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    return directory, victim


def _save_one(directory: Path) -> str:
    return train.Checkpoint(v=np.arange(3.0)).save(str(directory / "ckpt"))


def _edit_index(prefix: str, **changes: object) -> None:
    path = Path(prefix + ".index.json")
    index = json.loads(path.read_text())
    index.update(changes)
    path.write_text(json.dumps(index))


def _restore(prefix: str) -> np.ndarray:
    target = np.zeros(3)
    train.Checkpoint(v=target).restore(prefix)
    return target


# -- an index naming a file outside ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "subdir"])
def test_index_naming_another_file_is_data_loss_and_save_leaves_it(
    layout: tuple[Path, Path], kind: str
) -> None:
    directory, victim = layout
    prefix = _save_one(directory)
    name = {"dotdot": "../victim.txt", "absolute": str(victim), "subdir": "x/ckpt-1.data-0.npz"}
    _edit_index(prefix, data_file=name[kind], data_bytes=len(VICTIM))
    with pytest.raises(errors.DataLossError, match="not a data file of this checkpoint") as info:
        _restore(prefix)
    assert str(Path(prefix + ".index.json")) in str(info.value)
    train.Checkpoint(v=np.ones(3)).write(prefix)  # a new save of the same prefix
    assert victim.read_bytes() == VICTIM
    np.testing.assert_array_equal(_restore(prefix), np.ones(3))


def test_data_file_symlinked_outside_is_data_loss_and_save_removes_only_the_link(
    layout: tuple[Path, Path],
) -> None:
    directory, victim = layout
    prefix = _save_one(directory)
    link = directory / "ckpt-1.data-0123abcd.npz"
    link.symlink_to(victim)
    _edit_index(prefix, data_file=link.name, data_bytes=len(VICTIM))
    with pytest.raises(errors.DataLossError, match="resolves to a file outside"):
        _restore(prefix)
    train.Checkpoint(v=np.ones(3)).write(prefix)
    assert not link.is_symlink()  # swept as a data file of the prefix: the link, not its target
    assert victim.read_bytes() == VICTIM


def test_index_symlinked_outside_is_data_loss_and_not_read(layout: tuple[Path, Path]) -> None:
    directory, victim = layout
    prefix = _save_one(directory)
    index = Path(prefix + ".index.json")
    outside = victim.with_name("outside.index.json")
    outside.write_bytes(index.read_bytes())  # a valid index, but outside the directory
    index.unlink()
    index.symlink_to(outside)
    with pytest.raises(errors.DataLossError, match=r"its index .* resolves to a file outside"):
        _restore(prefix)
    train.Checkpoint(v=np.ones(3)).write(prefix)  # os.replace swaps the link, not its target
    assert not index.is_symlink() and outside.exists()


# -- a state file naming a checkpoint outside --------------------------------------------------


def _plant_outside_checkpoint(tmp_path: Path) -> tuple[str, list[Path]]:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    prefix = train.Checkpoint(v=np.arange(3.0)).write(str(elsewhere / "important"))
    return prefix, sorted(elsewhere.iterdir())


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlinked_dir"])
def test_state_naming_outside_is_ignored_and_manager_deletes_nothing_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    directory = tmp_path / "ckpts"
    directory.mkdir()
    outside, files = _plant_outside_checkpoint(tmp_path)
    if kind == "symlinked_dir":
        (directory / "sub").symlink_to(tmp_path / "elsewhere")
    named = {
        "dotdot": "../elsewhere/important",
        "absolute": outside,
        "symlinked_dir": "sub/important",
    }
    (directory / "checkpoint").write_text(
        f'model_checkpoint_path: "{named[kind]}"\nall_model_checkpoint_paths: "{named[kind]}"\n'
    )
    with caplog.at_level(logging.WARNING, logger="mwms_mpi.train._state"):
        assert train.latest_checkpoint(str(directory)) is None
        manager = train.CheckpointManager(train.Checkpoint(v=np.zeros(3)), str(directory), 1)
    assert "which is outside" in caplog.text and "Checkpoint ignored" in caplog.text
    assert manager.latest_checkpoint is None and manager.checkpoints == []
    manager.save()
    manager.save()  # max_to_keep=1: deletes ckpt-1, nothing else
    assert sorted((tmp_path / "elsewhere").iterdir()) == files
    assert manager.checkpoints == [str(directory / "ckpt-2")]
    assert train.latest_checkpoint(str(directory)) == str(directory / "ckpt-2")


def test_absolute_paths_inside_the_directory_are_accepted(tmp_path: Path) -> None:
    prefix = _save_one(tmp_path)  # TF's save_relative_paths=False writes absolute paths
    (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{prefix}"\n')
    assert train.latest_checkpoint(str(tmp_path)) == prefix


def test_remove_checkpoint_refuses_a_prefix_outside_its_directory(tmp_path: Path) -> None:
    directory = tmp_path / "ckpts"
    directory.mkdir()
    outside, files = _plant_outside_checkpoint(tmp_path)
    with pytest.raises(errors.PermissionDeniedError, match="Refusing to delete"):
        _format.remove_checkpoint(outside, str(directory))
    assert sorted((tmp_path / "elsewhere").iterdir()) == files


# -- corrupt metadata --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"[1, 2, 3]", b'"text"', b"\xff\xfe{}", b'{"format": "mwms_mpi.train.Checkpoint"}'],
    ids=["json_list", "json_string", "not_utf8", "fields_missing"],
)
def test_corrupt_index_is_data_loss_naming_it(tmp_path: Path, content: bytes) -> None:
    prefix = _save_one(tmp_path)
    index = Path(prefix + ".index.json")
    index.write_bytes(content)
    with pytest.raises(errors.DataLossError, match="incomplete or corrupt") as info:
        _restore(prefix)
    assert str(index) in str(info.value)


def test_index_with_wrong_types_is_data_loss(tmp_path: Path) -> None:
    prefix = _save_one(tmp_path)
    for change in ({"shapes": [1, 2]}, {"keys": 5}, {"crc32": None}, {"data_file": 7}):
        good = Path(prefix + ".index.json").read_text()
        _edit_index(prefix, **change)
        with pytest.raises(errors.DataLossError):
            _restore(prefix)
        Path(prefix + ".index.json").write_text(good)
    np.testing.assert_array_equal(_restore(prefix), np.arange(3.0))


@pytest.mark.parametrize(
    "content",
    [
        b'model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_timestamps: 1.2.3\n',
        b'model_checkpoint_path: "ckpt-\xff\xfe"\n',
        b'{"model_checkpoint_path": "ckpt-1"}\n',
        b'model_checkpoint_path: "ckpt-1"\nunknown_field: "x"\n',
        b'model_checkpoint_path: "\\x"\n',
        b"model_checkpoint_path: 3\n",
    ],
    ids=["bad_float", "not_utf8", "json", "unknown_field", "bad_escape", "path_not_quoted"],
)
def test_unparsable_state_is_ignored_with_a_warning_as_tf_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    _save_one(tmp_path)
    state = tmp_path / "checkpoint"
    state.write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="mwms_mpi.train._state"):
        assert train.latest_checkpoint(str(tmp_path)) is None
        manager = train.CheckpointManager(train.Checkpoint(v=np.zeros(3)), str(tmp_path), 1)
    assert f"{state}: Checkpoint ignored" in caplog.text
    assert manager.latest_checkpoint is None
    assert manager.save() == str(tmp_path / "ckpt-1")  # the state file is written anew


def test_state_without_model_checkpoint_path_raises_tfs_value_error(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").write_text('all_model_checkpoint_paths: "ckpt-1"\n')
    with pytest.raises(ValueError, match="Invalid checkpoint state loaded from"):
        train.latest_checkpoint(str(tmp_path))


def test_unreadable_state_is_ignored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "checkpoint").mkdir()  # TF: an OpError reading it; logged and ignored
    with caplog.at_level(logging.WARNING, logger="mwms_mpi.train._state"):
        assert _state.read_state(str(tmp_path)) is None
    assert "Checkpoint ignored" in caplog.text


# -- leftovers of killed saves -----------------------------------------------------------------


def test_next_save_of_a_prefix_sweeps_what_killed_saves_left(tmp_path: Path) -> None:
    manager = train.CheckpointManager(train.Checkpoint(v=np.arange(3.0)), str(tmp_path), 3)
    manager.save()
    # What SIGKILLs at each stage of saving ckpt-2 (and a state write, and a worker) leave:
    leftovers = [
        ".ckpt-2.data-0a1b2c3d.npz.tmp4242-deadbeef",
        "ckpt-2.data-99999999.npz",
        ".ckpt-2.index.json.tmp4242-00ff00ff",
        ".checkpoint.tmp4242-12345678",
    ]
    for name in leftovers:
        (tmp_path / name).write_bytes(b"x" * 1000)
    (tmp_path / "workertemp_3").mkdir()
    (tmp_path / "workertemp_3" / "ckpt-2.data-1.npz").write_bytes(b"x")
    unrelated = ["ckpt-20.data-0a0a0a0a.npz", ".ckpt-3.index.json.tmp1-aa", "notes.txt"]
    for name in unrelated:
        (tmp_path / name).write_bytes(b"keep")
    manager.save()  # ckpt-2 again
    names = sorted(p.name for p in tmp_path.iterdir())
    assert not set(leftovers) & set(names)
    assert "workertemp_3" not in names  # no worker of this (one-worker) cluster writes there
    assert set(unrelated) <= set(names)
    assert len(_format.data_files(str(tmp_path / "ckpt-2"))) == 1
    np.testing.assert_array_equal(_restore(str(tmp_path / "ckpt-2")), np.arange(3.0))


def test_deleting_old_checkpoints_removes_their_leftovers_too(tmp_path: Path) -> None:
    manager = train.CheckpointManager(train.Checkpoint(v=np.arange(3.0)), str(tmp_path), 1)
    manager.save()
    (tmp_path / ".ckpt-1.data-0a1b2c3d.npz.tmp7-deadbeef").write_bytes(b"x")
    manager.save()
    assert sorted(p.name for p in tmp_path.iterdir() if "ckpt-1" in p.name) == []


# -- a non-chief worker's workertemp_<id> directory --------------------------------------------


def _as_non_chief(monkeypatch: pytest.MonkeyPatch, task_id: int = 3) -> None:
    """Makes every Checkpoint save as worker ``task_id``, not the chief (no communicator)."""
    extended = types.SimpleNamespace(should_checkpoint=False, communicator=None)
    resolver = types.SimpleNamespace(task_id=task_id)
    strategy = types.SimpleNamespace(extended=extended, cluster_resolver=resolver)
    monkeypatch.setattr(checkpoint_module, "strategy_for", lambda objects: strategy)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _shared_and_outside(tmp_path: Path) -> tuple[Path, Path]:
    """A checkpoint directory, and a directory beside it holding another person's file."""
    directory = tmp_path / "ckpts"
    directory.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_bytes(VICTIM)
    return directory, outside


@pytest.mark.parametrize("kind", ["symlink_outside", "symlink_inside", "file", "foreign_owner"])
def test_non_chief_refuses_a_planted_workertemp_and_touches_nothing_through_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    directory, outside = _shared_and_outside(tmp_path)
    # What a write through the link would overwrite (the index) or sweep (data files).
    (outside / "ckpt-1.index.json").write_bytes(VICTIM)
    (outside / "ckpt-1.data-0123abcd.npz").write_bytes(VICTIM)
    before = _snapshot(outside)
    planted = directory / "workertemp_3"
    if kind == "symlink_outside":
        planted.symlink_to(outside)
    elif kind == "symlink_inside":  # even a link to a directory inside is not the worker's own
        (directory / "other").mkdir()
        planted.symlink_to(directory / "other")
    elif kind == "file":
        planted.write_bytes(VICTIM)
    else:
        if os.getuid() != 0:
            pytest.skip("only root can give a directory to another user")
        planted.mkdir()
        os.chown(planted, 4242, -1)
    _as_non_chief(monkeypatch)
    manager = train.CheckpointManager(train.Checkpoint(v=np.arange(3.0)), str(directory), 1)
    with pytest.raises(errors.PermissionDeniedError, match="Refusing to write") as info:
        manager.save()
    assert str(planted) in str(info.value)
    assert "Nothing was written or deleted through it" in str(info.value)
    expected = {
        "symlink_outside": "symbolic link",
        "symlink_inside": "symbolic link",
        "file": "not a directory",
        "foreign_owner": "belongs to user id 4242",
    }
    assert expected[kind] in str(info.value)
    assert _snapshot(outside) == before  # nothing written, overwritten or deleted outside
    assert os.path.lexists(planted)  # the evidence is left for the user to see
    if kind == "symlink_inside":
        assert list((directory / "other").iterdir()) == []


def test_non_chief_reuses_its_own_leftover_workertemp_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leftover = tmp_path / "workertemp_3"  # what a killed save of this worker left
    leftover.mkdir()
    (leftover / "ckpt-1.data-0a0a0a0a.npz").write_bytes(b"x")
    _as_non_chief(monkeypatch)
    assert train.Checkpoint(v=np.arange(3.0)).save(str(tmp_path / "ckpt")) == str(
        tmp_path / "ckpt-1"
    )
    assert list(tmp_path.iterdir()) == []


def test_non_chief_leaves_a_workertemp_swapped_for_a_link_during_its_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    directory, outside = _shared_and_outside(tmp_path)
    real_write = _format.write_checkpoint

    def write_then_swap(prefix: str, *args: Any) -> None:
        real_write(prefix, *args)
        moved = directory / "moved"
        os.rename(os.path.dirname(prefix), moved)  # the swap an attacker could race in
        (directory / "workertemp_3").symlink_to(outside)

    monkeypatch.setattr(_format, "write_checkpoint", write_then_swap)
    _as_non_chief(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="mwms_mpi.train._worker_dirs"):
        train.Checkpoint(v=np.arange(3.0)).save(str(directory / "ckpt"))
    assert "Not removing" in caplog.text and "symbolic link" in caplog.text
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]
    assert (outside / "victim.txt").read_bytes() == VICTIM


# -- corrupt metadata of every kind ------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"data_bytes": 1e400},
        {"save_counter": 1e400},
        {"shapes": {"v": [1e400]}},
        {"crc32": {"v": float("nan")}},
        {"dtypes": {"v": [["a", "f8", [10**30]]]}},
    ],
    ids=["data_bytes_inf", "save_counter_inf", "shape_inf", "crc_nan", "dtype_garbage"],
)
def test_index_numbers_out_of_range_are_data_loss(tmp_path: Path, change: dict[str, Any]) -> None:
    prefix = _save_one(tmp_path)
    path = Path(prefix + ".index.json")
    index = json.loads(path.read_text())
    index.update(change)
    path.write_text(json.dumps(index).replace("Infinity", "1e400"))  # as found: a float
    with pytest.raises(errors.DataLossError, match="incomplete or corrupt") as info:
        _restore(prefix)
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, (OverflowError, ValueError, TypeError))


def test_index_nested_too_deep_is_data_loss(tmp_path: Path) -> None:
    prefix = _save_one(tmp_path)
    path = Path(prefix + ".index.json")
    path.write_text("[" * 100_000)
    with pytest.raises(errors.DataLossError, match="incomplete or corrupt") as info:
        _restore(prefix)
    assert str(path) in str(info.value)
    assert isinstance(info.value.__cause__, RecursionError)


def _replace_data(prefix: str, members: dict[str, bytes], patch: Callable[[bytes], bytes]) -> Path:
    """Rewrites ``prefix``'s data file as a zip of ``members``, bytes then passed through
    ``patch``, and fixes the index's size and CRCs so that only the data file is wrong."""
    index_file = Path(prefix + ".index.json")
    index = json.loads(index_file.read_text())
    data = index_file.parent / index["data_file"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
        crcs = {info.filename.removesuffix(".npy"): info.CRC for info in archive.infolist()}
    data.write_bytes(patch(buffer.getvalue()))
    index["data_bytes"] = data.stat().st_size
    index["crc32"].update(crcs)
    index_file.write_text(json.dumps(index))
    return data


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _method(method: int, flags: int = 0) -> Callable[[bytes], bytes]:
    """Sets every member's compression method (and flags) in the local and central headers."""

    def patch(raw: bytes) -> bytes:
        out = bytearray(raw)
        for signature, at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            start = out.find(signature)
            while start >= 0:
                struct.pack_into("<HH", out, start + at, flags, method)
                start = out.find(signature, start + 4)
        return bytes(out)

    return patch


@pytest.mark.parametrize(
    "case",
    [
        "method_99",
        "deflate_garbage",
        "encrypted",
        "member_missing",
        "not_npy",
        "npy_truncated",
        "npy_other_shape",
        "npy_huge_shape",
        "not_a_zip",
    ],
)
def test_corrupt_data_file_of_every_kind_is_data_loss(tmp_path: Path, case: str) -> None:
    prefix = _save_one(tmp_path)
    good = _npy(np.arange(3.0))
    keep = _npy(np.array(1, dtype=np.int64))  # save_counter
    members: dict[str, bytes] = {"v.npy": good, "save_counter.npy": keep}
    patch: Callable[[bytes], bytes] = bytes
    if case == "method_99":  # zipfile: NotImplementedError
        patch = _method(99)
    elif case == "deflate_garbage":  # stored bytes read as a deflate stream: zlib.error
        patch = _method(zipfile.ZIP_DEFLATED)
    elif case == "encrypted":  # zipfile: RuntimeError, a password is required
        patch = _method(zipfile.ZIP_STORED, flags=0x1)
    elif case == "member_missing":  # zipfile: KeyError
        del members["v.npy"]
    elif case == "not_npy":  # numpy: ValueError
        members["v.npy"] = b"garbage!" * 10
    elif case == "npy_truncated":  # numpy: ValueError (EOF)
        members["v.npy"] = good[:-5]
    elif case == "npy_other_shape":
        members["v.npy"] = _npy(np.arange(4.0))
    elif case == "npy_huge_shape":  # an 8 TB array declared in 100 bytes: MemoryError unchecked
        header = io.BytesIO()
        declared = {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
        np.lib.format.write_array_header_1_0(header, declared)
        members["v.npy"] = header.getvalue() + bytes(24)
    data = _replace_data(prefix, members, patch)
    if case == "npy_huge_shape":
        _edit_index(prefix, shapes={"v": [10**12], "save_counter": []})
    if case == "not_a_zip":
        data.write_bytes(b"\0" * data.stat().st_size)
    with pytest.raises(errors.DataLossError, match="is corrupt") as info:
        _restore(prefix)
    assert str(data) in str(info.value)
    assert info.value.__cause__ is not None  # raised from the original error


@pytest.mark.timeout(20)
@pytest.mark.parametrize("which", ["index", "data"])
def test_a_fifo_in_place_of_a_file_is_data_loss_not_a_hang(tmp_path: Path, which: str) -> None:
    prefix = _save_one(tmp_path)
    index = Path(prefix + ".index.json")
    path = index if which == "index" else tmp_path / json.loads(index.read_text())["data_file"]
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(errors.DataLossError, match="not a regular file") as info:
        _restore(prefix)
    assert str(path) in str(info.value)


def test_a_forged_zip64_member_size_is_data_loss_not_memory_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23, item 11: a member whose zip64 sizes claim 8 TB, matching an index and a
    ``.npy`` header that declare an 8 TB array, made restoring raise ``MemoryError``."""
    prefix = _save_one(tmp_path)
    header = io.BytesIO()
    declared = {"descr": "<f8", "fortran_order": False, "shape": (2**40,)}
    np.lib.format.write_array_header_1_0(header, declared)
    members = {"v.npy": header.getvalue() + bytes(24), "save_counter.npy": _npy(np.int64(1))}
    forged = 2**43  # bytes: exactly what 2**40 float64 values need

    def zip64_sizes(raw: bytes) -> bytes:
        """Sets the sizes in v.npy's central-directory zip64 extra field to ``forged``."""
        out = bytearray(raw)
        entry = out.find(b"PK\x01\x02")
        while entry >= 0:
            name_length, extra_length = struct.unpack_from("<HH", out, entry + 28)
            name = bytes(out[entry + 46 : entry + 46 + name_length])
            extra = entry + 46 + name_length
            if name == b"v.npy":
                tag, size = struct.unpack_from("<HH", out, extra)
                assert (tag, extra_length) == (1, size + 4)  # one zip64 field: the sizes
                struct.pack_into("<QQ", out, extra + 4, forged, forged)
            entry = out.find(b"PK\x01\x02", entry + 4)
        return bytes(out)

    # zipfile writes zip64 sizes in the central directory only above ZIP64_LIMIT
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 1)
    data = _replace_data(prefix, members, zip64_sizes)
    monkeypatch.undo()
    _edit_index(prefix, shapes={"v": [2**40], "save_counter": []})
    with zipfile.ZipFile(data) as archive:
        assert archive.getinfo("v.npy").file_size == forged  # the forgery reads back
    with pytest.raises(errors.DataLossError, match="is corrupt") as info:
        _restore(prefix)
    assert "v.npy" in str(info.value) or "'v'" in str(info.value)
    assert str(data) in str(info.value)

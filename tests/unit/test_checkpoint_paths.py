"""Every path a checkpoint writes stays inside its directory; ``sub/ckpt`` stays legal.

Issue 23, item 8: ``CheckpointManager(..., checkpoint_name="../other/ckpt")`` wrote outside the
directory and replaced the neighbouring directory's files (deleting was refused, writing was
not). TF 2.21 itself (``checkpoint_name_escape.py``, run outside this repository) writes there:
``save()`` returned ``<dir>/mine/../other/ckpt-1``, ``other`` got ``ckpt-1.index`` and
``ckpt-1.data-00000-of-00001``, and ``mine/checkpoint`` named ``"../other/ckpt-1"``; with
``checkpoint_name="sub/ckpt"`` it wrote ``<dir>/sub/ckpt-2.*`` and recorded ``"sub/ckpt-2"``.
Here the first is refused with ``ValueError`` before anything is written; the second works.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from mwms_mpi import train
from mwms_mpi.train import _state


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def neighbours(tmp_path: Path) -> tuple[Path, Path]:
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    (other / "ckpt-1.index.json").write_text("the neighbour's index")
    (other / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    return mine, other


@pytest.mark.parametrize("name", ["../other/ckpt", "sub/../../other/ckpt", "/abs/ckpt", "../ckpt"])
def test_a_checkpoint_name_leaving_the_directory_is_refused_before_writing(
    tmp_path: Path, neighbours: tuple[Path, Path], name: str
) -> None:
    mine, other = neighbours
    if name == "/abs/ckpt":
        name = str(other / "ckpt")
    before = _tree(tmp_path)
    ckpt = train.Checkpoint(v=np.ones(2))
    with pytest.raises(ValueError, match="not inside the checkpoint directory"):
        train.CheckpointManager(ckpt, str(mine), max_to_keep=1, checkpoint_name=name)
    assert _tree(tmp_path) == before


def test_a_symlink_made_after_the_manager_is_refused_at_save(
    tmp_path: Path, neighbours: tuple[Path, Path]
) -> None:
    mine, other = neighbours
    manager = train.CheckpointManager(
        train.Checkpoint(v=np.ones(2)), str(mine), max_to_keep=1, checkpoint_name="sub/ckpt"
    )
    os.symlink(other, mine / "sub")
    before = _tree(tmp_path)
    with pytest.raises(ValueError, match="not inside the checkpoint directory"):
        manager.save()
    assert _tree(tmp_path) == before
    assert manager.checkpoints == [] and manager.latest_checkpoint is None


def test_a_subdirectory_name_is_legal_and_recorded_relative(tmp_path: Path) -> None:
    directory = tmp_path / "ckpts"
    value = np.arange(3.0)
    manager = train.CheckpointManager(
        train.Checkpoint(v=value), str(directory), max_to_keep=1, checkpoint_name="sub/ckpt"
    )
    first = manager.save()
    second = manager.save()
    assert (first, second) == (str(directory / "sub" / "ckpt-1"), str(directory / "sub" / "ckpt-2"))
    # as TF: the state file is in the manager's directory, naming "sub/ckpt-2"
    lines = (directory / "checkpoint").read_text().splitlines()
    assert lines[:2] == [
        'model_checkpoint_path: "sub/ckpt-2"',
        'all_model_checkpoint_paths: "sub/ckpt-2"',
    ]
    assert not list((directory / "sub").glob("ckpt-1.*"))  # max_to_keep=1 deleted it
    assert train.latest_checkpoint(str(directory)) == second
    target = np.zeros(3)
    train.CheckpointManager(
        train.Checkpoint(v=target), str(directory), max_to_keep=1
    ).restore_or_initialize()
    np.testing.assert_array_equal(target, value)


def test_state_paths_in_a_subdirectory_of_a_relative_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpts").mkdir()
    state = _state.CheckpointState("ckpts/sub/ckpt-1", ["ckpts/sub/ckpt-1"])
    _state.write_state("ckpts", state)
    assert 'model_checkpoint_path: "sub/ckpt-1"' in (tmp_path / "ckpts" / "checkpoint").read_text()
    read = _state.read_state("ckpts")
    assert read is not None and read.model_checkpoint_path == os.path.join("ckpts", "sub/ckpt-1")


def test_checkpoint_save_refuses_a_prefix_that_is_a_directory_name(tmp_path: Path) -> None:
    ckpt = train.Checkpoint(v=np.ones(1))
    for prefix in (str(tmp_path) + "/", str(tmp_path / "..")):
        with pytest.raises(ValueError, match="not inside the checkpoint directory"):
            ckpt.write(prefix)

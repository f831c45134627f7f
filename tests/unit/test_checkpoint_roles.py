"""Outside any strategy, who writes follows the launch rank, read without MPI or a collective.

Issue 23, item 7 (the multi-rank program itself runs in ``tests/mpi/test_checkpoint_mpi.py``):
a numpy-only script under ``mpiexec`` may never start MPI, so the launcher's variables say
which rank this is. Here they are set by hand, in a process whose MPI (if any) is not consulted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mwms_mpi import _mpi, train
from mwms_mpi.train import _lock, _roles

LAUNCHERS = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK")
LAUNCHERS_TOO = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_JOB_ID", "PMIX_NAMESPACE")


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No MPI, no launcher variables: each test sets the ones it needs."""
    monkeypatch.setattr(_mpi, "is_initialized", lambda: False)
    for name in (*LAUNCHERS, *LAUNCHERS_TOO):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name != _lock.LOCK_NAME)


def test_rank_1_of_2_writes_its_worker_copy_and_removes_it(
    tmp_path: Path, launched: pytest.MonkeyPatch
) -> None:
    launched.setenv("PMI_RANK", "1")
    launched.setenv("PMI_SIZE", "2")
    role = _roles.role_for(_roles.strategy_for({}))
    assert (role.chief, role.task_id, role.communicator) == (False, 1, None)
    manager = train.CheckpointManager(train.Checkpoint(v=np.ones(2)), str(tmp_path), 2)
    assert manager.save() == str(tmp_path / "ckpt-1")  # rank 0's path
    assert manager.checkpoints == [str(tmp_path / "ckpt-1")]
    assert list(tmp_path.iterdir()) == []  # no files, no lock: rank 0 writes those


def test_rank_0_of_2_writes_and_sweeps_only_stale_worker_copies(
    tmp_path: Path, launched: pytest.MonkeyPatch
) -> None:
    launched.setenv("OMPI_COMM_WORLD_RANK", "0")
    launched.setenv("OMPI_COMM_WORLD_SIZE", "2")
    (tmp_path / "workertemp_1").mkdir()  # rank 1 may be writing there now
    (tmp_path / "workertemp_5").mkdir()  # left by a killed run of 6 ranks
    path = train.Checkpoint(v=np.ones(2)).save(str(tmp_path / "ckpt"))
    assert path == str(tmp_path / "ckpt-1")
    assert [n for n in _names(tmp_path) if not n.startswith("ckpt-1.data-")] == [
        "checkpoint",
        "ckpt-1.index.json",
        "workertemp_1",
    ]
    assert (tmp_path / _lock.LOCK_NAME).exists()


def test_a_launcher_without_a_size_sweeps_no_worker_copy(
    tmp_path: Path, launched: pytest.MonkeyPatch
) -> None:
    launched.setenv("PMIX_RANK", "0")
    (tmp_path / "workertemp_1").mkdir()
    train.Checkpoint(v=np.ones(2)).save(str(tmp_path / "ckpt"))
    assert "workertemp_1" in _names(tmp_path)


def test_a_single_process_is_the_chief(tmp_path: Path, launched: pytest.MonkeyPatch) -> None:
    assert _roles.launch_rank() == (0, 1)
    role = _roles.role_for(_roles.strategy_for({}))
    assert role.chief and role.communicator is None

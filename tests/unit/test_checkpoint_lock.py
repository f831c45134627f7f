"""The checkpoint directory lock: who holds it, when it is taken over, and who never takes it.

Each case plants the lock of "another job" (a record and a modification time, the heartbeat)
and checks that the chief's first write is refused or takes the lock over. Two real jobs writing
one directory (issue 23, item 9) run as separate processes in
``tests/e2e/test_checkpoint_two_jobs.py``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mwms_mpi import errors, train
from mwms_mpi.train import _lock


@pytest.fixture(autouse=True)
def no_launcher_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's job id is its own host and pid (no Slurm or PMIx job around it)."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    monkeypatch.delenv("PMIX_NAMESPACE", raising=False)


def _plant(directory: Path, age_s: float = 0.0, **record: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / _lock.LOCK_NAME
    path.write_text(json.dumps(record) if record else "{garbled")
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def _dead_pid() -> int:
    with open("/proc/sys/kernel/pid_max") as file:
        return int(file.read()) + 1  # no process can have it


def _record(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def _ours(path: Path) -> bool:
    record = _record(path)
    return record["pid"] == os.getpid() and record["job"] == _lock.job_id()


HOST = socket.gethostname()


def test_the_chief_takes_the_lock_at_its_first_write_and_readers_never(tmp_path: Path) -> None:
    value = np.arange(3.0)
    manager = train.CheckpointManager(train.Checkpoint(v=value), str(tmp_path), max_to_keep=2)
    assert not (tmp_path / _lock.LOCK_NAME).exists()  # not by making a manager
    path = manager.save()
    lock = tmp_path / _lock.LOCK_NAME
    assert _ours(lock) and _record(lock)["host"] == HOST
    # another job now holds the directory: reading, restoring and restore-only managers work
    os.unlink(lock)
    planted = _plant(tmp_path, job="slurm:1", host=HOST, pid=os.getppid())
    before = planted.read_bytes()
    target = np.zeros(3)
    reader = train.CheckpointManager(train.Checkpoint(v=target), str(tmp_path), max_to_keep=2)
    assert reader.restore_or_initialize() == path
    # (a fresh Checkpoint's read leaves the saved save_counter unmatched, as TF's)
    train.Checkpoint(v=target).read(path).assert_existing_objects_matched()
    assert train.latest_checkpoint(str(tmp_path)) == path
    np.testing.assert_array_equal(target, value)
    assert planted.read_bytes() == before


def test_a_live_process_of_another_job_on_this_host_is_refused(tmp_path: Path) -> None:
    # our parent process is alive, and of another job
    lock = _plant(tmp_path, job="pid:x:1", host=HOST, pid=os.getppid(), start=None)
    manager = train.CheckpointManager(train.Checkpoint(v=np.ones(2)), str(tmp_path), 3)
    with pytest.raises(errors.FailedPreconditionError) as info:
        manager.save()
    message = str(info.value)
    assert f"in use by another job (job 'pid:x:1', process {os.getppid()} on {HOST}" in message
    assert "is running" in message and str(lock) in message and "nothing was written" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == [_lock.LOCK_NAME]
    assert manager.checkpoints == [] and train.latest_checkpoint(str(tmp_path)) is None


@pytest.mark.parametrize(
    ("case", "age_s"),
    [("dead_pid", 0.0), ("reused_pid", 0.0), ("stale_other_host", 3 * _lock.STALE_S)],
)
def test_a_lock_whose_holder_is_gone_is_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, age_s: float
) -> None:
    record: dict[str, Any] = {"job": "pid:elsewhere:7"}
    if case == "dead_pid":
        record.update(host=HOST, pid=_dead_pid())
    elif case == "reused_pid":  # the pid is alive but started at another time
        record.update(host=HOST, pid=os.getppid(), start="1")
    else:
        record.update(host="some-other-node", pid=12345)
    lock = _plant(tmp_path, age_s, **record)
    with caplog.at_level(logging.WARNING, logger="mwms_mpi.train._lock"):
        path = train.Checkpoint(v=np.ones(2)).save(str(tmp_path / "ckpt"))
    assert os.path.exists(path + ".index.json") and _ours(lock)
    assert f"Taking over the checkpoint directory lock {lock}" in caplog.text


def test_another_host_with_a_fresh_heartbeat_is_refused(tmp_path: Path) -> None:
    _plant(tmp_path, 5.0, job="slurm:99", host="some-other-node", pid=1)
    with pytest.raises(errors.FailedPreconditionError, match="its last heartbeat was 5 s ago"):
        train.Checkpoint(v=np.ones(2)).write(str(tmp_path / "w"))
    _plant(tmp_path, 5.0)  # unreadable, but fresh
    with pytest.raises(errors.FailedPreconditionError, match="an unreadable lock"):
        train.Checkpoint(v=np.ones(2)).write(str(tmp_path / "w"))


def test_the_same_job_id_takes_over_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A requeued Slurm job (or its new chief after a restart at another world size) keeps its
    job id: the lock of its previous run, anywhere, is its own."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    lock = _plant(tmp_path, 1.0, job="slurm:4242", host="some-other-node", pid=1)
    train.Checkpoint(v=np.ones(2)).save(str(tmp_path / "ckpt"))
    assert _record(lock)["job"] == "slurm:4242" and _record(lock)["pid"] == os.getpid()


def test_two_live_steps_of_one_slurm_job_are_two_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``srun ... & srun ... &`` in one allocation, both saving into one directory: the same
    ``SLURM_JOB_ID`` must not let the second step take the live first step's lock."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_STEP_ID", "1")
    _plant(tmp_path, 1.0, job="slurm:4242.0", host=HOST, pid=os.getppid(), start=None)
    with pytest.raises(errors.FailedPreconditionError, match=r"job 'slurm:4242\.0'"):
        train.Checkpoint(v=np.ones(2)).save(str(tmp_path / "ckpt"))
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # the same step again (requeued): its own lock
    train.Checkpoint(v=np.ones(2)).save(str(tmp_path / "ckpt"))
    assert _record(tmp_path / _lock.LOCK_NAME)["job"] == "slurm:4242.0"


def test_a_lock_taken_by_another_job_meanwhile_stops_the_next_write(tmp_path: Path) -> None:
    ckpt = train.Checkpoint(v=np.ones(2))
    manager = train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=5)
    manager.save()
    lock = tmp_path / _lock.LOCK_NAME
    os.unlink(lock)
    _plant(tmp_path, job="pid:x:2", host=HOST, pid=os.getppid())
    with pytest.raises(errors.FailedPreconditionError, match="in use by another job"):
        manager.save()
    assert len(manager.checkpoints) == 1


def test_the_heartbeat_and_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    train.Checkpoint(v=np.ones(2)).write(str(tmp_path / "w"))
    lock = tmp_path / _lock.LOCK_NAME
    old = time.time() - 1000
    os.utime(lock, (old, old))
    train.Checkpoint(v=np.ones(2)).write(str(tmp_path / "w"))  # a write beats too
    assert time.time() - lock.stat().st_mtime < 60
    _lock.release_all()
    assert not lock.exists()
    _lock.acquire(str(tmp_path))  # taken again after a release (the heartbeat restarts)
    assert _ours(lock)


def test_job_ids() -> None:
    assert _lock.job_id({"SLURM_JOB_ID": "17", "PMIX_NAMESPACE": "x"}) == "slurm:17"
    assert _lock.job_id({"SLURM_JOB_ID": "17", "SLURM_STEP_ID": "3"}) == "slurm:17.3"
    assert _lock.job_id({"PMIX_NAMESPACE": "prterun-node-123@1"}) == "pmix:prterun-node-123@1"
    assert _lock.job_id({}) == f"pid:{HOST}:{os.getpid()}"

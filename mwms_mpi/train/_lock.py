"""One job per checkpoint directory: a lock file the writing process takes at its first write.

Two jobs saving into one directory overwrite each other's state file and checkpoints, and a
restore then reads the other job's values without any error. So the process that writes a
checkpoint's real files (the chief) first takes ``<directory>/.mwms_mpi.lock``, and checks at
every later write that it still holds it. Readers, restores and managers that only restore
never take it.

The lock records the job, host, pid (and the pid's start time, against pid reuse) of its
holder. A lock held by another job is taken over only when that job is known to be gone:

* the same job id as ours (a requeued Slurm job, whose steps are numbered from 0 again; a job
  restarted at another world size whose chief is now another process): taken over at once.
  Slurm's id includes the step (``SLURM_STEP_ID``): two ``srun`` steps of one allocation that
  write one directory side by side are two jobs, judged as below;
* on this host: its process has ended (or the pid now belongs to another process);
* on another host, where no pid can be checked: its heartbeat (the lock file's modification
  time, refreshed every ``BEAT_S`` seconds by a daemon thread of the holder) is older than
  ``STALE_S`` seconds.

Otherwise the write is refused with ``FailedPreconditionError`` naming the holder. A job id
is the launcher's: Slurm's ``SLURM_JOB_ID`` and step (kept across requeues), PMIx's
``PMIX_NAMESPACE`` (``prterun``, Open MPI 5); without either (MPICH's Hydra, a plain
``python``) it is the host and pid of the writing process, which is the launch's rank 0 (the
chief, task 0, is rank 0), so it needs no collective. A lock is released when its process
exits normally.

Taking the lock is atomic (``os.link`` of a complete temporary file, which fails if the lock
exists, also on NFS), and so is taking over a stale one (``os.rename`` to a unique name, then
checking that what was moved is the lock judged stale).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from mwms_mpi import _env, errors
from mwms_mpi.train._format import atomic_write

LOCK_NAME = ".mwms_mpi.lock"
BEAT_S = 15.0
STALE_S = 120.0
_OP = "checkpoint"
_LOG = logging.getLogger(__name__)
_GUARD = threading.Lock()
_held: dict[str, dict[str, Any]] = {}  # lock path -> our record in it
_owner_pid: list[int] = []  # the process that started the heartbeat (a forked child is not it)
_stop = threading.Event()
_threads: list[threading.Thread] = []  # the heartbeat thread, while it runs


def job_id(env: Mapping[str, str] | None = None) -> str:
    """This job's id: the launcher's (Slurm's job and step: two ``srun`` steps of one allocation
    are two jobs here), else ``pid:<host>:<pid>`` of this (the writing) process."""
    slurm = _env.env_str("SLURM_JOB_ID", env)
    if slurm:
        step = _env.env_str("SLURM_STEP_ID", env)  # steps of one job running side by side
        return f"slurm:{slurm}" + (f".{step}" if step else "")
    pmix = _env.env_str("PMIX_NAMESPACE", env)
    if pmix:
        return f"pmix:{pmix}"
    return f"pid:{socket.gethostname()}:{os.getpid()}"


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (Linux ``/proc``), to tell a reused pid; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except (OSError, IndexError):
        return None


def _record() -> dict[str, Any]:
    return {
        "job": job_id(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "start": _start_time(os.getpid()),
        "since": time.time(),
    }


def _same_holder(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    return a is not None and all(a.get(k) == b.get(k) for k in ("job", "host", "pid", "start"))


def _read(path: str) -> tuple[dict[str, Any] | None, float]:
    """The lock's record (None if unreadable) and its modification time (the heartbeat).

    Raises:
      FileNotFoundError: if there is no lock.
    """
    with open(path, "rb") as file:
        mtime = os.fstat(file.fileno()).st_mtime
        raw = file.read(4096)
    try:
        record = json.loads(raw)
    except ValueError:
        return None, mtime
    return (record if isinstance(record, dict) else None), mtime


def _alive(record: Mapping[str, Any] | None, mtime: float) -> tuple[bool, str]:
    """Whether the lock's holder may still be writing, and why we think so."""
    age = time.time() - mtime
    host = record.get("host") if record else None
    if record is not None and host == socket.gethostname():
        pid = record.get("pid")
        if not isinstance(pid, int) or pid <= 0:
            return False, f"it names no valid pid ({pid!r})"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False, f"its process {pid} on this host has ended"
        except PermissionError:
            pass  # another user's process: it exists
        started = record.get("start")
        if started is not None and _start_time(pid) not in (None, started):
            return False, f"its process {pid} has ended (the pid now belongs to another process)"
        return True, f"its process {pid} on this host ({host}) is running"
    where = f"on host {host}" if host else "written by an unknown holder"
    if age > STALE_S:
        stale = f"stale after {STALE_S:.0f} s"
        return False, f"{where}, its last heartbeat was {age:.0f} s ago ({stale})"
    return True, f"{where}, its last heartbeat was {age:.0f} s ago"


def _create(path: str, record: Mapping[str, Any]) -> None:
    """Creates the lock with ``record`` atomically. Raises FileExistsError if there is one."""
    temp = f"{path}.new{os.getpid()}-{os.urandom(4).hex()}"
    with open(temp, "x") as file:
        json.dump(record, file)
        file.flush()
        os.fsync(file.fileno())
    try:
        os.link(temp, path)
    finally:
        os.unlink(temp)


def _take_over(path: str, judged: Mapping[str, Any] | None) -> None:
    """Moves a stale lock aside, if it is still the one judged stale (else puts it back)."""
    aside = f"{path}.stale{os.getpid()}-{os.urandom(4).hex()}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # someone else moved it: try again
    try:
        moved, _ = _read(aside)
    except OSError:
        moved = None
    if moved != judged:  # replaced by a live holder meanwhile: give it back
        with contextlib.suppress(OSError):
            os.link(aside, path)
    with contextlib.suppress(OSError):
        os.unlink(aside)


def _refusal(directory: str, path: str, record: Mapping[str, Any] | None, why: str) -> Exception:
    holder = (
        f"job {record.get('job')!r}, process {record.get('pid')} on {record.get('host')}"
        if record
        else "an unreadable lock"
    )
    return errors.FailedPreconditionError(
        None,
        _OP,
        f"Checkpoint directory {directory} is in use by another job ({holder}; {why}); this "
        f"job is {job_id()!r}. Two jobs writing one directory overwrite each other's "
        "checkpoints, so nothing was written. Use another directory, or end that job. If it "
        f"has ended, remove {path}; a lock is also taken over by itself once its process has "
        f"ended (same host) or its heartbeat is older than {STALE_S:.0f} s (other hosts), or "
        "by a run of the same job id (a requeued Slurm job).",
    )


def acquire(directory: str) -> None:
    """Takes (or checks that this process still holds) the lock of ``directory``.

    Called by the chief before every write of a checkpoint's real files.

    Raises:
      FailedPreconditionError: another live job holds the directory.
    """
    path = os.path.join(directory, LOCK_NAME)
    held = _held.get(path) if _owner_pid == [os.getpid()] else None  # not a forked child's
    mine = held or _record()
    for _ in range(8):
        try:
            record, mtime = _read(path)
        except FileNotFoundError:
            try:
                _create(path, mine)
            except FileExistsError:
                continue  # another process made it first: judge it
            _hold(path, mine)
            return
        if _same_holder(record, mine):
            _hold(path, mine)
            return
        if record is not None and record.get("job") == mine["job"]:
            atomic_write(path, lambda file: file.write(json.dumps(mine).encode()))
            _hold(path, mine)
            return
        alive, why = _alive(record, mtime)
        if alive:
            with _GUARD:
                _held.pop(path, None)
            raise _refusal(directory, path, record, why)
        _LOG.warning("Taking over the checkpoint directory lock %s: %s.", path, why)
        _take_over(path, record)
    raise _refusal(directory, path, None, "it kept changing hands while this job tried to take it")


def _hold(path: str, record: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)
    with _GUARD:
        _held[path] = record
        if not _owner_pid or _owner_pid[0] != os.getpid():  # first lock (or a forked child)
            _owner_pid[:] = [os.getpid()]
            _threads.clear()
            atexit.register(release_all)
        if not any(thread.is_alive() for thread in _threads):
            _stop.clear()
            thread = threading.Thread(target=_beat, name="mwms_mpi-checkpoint-lock", daemon=True)
            thread.start()
            _threads[:] = [thread]


def _beat() -> None:
    """Refreshes the heartbeat of every lock this process holds, until exit."""
    while not _stop.wait(BEAT_S):
        with _GUARD:
            paths = list(_held)
        for path in paths:
            with contextlib.suppress(OSError):
                os.utime(path)


def release_all() -> None:
    """Removes the locks this process holds (at exit; a forked child removes none)."""
    _stop.set()
    for thread in _threads:
        if thread is not threading.current_thread():
            thread.join(timeout=1.0)
    if not _owner_pid or _owner_pid[0] != os.getpid():
        return
    with _GUARD:
        held = dict(_held)
        _held.clear()
    for path, mine in held.items():
        try:
            record, _ = _read(path)
        except OSError:
            continue
        if _same_holder(record, mine):
            with contextlib.suppress(OSError):
                os.unlink(path)

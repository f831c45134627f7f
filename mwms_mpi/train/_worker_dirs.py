"""Where non-chief workers write their throw-away checkpoint copies, and removing stale ones.

Every worker must save (reading a ``SyncOnReadVariable`` is a collective), but only the chief's
files are kept: the others write to ``<dir>/workertemp_<task_id>/`` (TF's ``write_dirpath``) and
remove it after. A worker killed in the middle of a save leaves its directory behind; its next
save replaces it, but a job restarted with fewer workers would never save there again, so the
chief removes, after each successful save, the ``workertemp_<id>`` directories that no worker
of the current cluster writes to.

Checkpoint directories are shared between people, so whatever is at ``workertemp_<id>`` may have
been planted: a symlink there would send the worker's write (which replaces files and sweeps
``<prefix>.data-*.npz``) and its cleanup into another directory. A worker writes only into a
real directory, inside the checkpoint directory and its own (``prepare_worker_temp_dir``), and
anything else is refused: nothing is written or deleted through it. Owning it matters because
in a sticky shared directory (``/tmp``-like) only its owner can swap it for a symlink later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat

from mwms_mpi import errors
from mwms_mpi.train._format import is_inside

_PREFIX = "workertemp_"
_OP = "checkpoint"
_LOG = logging.getLogger(__name__)


def worker_temp_dir(directory: str, task_id: int | None) -> str:
    """TF's ``write_dirpath`` for a non-chief worker: ``<directory>/workertemp_<task_id>``.

    ``task_id`` is the public ``strategy.cluster_resolver.task_id`` (or the launch rank outside
    a strategy); without one (no resolver) the directory is named after the process.
    """
    name = f"pid{os.getpid()}" if task_id is None else str(task_id)
    return os.path.join(directory, f"{_PREFIX}{name}")


def _unsafe(directory: str, temp_dir: str) -> str | None:
    """Why ``temp_dir`` must not be written to or deleted, or ``None`` if it is safe.

    Safe: a real directory (not a symlink) that resolves inside ``directory`` and belongs to
    this process's user.
    """
    try:
        info = os.lstat(temp_dir)
    except OSError as exc:
        return f"it cannot be examined ({exc})"
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(temp_dir)
        except OSError:
            target = "?"
        return f"it is a symbolic link (to {target!r}), not a directory this worker made"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if not is_inside(temp_dir, directory):
        return f"it resolves to {os.path.realpath(temp_dir)}, outside {directory}"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"it belongs to user id {info.st_uid}, not to this worker's user ({os.getuid()})"
    return None


def prepare_worker_temp_dir(directory: str, temp_dir: str) -> None:
    """Creates ``temp_dir`` (or reuses the one a killed save left) for a non-chief's write.

    ``mkdir`` never follows a symlink, and what is there afterwards is checked with ``lstat``,
    so a planted link (or a directory outside, or someone else's) is refused before anything
    is written through it. A new one is private (0o700): it only ever holds a throw-away copy.

    Raises:
      PermissionDeniedError: if ``temp_dir`` is not a directory of this worker's user inside
        ``directory``; nothing was written or deleted.
    """
    os.makedirs(directory, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(temp_dir, 0o700)
    problem = _unsafe(directory, temp_dir)
    if problem is not None:
        raise errors.PermissionDeniedError(
            None,
            _OP,
            f"Refusing to write this worker's checkpoint copy to {temp_dir}: {problem}. "
            "Nothing was written or deleted through it. Remove it (if it is not yours, ask "
            "whoever put it there) or use another checkpoint directory.",
        )


def remove_worker_temp_dir(directory: str, temp_dir: str) -> None:
    """Removes a non-chief's ``temp_dir`` after its write, if it is still safe to.

    A failure is logged, not raised: the checkpoint itself (the chief's) is complete, and the
    worker's next save, or the chief's sweep, removes what is left. If ``temp_dir`` was
    replaced by a symlink meanwhile, it is left alone (``rmtree`` would refuse it as well).
    """
    problem = _unsafe(directory, temp_dir)
    if problem is not None:
        _LOG.warning("Not removing %s after a checkpoint write: %s.", temp_dir, problem)
        return
    try:
        shutil.rmtree(temp_dir)
    except OSError as exc:
        _LOG.warning("Could not remove %s after a checkpoint write: %s", temp_dir, exc)


def sweep_stale_worker_dirs(directory: str, live_ids: frozenset[int] | None) -> None:
    """Removes ``workertemp_<n>`` directories in ``directory`` that no current task writes to.

    Only the chief calls this, after a save succeeded; ``live_ids`` are the task ids of the
    current cluster (``None``: unknown, nothing is removed). ``rmtree`` does not follow symlinks
    (a symlinked ``workertemp_<n>`` is left alone), so nothing outside ``directory`` is touched.
    """
    if live_ids is None:
        return
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in sorted(names):
        match = re.fullmatch(_PREFIX + r"(\d+)", name)
        path = os.path.join(directory, name)
        if match and int(match[1]) not in live_ids and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)

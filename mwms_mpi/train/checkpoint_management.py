"""``tf.train.CheckpointManager`` and ``latest_checkpoint``: numbering, retention, the state file.

Mirrors TF 2.21's ``checkpoint_management.py``. One deliberate difference: TF records the state
file, deletes the checkpoints beyond ``max_to_keep``, then records it again; here the state is
recorded once, already without them, and only then are their files deleted (index first), so the
state file never names a checkpoint whose files are gone, even if the process dies mid-sweep.

In multi-worker training every worker calls ``save``; only the chief writes files, records the
state and deletes old checkpoints (``Checkpoint._write``); every worker keeps the same
``checkpoints`` and ``latest_checkpoint`` lists, which name the chief's files.
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi.train import _format, _state, checkpoint_options
from mwms_mpi.train.checkpoint import Checkpoint


def latest_checkpoint(checkpoint_dir: str, latest_filename: str | None = None) -> str | None:
    """Finds the filename of latest saved checkpoint file.

    Args:
      checkpoint_dir: directory where the variables were saved.
      latest_filename: optional name for the state file, default ``checkpoint``.

    Returns:
      The full path to the latest checkpoint, or ``None`` if no checkpoint was found (no state
      file, or the checkpoint it names has no index file: it was never completely written).
    """
    state = _state.read_state(os.fspath(checkpoint_dir), latest_filename)
    if state is None or not state.model_checkpoint_path:
        return None
    path = state.model_checkpoint_path
    if os.path.exists(_format.index_path(path)):
        return path
    return None


def _read_step(value: Any) -> int:
    if isinstance(value, (int, np.integer)):
        return int(value)
    if callable(getattr(value, "numpy", None)):
        return int(np.asarray(value.numpy()))
    if callable(getattr(value, "read_value", None)):
        return int(np.asarray(value.read_value()))
    return int(np.asarray(value))


class CheckpointManager:
    """Manages multiple checkpoints by keeping some and deleting unneeded ones.

    Args:
      checkpoint: the ``mwms_mpi.train.Checkpoint`` instance to save and manage.
      directory: the path to a directory in which to write checkpoints. A special file named
        "checkpoint" is also written to this directory (in TF's text format) to record which
        checkpoints are the most recent.
      max_to_keep: an integer, the number of checkpoints to keep; ``None`` keeps all.
      keep_checkpoint_every_n_hours: upon removal, keep one checkpoint every N hours.
      checkpoint_name: custom name for the checkpoint file (default ``ckpt``); it may name a
        subdirectory (``sub/ckpt``) but must stay inside ``directory`` once normalised and
        with symlinks resolved (TF also accepts ``../elsewhere/ckpt``; this refuses it).
      step_counter: a scalar variable (or integer) holding the current step; required with
        ``checkpoint_interval``.
      checkpoint_interval: an integer, the minimum step interval between two checkpoints.
      init_fn: callable run by ``restore_or_initialize`` when there is no checkpoint.
      last_checkpoint_step: the step of the last checkpoint, if known.

    Raises:
      ValueError: if ``max_to_keep`` is not ``None`` and not positive,
        ``checkpoint_interval`` is given without ``step_counter``, or ``checkpoint_name``
        leads outside ``directory``.
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: str,
        max_to_keep: int | None,
        keep_checkpoint_every_n_hours: float | None = None,
        checkpoint_name: str = "ckpt",
        step_counter: Any = None,
        checkpoint_interval: int | None = None,
        init_fn: Callable[[], Any] | None = None,
        last_checkpoint_step: int | None = None,
    ) -> None:
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(
                f"Expected a mwms_mpi.train.Checkpoint, got {type(checkpoint).__name__}."
            )
        if max_to_keep is not None and max_to_keep <= 0:  # TF's check (2.0 keeps two)
            raise ValueError(
                f"Expected a positive integer or `None` for `max_to_keep`, got {max_to_keep}."
            )
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError(
                "`step_counter` should be passed if `checkpoint_interval` is not None."
            )
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max_to_keep = max_to_keep
        self._keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self._checkpoint_prefix = os.path.join(self._directory, checkpoint_name)
        # TF writes wherever `checkpoint_name` leads ("../other/ckpt" replaces another
        # directory's files); here it must stay inside `directory`, checked before anything
        # is written (and again at each save, for symlinks made later).
        _format.check_inside(f"{self._checkpoint_prefix}-0", self._directory)
        self._step_counter = step_counter
        self._checkpoint_interval = checkpoint_interval
        self._init_fn = init_fn
        self._last_checkpoint_step = last_checkpoint_step
        state = _state.read_state(self._directory)
        now = time.time()
        self._maybe_delete: collections.OrderedDict[str, float] = collections.OrderedDict()
        if state is None:
            self._latest_checkpoint: str | None = None
            self._last_preserved_timestamp = now - 1.0  # TF: a manager re-made at once
        else:
            # TF's rule: only checkpoints younger than the last preserved one are this
            # manager's to delete; a state file without timestamps (Checkpoint.save's) gives
            # none, so a manager never deletes what it did not save.
            self._latest_checkpoint = state.model_checkpoint_path or None
            preserved = min(state.last_preserved_timestamp or 0.0, now)
            paths = state.all_model_checkpoint_paths
            timestamps = state.all_model_checkpoint_timestamps or [preserved] * len(paths)
            for path, stamp in zip(paths, timestamps, strict=False):
                if min(stamp, now) > preserved:
                    self._maybe_delete[path] = min(stamp, now)
            self._last_preserved_timestamp = preserved

    @property
    def directory(self) -> str:
        """The directory this manager writes checkpoints to."""
        return self._directory

    @property
    def checkpoint(self) -> Checkpoint:
        """Returns the ``Checkpoint`` object."""
        return self._checkpoint

    @property
    def checkpoint_interval(self) -> int | None:
        """The minimum step interval between two checkpoints, or ``None``."""
        return self._checkpoint_interval

    @property
    def latest_checkpoint(self) -> str | None:
        """The prefix of the most recent checkpoint in ``directory`` (``None`` if none).

        Equivalent to ``mwms_mpi.train.latest_checkpoint(directory)`` when this manager is the
        only writer, but read from memory.
        """
        return self._latest_checkpoint

    @property
    def checkpoints(self) -> list[str]:
        """A list of managed checkpoints, oldest first (those not yet deleted)."""
        return list(self._maybe_delete)

    def _current_step(self) -> int:
        return _read_step(self._step_counter)

    def save(
        self, checkpoint_number: Any = None, check_interval: bool = True, options: Any = None
    ) -> str | None:
        """Creates a new checkpoint and manages it. Every worker must call it.

        Args:
          checkpoint_number: an optional integer, or an integer scalar variable, to number the
            checkpoint with; by default the checkpoint's ``save_counter`` (incremented either
            way).
          check_interval: with ``checkpoint_interval`` set, skip the save if fewer than that
            many steps passed since the last checkpoint; ``False`` forces the save.
          options: a ``CheckpointOptions`` or ``None``; its options change nothing here.

        Returns:
          The path to the new checkpoint (the chief's, on every worker), or ``None`` if the
          save was skipped because of ``checkpoint_interval``.
        """
        current_step = None
        if self._checkpoint_interval is not None:
            current_step = self._current_step()
            last = self._last_checkpoint_step
            if last is not None and (  # TF: never twice at one step, interval or not
                current_step == last
                or (check_interval and current_step < last + self._checkpoint_interval)
            ):
                return None
        counter = self._checkpoint.save_counter
        counter.assign_add(1)
        checkpoint_options.checked(options, "experimental_write_callbacks")  # TF: after the +1
        number = int(counter) if checkpoint_number is None else _read_step(checkpoint_number)
        prefix = f"{self._checkpoint_prefix}-{number}"
        maybe_delete = collections.OrderedDict(self._maybe_delete)
        maybe_delete.pop(prefix, None)
        maybe_delete[prefix] = time.time()
        preserved, deleted = self._sweep(maybe_delete)

        def commit(written: str) -> None:
            """On the chief only, after the index: the state file, then the deletions."""
            state = _state.CheckpointState(
                written, list(maybe_delete), list(maybe_delete.values()), preserved
            )
            _state.write_state(self._directory, state)
            for old in deleted:
                _format.remove_checkpoint(old, self._directory)

        path = self._checkpoint._write(
            prefix, "CheckpointManager.save", commit=commit, root=self._directory
        )
        self._maybe_delete = maybe_delete
        self._last_preserved_timestamp = preserved
        self._latest_checkpoint = path
        if self._step_counter is not None:
            self._last_checkpoint_step = (
                current_step if current_step is not None else self._current_step()
            )
        return path

    def _sweep(self, maybe_delete: collections.OrderedDict[str, float]) -> tuple[float, list[str]]:
        """Pops the checkpoints beyond ``max_to_keep`` (oldest first), TF's ``_sweep``.

        Returns the new last-preserved timestamp and the prefixes to delete; checkpoints kept
        by ``keep_checkpoint_every_n_hours`` leave the list but stay on disk, as in TF.
        """
        preserved = self._last_preserved_timestamp
        deleted: list[str] = []
        if not self._max_to_keep:
            return preserved, deleted
        hours = self._keep_checkpoint_every_n_hours
        while len(maybe_delete) > self._max_to_keep:
            name, stamp = maybe_delete.popitem(last=False)
            if hours and stamp - hours * 3600.0 >= preserved:  # TF: 0 is off
                preserved = stamp
                continue
            deleted.append(name)
        return preserved, deleted

    def sync(self) -> None:
        """TF's ``sync``: waits for outstanding asynchronous saves; ours are all synchronous
        (``save`` returns once the files are written), so there is nothing to wait for."""

    def restore_or_initialize(self) -> str | None:
        """Initialize or restore training: restore the latest checkpoint, else run ``init_fn``.

        Returns:
          The restored checkpoint's path, or ``None`` if there was none (``init_fn`` ran).
        """
        if self._latest_checkpoint is not None:
            self._checkpoint.restore(self._latest_checkpoint)
            if self._checkpoint_interval is not None:
                self._last_checkpoint_step = self._current_step()
            return self._latest_checkpoint
        if self._init_fn is not None:
            self._init_fn()
        return None

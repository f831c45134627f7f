"""``tf.train.Checkpoint`` over numpy files: every worker saves, only the chief's files remain.

What can be checkpointed and under which keys: ``_walk.py``. Restoring, TF's way (checked,
never cast, values of objects not created yet kept and assigned when they are created):
``_restore.py``.

Multi-worker rules (TF's ``MultiWorkerMirroredStrategy`` documentation): every worker must call
``save``/``write``, because reading a ``SyncOnReadVariable`` is a collective; so every worker reads
every value, in the same order, before anything is written. The chief then writes to the real
path; the other workers write to ``<dir>/workertemp_<task_id>/`` (TF's ``write_dirpath``) and
remove it, refusing one that is a symlink or not their own; the chief removes those that killed
workers left (``_worker_dirs.py``). Under a strategy with a communicator the workers finally
agree (one small all-reduce) that the chief's write succeeded, so ``save`` returns on every
worker only once the chief's files are complete, and a failed write raises on every worker.
Who is the chief, also outside any strategy in a multi-rank world: ``_roles.py``. Before its
first write the chief takes the directory's lock, so a second job writing there is refused
instead of silently mixing checkpoints (``_lock.py``).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from mwms_mpi import errors
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.train import _deferred, _format, _lock, _roles, _state, checkpoint_options
from mwms_mpi.train._restore import Restoration, restore_into, wait_on
from mwms_mpi.train._status import (
    CheckpointLoadStatus,
    InitializationOnlyStatus,
    SaveCounter,
)
from mwms_mpi.train._walk import (
    aliases,
    children,
    is_container,
    is_trackable,
    leaves,
    read_for_save,
)
from mwms_mpi.train._worker_dirs import (
    prepare_worker_temp_dir,
    remove_worker_temp_dir,
    sweep_stale_worker_dirs,
    worker_temp_dir,
)

_RESERVED = ("save_counter",)
_OP = "checkpoint"


def strategy_for(objects: Mapping[str, Any] | Checkpoint) -> Any:
    """The strategy a checkpoint (of ``objects``) saves under, and its preemption handler
    agrees over: the current one, else the first saved variable's, else the default one."""
    if isinstance(objects, Checkpoint):
        objects = objects._trackable_children()
    return _roles.strategy_for(objects)


# -- Checkpoint ----------------------------------------------------------------------------------


class Checkpoint:
    """Manages saving/restoring trackable values to disk (``tf.train.Checkpoint``).

    Args:
      root: optional trackable whose children are saved at the top level of the checkpoint
        (``root.dense.kernel`` is saved as ``dense/kernel``).
      **kwargs: keyword arguments are set as attributes of this object, and are saved with the
        checkpoint. Values must be trackable objects (variables, arrays, containers of them);
        an attribute set later that is not trackable is a plain, unsaved one (TF's).

    Raises:
      ValueError: if a value in ``kwargs`` (or ``root``) is not trackable.
      AttributeError: if a keyword argument is named ``save_counter``.
    """

    def __init__(self, root: Any = None, **kwargs: Any) -> None:
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_save_counter", SaveCounter())
        # TF creates save_counter lazily (save, restore, or reading the property): until then
        # a write() holds none and the status checks do not ask for it
        object.__setattr__(self, "_counter_exists", False)
        # reads that hold a counter value while there is no counter: bound when it is made
        object.__setattr__(self, "_counter_waiting", [])
        if root is not None and not is_container(root):
            raise _not_trackable("root", root)
        object.__setattr__(self, "_root", root)  # its children are read at each use, as TF's
        tracked = {} if root is None else dict(_tracked_children(root))
        for name, value in sorted(kwargs.items()):
            if tracked.get(name, value) is not value:
                raise ValueError(  # TF's: root's child would be saved under neither name
                    f"Cannot create a Checkpoint with keyword argument {name} if root.{name} "
                    "already exists."
                )
            if not is_trackable(value) and name not in _RESERVED:
                raise _not_trackable(name, value)
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _RESERVED:
            raise AttributeError(f"property '{name}' of 'Checkpoint' object has no setter")
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if not is_trackable(value):
            # TF's AutoTrackable: what it cannot track is a plain attribute (only the
            # constructor refuses it); a trackable set under the name before stays saved
            object.__setattr__(self, name, value)
            return
        missing = object()
        plain = self.__dict__.pop(name, missing)  # it would hide the tracked value
        previous = self._children.get(name, missing)
        self._children[name] = value

        def undo() -> None:
            if previous is missing:
                del self._children[name]
            else:
                self._children[name] = previous
            if plain is not missing:
                object.__setattr__(self, name, plain)

        # a restore may keep this attribute's values (restore-on-create)
        _deferred.notify_or_undo(self, undo)

    def __getattr__(self, name: str) -> Any:
        children = self.__dict__.get("_children", {})
        if name in children:
            return children[name]
        raise AttributeError(f"'Checkpoint' object has no attribute '{name}'")

    def _trackable_children(self) -> dict[str, Any]:
        """The objects this checkpoint saves, by name: the root's trackable children as they
        are now (attributes it gained since included), then those given to this object."""
        found: dict[str, Any] = {}
        if self._root is not None:
            found.update(_tracked_children(self._root))
        found.update(self._children)
        return found

    @property
    def save_counter(self) -> SaveCounter:
        """Incremented when ``save()`` is called. Used to number checkpoints."""
        self._make_counter()
        return self._save_counter

    def _make_counter(self) -> None:
        """TF's lazy creation of ``save_counter``: a ``read`` before it kept its saved counter
        waiting (TF's deferred restoration), which now binds to it (its value was set by the
        read), so that read's status counts it as consumed, as TF's does."""
        if self._counter_exists:
            return
        object.__setattr__(self, "_counter_exists", True)
        for waiting in self._counter_waiting:
            restoration = waiting()
            if restoration is not None and "save_counter" in restoration.arrays:
                restoration.arrays.pop("save_counter")
                restoration.matched.add("save_counter")
        self._counter_waiting.clear()

    def save(self, file_prefix: str, options: Any = None) -> str:
        """Saves a training checkpoint and provides basic checkpoint management.

        Numbers the checkpoint with ``save_counter`` (``file_prefix-1``, ``file_prefix-2``, ...)
        and records it in the directory's ``checkpoint`` state file, which
        ``mwms_mpi.train.latest_checkpoint`` reads. Every worker must call it (outside a
        strategy, rank 0 alone may).

        Args:
          file_prefix: a prefix to use for the checkpoint filenames (``/path/to/directory/ckpt``).
          options: a ``CheckpointOptions`` or ``None``; its options change nothing here.

        Returns:
          The full path to the checkpoint (the chief's path, on every worker).

        Raises:
          ValueError: a value's dtype cannot be restored bit for bit (nothing is written).
          FailedPreconditionError: another live job writes into the directory.
        """
        checkpoint_options.checked(options)
        self.save_counter.assign_add(1)
        path = f"{os.fspath(file_prefix)}-{int(self._save_counter)}"

        def record(written: str) -> None:
            directory = os.path.dirname(written)
            state = _state.CheckpointState(written, [written])
            _state.write_state(directory, state)

        return self._write(path, "Checkpoint.save", commit=record)

    def write(self, file_prefix: str, options: Any = None) -> str:
        """Writes a training checkpoint: no numbering, no state file, ``save_counter`` unchanged.

        Every worker must call it (outside a strategy, rank 0 alone may).

        Args:
          file_prefix: the prefix of the checkpoint's files.
          options: a ``CheckpointOptions`` or ``None``; its options change nothing here.

        Returns:
          The full path to the checkpoint (i.e. ``file_prefix``).

        Raises:
          ValueError: a value's dtype cannot be restored bit for bit (nothing is written).
          FailedPreconditionError: another live job writes into the directory.
        """
        checkpoint_options.checked(options)
        return self._write(os.fspath(file_prefix), "Checkpoint.write")

    def _write(
        self,
        file_prefix: str,
        api: str,
        commit: Callable[[str], None] | None = None,
        root: str | None = None,
    ) -> str:
        """Reads every value on every worker, writes (chief: real path; others: temp dir).

        ``commit(file_prefix)`` runs on the chief after the index is in place and before the
        workers agree, so the state file is up to date when ``save`` returns on any worker.
        ``root`` is the directory every written path must stay in and whose lock the chief
        takes (a manager's directory; by default the prefix's own).
        """
        directory = os.path.dirname(file_prefix) or "."
        root = directory if root is None else root
        _format.check_inside(file_prefix, root)
        objects = self._trackable_children()
        found = list(leaves(objects))
        for key, leaf in found:  # refused before anything is read (a read may be a collective)
            _format.check_savable_dtype(key, getattr(leaf, "dtype", None))
        values = [(key, read_for_save(key, leaf)) for key, leaf in found]
        if self._counter_exists:
            values.append(("save_counter", self._save_counter.read_value()))
        role = _roles.role_for(strategy_for(objects))
        temp_dir = None if role.chief else worker_temp_dir(directory, role.task_id)
        with api_call(role.communicator, api):
            failure = _write_files(
                file_prefix, values, int(self._save_counter), temp_dir, root, aliases(found)
            )
            if failure is None and role.chief and commit is not None:
                try:
                    commit(file_prefix)
                except Exception as exc:
                    failure = exc
            failed = failure is not None
            if role.communicator is not None:
                agreed = role.communicator.min_max(int(failed), "checkpoint written")
                failed = agreed[1] == 1
        if failure is not None:
            raise failure
        if failed:
            raise errors.UnknownError(
                None,
                _OP,
                f"Writing checkpoint {file_prefix} failed on another worker; see its error.",
            )
        if role.chief:
            sweep_stale_worker_dirs(directory, role.live_ids)
        return file_prefix

    def read(self, save_path: str | None, options: Any = None) -> Any:
        """Reads a training checkpoint written with ``write`` (or ``save``).

        Values of objects not created yet are assigned when they are created, as ``restore``
        does.

        Args:
          save_path: the path to the checkpoint as returned by ``write``. If ``None``, nothing
            is read (TF).
          options: a ``CheckpointOptions`` or ``None``; its options change nothing here.

        Returns:
          A load status object with ``assert_consumed`` and ``expect_partial``; for
          ``save_path=None`` an ``InitializationOnlyStatus``.

        Raises:
          NotFoundError: if there is no checkpoint at ``save_path``.
          DataLossError: if the checkpoint's files are incomplete or corrupt.
          ValueError: if a saved shape differs from the object's shape.
          InvalidArgumentError: if a saved dtype differs from the object's (TF's error).
        """
        checkpoint_options.checked(options)
        if save_path is None:  # TF: as restore(None)
            return InitializationOnlyStatus()
        return self._restore(os.fspath(save_path), creates_counter=False)

    def sync(self) -> None:
        """TF's ``sync``: waits for outstanding asynchronous saves; ours are all synchronous
        (``save`` returns once the files are written), so there is nothing to wait for."""

    def restore(self, save_path: str | None, options: Any = None) -> Any:
        """Restores a training checkpoint.

        Restores this ``Checkpoint`` and any objects it depends on: arrays in place, variables
        with TF's restore rule (every replica of a distributed variable gets the saved value; a
        ``SyncOnRead`` variable with ``SUM`` aggregation gets it divided by
        ``num_replicas_in_sync``), and ``save_counter``. A value is restored only into an
        object of its own shape and dtype (never cast), and nothing is changed if any value
        does not fit. Values of objects not created yet (an optimizer's slots and
        ``iterations`` before its first step, lazily built variables, attributes set later)
        are kept and assigned when those objects are created, as TF does. Every worker reads
        the files itself, so any number of workers can restore what any number saved.

        Args:
          save_path: the path to the checkpoint, as returned by ``save`` or
            ``mwms_mpi.train.latest_checkpoint``. If ``None``, nothing is restored.
          options: a ``CheckpointOptions`` or ``None``; its options change nothing here.

        Returns:
          A load status object (``assert_consumed``, ``assert_existing_objects_matched``,
          ``expect_partial``); for ``save_path=None`` an ``InitializationOnlyStatus``.

        Raises:
          NotFoundError: if there is no checkpoint at ``save_path``.
          DataLossError: if the checkpoint's files are incomplete or corrupt.
          ValueError: if a saved shape differs from the object's shape.
          InvalidArgumentError: if a saved dtype differs from the object's (TF's error).
        """
        checkpoint_options.checked(options)
        if save_path is None:
            return InitializationOnlyStatus()
        return self._restore(os.fspath(save_path), creates_counter=True)

    def _restore(self, save_path: str, creates_counter: bool) -> CheckpointLoadStatus:
        """``restore`` (which creates ``save_counter``, as TF's) or ``read`` (which does not: a
        saved counter then sets it, but counts as unmatched until it exists, as in TF,
        :meth:`_make_counter`)."""
        data = _format.read_checkpoint(save_path)
        restoration = Restoration(save_path, data.arrays, data.aliases)
        restore_into(self._trackable_children(), restoration)
        if creates_counter:
            self._make_counter()
        if "save_counter" in data.arrays:
            self._save_counter.assign(data.arrays["save_counter"])
            if self._counter_exists:
                restoration.arrays.pop("save_counter")
                restoration.matched.add("save_counter")
            else:
                self._counter_waiting.append(weakref.ref(restoration))
        if "" in restoration.waiting_parents():
            wait_on(self, restoration, "")  # a later attribute of this checkpoint
            if self._root is not None:  # ... or of its root (a Module's notifies)
                wait_on(self._root, restoration, "")
        return CheckpointLoadStatus(restoration, lambda: _current_leaves(self))


def _tracked_children(root: Any) -> list[tuple[str, Any]]:
    """The children of a ``Checkpoint``'s root that it saves (TF's root dependencies)."""
    return [(name, child) for name, child in children(root) if is_trackable(child)]


def _current_leaves(checkpoint: Checkpoint) -> list[tuple[str, Any]]:
    """Every leaf under ``checkpoint`` now, ``save_counter`` included once it exists."""
    found = list(leaves(checkpoint._trackable_children()))
    if checkpoint._counter_exists:
        found.append(("save_counter", checkpoint._save_counter))
    return found


def _write_files(
    file_prefix: str,
    values: list[tuple[str, np.ndarray]],
    counter: int,
    temp_dir: str | None,
    root: str,
    same: dict[str, str],
) -> Exception | None:
    """Writes the checkpoint's files (the chief: at ``file_prefix``, after taking the lock of
    ``root``; a worker: in ``temp_dir``, removed after). Returns the error, if any."""
    directory = os.path.dirname(file_prefix) or "."
    prepared: str | None = None  # the temp dir this worker checked: only it is removed
    try:
        if temp_dir is None:
            os.makedirs(directory, exist_ok=True)
            _lock.acquire(root)
            prefix = file_prefix
        else:
            prepare_worker_temp_dir(directory, temp_dir)
            prepared = temp_dir
            prefix = os.path.join(temp_dir, os.path.basename(file_prefix))
        _format.write_checkpoint(prefix, values, counter, same)
    except Exception as exc:
        return exc
    finally:
        if prepared is not None:
            remove_worker_temp_dir(directory, prepared)
    return None


def _not_trackable(name: str, value: Any) -> ValueError:
    return ValueError(
        f"`Checkpoint` was expecting {name} to be a trackable object (an object derived from "
        f"`Trackable`), got {value!r}. Trackable here: variables (with `assign` and `numpy`), "
        "numpy arrays, and dicts, lists, Checkpoints and objects holding them."
    )

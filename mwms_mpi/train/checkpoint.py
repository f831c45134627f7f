"""``tf.train.Checkpoint`` over numpy files: every worker saves, only the chief's files remain.

What can be checkpointed (TF calls these trackable objects):

* variables, duck-typed: anything with ``assign(value)`` and ``numpy()`` (or ``read_value()``),
  so ``mwms_mpi.Variable`` and its distributed forms, and user classes alike; restored with
  ``assign``, which for a distributed variable in cross-replica context sets every replica;
* numpy arrays (not object arrays), restored in place, as a variable would be;
* ``dict``s, ``list``s and ``tuple``s of trackables, nested ``Checkpoint``s, and plain objects
  whose public attributes hold trackables (TF's ``AutoTrackable``). Other values inside those
  containers (numbers, strings, ``None``) are skipped, as TF skips them; objects of mwms_mpi's
  own classes (strategies, communicators) are never walked into;
* objects that name their children with ``_trackable_children()`` (TF's ``Trackable`` hook),
  such as ``mwms_mpi.optimizers`` optimizers (step counter and slots).

Values are saved under their object paths, TF's checkpoint keys without the
``/.ATTRIBUTES/VARIABLE_VALUE`` suffix: ``Checkpoint(model=m)`` with ``m.dense.kernel`` saves
``model/dense/kernel``; a ``/`` or ``.`` inside a name is escaped as ``.S`` and ``..`` as TF does.

Multi-worker rules (TF's ``MultiWorkerMirroredStrategy`` documentation): every worker must call
``save``/``write``, because reading a ``SyncOnReadVariable`` is a collective; so every worker reads
every value, in the same order, before anything is written. The chief
(``strategy.extended.should_checkpoint``) then writes to the real path; the other workers write
to ``<dir>/workertemp_<task_id>/`` (TF's ``write_dirpath``) and remove it, refusing one that is
a symlink or not their own; the chief removes those that killed workers left
(``_worker_dirs.py``). Finally the workers agree (one small all-reduce on the strategy's
communicator) that the chief's write succeeded, so ``save`` returns on every worker only once
the chief's files are complete, and a failed write raises on every worker instead of leaving
them to diverge. The strategy is the current one, or else the ``distribute_strategy`` of the
first saved variable that has one.
"""

from __future__ import annotations

import inspect
import os
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi.distribute.context import get_strategy, has_strategy
from mwms_mpi.train import _format, _state
from mwms_mpi.train._status import (
    CheckpointLoadStatus,
    InitializationOnlyStatus,
    SaveCounter,
)
from mwms_mpi.train._worker_dirs import (
    prepare_worker_temp_dir,
    remove_worker_temp_dir,
    sweep_stale_worker_dirs,
    worker_temp_dir,
)

_RESERVED = ("save_counter",)
_OP = "checkpoint"


# -- what is trackable ---------------------------------------------------------------------------


def _is_variable(obj: Any) -> bool:
    return callable(getattr(obj, "assign", None)) and (
        callable(getattr(obj, "numpy", None)) or callable(getattr(obj, "read_value", None))
    )


def _is_array(obj: Any) -> bool:
    """A numpy array (not of objects), or a CuPy array: saved from the host, restored in place."""
    return (isinstance(obj, np.ndarray) and obj.dtype != object) or _arrays.is_device_array(obj)


def _is_container(obj: Any) -> bool:
    if isinstance(obj, (Checkpoint, Mapping, list, tuple)):
        return True
    if isinstance(obj, (types.ModuleType, type, types.FunctionType, types.MethodType)):
        return False
    if callable(getattr(obj, "_trackable_children", None)):
        return True
    module = getattr(type(obj), "__module__", "") or ""
    return hasattr(obj, "__dict__") and not module.startswith("mwms_mpi.")


def _is_trackable(obj: Any) -> bool:
    return _is_variable(obj) or _is_array(obj) or _is_container(obj)


def _escape(name: str) -> str:
    """TF's ``_escape_local_name``: ``.`` becomes ``..`` and ``/`` becomes ``.S``."""
    return name.replace(".", "..").replace("/", ".S")


def _children(obj: Any) -> list[tuple[str, Any]]:
    """The named children of a container, in a deterministic order (the same on every worker)."""
    if isinstance(obj, Checkpoint):
        items: list[tuple[str, Any]] = list(obj._children.items())
    elif isinstance(obj, Mapping):
        items = sorted(((str(k), v) for k, v in obj.items()), key=lambda item: item[0])
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    elif callable(getattr(obj, "_trackable_children", None)):
        items = list(obj._trackable_children().items())
    else:
        items = sorted((k, v) for k, v in vars(obj).items() if not k.startswith("_"))
    return items


def _leaves(objects: Mapping[str, Any]) -> Iterator[tuple[str, Any, Any, str]]:
    """Yields ``(key, leaf, parent, name)`` for every variable or array under ``objects``.

    Order: the ``Checkpoint``'s children in the order they were given, each walked depth-first
    with dict keys and attribute names sorted. An object reached again inside itself (a cycle)
    is skipped.
    """
    stack: list[int] = []

    def walk(prefix: str, obj: Any) -> Iterator[tuple[str, Any, Any, str]]:
        stack.append(id(obj))
        try:
            for name, child in _children(obj):
                key = f"{prefix}{_escape(name)}"
                if _is_variable(child) or _is_array(child):
                    yield key, child, obj, name
                elif _is_container(child) and id(child) not in stack:
                    yield from walk(key + "/", child)
        finally:
            stack.pop()

    for name, child in objects.items():
        if _is_variable(child) or _is_array(child):
            yield _escape(name), child, objects, name
        else:
            yield from walk(_escape(name) + "/", child)


def _read(leaf: Any) -> np.ndarray:
    """The value to save: ``numpy()`` (or ``read_value()``) of a variable; an array as is."""
    if _is_array(leaf):
        value = leaf
    elif callable(getattr(leaf, "numpy", None)):
        value = leaf.numpy()
    else:
        value = leaf.read_value()
    array = np.asarray(_arrays.to_host(value))  # device values are saved from a host copy
    if array.dtype == object:
        raise ValueError(f"Cannot checkpoint a value of dtype object: {leaf!r}")
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    return array


# -- the distribution ----------------------------------------------------------------------------


def strategy_for(objects: Mapping[str, Any] | Checkpoint) -> Any:
    """The strategy a checkpoint (of ``objects``) saves under, and its preemption handler
    agrees over: the current one, else the first saved variable's, else the default one."""
    if has_strategy():
        return get_strategy()
    children = objects._children if isinstance(objects, Checkpoint) else objects
    for _, leaf, _, _ in _leaves(children):
        strategy = getattr(leaf, "distribute_strategy", None)
        if strategy is not None:
            return strategy
    return get_strategy()


# -- Checkpoint ----------------------------------------------------------------------------------


class Checkpoint:
    """Manages saving/restoring trackable values to disk (``tf.train.Checkpoint``).

    Args:
      root: optional trackable whose children are saved at the top level of the checkpoint
        (``root.dense.kernel`` is saved as ``dense/kernel``).
      **kwargs: keyword arguments are set as attributes of this object, and are saved with the
        checkpoint. Values must be trackable objects (variables, arrays, containers of them).

    Raises:
      ValueError: if a value in ``kwargs`` (or ``root``) is not trackable.
      AttributeError: if a keyword argument is named ``save_counter``.
    """

    def __init__(self, root: Any = None, **kwargs: Any) -> None:
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_save_counter", SaveCounter())
        if root is not None:
            if not _is_container(root):
                raise _not_trackable("root", root)
            for name, child in _children(root):
                if _is_trackable(child):
                    self._children[name] = child
        for name, value in sorted(kwargs.items()):
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _RESERVED:
            raise AttributeError(f"property '{name}' of 'Checkpoint' object has no setter")
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if not _is_trackable(value):
            raise _not_trackable(name, value)
        self._children[name] = value

    def __getattr__(self, name: str) -> Any:
        children = self.__dict__.get("_children", {})
        if name in children:
            return children[name]
        raise AttributeError(f"'Checkpoint' object has no attribute '{name}'")

    @property
    def save_counter(self) -> SaveCounter:
        """Incremented when ``save()`` is called. Used to number checkpoints."""
        return self._save_counter

    def save(self, file_prefix: str, options: Any = None) -> str:
        """Saves a training checkpoint and provides basic checkpoint management.

        Numbers the checkpoint with ``save_counter`` (``file_prefix-1``, ``file_prefix-2``, ...)
        and records it in the directory's ``checkpoint`` state file, which
        ``mwms_mpi.train.latest_checkpoint`` reads. Every worker must call it.

        Args:
          file_prefix: a prefix to use for the checkpoint filenames (``/path/to/directory/ckpt``).
          options: accepted for TF's signature; unused.

        Returns:
          The full path to the checkpoint (the chief's path, on every worker).
        """
        self._save_counter.assign_add(1)
        path = f"{os.fspath(file_prefix)}-{int(self._save_counter)}"

        def record(written: str) -> None:
            directory = os.path.dirname(written)
            state = _state.CheckpointState(written, [written])
            _state.write_state(directory, state)

        return self._write(path, commit=record)

    def write(self, file_prefix: str, options: Any = None) -> str:
        """Writes a training checkpoint: no numbering, no state file, ``save_counter`` unchanged.

        Every worker must call it.

        Args:
          file_prefix: the prefix of the checkpoint's files.
          options: accepted for TF's signature; unused.

        Returns:
          The full path to the checkpoint (i.e. ``file_prefix``).
        """
        return self._write(os.fspath(file_prefix))

    def _write(self, file_prefix: str, commit: Callable[[str], None] | None = None) -> str:
        """Reads every value on every worker, writes (chief: real path; others: temp dir).

        ``commit(file_prefix)`` runs on the chief after the index is in place and before the
        workers agree, so the state file is up to date when ``save`` returns on any worker.
        """
        values = [(key, _read(leaf)) for key, leaf, _, _ in _leaves(self._children)]
        values.append(("save_counter", self._save_counter.read_value()))
        strategy = strategy_for(self._children)
        chief = bool(strategy.extended.should_checkpoint)
        directory = os.path.dirname(file_prefix) or "."
        temp_dir = None if chief else worker_temp_dir(directory, strategy)
        prepared: str | None = None  # the temp dir this worker checked: only it is removed
        failure: Exception | None = None
        try:
            if temp_dir is None:
                os.makedirs(directory, exist_ok=True)
            else:
                prepare_worker_temp_dir(directory, temp_dir)
                prepared = temp_dir
            write_dir = directory if temp_dir is None else temp_dir
            prefix = os.path.join(write_dir, os.path.basename(file_prefix))
            _format.write_checkpoint(prefix, values, int(self._save_counter))
            if chief and commit is not None:
                commit(file_prefix)
        except Exception as exc:
            failure = exc
        finally:
            if prepared is not None:
                remove_worker_temp_dir(directory, prepared)
        communicator = getattr(strategy.extended, "communicator", None)
        failed = failure is not None
        if communicator is not None:
            failed = communicator.min_max(int(failed), "checkpoint written")[1] == 1
        if failure is not None:
            raise failure
        if failed:
            raise errors.UnknownError(
                None,
                _OP,
                f"Writing checkpoint {file_prefix} failed on another worker; see its error.",
            )
        if chief:
            sweep_stale_worker_dirs(directory, strategy)
        return file_prefix

    def read(self, save_path: str, options: Any = None) -> CheckpointLoadStatus:
        """Reads a training checkpoint written with ``write`` (or ``save``).

        Args:
          save_path: the path to the checkpoint as returned by ``write``.
          options: accepted for TF's signature; unused.

        Returns:
          A load status object with ``assert_consumed`` and ``expect_partial``.

        Raises:
          NotFoundError: if there is no checkpoint at ``save_path``.
          DataLossError: if the checkpoint's files are incomplete or corrupt.
          ValueError: if a saved shape differs from the object's shape.
        """
        return self._restore(os.fspath(save_path))

    def restore(self, save_path: str | None, options: Any = None) -> CheckpointLoadStatus:
        """Restores a training checkpoint.

        Restores this ``Checkpoint`` and any objects it depends on: arrays in place, variables
        with ``assign`` (every replica of a distributed variable gets the saved value), and
        ``save_counter``. Nothing is changed if any value fails to load. Every worker reads the
        files itself, so any number of workers can restore what any number saved.

        Args:
          save_path: the path to the checkpoint, as returned by ``save`` or
            ``mwms_mpi.train.latest_checkpoint``. If ``None``, nothing is restored.
          options: accepted for TF's signature; unused.

        Returns:
          A load status object (``assert_consumed``, ``assert_existing_objects_matched``,
          ``expect_partial``); for ``save_path=None`` an ``InitializationOnlyStatus``.

        Raises:
          NotFoundError: if there is no checkpoint at ``save_path``.
          DataLossError: if the checkpoint's files are incomplete or corrupt.
          ValueError: if a saved shape differs from the object's shape.
        """
        if save_path is None:
            return InitializationOnlyStatus()
        return self._restore(os.fspath(save_path))

    def _restore(self, save_path: str) -> CheckpointLoadStatus:
        data = _format.read_checkpoint(save_path)
        plan: list[tuple[Any, Any, str, np.ndarray]] = []
        unmatched: list[str] = []
        used: set[str] = set()
        for key, leaf, parent, name in _leaves(self._children):
            if key not in data.arrays:
                unmatched.append(key)
                continue
            plan.append((leaf, parent, name, _checked(key, leaf, data.arrays[key])))
            used.add(key)
        for leaf, _, _, value in plan:
            if _is_array(leaf):  # a CuPy array gets the saved value on its GPU
                xp = _arrays.array_module(leaf)
                xp.copyto(leaf, _arrays.like(value, leaf), casting="unsafe")
            elif _takes_read_value(leaf):
                # No read back: reading a SyncOnRead variable is a collective (and raises for
                # aggregation NONE), and TF's restore does not read either.
                leaf.assign(value, read_value=False)
            else:
                leaf.assign(value)
        if "save_counter" in data.arrays:
            self._save_counter.assign(data.arrays["save_counter"])
            used.add("save_counter")
        unused = [key for key in data.arrays if key not in used]
        return CheckpointLoadStatus(save_path, unused, unmatched)


def _checked(key: str, leaf: Any, value: np.ndarray) -> np.ndarray:
    """``value`` cast for ``leaf``, or ValueError if its shape or kind cannot be restored."""
    shape = getattr(leaf, "shape", None)
    if shape is not None and tuple(shape) != value.shape:
        raise ValueError(
            f"Received incompatible tensor with shape {value.shape} when attempting to restore "
            f"variable with shape {tuple(shape)} and name {key}."
        )
    dtype = getattr(leaf, "dtype", None)
    try:
        target = np.dtype(dtype) if dtype is not None else value.dtype
    except TypeError:
        target = value.dtype
    if not np.can_cast(value.dtype, target, casting="same_kind"):
        raise ValueError(
            f"Cannot restore {key}: the checkpoint holds {value.dtype}, the object is {target}."
        )
    if _is_array(leaf) and not getattr(leaf.flags, "writeable", True):  # CuPy has no such flag
        raise ValueError(f"Cannot restore {key} in place: the array is read-only.")
    return value.astype(target, copy=False)


def _not_trackable(name: str, value: Any) -> ValueError:
    return ValueError(
        f"`Checkpoint` was expecting {name} to be a trackable object (an object derived from "
        f"`Trackable`), got {value!r}. Trackable here: variables (with `assign` and `numpy`), "
        "numpy arrays, and dicts, lists, Checkpoints and objects holding them."
    )


def _takes_read_value(leaf: Any) -> bool:
    """Whether ``leaf.assign`` accepts ``read_value`` (mwms_mpi and TF variables do)."""
    try:
        return "read_value" in inspect.signature(leaf.assign).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False

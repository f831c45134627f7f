"""Restoring saved values into objects, as TF's restore does: checked, never cast, and deferred.

A :class:`Restoration` is one ``restore``/``read`` (TF's ``_CheckpointRestoreCoordinator``): the
saved values by key and which of them found their object. :func:`restore_into` checks every
value against its object, then assigns them all, so a value that does not fit changes nothing.
The checks come in TF's order: first every dtype (TF's ``RestoreV2`` reads all values and
refuses another dtype with ``InvalidArgumentError``; nothing is cast), then every shape (TF
compares it as it assigns, ``ValueError``), so with both kinds of mismatch TF's error is raised.

Values whose object does not exist yet are kept (TF's deferred restoration) by the nearest
existing parent, in ``_deferred``'s registry, and assigned when the object is created: an
optimizer's slots and ``iterations`` made by its first step, a ``mwms_mpi.Module``'s lazily
built variables, a ``Checkpoint`` attribute set after ``restore``. A value is assigned at most
once per restore, so an object that already got its value (and trained since) is never set
back.

A distributed variable is restored as TF's restore ops do, in any context: every component gets
the value; a ``SyncOnRead`` variable with ``SUM`` aggregation gets ``value / num_replicas_in_sync``
cast back to its dtype (TF's ``truediv`` dtypes), so the sum it reads stays the saved one.

When a restoration is garbage collected with values no object took, and ``expect_partial`` was
not called, each is logged as TF logs it.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mwms_mpi import _arrays, errors
from mwms_mpi._tf_text import tf_dtype_name
from mwms_mpi.train import _deferred
from mwms_mpi.train._walk import breadth_first, children, nodes, pretty
from mwms_mpi.types import VariableSynchronization
from mwms_mpi.values.aggregation import on_read_component_value
from mwms_mpi.values.distributed_variable import DistributedVariable

_LOG = logging.getLogger(__name__)
_sequence = itertools.count(1)
# TF's names of dtypes, for its RestoreV2 message


@dataclass
class _Progress:
    """What the finalizer of a restoration needs (it must not hold the restoration)."""

    path: str
    keys: list[str]
    matched: set[str] = field(default_factory=set)
    partial: bool = False
    node_of: dict[str, str] = field(default_factory=dict)  # alias key -> first key
    bound: set[str] = field(default_factory=set)  # first keys whose object has its value

    def unused(self) -> list[str]:
        return [
            key
            for key in self.keys
            if key not in self.matched and self.node_of.get(key, key) not in self.bound
        ]


def _warn_unused(progress: _Progress) -> None:
    """TF's ``_CheckpointRestoreCoordinatorDeleter.__del__``: log the values no object took."""
    unused = [] if progress.partial else progress.unused()
    if not unused:
        return
    _LOG.warning(
        "Detecting that an object or model or mwms_mpi.train.Checkpoint is being deleted with "
        "unrestored values (from %s). See the following logs for the specific values in "
        "question. To silence these warnings, use `status.expect_partial()`.",
        progress.path,
    )
    for key in unused:
        _LOG.warning(
            "Value in checkpoint could not be found in the restored object: %s", pretty(key)
        )


class Restoration:
    """The values of one restore, and which of them were assigned to an object so far."""

    def __init__(
        self,
        path: str,
        arrays: Mapping[str, np.ndarray],
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        self.path = path
        self.arrays = dict(arrays)  # the values not assigned yet
        self.sequence = next(_sequence)
        self.progress = _Progress(path, list(self.arrays), node_of=dict(aliases or {}))
        self._holders: dict[str, Any] = {}  # first key -> (a weak reference to) its object
        self._bound: dict[int, Any] = {}  # id -> (a weak reference to) an object bound here
        weakref.finalize(self, _warn_unused, self.progress)

    def has_matched(self, key: str, leaf: Any) -> bool:
        """Whether ``leaf``, found under ``key``, was matched by this restore: its key was, or
        a saved object was bound to this very leaf under any name (TF binds objects, not
        names: an object bound to one saved object counts as matched wherever it is)."""
        if key in self.matched:
            return True
        holder = self._bound.get(id(leaf))
        return holder is not None and holder() is leaf

    def bind(self, found: list[tuple[str, Any]]) -> set[str]:
        """The keys of ``found`` (``(key, leaf)`` in walk order) whose object takes the saved
        value: as TF binds each saved object to the first Python object its breadth-first walk
        reaches it by, an object saved under several names (``aliases``) gives its value to
        one object only; another object under another of those names gets none and counts as
        unmatched (the same object under all of them matches all)."""
        objects = dict(found)
        takes: set[str] = set()
        for key in breadth_first([key for key, _ in found]):
            node, leaf = self.progress.node_of.get(key, key), objects[key]
            holder = self._holders.get(node)
            if holder is None:
                try:
                    holder = weakref.ref(leaf)
                except TypeError:  # cannot be weakly referenced: held
                    holder = lambda leaf=leaf: leaf  # noqa: E731
                self._holders[node] = self._bound[id(leaf)] = holder
                self.progress.bound.add(node)
            elif holder() is not leaf:
                continue
            takes.add(key)
        return takes

    @property
    def matched(self) -> set[str]:
        """The keys whose value was assigned to an object."""
        return self.progress.matched

    def unused(self) -> list[str]:
        """The keys whose value no object took (yet), in saved order."""
        return self.progress.unused()

    def expect_partial(self) -> None:
        """No warnings about unused values when this restoration is dropped."""
        self.progress.partial = True

    def waiting_parents(self) -> set[str]:
        """The keys of the objects that unused values would be children of (``""``: the root)."""
        parents: set[str] = set()
        for key in self.unused():
            parts = key.split("/")
            parents.update("/".join(parts[:i]) for i in range(len(parts)))
        return parents


@dataclass(frozen=True)
class _Pending:
    """``restoration``'s values for the children of the object at ``prefix`` (``"a/b/"``)."""

    restoration: Restoration
    prefix: str

    @property
    def sequence(self) -> int:
        return self.restoration.sequence

    def place(self, obj: Any) -> bool:
        restore_into(dict(children(obj)), self.restoration, self.prefix, deferred=True)
        return self.prefix.rstrip("/") not in self.restoration.waiting_parents()


def restore_into(
    objects: Mapping[str, Any], restoration: Restoration, prefix: str = "", deferred: bool = False
) -> None:
    """Restores the leaves under ``objects`` (keys ``prefix + name``) from ``restoration``.

    Every value is checked before any is assigned. Containers under which values still wait
    are registered for restore-on-create.

    Args:
      objects: named children, e.g. a ``Checkpoint``'s.
      restoration: the saved values.
      prefix: the key of the object holding ``objects`` plus ``/``, or ``""`` at the root.
      deferred: only assign values not assigned yet, and none to an object this or a newer
        restore gave a value (a restore-on-create pass; TF's ``_update_uid`` rule): such a
        value counts as matched, as in TF.

    Raises:
      ValueError: a saved shape differs from the object's, or the array is read-only.
      InvalidArgumentError: a saved dtype differs from the object's (TF's error).
    """
    plan: list[tuple[str, Any, np.ndarray | None]] = []
    planned: set[int] = set()  # an object under two names takes the first one's value (TF)
    containers = []
    found = []
    for node in nodes(objects, prefix):
        if not node.leaf:
            containers.append(node)
        elif node.key in restoration.arrays and not (deferred and node.key in restoration.matched):
            found.append(node)
    takes = restoration.bind([(node.key, node.obj) for node in found])
    walked = {node.key: position for position, node in enumerate(found)}
    first = {key: position for position, key in enumerate(breadth_first(list(walked)))}
    # an object reached under several names takes the value of the first one TF's
    # breadth-first walk reaches it by
    for node in sorted(found, key=lambda node: first[node.key]):
        if node.key in takes:
            if id(node.obj) in planned or (
                deferred and _deferred.restored_since(node.obj, restoration.sequence)
            ):
                plan.append((node.key, node.obj, None))  # matched, not assigned
                continue
            planned.add(id(node.obj))
            plan.append((node.key, node.obj, restoration.arrays[node.key]))
    try:  # TF's order: RestoreV2 (breadth first), then the assignments (as walked)
        for check, order in ((check_dtype, first), (check_shape, walked)):
            for key, leaf, saved in sorted(plan, key=lambda item: order[item[0]]):
                if saved is not None:
                    check(key, leaf, saved, restoration.path)
    except (ValueError, errors.InvalidArgumentError):
        if deferred:  # TF pops a deferred value before restoring it: a failed one is spent
            for key, _, _ in plan:
                restoration.matched.add(key)
                restoration.arrays.pop(key, None)
        raise
    for key, leaf, saved in plan:
        if saved is not None:
            assign(leaf, saved)
            _deferred.restored(leaf, restoration.sequence)
        restoration.matched.add(key)
        restoration.arrays.pop(key, None)  # only values still waiting are kept in memory
    waiting = restoration.waiting_parents()
    for node in containers:
        if node.key in waiting:
            wait_on(node.obj, restoration, node.key + "/")


def wait_on(obj: Any, restoration: Restoration, prefix: str) -> None:
    """Keeps ``restoration``'s values under ``prefix`` for when ``obj`` creates them (placed
    when ``obj`` notifies: a ``Checkpoint``, an optimizer, a ``mwms_mpi.Module``)."""
    _deferred.register(obj, _Pending(restoration, prefix))


# -- one value ---------------------------------------------------------------------------------


def check_dtype(key: str, leaf: Any, value: np.ndarray, path: str) -> None:
    """Raises TF's ``RestoreV2`` ``InvalidArgumentError`` unless ``leaf`` has ``value``'s dtype
    (a restore never casts)."""
    dtype = getattr(leaf, "dtype", None)
    try:
        target = np.dtype(dtype) if dtype is not None else value.dtype
    except TypeError:
        target = value.dtype
    if _arrays.native_dtype(target) != value.dtype:
        raise errors.InvalidArgumentError(
            None,
            "RestoreV2",
            f"tensor_name = {key}; expected dtype {tf_dtype_name(target)} does not equal "
            f"original dtype {tf_dtype_name(value.dtype)}. Restoring {pretty(key)} from {path}: "
            f"the object is {target}, the checkpoint holds {value.dtype}; a restore never casts.",
        )


def check_shape(key: str, leaf: Any, value: np.ndarray, path: str) -> None:
    """Raises TF's ``ValueError`` unless ``leaf`` has ``value``'s shape (it names the variable
    as TF does, by its ``name``; an array, which has none, by its key), or if ``leaf`` is a
    read-only array."""
    shape = getattr(leaf, "shape", None)
    if shape is not None and tuple(shape) != value.shape:
        name = getattr(leaf, "name", None)
        raise ValueError(
            f"Received incompatible tensor with shape {value.shape} when attempting to restore "
            f"variable with shape {tuple(shape)} and name "
            f"{name if isinstance(name, str) else key}."
        )
    in_place = _arrays.is_device_array(leaf) or isinstance(leaf, np.ndarray)
    if in_place and not getattr(leaf.flags, "writeable", True):  # CuPy has no such flag
        raise ValueError(f"Cannot restore {key} in place: the array is read-only.")


def _takes_read_value(leaf: Any) -> bool:
    """Whether ``leaf.assign`` accepts ``read_value`` (mwms_mpi and TF variables do)."""
    try:
        return "read_value" in inspect.signature(leaf.assign).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False


def assign(leaf: Any, value: np.ndarray) -> None:
    """Sets ``leaf`` to ``value`` (checked) as TF's restore ops do, never reading it back.

    Reading a SyncOnRead variable back would be a collective (and raises for aggregation NONE).
    """
    if isinstance(leaf, np.ndarray) or _arrays.is_device_array(leaf):
        xp = _arrays.array_module(leaf)  # a CuPy array gets the saved value on its GPU
        xp.copyto(leaf, _arrays.like(value, leaf), casting="unsafe")  # same dtype: exact
    elif isinstance(leaf, DistributedVariable):
        _restore_components(leaf, value)
    elif _takes_read_value(leaf):
        leaf.assign(value, read_value=False)
    else:
        leaf.assign(value)


def _restore_components(var: Any, value: np.ndarray) -> None:
    """TF's ``get_on_write_restore_ops`` / ``get_on_read_restore_ops`` for a distributed one."""
    if var.synchronization == VariableSynchronization.ON_READ:
        value = on_read_component_value(var, value)
    for component in var.values:
        component.assign(value, read_value=False)

"""Restore-on-create's bookkeeping: which objects wait for values a restore could not place yet.

TF keeps, on each trackable object, the checkpoint values meant for children it has not created
yet (``_deferred_dependencies``) and hands them over when the child is created (deferred
restoration): an optimizer's slots and step counter, a layer's lazily built kernel, a
``Checkpoint`` attribute set after ``restore``. Here the same record lives in one registry,
keyed weakly by the parent object, so nothing is stored on user objects and an entry goes away
with its object. An entry is a :class:`Pending` (the restore's values and the parent's key);
:func:`notify` ("``obj`` may have new children") lets each entry of ``obj`` place what it can.

Who notifies:

* ``Checkpoint.__setattr__`` and the ``mwms_mpi.optimizers`` optimizers (after making their step
  counter and slots), explicitly;
* plain Python objects cannot say when they gain an attribute, so while one of them waits for
  values, :func:`watch_attributes` gives it a subclass of its own class (same name, module,
  ``isinstance``, pickling and copying) whose ``__setattr__`` notifies; the object gets its own
  class back as soon as nothing under it waits any more. Objects that cannot change class
  without side effects (built-in types, ``__slots__`` without ``__weakref__``, metaclasses
  other than ``type`` and ``ABCMeta``, classes with ``__init_subclass__``) are not watched:
  their values stay pending, ``assert_consumed`` reports them and they are logged when the
  restore is dropped. ``dict``s and ``list``s cannot be watched either: create their entries
  before restoring.
"""

from __future__ import annotations

import abc
import copyreg
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

_LOCK = threading.RLock()


class Pending(Protocol):
    """Values a restore keeps for children of one object that do not exist yet."""

    @property
    def sequence(self) -> int:
        """Which restore it came from: later restores have larger numbers."""
        ...

    def place(self, obj: Any) -> bool:
        """Places the values whose objects now exist under ``obj``; True when none is left."""
        ...


class _Entry:
    __slots__ = ("pending", "ref", "watched_from")

    def __init__(self, ref: weakref.ref[Any]) -> None:
        self.ref = ref
        self.pending: list[Pending] = []
        self.watched_from: type | None = None  # the object's own class while it is watched


_entries: dict[int, _Entry] = {}


def _forget(key: int) -> Callable[[weakref.ref[Any]], None]:
    def callback(ref: weakref.ref[Any]) -> None:
        with _LOCK:
            entry = _entries.get(key)
            if entry is not None and entry.ref is ref:
                del _entries[key]

    return callback


def register(obj: Any, pending: Pending) -> bool:
    """Records that ``pending`` waits for children of ``obj``; False if ``obj`` cannot be
    weakly referenced (it is then never notified). The latest restore wins for every object
    it reaches: entries of earlier restores on ``obj`` are dropped, and an earlier restore
    registering after a later one is ignored (it could otherwise overwrite the later values)."""
    with _LOCK:
        entry = _entries.get(id(obj))
        if entry is None or entry.ref() is not obj:
            try:
                ref = weakref.ref(obj, _forget(id(obj)))
            except TypeError:
                return False
            entry = _entries[id(obj)] = _Entry(ref)
        if any(p.sequence > pending.sequence for p in entry.pending):
            return True
        entry.pending = [p for p in entry.pending if p.sequence >= pending.sequence]
        if pending not in entry.pending:
            entry.pending.append(pending)
        return True


def clear(obj: Any, before: int) -> None:
    """Drops what restores numbered below ``before`` keep for ``obj`` (a newer one reached it)."""
    with _LOCK:
        entry = _entries.get(id(obj))
        if entry is not None and entry.ref() is obj:
            entry.pending = [p for p in entry.pending if p.sequence >= before]
            _release(obj, entry)


def notify(obj: Any) -> None:
    """``obj`` may have new children: every restore waiting on it places what it can.

    The newest restore goes first. Errors (a shape or dtype that does not match the saved
    value) propagate to the code that created the object, as in TF.
    """
    if not _entries:
        return
    with _LOCK:
        entry = _entries.get(id(obj))
        if entry is None or entry.ref() is not obj or not entry.pending:
            return
        for pending in sorted(entry.pending, key=lambda p: -p.sequence):
            if pending.place(obj) and pending in entry.pending:
                entry.pending.remove(pending)
        _release(obj, entry)


def _release(obj: Any, entry: _Entry) -> None:
    if entry.pending:
        return
    if entry.watched_from is not None:
        object.__setattr__(obj, "__class__", entry.watched_from)
        entry.watched_from = None
    if _entries.get(id(obj)) is entry:
        del _entries[id(obj)]


# -- watching plain objects ----------------------------------------------------------------------

_watch_classes: dict[type, type] = {}


def _new_object(cls: type, *args: Any) -> Any:
    """``copyreg.__newobj__`` under another name: pickle checks that one's class argument
    against the pickled object's (watched) class."""
    return cls.__new__(cls, *args)


def _watchable(cls: type) -> bool:
    """Whether making a subclass of ``cls`` has no side effects: no ``__init_subclass__`` hook
    (a plugin registry, say) and a plain metaclass."""
    if type(cls) not in (type, abc.ABCMeta):
        return False
    return not any("__init_subclass__" in vars(base) for base in cls.__mro__[:-1])


def _watching_class(cls: type) -> type:
    """A subclass of ``cls`` that notifies after each public attribute is set."""
    made = _watch_classes.get(cls)
    if made is not None:
        return made

    def __setattr__(self: Any, name: str, value: Any) -> None:
        super(watching, self).__setattr__(name, value)  # type: ignore[arg-type]
        if not name.startswith("_"):
            notify(self)

    def __reduce_ex__(self: Any, protocol: Any) -> Any:
        # pickle and copy make an object of its own class, never of this one
        object.__setattr__(self, "__class__", cls)
        try:
            reduced = self.__reduce_ex__(protocol)
        finally:
            object.__setattr__(self, "__class__", watching)
        if isinstance(reduced, tuple) and reduced and reduced[0] is copyreg.__newobj__:  # type: ignore[attr-defined]
            reduced = (_new_object, *reduced[1:])
        return reduced

    namespace = {
        "__slots__": (),
        "__setattr__": __setattr__,
        "__reduce_ex__": __reduce_ex__,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    watching: type = type(cls)(cls.__name__, (cls,), namespace)
    _watch_classes[cls] = watching
    return watching


def watch_attributes(obj: Any) -> bool:
    """Makes setting a public attribute of ``obj`` notify, while a restore waits on it.

    Returns False (and changes nothing) if ``obj`` cannot be watched.
    """
    with _LOCK:
        entry = _entries.get(id(obj))
        if entry is None or entry.ref() is not obj or not entry.pending:
            return False
        if entry.watched_from is not None:
            return True
        cls = type(obj)
        if not _watchable(cls):
            return False
        try:
            watching = _watching_class(cls)
            object.__setattr__(obj, "__class__", watching)
        except (TypeError, AttributeError):  # a built-in type, or a layout we can't copy
            return False
        entry.watched_from = cls
        return True

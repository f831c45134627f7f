"""Restore-on-create's bookkeeping: which objects wait for values a restore could not place yet.

TF keeps, on each trackable object, the checkpoint values meant for children it has not created
yet (``_deferred_dependencies``) and hands them over when the child is created (deferred
restoration): an optimizer's slots and step counter, a layer's lazily built kernel, a
``Checkpoint`` attribute set after ``restore``. Here the same record lives in one registry,
keyed weakly by the parent object, so nothing is stored on user objects and an entry goes away
with its object. An entry is a :class:`Pending` (the restore's values and the parent's key);
:func:`notify` ("``obj`` may have new children") lets each entry of ``obj`` place what it can.

Who notifies, as in TF, where only trackable objects (``AutoTrackable.__setattr__``) do:
``Checkpoint.__setattr__``, the ``mwms_mpi.optimizers`` optimizers (after making their step
counter and slots), and :class:`mwms_mpi.Module` (``tf.Module``), whose attribute sets notify.
A plain Python object cannot say when it gains an attribute, and its class is never changed to
make it: values for its children that do not exist at restore time stay pending, reported by
``assert_consumed`` and logged when the restore is dropped (never assigned later, when they
could overwrite what training did since). Build such objects before restoring, or derive them
from ``mwms_mpi.Module``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

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
    """The restores waiting on one live object (held weakly)."""

    __slots__ = ("pending", "ref")

    def __init__(self, ref: weakref.ref[Any]) -> None:
        self.ref = ref
        self.pending: list[Pending] = []


_entries: dict[int, _Entry] = {}


def _forget(table: dict[int, Any], key: int) -> Callable[[weakref.ref[Any]], None]:
    """A weakref callback that drops ``table[key]`` when its object dies (unless the key was
    reused by a newer object: each record holds its own ``ref``)."""

    def callback(ref: weakref.ref[Any]) -> None:
        with _LOCK:
            record = table.get(key)
            if record is not None and record.ref is ref:
                del table[key]

    return callback


def register(obj: Any, pending: Pending) -> bool:
    """Records that ``pending`` waits for children of ``obj``; False if ``obj`` cannot be
    weakly referenced (it is then never notified). Every restore's entry is kept, as TF keeps
    each restore's deferred values: :func:`notify` lets the newest place first, and a value is
    never placed into an object this or a newer restore gave one (:func:`restored_since`)."""
    with _LOCK:
        entry = _entries.get(id(obj))
        if entry is None or entry.ref() is not obj:
            try:
                ref = weakref.ref(obj, _forget(_entries, id(obj)))
            except TypeError:
                return False
            entry = _entries[id(obj)] = _Entry(ref)
        if pending not in entry.pending:
            entry.pending.append(pending)
        return True


# The restore (its sequence number) that last gave each live object its value: TF's
# ``_update_uid``, which keeps an earlier restore's waiting value off an object a later one set.
class _Restored(NamedTuple):
    ref: weakref.ref[Any]
    sequence: int


_restored_by: dict[int, _Restored] = {}


def restored(leaf: Any, sequence: int) -> None:
    """Records that restore ``sequence`` gave ``leaf`` its value."""
    try:
        ref = weakref.ref(leaf, _forget(_restored_by, id(leaf)))
    except TypeError:  # cannot be weakly referenced: no record, every restore may set it
        return
    with _LOCK:
        _restored_by[id(leaf)] = _Restored(ref, sequence)


def restored_since(leaf: Any, sequence: int) -> bool:
    """Whether restore ``sequence`` or a newer one gave ``leaf`` its value already (TF's
    ``_update_uid >= restore_uid``: an object reached again, under another name, by the same
    restore keeps the value it got first)."""
    with _LOCK:
        record = _restored_by.get(id(leaf))
    return record is not None and record.ref() is leaf and record.sequence >= sequence


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


def notify_or_undo(obj: Any, undo: Callable[[], None]) -> None:
    """:func:`notify` after an attribute of ``obj`` was set; if a waiting value does not fit
    the new attribute, ``undo`` unsets it before the error propagates, as in TF, where the
    assignment raises and leaves the object without that attribute (the value is spent:
    ``_restore.restore_into`` marks it matched)."""
    try:
        notify(obj)
    except BaseException:
        undo()
        raise


def _release(obj: Any, entry: _Entry) -> None:
    if not entry.pending and _entries.get(id(obj)) is entry:
        del _entries[id(obj)]

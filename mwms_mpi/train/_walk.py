"""What a ``Checkpoint`` saves: the trackable objects under it, walked in one fixed order.

What can be checkpointed (TF calls these trackable objects):

* variables, duck-typed: anything with ``assign(value)`` and ``numpy()`` (or ``read_value()``),
  so ``mwms_mpi.Variable`` and its distributed forms, and user classes alike;
* numpy arrays (not object arrays), restored in place, as a variable would be;
* ``dict``s (string keys: TF refuses another key that maps to a trackable, since ``1`` and
  ``"1"`` would be one key), ``list``s and ``tuple``s of trackables, nested ``Checkpoint``s, and
  plain objects whose public attributes hold trackables (TF's ``AutoTrackable``; every
  attribute of a ``mwms_mpi.Module``, as ``tf.Module``). Other values inside those
  containers (numbers, strings, ``None``) are skipped, as TF skips them; objects of mwms_mpi's
  own classes (strategies, communicators) are never walked into;
* objects that name their children with ``_trackable_children()`` (TF's ``Trackable`` hook),
  such as ``mwms_mpi.optimizers`` optimizers (step counter and slots) and ``Checkpoint``.

Values are saved under their object paths, TF's checkpoint keys without the
``/.ATTRIBUTES/VARIABLE_VALUE`` suffix: ``Checkpoint(model=m)`` with ``m.dense.kernel`` saves
``model/dense/kernel``; a ``/`` or ``.`` inside a name is escaped as ``.S`` and ``..`` as TF does.
The order (a ``Checkpoint``'s children as given, dict keys and attribute names sorted) is the
same on every worker, which matters because reading a ``SyncOnReadVariable`` is a collective.
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mwms_mpi import _arrays
from mwms_mpi.train._format import check_savable_dtype


def is_variable(obj: Any) -> bool:
    """Whether ``obj`` has the variable protocol (``assign`` and ``numpy`` or ``read_value``)."""
    return callable(getattr(obj, "assign", None)) and (
        callable(getattr(obj, "numpy", None)) or callable(getattr(obj, "read_value", None))
    )


def is_array(obj: Any) -> bool:
    """A numpy array (not of objects), or a CuPy array: saved from the host, restored in place."""
    return (isinstance(obj, np.ndarray) and obj.dtype != object) or _arrays.is_device_array(obj)


def is_leaf(obj: Any) -> bool:
    """Whether ``obj`` holds a value of its own (a variable or an array)."""
    return is_variable(obj) or is_array(obj)


def is_container(obj: Any) -> bool:
    """Whether ``obj`` is walked into for trackable children."""
    if isinstance(obj, (Mapping, list, tuple)):
        return True
    if isinstance(obj, (types.ModuleType, type, types.FunctionType, types.MethodType)):
        return False
    if callable(getattr(obj, "_trackable_children", None)):
        return True
    module = getattr(type(obj), "__module__", "") or ""
    return hasattr(obj, "__dict__") and not module.startswith("mwms_mpi.")


def is_trackable(obj: Any) -> bool:
    """Whether ``obj`` may be given to a ``Checkpoint``."""
    return is_leaf(obj) or is_container(obj)


def escape(name: str) -> str:
    """TF's ``_escape_local_name``: ``.`` becomes ``..`` and ``/`` becomes ``.S``."""
    return name.replace(".", "..").replace("/", ".S")


def pretty(key: str) -> str:
    """A key as TF names the object in its messages: ``model/dense`` is ``(root).model.dense``."""
    return ".".join(["(root)", *key.split("/")]) if key else "(root)"


def children(obj: Any) -> list[tuple[str, Any]]:
    """The named children of a container, in a deterministic order (the same on every worker)."""
    if isinstance(obj, Mapping):
        if any(not isinstance(k, str) and is_trackable(v) for k, v in obj.items()):
            raise ValueError(  # TF's: "1" and 1 would be one key
                f"Unable to save the object {obj!r} (a dictionary wrapper constructed "
                "automatically on attribute assignment). The wrapped dictionary contains a "
                "non-string key which maps to a trackable object or mutable data structure.\n\n"
                "If you don't need this dictionary checkpointed, wrap it in a non-trackable "
                "object; it will be subsequently ignored."
            )
        return sorted(((k, v) for k, v in obj.items() if isinstance(k, str)), key=lambda kv: kv[0])
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj)]
    if callable(getattr(obj, "_trackable_children", None)):
        return list(obj._trackable_children().items())
    return sorted((k, v) for k, v in vars(obj).items() if not k.startswith("_"))


@dataclass(frozen=True)
class Node:
    """One object under a checkpoint: its key, the object, and whether it is a leaf."""

    key: str
    obj: Any
    leaf: bool


def nodes(objects: Mapping[str, Any], prefix: str = "") -> Iterator[Node]:
    """Every leaf and container under ``objects`` (named children), depth first.

    Keys start with ``prefix`` (``"model/"`` for the children of the object at ``model``).
    Order: ``objects`` in the order given, each walked depth-first with dict keys and attribute
    names sorted. An object reached again inside itself (a cycle) is skipped, and so is any
    child that is neither a leaf nor a container.
    """
    stack: list[int] = []

    def walk(key: str, obj: Any) -> Iterator[Node]:
        if is_leaf(obj):
            yield Node(key, obj, True)
            return
        if not is_container(obj) or id(obj) in stack:
            return
        yield Node(key, obj, False)
        stack.append(id(obj))
        try:
            for name, child in children(obj):
                yield from walk(f"{key}/{escape(name)}", child)
        finally:
            stack.pop()

    for name, child in objects.items():
        yield from walk(prefix + escape(name), child)


def leaves(objects: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(key, leaf)`` for every variable or array under ``objects``, in :func:`nodes` order."""
    for node in nodes(objects, prefix):
        if node.leaf:
            yield node.key, node.obj


def breadth_first(keys: list[str]) -> list[str]:
    """Leaf ``keys`` in :func:`nodes` (depth-first) order, put in TF's breadth-first order of
    its object-graph walk: by depth, then as their parents are ordered (a container's place
    is that of its first leaf, since a depth-first walk visits a subtree in one run)."""
    first: dict[str, int] = {}
    for position, key in enumerate(keys):
        parts = key.split("/")
        for depth in range(1, len(parts) + 1):
            first.setdefault("/".join(parts[:depth]), position)

    def rank(key: str) -> tuple[int, list[int]]:
        parts = key.split("/")
        return len(parts), [first["/".join(parts[:d])] for d in range(1, len(parts) + 1)]

    return sorted(keys, key=rank)


def aliases(found: list[tuple[str, Any]]) -> dict[str, str]:
    """``key -> first key`` for each leaf reached again under another name: TF saves such an
    object once, under the name its breadth-first walk reaches first, and a restore gives its
    value to one object only (``_restore.Restoration.bind``)."""
    objects = dict(found)
    first: dict[int, str] = {}
    result: dict[str, str] = {}
    for key in breadth_first([key for key, _ in found]):
        primary = first.setdefault(id(objects[key]), key)
        if primary != key:
            result[key] = primary
    return result


# -- values to save ------------------------------------------------------------------------------


def read_for_save(key: str, leaf: Any) -> np.ndarray:
    """The host value to save for ``leaf``: ``numpy()`` (or ``read_value()``); an array as is.

    Raises:
      ValueError: if the value's dtype would not restore bit for bit (object, str, bytes,
        structured or extension dtypes): nothing is written.
    """
    if is_array(leaf):
        value = leaf
    elif callable(getattr(leaf, "numpy", None)):
        value = leaf.numpy()
    else:
        value = leaf.read_value()
    array = np.asarray(_arrays.to_host(value))  # device values are saved from a host copy
    if array.dtype == object:
        raise ValueError(f"Cannot checkpoint a value of dtype object: {key} = {leaf!r}")
    array = _arrays.native_array(array)
    check_savable_dtype(key, array.dtype)
    return array

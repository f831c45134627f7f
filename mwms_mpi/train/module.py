"""``tf.Module``'s role for checkpoints: an object whose new attributes get restored values.

TF restores a value whose object does not exist yet when the object is created (deferred
restoration), because its trackable classes (``tf.Module``, Keras layers, optimizers) tell the
checkpoint when an attribute is set. A plain Python object cannot, so a model whose variables
are made lazily (built on first call, as a Keras layer builds its kernel) derives from
:class:`Module`; its attribute sets then hand a pending restore its values, exactly as TF's do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from mwms_mpi.train import _deferred
from mwms_mpi.train._walk import is_variable


class Module:
    """Base class for objects that hold variables (``tf.Module``'s part that checkpoints use).

    Every attribute counts, private ones (``self._w``) included, as ``tf.Module`` tracks them:
    a ``Checkpoint`` saves them, and setting one tells a pending ``Checkpoint.restore`` that
    the object may have a new child, which then gets its saved value at once
    (restore-on-create). ``variables`` and ``trainable_variables`` collect the variables under
    the module as ``tf.Module`` does: attributes in name order, into nested modules, lists,
    tuples and dicts (keys in order).

    Args:
      name: the module's name (the class name in snake case, as TF, when ``None``).
    """

    def __init__(self, name: str | None = None) -> None:
        object.__setattr__(self, "_name", name or _snake(type(self).__name__))

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        _deferred.notify(self)  # a restore may keep this attribute's values

    def _trackable_children(self) -> dict[str, Any]:
        """What a ``Checkpoint`` saves of the module: every attribute but its name, by name."""
        return {k: v for k, v in sorted(vars(self).items()) if k != "_name"}

    @property
    def name(self) -> str:
        """The module's name."""
        return str(self.__dict__.get("_name") or _snake(type(self).__name__))

    @property
    def variables(self) -> tuple[Any, ...]:
        """Every variable under this module, each once, in attribute-name order."""
        return tuple(_variables(self, set()))

    @property
    def trainable_variables(self) -> tuple[Any, ...]:
        """The variables under this module that are trainable."""
        return tuple(v for v in self.variables if getattr(v, "trainable", True))


def _variables(obj: Any, seen: set[int]) -> Iterator[Any]:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if is_variable(obj):
        yield obj
        return
    if isinstance(obj, dict):
        items = [obj[k] for k in sorted(obj, key=repr)]
    elif isinstance(obj, list | tuple):
        items = list(obj)
    elif isinstance(obj, Module):
        items = list(obj._trackable_children().values())
    else:
        return
    for item in items:
        yield from _variables(item, seen)


def _snake(name: str) -> str:
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i and (not name[i - 1].isupper() or name[i + 1 : i + 2].islower()):
            out.append("_")
        out.append(c.lower())
    return "".join(out)

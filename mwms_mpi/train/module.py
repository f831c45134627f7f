"""``tf.Module``'s role for checkpoints: an object whose new attributes get restored values.

TF restores a value whose object does not exist yet when the object is created (deferred
restoration), because its trackable classes (``tf.Module``, Keras layers, optimizers) tell the
checkpoint when an attribute is set. A plain Python object cannot, so a model whose variables
are made lazily (built on first call, as a Keras layer builds its kernel) derives from
:class:`Module`; its attribute sets then hand a pending restore its values, exactly as TF's do.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from mwms_mpi import _name_scope, nest
from mwms_mpi.train import _deferred
from mwms_mpi.train._walk import is_variable

# TF's module.py: ``_CAMEL_TO_SNAKE_R`` and ``_VALID_IDENTIFIER``
_CAMEL_TO_SNAKE = re.compile(r"((?<=[a-z0-9])[A-Z]|(?!^)[A-Z](?=[a-z]))")
_VALID_IDENTIFIER = re.compile(r"^[a-zA-Z_]([a-zA-Z0-9_])*$")
_NOT_CHILDREN = frozenset(("_name", "_name_scope"))  # the module's own, never saved


class Module:
    """Base class for objects that hold variables (``tf.Module``'s part that checkpoints use).

    Every attribute counts, private ones (``self._w``) included, as ``tf.Module`` tracks them:
    a ``Checkpoint`` saves them, and setting one tells a pending ``Checkpoint.restore`` that
    the object may have a new child, which then gets its saved value at once
    (restore-on-create). ``variables`` and ``trainable_variables`` collect the variables under
    the module in ``tf.Module``'s order (TF's ``_flatten_module``, see :func:`_flatten`).

    Args:
      name: the module's name (the class name in snake case, as TF, when ``None``).

    Raises:
      ValueError: for a ``name`` that is not a Python identifier (TF's message).
    """

    def __init__(self, name: str | None = None) -> None:
        if name is None:
            name = _snake(type(self).__name__)
        elif not _VALID_IDENTIFIER.match(name):
            raise ValueError(
                f"{name!r} is not a valid module name. Module names must be valid Python "
                "identifiers (e.g. a valid class name)."
            )
        object.__setattr__(self, "_name", name)
        # TF's: the scope entered once here, kept whole (``outer/name/``), so that entering it
        # later, anywhere, names variables as if inside the scope the module was made in
        with _name_scope.name_scope(name) as scope:
            object.__setattr__(self, "_name_scope", _name_scope.name_scope(scope))

    def __setattr__(self, name: str, value: Any) -> None:
        missing = object()
        previous = self.__dict__.get(name, missing)
        object.__setattr__(self, name, value)

        def undo() -> None:
            if previous is missing:
                object.__delattr__(self, name)
            else:
                object.__setattr__(self, name, previous)

        _deferred.notify_or_undo(self, undo)  # a restore may keep this attribute's values

    def _trackable_children(self) -> dict[str, Any]:
        """What a ``Checkpoint`` saves of the module: every attribute but its name, by name."""
        return {k: v for k, v in sorted(vars(self).items()) if k not in _NOT_CHILDREN}

    @property
    def name(self) -> str:
        """The module's name."""
        return str(self.__dict__.get("_name") or _snake(type(self).__name__))

    @property
    def name_scope(self) -> _name_scope.name_scope:
        """``tf.Module.name_scope``: the module's name scope, made with the module (so
        ``outer/module/`` for a module made inside ``name_scope("outer")``). Variables made
        in ``with self.name_scope:`` are named ``outer/module/<name>:0``."""
        scope = self.__dict__.get("_name_scope")
        if scope is None:  # a subclass that did not call Module.__init__
            scope = _name_scope.name_scope(f"{self.name}/")
        return scope

    @classmethod
    def with_name_scope(cls, method: Callable[..., Any]) -> Callable[..., Any]:
        """``tf.Module.with_name_scope``: decorates a method to run in ``self.name_scope``."""

        @functools.wraps(method)
        def method_with_name_scope(self: Module, *args: Any, **kwargs: Any) -> Any:
            with self.name_scope:
                return method(self, *args, **kwargs)

        return method_with_name_scope

    @property
    def variables(self) -> tuple[Any, ...]:
        """Every variable under this module, each once: its own, then its submodules' (TF's
        order, :func:`_flatten`).

        Raises:
          ValueError: when an attribute cannot be flattened (a dict with keys of unorderable
            types), naming the attribute as TF does.
        """
        return tuple(_flatten(self, is_variable))

    @property
    def trainable_variables(self) -> tuple[Any, ...]:
        """The variables under this module that are trainable, in the order of ``variables``.

        Raises:
          ValueError: as ``variables``.
        """
        return tuple(
            _flatten(self, lambda v: is_variable(v) and bool(getattr(v, "trainable", False)))
        )

    @property
    def non_trainable_variables(self) -> tuple[Any, ...]:
        """The variables under this module that are not trainable, in the order of
        ``variables``.

        Raises:
          ValueError: as ``variables``.
        """
        return tuple(
            _flatten(self, lambda v: is_variable(v) and not getattr(v, "trainable", False))
        )

    @property
    def submodules(self) -> tuple[Module, ...]:
        """Every module under this one (not itself), each once, in the walk's order
        (TF's ``_flatten`` with a module predicate).

        Raises:
          ValueError: as ``variables``.
        """
        return tuple(_flatten(self, lambda m: isinstance(m, Module)))


def _flatten(
    module: Module, predicate: Callable[[Any], bool], seen: set[int] | None = None
) -> Iterator[Any]:
    """TF's ``_flatten_module``: what ``tf.Module.variables`` walks, in TF's order.

    The module's attributes in sorted name order, each flattened with tf.nest's rules (dict
    keys sorted by the keys themselves, namedtuples by field), give its leaves; every leaf is
    taken once (by identity, across the whole walk), and the module's own matching leaves all
    come before any submodule's, whose walks follow in the order they were found. The order
    matters: optimizers and ``zip(grads, model.trainable_variables)`` pair by position.

    Raises:
      ValueError: "Error processing property ..." when an attribute cannot be flattened
        (TF's text, the container shown as TF's tracking wrappers show it).
    """
    if seen is None:
        seen = {id(module)}
    submodules = []
    attributes = vars(module)
    for key in sorted(attributes):
        prop = attributes[key]
        try:
            leaves = nest.flatten(prop, expand_composites=True)
        except Exception as cause:
            raise ValueError(
                f"Error processing property {key!r} of {_tracked_repr(prop)}"
            ) from cause
        for leaf in leaves:
            if id(leaf) in seen:
                continue
            seen.add(id(leaf))
            if predicate(leaf):
                yield leaf
            if isinstance(leaf, Module):
                submodules.append(leaf)  # walk direct properties first, then recurse
    for submodule in submodules:
        yield from _flatten(submodule, predicate, seen)


def _tracked_repr(value: Any) -> str:
    """``repr`` of an attribute as TF shows it: a ``tf.Module`` wraps the dicts, lists and
    tuples set on it (``DictWrapper``, ``ListWrapper``, ``_TupleWrapper``), nested ones too."""
    if type(value) is dict:
        items = ", ".join(f"{k!r}: {_tracked_repr(v)}" for k, v in value.items())
        return f"DictWrapper({{{items}}})"
    if type(value) is list:
        return f"ListWrapper([{', '.join(_tracked_repr(v) for v in value)}])"
    if type(value) is tuple:
        inner = ", ".join(_tracked_repr(v) for v in value) + ("," if len(value) == 1 else "")
        return f"_TupleWrapper(({inner}))"
    return repr(value)


def _snake(name: str) -> str:
    """TF's ``camel_to_snake``: ``A_B`` is ``a_b``, ``HTTPServer`` ``http_server``."""
    return _CAMEL_TO_SNAKE.sub(r"_\1", name).lower()

"""TF's eager name scopes: ``tf.name_scope``, ``tf.get_current_name_scope``, variable names.

A name scope prefixes the names of the variables made inside it (``m/v:0``), which is all it
does eagerly. The scope is kept per thread, as TF keeps ``context.scope_name`` per thread; so a
replica thread of ``strategy.run`` starts at the root, as TF's do in eager mode (TF's replica
threads enter the captured *graph* scope, which is empty eagerly), while a merge function
runs in the calling thread, in the scope the caller of ``strategy.run`` had. With one local
replica ``fn`` runs in the calling thread (``distribute/mirrored_run.py``): there
:func:`replica_root` and :func:`merge_scope` give it the scopes TF's replica thread and merge
function would have.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

_local = threading.local()


def current_scope() -> str:
    """This thread's scope with its trailing slash (``"a/b/"``), ``""`` at the root."""
    scope: str = getattr(_local, "scope", "")
    return scope


def _set(scope: str) -> None:
    _local.scope = scope


def _compose(outer: str, name: str) -> str:
    """TF's ``name_scope_v2.__enter__`` in eager mode: ``""`` is the root, a trailing slash
    an absolute scope, anything else nested in ``outer``."""
    if not name:
        return ""
    if name[-1] == "/":
        return name
    return f"{outer}{name}/"


def get_current_name_scope() -> str:
    """``tf.get_current_name_scope``: the current scope without its trailing slash."""
    return current_scope().rstrip("/")


def variable_name(name: str | None) -> str:
    """A new variable's ``name`` (TF's ``ResourceVariable``: ``ops.name_scope(name,
    "Variable")`` in the current scope, its trailing slash dropped, ``":0"`` added).

    ``None`` is ``"Variable"``; ``""`` the root (``":0"``, as TF); a trailing slash makes the
    name absolute (``"p/"`` is ``"p:0"`` in any scope: the replicas' components use it).
    """
    scope = _compose(current_scope(), "Variable" if name is None else name)
    return f"{scope[:-1] if scope else scope}:0"


class name_scope:  # TF's name, lower case
    """``tf.name_scope``: a context manager that prefixes the names of new variables.

    Entering returns the new scope with its trailing slash (``"outer/inner/"``); an empty
    name enters the root, a name ending in ``/`` is taken as a whole scope (TF's rules, eager).
    The same object may be entered again, nested or later.

    Args:
      name: the scope's name.

    Raises:
      ValueError: for a name that is not a string (TF's message).
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise ValueError("name for name_scope must be a string.")
        self._name = name
        self._outer: list[str] = []

    @property
    def name(self) -> str:
        """The name given to the constructor."""
        return self._name

    def __enter__(self) -> str:
        outer = current_scope()
        self._outer.append(outer)
        scope = _compose(outer, self._name)
        _set(scope)
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _set(self._outer.pop())


@contextmanager
def entered(scope: str) -> Iterator[None]:
    """Sets this thread's scope to ``scope`` (a whole scope: ``""`` or ending in ``/``) for the
    block: a variable made for replica 0 in a merge function gets replica 0's scope."""
    outer = current_scope()
    _set(scope)
    try:
        yield
    finally:
        _set(outer)


@contextmanager
def replica_root() -> Iterator[None]:
    """The scope of a replica function run in the calling thread: the root, as in TF's replica
    thread; :func:`merge_scope` gives its merge functions back the caller's scope."""
    outer = current_scope()
    stack: list[str] = _local.__dict__.setdefault("callers", [])
    stack.append(outer)
    _set("")
    try:
        yield
    finally:
        stack.pop()
        _set(outer)


@contextmanager
def merge_scope() -> Iterator[None]:
    """A merge function's scope: the one ``strategy.run``'s caller had, where the replica
    function runs in the calling thread (:func:`replica_root`); else the current one."""
    stack: list[str] = _local.__dict__.get("callers", [])
    if not stack:
        yield
        return
    with entered(stack[-1]):
        yield

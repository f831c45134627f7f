"""What the user called: the public API's name and arguments, mixed into every call's agreement.

Two ranks can make the same collective for different reasons: ``strategy.reduce("SUM", v)`` on
one and ``strategy.reduce("MEAN", v)`` on another both sum ``v`` across ranks (MEAN divides
later), ``reduce(..., axis=0)`` and ``axis=None`` may both reduce one equal-sized array, a
SyncOnRead variable's read and a ``strategy.reduce`` may move the same bytes, and
``{"a": x, "b": y}`` and ``{"a": x, "c": y}`` flatten to the same two arrays. The layout alone
cannot tell them apart, so the public API says what it was asked to do with :class:`api_call`
(its purpose, op, axis and the value's nested structure), and the communicator mixes that
context into each call's fingerprint (docs/agreement.md, docs/architecture.md "Every call is
agreed").

The outermost API call wins: ``strategy.reduce`` calls ``extended.reduce_to`` internally, and
the error a user sees must name what the user called. An inner call may only add the value
kind that decides its path (a batch that mixes dense and sparse values, say), which the layout
alone would not show. The context is per thread of execution (a ``ContextVar``), and only the
thread that owns a communicator issues its collectives.

With ``MWMS_MPI_CHECK=callsite`` (a debug mode, see ``agreement.py``) the context also holds
the user's source line: the first calling frame outside this package. A replica function run
in its own thread (k > 1 local replicas) reaches the communicator's thread through
``merge_call``; the line is taken in the replica's thread and handed over (:func:`merge_site`).

An ``api_call`` made with a communicator also keeps a rank from failing alone: an exception
raised on this rank before the call's first agreement (a bad argument found locally) is taken
into the agreement with :meth:`Communicator.refuse`, so every rank raises instead of the others
waiting forever in a collective this rank will never make.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any, Protocol

CallContext = tuple[str, str, str, str, str, str]
"""``(api, op, axis, kind, structure, site)``: the public API's name (its purpose), the op as
named, the axis, the value kind, the value's nested structure (``""``: one dense value) and the
user's source line (``""`` unless ``MWMS_MPI_CHECK=callsite``)."""

_current: ContextVar[CallContext | None] = ContextVar("mwms_mpi_call_context", default=None)
_merge_site: ContextVar[str | None] = ContextVar("mwms_mpi_merge_site", default=None)
_PACKAGE = __name__.split(".", 1)[0]
_PREFIX = _PACKAGE + "."


class _Sites:
    """How many live agreements record call sites (``MWMS_MPI_CHECK=callsite``)."""

    wanted = 0


class Refusing(Protocol):
    """What :class:`api_call` needs of a communicator: its agreed-call count and ``refuse``."""

    size: int

    @property
    def calls(self) -> int: ...

    def refuse(self, error: Exception) -> None: ...


current = _current.get
"""``current()``: the context of the outermost public API call in progress, or ``None`` (the
context variable's own ``get``: the call template reads it on every call)."""


def want_sites(on: bool) -> None:
    """Called by an agreement in ``callsite`` mode when it is built (``True``) and closed."""
    _Sites.wanted += 1 if on else -1


def recording_sites() -> bool:
    """Whether call sites are taken (some communicator runs in ``callsite`` mode)."""
    return _Sites.wanted > 0


def user_site() -> str:
    """``"file.py:42"``: the first calling frame outside this package (its file's base name,
    which the same program has on every rank whatever its path there)."""
    handed = _merge_site.get()
    if handed is not None:
        return handed
    frame: Any = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name != _PACKAGE and not name.startswith(_PREFIX):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


@contextmanager
def merge_site(site: str | None) -> Iterator[None]:
    """Makes ``site`` (taken in a replica's thread) the call site of what runs inside."""
    if site is None:
        yield
        return
    token = _merge_site.set(site)
    try:
        yield
    finally:
        _merge_site.reset(token)


class api_call:
    """Marks a public API call; the outermost one in a thread of execution is the context.

    Args:
      communicator: the communicator the call may use (``None`` when it communicates nothing).
      api: the public name, or the purpose, e.g. ``"Strategy.reduce"`` or
        ``"SyncOnRead read of `accuracy`"``.
      op: the reduction as the user named it (``"MEAN"``), or ``""``.
      axis: the axis argument as text, or ``""``.
      kind: the kind of value that decides the path taken (``"Mirrored"``), or ``""``.
      structure: the value's nested structure (``values.structure.of``), ``""`` for one dense
        value.
    """

    __slots__ = ("_communicator", "_context", "_outermost", "_start", "_token")

    def __init__(
        self,
        communicator: Refusing | None,
        api: str,
        op: str = "",
        axis: str = "",
        kind: str = "",
        structure: str = "",
    ) -> None:
        self._communicator = communicator
        self._context: CallContext = (api, op, axis, kind, structure, "")
        self._token: Token[CallContext | None] | None = None
        self._outermost = False
        self._start = 0

    def __enter__(self) -> api_call:
        outer = _current.get()
        if outer is None:
            context = self._context
            if _Sites.wanted > 0:
                context = (*context[:5], user_site())
            self._token = _current.set(context)
            self._outermost = True
            if self._communicator is not None:
                self._start = self._communicator.calls
        elif self._context[3] and outer[3] != self._context[3]:
            self._token = _current.set((*outer[:3], self._context[3], *outer[4:]))
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        token = self._token
        if token is None:
            return
        self._token = None
        try:
            comm = self._communicator
            if (
                self._outermost
                and isinstance(exc, Exception)
                and comm is not None
                and comm.size > 1
                and comm.calls == self._start
            ):
                comm.refuse(exc)  # raises on every rank: the original error on this one
        finally:
            _current.reset(token)

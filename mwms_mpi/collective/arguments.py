"""Which errors are the caller's bad arguments, to be taken into the call's agreement.

A rank that finds its own arguments invalid must not simply raise: its peers would wait in the
collective forever. The call template (``protocol.py``) therefore takes such an error into the
agreement, and every rank raises (docs/architecture.md, "Every call is agreed"). Only errors of
explicit argument checks qualify: ``InvalidArgumentError``, and the builtin ``ValueError`` or
``TypeError`` (the classes TF raises) marked with :func:`refusable` where the check raises it.
Anything else raised while a call is planned (an ``AttributeError``, an unmarked ``TypeError``)
is a bug inside the package and surfaces as itself, never as the user's bad argument on every
rank.
"""

from __future__ import annotations

from typing import TypeVar

from mwms_mpi import errors

_E = TypeVar("_E", bound=Exception)
_MARK = "_mwms_mpi_refusable"


def refusable(error: _E) -> _E:
    """Marks ``error``, raised by an explicit check of a call's arguments, as the caller's."""
    setattr(error, _MARK, True)
    return error


def is_refusable(error: BaseException) -> bool:
    """Whether ``error`` is the caller's bad argument (see the module docstring)."""
    return isinstance(error, errors.InvalidArgumentError) or getattr(error, _MARK, False) is True

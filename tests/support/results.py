"""Support for the "results are values" tests: kept results, their views and references.

A result the library hands out belongs to the caller: whatever the caller keeps of it (the array
itself or only a numpy view: ``reshape``, a slice, ``[::-1]``, ``np.asarray``) must still hold
the serial reference's values after any later call. :class:`Kept` records what a test keeps,
next to the same view of the serial reference, and names every entry that no longer matches.

A defect of this kind can also make MPI refuse a call: a recycled result buffer that is the
caller's input as well gave MPICH's "Buffers must not be aliased" on every rank, which poisons
the communicator; the test then fails, and the job is aborted at exit (a non-zero exit too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1)


# Views a caller may keep of a result, each a function of the array (applied alike to the
# reference). "whole" keeps the result itself; every other keeps only the view, whose ``base``
# numpy collapses to whatever owns the memory.
VIEWS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "whole": lambda a: a,
    "flat": lambda a: a.reshape(-1),  # a new view object, same shape for a 1-d result
    "reshape": lambda a: a.reshape(2, -1) if a.ndim == 1 and a.size % 2 == 0 else _flat(a),
    "slice": lambda a: _flat(a)[1:-1],
    "reverse": lambda a: _flat(a)[::-1],
    "strided": lambda a: _flat(a)[1::3],
    "asarray": lambda a: np.asarray(a),
}


def same(got: Any, want: np.ndarray) -> bool:
    """Whether ``got`` is a numpy array with ``want``'s dtype, shape and values (exactly)."""
    return (
        isinstance(got, np.ndarray)
        and got.dtype == want.dtype
        and got.shape == want.shape
        and bool(np.array_equal(got, want))
    )


class Kept:
    """What a test keeps of its results: (label, kept array, the same view of the reference)."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, np.ndarray, np.ndarray]] = []

    def keep(self, label: str, got: np.ndarray, want: np.ndarray, views: tuple[str, ...]) -> None:
        """Keeps the ``views`` of ``got`` (and of ``want``); ``got`` itself only for "whole"."""
        for name in views:
            self.entries.append((f"{label}, kept as {name}", VIEWS[name](got), VIEWS[name](want)))

    def mismatches(self) -> list[str]:
        """The labels of the entries whose values are no longer the reference's."""
        return [label for label, got, want in self.entries if not same(got, want)]

"""Recycling of result buffers that nobody references any more, to spare fresh pages per call.

A fresh multi-megabyte array costs page faults on first touch: on the 2-core development
machine a 16 MB ``Allreduce`` into a new array took twice as long as into a reused one. Results
must still be fresh (never aliasing anything the caller holds), so a pooled buffer is handed out
again only when the pool holds the *only* reference to it: CPython's reference count proves that
no result, view or memoryview of it survives. (A weak reference would not count; none of our
results are weakly referenced by us.) On interpreters without reference counts the pool is off.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

# References a buffer has while it sits unclaimed in a pool list and is being checked:
# the list's, the loop variable's and getrefcount's argument.
_UNCLAIMED_REFS = 3


class BufferPool:
    """A few buffers per (shape, dtype), reused once every outside reference is gone.

    Args:
      per_key: buffers kept per (shape, dtype); beyond that, new buffers are not pooled.
      max_bytes: total bytes the pool may keep; beyond that, new buffers are not pooled.
    """

    def __init__(self, per_key: int = 4, max_bytes: int = 1 << 30) -> None:
        self._free: dict[tuple[Any, ...], list[Any]] = {}
        self._per_key = per_key
        self._max_bytes = max_bytes
        self._bytes = 0
        self._enabled = hasattr(sys, "getrefcount")

    def take(self, shape: tuple[int, ...], dtype: Any, empty: Callable[..., Any]) -> Any:
        """A buffer of ``shape`` and ``dtype`` that nobody else references (maybe a new one)."""
        if not self._enabled:
            return empty(shape, dtype)
        key = (shape, dtype)
        buffers = self._free.get(key)
        if buffers is None:
            buffers = self._free[key] = []
        for buf in buffers:
            if sys.getrefcount(buf) == _UNCLAIMED_REFS:
                return buf
        buf = empty(shape, dtype)
        nbytes = int(buf.nbytes)
        if len(buffers) < self._per_key and self._bytes + nbytes <= self._max_bytes:
            buffers.append(buf)
            self._bytes += nbytes
        return buf

    def clear(self) -> None:
        """Drops every pooled buffer (they stay valid for whoever still holds them)."""
        self._free.clear()
        self._bytes = 0

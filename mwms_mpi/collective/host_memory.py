"""Host buffers that collectives write into: large ones on huge pages of their own mapping.

numpy asks the kernel for transparent huge pages (``MADV_HUGEPAGE``) on arrays of 4 MB and up,
but glibc hands large requests out of its heap once a large block has been freed there, and
heap pages that were touched before stay 4 KB pages. A pooled result buffer is made after many
such frees, so it landed on 4 KB pages, and on the 2-core development machine a 16 MB
``Allreduce`` into it took 1.15-1.3x as long as into the caller's own ``np.empty`` array
(which was mostly 2 MB pages; ``/proc/self/smaps``: 6 of 16 MB huge against 14-16 of 16 MB).

A buffer of :data:`MIN_MAPPED_BYTES` or more is therefore given an anonymous private mapping of
its own, advised for huge pages, and starts on a 2 MB boundary, so that every 2 MB of it can be
one page (where the kernel has transparent huge pages on ``always`` or ``madvise``). The array
is an ordinary writable, C-contiguous ``ndarray`` whose ``base`` holds the mapping: the memory is
unmapped when the last view of it goes. Like any view it does not own its data
(``ndarray.resize`` refuses it; ``np.resize`` and copies work). Where ``mmap`` cannot advise
(not Linux), or for smaller buffers, it is ``np.empty``.
"""

from __future__ import annotations

import contextlib
import math
import mmap
from typing import Any

import numpy as np

HUGE_PAGE = 2 << 20  # x86-64 and aarch64 (4 KB base pages): a PMD-sized transparent huge page
MIN_MAPPED_BYTES = HUGE_PAGE  # one huge page (numpy advises from 4 MB on)
_ADVISE = getattr(mmap, "MADV_HUGEPAGE", None)
_PRIVATE = getattr(mmap, "MAP_PRIVATE", None)


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new uninitialised C-contiguous array, on huge pages of its own when it is large.

    Args:
      shape: the array's shape.
      dtype: its dtype.
    """
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    if nbytes < MIN_MAPPED_BYTES or _ADVISE is None or _PRIVATE is None:
        return np.empty(shape, dtype=dt)
    # Rounded up to whole huge pages, plus one to slide to a boundary: address space only,
    # the pages outside the array are never touched.
    length = -(-nbytes // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE
    try:
        region = mmap.mmap(-1, length, flags=_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError:  # address space or map count exhausted: the heap may still have room
        return np.empty(shape, dtype=dt)
    with contextlib.suppress(OSError):  # a kernel without transparent huge pages: 4 KB pages
        region.madvise(_ADVISE)
    whole = np.frombuffer(region, dtype=np.uint8)
    start = -whole.ctypes.data % HUGE_PAGE
    return whole[start : start + nbytes].view(dt).reshape(shape)

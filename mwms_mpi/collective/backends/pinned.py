"""Page-locked host buffers for staging, pooled: pinning memory costs far more than a copy.

``cudaHostAlloc`` of 64 MB takes milliseconds, as long as the collective it would serve, so a
staging backend keeps the buffers it pinned and hands them out again. A buffer is out while a
staged operation uses it (several can be in flight: a batch's packs under a deadline, a
gather's parts), and comes back when that operation has completed; one still in flight when
its communicator is poisoned never comes back. Which buffer a call gets changes no MPI call, so
the pool is rank-local state that needs no agreement.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MIN_BYTES = 64 << 10  # sizes are rounded up to a power of two from here: few distinct buffers


def rounded(nbytes: int, granule: int) -> int:
    """The size of the buffer a request of ``nbytes`` gets: a power of two from 64 KiB up to
    ``granule`` (the staging chunk), then a multiple of ``granule``: a 257 MB pack pins 260 MB
    with 4 MB chunks, where powers of two would pin 512 MB."""
    size = MIN_BYTES
    while size < min(nbytes, granule):
        size <<= 1
    return size if size >= nbytes else -(-nbytes // granule) * granule


class PinnedPool:
    """Free pinned buffers by size; ``take`` one, ``give`` it back when the copies are done.

    Args:
      allocate: makes a new buffer of ``nbytes`` bytes (uint8), e.g. ``cupyx.empty_pinned``.
      granule: sizes above it are rounded to a multiple of it (the staging chunk size).
      release: gives the memory of dropped buffers back to the system (CuPy keeps freed pinned
        blocks in a pool of its own until asked), called by :meth:`clear`.
      max_bytes: the most the pool keeps free; a buffer given back beyond it is dropped.
    """

    def __init__(
        self,
        allocate: Callable[[int], np.ndarray],
        granule: int = 4 << 20,
        release: Callable[[], None] | None = None,
        max_bytes: int = 2 << 30,
    ) -> None:
        self._allocate = allocate
        self._granule = max(1, int(granule))
        self._release = release
        self._free: dict[int, list[np.ndarray]] = {}
        self._max_bytes = max_bytes
        self._kept = 0
        self.allocations = 0  # how many buffers were pinned (tests and benchmarks read it)

    @property
    def kept_bytes(self) -> int:
        """The bytes of the free buffers the pool holds."""
        return self._kept

    def take(self, nbytes: int) -> np.ndarray:
        """A buffer of at least ``nbytes`` bytes nobody else is using."""
        size = rounded(nbytes, self._granule)
        free = self._free.get(size)
        if free:
            self._kept -= size
            return free.pop()
        self.allocations += 1
        return self._allocate(size)

    def give(self, buffer: np.ndarray) -> None:
        """Returns ``buffer`` (from :meth:`take`) once no copy or MPI call uses it any more."""
        size = int(buffer.nbytes)
        if self._kept + size > self._max_bytes:
            return
        self._free.setdefault(size, []).append(buffer)
        self._kept += size

    def clear(self) -> None:
        """Drops every free buffer and gives their memory back (``release``, only if the pool
        ever pinned one: a numpy program's communicators never import CuPy); a buffer still out
        (a call abandoned at a deadline) is freed when its last reference goes."""
        self._free.clear()
        self._kept = 0
        if self._release is not None and self.allocations:  # nothing pinned: no CuPy to ask
            self._release()


def view(buffer: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The first bytes of ``buffer`` as an array of ``shape`` and ``dtype``."""
    count = 1
    for d in shape:
        count *= d
    nbytes = count * dtype.itemsize
    return buffer[:nbytes].view(dtype).reshape(shape)

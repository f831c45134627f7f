"""Result buffers recycled by ownership: a buffer comes back only when its owner is finalised.

A fresh large array costs page faults on first touch: on the 2-core development machine a 1 MB
``Allreduce`` into a new ``np.empty`` array took 4x as long as into a reused one (glibc maps
blocks of 128 KB and more anew each time). So results of :data:`POOL_MIN_BYTES` or more are
drawn from recycled memory. Results are values (docs/architecture.md, "Results are values"):
the library never writes a result again, whatever the caller does with it or its views.

What decides that a buffer is free is **ownership**, never a reference count on the array that
was returned: numpy views point at the object that owns the memory, not at the array they were
made from (``result.reshape(...)``, ``result[::-1]`` or ``np.asarray`` keep only the owner
alive), so counting references to the returned array misses them. Every handed-out buffer is
therefore owned by a :class:`Lease` of ours: the returned array is made from the lease's
``__array_interface__``, so the array and every view of it, memoryviews and buffer exports
included, keep the lease alive, and the memory goes back to its slot only in the lease's
finalizer (``__del__``), when nothing can reach it any more.

Buffers are kept by size class (a quarter of a power of two, so at most 25% larger than asked
for), so that arrays whose shapes change from call to call (variable-length batches) share a
few buffers instead of each shape keeping its own; the free buffers are bounded per class and
in bytes at every give-back, the least recently used class giving way first, and all go when
the communicator is closed.

Smaller results, and arrays of other dtypes, are fresh ``empty`` arrays: glibc serves them from
its heap without page faults, and a lease costs about a microsecond. Device arrays are always
fresh: CuPy's own memory pool recycles device memory by ownership already.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi.collective import host_memory

POOL_MIN_BYTES = 128 << 10  # glibc's default mmap threshold: smaller blocks come from the heap
assert POOL_MIN_BYTES <= host_memory.MIN_MAPPED_BYTES  # smaller results are plain np.empty
POOLED_KINDS = frozenset("biufc")  # dtypes a lease describes by their type string alone
PER_CLASS = 4  # free buffers kept per size class
MAX_FREE_BYTES = 1 << 30  # free buffers kept in all; beyond it the least recently used go

Empty = Callable[[tuple[int, ...], Any], Any]
"""Makes a new uninitialised array of a shape and dtype (a backend's ``empty``)."""


def size_class(nbytes: int) -> int:
    """The bytes of the buffers that serve a request of ``nbytes``: ``nbytes`` rounded up to a
    quarter of its power of two (1, 1.25, 1.5 or 1.75 times it), so at most 25% more."""
    step = 1 << max(0, nbytes.bit_length() - 3)
    return -(-nbytes // step) * step


class Lease:
    """The owner of one handed-out buffer: its memory returns to the slot when it is finalised.

    numpy reads ``__array_interface__`` once, when the returned array is made from the lease,
    and keeps the lease as that array's ``base``; every view of the array keeps the array, so
    the lease lives exactly as long as anything can reach the memory.
    """

    __slots__ = ("__array_interface__", "_slot", "_storage")

    def __init__(self, slot: Slot, storage: tuple[np.ndarray, int], shape: Any, dtype: Any) -> None:
        self._slot = slot
        self._storage = storage
        self.__array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (storage[1], False),
            "version": 3,
        }

    def __del__(self) -> None:
        self._slot.give_back(self._storage)


class Slot:
    """The free buffers of one size class; a plan on a hot path may keep its slot.

    Only the communicator's own thread takes from a slot; a lease may be finalised in any thread
    (a replica thread dropping a result). Every change of a free list goes through the pool's
    lock, which also keeps the pool's count of free bytes.
    """

    __slots__ = ("free", "last_used", "nbytes", "pool")

    def __init__(self, pool: BufferPool, nbytes: int) -> None:
        self.pool = pool
        self.free: list[tuple[np.ndarray, int]] = []  # (storage, its address)
        self.nbytes = nbytes
        self.last_used = 0

    def lease(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """A C-contiguous array of ``shape`` and ``dtype`` on a free buffer of this class (a new
        one if none is free), owned by a new lease."""
        storage = self.pool.reuse(self)
        if storage is None:
            storage = _new_storage(self.nbytes)
        return np.asarray(Lease(self, storage, shape, dtype))

    def give_back(self, storage: tuple[np.ndarray, int]) -> None:
        """Keeps a buffer whose lease was finalised, within the pool's bounds."""
        self.pool.keep(self, storage)


def _new_storage(nbytes: int) -> tuple[np.ndarray, int]:
    """A new buffer of ``nbytes`` (huge pages of its own when large) and its address."""
    storage = host_memory.empty((nbytes,), np.uint8)
    return storage, int(storage.ctypes.data)


class Source:
    """Where the results of one layout come from: leases on its size class's slot (``pooled``),
    or a new array from an ``empty`` every call."""

    __slots__ = ("pooled", "take")

    def __init__(self, make: Empty, shape: tuple[int, ...], dtype: np.dtype[Any], pooled: bool):
        self.pooled = pooled
        self.take: Callable[[], Any] = functools.partial(make, shape, dtype)
        """A new result (on recycled memory that nothing can reach any more, when pooled): a
        ``partial``, so a small host result is ``np.empty`` called from C."""


class BufferPool:
    """The recycled host buffers of one communicator, by size class.

    Args:
      max_free_bytes: the most the pool keeps in free buffers: a buffer given back beyond it
        makes free buffers of the least recently used classes go first, or goes itself.
    """

    def __init__(self, max_free_bytes: int = MAX_FREE_BYTES) -> None:
        self._classes: dict[int, Slot] = {}
        self._max_free_bytes = max_free_bytes
        self._free_bytes = 0
        self._closed = False
        self._clock = itertools.count(1)
        # re-entrant: a garbage collection inside the lock may finalise a lease, which gives back
        self._lock = threading.RLock()

    def source(self, shape: tuple[int, ...], dtype: Any, empty: Empty, backend_name: str) -> Source:
        """Where results of ``shape`` and ``dtype`` come from: leases on the slot of their size
        class for large host arrays of a plain dtype, else fresh arrays from ``empty``."""
        make, dt, pooled = self._maker(shape, dtype, empty, backend_name)
        return Source(make, shape, dt, pooled)

    def take(self, shape: tuple[int, ...], dtype: Any, empty: Empty, backend_name: str) -> Any:
        """A new result of ``shape`` and ``dtype`` for ``backend_name``'s arrays: recycled
        memory nothing can reach any more, or a fresh array from ``empty``."""
        make, dt, _ = self._maker(shape, dtype, empty, backend_name)
        return make(shape, dt)

    def _maker(
        self, shape: tuple[int, ...], dtype: Any, empty: Empty, backend_name: str
    ) -> tuple[Empty, np.dtype[Any], bool]:
        """What makes arrays of ``shape`` and ``dtype`` (its slot's ``lease``, ``np.empty`` or
        ``empty``), the dtype, and whether that is pooled: :meth:`source` and :meth:`take`."""
        dt = np.dtype(dtype)
        nbytes = dt.itemsize
        for extent in shape:
            nbytes *= extent
        if backend_name != "host" or dt.kind not in POOLED_KINDS:
            return empty, dt, False
        if nbytes < POOL_MIN_BYTES:  # below host_memory's mapped sizes too: plain np.empty
            return np.empty, dt, False
        size = size_class(nbytes)
        found = self._classes.get(size)
        if found is None:
            found = self._classes[size] = Slot(self, size)
        return found.lease, dt, True

    def host(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A host (numpy) result or scratch buffer of ``shape`` and ``dtype``."""
        result: np.ndarray = self.take(shape, dtype, host_memory.empty, "host")
        return result

    def reuse(self, slot: Slot) -> tuple[np.ndarray, int] | None:
        """A free buffer of ``slot``'s class, or ``None``; marks the class as just used."""
        with self._lock:
            slot.last_used = next(self._clock)
            if not slot.free:
                return None
            self._free_bytes -= slot.nbytes
            return slot.free.pop()

    def keep(self, slot: Slot, storage: tuple[np.ndarray, int]) -> None:
        """Keeps a finalised lease's buffer as free, unless the class has :data:`PER_CLASS`
        free or the pool is closed; free buffers of the least recently used other classes go
        first when it would pass ``max_free_bytes``, and the buffer itself if that is not
        enough (a buffer let go is unmapped, or returned to the heap, with its last view)."""
        with self._lock:
            if self._closed or len(slot.free) >= PER_CLASS:
                return
            if self._free_bytes + slot.nbytes > self._max_free_bytes:
                for victim in sorted(self._classes.values(), key=lambda c: c.last_used):
                    while victim is not slot and victim.free:
                        if self._free_bytes + slot.nbytes <= self._max_free_bytes:
                            break
                        victim.free.pop()
                        self._free_bytes -= victim.nbytes
                if self._free_bytes + slot.nbytes > self._max_free_bytes:
                    return
            slot.free.append(storage)
            self._free_bytes += slot.nbytes

    def free_bytes(self) -> int:
        """The bytes the pool keeps in free buffers (for tests and ``mwms-mpi info``)."""
        return self._free_bytes

    def clear(self, close: bool = False) -> None:
        """Lets every free buffer go; leased ones stay valid for whoever holds them. With
        ``close`` (the communicator is closed), buffers whose leases end later go too."""
        with self._lock:
            for slot in self._classes.values():
                slot.free.clear()
            self._free_bytes = 0
            self._closed = self._closed or close

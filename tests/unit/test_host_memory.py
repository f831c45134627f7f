"""Large host buffers get a huge-page-advised mapping of their own; small ones are numpy's."""

from __future__ import annotations

import gc
import mmap
import sys
import types

import numpy as np
import pytest

from mwms_mpi.collective import host_memory
from mwms_mpi.collective.backends.host import HostBackend


def _large(dtype: type) -> tuple[int, ...]:
    """A shape just over the threshold for ``dtype``."""
    return (host_memory.MIN_MAPPED_BYTES // np.dtype(dtype).itemsize + 3,)


LARGE = _large(np.float32)
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"),
    reason="madvise(MADV_HUGEPAGE) and /proc/self/smaps are Linux's",
)


def _mapping_of(address: int) -> tuple[tuple[int, int], list[str]] | None:
    """The (start, end) of the mapping holding ``address`` and its smaps VmFlags, or None."""
    found: tuple[int, int] | None = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                found = (lo, hi) if lo <= address < hi else None
            elif found is not None and head == "VmFlags:":
                return found, line.split()[1:]
    return None


def test_a_small_buffer_is_numpys_own() -> None:
    a = host_memory.empty((3, 5), np.float64)
    assert a.shape == (3, 5) and a.dtype == np.float64 and a.flags.owndata


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64, np.complex128])
def test_a_large_buffer_is_a_writable_c_contiguous_array_on_a_huge_page_boundary(
    dtype: type,
) -> None:
    shape = (2, *_large(dtype))
    a = host_memory.empty(shape, dtype)
    b = host_memory.empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype
    assert a.flags.c_contiguous and a.flags.writeable and a.flags.aligned
    assert a.ctypes.data % host_memory.HUGE_PAGE == 0
    a[...] = 1
    b[...] = 2
    assert (a == 1).all() and (b == 2).all()  # two buffers never share memory
    assert not np.shares_memory(a, b)


@linux_only
def test_a_large_buffer_is_advised_for_huge_pages_and_unmapped_with_its_last_view() -> None:
    a = host_memory.empty(LARGE, np.float32)
    view = a[10:20]
    found = _mapping_of(a.ctypes.data)
    assert found is not None
    (start, end), flags = found
    assert "hg" in flags, flags  # MADV_HUGEPAGE
    del a
    gc.collect()
    assert _mapping_of(start) is not None  # the view keeps the mapping
    del view
    gc.collect()
    after = _mapping_of(start)
    assert after is None or after[0] != (start, end)


def test_the_host_backend_allocates_through_it() -> None:
    mpi = types.SimpleNamespace(SUM=0, MAX=1, MIN=2, IN_PLACE=3)
    a = HostBackend(mpi).empty(LARGE, np.float32)  # type: ignore[arg-type]
    assert a.ctypes.data % host_memory.HUGE_PAGE == 0

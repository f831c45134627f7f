"""The one accessor of mpi4py's ``MPI`` module, so that ``import mwms_mpi`` never initialises MPI.

mpi4py calls ``MPI_Init_thread`` when ``mpi4py.MPI`` is first imported. Everything in mwms_mpi
that needs MPI calls :func:`mpi` inside a function; importing the package stays free of side
effects (a serial test process, a launcher probe, ``--help``).
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Any

from mwms_mpi import _env

DETECTOR_THREAD_ENV = "OMPI_MCA_mpi_ft_detector_thread"  # Open MPI's own, set by its mpiexec


@functools.cache
def mpi() -> types.ModuleType:
    """Returns ``mpi4py.MPI``, initialising MPI on first use.

    Where Open MPI's failure detector runs its own thread (``mwms-mpi launch --elastic``:
    ``--mca mpi_ft_detector_thread true``), this process never calls ``MPI_Finalize``: it
    spins there for ever (measured with Open MPI 5.0.11, in
    ``ompi_comm_failure_detector_finalize``, even in a two-rank job that never failed), while
    a process that ends without it ends with its own status (docs/elastic.md).
    """
    if detector_thread() and "mpi4py.MPI" not in sys.modules:
        import mpi4py

        mpi4py.rc.finalize = False
    from mpi4py import MPI

    return MPI


def detector_thread(environ: _env.Environ = None) -> bool:
    """Whether Open MPI's failure detector runs its own thread in this job."""
    value = _env.env_str(DETECTOR_THREAD_ENV, environ)  # Open MPI's own variable: read only
    return value is not None and value.lower() in _env.TRUE_WORDS


def is_initialized() -> bool:
    """Whether MPI has been initialised in this process (without initialising it)."""
    module = sys.modules.get("mpi4py.MPI")
    return bool(module is not None and module.Is_initialized())


def world_rank() -> int:
    """This process's rank in ``COMM_WORLD`` (initialises MPI)."""
    return int(mpi().COMM_WORLD.Get_rank())


def world_size() -> int:
    """The size of ``COMM_WORLD`` (initialises MPI)."""
    return int(mpi().COMM_WORLD.Get_size())


def spans_world(comm: Any) -> bool:
    """Whether ``comm`` has the ranks of ``COMM_WORLD``, in the same order."""
    MPI = mpi()
    return comm is MPI.COMM_WORLD or MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (
        MPI.IDENT,
        MPI.CONGRUENT,
    )


def world_ranks(comm: Any) -> tuple[int, ...]:
    """The ``COMM_WORLD`` rank of each of ``comm``'s ranks, in ``comm``'s order."""
    MPI = mpi()
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return tuple(MPI.Group.Translate_ranks(group, list(range(comm.Get_size())), world))
    finally:
        group.Free()
        world.Free()

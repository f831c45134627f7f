"""The one accessor of mpi4py's ``MPI`` module, so that ``import mwms_mpi`` never initialises MPI.

mpi4py calls ``MPI_Init_thread`` when ``mpi4py.MPI`` is first imported. Everything in mwms_mpi
that needs MPI calls :func:`mpi` inside a function; importing the package stays free of side
effects (a serial test process, a launcher probe, ``--help``).
"""

from __future__ import annotations

import atexit
import functools
import sys
import threading
import types
from typing import Any

from mwms_mpi import _env

# Open MPI's own variables, set by its mpiexec from `--mca mpi_ft_detector[_thread] true`
DETECTOR_ENV = "OMPI_MCA_mpi_ft_detector"
DETECTOR_THREAD_ENV = "OMPI_MCA_mpi_ft_detector_thread"
HEARTBEAT_PERIOD_S = 0.1  # how often the heartbeat thread lets MPI progress


@functools.cache
def mpi() -> types.ModuleType:
    """Returns ``mpi4py.MPI``, initialising MPI on first use.

    Under Open MPI's heartbeat failure detector (``mwms-mpi launch --elastic``,
    docs/elastic.md) two things happen here, once:

    * Without the detector's own thread (the launcher's way), heartbeats leave a process only
      while it makes MPI progress, so a rank computing between collectives for longer than
      the detector's timeout would be declared failed. A daemon thread lets MPI progress every
      :data:`HEARTBEAT_PERIOD_S` (a probe on ``COMM_SELF``) until ``MPI_Finalize``.
    * With its own thread (``--mca mpi_ft_detector_thread true``, by hand), this process never
      calls ``MPI_Finalize``: it spins there for ever (measured with Open MPI 5.0.11, in
      ``ompi_comm_failure_detector_finalize``, even in a two-rank job that never failed),
      while a process that ends without it ends with its own status. That thread also crashed
      ``MPI_Init`` in 3 to 13% of 4-rank launches, which is why the launcher does not use it.
    """
    if _env.foreign_flag(DETECTOR_THREAD_ENV) and "mpi4py.MPI" not in sys.modules:
        import mpi4py

        mpi4py.rc.finalize = False
    from mpi4py import MPI

    if heartbeats_needed():
        _start_heartbeats(MPI)
    return MPI


def heartbeats_needed(environ: _env.Environ = None) -> bool:
    """Whether Open MPI's failure detector runs here without its own thread (``mpi()`` then
    keeps its heartbeats going)."""
    own_thread = _env.foreign_flag(DETECTOR_THREAD_ENV, environ)
    return _env.foreign_flag(DETECTOR_ENV, environ) and not own_thread


def _start_heartbeats(MPI: Any) -> None:
    """Starts the thread that lets MPI progress; it stops when ``MPI_Finalize`` begins (an
    attribute of ``COMM_SELF`` is deleted first there) or at exit, whichever comes first."""
    if not MPI.Is_initialized() or MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        return  # MPI may not be called from a second thread
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_PERIOD_S):
            try:
                MPI.COMM_SELF.Iprobe()
            except MPI.Exception:
                return

    thread = threading.Thread(target=beat, name="mwms_mpi-heartbeats", daemon=True)

    def halt(*_: Any) -> None:
        stop.set()
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    keyval = MPI.Comm.Create_keyval(delete_fn=halt)
    MPI.COMM_SELF.Set_attr(keyval, True)
    atexit.register(halt)
    thread.start()


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

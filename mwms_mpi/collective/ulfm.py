"""What MPI's fault tolerance (ULFM) can do here, and the calls that use it.

ULFM (User-Level Failure Mitigation: ``MPIX_Comm_revoke``, ``MPIX_Comm_shrink``,
``MPI_ERR_PROC_FAILED``) lets the ranks that survive a lost one find out in a collective
instead of hanging, interrupt every other survivor, and go on in a smaller communicator. Only
Open MPI (5.x) has it working here, and only when the job was launched with
``mpiexec --with-ft ulfm``, which both keeps the survivors alive and turns the feature on in
each process (it sets ``OMPI_MCA_mpi_ft_enable``). mpi4py switches MPICH's ULFM off: there the
error classes all equal ``ERR_UNKNOWN``, so nothing may be classified as a process failure.
docs/elastic.md says what is built on this and what is not yet.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from mwms_mpi import _env

FT_ENABLE_ENV = "OMPI_MCA_mpi_ft_enable"  # set to 1 by Open MPI's `mpiexec --with-ft ulfm`
# How long another MPI error waits for MPI to name a failed rank before it is no failure.
FAILURE_GRACE_S = 2.0


def library_has_ulfm(MPI: Any) -> bool:
    """Whether this MPI, through mpi4py, reports process failures with their own error
    classes and has the ULFM calls (Open MPI 5: yes; MPICH through mpi4py: no)."""
    failed = getattr(MPI, "ERR_PROC_FAILED", None)
    revoked = getattr(MPI, "ERR_REVOKED", None)
    return (
        failed is not None
        and revoked is not None
        and len({failed, revoked, MPI.ERR_UNKNOWN}) == 3
        and all(hasattr(MPI.Comm, name) for name in ("Revoke", "Shrink", "Get_failed"))
    )


def enabled(MPI: Any, environ: _env.Environ = None) -> bool:
    """Whether this job can survive a lost rank: ULFM in the library and switched on by
    the launcher (``mpiexec --with-ft ulfm``)."""
    return _env.foreign_flag(FT_ENABLE_ENV, environ) and library_has_ulfm(MPI)


def describe(MPI: Any, environ: _env.Environ = None) -> str:
    """One line for ``mwms-mpi info``: whether a lost rank can be survived, and if not why."""
    if enabled(MPI, environ):
        return "yes: ULFM is on (mpiexec --with-ft ulfm); survivors can shrink and go on"
    if library_has_ulfm(MPI):
        return (
            "no: this MPI has ULFM, but the job was not launched with `mpiexec --with-ft ulfm` "
            "(a lost rank ends the job)"
        )
    return "no: this MPI has no working ULFM (Open MPI 5 has); a lost rank ends the job"


def is_process_failure(MPI: Any, exc: BaseException) -> bool:
    """Whether ``exc`` is MPI saying a peer failed (or a survivor revoked the communicator
    after one did): never true where the library has no ULFM (MPICH's classes are all
    ``ERR_UNKNOWN``, which must not read as a failure)."""
    if not isinstance(exc, MPI.Exception) or not library_has_ulfm(MPI):
        return False
    failure_classes = {MPI.ERR_PROC_FAILED, MPI.ERR_REVOKED}
    pending = getattr(MPI, "ERR_PROC_FAILED_PENDING", None)
    if pending is not None:
        failure_classes.add(pending)
    try:
        return int(exc.Get_error_class()) in failure_classes
    except Exception:  # an exception object whose class cannot be read is no failure report
        return False


def failed_world_ranks(comm: Any, MPI: Any) -> tuple[int, ...]:
    """The ``COMM_WORLD`` ranks of ``comm``'s ranks this process knows to have failed, in
    order (empty if none is known yet, or the library cannot say)."""
    try:
        failed = comm.Get_failed()
    except Exception:  # MPI may refuse on a revoked communicator: nothing known here then
        return ()
    world = MPI.COMM_WORLD.Get_group()
    try:
        size = failed.Get_size()
        return tuple(MPI.Group.Translate_ranks(failed, list(range(size)), world)) if size else ()
    finally:
        failed.Free()
        world.Free()


def revoke(comm: Any) -> None:
    """Revokes ``comm``: every survivor's pending and later call on it fails with
    ``ERR_REVOKED`` instead of waiting for a rank that will never come. Idempotent."""
    # already revoked, or the library failed: the other survivors find out in their calls
    with contextlib.suppress(Exception):
        comm.Revoke()


def shrink(comm: Any, MPI: Any) -> Any:
    """A new communicator of the surviving ranks of ``comm``, in their order (collective
    over the survivors), with errors returned as exceptions."""
    survivors = comm.Shrink()
    survivors.Set_errhandler(MPI.ERRORS_RETURN)
    return survivors


class ProcessFailures:
    """A communicator's view of process failures: given to its call template where ULFM is
    on (``protocol.CallProtocol``), which asks it whether an MPI error is a peer's failure and,
    if so, revokes every MPI communicator behind the communicator (its data and its agreement).

    Args:
      MPI: mpi4py's ``MPI``.
      comms: the MPI communicators to revoke, the first one asked which ranks failed.
    """

    def __init__(self, MPI: Any, comms: tuple[Any, ...]) -> None:
        self._MPI = MPI
        self._comms = comms

    def is_failure(self, exc: BaseException, grace_s: float = FAILURE_GRACE_S) -> bool:
        """Whether ``exc`` reports a peer's process failure (or a revocation after one).

        Open MPI does not always say so by the error's class: a survivor of a rank killed
        inside a large collective was seen to get ``MPI_ERR_OTHER``. Any other MPI error is
        therefore a failure too when MPI knows of a failed rank in the communicator, within
        ``grace_s`` seconds (the runtime's notice can come after the error); else it is not.
        """
        MPI = self._MPI
        if is_process_failure(MPI, exc):
            return True
        if not isinstance(exc, MPI.Exception):
            return False
        deadline = time.monotonic() + grace_s
        while True:
            if self.failed_world_ranks():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def revoke(self) -> None:
        """Revokes every MPI communicator behind the communicator."""
        for comm in self._comms:
            revoke(comm)

    def failed_world_ranks(self) -> tuple[int, ...]:
        """The ``COMM_WORLD`` ranks known to have failed (empty if none is known here yet)."""
        return failed_world_ranks(self._comms[0], self._MPI)

"""How this process ends: a failure ends the whole job, an agreed exit is not a failure.

* :func:`install_abort_hook` (installed when ``mwms_mpi`` is imported, touching no MPI): an
  uncaught exception in a process whose MPI world has more than one rank prints its traceback
  and calls ``MPI_Abort``, as ``python -m mpi4py`` does, so the other ranks are not left
  waiting in a collective, a strategy's construction included. ``MWMS_MPI_ABORT_ON_ERROR=0``
  (or ``false``, ``no``, ``off``) turns it off; a word that is not a boolean is an error.
  :func:`abort_on_uncaught` (the first multi-rank communicator) also prepares the runner's
  one-report-per-error exchange.
* :func:`agreed_exit`: a preemption handler (or any code that has agreed with every rank that
  the job stops now) ends each rank with it. The runner (``python -m mwms_mpi.run``) then exits
  with that code on every rank without ``MPI_Abort`` or a failure report, and the lost-rank
  watch sends no departure notice, so no peer mistakes the planned stop for a lost rank.
* :func:`note_peer_failure`: a communicator saw a peer's process failure (ULFM:
  docs/elastic.md). ``MPI_Finalize`` can hang after one (Open MPI issue 11404), so this
  process must not reach it: the runner ends a program that went on and finished with
  :func:`exit_without_finalize` and the program's own status; a plain ``python`` exit, whose
  status an exit hook cannot know, ends with status 1, saying why (``collective/watch.py``).
  A failure after one is not ``MPI_Abort`` either: under ``--with-ft ulfm`` the abort's error
  code was seen lost (the job ended with status 0 under load), so :func:`abort_job` ends this
  rank with its status, without ``MPI_Finalize``: its peers saw the failure too.
* :func:`set_elastic` (the runner's ``--elastic``): a rank that fails alone sends its report to
  its peers and ends itself by ``SIGKILL``, so that they can go on without it;
  :func:`note_lost_rank_failure` keeps such a report on a survivor, whose exit is then
  non-zero. :class:`Terminated` is how a rank told to stop (SIGTERM) leaves.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import types
from collections.abc import Callable
from typing import NoReturn

from mwms_mpi import _env, _failure_report, _mpi

ABORT_ENV = "MWMS_MPI_ABORT_ON_ERROR"
RESTART_CODE = 42  # TF's exit for a job to be restarted (failure_handling's `sys.exit(42)`)
EXCEPTION_STATUS = 1  # a job that failed: an uncaught exception's status, as Python's
ABORT_GRACE_S = 0.3  # before MPI_Abort: the launcher forwards what the rank wrote last
_agreed_exit_code: int | None = None
_peer_failure_seen = False
_elastic = False
_lost_rank_failures: list[str] = []  # reports of lost ranks that failed with an exception
_hook_installed = False
_before_abort: list[Callable[[], None]] = []


class Terminated(BaseException):
    """SIGTERM reached this rank and it leaves: raised where the program is, as
    ``KeyboardInterrupt`` is for SIGINT (the runner's ``--elastic``; ``ElasticHandler`` on a
    rank the others go on without), so that the runner ends the rank as a lost machine.

    Not an ``Exception``: a program's ``except Exception`` does not swallow it. Without it,
    every rank of a job ended by SIGTERM (Slurm's time limit or ``--signal``, ``scancel``)
    died by the signal, and under ``--with-ft ulfm`` such a job ends with status 0 (measured).
    """


def agreed_exit(code: int) -> NoReturn:
    """Ends this rank with ``code``, marked as an exit that every rank agreed on.

    Call it only after every rank has decided to stop at this point (for example through a
    collective), so that every rank calls it: a rank that calls it alone leaves its peers
    waiting in their next collective.

    Raises:
      SystemExit: always, with ``code``.
    """
    global _agreed_exit_code
    _agreed_exit_code = int(code)
    raise SystemExit(int(code))


def agreed_exit_code() -> int | None:
    """The code passed to :func:`agreed_exit`, or ``None`` if this process has not called it."""
    return _agreed_exit_code


def note_peer_failure() -> None:
    """Records that a peer's process failure was seen here (see the module's docstring)."""
    global _peer_failure_seen
    _peer_failure_seen = True


def peer_failure_seen() -> bool:
    """Whether :func:`note_peer_failure` was called in this process."""
    return _peer_failure_seen


def set_elastic() -> None:
    """Elastic mode (``python -m mwms_mpi.run --elastic``): a rank that fails alone ends
    itself instead of the job, so that its peers can go on (docs/elastic.md)."""
    global _elastic
    _elastic = True


def elastic() -> bool:
    """Whether :func:`set_elastic` was called in this process."""
    return _elastic


def note_lost_rank_failure(report: str) -> None:
    """Records that a lost peer had failed with an uncaught exception: the job that went on
    without it must still end non-zero (a user's bug must not look like success)."""
    _lost_rank_failures.append(report)


def lost_rank_failures() -> list[str]:
    """The reports given to :func:`note_lost_rank_failure`, in order."""
    return list(_lost_rank_failures)


def exit_without_finalize(status: int) -> NoReturn:
    """Flushes and ends this process with ``status`` now, without ``MPI_Finalize`` or exit
    hooks: the end of a rank that survived a peer's failure (``MPI_Finalize`` can hang then)."""
    flush_streams()
    os._exit(status % 256)


def before_abort(flush: Callable[[], None]) -> None:
    """Registers ``flush`` to run in :func:`flush_streams`, before any ``MPI_Abort`` of ours.

    For buffered state worth keeping when the job ends abruptly (the timeline's events).
    """
    _before_abort.append(flush)


def abort_job(status: int, report: str = "") -> None:
    """Ends the whole job: writes ``report`` to stderr, flushes, waits a moment, ``MPI_Abort``
    (after a peer's failure: ends this rank with ``status``, as the module's docstring says).

    The one way this package aborts a job. The moment (:data:`ABORT_GRACE_S`) lets the
    launcher forward what was just written: hydra was seen to cut a rank's last lines off when
    the abort came straight after them (the tail of a traceback, the line naming the rank).
    """
    if report:
        sys.stderr.write(report if report.endswith("\n") else report + "\n")
    flush_streams()
    if _peer_failure_seen:  # ULFM: MPI_Abort's code can be lost (module docstring)
        exit_without_finalize(status % 256 or 1)
    time.sleep(ABORT_GRACE_S)
    _mpi.mpi().COMM_WORLD.Abort(status % 256 or 1)


def flush_streams() -> None:
    """Flushes what :func:`before_abort` registered, then stdout and stderr: ``MPI_Abort`` kills
    the process without flushing them."""
    for flush in list(_before_abort):
        with contextlib.suppress(Exception):
            flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()


def abort_on_uncaught() -> None:
    """Collective over ``COMM_WORLD`` (the first multi-rank communicator calls it): prepares
    the runner's failure-report exchange and makes sure the abort hook is installed."""
    _failure_report.prepare(elastic=_elastic)  # used by `python -m mwms_mpi.run`
    install_abort_hook()


def install_abort_hook() -> None:
    """Makes an uncaught exception in a multi-rank process abort the whole MPI job.

    Installed on import, before any communicator exists, because a rank that fails before
    building its strategy leaves the others blocked in the strategy's construction (measured:
    a hang until the launcher's time limit). The hook itself never initialises MPI: it acts
    only where MPI is initialised, not finalised, and the world has more than one rank. The
    previous ``sys.excepthook`` prints the traceback first; then one line names the rank and
    the error, and ``MPI_Abort`` ends every rank. Does nothing when
    ``MWMS_MPI_ABORT_ON_ERROR`` is off, or when already installed.

    Raises:
      ValueError: if ``MWMS_MPI_ABORT_ON_ERROR`` is not a boolean word (``maybe`` used to
        count as on; a typo for "off" must not abort jobs that were meant to go on).
    """
    global _hook_installed
    if _hook_installed or not _env.env_bool(ABORT_ENV, True):
        return
    _hook_installed = True
    previous = sys.excepthook

    def hook(
        kind: type[BaseException], error: BaseException, tb: types.TracebackType | None
    ) -> None:
        previous(kind, error, tb)
        if not _mpi.is_initialized() or _mpi.mpi().Is_finalized():
            return
        world = _mpi.mpi().COMM_WORLD
        if world.Get_size() < 2:
            return
        abort_job(
            1,
            f"[mwms_mpi] rank {world.Get_rank()} of {world.Get_size()}: uncaught "
            f"{kind.__name__}, aborting the job (set {ABORT_ENV}=0 to let the other ranks "
            "go on)",
        )

    sys.excepthook = hook

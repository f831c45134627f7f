"""``python -m mwms_mpi.run script.py``: run a program on every rank; MPI_Abort if any rank fails.

Under ``mpiexec``, a rank that dies from an uncaught exception while the others wait in a collective
leaves the job hanging forever: the survivors cannot tell a dead peer from a slow one. This runner
executes the program as ``__main__`` (as ``python script.py`` or ``python -m module`` would) and,
when it ends with an uncaught exception, a non-zero ``sys.exit`` or ``Ctrl-C``, prints the failing
rank's traceback and calls ``MPI_Abort`` on ``COMM_WORLD`` so the launcher ends the whole job with a
non-zero exit code (docs/architecture.md, "Failure"). It mirrors ``python -m mpi4py``, but says
which rank failed and why. With ``--elastic`` (docs/elastic.md) a rank that fails alone leaves
the job instead, so that the others go on, and SIGTERM is raised in the program as
:class:`~mwms_mpi._lifecycle.Terminated`, so that it ends a rank through the same path
(status 143).

MPI is not initialised unless the program initialises it or the program fails under a launcher:
``MPI_Abort`` is the only way to make the launcher kill the other ranks, so the failure path
initialises MPI if needed. That ``MPI_Init`` completes only once every rank has entered MPI, so it
is bounded by a watchdog (``MWMS_MPI_RUN_INIT_TIMEOUT`` seconds, default 60) for programs whose
other ranks never start MPI.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import runpy
import signal
import sys
import traceback
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NoReturn

from mwms_mpi import _env, _failure_report, _lifecycle, _mpi
from mwms_mpi._lifecycle import EXCEPTION_STATUS, Terminated
from mwms_mpi.cluster.launcher import LauncherInfo, detect_launcher
from mwms_mpi.collective import ulfm

PROG = "mwms_mpi.run"

# Rank and size as the common launchers export them, in the order they are consulted; used
# only while MPI is not initialised (once it is, COMM_WORLD is the authority).

INIT_TIMEOUT_VARIABLE = "MWMS_MPI_RUN_INIT_TIMEOUT"
DEFAULT_INIT_TIMEOUT_S = 60.0

# Exit statuses, as CPython uses them: an uncaught exception, a bad command line, SIGINT;
# and a shell's for a process ended by SIGTERM.
USAGE_STATUS = 2
INTERRUPT_STATUS = 130
TERMINATED_STATUS = 128 + signal.SIGTERM

USAGE = f"""\
usage: python -m {PROG} [--elastic] <script.py> [arg ...]
   or: python -m {PROG} [--elastic] -m <module> [arg ...]
   or: python -m {PROG} [--elastic] -c <command> [arg ...]

Runs a Python program as __main__, with sys.argv set as python would set it. If the program
ends on any rank with an uncaught exception, a non-zero sys.exit() or KeyboardInterrupt, that
rank prints its traceback to stderr and calls MPI_Abort on COMM_WORLD, so the whole job ends with
a non-zero exit code instead of the other ranks waiting forever in a collective.

    mpiexec -n 4 python -m {PROG} train.py --epochs 3

options:
  -h, --help  show this message and exit
  --elastic   under `mpiexec --with-ft ulfm` (Open MPI): a rank that fails alone prints its
              traceback, sends it to the others and ends itself (SIGKILL) instead of the job,
              so that they can go on (ElasticHandler); the job still ends non-zero. SIGTERM
              ends a rank through the same path with status 143: alone, it leaves as a lost
              machine (the others go on, and end 0); on every rank, the job ends with 143

environment:
  {INIT_TIMEOUT_VARIABLE}  seconds (a number >= 1) a failing rank waits in MPI_Init (needed
      to abort when the program failed before starting MPI) before it exits without aborting
      (default 60); checked before the program starts
"""

# Frames of the runner and of runpy (frozen in CPython 3.11+) that lead into the program.
_INTERNAL_FILES = frozenset(
    {os.path.abspath(__file__), os.path.abspath(str(runpy.__file__)), "<frozen runpy>"}
)


class UsageError(Exception):
    """The command line names no program to run."""


def _raise_terminated(signum: int, frame: object) -> None:
    """The runner's SIGTERM handler under ``--elastic`` (``_lifecycle.Terminated``)."""
    raise Terminated


@dataclass(frozen=True)
class Program:
    """What to run: a script path, a module name or a command string, and its arguments."""

    kind: Literal["path", "module", "command"]
    target: str
    args: tuple[str, ...] = ()
    elastic: bool = False


@dataclass(frozen=True)
class Failure:
    """How the program ended badly: the exit status, a one-line reason, and details to print."""

    status: int
    reason: str
    details: str = ""
    # --elastic, a rank leaving alone: whether its peers count it as failed (and then end
    # non-zero). A rank told to stop (SIGTERM: a node reclaimed) is a lost machine, not a bug.
    counts_as_failure: bool = True


def parse_args(argv: Sequence[str]) -> Program | None:
    """Parses the runner's command line; returns None when help was asked for.

    Raises:
      UsageError: no program was named, or an option is unknown.
    """
    if not argv:
        raise UsageError("no script or module given")
    first, rest = argv[0], tuple(argv[1:])
    if first in ("-h", "--help"):
        return None
    if first == "--elastic":
        program = parse_args(rest)
        return None if program is None else dataclasses.replace(program, elastic=True)
    if first in ("-m", "-c"):
        if not rest:
            raise UsageError(f"argument expected for option {first}")
        kind: Literal["module", "command"] = "module" if first == "-m" else "command"
        return Program(kind, rest[0], rest[1:])
    if first.startswith("-"):
        raise UsageError(f"unknown option {first}")
    return Program("path", first, rest)


def run_program(program: Program) -> None:
    """Runs ``program`` as ``__main__`` with python's ``sys.argv`` and ``sys.path[0]``.

    Both are restored afterwards, so that :func:`main` can be called more than once in a test.
    """
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if program.kind == "path":
            sys.argv = [program.target, *program.args]
            if not sys.flags.isolated:
                sys.path[0] = os.path.realpath(os.path.dirname(program.target))
            runpy.run_path(program.target, run_name="__main__")
        elif program.kind == "module":
            # run_module(alter_sys=True) replaces argv[0] with the module's file, as `python -m`.
            sys.argv = [program.target, *program.args]
            runpy.run_module(program.target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *program.args]
            _run_command(program.target)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _run_command(source: str) -> None:
    """Executes ``-c`` source in a fresh ``__main__`` module (so its classes pickle)."""
    module = types.ModuleType("__main__")
    saved_main = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    try:
        exec(compile(source, "<string>", "exec"), module.__dict__)
    finally:
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    When the program fails under a launcher, or after it initialised MPI, this does not return:
    it aborts the MPI job. Outside a launcher, with MPI never initialised, it prints the same
    report and returns the status, as a plain ``python script.py`` would.
    """
    try:
        program = parse_args(sys.argv[1:] if argv is None else list(argv))
    except UsageError as exc:
        print(f"{PROG}: {exc}\n{USAGE.splitlines()[0]}", file=sys.stderr)
        return USAGE_STATUS
    if program is None:
        print(USAGE, end="")
        return 0
    try:  # needed on the failure path, where an error of its own would leave peers waiting
        init_timeout()
    except ValueError as exc:
        return fail(Failure(USAGE_STATUS, str(exc)))
    if program.kind == "path" and not os.path.exists(program.target):
        return fail(Failure(USAGE_STATUS, f"can't open file {program.target!r}"))
    if program.elastic:
        _lifecycle.set_elastic()
        if _mpi.heartbeats_needed():  # from the start, not from the program's first collective
            _initialised_mpi()
        # a handler the program installs (PreemptionCheckpointHandler's) replaces this one
        signal.signal(signal.SIGTERM, _raise_terminated)
        signal.siginterrupt(signal.SIGTERM, False)  # restart interrupted system calls
    failure = _run_catching(program)
    if program.elastic:  # ending now: a signal ends the process, not the failure path
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if failure is None:
        agreed = _lifecycle.agreed_exit_code()
        status = 0 if agreed is None else agreed
        if _lifecycle.peer_failure_seen():  # it went on after a peer's failure (ULFM)
            status = _status_after_lost_ranks(status)
            _failure_report.end_with_live_peers(waits=status != 0)
            _lifecycle.exit_without_finalize(status)
        return status
    return fail(failure)


def _status_after_lost_ranks(status: int) -> int:
    """The program's status, made non-zero if a rank it went on without had failed with an
    uncaught exception (elastic mode): the job must not look like a success."""
    reports = _lifecycle.lost_rank_failures()
    if not reports or status != 0:
        return status
    rank = _where()[0]
    _write_stderr(
        f"[{PROG}] rank {rank}: the program went on without {len(reports)} rank(s) that failed "
        f"with an uncaught exception (reported when they left); ending with status "
        f"{EXCEPTION_STATUS}",
        f"[{PROG}] rank {rank}",
        "",
    )
    return EXCEPTION_STATUS


def _run_catching(program: Program) -> Failure | None:
    """Runs the program; returns how it failed, or None when it ended normally."""
    try:
        run_program(program)
    except SystemExit as exc:
        return _exit_failure(exc)
    except KeyboardInterrupt as exc:
        return Failure(INTERRUPT_STATUS, "interrupted (KeyboardInterrupt)", format_exception(exc))
    except Terminated:  # the same report on every rank it reaches: one line for all of them
        return Failure(TERMINATED_STATUS, "terminated (SIGTERM)", counts_as_failure=False)
    except BaseException as exc:
        return Failure(EXCEPTION_STATUS, f"uncaught {type(exc).__name__}", format_exception(exc))
    return None


def _exit_failure(exc: SystemExit) -> Failure | None:
    """Maps ``sys.exit(code)`` the way CPython does: None/0 succeed, other objects are printed."""
    code = exc.code
    if code is None or code == 0:
        return None
    if code == _lifecycle.agreed_exit_code():  # every rank stops here by agreement: no abort
        return None
    if isinstance(code, int):
        return Failure(code, f"sys.exit({code})")
    return Failure(EXCEPTION_STATUS, "sys.exit() with a message", f"{code}\n")


def format_exception(exc: BaseException) -> str:
    """Formats ``exc`` with its chain, dropping the runner's and runpy's own leading frames."""
    tb = exc.__traceback__
    while tb is not None and _is_internal(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb or exc.__traceback__)
    return "".join(lines)


def _is_internal(filename: str) -> bool:
    """Whether a frame's file is the runner's or runpy's (frozen names are not paths)."""
    return filename in _INTERNAL_FILES or os.path.abspath(filename) in _INTERNAL_FILES


def fail(failure: Failure) -> int:
    """Reports ``failure`` on stderr, then aborts the job when other ranks may be waiting.

    Returns the status only when there is nothing to abort (no launcher, MPI never initialised)
    or aborting is impossible (MPI already finalised).
    """
    aborting = _mpi.is_initialized() or _launcher() is not None
    action = "aborting the job" if aborting else f"exiting with status {failure.status}"
    if _lifecycle.peer_failure_seen():  # no MPI_Abort after one (_lifecycle.abort_job)
        action = f"ending with status {failure.status} (a peer failed)"
    rank, size = _where()
    tag = f"[{PROG}] rank {rank}"
    report = f"{failure.reason}\n{failure.details}"
    same = _failure_report.same_failure(report) if _mpi_running() else None
    # Elastic: a rank failing while others go on (they did not all join the exchange) leaves
    # alone; the last ones alive end the job as without --elastic (a job of ranks that all
    # died by SIGKILL would end with status 0 under ULFM: measured).
    nobody_goes_on = False
    if _lifecycle.elastic() and same is None and _can_leave_alone():
        where = f"{tag} of {size}"
        _failure_report.tell_peers(f"{where}: {report}", failed=failure.counts_as_failure)
        # a peer lost already fails the exchange: every live peer failing too ends the job
        nobody_goes_on = _failure_report.every_live_peer_left()
        if not nobody_goes_on:
            _leave_alone(failure, where)
    # Every rank failed (all joined the exchange, or every live one reported), so none waits
    # for another. Under --with-ft ulfm several ranks in MPI_Abort at once were seen to hang
    # the job (CI, 4 ranks raising together): each ends with the status instead.
    every_rank_under_ulfm = (same is not None or nobody_goes_on) and ulfm.enabled(_mpi.mpi())
    if every_rank_under_ulfm:
        why = "every rank failed" if same is not None else "every rank left failed"
        action = f"ending with status {failure.status} ({why})"
    if same is None or len(same) == 1:
        _write_stderr(f"{tag} of {size}: {failure.reason}, {action}", tag, failure.details)
    elif str(same[0]) == rank:  # the lowest rank of the group speaks for it
        group = f"[{PROG}] ranks {_ranks_text(same)}"
        _write_stderr(f"{group} of {size}: {failure.reason}, {action}", group, failure.details)
    if same is not None:
        _failure_report.printed()
    if every_rank_under_ulfm:
        _lifecycle.exit_without_finalize(failure.status % 256 or EXCEPTION_STATUS)
    if aborting:
        if not _mpi.is_initialized():
            timeout = _init_timeout()
            _write_stderr(
                f"{tag}: initialising MPI to abort (giving up after {timeout:g}s if the other "
                f"ranks never start MPI; set {INIT_TIMEOUT_VARIABLE} to change)",
                tag,
                "",
            )
        try:
            abort(failure.status)
        except Exception as exc:  # no mpi4py, or MPI refused: exiting non-zero is what is left
            _write_stderr(f"{tag}: could not abort the job: {exc!r}", tag, "")
    return failure.status


def _can_leave_alone() -> bool:
    """Whether this rank's peers can go on without it: ULFM is on (elsewhere a rank that
    leaves ends the job, so it aborts as without --elastic) and one of them is alive."""
    return ulfm.enabled(_mpi.mpi()) and _failure_report.peers_alive()


def _leave_alone(failure: Failure, where: str) -> NoReturn:
    """Elastic mode, a rank failing while others go on: after its report went to its peers
    (:func:`fail`; marked as no failure when it was told to stop: ``Terminated``), it
    ends itself by ``SIGKILL``, so that they shrink and go on (docs/elastic.md). Open MPI
    does not report a rank that exits without ``MPI_Finalize``: its peers would wait.
    """
    _write_stderr(
        f"{where}: {failure.reason}, leaving the job (--elastic: the others go on without it)",
        where,
        failure.details,
    )
    _lifecycle.flush_streams()
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("not reached: SIGKILL")


def _ranks_text(ranks: list[int]) -> str:
    """``0-3`` for a contiguous run, else ``0, 2, 5``."""
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def _where() -> tuple[str, str]:
    """This rank and the world size: from COMM_WORLD when MPI is up, else from the launcher."""
    if _mpi_running():
        return str(_mpi.world_rank()), str(_mpi.world_size())
    info = _launcher()
    if info is None:
        return "0", "1"
    return str(info.rank), "?" if info.size is None else str(info.size)


def _launcher() -> LauncherInfo | None:
    """What the launcher's variables say, or None (also for a malformed variable)."""
    try:
        return detect_launcher()
    except ValueError:
        return None


def _mpi_running() -> bool:
    """Whether MPI is initialised and not finalised, without initialising it."""
    return _mpi.is_initialized() and not _mpi.mpi().Is_finalized()


def _write_stderr(header: str, tag: str, details: str) -> None:
    """Writes the report as one block, each line tagged, after flushing the program's output.

    One write keeps the block together when several ranks fail at once; the tag tells their
    interleaved lines apart.
    """
    _lifecycle.flush_streams()
    body = "".join(f"{tag}: {line}\n" for line in details.splitlines())
    sys.stderr.write(f"{header}\n{body}")
    _lifecycle.flush_streams()


def abort(status: int) -> int:
    """Calls ``MPI_Abort(COMM_WORLD, status)``, initialising MPI first if the program did not.

    Returns ``status`` only when MPI is finalised already, so the caller can exit normally.
    """
    mpi = _initialised_mpi()
    if mpi.Is_finalized():
        return status
    # Exit codes are one byte; keep the job's non-zero even for sys.exit(256) or sys.exit(-1).
    _lifecycle.abort_job(status % 256 or EXCEPTION_STATUS)
    return status  # not reached: Abort ends the process


def _initialised_mpi() -> types.ModuleType:
    """``mpi4py.MPI``, initialised; a watchdog ends the process if MPI_Init never completes.

    MPI_Init waits until every rank has entered MPI (MPICH's PMI fence) and holds the GIL while
    it waits, so only a C-level watchdog (faulthandler's) can bound it. If it fires, it dumps
    this stack and exits with status 1 — non-zero, which is all the launcher needs.
    """
    if not _mpi.is_initialized():
        faulthandler.dump_traceback_later(_init_timeout(), exit=True)
    try:
        mpi = _mpi.mpi()
        if not mpi.Is_initialized():  # the program imported MPI with mpi4py.rc.initialize=False
            mpi.Init_thread()
    finally:
        faulthandler.cancel_dump_traceback_later()
    return mpi


def init_timeout(environ: _env.Environ = None) -> float:
    """Seconds a failing rank waits in MPI_Init before giving up on aborting the job.

    Raises:
      ValueError: naming ``MWMS_MPI_RUN_INIT_TIMEOUT``, unless it is a number >= 1.
    """
    return _env.env_float(
        INIT_TIMEOUT_VARIABLE,
        DEFAULT_INIT_TIMEOUT_S,
        minimum=1,
        what="seconds a failing rank waits in MPI_Init to abort the job",
        environ=environ,
    )


def _init_timeout() -> float:
    """:func:`init_timeout` on the failure path, which must not raise: :func:`main` reported a
    bad value before the program started, and the default serves the abort it then made."""
    try:
        return init_timeout()
    except ValueError:
        return DEFAULT_INIT_TIMEOUT_S


if __name__ == "__main__":
    sys.exit(main())

"""Launch ``mpiexec -n N`` from a serial test, bounded in time, with a clean environment.

End-to-end failure tests (aborts, collective timeouts, mismatched shapes) leave an MPI job poisoned,
so they run it as a subprocess of a pytest that never imports ``mpi4py.MPI`` itself
(docs/architecture.md, "Traps": a deadline leaves a poisoned job). The child environment drops every
launcher variable this process may have inherited (a pytest started under ``mpiexec`` would
otherwise make the child MPI processes think they belong to the parent's job) and limits BLAS/OpenMP
threads (4 ranks on 2 cores). The command line comes from :mod:`mwms_mpi.cluster.mpiexec`, the one
source of each launcher family's flags (Open MPI's root and oversubscription flags) and whole-job
time limit (hydra's ``MPIEXEC_TIMEOUT``, prterun's ``--timeout``), so a hung job is ended by the
launcher before the Python-side timeout has to.

Time bounds are ordered: the launcher's job limit < the subprocess timeout (``timeout`` +
:data:`KILL_GRACE_S`, which kills the whole process group) < the test's pytest-timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mwms_mpi.cluster.mpiexec import (
    DEFAULT_DETECTOR,
    FailureDetector,
    Family,
    Mpiexec,
    default_path,
    probe,
)
from tests.support.shm import sweep_stale_segments

# Variables a launcher puts into its children; a child job must not inherit them.
LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "HYDRA_", "PRTE_", "MPIEXEC_")
LAUNCHER_NAMES = ("MPI_LOCALRANKID", "MPI_LOCALNRANKS")
# Every test job runs on this one machine: Open MPI's TCP transport, there by default, cost
# 1 s at each start (a 4-rank start and barrier: 1.3 s, 0.3 s with these). MPICH ignores it.
ONE_MACHINE = {"OMPI_MCA_btl": "self,sm"}

# Seconds between the launcher's own job time limit and our kill of the process group.
KILL_GRACE_S = 15.0

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class LaunchResult:
    """What an ``mpiexec`` run did: exit code, output, wall time, and whether we had to kill it."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    family: Family
    killed: bool = False

    @property
    def output(self) -> str:
        """stdout and stderr together (ranks' streams interleave anyway)."""
        return self.stdout + self.stderr

    @property
    def launcher_timed_out(self) -> bool:
        """Whether the launcher's whole-job time limit ended the job, in its family's words."""
        return self.family.timeout_text in self.output

    @property
    def mpi_aborted(self) -> bool:
        """Whether the launcher reported a rank's ``MPI_Abort``, in its family's words."""
        return self.family.abort_text in self.output

    def describe(self) -> str:
        """A report for assertion messages: the command, the code, the time and all output."""
        return (
            f"command: {' '.join(self.args)}\n"
            f"returncode: {self.returncode}, wall: {self.wall_s:.1f}s, killed: {self.killed}, "
            f"launcher: {self.family.name}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


def mpiexec() -> Mpiexec:
    """The ``mpiexec`` beside this Python (the venv's), or ``$MWMS_MPIEXEC``, and its family."""
    return probe(default_path())


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment minus launcher variables, plus thread limits and ``extra``.

    The repository root goes first on ``PYTHONPATH`` so the child imports this checkout's
    ``mwms_mpi`` whatever its working directory is.
    """
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(LAUNCHER_PREFIXES)
        and name not in LAUNCHER_NAMES
        and name != "MWMS_TEST_SKIP_LOG"  # a child pytest's skips are not this run's
    }
    env["OMP_NUM_THREADS"] = "1"
    env["OPENBLAS_NUM_THREADS"] = "1"
    env.update(ONE_MACHINE)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env.update(extra or {})
    return env


def run_mpi(
    n: int,
    argv: Sequence[str | os.PathLike[str]],
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    fault_tolerant: bool = False,
    detector: FailureDetector | None = DEFAULT_DETECTOR,
) -> LaunchResult:
    """Runs ``mpiexec -n n *argv`` and waits at most ``timeout`` (+ grace) seconds.

    Args:
      n: the number of ranks.
      argv: the program and its arguments, e.g. ``[sys.executable, "-m", "mwms_mpi.run", path]``.
      timeout: the launcher's whole-job limit; the whole process group is killed
        :data:`KILL_GRACE_S` seconds later if the launcher has not ended the job by then.
      env: variables added to the cleaned environment (they win over the defaults).
      cwd: working directory of the job (default: the repository root).
      fault_tolerant: launch so that survivors of a lost rank go on (Open MPI's
        ``--with-ft ulfm``; ``ValueError`` for a launcher without it).
      detector: with ``fault_tolerant``, the heartbeat failure detector (default: Open MPI's
        settings, as ``mwms-mpi launch --elastic`` uses), or None for none.

    Returns:
      A :class:`LaunchResult`; ``killed`` is True when we had to kill the job.
    """
    return start_mpi(
        n, argv, timeout, env, cwd, fault_tolerant=fault_tolerant, detector=detector
    ).wait()


@dataclass
class RunningJob:
    """An ``mpiexec`` job started by :func:`start_mpi`; :meth:`wait` bounds it as ``run_mpi``."""

    args: tuple[str, ...]
    process: subprocess.Popen[str]
    timeout: float
    start: float
    family: Family

    def wait(self) -> LaunchResult:
        """Waits for the job (killing its process group after ``timeout`` + grace)."""
        left = max(0.0, self.start + self.timeout + KILL_GRACE_S - time.monotonic())
        killed = False
        try:
            stdout, stderr = self.process.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            killed = True
            _kill_group(self.process)
            stdout, stderr = self.process.communicate(timeout=KILL_GRACE_S)
        wall_s = time.monotonic() - self.start
        sweep_stale_segments()  # what a killed or aborted rank left in /dev/shm (see shm.py)
        return LaunchResult(
            self.args, self.process.returncode, stdout, stderr, wall_s, self.family, killed=killed
        )


def start_mpi(
    n: int,
    argv: Sequence[str | os.PathLike[str]],
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    fault_tolerant: bool = False,
    detector: FailureDetector | None = DEFAULT_DETECTOR,
) -> RunningJob:
    """Starts ``mpiexec -n n *argv`` without waiting (for tests that act on a running job).

    Arguments as :func:`run_mpi`; call ``wait()`` on the result, always.
    """
    launcher = mpiexec()
    command = launcher.command(n, argv, timeout, fault_tolerant=fault_tolerant, detector=detector)
    start = time.monotonic()
    process = subprocess.Popen(
        command.args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env({**command.env, **(env or {})}),
        cwd=os.fspath(cwd) if cwd is not None else REPO_ROOT,
        start_new_session=True,  # its own process group, so a kill reaches every rank
    )
    return RunningJob(command.args, process, timeout, start, launcher.family)


def _kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILLs the job's process group (mpiexec, its proxies and the ranks)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def run_python_mpi(
    n: int,
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    fault_tolerant: bool = False,
) -> LaunchResult:
    """Runs ``mpiexec -n n python -m mwms_mpi.run script *args``: the documented launch."""
    argv = [sys.executable, "-m", "mwms_mpi.run", os.fspath(script), *args]
    return run_mpi(n, argv, timeout=timeout, env=env, cwd=cwd, fault_tolerant=fault_tolerant)


def json_records(text: str) -> list[Any]:
    """Every JSON object in ``text``, in order, even where ranks' lines ran together.

    Ranks write to one pipe; with ``PYTHONUNBUFFERED`` set, ``print`` issues the text and the
    newline as two writes, so two ranks' lines can arrive as ``{...}{...}\\n\\n``.
    """
    decoder = json.JSONDecoder()
    records, index = [], text.find("{")
    while index != -1:
        try:
            record, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            end = index + 1
        else:
            records.append(record)
        index = text.find("{", end)
    return records


def write_script(directory: Path, name: str, source: str) -> Path:
    """Writes dedented ``source`` to ``directory/name`` and returns the path."""
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip())
    return path

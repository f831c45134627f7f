"""pytest under ``mpiexec``: one report, outcomes agreed across ranks, no hang (``--mwms-mpi``).

``mpiexec -n 4 python -m pytest --mwms-mpi tests/`` runs every test on every rank, as plain
pytest (or pytest-mpi) would, but:

* **One report.** Every rank but 0 is silenced: one list of results, one closing line.
* **Outcomes agreed.** Each test phase's outcome is agreed across ranks on a private
  communicator: a failure on any rank fails the test on every rank, and rank 0's report shows
  each failing rank's traceback ("call failed on rank(s) [2] of 4"); a skip on any rank skips it
  everywhere. So all ranks stay in step, and a failing setup skips the test body on every rank.
* **No hang.** A rank whose peers do not finish a test phase within ``MWMS_TEST_AGREE_TIMEOUT``
  seconds (60) prints its own report and aborts the job: the others are stuck in a collective
  this rank left by failing an assertion. (pytest-mpi alone hangs there.) Bound the rest with
  pytest-timeout (``timeout_method = thread``: a signal cannot reach a rank blocked in MPI) and
  the launcher's job limit, in that order of time.
* **Per-rank temporary paths.** Each rank gets its own ``--basetemp``, so ``tmp_path`` works
  (pytest's cleanup of numbered directories races between ranks otherwise); the
  :func:`mpi_shared_dir` fixture is one directory every rank sees.
* **The same hypothesis draws on every rank**, with the ``mwms-mpi`` profile (derandomised, no
  example database, no deadline, health checks off; ``MWMS_TEST_MAX_EXAMPLES``, 40): ranks that
  draw different examples call different collectives and hang.
* **The world size checked.** With ``--mwms-mpi-size N`` (or ``MWMS_TEST_WORLD_SIZE=N``) a
  world of another size is a usage error: a foreign ``mpiexec`` or ``srun --mpi=none`` starts N
  one-rank worlds, in which every test passes alone.

The plugin is installed with mwms_mpi (entry point ``mwms_mpi.testing``) and does nothing, and
imports no MPI, without ``--mwms-mpi``; with pytest's plugin autoload off, add
``-p mwms_mpi.testing``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mwms_mpi import _env, _lifecycle, _mpi

HYPOTHESIS_PROFILE = "mwms-mpi"
AGREE_TIMEOUT_ENV = "MWMS_TEST_AGREE_TIMEOUT"
WORLD_SIZE_ENV = "MWMS_TEST_WORLD_SIZE"
MAX_EXAMPLES_ENV = "MWMS_TEST_MAX_EXAMPLES"
JOB_ENV = "MWMS_TEST_JOB"  # names the per-rank basetemp where the launcher exports no job id
_PASSED, _SKIPPED, _FAILED = 0, 1, 2


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("mwms-mpi", "MPI-safe runs under mpiexec (mwms_mpi.testing)")
    group.addoption(
        "--mwms-mpi",
        action="store_true",
        dest="mwms_mpi",
        help="agree outcomes across ranks, print one report, abort instead of hanging",
    )
    group.addoption(
        "--mwms-mpi-size",
        type=int,
        dest="mwms_mpi_size",
        metavar="N",
        help=f"the world size this run expects (default ${WORLD_SIZE_ENV}); another is an error",
    )


def register_hypothesis_profile() -> str:
    """Registers the ``mwms-mpi`` hypothesis profile (rank-identical draws); returns its name."""
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        HYPOTHESIS_PROFILE,
        derandomize=True,
        database=None,
        deadline=None,
        max_examples=_env.env_int(MAX_EXAMPLES_ENV, 40, minimum=1),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    return HYPOTHESIS_PROFILE


def agree_timeout(environ: _env.Environ = None) -> float:
    """``MWMS_TEST_AGREE_TIMEOUT``: seconds a rank waits for its peers' outcome (default 60).

    Raises:
      ValueError: naming the variable, unless it is a number > 0.
    """
    text = _env.env_str(AGREE_TIMEOUT_ENV, environ)
    if text is None:
        return 60.0
    try:
        timeout = _env.parse_float(AGREE_TIMEOUT_ENV, text)
    except ValueError:
        timeout = 0.0
    if timeout <= 0:
        raise _env.invalid(AGREE_TIMEOUT_ENV, text, "a number > 0 (seconds)")
    return timeout


def expected_world_size(option: int | None, environ: _env.Environ = None) -> int | None:
    """The world size the run was launched for: ``--mwms-mpi-size``, else
    ``MWMS_TEST_WORLD_SIZE``, else ``None`` (not checked).

    Raises:
      ValueError: naming the variable, unless it is an integer >= 1.
    """
    if option is not None:
        return option
    return _env.env_int(WORLD_SIZE_ENV, None, minimum=1, environ=environ)


def _active(config: pytest.Config) -> bool:
    return bool(config.getoption("mwms_mpi", default=False))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Gives each rank its own basetemp before pytest's tmp-path factory is built."""
    if not _active(config) or config.option.basetemp:
        return
    world = _mpi.mpi().COMM_WORLD
    job = _env.env_str("PMI_JOBID") or _env.env_str(JOB_ENV) or str(os.getppid())
    config.option.basetemp = os.path.join(
        tempfile.gettempdir(), f"mwms-pytest-{job}-rank{world.Get_rank()}"
    )


class _Glue:
    """The per-process state of the glue: a private communicator and this rank's id."""

    def __init__(self) -> None:
        self.mpi = _mpi.mpi()
        self.comm = self.mpi.COMM_WORLD.Dup()
        self.rank: int = self.comm.Get_rank()
        self.size: int = self.comm.Get_size()
        self.timeout = agree_timeout()

    def _abort(self, report: pytest.TestReport, why: str) -> None:
        _lifecycle.abort_job(
            1,
            f"\n[mwms_mpi.testing] rank {self.rank} of {self.size}: {why}; "
            f"this rank's {report.when} of {report.nodeid} was {report.outcome}:\n"
            f"{report.longreprtext}\naborting the job",
        )

    def _worst_outcome(self, report: pytest.TestReport, code: int) -> int:
        send = np.array([code], dtype=np.int32)
        recv = np.zeros(1, dtype=np.int32)
        request = self.comm.Iallreduce(send, recv, op=self.mpi.MAX)
        deadline = time.monotonic() + self.timeout
        pause = 1e-5
        while not request.Test():
            if time.monotonic() > deadline:
                self._abort(
                    report, f"the other ranks did not finish this phase within {self.timeout:g} s"
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        return int(recv[0])

    def agree(self, report: pytest.TestReport) -> None:
        """Makes ``report`` the worst outcome over all ranks, with the failing ranks' texts."""
        if report.failed:
            code = _FAILED
        elif report.skipped:
            code = _SKIPPED
        else:
            code = _PASSED
        worst = self._worst_outcome(report, code)
        if worst == _PASSED:
            return
        outcomes = self.comm.allgather((code, report.longreprtext, _skip_reason(report)))
        if worst == _FAILED:
            bad = [r for r, (c, _, _) in enumerate(outcomes) if c == _FAILED]
            text = [f"{report.when} failed on rank(s) {bad} of {self.size}"]
            for r in bad:
                text.append(f"\n---------- rank {r} ----------\n{outcomes[r][1]}")
            report.outcome = "failed"
            report.longrepr = "\n".join(text)
        elif code == _PASSED:
            skipped = [r for r, (c, _, _) in enumerate(outcomes) if c == _SKIPPED]
            reason = next(o[2] for o in outcomes if o[0] == _SKIPPED)
            path, line, _ = report.location
            report.outcome = "skipped"
            report.longrepr = (
                str(path),
                (line or 0) + 1,
                f"skipped on rank(s) {skipped}: {reason}",
            )


def _skip_reason(report: pytest.TestReport) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    return ""


_GLUE = pytest.StashKey[_Glue]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under ``--mwms-mpi``: world-size check, private communicator, one reporter, profile."""
    if not _active(config):
        return
    try:
        expected = expected_world_size(config.getoption("mwms_mpi_size", default=None))
        glue = _Glue()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if expected is not None and expected != glue.size:
        raise pytest.UsageError(
            f"launched for {expected} ranks but this MPI world has {glue.size}: a foreign "
            "mpiexec or `srun --mpi=none` starts independent one-rank worlds"
        )
    config.stash[_GLUE] = glue
    if glue.rank != 0:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)
    try:
        from hypothesis import settings
    except ImportError:
        return
    settings.load_profile(register_hypothesis_profile())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    """Agrees every phase's outcome across ranks before pytest acts on it."""
    report = yield
    glue = item.config.stash.get(_GLUE, None)
    if glue is not None:
        glue.agree(report)
    return report


@pytest.fixture
def mpi_shared_dir(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A directory every rank sees: rank 0 makes it and broadcasts the path, then removes it.

    Without ``--mwms-mpi`` it is a plain temporary directory.
    """
    glue = request.config.stash.get(_GLUE, None)
    if glue is None:
        path = Path(tempfile.mkdtemp(prefix="mwms-shared-"))
        yield path
        shutil.rmtree(path, ignore_errors=True)
        return
    made = tempfile.mkdtemp(prefix="mwms-shared-") if glue.rank == 0 else None
    path = Path(glue.comm.bcast(made, root=0))
    glue.comm.Barrier()
    yield path
    glue.comm.Barrier()
    if glue.rank == 0:
        shutil.rmtree(path, ignore_errors=True)

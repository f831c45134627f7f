"""pytest under ``mpiexec``: one report, outcomes agreed across ranks, no hang (``--mwms-mpi``).

``mpiexec -n 4 python -m pytest --mwms-mpi tests/`` runs every test on every rank, as plain
pytest (or pytest-mpi) would, but:

* **One report.** Every rank but 0 is silenced: one list of results, one closing line.
* **Outcomes agreed.** Each test phase's outcome is agreed across ranks on a private
  communicator: a failure on any rank fails the test on every rank, and rank 0's report shows
  each failing rank's traceback ("call failed on rank(s) [2] of 4"); a skip on any rank skips it
  everywhere. So all ranks stay in step, and a failing setup skips the test body on every rank.
* **Fail fast.** A rank that failed a test phase and whose peers do not come to the agreement
  within ``ASK_GRACE_S`` (1 s) asks them where they are, on the process watch's control
  channel (``collective/positions.py``); each peer's watch thread answers at once, even while
  its main thread is blocked in MPI, with its test, its phase and its collectives in flight. A
  peer blocked in a collective call that the failing rank never entered (numbered past the
  calls it completed on that communicator) can never finish: once every peer is either that
  or waiting in the agreement itself, the lowest failing rank prints one pytest-style summary
  (the test, each failing rank's traceback, where every other rank is blocked, the tally) and
  aborts the job, seconds after the failure. A peer that is merely slow (in no collective, or
  in one the failing rank completed) is asked again every ``ASK_PERIOD_S`` (1 s) and waited
  for. A collective with ``CommunicationOptions(timeout_seconds=...)`` counts as blocked too:
  its deadline would poison the communicator, after which the job cannot end cleanly anyway.
  Nothing is asked in a run whose phases agree within the grace.
* **No hang.** Otherwise (peers blocked outside mwms_mpi's collectives, e.g. a raw mpi4py
  ``Barrier``; no communicator over the whole world yet; MPI without
  ``MPI_THREAD_MULTIPLE``), a rank whose peers do not finish a test phase within
  ``MWMS_TEST_AGREE_TIMEOUT`` seconds (60) prints its own report, with the peers' last
  answers, and aborts the job. (pytest-mpi alone hangs there.) Bound the rest with
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

import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mwms_mpi import _env, _lifecycle, _mpi
from mwms_mpi.collective.positions import CallInFlight, Position, blocked_calls
from mwms_mpi.collective.watch import process_watch

HYPOTHESIS_PROFILE = "mwms-mpi"
AGREE_TIMEOUT_ENV = "MWMS_TEST_AGREE_TIMEOUT"
WORLD_SIZE_ENV = "MWMS_TEST_WORLD_SIZE"
MAX_EXAMPLES_ENV = "MWMS_TEST_MAX_EXAMPLES"
JOB_ENV = "MWMS_TEST_JOB"  # names the per-rank basetemp where the launcher exports no job id
_PASSED, _SKIPPED, _FAILED = 0, 1, 2
ASK_GRACE_S = 1.0  # a failing rank's wait for its peers before it asks where they are
ASK_PERIOD_S = 1.0  # how often it asks again while a peer may still come
# pytest's order of the closing line's counts (_pytest.terminal.KNOWN_TYPES)
_TALLY_ORDER = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "error")


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
    """The per-process state of the glue: a private communicator, this rank's id, where this
    rank is (for its answers to a failing peer) and the tally of agreed outcomes (for the
    summary a failing rank prints when it ends the job)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.mpi = _mpi.mpi()
        self.comm = self.mpi.COMM_WORLD.Dup()
        self.rank: int = self.comm.Get_rank()
        self.size: int = self.comm.Get_size()
        self.timeout = agree_timeout()
        self.started = time.time()
        self.where = ("", "")  # (node id, phase) this rank runs
        self.agreements = 0  # the same count on every rank: it names one phase's agreement
        self.agreeing: tuple[int, str | None] | None = None  # (agreement, failure text)
        self.tally: dict[str, int] = {}
        if self.size > 1:
            process_watch().set_status_source(self.status)

    def status(self) -> dict[str, Any]:
        """What this rank's watch tells a peer that asks (called on the watch thread)."""
        agreeing = self.agreeing
        return {
            "test": self.where[0],
            "when": self.where[1],
            "agreeing": None if agreeing is None else agreeing[0],
            "failure": None if agreeing is None else agreeing[1],
        }

    def count(self, report: pytest.TestReport) -> None:
        """Adds an agreed report to the tally, in pytest's categories."""
        status = self.config.hook.pytest_report_teststatus(report=report, config=self.config)
        category = status[0] if status else ""
        if category:
            self.tally[category] = self.tally.get(category, 0) + 1

    def _abort(self, report: pytest.TestReport, why: str) -> None:
        _lifecycle.abort_job(
            1,
            f"\n[mwms_mpi.testing] rank {self.rank} of {self.size}: {why}; "
            f"this rank's {report.when} of {report.nodeid} was {report.outcome}:\n"
            f"{report.longreprtext}\naborting the job",
        )

    def _worst_outcome(self, report: pytest.TestReport, code: int) -> int:
        self.agreements += 1
        failure = report.longreprtext if code == _FAILED else None
        self.agreeing = (self.agreements, failure)
        try:
            send = np.array([code], dtype=np.int32)
            recv = np.zeros(1, dtype=np.int32)
            request = self.comm.Iallreduce(send, recv, op=self.mpi.MAX)
            start = time.monotonic()
            deadline = start + self.timeout
            fast = _FailFast(self, report, start) if failure is not None else None
            pause = 1e-5
            while not request.Test():
                now = time.monotonic()
                if fast is not None:
                    fast.step(now)
                if now > deadline:
                    where = fast.describe_peers() if fast is not None else ""
                    self._abort(
                        report,
                        f"the other ranks did not finish this phase within {self.timeout:g} s"
                        + (f" (their last answers: {where})" if where else ""),
                    )
                time.sleep(pause)
                pause = min(pause * 2, 0.01)
            return int(recv[0])
        finally:
            self.agreeing = None

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


class _FailFast:
    """A failing rank's watch on peers that do not come to the agreement: ask where they are,
    and end the job with one summary once they can never come (see the module's docstring)."""

    def __init__(self, glue: _Glue, report: pytest.TestReport, start: float) -> None:
        self.glue = glue
        self.report = report
        self.token = glue.agreements
        self.watch = process_watch()
        self.completed = self.watch.completed_calls()  # this rank makes no call meanwhile
        self.next_ask = start + ASK_GRACE_S if glue.size > 1 else math.inf
        self.asked = False
        self.positions: dict[int, Position] = {}

    def step(self, now: float) -> None:
        """Asks (after the grace, then every period), reads answers; may end the job."""
        if not self.asked and now < self.next_ask:
            return
        for position in self.watch.answers(self.token):
            self.positions[position.world_rank] = position  # a later answer is newer
        if now >= self.next_ask:
            self.asked = self.watch.ask(self.token)
            self.next_ask = now + ASK_PERIOD_S if self.asked else math.inf
        if len(self.positions) == self.glue.size - 1:
            self._conclude()

    def _blocked(self, rank: int) -> list[CallInFlight]:
        return blocked_calls(self.positions[rank], self.completed)

    def _status(self, rank: int) -> dict[str, Any]:
        status = self.positions[rank].status
        return status if isinstance(status, dict) else {}

    def _conclude(self) -> None:
        """Ends the job if no peer can still come and this is the lowest failing rank."""
        waiting = {r for r in self.positions if self._status(r).get("agreeing") == self.token}
        blocked = {r for r in self.positions if self._blocked(r)}
        if not blocked or set(self.positions) - blocked - waiting:
            return  # a peer may still come (or all have: the agreement completes)
        failing = sorted(
            {self.glue.rank} | {r for r in waiting if self._status(r).get("failure") is not None}
        )
        if failing[0] == self.glue.rank:  # the others wait for it to end the job
            self._report_and_abort(failing, sorted(blocked))

    def describe_peers(self) -> str:
        """Each answering peer's last position, for a message."""
        return "; ".join(f"rank {r}: {self._describe(r)}" for r in sorted(self.positions))

    def _describe(self, rank: int) -> str:
        status = self._status(rank)
        text = f"in {status.get('test') or '(no test)'} ({status.get('when') or '-'})"
        blocked = self._blocked(rank)
        if blocked:
            calls = "; ".join(f"{c.text} on communicator {c.comm_name}" for c in blocked)
            return f"{text}, blocked in {calls}, which the failing rank(s) never entered"
        if status.get("agreeing") == self.token:
            return f"{text}, waiting for the other ranks' outcome of this phase"
        calls = "; ".join(c.text for c in self.positions[rank].calls)
        return f"{text}, " + (f"in {calls}" if calls else "in no collective of mwms_mpi")

    def _report_and_abort(self, failing: list[int], blocked: list[int]) -> None:
        glue, report = self.glue, self.report
        head = (
            f"{report.when} failed on rank(s) {failing} of {glue.size}, and rank(s) {blocked} "
            "wait in a collective that the failing rank(s) never entered"
        )
        peers = [f"rank {r}: {self._describe(r)}" for r in sorted(self.positions)]
        text = [head, *peers]
        for r in failing:
            own = report.longreprtext if r == glue.rank else self._status(r).get("failure")
            text.append(f"\n---------- rank {r} ----------\n{own}")
        report.outcome = "failed"
        report.longrepr = "\n".join(text)
        glue.count(report)
        quiet = glue.config.get_verbosity() < 0
        sys.stdout.write(_summary(report, head, glue.tally, time.time() - glue.started, quiet))
        _lifecycle.abort_job(
            1, f"[mwms_mpi.testing] rank {glue.rank} of {glue.size}: {head}; aborting the job"
        )


def _summary(
    report: pytest.TestReport, head: str, tally: dict[str, int], seconds: float, quiet: bool
) -> str:
    """pytest's closing sections for one failed phase: failures, short summary, counts (the
    last line undecorated under ``-q``, as pytest's)."""
    title, section, word = report.head_line or report.nodeid, "FAILURES", "FAILED"
    if report.when != "call":
        title, section, word = f"ERROR at {report.when} of {title}", "ERRORS", "ERROR"
    counts = ", ".join(
        f"{tally[k]} {k}{'s' if k == 'error' and tally[k] > 1 else ''}"
        for k in _TALLY_ORDER
        if tally.get(k)
    )
    closing = f"{counts or 'no tests ran'} in {seconds:.2f}s"
    return "\n".join(
        [
            "",
            _sep("=", section),
            _sep("_", title),
            report.longreprtext,
            _sep("=", "short test summary info"),
            f"{word} {report.nodeid} - {head}",
            closing if quiet else _sep("=", closing),
            "",
        ]
    )


def _sep(char: str, title: str, width: int = 80) -> str:
    """A pytest separator line: ``==== title ====``."""
    fill = char * max((width - len(title) - 2) // 2, 1)
    return f"{fill} {title} {fill}"


_GLUE = pytest.StashKey[_Glue]()


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under ``--mwms-mpi``: world-size check, private communicator, one reporter, profile."""
    if not _active(config):
        return
    try:
        expected = expected_world_size(config.getoption("mwms_mpi_size", default=None))
        glue = _Glue(config)
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
        glue.count(report)
    return report


def _enter(item: pytest.Item, when: str) -> None:
    glue = item.config.stash.get(_GLUE, None)
    if glue is not None:
        glue.where = (item.nodeid, when)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Notes the phase this rank runs, for its answer to a failing peer."""
    _enter(item, "setup")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """As :func:`pytest_runtest_setup`."""
    _enter(item, "call")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """As :func:`pytest_runtest_setup`."""
    _enter(item, "teardown")


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

"""The project's own test set-up: the MPI test glue is the shipped plugin, ``mwms_mpi.testing``.

``make test-mpi`` runs ``mpiexec -n N python -m pytest --with-mpi --mwms-mpi tests/mpi``:
``--with-mpi`` (pytest-mpi) runs the tests marked ``mpi``, ``--mwms-mpi`` (this project's
plugin) makes every rank agree on each outcome, prints one report and aborts a job whose ranks
stop meeting, instead of hanging (see :mod:`mwms_mpi.testing`). Time bounds are ordered:
agreement (60 s) < pytest-timeout, thread method (120 s) < the launcher's whole-job limit (the
Makefile's ``MPIEXEC_TIMEOUT``, 600 s per mpiexec, passed to each launcher in its own terms by
``mwms_mpi.cluster.mpiexec``).
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from hypothesis import settings

from mwms_mpi import testing

SKIP_LOG_ENV = "MWMS_TEST_SKIP_LOG"
"""A file every run of ``make test`` appends its skipped tests to (one JSON object a line);
``scripts/skip_report.py`` counts them by reason and fails on a test that must run on CI."""

pytest_plugins = ["mwms_mpi.testing"]  # also when pytest's plugin autoload is off


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``--with-mpi`` turns the glue on for this project's own tests, ``--mwms-mpi`` or not.

    Without it an ``mpiexec -n N python -m pytest --with-mpi tests/mpi`` typed by hand is plain
    pytest-mpi: ranks make their own "shared" directories and a rank's failure hangs the rest.
    Users' projects stay opt-in (the plugin is loaded for everyone who installs mwms_mpi).
    Registered after the plugin, this runs before the plugin's own ``pytest_cmdline_main``.
    """
    if config.getoption("with_mpi", default=False):
        config.option.mwms_mpi = True


# Serial runs draw hypothesis examples the way MPI runs must: the same on every rank.
settings.load_profile(testing.register_hypothesis_profile())


def _world_rank() -> int:
    """This process's MPI rank, if an MPI run imported mpi4py's MPI; else 0 (no MPI here)."""
    module = sys.modules.get("mpi4py.MPI")
    return int(module.COMM_WORLD.Get_rank()) if module is not None else 0


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Appends a skipped test (the outcome every rank agreed) to ``MWMS_TEST_SKIP_LOG``, once
    per run (rank 0 writes), with the world size and the run's GPU mode."""
    path = os.environ.get(SKIP_LOG_ENV)
    if not path or not report.skipped or hasattr(report, "wasxfail") or _world_rank() != 0:
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    record = {
        "test": report.nodeid,
        "reason": reason.removeprefix("Skipped: "),
        "world": os.environ.get("MWMS_TEST_WORLD_SIZE", "serial"),
        "fake_gpu": os.environ.get("MWMS_TEST_FAKE_CUPY") == "1",
    }
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(record) + "\n")

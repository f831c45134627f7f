"""The GPU suites' set-up: CuPy on a GPU, or (``MWMS_TEST_FAKE_CUPY=1``) the fake; else skipped.

``make test-gpu`` runs these suites under ``mpiexec -n 1, 2, 4`` on the GPU machine, once per
MPI (the ``mpich`` wheel: CuPy arrays are staged; Intel MPI with ``I_MPI_OFFLOAD=1``: handed
to the CUDA-aware MPI), with ``MWMS_TEST_EXPECT_TRANSPORT`` naming the transport the run must
have chosen. Without CuPy or a GPU every test here is collected and skipped, saying why (CI).
``make test-gpu-fake`` runs them on any machine with ``tests/support/fake_cupy.py`` in CuPy's
place: that checks the package's handling of device arrays, not CUDA. Its NCCL is a double
(``tests/support/fake_nccl.py``) that checks the calls, their order across ranks, streams and
groups, and moves the data over MPI; :func:`gpu_per_rank` gives each rank a fake GPU of its own
so that NCCL runs at any world size there.

Under the fake, a test comparing a "GPU" result with the same computation on the host compares
numpy with numpy: such tests carry the marker ``fake_gpu_not_evidence``, and the run's summary
says that those that ran under the fake are not GPU evidence (on a GPU the marker changes
nothing).
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FAKE_ENV = "MWMS_TEST_FAKE_CUPY"
EXPECT_TRANSPORT_ENV = "MWMS_TEST_EXPECT_TRANSPORT"
NOT_EVIDENCE = "fake_gpu_not_evidence"
HERE = Path(__file__).parent


def _find_cupy() -> tuple[types.ModuleType | None, str]:
    """CuPy with a usable GPU, the fake, or ``None`` and why not."""
    if os.environ.get(FAKE_ENV) == "1":
        from tests.support import fake_cupy

        return fake_cupy.install(), "fake"
    try:
        import cupy
    except ImportError:
        return None, "CuPy is not installed (pip install 'mwms-mpi[gpu]'; see docs/gpus.md)"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy sees no GPU"
    except Exception as exc:  # CUDARuntimeError: no driver, an old driver, no device
        return None, f"CuPy cannot use a GPU here: {type(exc).__name__}: {exc}"[:200]
    return cupy, "real"


CUPY, KIND = _find_cupy()
FAKE = KIND == "fake"
_not_evidence: list[str] = []  # the marked tests that passed under the fake


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{NOT_EVIDENCE}: compares a GPU result with the host's; under the fake CuPy both are "
        "numpy, so a pass there is not evidence about GPUs",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skips every GPU test, saying why, when there is no CuPy with a GPU (nor the fake)."""
    if CUPY is not None:
        return
    skip = pytest.mark.skip(reason=KIND)
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if FAKE and report.when == "call" and report.passed and NOT_EVIDENCE in report.keywords:
        _not_evidence.append(report.nodeid)


def _world_rank() -> int:
    module = sys.modules.get("mpi4py.MPI")
    return int(module.COMM_WORLD.Get_rank()) if module is not None else 0


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Under the fake, names the passed tests whose GPU-vs-host comparison was numpy's twice."""
    if not _not_evidence or _world_rank() != 0:
        return
    terminalreporter.write_sep("=", f"{NOT_EVIDENCE}: {len(_not_evidence)} passed")
    terminalreporter.write_line(
        "Under the fake CuPy these compared numpy with numpy: not GPU evidence (make test-gpu "
        "on a GPU is):"
    )
    for nodeid in sorted(_not_evidence):
        terminalreporter.write_line(f"  {nodeid}")


@contextlib.contextmanager
def gpu_per_rank() -> Iterator[None]:
    """Under the fake, each rank's fake GPU is its own while the block runs (so a transport
    decided in it can be NCCL at any world size); on real GPUs, the machine's layout."""
    if not FAKE:
        yield
        return
    from tests.support import fake_cupy

    with fake_cupy.own_gpus():
        yield


@pytest.fixture(scope="session")
def cp() -> types.ModuleType:
    """``cupy`` (or the fake, under ``MWMS_TEST_FAKE_CUPY=1``)."""
    assert CUPY is not None  # the tests were skipped otherwise
    return CUPY


@pytest.fixture(scope="session")
def fake() -> bool:
    """Whether the fake CuPy runs (no CUDA: what only a GPU shows is skipped)."""
    return FAKE


@pytest.fixture(scope="module")
def test_comm() -> Iterator[Any]:
    """A duplicate of COMM_WORLD for the tests' own checks (agreeing pass/fail, gathering)."""
    from tests.support.mpi import world

    comm = world()
    yield comm
    comm.Free()


def expected_transport(size: int) -> str | None:
    """The transport a run of ``size`` ranks was told to expect, or ``None``.

    ``MWMS_TEST_EXPECT_TRANSPORT`` is a name (``"staging"``), or names per world size with a
    default (``"1=nccl,cuda_mpi"``: one rank on its GPU takes NCCL, ranks sharing it do not).
    """
    text = os.environ.get(EXPECT_TRANSPORT_ENV, "").strip()
    default = None
    for entry in filter(None, (e.strip() for e in text.split(","))):
        if "=" in entry:
            n, name = entry.split("=", 1)
            if int(n) == size:
                return name.strip()
        else:
            default = entry
    return default

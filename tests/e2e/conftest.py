"""The e2e session starts and ends with /dev/shm swept of what killed MPI jobs left.

``@pytest.mark.mpi_neutral`` marks a test whose outcome no MPI can change beyond what
``tests/mpi`` checks under every MPI: training numerics through the collectives those suites
check, and tooling (plots, mypy, the benchmark's record). CI's second MPI pass (Open MPI,
``.ci/run``) deselects them (``make test-e2e E2E_ARGS='-m "not mpi_neutral"'``); the launcher,
signal, failure and determinism tests run under both.

Each job started through ``tests/support/launch.py`` is swept after it ends; this covers the
jobs a test starts itself and what earlier runs left (``tests/support/shm.py`` says why: a
stale libfabric region makes Intel MPI's next rank with that pid fail in ``MPI_Init``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.shm import sweep_stale_segments


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "mpi_neutral: an e2e test no MPI can change beyond tests/mpi (run under the default "
        "MPI only in CI)",
    )


@pytest.fixture(scope="session", autouse=True)
def _stale_shared_memory_swept() -> Iterator[None]:
    sweep_stale_segments()
    yield
    sweep_stale_segments()

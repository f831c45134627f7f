"""Strategies of the ``tests/tf_parity`` configurations (``_parity.py``, README.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def m2_strategy() -> Any:
    """M2: MirroredStrategy over two CPU replicas in one process, one for a file's scenarios
    (as the pins' TF runner makes one per configuration and runs the scenarios in order)."""
    import mwms_mpi.distribute as ds

    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="module")
def mwms_strategy() -> Any:
    """MultiWorkerMirroredStrategy, one CPU replica per rank, at the run's world size."""
    import mwms_mpi.distribute as ds
    from mwms_mpi.distribute.cluster_resolver import MPIClusterResolver

    return ds.MultiWorkerMirroredStrategy(
        cluster_resolver=MPIClusterResolver(num_accelerators={"CPU": 1})
    )


@pytest.fixture(scope="module")
def parity_comm() -> Iterator[Any]:
    """A duplicate of COMM_WORLD for the tests' own pass/fail agreement."""
    from tests.support.mpi import world

    comm = world()
    yield comm
    comm.Free()

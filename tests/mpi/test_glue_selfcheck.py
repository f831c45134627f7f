"""Self-checks of the MPI test glue: a world of the launched size and a shared directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.mark.mpi
def test_world_size_matches_launch() -> None:
    from mpi4py import MPI

    expected = os.environ.get("MWMS_TEST_WORLD_SIZE")
    if expected is not None:
        assert MPI.COMM_WORLD.Get_size() == int(expected)


@pytest.mark.mpi
def test_shared_dir_is_the_same_on_every_rank(mpi_shared_dir: Path) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        paths = comm.allgather(str(mpi_shared_dir))
        assert paths == [paths[0]] * comm.Get_size()
        (mpi_shared_dir / f"rank{comm.Get_rank()}").write_text("x")
        comm.Barrier()
        names = sorted(p.name for p in mpi_shared_dir.iterdir())
        assert names == sorted(f"rank{r}" for r in range(comm.Get_size()))
    finally:
        comm.Free()

"""Self-checks of the MPI test glue: a world of the launched size and a shared directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The size the job was launched with: the Makefile's MWMS_TEST_WORLD_SIZE, else the launcher's
# own count (hydra, for MPICH and Intel MPI, and Slurm's PMI2 export PMI_SIZE; Open MPI exports
# OMPI_COMM_WORLD_SIZE), else none: a singleton run, one rank. Read here, not through the
# package's launcher detection, so that this check does not share its code.
SIZE_VARIABLES = ("MWMS_TEST_WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


@pytest.mark.mpi
def test_world_size_matches_launch() -> None:
    from mpi4py import MPI

    given = [(name, os.environ[name]) for name in SIZE_VARIABLES if os.environ.get(name)]
    expected = int(given[0][1]) if given else 1
    size = MPI.COMM_WORLD.Get_size()
    assert size == expected, f"COMM_WORLD has {size} ranks; launched for {expected} ({given})"


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

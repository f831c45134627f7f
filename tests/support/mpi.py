"""Helpers for tests running under mpiexec: a test communicator and cross-rank agreement."""

from __future__ import annotations

from typing import Any


def world() -> Any:
    """A duplicate of ``COMM_WORLD`` for a test module's own checks (free it at the end)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD.Dup()


def all_ranks_ok(comm: Any, ok: bool) -> bool:
    """True only if ``ok`` holds on every rank, so every rank asserts (and shrinks) alike."""
    from mpi4py import MPI

    return bool(comm.allreduce(bool(ok), op=MPI.LAND))

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


def rank_size() -> tuple[int, int]:
    """This process's rank and the size of ``COMM_WORLD``."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    return comm.Get_rank(), comm.Get_size()


def odd_rank() -> bool:
    """Whether this is the diverging rank of a disagreement test: the last one (none at one
    rank, where nothing can disagree)."""
    rank, size = rank_size()
    return size > 1 and rank == size - 1


def replica_id() -> int:
    """The calling replica's id in its sync group (inside ``strategy.run``)."""
    import mwms_mpi.distribute as ds

    ctx = ds.get_replica_context()
    assert ctx is not None
    return int(ctx.replica_id_in_sync_group)


def still_works(strategy: Any) -> None:
    """After a refused call, the strategy reduces correctly again (nothing moved, nothing
    poisoned): the sum of the replica ids on every replica."""
    import numpy as np

    value = strategy.run(lambda: np.full(3, replica_id(), np.float64))
    out = strategy.reduce("sum", value, axis=None)
    n = strategy.num_replicas_in_sync
    np.testing.assert_array_equal(out, np.full(3, n * (n - 1) / 2))

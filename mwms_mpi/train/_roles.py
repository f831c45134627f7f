"""Which process writes a checkpoint's real files, and who else must be told it succeeded.

TF's rule (``MultiWorkerMirroredStrategy`` documentation): every worker saves; the chief
(``strategy.extended.should_checkpoint``) writes the real path, the others write to
``<dir>/workertemp_<task_id>`` and remove it. Under a strategy with a communicator the workers
then agree that the chief's write succeeded.

Outside any strategy's scope (the default strategy, e.g. a ``Checkpoint`` of numpy arrays) in a
multi-rank world, every rank would otherwise be a chief and they would sweep each other's files.
So there the rule is applied locally from the launch rank, with no collective (the save may be
called by rank 0 alone, ``if rank == 0: ckpt.save(...)``, as in TF): rank 0 writes the real
path, every other rank writes to its ``workertemp_<rank>`` and removes it. The launch rank is
``COMM_WORLD``'s when MPI is initialised, else what the launcher exported (``PMI_RANK``,
``OMPI_COMM_WORLD_RANK``, ...), so a numpy-only script under ``mpiexec`` needs no MPI for it.
Nothing waits for rank 0's write there: read its files only after a barrier of your own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mwms_mpi import _context, _mpi
from mwms_mpi._context import CommunicatorLike, StrategyLike
from mwms_mpi.cluster.launcher import detect_launcher
from mwms_mpi.train._walk import leaves


@dataclass(frozen=True)
class Role:
    """What this process does in a save.

    Attributes:
      chief: whether it writes the real files.
      task_id: names its ``workertemp_<task_id>`` directory when it is not the chief
        (``None``: a strategy without a cluster resolver; the directory is named by pid).
      live_ids: on the chief, the task ids whose temporary directories may be in use (it
        removes the others' after a save), or ``None`` when unknown (then none is removed).
      communicator: agrees the outcome of the chief's write over every worker, or ``None``.
    """

    chief: bool
    task_id: int | None
    live_ids: frozenset[int] | None
    communicator: CommunicatorLike | None


def strategy_for(objects: Mapping[str, Any]) -> StrategyLike:
    """The strategy a checkpoint of ``objects`` saves under: the current one, else the first
    saved variable's, else the default one.

    Read from the lowest layer (``_context``), not ``mwms_mpi.distribute``: the strategy layer
    imports this package (``PreemptionCheckpointHandler``), so importing it back is a cycle.
    """
    current = _context.current().strategy
    if current is not None and current is not _context.get_default().strategy:
        return current
    for _, leaf in leaves(objects):
        strategy: StrategyLike | None = getattr(leaf, "distribute_strategy", None)  # any leaf
        if strategy is not None:
            return strategy
    default = _context.get_default().strategy
    if default is None:  # only before the distribute layer registered it (mwms_mpi imports it)
        raise RuntimeError("mwms_mpi.distribute is not imported: there is no default strategy.")
    return default


def launch_rank() -> tuple[int, int | None]:
    """``(rank, size)`` of this process in its launch, without any collective.

    ``COMM_WORLD`` when MPI is initialised; else the launcher's variables (size ``None`` when
    the launcher exports none); else ``(0, 1)``.
    """
    if _mpi.is_initialized():
        MPI = _mpi.mpi()
        if not MPI.Is_finalized():
            return MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    info = detect_launcher()
    if info is None:
        return 0, 1
    return info.rank, info.size


def _is_default(strategy: StrategyLike) -> bool:
    return strategy is _context.get_default().strategy


def _task_ids(strategy: StrategyLike) -> frozenset[int]:
    """The task ids of every task in the strategy's cluster (any job); none without a cluster."""
    resolver = strategy.cluster_resolver
    if resolver is None:
        return frozenset()
    spec = resolver.cluster_spec()
    ids: Iterable[int] = (int(i) for job in spec.jobs for i in spec.task_indices(job))
    return frozenset(ids)


def role_for(strategy: StrategyLike) -> Role:
    """This process's role in a save under ``strategy``."""
    if _is_default(strategy):
        rank, size = launch_rank()
        if size != 1:  # several processes, or a launcher that does not say how many
            live = None if size is None else frozenset(range(size))
            return Role(rank == 0, rank, live, None)
    chief = bool(strategy.extended.should_checkpoint)
    task_id = getattr(strategy.cluster_resolver, "task_id", None)
    live = _task_ids(strategy) if chief else None
    return Role(chief, task_id, live, strategy.extended.communicator)

"""MPIClusterResolver: the MPI world's shape as a TF cluster (rank r -> worker r), read once."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Mapping
from typing import Any

from mwms_mpi._mpi import mpi
from mwms_mpi.cluster.launcher import check_world_size, local_gpu_ids, visible_gpu_count
from mwms_mpi.cluster.launcher import gpus_per_rank as _gpus_per_rank
from mwms_mpi.cluster.resolver import ClusterResolver, format_master_url
from mwms_mpi.cluster.spec import ClusterSpec

DEFAULT_BASE_PORT = 8888


@dataclasses.dataclass(frozen=True)
class RankFacts:
    """What every rank reports about itself in the one-time gather."""

    rank: int
    host: str
    node_local_rank: int
    node_local_size: int


def gather_rank_facts(comm: Any = None) -> list[RankFacts]:
    """Gathers every rank's (rank, host, node-local rank, node-local size); collective.

    Works on a duplicate of `comm` (default `COMM_WORLD`), freed before return.
    Node-local rank and size come from `Split_type(COMM_TYPE_SHARED)` ordered
    by rank; the host is `MPI.Get_processor_name()`.
    """
    MPI = mpi()
    dup = (MPI.COMM_WORLD if comm is None else comm).Dup()
    try:
        local = dup.Split_type(MPI.COMM_TYPE_SHARED, key=dup.Get_rank())
        try:
            local_rank, local_size = local.Get_rank(), local.Get_size()
        finally:
            local.Free()
        mine = (dup.Get_rank(), MPI.Get_processor_name(), local_rank, local_size)
        gathered = dup.allgather(mine)
    finally:
        dup.Free()
    return [RankFacts(int(r), str(h), int(lr), int(ls)) for r, h, lr, ls in gathered]


def task_for_rank(rank: int, chief: bool) -> tuple[str, int]:
    """Returns the (task_type, task_id) of MPI rank `rank`: worker r, or chief 0 + worker r-1."""
    if chief:
        return ("chief", 0) if rank == 0 else ("worker", rank - 1)
    return "worker", rank


def cluster_dict(addresses: list[str], chief: bool) -> dict[str, list[str]]:
    """Returns the cluster dict for per-rank `addresses` (no empty "worker" job)."""
    if chief:
        cluster = {"chief": addresses[:1]}
        if len(addresses) > 1:
            cluster["worker"] = addresses[1:]
        return cluster
    return {"worker": list(addresses)}


def check_mpi_world(env: Mapping[str, str] | None = None) -> None:
    """Raises RuntimeError if the launcher started N > 1 processes but COMM_WORLD has size 1.

    See `launcher.check_world_size`. Initialises MPI.
    """
    check_world_size(int(mpi().COMM_WORLD.Get_size()), env)


def _device_gpu_count() -> int:
    """GPUs usable through CuPy: 0 without it, else CUDA_VISIBLE_DEVICES' or CuPy's count."""
    if importlib.util.find_spec("cupy") is None:
        return 0
    visible = visible_gpu_count()
    if visible is not None:
        return visible
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device: CPU only
        return 0


def _check_num_accelerators(num_accelerators: Mapping[str, int]) -> dict[str, int]:
    result = dict(num_accelerators)
    for kind, count in result.items():
        if not isinstance(kind, str) or not isinstance(count, int) or count < 0:
            raise ValueError(
                "num_accelerators must map device types ('GPU', 'CPU') to counts >= 0, "
                f"got {kind!r}: {count!r}"
            )
    return result


class MPIClusterResolver(ClusterResolver):
    """ClusterResolver for processes started by an MPI launcher (`mpiexec`, `srun`).

    MPI rank r of `COMM_WORLD` (or `comm`) is task `("worker", r)`; with
    `chief=True` rank 0 is `("chief", 0)` and rank r > 0 is `("worker", r - 1)`.
    Either way `multi_worker_util.id_in_cluster` equals the rank. Addresses are
    `host:port` with the host from `MPI.Get_processor_name()` and port
    `base_port + node-local rank`; they are for display and TF compatibility
    (MPI needs no ports). A world of size 1 gives `{"worker": [address]}`.

    Construction is collective: every rank of the communicator must construct
    the resolver (it gathers each rank's host and node-local rank once, on a
    duplicate communicator that it frees). Nothing touches MPI at import time.
    """

    def __init__(
        self,
        chief: bool = False,
        base_port: int = DEFAULT_BASE_PORT,
        num_accelerators: Mapping[str, int] | None = None,
        comm: Any = None,
        rpc_layer: str | None = None,
    ) -> None:
        """Creates an MPIClusterResolver (collective over `comm`).

        Args:
          chief: Whether rank 0 is a "chief" task (else it is worker 0, which
            TF also treats as chief).
          base_port: The port of the first task on each host; the task with
            node-local rank i gets `base_port + i`.
          num_accelerators: Accelerators per worker, e.g. `{"GPU": 1}`, or the
            mwms_mpi extension `{"CPU": k}` for k CPU replicas. By default the
            GPUs this rank drives: with CuPy installed, the GPUs visible through
            `CUDA_VISIBLE_DEVICES` (else CuPy's device count) shared among the
            ranks on this node, else `{}`.
          comm: The communicator whose ranks are the tasks (default
            `MPI.COMM_WORLD`). It is only duplicated, never used directly.
          rpc_layer: (Optional) The RPC protocol shown by `master()`.

        Raises:
          ValueError: If `num_accelerators` is not a mapping of counts >= 0.
        """
        self._chief = bool(chief)
        self._base_port = int(base_port)
        self._num_accelerators = (
            None if num_accelerators is None else _check_num_accelerators(num_accelerators)
        )
        self._rpc_layer = rpc_layer
        facts = gather_rank_facts(comm)
        MPI = mpi()
        self._rank = int((MPI.COMM_WORLD if comm is None else comm).Get_rank())
        self._facts = tuple(facts)
        self._addresses = [f"{f.host}:{self._base_port + f.node_local_rank}" for f in facts]
        self._task_type, self._task_id = task_for_rank(self._rank, self._chief)

    @property
    def rank(self) -> int:
        """This process's rank in the communicator."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of ranks (tasks) in the communicator."""
        return len(self._facts)

    @property
    def hosts(self) -> list[str]:
        """The host of every rank, in rank order."""
        return [f.host for f in self._facts]

    @property
    def node_local_rank(self) -> int:
        """This rank's index among the ranks on its node (`COMM_TYPE_SHARED`)."""
        return self._facts[self._rank].node_local_rank

    @property
    def node_local_size(self) -> int:
        """How many ranks run on this rank's node."""
        return self._facts[self._rank].node_local_size

    @property
    def rank_facts(self) -> list[RankFacts]:
        """What every rank reported in the gather, in rank order."""
        return list(self._facts)

    def cluster_spec(self) -> ClusterSpec:
        """Returns the cluster: `{"worker": [...]}`, or `{"chief": [...], "worker": [...]}`.

        Returns:
          A `ClusterSpec` with one address per rank, in rank order.
        """
        return ClusterSpec(cluster_dict(self._addresses, self._chief))

    def master(
        self, task_type: str | None = None, task_id: int | None = None, rpc_layer: str | None = None
    ) -> str:
        """Returns the address of a task (this one by default), with `rpc_layer://` if set.

        Args:
          task_type: (Optional) Overrides this process's task type.
          task_id: (Optional) Overrides this process's task index.
          rpc_layer: (Optional) Overrides the RPC protocol.

        Returns:
          The address of the task, or "" if no task is known.
        """
        task_type = task_type if task_type is not None else self.task_type
        task_id = task_id if task_id is not None else self.task_id
        if task_type is None or task_id is None:
            return ""
        address = self.cluster_spec().task_address(task_type, task_id)
        return format_master_url(address, rpc_layer or self.rpc_layer)

    def num_accelerators(
        self, task_type: str | None = None, task_id: int | None = None, config_proto: Any = None
    ) -> dict[str, int]:
        """Returns the accelerators of this worker: as given, else the GPUs it drives, else `{}`.

        Args:
          task_type: Unused.
          task_id: Unused.
          config_proto: Unused.

        Returns:
          A map of accelerator types to counts, e.g. `{"GPU": 1}`.
        """
        del task_type, task_id, config_proto
        if self._num_accelerators is not None:
            return dict(self._num_accelerators)
        k = _gpus_per_rank(_device_gpu_count(), self.node_local_size)
        return {"GPU": k} if k else {}

    def gpu_ids(self) -> list[int]:
        """Returns the visible GPU indices this rank drives ([] without GPUs).

        One GPU per rank: `node_local_rank % visible_gpus`; k > 1 GPUs per rank:
        k consecutive GPUs from `node_local_rank * k` (wrapping at the count).
        """
        visible = _device_gpu_count()
        k = self.num_accelerators().get("GPU", 0)
        if k <= 0 or visible <= 0:
            return []
        if self._num_accelerators is None:
            return local_gpu_ids(self.node_local_rank, self.node_local_size, visible)
        return [(self.node_local_rank * k + i) % visible for i in range(k)]

    def __repr__(self) -> str:
        return (
            f"MPIClusterResolver(rank={self._rank}, world_size={self.world_size}, "
            f"task=({self.task_type!r}, {self.task_id}), host={self._facts[self._rank].host!r}, "
            f"node_local_rank={self.node_local_rank}/{self.node_local_size})"
        )

"""MultiWorkerMirroredStrategy: TF's CollectiveAllReduceStrategy with MPI ranks as workers.

One MPI rank is one TF task. The cluster comes from the resolver (``TFConfigClusterResolver``
when ``TF_CONFIG`` is set, else ``MPIClusterResolver``); its ``id_in_cluster`` must be the MPI
rank. Each worker runs k local replicas (``num_accelerators()``'s "GPU" count, else our "CPU"
extension, else 1); replica ``id_in_cluster * k + local_id`` of ``k * num_workers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mwms_mpi._logging import get_logger
from mwms_mpi._mpi import mpi
from mwms_mpi.cluster import (
    ClusterResolver,
    MPIClusterResolver,
    SimpleClusterResolver,
    TFConfigClusterResolver,
    check_mpi_world,
    multi_worker_util,
)
from mwms_mpi.cluster.tfconfig import tf_config_set
from mwms_mpi.collective import Communicator
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.collective.transport import NCCL_WITHOUT_GPU
from mwms_mpi.distribute.collective_ops import CollectiveAllReduce
from mwms_mpi.distribute.cross_device_ops import (
    CrossDeviceOps,
    reduce_non_distributed_value,
)
from mwms_mpi.distribute.distribute_lib import Strategy, StrategyExtended
from mwms_mpi.distribute.gpus import placement_for
from mwms_mpi.distribute.input_context import InputOptions, InputReplicationMode
from mwms_mpi.distribute.input_lib import DistributedDataset
from mwms_mpi.distribute.mirrored_strategy import MirroredExtended, canonicalize_device
from mwms_mpi.types import CommunicationImplementation, CommunicationOptions, ReduceOp
from mwms_mpi.values import DistributedValues

_log = get_logger(__name__)


def _default_resolver() -> ClusterResolver:
    if tf_config_set():
        return TFConfigClusterResolver()
    return MPIClusterResolver()


def _local_devices(resolver: ClusterResolver, job: str, task: int) -> tuple[str, ...]:
    """This worker's replica devices: its GPUs, else our "CPU" count extension, else one CPU."""
    accelerators = resolver.num_accelerators()
    gpus = int(accelerators.get("GPU", 0) or 0)
    kind, k = ("GPU", gpus) if gpus > 0 else ("CPU", max(int(accelerators.get("CPU", 0) or 0), 1))
    return tuple(canonicalize_device(f"{kind}:{i}", job, task) for i in range(k))


class CollectiveAllReduceExtended(MirroredExtended):
    """Implementation of MultiWorkerMirroredStrategy over the collective layer.

    As TF's, it sets up its cluster itself (``_initialize_local`` for one worker,
    ``_initialize_multi_worker`` for several, the latter again from ``configure``) and never
    runs ``MirroredExtended.__init__``; both end in :meth:`MirroredExtended._set_replicas`.

    Args:
      container_strategy: the ``Strategy`` this object extends.
      cluster_resolver: a ``ClusterResolver``, or ``None`` for the default.
      communication_options: a ``CommunicationOptions``.
      devices: local devices, for a single-worker strategy only.

    Raises:
      ValueError: for bad arguments (TF's messages) or a resolver whose task is not this rank.
    """

    # TF's creator converts a variable's initial value with no name of its own, so a list's
    # Pack error ends "name: packed" (MirroredStrategy's says "initial_value")
    _INITIAL_VALUE_NAME = "packed"

    def __init__(
        self,
        container_strategy: Strategy,
        cluster_resolver: ClusterResolver | None,
        communication_options: CommunicationOptions,
        devices: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(communication_options, CommunicationOptions):
            raise ValueError(
                "communication_options must be an instance of "
                "tf.distribute.experimental.CommunicationOptions"
            )
        if cluster_resolver and devices:
            raise ValueError("cluster_resolver and devices cannot be set at the same time")
        check_mpi_world()
        resolver = cluster_resolver or _default_resolver()
        if not isinstance(resolver, ClusterResolver):
            raise ValueError(
                "cluster_resolver must be an instance of "
                "tf.distribute.cluster_resolver.ClusterResolver"
            )
        StrategyExtended.__init__(self, container_strategy)  # as TF: not MirroredExtended's
        self._cluster_resolver = resolver
        self._communication_options = communication_options
        self._communicator: Communicator | None = None
        cluster_spec = multi_worker_util.normalize_cluster_spec(resolver.cluster_spec())
        if cluster_spec.as_dict():
            self._initialize_multi_worker(resolver)
        else:
            self._initialize_local(resolver, devices)

    def _initialize_local(self, resolver: ClusterResolver, devices: Sequence[str] | None) -> None:
        """One worker: replicas on ``devices``, or as many as the resolver's accelerators."""
        _check_place(1, 0)
        self._cluster_spec: Any = None
        self._task_type: str | None = None
        self._task_id: int | None = None
        self._num_workers, self._id_in_cluster, self._is_chief = 1, 0, True
        if devices:
            local = tuple(canonicalize_device(d) for d in devices)
        else:
            local = _local_devices(resolver, "localhost", 0)
        self._set_collectives(local)

    def _initialize_multi_worker(self, resolver: ClusterResolver) -> None:
        """The workers of the resolver's cluster, one per MPI rank (a collective if several).

        Raises:
          ValueError: for a task missing from the spec, or one that is not this MPI rank.
        """
        cluster_spec = multi_worker_util.normalize_cluster_spec(resolver.cluster_spec())
        task_type, task_id = resolver.task_type, resolver.task_id
        if task_type is None or task_id is None:
            raise ValueError(
                "When `cluster_spec` is given, you must also specify `task_type` and `task_id`."
            )
        num_workers = multi_worker_util.worker_count(cluster_spec, task_type)
        if not num_workers:
            raise ValueError(
                "No `worker`, `chief` or `evaluator` tasks can be found in `cluster_spec`."
            )
        id_in_cluster = multi_worker_util.id_in_cluster(cluster_spec, task_type, task_id)
        _check_place(num_workers, id_in_cluster, resolver)
        if self._communicator is not None:
            # configure(): every rank has checked its new place before any rank rebuilds; one
            # that failed refuses this agreement (Strategy.configure's api_call), so all raise.
            self._communicator.min_max(0, "configure: the new cluster was checked")
        self._cluster_spec = cluster_spec
        self._task_type = task_type
        self._task_id = task_id
        self._num_workers = num_workers
        self._id_in_cluster = id_in_cluster
        self._is_chief = multi_worker_util.is_chief(cluster_spec, task_type, task_id)
        self._set_collectives(_local_devices(resolver, task_type, task_id))

    def _set_collectives(self, local: tuple[str, ...]) -> None:
        """The replicas' GPUs bound, the communicator across workers, TF's two groups over it."""
        gpus = placement_for(local, _gpu_ids(self._cluster_resolver))
        if gpus is not None:
            gpus.bind()  # this rank's GPU: CuPy arrays made from now on live there
        elif self._communication_options.implementation == CommunicationImplementation.NCCL:
            _log.warning(NCCL_WITHOUT_GPU)  # TF's warning, and its fallback
            self._communication_options = self._communication_options.merge(
                CommunicationOptions(implementation=CommunicationImplementation.RING)
            )
        options = self._communication_options
        if self._communicator is not None:  # configure() again: the old one is replaced
            self._communicator.close()
            self._communicator = None
        if self._num_workers > 1:
            device = None if gpus is None else gpus.ids[0]
            self._communicator = Communicator(options=options, name="mwms-strategy", device=device)
            _check_same_replica_count(self._communicator, len(local))
        self._set_cross_device_ops(local, gpus)

    def _set_cross_device_ops(self, local: tuple[str, ...], gpus: Any) -> None:
        """TF's two collective groups (replicas, one host per worker) over the communicator,
        and the replicas, for this world: at construction and after it shrank."""
        options = self._communication_options
        n = self._num_workers
        self._cross_device_ops = CollectiveAllReduce(
            local, len(local) * n, options, self._communicator
        )
        host = (canonicalize_device("CPU:0", self._task_type or "localhost", self._task_id or 0),)
        self._host_cross_device_ops = CollectiveAllReduce(host, n, options, self._communicator)
        self._set_replicas(local, n, self._id_in_cluster, gpus)

    def _shrink(self) -> tuple[int, ...]:
        """Goes on with the ranks that survived a peer's failure (collective over them).

        After a call on the strategy's communicator raised ``UnavailableError`` for a peer's
        failure (Open MPI's ULFM, docs/elastic.md): the communicator is shrunk to the
        survivors, and the cluster is theirs in their order. Worker ids, the chief (the lowest
        surviving rank, so ``should_checkpoint`` moves with it), ``num_replicas_in_sync`` and
        the replica contexts follow; each worker keeps its local replicas, and variables keep
        their copies. Datasets distributed before must be distributed again.

        Returns:
          The ``COMM_WORLD`` ranks of the workers that go on, in their order.

        Raises:
          RuntimeError: for a single worker, or where MPI cannot shrink.
        """
        old = self._communicator
        if old is None:
            raise RuntimeError("A single-worker strategy has no peer to lose.")
        new = old.shrink(name="mwms-strategy")
        old.close()  # poisoned: frees its buffers only (freeing a revoked communicator can hang)
        survivors = new.world_ranks
        self._num_workers, self._id_in_cluster = new.size, new.rank
        self._communicator = new if new.size > 1 else None
        if new.size == 1:
            new.close()
        self._is_chief = new.rank == 0
        self._task_type, self._task_id = "worker", new.rank
        addresses = _addresses(self._cluster_spec, survivors)
        self._cluster_spec = multi_worker_util.normalize_cluster_spec({"worker": addresses})
        kind = "GPU" if "GPU" in self._devices[0] else "CPU"
        self._cluster_resolver = SimpleClusterResolver(
            cluster_spec=self._cluster_spec,
            task_type="worker",
            task_id=new.rank,
            num_accelerators={kind: len(self._devices)},
        )
        self._set_cross_device_ops(self._devices, self._gpus)
        return survivors

    def _configure(
        self, session_config: Any, cluster_spec: Any, task_type: Any, task_id: Any
    ) -> None:
        """TF's ``_configure``: with a ``cluster_spec``, re-initialises for that cluster.

        ``session_config`` is ignored (there is no ConfigProto here).
        """
        del session_config
        if cluster_spec:
            kind = "GPU" if "GPU" in self._devices[0] else "CPU"
            resolver = SimpleClusterResolver(
                cluster_spec=multi_worker_util.normalize_cluster_spec(cluster_spec),
                task_type=task_type,
                task_id=task_id,
                num_accelerators={kind: len(self._devices)},
            )
            self._initialize_multi_worker(resolver)
            self._cluster_resolver = resolver

    def _experimental_distribute_dataset(
        self, dataset: Any, options: InputOptions | None
    ) -> DistributedDataset:
        _check_not_per_replica(options)
        return super()._experimental_distribute_dataset(dataset, options)

    def _distribute_datasets_from_function(
        self, dataset_fn: Any, options: InputOptions | None
    ) -> DistributedDataset:
        _check_not_per_replica(options)
        return super()._distribute_datasets_from_function(dataset_fn, options)

    def _broadcast_initial_value(self, value: Any) -> Any:
        """The chief's (worker 0's) initial value on every worker (TF's broadcast_send/recv);
        agreed as the creation of the variable by name (``variable_creation``)."""
        if self._communicator is None:
            return value
        return self._communicator.broadcast(value, root=0)  # a fresh array

    def _get_cross_device_ops(self, value: Any) -> CrossDeviceOps:
        num = len(value._values) if isinstance(value, DistributedValues) else 1
        if num == len(self._devices):
            return self._cross_device_ops
        return self._host_cross_device_ops

    def _gather_to_implementation(
        self, value: Any, destinations: Any, axis: int, options: Any
    ) -> Any:
        return self._get_cross_device_ops(value)._gather(
            value, destinations=destinations, axis=axis, options=options
        )

    def _reduce_to(self, reduce_op: ReduceOp, value: Any, destinations: Any, options: Any) -> Any:
        distributed = isinstance(value, DistributedValues)  # TF's order of short-circuits:
        if distributed and self._mirrored_short_circuit(reduce_op, value):
            return value
        if distributed and len(self._devices) == 1:
            value, distributed = value._values[0], False
        if not distributed and self._num_workers == 1:
            return reduce_non_distributed_value(reduce_op, value, destinations, len(self._devices))
        return self._get_cross_device_ops(value).reduce(
            reduce_op, value, destinations=destinations, options=options
        )

    @property
    def experimental_between_graph(self) -> bool:
        """True: each worker runs its own program."""
        return True

    @property
    def should_checkpoint(self) -> bool:
        """Whether this worker is the chief (only the chief writes checkpoints)."""
        return self._is_chief

    @property
    def should_save_summary(self) -> bool:
        """Whether this worker is the chief."""
        return self._is_chief

    def _get_local_replica_id(self, replica_id_in_sync_group: int) -> int:
        """This worker's index of a global replica id (TF's private hook, called by its tests)."""
        return replica_id_in_sync_group - self._id_in_cluster * len(self.worker_devices)


def _addresses(cluster_spec: Any, world_ranks: Sequence[int]) -> list[str]:
    """The survivors' task addresses, in their order: the cluster's tasks are ranked chief
    first, then workers (``id_in_cluster``), and each is the ``COMM_WORLD`` rank of that id."""
    jobs = cluster_spec.jobs if cluster_spec is not None else []
    tasks = [a for job in ("chief", "worker") if job in jobs for a in cluster_spec.job_tasks(job)]
    return [tasks[r] if r < len(tasks) else f"rank{r}" for r in world_ranks]


def _gpu_ids(resolver: ClusterResolver) -> list[int] | None:
    """The GPUs the resolver says this rank drives (``MPIClusterResolver``: by node-local
    rank), or ``None`` to take them from the device names."""
    gpu_ids = getattr(resolver, "gpu_ids", None)
    if not callable(gpu_ids):
        return None
    ids = gpu_ids()
    return [int(i) for i in ids] if ids else None


def _check_place(
    num_workers: int, id_in_cluster: int, resolver: ClusterResolver | None = None
) -> None:
    """Raises unless the cluster's place for this process is its place in the MPI world.

    A ``TF_CONFIG`` left in the environment (from a TF job script, or exported for every rank
    alike) is the usual cause, and under ``mpiexec`` or ``srun`` it is not needed at all: the
    message names it, its task, and both ways out.

    Raises:
      ValueError: if the cluster's worker count or this task's id is not MPI's.
    """
    comm_world = mpi().COMM_WORLD
    rank, size = int(comm_world.Get_rank()), int(comm_world.Get_size())
    if id_in_cluster == rank and num_workers == size:
        return
    if isinstance(resolver, TFConfigClusterResolver):
        raise ValueError(
            f"TF_CONFIG places this process at task {resolver.task_type}:{resolver.task_id} "
            f"(id_in_cluster {id_in_cluster} of {num_workers} workers), but it is MPI rank "
            f"{rank} of {size}. Under mpiexec or srun TF_CONFIG is not needed: without it the "
            "MPI world is the cluster (MPIClusterResolver). Unset it (`unset TF_CONFIG`, or "
            "`mpiexec -n N env -u TF_CONFIG python ...`), or give each process a TF_CONFIG "
            "whose task is its MPI rank; the resolver's task must be the MPI rank (one rank "
            "per task)."
        )
    raise ValueError(
        f"The cluster resolver places this process at id_in_cluster {id_in_cluster} of "
        f"{num_workers} workers, but it is MPI rank {rank} of {size}: the resolver's task "
        "must be the MPI rank (one rank per task)."
    )


def _check_same_replica_count(communicator: Communicator, k: int) -> None:
    """Raises on every rank unless every worker runs ``k`` local replicas (one collective).

    TF leaves differing counts undefined; here replica ids, MEAN denominators and input splits
    would silently differ between workers, e.g. when ranks are placed unevenly on GPU nodes.
    """
    with api_call(communicator, "MultiWorkerMirroredStrategy construction"):
        least, most = communicator.min_max(k, "local replicas per worker")
    if most != least:
        communicator.close()
        raise ValueError(
            "MultiWorkerMirroredStrategy needs the same number of local replicas on every "
            f"worker, but workers have between {least} and {most} (this one: {k}). "
            "Pass cluster_resolver=MPIClusterResolver(num_accelerators={'GPU': k}) with one k "
            "for all, or place as many ranks on every node."
        )


def _check_not_per_replica(options: InputOptions | None) -> None:
    if options and options.experimental_replication_mode == InputReplicationMode.PER_REPLICA:
        raise NotImplementedError(
            "InputReplicationMode.PER_REPLICA is only supported in "
            "`distribute_datasets_from_function` of tf.distribute.MirroredStrategy"
        )


class CollectiveAllReduceStrategy(Strategy):
    """A distribution strategy for synchronous training on multiple workers (MPI ranks).

    Exported as ``MultiWorkerMirroredStrategy``; its ``__name__`` is TF's class name,
    ``CollectiveAllReduceStrategy``, as ``tf.distribute.MultiWorkerMirroredStrategy.__name__``
    is (TF's ``ExperimentalCompatibilityTest.testName``).

    Args:
      cluster_resolver: optional ``ClusterResolver``; ``TFConfigClusterResolver`` when
        ``TF_CONFIG`` is set, else ``MPIClusterResolver``.
      communication_options: optional ``CommunicationOptions``.
    """

    def __init__(
        self,
        cluster_resolver: ClusterResolver | None = None,
        communication_options: CommunicationOptions | None = None,
    ) -> None:
        if communication_options is None:
            communication_options = CommunicationOptions()
        super().__init__(CollectiveAllReduceExtended(self, cluster_resolver, communication_options))


MultiWorkerMirroredStrategy = CollectiveAllReduceStrategy


class _ExperimentalMeta(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, MultiWorkerMirroredStrategy)


class _CollectiveAllReduceStrategyExperimental(
    MultiWorkerMirroredStrategy, metaclass=_ExperimentalMeta
):
    """The deprecated ``tf.distribute.experimental.MultiWorkerMirroredStrategy``.

    Args:
      communication: a ``CommunicationImplementation`` hint (AUTO, RING or NCCL).
      cluster_resolver: optional ``ClusterResolver``.
    """

    def __init__(
        self,
        communication: CommunicationImplementation | str = CommunicationImplementation.AUTO,
        cluster_resolver: ClusterResolver | None = None,
    ) -> None:
        super().__init__(cluster_resolver, CommunicationOptions(implementation=communication))


_CollectiveAllReduceStrategyExperimental.__name__ = MultiWorkerMirroredStrategy.__name__
_CollectiveAllReduceStrategyExperimental.__qualname__ = MultiWorkerMirroredStrategy.__qualname__

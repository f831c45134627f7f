"""MirroredStrategy: synchronous training on several replicas of one worker (TF's MirroredExtended).

``MirroredExtended`` holds what one worker's k replicas share: running ``fn`` per replica,
``update``, ``experimental_local_results``, value regrouping, and TF's choice of cross-device
ops (a collective group by default; ``ReductionToOneDevice`` for int32 values and for
``reduce_to`` onto CPU devices). ``CollectiveAllReduceExtended`` (MultiWorkerMirroredStrategy)
derives from it, sets its cluster up itself and calls :meth:`MirroredExtended._set_replicas`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _arrays, nest
from mwms_mpi.distribute.collective_ops import CollectiveAllReduce
from mwms_mpi.distribute.cross_device_ops import (
    CrossDeviceOps,
    ReductionToOneDevice,
    check_devices_match,
    reduce_non_distributed_value,
)
from mwms_mpi.distribute.deprecated import DistributedIteratorV1
from mwms_mpi.distribute.distribute_lib import Strategy, StrategyExtended, _value_context
from mwms_mpi.distribute.gpus import GpuPlacement, placement_for
from mwms_mpi.distribute.input_context import InputOptions, InputReplicationMode
from mwms_mpi.distribute.input_lib import (
    DistributedDataset,
    InputWorkers,
    get_distributed_dataset,
    get_distributed_datasets_from_function,
)
from mwms_mpi.distribute.mirrored_run import MirroredReplicaContext, call_for_each_replica
from mwms_mpi.distribute.multi_step import run_steps_on_iterator
from mwms_mpi.distribute.variable_creation import (
    create_variable,
    read_var,
    validate_colocate_distributed_variable,
)
from mwms_mpi.types import ReduceOp
from mwms_mpi.values import (
    DistributedValues,
    is_mirrored,
    regroup,
    select_replica,
    update_regroup,
)
from mwms_mpi.values._base import VariableBase
from mwms_mpi.values.aggregation import UpdateContext
from mwms_mpi.values.convert import as_array, is_tensor
from mwms_mpi.values.foreign import is_foreign_array

_DEVICE = re.compile(
    r"^(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?/?(?:device:)?(cpu|gpu):(\d+)$"
)


def canonicalize_device(device: str, job: str = "localhost", task: int = 0) -> str:
    """Canonicalizes ``"/cpu:1"`` to ``/job:localhost/replica:0/task:0/device:CPU:1``.

    Raises:
      ValueError: for a string that names no CPU or GPU device.
    """
    m = _DEVICE.match(device.strip().lower())
    if not m:
        raise ValueError(f"Unrecognized device specification: {device!r}")
    return f"/job:{job}/replica:0/task:{task}/device:{m.group(1).upper()}:{m.group(2)}"


class MirroredExtended(StrategyExtended):
    """Implementation of MirroredStrategy: k local replicas of one worker.

    Args:
      container_strategy: the ``Strategy`` this object extends.
      devices: the device strings of the replicas (default: one CPU).
      cross_device_ops: the ``CrossDeviceOps`` reducing the replicas (default: TF's, a
        collective group of the replicas).

    Raises:
      ValueError: for no devices, duplicates, or an unrecognised device string.
    """

    def __init__(
        self,
        container_strategy: Strategy,
        devices: Sequence[str] | None = None,
        cross_device_ops: CrossDeviceOps | None = None,
    ) -> None:
        super().__init__(container_strategy)
        if devices is None:
            devices = ["/device:CPU:0"]
        local = tuple(canonicalize_device(d) for d in devices)
        if not local:
            raise ValueError("Must specify at least one device.")
        if len(set(local)) != len(local):
            raise ValueError(f"No duplicates allowed in `devices` argument: {list(local)}")
        self._initialize_single_worker(local, cross_device_ops)

    def _initialize_single_worker(
        self, devices: tuple[str, ...], cross_device_ops: CrossDeviceOps | None
    ) -> None:
        """TF's ``_initialize_single_worker``: one worker, its replicas on ``devices``."""
        self._num_workers = 1
        self._id_in_cluster = 0
        self._is_chief = True
        self._cross_device_ops = cross_device_ops or CollectiveAllReduce(devices, len(devices))
        self._set_replicas(devices, num_workers=1, id_in_cluster=0)

    def _set_replicas(
        self,
        devices: tuple[str, ...],
        num_workers: int,
        id_in_cluster: int,
        gpus: GpuPlacement | str | None = "names",
    ) -> None:
        """This worker's replicas: devices, replica count, one replica context per device.

        ``gpus`` is the replicas' GPU placement (already bound), or ``"names"`` to take it
        from the device names and bind it here (MirroredStrategy's ``/gpu:i``).
        """
        if isinstance(gpus, str):
            gpus = placement_for(devices)
            if gpus is not None:
                gpus.bind()
        self._gpus: GpuPlacement | None = gpus
        self._devices = devices
        self._num_replicas_in_sync = len(devices) * num_workers
        base = id_in_cluster * len(devices)
        self._replica_ids = tuple(range(base, base + len(devices)))

    # -- replica execution -------------------------------------------------------------------

    def _experimental_run_steps_on_iterator(
        self, fn: Callable[[Any, Any], Any], iterator: Any, iterations: int, initial: Any
    ) -> Any:
        return run_steps_on_iterator(self._local_results, fn, iterator, iterations, initial)

    def _call_for_each_replica(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        gpus = self._gpus
        strategy = self._container_strategy()
        # new contexts for each run, as TF's threads make them: a context kept from an earlier
        # run is not current in this one ("Mismatching ReplicaContext."); TF's class with one
        # replica too (_MirroredReplicaContext)
        contexts = tuple(MirroredReplicaContext(strategy, i) for i in self._replica_ids)
        return call_for_each_replica(
            strategy,
            contexts,
            fn,
            args,
            kwargs,
            None if gpus is None else gpus.replica,
        )

    def _experimental_distribute_values_from_function(self, value_fn: Callable[[Any], Any]) -> Any:
        k = len(self._devices)
        base = self._id_in_cluster * k
        per_replica = [
            value_fn(_value_context(base + i, self._num_replicas_in_sync)) for i in range(k)
        ]
        return regroup(per_replica, always_wrap=True)

    # -- input -------------------------------------------------------------------------------

    def _input_workers(self) -> InputWorkers:
        return InputWorkers(
            self._num_workers,
            self._id_in_cluster,
            len(self._devices),
            self._communicator,
            self._gpus,
        )

    def _experimental_distribute_dataset(
        self, dataset: Any, options: InputOptions | None
    ) -> DistributedDataset:
        if options and options.experimental_replication_mode == InputReplicationMode.PER_REPLICA:
            raise NotImplementedError(
                "InputReplicationMode.PER_REPLICA is only supported in "
                "`distribute_datasets_from_function`."
            )
        distributed = get_distributed_dataset(
            dataset,
            self._input_workers(),
            self._container_strategy(),
            self._num_replicas_in_sync,
            options,
        )
        distributed._remake = lambda skip: self._experimental_distribute_dataset(
            dataset.skip(skip), options
        )  # for ElasticHandler: the same input in the current world, `skip` global batches on
        return distributed

    def _distribute_datasets_from_function(
        self, dataset_fn: Callable[[Any], Any], options: InputOptions | None
    ) -> DistributedDataset:
        distributed = get_distributed_datasets_from_function(
            dataset_fn,
            self._input_workers(),
            self._container_strategy(),
            self._num_replicas_in_sync,
            options,
        )
        mode = getattr(options, "experimental_replication_mode", None)
        per_step = 1 if mode == InputReplicationMode.PER_REPLICA else len(self._devices)
        distributed._remake = lambda skip: self._distribute_datasets_from_function(
            lambda context: dataset_fn(context).skip(skip * per_step), options
        )  # for ElasticHandler: each pipeline `skip` steps on (per_step elements a step)
        return distributed

    # -- reductions --------------------------------------------------------------------------

    def _get_cross_device_ops(self, value: Any) -> CrossDeviceOps:
        """TF's choice: int32 values are reduced in-process, others by the replicas' ops.

        Raises:
          AttributeError: for a Python value (a number, string, list, tuple, dict or
            ``None``: TF reads its ``dtype``). Another library's array is taken as an array,
            as everywhere.
        """
        values = value._values if isinstance(value, DistributedValues) else (value,)
        for v in values:
            if not is_tensor(v):  # a tuple or dict too: no dtype
                raise AttributeError(f"'{type(v).__name__}' object has no attribute 'dtype'")
        if any(np.dtype(getattr(v, "dtype", None) or np.float32) == np.int32 for v in values):
            return ReductionToOneDevice()
        return self._cross_device_ops

    def _mirrored_short_circuit(self, reduce_op: ReduceOp, value: Any) -> bool:
        """TF's rule for a ``Mirrored`` value in ``_reduce_to``, its one home (both strategies'
        ``_reduce_to`` start with it): a MEAN is the value itself (True: return it), a SUM
        fails TF's assertion. TF moves no data for the MEAN; a worker whose value is not
        ``Mirrored`` would wait in its collective forever, so across workers the decision is
        agreed (docs/architecture.md, "Every call is agreed").

        Raises:
          AssertionError: for a SUM (TF asserts the value is not ``Mirrored``).
        """
        if not is_mirrored(value):
            return False
        if reduce_op != ReduceOp.MEAN:
            raise AssertionError("reduce_to(SUM) of a Mirrored value (TF asserts it is not)")
        if self._communicator is not None:
            self._communicator.min_max(0, "MEAN of a Mirrored value (nothing to move)")
        return True

    def _reduce_to(self, reduce_op: ReduceOp, value: Any, destinations: Any, options: Any) -> Any:
        if self._mirrored_short_circuit(reduce_op, value):
            return value
        cpu = _on_cpu(destinations, self._devices)

        def get_values(v: Any) -> Any:
            if not isinstance(v, DistributedValues):
                return reduce_non_distributed_value(
                    reduce_op, v, destinations, self._num_replicas_in_sync
                )
            check_devices_match(v, destinations)  # TF's _devices_match: a Python component fails
            ops = ReductionToOneDevice() if cpu else self._get_cross_device_ops(v)
            return ops.reduce(reduce_op, v, destinations=destinations, options=options)

        if isinstance(value, DistributedValues):
            return get_values(value)
        return nest.map_structure(get_values, value)

    def _batch_reduce_to(
        self, reduce_op: ReduceOp, pairs: Sequence[tuple[Any, Any]], options: Any
    ) -> list[Any]:
        """TF's rule, its one home (``CollectiveAllReduceExtended`` inherits it): the whole
        batch goes to one cross-device ops object, each value's choice of
        ``_get_cross_device_ops`` (here by dtype; by replica count there). An empty batch is
        ``[]`` (TF fails on ``None.batch_reduce``): at once for one worker, through the
        replicas' collective for several, whose agreement compares the batch's structure (``[]``
        on one worker and a value on another raise on both instead of one of them waiting).

        Raises:
          ValueError: for values that choose different ops (TF's message).
        """
        ops: CrossDeviceOps | None = None
        choose = self._get_cross_device_ops  # per gradient: bound once
        for value, _ in pairs:
            candidate = choose(value)
            if ops is None:
                ops = candidate
            elif ops is not candidate:  # as TF: two int32 values make two in-process ops
                raise ValueError(
                    "Inputs to batch_reduce_to must be either all on the host or all on the "
                    "compute devices."
                )
        if ops is None:
            if self._communicator is None:
                return []
            ops = self._cross_device_ops
        return ops.batch_reduce(reduce_op, pairs, options=options)

    def _gather_to_implementation(
        self, value: Any, destinations: Any, axis: int, options: Any
    ) -> Any:
        if not isinstance(value, DistributedValues):
            if is_foreign_array(value):  # another library's array: results are numpy (or CuPy)
                value = as_array(value)
            if isinstance(value, np.ndarray) or _arrays.is_device_array(value):
                return value.copy()  # never the input
            return value
        return self._get_cross_device_ops(value)._gather(
            value, destinations=destinations, axis=axis, options=options
        )

    def _broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        if isinstance(tensor, float | int):
            return tensor
        return self._get_cross_device_ops(tensor).broadcast(tensor, destinations)

    # -- the older input API -------------------------------------------------------------------

    def _make_dataset_iterator(self, dataset: Any) -> DistributedIteratorV1:
        return DistributedIteratorV1(self._experimental_distribute_dataset(dataset, None))

    def _make_input_fn_iterator(self, input_fn: Any, replication_mode: Any) -> Any:
        return DistributedIteratorV1(self._distribute_datasets_from_function(input_fn, None))

    def _configure(
        self, session_config: Any, cluster_spec: Any, task_type: Any, task_id: Any
    ) -> None:
        if cluster_spec:
            raise NotImplementedError(
                "MirroredStrategy.configure(cluster_spec=...) (TF 1.x in-graph replication "
                "over several workers) is not supported; use MultiWorkerMirroredStrategy"
            )

    # -- updates -----------------------------------------------------------------------------

    def _update(self, var: Any, fn: Callable[..., Any], args: Any, kwargs: Any, group: bool) -> Any:
        owner = getattr(var, "distribute_strategy", None)
        if not isinstance(var, DistributedValues) or (
            owner is not None and owner.extended is not self
        ):
            # TF: `assert isinstance(var, values.DistributedVariable)`; updating one copy would
            # leave the other workers' copies unchanged.
            raise AssertionError(f"update: {var!r} was not created in this strategy's scope")
        components = var.values
        updates = []
        for i, v in enumerate(components):
            with UpdateContext(i):
                updates.append(fn(v, *select_replica(i, args), **select_replica(i, kwargs)))
        return update_regroup(self._local_results, updates, group)

    def _update_non_slot(
        self, colocate_with: Any, fn: Callable[..., Any], args: Any, kwargs: Any, group: bool
    ) -> Any:
        """TF's: ``fn`` runs once per device of ``colocate_with``, which must be a tuple of
        devices (``non_slot_devices()``'s answer), not this strategy's replica count.

        Raises:
          AssertionError: for anything but a tuple (TF asserts it; its message is empty).
        """
        if not isinstance(colocate_with, tuple):
            raise AssertionError(
                "StrategyExtended.update_non_slot: colocate_with must be the tuple of devices "
                f"non_slot_devices() returns, got {type(colocate_with).__name__} (TF asserts "
                "a tuple)"
            )
        updates = []
        for i in range(len(colocate_with)):
            with UpdateContext(i):
                updates.append(fn(*select_replica(i, args), **select_replica(i, kwargs)))
        return update_regroup(self._local_results, updates, group)

    # -- variables ---------------------------------------------------------------------------

    def _create_variable(self, next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        """The variable creator of ``scope()``: one component per replica of this worker."""
        return create_variable(self, next_creator, self._broadcast_initial_value, **kwargs)

    def _broadcast_initial_value(self, value: Any) -> Any:
        return value  # one worker: nothing to agree on

    def _validate_colocate_with_variable(self, colocate_with_variable: Any) -> None:
        validate_colocate_distributed_variable(colocate_with_variable, self)

    def read_var(self, v: Any) -> Any:
        """Reads the value of a variable in cross-replica context (aggregated if ON_READ)."""
        return read_var(v)

    # -- properties --------------------------------------------------------------------------

    @property
    def worker_devices(self) -> tuple[str, ...]:
        """The devices of this worker's replicas, in local replica order."""
        return self._devices

    @property
    def worker_devices_by_replica(self) -> list[list[str]]:
        """One list of devices per local replica."""
        return [[d] for d in self._devices]

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        """The devices holding variables: every replica's device."""
        return self._devices

    @property
    def experimental_between_graph(self) -> bool:
        """False: one program drives every replica."""
        return False

    @property
    def experimental_should_init(self) -> bool:
        """True: every worker initialises its variables."""
        return True

    @property
    def should_checkpoint(self) -> bool:
        """True for a single worker."""
        return True

    @property
    def should_save_summary(self) -> bool:
        """True for a single worker."""
        return True


def _on_cpu(destinations: Any, devices: tuple[str, ...]) -> bool:
    """Whether ``destinations`` are CPU devices (TF then reduces in-process, not collectively).

    A device string names its device; distributed values and variables live on this worker's
    replica devices; numpy arrays live on the host, CuPy arrays on a GPU.
    """
    if isinstance(destinations, str):
        return "cpu" in destinations.lower()
    if isinstance(destinations, DistributedValues | VariableBase):
        return any("cpu" in d.lower() for d in devices)
    return not _arrays.is_device_array(destinations)


class MirroredStrategy(Strategy):
    """Synchronous training across multiple replicas on one machine.

    Args:
      devices: a list of device strings such as ``['/cpu:0', '/cpu:1']``; one CPU if ``None``.
      cross_device_ops: optional ``CrossDeviceOps`` (default ``ReductionToOneDevice``).
    """

    def __init__(
        self, devices: Sequence[str] | None = None, cross_device_ops: CrossDeviceOps | None = None
    ) -> None:
        super().__init__(MirroredExtended(self, devices=devices, cross_device_ops=cross_device_ops))

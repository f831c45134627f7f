"""DistributedDataset / DistributedIterator: per-replica batches; workers agree on the end.

Mirrors ``tensorflow/python/distribute/input_lib.py`` (TF 2.21) for the eager, multi-client
case: every worker (MPI rank) builds its own input pipeline, its k local replicas take k
consecutive elements per step, and with partial batch handling the workers sum how many
replicas still have data (one small all-reduce per step, as TF's ``strategy.reduce``): while
any has, the replicas that ran out get empty batches; when none has, every worker's iterator
ends at the same step. docs/input_semantics.md has the behaviour verified against TF.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mwms_mpi import _context, errors, nest
from mwms_mpi.collective import Communicator
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.data import INFINITE_CARDINALITY, Dataset, TensorSpec
from mwms_mpi.data.distribute import dataset_for_worker
from mwms_mpi.distribute.input_context import InputContext, InputOptions, InputReplicationMode
from mwms_mpi.distribute.input_spec import Optional, PerReplicaSpec
from mwms_mpi.values import regroup

if TYPE_CHECKING:  # the strategy imports this module, never the other way at run time
    from mwms_mpi.distribute._types import StrategyProtocol

__all__ = [
    "DistributedDataset",
    "DistributedDatasetsFromFunction",
    "DistributedIterator",
    "InputWorkers",
    "Optional",
    "PerReplicaSpec",
    "get_distributed_dataset",
    "get_distributed_datasets_from_function",
]

_MISSING = object()  # a replica whose input pipeline has ended


@dataclass(frozen=True)
class InputWorkers:
    """Where this process's input comes from, as the strategy's extended sees it.

    Attributes:
      num_workers: the number of workers (input pipelines across the cluster).
      worker_index: this worker's index (its ``id_in_cluster``).
      num_local_replicas: the number of replicas this worker feeds per step.
      communicator: the communicator across workers, ``None`` for a single worker.
      gpus: the replicas' GPUs (``distribute/gpus.py``), ``None`` when they run on the CPU.
    """

    num_workers: int
    worker_index: int
    num_local_replicas: int
    communicator: Communicator | None = None
    gpus: Any = None

    def fetch(self, options: InputOptions | None) -> Any:
        """What puts replica i's batch on its GPU (``experimental_fetch_to_device``, TF's
        default, on a strategy whose replicas run on GPUs), else ``None``."""
        if self.gpus is None or (options is not None and not options.experimental_fetch_to_device):
            return None
        return self.gpus.fetch

    @property
    def multi_worker(self) -> bool:
        """Whether there is more than one worker (TF's ``_in_multi_worker_mode``)."""
        return self.num_workers > 1

    def always_wrap(self) -> bool:
        """Whether values are always wrapped in ``PerReplica`` (TF's ``_always_wrap``)."""
        return self.multi_worker or self.num_local_replicas > 1


def _is_statically_shaped(element_spec: Any) -> bool:
    return all(all(dim is not None for dim in spec.shape) for spec in nest.flatten(element_spec))


def _rebatch_as_dynamic(spec: Any) -> Any:
    if isinstance(spec, TensorSpec) and spec.shape:
        return TensorSpec((None, *spec.shape[1:]), spec.dtype, spec.name)
    return spec


def _dummy(spec: TensorSpec) -> np.ndarray:
    """An empty batch for ``spec``: unknown dims 0, and dim 0 set to 0 if all were known (TF)."""
    dims = [0 if dim is None else dim for dim in spec.shape]
    if dims and all(dim is not None for dim in spec.shape):
        dims[0] = 0
    return np.zeros(dims, dtype=spec.dtype)


def _end_of_sequence() -> errors.OutOfRangeError:
    return errors.OutOfRangeError(None, "IteratorGetNext", "End of sequence [Op:IteratorGetNext]")


class DistributedIterator:
    """An iterator over a ``DistributedDataset``: one element per replica per step.

    ``next(iterator)`` raises ``StopIteration`` at the end (so ``for`` loops end);
    ``get_next()`` raises ``OutOfRangeError``; ``get_next_as_optional()`` returns an empty
    ``Optional``. Across workers, all three end at the same step.
    """

    def __init__(
        self,
        pipelines: Sequence[tuple[Iterator[Any], int, Any]],
        input_workers: InputWorkers,
        strategy: StrategyProtocol,
        element_spec: Any,
        cardinality: int,
        partial_batches: bool,
        infinite: bool,
        fetch: Callable[[Any, int], Any] | None = None,
        source: DistributedDataset | None = None,
    ) -> None:
        self._pipelines = list(pipelines)  # (iterator, replicas it feeds, its element_spec)
        self._source = source  # the dataset it iterates (ElasticHandler remakes it)
        self._position = 0  # steps produced: each worker's, the same on every worker
        self._fetch = fetch  # replica i's element onto its GPU, or None
        self._input_workers = input_workers
        self._strategy = strategy
        self._element_spec = element_spec
        self._cardinality = cardinality
        self._partial_batches = partial_batches
        self._infinite = infinite  # the same on every worker

    @property
    def element_spec(self) -> Any:
        """The type specification of an element of this iterator (TF's: the batch dimension
        ``None`` with partial batches across workers; its empty optionals keep the static
        spec, as TF's ``Optional.empty(self._element_spec)``)."""
        return _as_reported(self._element_spec, self._input_workers, self._partial_batches)

    def __iter__(self) -> DistributedIterator:
        return self

    def __next__(self) -> Any:
        try:
            return self.get_next()
        except errors.OutOfRangeError:
            raise StopIteration from None

    def next(self) -> Any:
        """Returns the next input for all replicas (``StopIteration`` at the end)."""
        return self.__next__()

    def get_next(self, name: str | None = None) -> Any:
        """Returns the next input from the iterator for all replicas.

        Raises:
          OutOfRangeError: the end of the data is reached on every worker.
          ValueError: when called inside a replica function (``strategy.run``).
        """
        del name
        if _context.in_replica_function():
            raise ValueError(
                "next(iterator) should be called from outside of replica_fn. e.g. "
                "strategy.run(replica_fn, args=(next(iterator),))"
            )
        if not self._partial_batches:
            return self._get_next_no_partial_batch_handling()
        values, specs = self._next_optionals()
        if not self._any_replica_has_values(values):
            raise _end_of_sequence()
        return self._per_replica(_fill_dummies(values, specs))

    def get_next_as_optional(self) -> Optional:
        """Returns a ``tf.experimental.Optional`` with the next input, empty at the end.

        The replicas that ran out get empty batches while any replica on any worker still has
        data; the optional is empty on every worker at the same step.
        """
        if self._infinite:
            return Optional.from_value(self._get_next_no_partial_batch_handling())
        if self._cardinality == 0 and not self._input_workers.multi_worker:
            return Optional.empty(self._element_spec)
        values, specs = self._next_optionals()
        if not self._any_replica_has_values(values):
            return Optional.empty(self._element_spec)
        return Optional.from_value(self._per_replica(_fill_dummies(values, specs)))

    def _next_optionals(self) -> tuple[list[Any], list[Any]]:
        values: list[Any] = []
        specs: list[Any] = []
        for iterator, count, spec in self._pipelines:
            for _ in range(count):
                values.append(next(iterator, _MISSING))
                specs.append(spec)
        return values, specs

    def _any_replica_has_values(self, values: list[Any]) -> bool:
        """Whether any replica on any worker got a value this step (the one collective)."""
        local = int(any(value is not _MISSING for value in values))
        communicator = self._input_workers.communicator
        if communicator is None or not self._input_workers.multi_worker:
            return bool(local)
        # One purpose for next(), get_next() and get_next_as_optional(): equivalent on every
        # worker (each takes one step), and named in the error if a worker does something else.
        with api_call(communicator, "DistributedIterator end-of-data check"):
            return communicator.min_max(local, "end of data")[1] == 1

    def _get_next_no_partial_batch_handling(self) -> Any:
        values, _ = self._next_optionals()
        if any(value is _MISSING for value in values):
            raise _end_of_sequence()
        return self._per_replica(values)

    def _per_replica(self, values: list[Any]) -> Any:
        self._position += 1  # every step that produces a value comes through here
        fetch = self._fetch
        if fetch is not None:
            values = [fetch(value, i) for i, value in enumerate(values)]
        return regroup(values, always_wrap=self._input_workers.always_wrap())


def _fill_dummies(values: list[Any], specs: list[Any]) -> list[Any]:
    return [
        nest.map_structure(_dummy, spec) if value is _MISSING else value
        for value, spec in zip(values, specs, strict=True)
    ]


class DistributedDataset:
    """Represents a dataset distributed among devices and machines (``tf.distribute``'s).

    Made by ``strategy.experimental_distribute_dataset``; iterate it with ``for`` or ``iter``.
    Each iteration starts every worker's input pipeline afresh.
    """

    def __init__(
        self,
        datasets: Sequence[tuple[Dataset, int]],
        input_workers: InputWorkers,
        strategy: StrategyProtocol,
        cardinality: int,
        partial_batches: bool,
        infinite: bool,
        options: InputOptions | None = None,
    ) -> None:
        self._datasets = list(datasets)  # (this worker's dataset, the replicas it feeds)
        # The same distribution for the strategy's current world, ``skip`` steps on: set by
        # MirroredExtended, for ElasticHandler, which remakes the input after a shrink.
        self._remake: Callable[[int], DistributedDataset] | None = None
        self._fetch = input_workers.fetch(options)
        self._input_workers = input_workers
        self._strategy = strategy
        self._cardinality = cardinality
        self._partial_batches = partial_batches
        self._infinite = infinite
        local_spec = self._datasets[0][0].element_spec
        spec = local_spec
        if input_workers.always_wrap():
            k = input_workers.num_local_replicas
            spec = nest.map_structure(lambda s: PerReplicaSpec(*[s] * k), local_spec)
        self._element_spec = spec  # static; ``element_spec`` reports it (_as_reported)

    def __iter__(self) -> DistributedIterator:
        pipelines = [(iter(ds), count, ds.element_spec) for ds, count in self._datasets]
        return DistributedIterator(
            pipelines,
            self._input_workers,
            self._strategy,
            self._element_spec,
            self._cardinality,
            self._partial_batches,
            self._infinite,
            self._fetch,
            self,
        )

    @property
    def element_spec(self) -> Any:
        """The type specification of an element of this dataset.

        A ``PerReplicaSpec`` per component when the values are ``PerReplica`` (more than one
        local replica, or more than one worker); the batch dimension is ``None`` when
        partial batches may be produced across workers.
        """
        return _as_reported(self._element_spec, self._input_workers, self._partial_batches)

    @property
    def cardinality(self) -> np.int64:
        """The cardinality of the (undistributed) dataset, as TF reports it."""
        return np.int64(self._cardinality)

    def reduce(self, initial_state: Any, reduce_func: Callable[[Any, Any], Any]) -> Any:
        """Execute a ``reduce_func`` over all the elements of the input.

        Args:
          initial_state: the initial state of the reduction.
          reduce_func: ``reduce_func(state, element) -> state``, called once per step.

        Returns:
          The final state.
        """
        iterator = iter(self)
        state = initial_state
        optional = iterator.get_next_as_optional()
        while optional.has_value():
            state = reduce_func(state, optional.get_value())
            optional = iterator.get_next_as_optional()
        return state


def _as_reported(spec: Any, input_workers: InputWorkers, partial_batches: bool) -> Any:
    """The ``element_spec`` a distributed dataset or iterator reports: with partial batch
    handling across workers, the batch dimension ``None`` (a replica may get an empty batch);
    TF computes it from the static spec on every read, and hands the static one to
    ``Optional.empty``."""
    if partial_batches and input_workers.multi_worker:
        return nest.map_structure(_rebatch_spec, spec)
    return spec


def _rebatch_spec(spec: Any) -> Any:
    if isinstance(spec, PerReplicaSpec):
        return PerReplicaSpec(*[_rebatch_as_dynamic(s) for s in spec._value_specs])
    return _rebatch_as_dynamic(spec)


class DistributedDatasetsFromFunction(DistributedDataset):
    """The datasets made by ``strategy.distribute_datasets_from_function``, one per pipeline."""


def _enable_partial_batches(input_workers: InputWorkers, element_spec: Any, infinite: bool) -> bool:
    """TF's ``_enable_get_next_as_optional`` (the strategies here all enable it)."""
    if infinite:
        return False
    return not _is_statically_shaped(element_spec) or input_workers.multi_worker


def get_distributed_dataset(
    dataset: Dataset,
    input_workers: InputWorkers,
    strategy: StrategyProtocol,
    num_replicas_in_sync: int,
    options: InputOptions | None = None,
) -> DistributedDataset:
    """Rebatches ``dataset`` across replicas and auto-shards it across workers, as TF does.

    Args:
      dataset: the globally batched ``Dataset``.
      input_workers: this worker's place in the cluster.
      strategy: the ``Strategy`` that distributes it.
      num_replicas_in_sync: the number of replicas across all workers.
      options: ``InputOptions`` (checked by the caller; of the prefetching options only
        ``experimental_fetch_to_device`` has an effect: batches on the replicas' GPUs).

    Returns:
      A ``DistributedDataset``.
    """
    local = dataset_for_worker(
        dataset, input_workers.num_workers, input_workers.worker_index, num_replicas_in_sync
    )
    cardinality = int(dataset.cardinality())
    infinite = cardinality == INFINITE_CARDINALITY  # of the global dataset: the same everywhere
    partial = _enable_partial_batches(input_workers, dataset.element_spec, infinite)
    datasets = [(local, input_workers.num_local_replicas)]
    return DistributedDataset(
        datasets, input_workers, strategy, cardinality, partial, infinite, options
    )


def check_from_function_options(options: InputOptions | None) -> None:
    """TF's checks of ``InputOptions`` for ``distribute_datasets_from_function``.

    Raises:
      ValueError: if ``experimental_place_dataset_on_device`` and the replication mode or
        ``experimental_fetch_to_device`` are not consistent.
    """
    if options is None:
        return
    per_replica = options.experimental_replication_mode == InputReplicationMode.PER_REPLICA
    if not per_replica and options.experimental_place_dataset_on_device:
        raise ValueError(
            "When `experimental_place_dataset_on_device` is set for dataset placement, you "
            "must also specify `PER_REPLICA` for the replication mode"
        )
    if (
        per_replica
        and options.experimental_fetch_to_device
        and options.experimental_place_dataset_on_device
    ):
        raise ValueError(
            "`experimental_place_dataset_on_device` can not be set to True when "
            "experimental_fetch_to_device is True and replication mode is set to `PER_REPLICA`"
        )


def get_distributed_datasets_from_function(
    dataset_fn: Callable[[InputContext], Dataset],
    input_workers: InputWorkers,
    strategy: StrategyProtocol,
    num_replicas_in_sync: int,
    options: InputOptions | None = None,
) -> DistributedDatasetsFromFunction:
    """Calls ``dataset_fn`` once per input pipeline of this worker and distributes the results.

    With ``PER_WORKER`` replication (the default) ``dataset_fn`` is called once, with
    ``InputContext(num_workers, worker_index, num_replicas_in_sync)``, and the worker's
    replicas take consecutive elements; with ``PER_REPLICA`` (single worker only) it is called
    once per local replica, with ``InputContext(k, replica, num_replicas_in_sync)``.

    Args:
      dataset_fn: a function taking an ``InputContext`` and returning a ``Dataset``.
      input_workers: this worker's place in the cluster.
      strategy: the ``Strategy`` that distributes it.
      num_replicas_in_sync: the number of replicas across all workers.
      options: ``InputOptions``.

    Returns:
      A ``DistributedDatasetsFromFunction``.

    Raises:
      ValueError: for inconsistent ``options``.
    """
    check_from_function_options(options)
    k = input_workers.num_local_replicas
    if options is not None and options.experimental_replication_mode == (
        InputReplicationMode.PER_REPLICA
    ):
        contexts = [InputContext(k, i, num_replicas_in_sync) for i in range(k)]
        datasets = [(dataset_fn(context), 1) for context in contexts]
    else:
        context = InputContext(
            input_workers.num_workers, input_workers.worker_index, num_replicas_in_sync
        )
        datasets = [(dataset_fn(context), k)]
    cardinality = int(datasets[0][0].cardinality())
    infinite = _agree_infinite(input_workers, cardinality == INFINITE_CARDINALITY)
    partial = _enable_partial_batches(input_workers, datasets[0][0].element_spec, infinite)
    return DistributedDatasetsFromFunction(
        datasets, input_workers, strategy, cardinality, partial, infinite, options
    )


def _agree_infinite(input_workers: InputWorkers, infinite: bool) -> bool:
    """Whether every worker's dataset is infinite (one all-reduce, multi-worker only).

    TF decides per worker whether to hand out partial batches (not for an infinite dataset);
    workers whose ``dataset_fn`` results differ in that would call different collectives, so
    here they agree: partial batch handling is off only if every worker's dataset is infinite.
    """
    communicator = input_workers.communicator
    if communicator is None or not input_workers.multi_worker:
        return infinite
    with api_call(communicator, "DistributedDataset creation"):
        return communicator.min_max(int(infinite), "infinite dataset")[0] == 1


class DefaultInputIterator:
    """The default strategy's ``make_dataset_iterator``/``make_input_fn_iterator`` iterator
    (TF's ``_DefaultDistributionExtended.DefaultInputIterator``): the dataset's own iterator
    behind ``get_next``; like TF's, it is not itself iterable.

    Args:
      dataset: the dataset (not distributed: the default strategy has one replica).
    """

    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset
        self._iterator = iter(dataset)

    def get_next(self) -> Any:
        """The next element.

        Raises:
          OutOfRangeError: at the end of the data.
        """
        return self._iterator.get_next()

    def get_next_as_optional(self) -> Optional:
        """The next element as an ``Optional``, empty at the end of the data."""
        try:
            return Optional.from_value(self._iterator.get_next())
        except errors.OutOfRangeError:
            return Optional.empty(self._dataset.element_spec)

    def initialize(self) -> None:
        """TF 2.21's own failure, kept (docs/architecture.md): it calls the TF 1.x
        ``dataset.make_one_shot_iterator``, which TF 2 datasets lack.

        Raises:
          AttributeError: always, in TF's words.
        """
        raise AttributeError(
            f"'{type(self._dataset).__name__}' object has no attribute 'make_one_shot_iterator'"
        )

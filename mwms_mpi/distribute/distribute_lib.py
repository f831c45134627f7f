"""Strategy and the default (no-op) strategy, as in TF's ``distribute_lib``.

The per-thread context (which strategy, cross-replica or replica context) and what each
context allows live in ``mwms_mpi._context``; ``StrategyExtended`` and ``ReplicaContext`` have
their own modules, re-exported here as TF's ``distribute_lib`` does. The older names of the
API (``experimental_run_v2``, ``make_dataset_iterator``, ...) are thin, warning aliases
(``deprecated``).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from mwms_mpi import _arrays, _context
from mwms_mpi._graph_constant import function_arguments
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.distribute import deprecated
from mwms_mpi.distribute._reduce_sum import (
    function_value,
    local_value,
    reduce_axes,
    reduce_sum,
)
from mwms_mpi.distribute.input_context import InputContext, InputReplicationMode, ValueContext
from mwms_mpi.distribute.input_lib import DefaultInputIterator
from mwms_mpi.distribute.replica_context import DefaultReplicaContext, ReplicaContext
from mwms_mpi.distribute.strategy_extended import (
    CPU0,
    StrategyExtended,
    UpdateContext,
)
from mwms_mpi.types import ReduceOp, as_reduce_op, reduce_op_and_text
from mwms_mpi.values import IndexedSlices
from mwms_mpi.values.convert import result_copy, truediv
from mwms_mpi.values.structure import of_value

__all__ = ["ReplicaContext", "RunOptions", "Strategy", "StrategyExtended"]


class _CurrentDistributionContext:
    """``strategy.scope()``: enters cross-replica context; re-entering the same scope is allowed."""

    def __init__(self, strategy: Strategy) -> None:
        self._strategy = strategy
        self._entry = _context.ContextEntry(strategy, strategy, None)
        self._tokens: list[_context.Token | None] = []

    def __enter__(self) -> Strategy:
        entry = _context.current()
        if entry.strategy is not _context.get_default().strategy:
            _context.require_cross_replica_or_default(self._strategy._extended)
            self._tokens.append(None)
        else:
            self._tokens.append(_context.push(self._entry))
        return self._strategy

    def __exit__(self, *exc: object) -> None:
        token = self._tokens.pop()
        if token is not None:
            _context.reset(token)


class _DefaultDistributionContext:
    """The default strategy's ``scope()``: as TF's, it changes no context. It pushes the current
    entry marked (``_context.default_scope_entry``), for other strategies' creators to refuse
    (``check_default_scope_creator``)."""

    def __init__(self, strategy: Strategy) -> None:
        self._strategy = strategy
        self._tokens: list[_context.Token] = []

    def __enter__(self) -> Strategy:
        if _context.has_strategy():  # TF checks this before anything else
            raise RuntimeError("Must not nest tf.distribute.Strategy scopes.")
        self._tokens.append(_context.push(_context.default_scope_entry()))
        return self._strategy

    def __exit__(self, *exc: object) -> None:
        _context.reset(self._tokens.pop())


class RunOptions(
    collections.namedtuple(
        "RunOptions",
        [
            "experimental_enable_dynamic_batch_size",
            "experimental_bucketizing_dynamic_shape",
            "experimental_xla_options",
        ],
    )
):
    """Run options for ``strategy.run`` (TPU/XLA knobs: accepted and ignored here)."""

    def __new__(
        cls,
        experimental_enable_dynamic_batch_size: bool = True,
        experimental_bucketizing_dynamic_shape: bool = False,
        experimental_xla_options: Any = None,
    ) -> RunOptions:
        return super().__new__(
            cls,
            experimental_enable_dynamic_batch_size,
            experimental_bucketizing_dynamic_shape,
            experimental_xla_options,
        )


# -- Strategy ---------------------------------------------------------------------------------


class Strategy:
    """A state & compute distribution policy on a list of devices (``tf.distribute.Strategy``).

    Args:
      extended: the ``StrategyExtended`` implementing it.
    """

    def __init__(self, extended: StrategyExtended) -> None:
        self._extended = extended

    @property
    def extended(self) -> StrategyExtended:
        """``tf.distribute.StrategyExtended`` with additional methods."""
        return self._extended

    @property
    def num_replicas_in_sync(self) -> int:
        """Returns number of replicas over which gradients are aggregated."""
        return self._extended._num_replicas_in_sync

    @property
    def cluster_resolver(self) -> Any:
        """Returns the cluster resolver associated with this strategy, or ``None``."""
        return getattr(self._extended, "_cluster_resolver", None)

    def scope(self) -> AbstractContextManager[Strategy]:
        """Context manager to make the strategy current and distribute variables."""
        return _CurrentDistributionContext(self)

    def run(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        options: Any = None,
    ) -> Any:
        """Invokes ``fn`` on each replica, with the given arguments.

        ``PerReplica`` arguments are unwrapped per replica; results are regrouped (a plain
        value for a single local replica, else ``PerReplica``/``Mirrored``).

        Raises:
          TypeError: if ``fn`` is not callable (TF's error names no argument; this one does).
          ValueError: if ``args`` is not a list or tuple.
        """
        del options
        if not callable(fn):
            raise TypeError(f"Strategy.run: fn must be callable, got {type(fn).__name__} {fn!r}")
        if not isinstance(args, list | tuple):
            raise ValueError(f"positional args must be a list or tuple, got {type(args)}")
        with self.scope():
            return self._extended.call_for_each_replica(fn, args=args, kwargs=kwargs)

    def reduce(self, reduce_op: ReduceOp | str, value: Any, axis: Any) -> Any:
        """Reduce ``value`` across replicas and return the result on current device.

        Args:
          reduce_op: a ``ReduceOp`` or its name ("SUM", "MEAN", any case).
          value: a ``DistributedValues`` (e.g. returned by ``run``), or a plain value.
          axis: the dimension to reduce along within each replica's value (typically the
            batch dimension), or ``None`` to only reduce across replicas.

        Returns:
          A numpy array.

        Raises:
          ValueError: for an unknown ``reduce_op``.
          TypeError: for a ``reduce_op`` other than SUM/MEAN with ``axis``, or a bad ``axis``.
        """
        ext = self._extended
        axis_text = "" if axis is None else str(axis)
        op, op_text = reduce_op_and_text(reduce_op)
        structure = of_value(value)  # "" for one dense value: the context stays cached
        with api_call(ext._communicator, "Strategy.reduce", op_text, axis_text, "", structure):
            _context.require_cross_replica_or_default(ext)
            reduce_op = op if op is not None else as_reduce_op(reduce_op)
            if axis is None:
                return ext._reduce(reduce_op, value)
            hash(axis)  # TF caches a function per axis in a dict: a list axis is a TypeError
            if reduce_op == ReduceOp.SUM:
                # TF runs this step in a tf.function: numpy scalars in the argument are
                # tensors, Python values graph constants (_graph_constant.py)
                value = self.run(
                    lambda v: reduce_sum(function_value(v), axis),
                    args=(function_arguments(value),),
                )
                return ext._reduce(reduce_op, value)
            if not isinstance(axis, int | tuple | list):
                raise TypeError(f"Expected `axis` to be an integer, tuple or list not: {axis!r}")

            def mean_reduce_helper(v: Any) -> tuple[Any, Any]:
                local = local_value(v)
                numer = reduce_sum(local, axis)
                if isinstance(v, list | tuple | dict | int | float | complex):
                    # TF counts from ``v.shape`` after its reduce_sum: a Python value has none
                    # (another library's array is converted, as everywhere: values/foreign.py)
                    raise AttributeError(f"'{type(v).__name__}' object has no attribute 'shape'")
                denom = 1
                for a in reduce_axes(local, axis):
                    denom *= local.shape[a]
                return numer, np.array(denom, dtype=np.int64)

            numer, denom = self.run(mean_reduce_helper, args=(value,))
            numer = _arrays.as_result(ext._reduce(ReduceOp.SUM, numer))
            denom = np.asarray(ext._reduce(ReduceOp.SUM, denom))  # counts: on the host
        return truediv(numer, denom)

    def gather(self, value: Any, axis: int) -> Any:
        """Gather ``value`` across replicas along ``axis`` to the current device.

        Shapes may differ along ``axis``; ranks and dtypes must agree.

        Raises:
          NotImplementedError: for ``IndexedSlices``.
        """
        ext = self._extended
        structure = of_value(value)
        with api_call(ext._communicator, "Strategy.gather", axis=str(axis), structure=structure):
            _context.require_cross_replica_or_default(
                ext,
                "tf.distribute.Strategy.gather method requires cross-replica context, use "
                "get_replica_context().all_gather() instead",
            )
            if isinstance(value, IndexedSlices):
                raise NotImplementedError("gather does not support IndexedSlices")
            gathered = ext._gather_to(value, CPU0, axis)
        return ext._local_results(gathered)[0]

    def experimental_local_results(self, value: Any) -> tuple[Any, ...]:
        """Returns the list of all local per-replica values contained in ``value``."""
        return self._extended._local_results(value)

    def experimental_distribute_values_from_function(self, value_fn: Callable[[Any], Any]) -> Any:
        """Generates ``tf.distribute.DistributedValues`` from ``value_fn``.

        ``value_fn`` is called once per local replica with a ``ValueContext``.
        """
        return self._extended._experimental_distribute_values_from_function(value_fn)

    def experimental_distribute_dataset(self, dataset: Any, options: Any = None) -> Any:
        """Creates `tf.distribute.DistributedDataset` from `tf.data.Dataset`.

        The global batch is split across all replicas: the dataset is rebatched and auto-sharded
        across workers per its ``auto_shard_policy``, as TF does (partial batches included).

        Args:
          dataset: `tf.data.Dataset` that will be sharded across all replicas using the rules
            stated above.
          options: `tf.distribute.InputOptions` used to control options on how this dataset is
            distributed.

        Returns:
          A `tf.distribute.DistributedDataset`.
        """
        return self._extended._experimental_distribute_dataset(dataset, options)

    def distribute_datasets_from_function(
        self, dataset_fn: Callable[[Any], Any], options: Any = None
    ) -> Any:
        """Distributes `tf.data.Dataset` instances created by calls to `dataset_fn`.

        `dataset_fn` is called once per worker with a `tf.distribute.InputContext`; its dataset,
        already batched by the per-replica batch size and sharded, is used as is: every replica
        on the worker dequeues one batch per step.

        Args:
          dataset_fn: A function taking a `tf.distribute.InputContext` instance and returning a
            `tf.data.Dataset`.
          options: `tf.distribute.InputOptions` used to control options on how this dataset is
            distributed.

        Returns:
          A `tf.distribute.DistributedDataset`.
        """
        return self._extended._distribute_datasets_from_function(dataset_fn, options)

    def colocate_vars_with(self, colocate_with_variable: Any) -> Any:
        """Controls which devices variables will be created on (a no-op context here)."""
        return self._extended.colocate_vars_with(colocate_with_variable)

    def group(self, value: Any, name: str | None = None) -> Any:
        """Shortcut for ``tf.group(self.experimental_local_results(value))`` (eagerly)."""
        return self._extended._group(value, name)

    # -- older names (TF 1.x and early TF 2; the seeds' programs use them) -------------------

    def experimental_run_v2(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        options: Any = None,
    ) -> Any:
        """Deprecated (TF 2.0-2.1) name of ``run``; not in TF 2.21, kept for older programs."""
        deprecated.warn_once("Strategy.experimental_run_v2", "Strategy.run")
        return self.run(fn, args=args, kwargs=kwargs, options=options)

    def experimental_run(self, fn: Callable[..., Any], input_iterator: Any = None) -> Any:
        """Deprecated: runs ``fn`` once per replica on ``input_iterator.get_next()``, if given."""
        deprecated.warn_once("Strategy.experimental_run", "Strategy.run")
        with self.scope():
            args = (input_iterator.get_next(),) if input_iterator is not None else ()
        return self.run(fn, args=args)

    def experimental_distribute_datasets_from_function(
        self, dataset_fn: Callable[[Any], Any], options: Any = None
    ) -> Any:
        """Deprecated name of ``distribute_datasets_from_function``."""
        deprecated.warn_once(
            "Strategy.experimental_distribute_datasets_from_function",
            "Strategy.distribute_datasets_from_function",
        )
        return self.distribute_datasets_from_function(dataset_fn, options)

    def experimental_make_numpy_dataset(self, numpy_input: Any) -> Any:
        """Deprecated (TF 1.x): a dataset of ``numpy_input``'s slices along the first axis.

        Raises:
          AttributeError: for a leaf that is not a numpy array (TF's own failure).
        """
        deprecated.warn_once(
            "Strategy.experimental_make_numpy_dataset", "mwms_mpi.data.Dataset.from_tensor_slices"
        )
        return deprecated.numpy_dataset(numpy_input)

    def make_dataset_iterator(self, dataset: Any) -> Any:
        """Deprecated (TF 1.x): an iterator (``get_next``) over the distributed ``dataset``."""
        deprecated.warn_once(
            "Strategy.make_dataset_iterator", "iter(Strategy.experimental_distribute_dataset())"
        )
        return self._extended._make_dataset_iterator(dataset)

    def make_input_fn_iterator(
        self,
        input_fn: Callable[[Any], Any],
        replication_mode: InputReplicationMode = InputReplicationMode.PER_WORKER,
    ) -> Any:
        """Deprecated (TF 1.x): an iterator over ``input_fn``'s per-worker dataset.

        Raises:
          ValueError: for a replication mode other than ``PER_WORKER`` (TF's message).
        """
        deprecated.warn_once(
            "Strategy.make_input_fn_iterator",
            "iter(Strategy.distribute_datasets_from_function())",
        )
        if replication_mode != InputReplicationMode.PER_WORKER:
            raise ValueError(f"Input replication mode not supported: {replication_mode!r}")
        with self.scope():
            return self._extended._make_input_fn_iterator(input_fn, replication_mode)

    def unwrap(self, value: Any) -> tuple[Any, ...]:
        """Deprecated name of ``experimental_local_results``."""
        deprecated.warn_once("Strategy.unwrap", "Strategy.experimental_local_results")
        return self._extended._local_results(value)

    def configure(
        self,
        session_config: Any = None,
        cluster_spec: Any = None,
        task_type: str | None = None,
        task_id: int | None = None,
    ) -> None:
        """Deprecated (TF 1.x): re-initialises the strategy from ``cluster_spec`` if given.

        ``session_config`` (a ConfigProto) is accepted and ignored. For
        MultiWorkerMirroredStrategy, a ``cluster_spec`` makes the strategy multi-worker as
        TF's ``_configure`` does (a collective: every rank calls it); without one nothing
        changes.

        Raises:
          ValueError: if the cluster does not place this process at its MPI rank.
        """
        deprecated.warn_once("Strategy.configure", "the strategy's constructor")
        with api_call(self._extended._communicator, "Strategy.configure"):  # refused together
            return self._extended._configure(session_config, cluster_spec, task_type, task_id)


# -- the default strategy ---------------------------------------------------------------------


class _DefaultDistributionExtended(StrategyExtended):
    """Implementation of the default strategy: one replica, nothing distributed."""

    # TF's overrides: nothing to split; one input pipeline of one replica
    def _experimental_distribute_dataset(self, dataset: Any, options: Any) -> Any:
        return dataset

    def _distribute_datasets_from_function(self, dataset_fn: Any, options: Any) -> Any:
        return dataset_fn(InputContext())

    def _make_dataset_iterator(self, dataset: Any) -> Any:
        return DefaultInputIterator(dataset)

    def _make_input_fn_iterator(self, input_fn: Any, replication_mode: Any) -> Any:
        return DefaultInputIterator(input_fn(InputContext()))

    def _reduce_to(self, reduce_op: ReduceOp, value: Any, destinations: Any, options: Any) -> Any:
        return result_copy(value)  # TF: the input itself

    def _broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        """TF's: ``broadcast_to`` refuses ``None`` destinations, and this raises for others."""
        if destinations is None:
            return tensor
        raise NotImplementedError(  # TF's own failure, kept; its message is "TODO"
            "TODO: TF 2.21's default strategy has no extended.broadcast_to either (it raises "
            "NotImplementedError('TODO')); outside a strategy the value is already everywhere"
        )

    def value_container(self, value: Any) -> Any:
        """The value itself: the default strategy has no containers (TF's own override)."""
        return value

    def _gather_to_implementation(
        self, value: Any, destinations: Any, axis: int, options: Any
    ) -> Any:
        return result_copy(value)  # TF: the input itself

    def _call_for_each_replica(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        # TF's is a plain ReplicaContext(replica_id_in_sync_group=0): an int32 id, as under
        # MirroredStrategy; only outside any run is the id a Python int (DefaultReplicaContext).
        with ReplicaContext(self._container_strategy(), replica_id_in_sync_group=0):
            return fn(*args, **kwargs)

    def _update(self, var: Any, fn: Callable[..., Any], args: Any, kwargs: Any, group: bool) -> Any:
        with UpdateContext(0):
            return self._update_non_slot(var, fn, (var, *args), kwargs, group)

    def _local_results(self, value: Any) -> tuple[Any, ...]:
        return (value,)

    def _experimental_distribute_values_from_function(self, value_fn: Callable[[Any], Any]) -> Any:
        return value_fn(_value_context(0, 1))

    @property
    def worker_devices(self) -> tuple[str, ...]:
        raise RuntimeError("worker_devices() method unsupported by default tf.distribute.Strategy.")

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        raise RuntimeError(
            "parameter_devices() method unsupported by default tf.distribute.Strategy."
        )

    def non_slot_devices(self, var_list: Any) -> Any:
        return min(var_list, key=lambda x: getattr(x, "name", ""))

    @property
    def should_checkpoint(self) -> bool:
        return True

    @property
    def should_save_summary(self) -> bool:
        return True

    @property
    def experimental_between_graph(self) -> bool:
        return False

    @property
    def experimental_should_init(self) -> bool:
        return True


class _DefaultDistributionStrategy(Strategy):
    """Default ``tf.distribute.Strategy`` if none is explicitly selected."""

    def __init__(self) -> None:
        super().__init__(_DefaultDistributionExtended(self))

    def scope(self) -> AbstractContextManager[Strategy]:
        """A scope changing no context; refused ("Must not nest") in another strategy's."""
        return _DefaultDistributionContext(self)


def _value_context(replica_id: int, num_replicas: int) -> ValueContext:
    return ValueContext(replica_id, num_replicas)


def _make_default_entry() -> _context.ContextEntry:
    strategy = _DefaultDistributionStrategy()
    return _context.ContextEntry(strategy, None, DefaultReplicaContext(strategy, 0))


_context.set_default_factory(_make_default_entry)

"""StrategyExtended: TF's StrategyExtendedV1/V2 in one class, the base of every strategy's extended.

The context checks it makes (TF's ``_require_*`` helpers) live in ``mwms_mpi._context``, with
what the contexts mean; the container strategy is typed from ``distribute_lib`` for checking
only (it imports this module).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from mwms_mpi import _context, nest
from mwms_mpi.collective import Communicator
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.distribute import deprecated
from mwms_mpi.distribute._types import StrategyProtocol
from mwms_mpi.distribute.cross_device_ops import check_pairs
from mwms_mpi.types import (
    CommunicationOptions,
    ReduceOp,
    VariableAggregation,
    as_reduce_op,
    reduce_op_and_text,
)
from mwms_mpi.values.aggregation import UpdateContext, get_update_replica_id
from mwms_mpi.values.convert import as_array, result_copy
from mwms_mpi.values.distributed import local_results, value_container
from mwms_mpi.values.structure import of_pairs, of_value
from mwms_mpi.values.variables import UnreadVariable, Variable

__all__ = ["CPU0", "StrategyExtended", "UpdateContext", "get_update_replica_id"]

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
_require_cross_replica = _context.require_cross_replica_or_default

# -- StrategyExtended -------------------------------------------------------------------------


class StrategyExtended:
    """Additional APIs for algorithms that need to be distribution-aware.

    Args:
      container_strategy: the ``Strategy`` this object extends.
    """

    # The communicator across workers, if any: public APIs name themselves to its agreement.
    _communicator: Communicator | None = None

    def __init__(self, container_strategy: StrategyProtocol) -> None:
        self._container_strategy_ref = container_strategy
        self._num_replicas_in_sync = 1

    def _container_strategy(self) -> StrategyProtocol:
        return self._container_strategy_ref

    @property
    def communicator(self) -> Communicator | None:
        """The communicator across workers (``None`` for a single worker, or none at all).

        The typed seam (``_context.ExtendedLike``) through which values/, train/ and
        optimizers/ name their collectives and agree outcomes: not part of TF's API.
        """
        return self._communicator

    def _create_variable(self, next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        """The hook ``Variable(...)`` calls in this strategy's scope: here a plain variable
        (TF's default strategy); strategies that mirror variables override it."""
        return next_creator(**kwargs)

    # cross-replica reductions

    def reduce_to(
        self,
        reduce_op: ReduceOp | str,
        value: Any,
        destinations: Any,
        options: CommunicationOptions | None = None,
    ) -> Any:
        """Combine (via e.g. sum or mean) values across replicas.

        Pass the same value as ``value`` and ``destinations`` for an all-reduce. Cross-replica
        context only.

        Raises:
          AssertionError: for a list or tuple as ``destinations``, then for a
            ``VariableAggregation`` as ``reduce_op`` (TF's two ``assert``s, in TF's order,
            before the op is parsed; TF's are bare, ours name the argument).
          ValueError: for another ``reduce_op`` that names no ``ReduceOp``.
          RuntimeError: in replica context.
        """
        op, text = reduce_op_and_text(reduce_op)
        api = "StrategyExtended.reduce_to"
        with api_call(self._communicator, api, text, structure=of_value(value)):
            _require_cross_replica(self)
            if isinstance(destinations, list | tuple):
                raise AssertionError("reduce_to: destinations must not be a list or tuple")
            if isinstance(reduce_op, VariableAggregation):
                raise AssertionError(
                    f"reduce_to: reduce_op must be a ReduceOp, not a VariableAggregation: "
                    f"{reduce_op}"
                )
            reduce_op = op if op is not None else _check_reduce_op(reduce_op)
            return self._reduce_to(reduce_op, value, destinations, options)

    def batch_reduce_to(
        self,
        reduce_op: ReduceOp | str,
        value_destination_pairs: Sequence[tuple[Any, Any]],
        options: CommunicationOptions | None = None,
    ) -> list[Any]:
        """Combine multiple ``reduce_to`` calls into one for faster execution (packed).

        Returns:
          A list of reduced values, one per pair, in order.

        Raises:
          ValueError: if an element of ``value_destination_pairs`` is not a pair.
        """
        if not isinstance(value_destination_pairs, list | tuple):  # a zip: read it once
            value_destination_pairs = _listed(value_destination_pairs)
        op, text = reduce_op_and_text(reduce_op)
        api, structure = "StrategyExtended.batch_reduce_to", of_pairs(value_destination_pairs)
        with api_call(self._communicator, api, text, structure=structure):
            _require_cross_replica(self)
            reduce_op = op if op is not None else _check_reduce_op(reduce_op)
            return self._batch_reduce_to(reduce_op, check_pairs(value_destination_pairs), options)

    def _reduce(self, reduce_op: ReduceOp, value: Any) -> Any:
        """``Strategy.reduce`` without an axis, after its own checks (TF's ``_reduce``)."""
        return self._local_results(self._reduce_to(reduce_op, value, CPU0, None))[0]

    def _reduce_to(self, reduce_op: ReduceOp, value: Any, destinations: Any, options: Any) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def _batch_reduce_to(
        self, reduce_op: ReduceOp, pairs: Sequence[tuple[Any, Any]], options: Any
    ) -> list[Any]:
        return [self.reduce_to(reduce_op, t, destinations=v, options=options) for t, v in pairs]

    def _gather_to(
        self, value: Any, destinations: Any, axis: int, options: CommunicationOptions | None = None
    ) -> Any:
        _require_cross_replica(self)
        return self._gather_to_implementation(value, destinations, axis, options)

    def _gather_to_implementation(
        self, value: Any, destinations: Any, axis: int, options: Any
    ) -> Any:
        raise NotImplementedError("_gather_to must be implemented in descendants")

    # updates

    def update(
        self,
        var: Any,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        group: bool = True,
    ) -> Any:
        """Run ``fn`` to update ``var`` using inputs mirrored to the same devices.

        ``fn(component, *args, **kwargs)`` runs once per component of ``var`` with ``args``
        selected for that component (``Mirrored`` arguments are unwrapped).
        """
        kwargs = kwargs or {}
        if not _context.in_replica_function():
            # TF returns the per-device results (values.update_regroup), not the variable.
            with self._container_strategy().scope():
                return self._update(var, fn, args, kwargs, group)
        return self._replica_ctx_update(var, fn, args, kwargs, group)

    def _update(self, var: Any, fn: Callable[..., Any], args: Any, kwargs: Any, group: bool) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def _replica_ctx_update(
        self, var: Any, fn: Callable[..., Any], args: Any, kwargs: Any, group: bool
    ) -> Any:
        replica_context = _context.current().replica_context
        assert replica_context is not None  # update() routes here only in a replica context

        def merge_fn(_: StrategyProtocol, *merged_args: Any, **merged_kwargs: Any) -> Any:
            return self.update(var, fn, merged_args, merged_kwargs, group)

        return replica_context.merge_call(merge_fn, args=args, kwargs=kwargs)

    def _replica_ctx_all_reduce(
        self, reduce_op: Any, value: Any, options: CommunicationOptions | None = None
    ) -> Any:
        """TF's private hook behind ``ReplicaContext.all_reduce`` (eager: a ``merge_call`` and
        a ``batch_reduce_to`` of the flattened nest), which TF's own tests call directly."""
        replica_context: Any = _context.current().replica_context  # this layer's ReplicaContext
        assert replica_context is not None and _context.in_replica_function(), (
            "`StrategyExtended._replica_ctx_all_reduce` must be called in a replica context"
        )
        return replica_context.all_reduce(reduce_op, value, options)

    def _get_local_replica_id(self, replica_id_in_sync_group: int) -> int:
        """This worker's index of a global replica id (one worker: the id itself)."""
        return replica_id_in_sync_group

    def update_non_slot(
        self,
        colocate_with: Any,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        group: bool = True,
    ) -> Any:
        """Runs ``fn(*args, **kwargs)`` on ``colocate_with`` devices (once per device)."""
        _require_cross_replica(self)
        with self._container_strategy().scope():
            return self._update_non_slot(colocate_with, fn, args, kwargs or {}, group)

    def _update_non_slot(
        self, colocate_with: Any, fn: Callable[..., Any], args: Any, kwargs: Any, group: bool
    ) -> Any:
        result = fn(*args, **kwargs)
        if group:
            return result
        return nest.map_structure(self._local_results, result)

    def broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        """Mirror a tensor on one device to all worker devices.

        Raises:
          ValueError: if ``destinations`` is ``None`` or a list.
        """
        if destinations is None or isinstance(destinations, list | tuple):
            raise ValueError("destinations must be a single destination, not None or a list")
        _require_cross_replica(self)
        return self._broadcast_to(tensor, destinations)

    def _broadcast_to(self, tensor: Any, destinations: Any) -> Any:
        return tensor

    @contextlib.contextmanager
    def colocate_vars_with(self, colocate_with_variable: Any) -> Iterator[None]:
        """Scope that controls which devices variables will be created on.

        Variables created inside get one component per component of ``colocate_with_variable``
        (used by optimizers for slot variables).

        Raises:
          RuntimeError: outside this strategy's scope.
          ValueError: for a variable not created in this strategy's scope (TF's message).
        """
        _require_cross_replica(self)
        self._validate_colocate_with_variable(colocate_with_variable)
        previous = getattr(self, "_colocate_with", None)
        self._colocate_with = colocate_with_variable
        try:
            yield
        finally:
            self._colocate_with = previous

    def _validate_colocate_with_variable(self, colocate_with_variable: Any) -> None:
        pass

    def value_container(self, value: Any) -> Any:
        """Returns the container that this per-replica ``value`` belongs to, else ``value``
        (TF's ``distribute_utils.value_container``: ``values.distributed.value_container``)."""
        return value_container(value)

    def variable_created_in_scope(self, v: Any) -> bool:
        """Tests whether ``v`` was created while this strategy scope was active."""
        strategy = v.distribute_strategy if isinstance(v, Variable) else None
        return strategy is self._container_strategy()

    def read_var(self, v: Any) -> Any:
        """Reads the value of a variable in cross-replica context: the default strategy's is
        TF's ``array_ops.identity(v)``, a fresh tensor of any value (a variable read).

        Raises:
          ValueError: for a value that converts to no tensor (TF's message).
        """
        return result_copy(as_array(v))

    def call_for_each_replica(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Run ``fn`` once per replica (the older name of ``Strategy.run``). As TF's, only
        ``kwargs=None`` becomes ``{}``: another value reaches ``fn(**kwargs)`` as it is."""
        _require_cross_replica(self)
        with self._container_strategy().scope():
            return self._call_for_each_replica(fn, args, {} if kwargs is None else kwargs)

    def _call_for_each_replica(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def experimental_run_steps_on_iterator(
        self,
        fn: Callable[[Any, Any], Any],
        iterator: Any,
        iterations: int = 1,
        initial_loop_values: Any = None,
    ) -> Any:
        """Runs ``fn(context, iterator.get_next())`` ``iterations`` times (TF 1.x; "please use
        ``run`` instead"); returns the ``MultiStepContext`` (``distribute/multi_step.py``)."""
        _context.require_cross_replica_or_default(self)
        deprecated.warn_once("StrategyExtended.experimental_run_steps_on_iterator", "Strategy.run")
        with self._container_strategy().scope():
            return self._experimental_run_steps_on_iterator(
                fn, iterator, iterations, initial_loop_values
            )

    def _experimental_run_steps_on_iterator(
        self, fn: Callable[[Any, Any], Any], iterator: Any, iterations: int, initial: Any
    ) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def _group(self, value: Any, name: str | None = None) -> Any:
        """``Strategy.group``, eagerly (TF's ``_group``): eager ``tf.group`` of the flattened
        local results is ``None``, unless there is one and no ``name``: then that result, or
        its ``.op`` where it has one (TF's ``_UnreadVariable``, an update's result: ``None``).
        """
        flat = nest.flatten(self._local_results(value))
        if len(flat) != 1 or name is not None:
            return None
        (result,) = flat
        return None if isinstance(result, UnreadVariable) else result

    # TF's ``_local_results``, bound here from its one home (the default strategy has its own)
    _local_results = local_results

    def _experimental_distribute_values_from_function(self, value_fn: Callable[[Any], Any]) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def _experimental_distribute_dataset(self, dataset: Any, options: Any) -> Any:
        raise NotImplementedError("Dataset distribution is not implemented yet for this strategy")

    def _distribute_datasets_from_function(self, dataset_fn: Any, options: Any) -> Any:
        raise NotImplementedError("Dataset distribution is not implemented yet for this strategy")

    def _make_dataset_iterator(self, dataset: Any) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def _make_input_fn_iterator(self, input_fn: Any, replication_mode: Any) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    def _configure(
        self, session_config: Any, cluster_spec: Any, task_type: Any, task_id: Any
    ) -> None:
        """TF's ``_configure``: nothing to do unless a strategy re-initialises from a cluster."""
        del session_config, cluster_spec, task_type, task_id

    @property
    def experimental_require_static_shapes(self) -> bool:
        """Returns ``True`` if static shape is required; ``False`` otherwise."""
        return False

    @property
    def worker_devices(self) -> tuple[str, ...]:
        """Returns the tuple of all devices used to for compute replica execution."""
        raise NotImplementedError("must be implemented in descendants")

    @property
    def parameter_devices(self) -> tuple[str, ...]:
        """Returns the tuple of all devices used to place variables."""
        raise NotImplementedError("must be implemented in descendants")

    def non_slot_devices(self, var_list: Any) -> Any:
        """Device(s) for non-slot variables."""
        return self.worker_devices

    @property
    def should_checkpoint(self) -> bool:
        """Whether checkpointing is needed."""
        raise NotImplementedError("must be implemented in descendants")

    @property
    def should_save_summary(self) -> bool:
        """Whether saving summaries is needed."""
        raise NotImplementedError("must be implemented in descendants")

    @property
    def experimental_between_graph(self) -> bool:
        """Whether the strategy uses between-graph replication or not."""
        raise NotImplementedError("must be implemented in descendants")

    @property
    def experimental_should_init(self) -> bool:
        """Whether initialization is needed."""
        raise NotImplementedError("must be implemented in descendants")


def _listed(pairs: Any) -> Any:
    """An iterable of pairs as a list (it is read twice: its structure, then its values); what
    is not iterable as is, for ``check_pairs`` to refuse inside the call's agreement."""
    try:
        return list(pairs)
    except TypeError:
        return pairs


def _check_reduce_op(reduce_op: Any) -> ReduceOp:
    """The error for a ``reduce_op`` that names no ``ReduceOp`` (``reduce_op_and_text`` parsed
    it once): TF's for a ``VariableAggregation``, else ``as_reduce_op``'s."""
    if isinstance(reduce_op, VariableAggregation):
        raise ValueError(
            f"reduce_op must be a `tf.distribute.ReduceOp`, not a VariableAggregation: {reduce_op}"
        )
    return as_reduce_op(reduce_op)

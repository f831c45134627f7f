"""DistributedVariable, MirroredVariable and SyncOnReadVariable: one plain component per replica.

TF's ``values.py`` classes with the update rules of ``values/aggregation.py``. The components
are plain ``Variable`` objects, in local replica order; the strategy is seen through its
protocol (``_context.StrategyLike``). ``create_mirrored_variable`` is TF's
``distribute_utils.create_mirrored_variable``: the strategy's creator hook calls it.

Reading a ``SyncOnReadVariable`` in cross-replica context is a collective with one purpose
whatever the path (``read_value``, ``numpy()``, ``value()``, ``np.asarray``,
``extended.read_var``, a checkpoint's save): "SyncOnRead read of `name`", so equivalent reads
match on every worker, while a read on one worker and a ``strategy.reduce`` (or a read of
another variable) on another raise on both.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _arrays, _context
from mwms_mpi._context import StrategyLike
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.types import ReduceOp, VariableAggregation, VariableSynchronization
from mwms_mpi.values import aggregation as agg
from mwms_mpi.values.array_reads import frozen_view
from mwms_mpi.values.distributed import DistributedValues, Mirrored, PerReplica
from mwms_mpi.values.foreign import raise_if_jit_tracing
from mwms_mpi.values.variables import Variable


def _assign(var: Any, *args: Any, **kwargs: Any) -> Any:
    return var.assign(*args, **kwargs)


def _assign_add(var: Any, *args: Any, **kwargs: Any) -> Any:
    return var.assign_add(*args, **kwargs)


def _assign_sub(var: Any, *args: Any, **kwargs: Any) -> Any:
    return var.assign_sub(*args, **kwargs)


def _scatter_fn(method: str) -> Callable[..., Any]:
    """The update function of a ``scatter_*`` method, named ``_<method>`` (the name says what
    a replica-context update is for in its agreement: "MirroredVariable.scatter_add of `w`")."""

    def update_fn(var: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(var, method)(*args, **kwargs)

    update_fn.__name__ = update_fn.__qualname__ = f"_{method}"
    return update_fn


_SCATTER_FNS = {
    kind: _scatter_fn(f"scatter_{kind}")
    for kind in ("add", "sub", "mul", "div", "min", "max", "update")
}


def _fresh(x: Any) -> Any:
    """A fresh array of a component variable or an (already fresh) reduced array."""
    if isinstance(x, Variable):
        return x.read_value()
    return _arrays.as_result(x)


class DistributedVariable(DistributedValues, Variable):
    """Holds a map from replica to variables (TF's ``DistributedVariable``).

    Args:
      strategy: the strategy that created it.
      values: the component variables, one per local replica.
      aggregation: the ``VariableAggregation``.

    Raises:
      ValueError: for MEAN with a non-floating dtype (TF's message).
    """

    _distribute_strategy: StrategyLike  # never None here: set by the constructor
    _values: tuple[Variable, ...]

    def __init__(
        self,
        strategy: StrategyLike,
        values: Sequence[Variable],
        aggregation: VariableAggregation,
    ) -> None:
        agg.check_mean_dtype(aggregation, values[0].dtype)
        DistributedValues.__init__(self, values)
        self._distribute_strategy = strategy
        self._aggregation = aggregation
        self._common_name = values[0].name.split(":")[0]
        self._distributed_container = None
        for v in values:
            v._distributed_container = weakref.ref(self)

    # -- properties of the primary ---------------------------------------------------------

    @property
    def name(self) -> str:
        """The name of the first replica's component."""
        return str(self._primary.name)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of the components."""
        return self._values[0].dtype

    @property
    def shape(self) -> Any:
        """The shape of the components."""
        return self._primary.shape

    @property
    def trainable(self) -> bool:
        """Whether the variable is trainable."""
        return bool(self._primary.trainable)

    @property
    def synchronization(self) -> VariableSynchronization:
        """ON_WRITE for a mirrored variable, ON_READ for a sync-on-read one."""
        return self._values[0].synchronization

    @property
    def aggregation(self) -> VariableAggregation:
        """The ``VariableAggregation``."""
        return self._aggregation

    @property
    def device(self) -> str:
        """The device of the component of the current replica (the primary outside one)."""
        return str(self._get_on_device_or_primary().device)

    @property
    def constraint(self) -> Any:
        """The constraint function of the primary, or ``None``."""
        return self._primary.constraint

    @property
    def distribute_strategy(self) -> StrategyLike:
        """The strategy this variable was created under."""
        return self._distribute_strategy

    def __len__(self) -> int:
        raise TypeError(f"object of type '{type(self).__name__}' has no len()")

    def _reads_a_scalar_tensor(self) -> bool:
        # TF: numpy finds __array__ on the read (DistributedDelegate.__getattr__): in
        # cross-replica context a tensor (a MirroredVariable's identity), 0-d: a scalar
        return not self.shape and self._local_replica_id() is None

    # TF's DistributedVariable defines no __bool__, __float__, __int__ or __complex__ (only the
    # DistributedDelegate operators): Python's defaults apply, in either context. Ours inherit
    # Variable's, so they are overridden with what Python does without them.

    def __bool__(self) -> bool:
        return True  # an object without __bool__ or a usable __len__

    def __float__(self) -> float:
        raise TypeError(f"float() argument must be a string or a real number, not {self._kind}")

    def __int__(self) -> int:
        raise TypeError(
            f"int() argument must be a string, a bytes-like object or a real number, not "
            f"{self._kind}"
        )

    def __complex__(self) -> complex:
        raise TypeError(f"complex() first argument must be a string or a number, not {self._kind}")

    @property
    def _kind(self) -> str:
        return f"'{type(self).__name__}'"

    # -- which component -------------------------------------------------------------------

    def _local_replica_id(self) -> int | None:
        replica_id = agg.current_replica_id()
        if replica_id is not None:
            return replica_id % len(self._values)
        return agg.get_update_replica_id()

    def _get_replica(self, replica_id: int) -> Variable:
        return self._values[replica_id]

    def _get(self) -> Any:
        """The current replica's component, or the cross-replica value."""
        replica_id = self._local_replica_id()
        if replica_id is None:
            return self._get_cross_replica()
        return self._get_replica(replica_id)

    def _get_on_device_or_primary(self) -> Any:
        replica_id = self._local_replica_id()
        return self._get_replica(0 if replica_id is None else replica_id)

    def _get_cross_replica(self) -> Any:
        raise NotImplementedError("must be implemented in descendants")

    # -- reads -----------------------------------------------------------------------------

    def _dense(self) -> Any:
        return self.value()

    def read_value(self) -> Any:
        """The value in the current context: the replica's own, or the cross-replica value."""
        raise_if_jit_tracing("Variable.read_value")
        with _context.enter_or_assert_strategy(self._distribute_strategy):
            return _fresh(self._get())

    def value(self) -> Any:
        """The value of the current replica's component (the primary's outside a replica)."""
        return self._get_on_device_or_primary().value()

    __array__ = Variable.__array__  # TF's (a fresh array), not DistributedValues' first value

    def read_only_value(self) -> Any:
        """The value in the current context without a copy (``Variable.read_only_value``):
        a component's frozen storage, or the cross-replica value (fresh) made read-only."""
        raise_if_jit_tracing("Variable.read_only_value")
        with _context.enter_or_assert_strategy(self._distribute_strategy):
            value = self._get()
            return value.read_only_value() if isinstance(value, Variable) else frozen_view(value)

    # -- writes ----------------------------------------------------------------------------

    def assign(
        self,
        value: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """Assigns ``value`` following the variable's synchronization and aggregation."""
        return self._update(
            _assign, value, use_locking=use_locking, name=name, read_value=read_value
        )

    def assign_add(
        self,
        value: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """Adds ``value`` following the variable's synchronization and aggregation (TF names
        it ``value`` here, ``delta`` on ``tf.Variable``)."""
        return self._update(
            _assign_add, value, use_locking=use_locking, name=name, read_value=read_value
        )

    def assign_sub(
        self,
        value: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """Subtracts ``value`` following the variable's synchronization and aggregation."""
        return self._update(
            _assign_sub, value, use_locking=use_locking, name=name, read_value=read_value
        )

    def _update_with(self, fn: Any, operand: Any, op_name: str) -> Any:
        """``Variable._update_with`` of the component that ``extended.update`` is updating
        (an optimizer's step, handed this variable as a slot): what ``assign_add`` there does.

        Raises:
          RuntimeError: outside ``extended.update``, where an update of a distributed variable
            goes through ``assign_*`` (aggregated, or applied to every copy).
        """
        replica_id = agg.get_update_replica_id()
        if replica_id is None:
            raise RuntimeError(
                f"{type(self).__name__} `{self._common_name}`: an in-place update step runs "
                "only inside extended.update; use assign_add/assign_sub here."
            )
        return self._get_replica(replica_id)._update_with(fn, operand, op_name)

    def _scatter(self, sparse_delta: Any, kind: str) -> Any:
        """``scatter_<kind>`` (TF's ``values_util.scatter_*``): an update like ``assign_add``, so
        in replica context the deltas are aggregated (``IndexedSlices`` concatenate) first."""
        return self._update(_SCATTER_FNS[kind], sparse_delta)

    def batch_scatter_update(
        self, sparse_delta: Any, use_locking: bool = False, name: Any = None
    ) -> Any:
        """Not supported on distributed variables (TF's ``tf.Variable`` base raises, bare).

        Raises:
          NotImplementedError: always, with TF's empty message.
        """
        raise NotImplementedError

    def _update(self, update_fn: Callable[..., Any], value: Any, **kwargs: Any) -> Any:
        """``_update_replica`` in replica context, else every component via ``extended.update``."""
        with _context.enter_or_assert_strategy(self._distribute_strategy):
            if _context.in_cross_replica_context():
                update_replica_id = agg.get_update_replica_id()
                if update_replica_id is not None:
                    return update_fn(self._get_replica(update_replica_id), value, **kwargs)
                return self._update_cross_replica(update_fn, value, **kwargs)
            agg.assert_replica_context(self._distribute_strategy)
            return self._update_replica(update_fn, value, **kwargs)

    def _update_cross_replica(
        self, update_fn: Callable[..., Any], value: Any, **kwargs: Any
    ) -> Any:
        return self._distribute_strategy.extended.update(
            self, update_fn, args=(value,), kwargs=kwargs, group=True
        )

    def _update_replica(self, update_fn: Callable[..., Any], value: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("must be implemented in descendants")


class MirroredVariable(DistributedVariable, Mirrored):
    """Holds a map from replica to variables whose values are kept in sync."""

    def _get_cross_replica(self) -> Any:
        return self._get_on_device_or_primary()

    def _update_replica(self, update_fn: Callable[..., Any], value: Any, **kwargs: Any) -> Any:
        return agg.on_write_update_replica(self, update_fn, value, **kwargs)

    def _scatter(self, sparse_delta: Any, kind: str) -> Any:
        """``scatter_min``/``max``/``update`` need aggregation NONE or ONLY_FIRST_REPLICA, in
        either context, checked before anything else (TF's ``MirroredVariable``): a SUM or
        MEAN of the replicas' deltas means nothing for them.

        Raises:
          NotImplementedError: TF's ``scatter_error_msg``.
        """
        if kind in ("min", "max", "update") and self._aggregation not in (
            VariableAggregation.NONE,
            VariableAggregation.ONLY_FIRST_REPLICA,
        ):
            raise NotImplementedError(
                f"scatter_{kind} is only supported for mirrored variable (variable created "
                "within certain `tf.distribute.Strategy` scope) with NONE or "
                "`ONLY_FIRST_REPLICA` aggregation, got: "
                f"VariableAggregationV2.{self._aggregation.name}."
            )
        return super()._scatter(sparse_delta, kind)


class SyncOnReadVariable(DistributedVariable):
    """Holds a map from replica to variables whose values are reduced on save (and on read)."""

    def _get(self) -> Any:
        with _context.enter_or_assert_strategy(self._distribute_strategy):
            return super()._get()

    def _reads_a_scalar_tensor(self) -> bool:
        with _context.enter_or_assert_strategy(self._distribute_strategy):  # as TF's _get
            cross_replica = super()._reads_a_scalar_tensor()
            return cross_replica and not isinstance(self._get_cross_replica(), Variable)

    def _get_cross_replica(self) -> Any:
        """Aggregates every replica of every worker (a collective), as TF's ``strategy.reduce``
        of the variable: ONLY_FIRST_REPLICA, and MEAN with one replica in all (TF's one-replica
        short-circuit), give the first component itself.

        Raises:
          ValueError: for aggregation NONE (``ReduceOp.from_variable_aggregation``).
        """
        strategy = self._distribute_strategy
        if self._aggregation == VariableAggregation.ONLY_FIRST_REPLICA or (
            self._aggregation == VariableAggregation.MEAN and strategy.num_replicas_in_sync == 1
        ):
            return self._get_replica(0)
        reduce_op = ReduceOp.from_variable_aggregation(self._aggregation)  # NONE: here, alone
        what = agg.purpose(self, "SyncOnRead read")
        comm = agg.communicator_of(strategy)
        with (
            api_call(comm, what, self._aggregation.name),
            _context.enter_or_assert_strategy(strategy),
        ):
            local = PerReplica(tuple(v.read_value() for v in self._values))
            return strategy.reduce(reduce_op, local, axis=None)

    def _cross_replica_update(self, method: str, read_value: bool) -> api_call:
        """The purpose of a cross-replica ``assign*``, whose read back is a collective. Without
        a read back nothing communicates, so an error stays this rank's own (as in TF)."""
        what = agg.purpose(self, f"SyncOnReadVariable.{method}")
        comm = agg.communicator_of(self._distribute_strategy) if read_value else None
        return api_call(comm, what)

    def _cross_replica_write(self) -> bool:
        return _context.in_cross_replica_context() and not agg.in_replica_update_context()

    def assign(
        self,
        value: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """In replica context assigns the replica's own component; in cross-replica context
        every component (SUM divides ``value`` by ``num_replicas_in_sync``)."""
        with _context.enter_or_assert_strategy(self._distribute_strategy):
            if self._cross_replica_write():
                with self._cross_replica_update("assign", read_value):
                    return agg.on_read_assign_cross_replica(self, value, read_value=read_value)
            return super().assign(value, use_locking, name, read_value)

    def assign_add(
        self,
        value: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """Adds to the replica's own component, or every component in cross-replica context.

        Raises:
          ValueError: in cross-replica context with aggregation SUM (TF's message).
        """
        with _context.enter_or_assert_strategy(self._distribute_strategy):
            if self._cross_replica_write():
                with self._cross_replica_update("assign_add", read_value):
                    return agg.on_read_assign_add_cross_replica(self, value, read_value=read_value)
            return super().assign_add(value, use_locking, name, read_value)

    def assign_sub(
        self,
        value: Any,
        use_locking: bool = False,
        name: str | None = None,
        read_value: bool = True,
    ) -> Any:
        """Subtracts from the replica's own component, or every one in cross-replica context.

        Raises:
          ValueError: in cross-replica context with aggregation SUM (TF's message).
        """
        with _context.enter_or_assert_strategy(self._distribute_strategy):
            if self._cross_replica_write():
                with self._cross_replica_update("assign_sub", read_value):
                    return agg.on_read_assign_sub_cross_replica(self, value, read_value=read_value)
            return super().assign_sub(value, use_locking, name, read_value)

    def _update_replica(self, update_fn: Callable[..., Any], value: Any, **kwargs: Any) -> Any:
        return update_fn(self._get_on_device_or_primary(), value, **kwargs)

    def _scatter(self, sparse_delta: Any, kind: str) -> Any:
        """TF's ``SyncOnReadVariable`` has no ``scatter_*`` in either context.

        Raises:
          NotImplementedError: TF's message.
        """
        raise NotImplementedError(
            f"Variables with `synchronization=ON_READ` doesn't support `scatter_{kind}`"
        )

    def value(self) -> Any:
        """The aggregated value in cross-replica context, else the replica's own component."""
        with _context.enter_or_assert_strategy(self._distribute_strategy):
            if self._cross_replica_write():
                if self._aggregation == VariableAggregation.ONLY_FIRST_REPLICA:
                    return self._get_replica(0).value()
                return _fresh(self._get_cross_replica())
            return self._get_on_device_or_primary().value()


def create_mirrored_variable(
    strategy: StrategyLike, real_mirrored_creator: Callable[..., list[Variable]], **kwargs: Any
) -> DistributedVariable:
    """Creates a distributed variable with the given synchronization and aggregation.

    ``synchronization`` AUTO/ON_WRITE gives a ``MirroredVariable``, ON_READ a
    ``SyncOnReadVariable``; the checks run before ``real_mirrored_creator`` (which may be a
    collective), so a bad argument raises on every worker alike.

    Args:
      strategy: the strategy creating it.
      real_mirrored_creator: called with the checked keyword arguments; returns the components.
      **kwargs: the ``Variable`` constructor's arguments.

    Raises:
      ValueError: for synchronization NONE or an invalid mode or aggregation (TF's messages).
    """
    name = kwargs.get("name")
    synchronization = agg.validate_synchronization(
        kwargs.get("synchronization", VariableSynchronization.AUTO), name
    )
    kwargs["synchronization"] = synchronization
    aggregation = agg.validate_aggregation(
        kwargs.get("aggregation", VariableAggregation.NONE), name
    )
    kwargs.pop("caching_device", None)
    value_list = real_mirrored_creator(**kwargs)
    if synchronization == VariableSynchronization.ON_READ:
        return SyncOnReadVariable(strategy, value_list, aggregation)
    return MirroredVariable(strategy, value_list, aggregation)

"""TF's on-write / on-read update and aggregation rules for distributed variables (values_util).

The strategy is seen through its protocol (``_context.StrategyLike``): this layer calls only its
public API (``scope``, ``reduce``, ``experimental_local_results``, ``extended.reduce_to``/
``broadcast_to``/``update``, ``extended.communicator``) and reads the per-thread context from
``mwms_mpi._context``, so it needs no MPI and no strategy import. The update-replica marker
(TF's ``UpdateContext``) lives here because variables must read it; the strategy layer
re-exports it.

A variable's collective says what it is for (``call_context.api_call``, on the strategy's
communicator, :func:`communicator_of`): "MirroredVariable.assign_add of `w`", "SyncOnRead read
of `accuracy`", so that workers doing different things with equal layouts raise instead of
exchanging each other's numbers (docs/agreement.md).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mwms_mpi import _context
from mwms_mpi._context import CommunicatorLike, StrategyLike
from mwms_mpi._naming import agreed_name
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.types import ReduceOp, VariableAggregation, VariableSynchronization
from mwms_mpi.values.convert import (
    as_array,
    convert_to_dtype,
    refuse_tensor_of_other_dtype,
    truediv,
)
from mwms_mpi.values.distributed import DistributedValues, PerReplica


def communicator_of(strategy: StrategyLike) -> CommunicatorLike | None:
    """The strategy's communicator across workers (``None`` for one worker), on which a
    variable's purpose is agreed (``extended.communicator``, the layers' typed seam)."""
    return strategy.extended.communicator


def purpose(var: Any, what: str) -> str:
    """``"<what> of `name`"``: a variable's purpose, named by its name without ``:0`` and
    without the numbers of Keras's automatic names, which count this rank's own objects
    (``_naming.agreed_name``: a chief's ``mean_1`` is another worker's ``mean``)."""
    return f"{what} of `{agreed_name(var._common_name)}`"


# -- TF's UpdateContext ---------------------------------------------------------------------

_update_replica = threading.local()


def get_update_replica_id() -> int | None:
    """The local replica being updated inside ``extended.update``, or ``None``."""
    return getattr(_update_replica, "current", None)


@contextlib.contextmanager
def UpdateContext(replica_id: int) -> Iterator[None]:
    """Marks the code inside as updating local replica ``replica_id`` (TF's ``UpdateContext``)."""
    old = get_update_replica_id()
    _update_replica.current = replica_id
    try:
        yield
    finally:
        _update_replica.current = old


def in_replica_update_context() -> bool:
    """Whether this thread is inside ``extended.update`` for one component."""
    return get_update_replica_id() is not None


# -- context helpers --------------------------------------------------------------------------


def current_replica_id() -> int | None:
    """The global replica id of this thread's (non-default) replica context, else ``None``."""
    ctx = _context.current().replica_context
    if ctx is None:
        return None
    return int(ctx.replica_id_in_sync_group)


def assert_replica_context(strategy: StrategyLike) -> None:
    """Raises unless in a replica context of ``strategy``.

    Raises:
      RuntimeError: TF's message.
    """
    ctx = _context.current().replica_context
    if ctx is None or ctx.strategy is not strategy:
        raise RuntimeError("Replica-local variables may only be assigned in a replica context.")


# -- creation checks (distribute_utils) -----------------------------------------------------


def validate_synchronization(
    synchronization: VariableSynchronization, name: str | None
) -> VariableSynchronization:
    """AUTO becomes ON_WRITE; NONE and anything else raise, as TF does under a strategy.

    Raises:
      ValueError: for ``NONE`` or an invalid mode (TF's messages).
    """
    if synchronization == VariableSynchronization.NONE:
        raise ValueError(
            "`NONE` variable synchronization mode is not supported with tf.distribute strategy. "
            "Please change the `synchronization` for variable: " + str(name)
        )
    if synchronization not in (
        VariableSynchronization.ON_READ,
        VariableSynchronization.ON_WRITE,
        VariableSynchronization.AUTO,
    ):
        raise ValueError(
            f"Invalid variable synchronization mode: {synchronization} for variable: {name}"
        )
    if synchronization == VariableSynchronization.AUTO:
        return VariableSynchronization.ON_WRITE
    return synchronization


def validate_aggregation(aggregation: Any, name: str | None) -> VariableAggregation:
    """Raises for anything but a ``VariableAggregation``.

    Raises:
      ValueError: TF's "Invalid variable aggregation mode" message.
    """
    if not isinstance(aggregation, VariableAggregation):
        raise ValueError(f"Invalid variable aggregation mode: {aggregation} for variable: {name}")
    return aggregation


def check_mean_dtype(aggregation: VariableAggregation, dtype: Any) -> None:
    """A distributed variable with MEAN must be floating point.

    Raises:
      ValueError: TF's message, for MEAN with a non-floating dtype.
    """
    if aggregation == VariableAggregation.MEAN and np.dtype(dtype).kind not in "fc":
        raise ValueError(
            "creating distributed tf.Variable with aggregation=MEAN and a non-floating dtype is "
            "not supported, please use a different aggregation or dtype"
        )


# -- on-write (MirroredVariable) ------------------------------------------------------------


def apply_aggregation(
    strategy: StrategyLike, value: Any, aggregation: VariableAggregation, destinations: Any
) -> Any:
    """ONLY_FIRST_REPLICA broadcasts this worker's first replica; SUM/MEAN ``reduce_to``.

    Raises:
      ValueError: for ``NONE`` (``ReduceOp.from_variable_aggregation``).
    """
    if aggregation == VariableAggregation.ONLY_FIRST_REPLICA:
        return strategy.extended.broadcast_to(
            strategy.experimental_local_results(value)[0], destinations=destinations
        )
    reduce_op = ReduceOp.from_variable_aggregation(aggregation)
    return strategy.extended.reduce_to(reduce_op, value, destinations)


def _aggregated_to_tensor(
    strategy: StrategyLike, value: Any, aggregation: VariableAggregation
) -> bool:
    """Whether TF's aggregation of a replica-context update made ``value`` a tensor, which the
    update then assigns without a cast (:func:`refuse_tensor_of_other_dtype`).

    ONLY_FIRST_REPLICA broadcasts the first replica's value unless it is a Python number
    (TF's ``_broadcast_to`` fast path, kept for ``step.assign_add(1)``); a reduction converts
    per-replica values, and a value the replicas share unless it is a MEAN on one worker
    (``reduce_non_distributed_value`` returns it as it is; SUM on one replica broadcasts it).
    """
    if aggregation == VariableAggregation.ONLY_FIRST_REPLICA:
        first = strategy.experimental_local_results(value)[0]
        return not isinstance(first, float | int)
    if isinstance(value, DistributedValues):
        return True
    return aggregation != VariableAggregation.MEAN or communicator_of(strategy) is not None


def on_write_update_replica(
    var: Any, update_fn: Callable[..., Any], value: Any, **kwargs: Any
) -> Any:
    """Updates a MirroredVariable in replica context (TF 2.21's ``_on_write_update_replica``).

    With aggregation NONE each replica updates only its own component (TF 2.21 does not raise;
    the components may then differ). Otherwise the values are aggregated in a ``merge_call``
    and every component is updated with the result.

    Raises:
      ValueError: MEAN on a non-floating variable with per-replica values (TF's message).
    """
    if var.aggregation == VariableAggregation.NONE:
        return update_fn(var._get_on_device_or_primary(), value, **kwargs)

    what = purpose(var, f"{type(var).__name__}.{update_fn.__name__.lstrip('_')}")
    # ONLY_FIRST_REPLICA moves no data across workers: an error there stays this rank's own.
    reduces = var.aggregation != VariableAggregation.ONLY_FIRST_REPLICA

    def merge_fn(strategy: Any, value: Any, **kwargs: Any) -> Any:
        comm = communicator_of(strategy) if reduces else None
        with api_call(comm, what, var.aggregation.name):
            if (
                var.aggregation == VariableAggregation.MEAN
                and np.dtype(var.dtype).kind not in "fc"
                and isinstance(value, PerReplica)
            ):
                raise ValueError(
                    "Cannot update non-float variables with tf.VariableAggregation.MEAN "
                    "aggregation in replica context. Either change the variable dtype to float "
                    "or update it in cross-replica context."
                )
            v = apply_aggregation(strategy, value, var.aggregation, var)
            if _aggregated_to_tensor(strategy, value, var.aggregation):
                for tensor in strategy.experimental_local_results(v):
                    refuse_tensor_of_other_dtype(tensor, var.dtype)
            return var._update_cross_replica(update_fn, v, **kwargs)

    ctx = _context.current().replica_context
    assert ctx is not None  # the caller asserted a replica context (assert_replica_context)
    return ctx.merge_call(merge_fn, args=(value,), kwargs=kwargs)


# -- on-read (SyncOnReadVariable) in cross-replica context ---------------------------------


def assign_on_each_device(
    var: Any, assign_func: Callable[[Any, Any], Any], value: Any, read_value: bool
) -> Any:
    """Applies ``assign_func(component, value)`` to every component; then reads ``var``."""
    for component in var._values:
        assign_func(component, value)
    if not read_value:
        return None
    return var.read_value()


def on_read_component_value(var: Any, value: Any) -> Any:
    """What each component of a SyncOnRead ``var`` holds for the value ``value``: with SUM,
    ``value / num_replicas_in_sync`` cast to the variable's dtype (TF: ``math_ops.cast(value /
    n, dtype)``), so the aggregated (summed) value stays ``value``; else ``value``. The one
    rule for a cross-replica ``assign`` and a checkpoint restore.

    TF divides before it converts: a Python number is divided by Python (a float, which
    ``cast`` makes a float32 first, so a float64 or int variable gets the float32-rounded
    quotient, and a float converts to an int variable by truncation), a list or tuple raises
    Python's ``TypeError``, and an array (a tensor) divides with TF's ``truediv`` in its own
    dtype.

    Raises:
      TypeError: for a sequence with SUM (Python's message, as TF's ``value / n``).
      ValueError: for a quotient out of float32's range (TF's conversion message).
    """
    if var.aggregation != VariableAggregation.SUM:
        return convert_to_dtype(value, var.dtype)
    n = var.distribute_strategy.num_replicas_in_sync
    if isinstance(value, list | tuple):
        raise TypeError(
            f"unsupported operand type(s) for /: '{type(value).__name__}' and '{type(n).__name__}'"
        )
    if isinstance(value, bool | int | float):  # a Python number (np.float64 divides alike)
        quotient = as_array(value / n)
    else:
        quotient = truediv(as_array(value), n)
    if quotient.dtype == var.dtype:
        return quotient
    with np.errstate(invalid="ignore", over="ignore"):  # TF's Cast warns about neither
        return quotient.astype(var.dtype)


def on_read_assign_cross_replica(var: Any, value: Any, read_value: bool = True) -> Any:
    """Cross-replica ``assign``: each component gets :func:`on_read_component_value`."""
    tensor = on_read_component_value(var, value)
    return assign_on_each_device(var, lambda c, t: c.assign(t), tensor, read_value)


def _on_read_add_or_sub_cross_replica(var: Any, value: Any, read_value: bool, method: str) -> Any:
    if var.aggregation == VariableAggregation.SUM:
        raise ValueError(
            f"SyncOnReadVariable does not support `{method}` in cross-replica context when "
            "aggregation is set to `tf.VariableAggregation.SUM`."
        )
    return assign_on_each_device(var, lambda c, t: getattr(c, method)(t), value, read_value)


def on_read_assign_add_cross_replica(var: Any, value: Any, read_value: bool = True) -> Any:
    """Cross-replica ``assign_add`` adds to every component.

    Raises:
      ValueError: with aggregation SUM (TF's message).
    """
    return _on_read_add_or_sub_cross_replica(var, value, read_value, "assign_add")


def on_read_assign_sub_cross_replica(var: Any, value: Any, read_value: bool = True) -> Any:
    """Cross-replica ``assign_sub`` subtracts from every component.

    Raises:
      ValueError: with aggregation SUM (TF's message).
    """
    return _on_read_add_or_sub_cross_replica(var, value, read_value, "assign_sub")

"""Variables made in a mirrored strategy's scope: one component per replica, chief's value first.

TF's ``MirroredExtended._create_variable`` and ``CollectiveAllReduceExtended``'s initial-value
broadcast. Creation is a collective across workers: the first replica's initial value is
computed on every worker, then the chief's is broadcast over the strategy's communicator, so
every replica on every worker starts equal even when the workers computed different values.
Every worker must therefore create the same variables in the same order: the broadcast is
agreed as "Variable creation of `name`", so workers creating ``w`` and ``b`` in different orders
raise instead of starting ``b`` from the chief's ``w`` (TF would, silently, for equal shapes).
In a replica function the variable is made once per worker in a ``merge_call`` (TF makes it in
replica 0's thread and hands the same object to the others), which keeps the broadcast on the
thread owning MPI.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi import _context, _name_scope
from mwms_mpi._naming import agreed_name
from mwms_mpi.collective.call_context import api_call
from mwms_mpi.values import PerReplica, select_replica
from mwms_mpi.values.aggregation import check_mean_dtype
from mwms_mpi.values.distributed_variable import (
    DistributedVariable,
    SyncOnReadVariable,
    create_mirrored_variable,
)
from mwms_mpi.values.variables import Variable, initial_value_array

_COLOCATE_ERROR = (
    "`colocate_vars_with` must only be passed a variable created in this "
    "tf.distribute.Strategy.scope(), not"
)


def create_variable(
    extended: Any,
    next_creator: Callable[..., Variable],
    broadcast: Callable[[np.ndarray], np.ndarray],
    refused: Exception | None = None,
    **kwargs: Any,
) -> DistributedVariable:
    """Creates a ``MirroredVariable`` or ``SyncOnReadVariable`` for ``extended``'s replicas.

    Args:
      extended: the ``MirroredExtended`` (or ``CollectiveAllReduceExtended``) creating it.
      next_creator: makes one plain component from ``Variable`` keyword arguments.
      broadcast: returns the chief's copy of the first replica's initial value (a collective
        for several workers, the identity for one).
      refused: raised in place of the creation, inside its agreement (so every worker raises):
        this worker's replicas asked for differently named variables.
      **kwargs: the ``Variable`` constructor's arguments, already checked.

    Returns:
      The distributed variable.

    Raises:
      ValueError: for synchronization NONE, or MEAN with a non-floating dtype (TF's messages),
        before any collective.
    """
    replica_context = _context.current().replica_context
    if replica_context is not None:
        # TF's replica 0 makes the variable in its own thread, in its name scope: this
        # closure is replica 0's (merge_call runs the first replica's merge function)
        replica_scope = _name_scope.current_scope()

        def merge_fn(_: Any, **merged: Any) -> DistributedVariable:
            refused = _mismatching_name(merged.get("name"))
            first = select_replica(0, merged)
            with _name_scope.entered(replica_scope):
                return create_variable(extended, next_creator, broadcast, refused, **first)

        return replica_context.merge_call(merge_fn, kwargs=kwargs)
    colocate = getattr(extended, "_colocate_with", None)
    devices = (
        tuple(v.device for v in colocate.values) if colocate is not None else extended._devices
    )

    def real_mirrored_creator(**kw: Any) -> list[Variable]:
        # TF's first component calls the next creator (the default scope's check) before it
        # evaluates the initial value: so here, before the value and any collective
        _context.check_default_scope_creator()
        name = getattr(extended, "_INITIAL_VALUE_NAME", "initial_value")  # Pack errors' name
        value = initial_value_array(kw["initial_value"], kw.get("dtype"), name)
        check_mean_dtype(kw["aggregation"], value.dtype)
        value = broadcast(value)
        value_list: list[Variable] = []
        gpus = getattr(extended, "_gpus", None)
        for i, device in enumerate(devices):
            initial = value if i == 0 else value_list[0].value()
            if gpus is not None:  # a CuPy value: each replica's copy on its own GPU
                initial = gpus.place(initial, i)
            kw_i = dict(kw, initial_value=initial)
            if i > 0:
                # absolute (a trailing slash), as TF's: the first's name has the scope
                kw_i["name"] = f"{value_list[0].name[:-2]}/replica_{i}/"
            component = next_creator(**kw_i)
            component._device = device
            value_list.append(component)
        return value_list

    # The purpose names the variable (TF's default name is "Variable") without the numbers of
    # Keras's automatic names, which count this rank's own objects (_naming.agreed_name); an
    # error on this worker before the broadcast (its initial value failed) is taken into the
    # agreement.
    purpose = f"Variable creation of `{agreed_name(kwargs.get('name') or 'Variable')}`"
    with api_call(extended._communicator, purpose):
        if refused is not None:
            raise refused
        return create_mirrored_variable(
            extended._container_strategy(), real_mirrored_creator, **kwargs
        )


_UNIQUIFIED = re.compile(r"_\d/")
_UNIQUIFIED_AT_END = re.compile(r"_\d$")


def _canonical_name(name: str | None) -> str:
    """TF's ``shared_variable_creator._canonicalize_variable_name``: the uniquifying ``_<digit>``
    suffixes dropped (``foo_1`` is ``foo``)."""
    if name is None:
        return "Variable"
    return _UNIQUIFIED_AT_END.sub("", _UNIQUIFIED.sub("/", name))


def _mismatching_name(names: Any) -> RuntimeError | None:
    """TF's error when the replicas of one worker create a variable under different names
    (TF's replica 0 makes it and the others look it up by canonical name), else ``None``."""
    if not isinstance(names, PerReplica):
        return None
    first = _canonical_name(names.values[0])
    for device, name in enumerate(names.values):
        if _canonical_name(name) != first:
            return RuntimeError(
                f"Tried to create variable {name} with mismatching name on device {device}"
            )
    return None


def validate_colocate_distributed_variable(v: Any, extended: Any) -> None:
    """``colocate_vars_with`` takes only a distributed variable of this strategy.

    Raises:
      ValueError: TF's message otherwise.
    """
    if not isinstance(v, DistributedVariable):
        raise ValueError(f"{_COLOCATE_ERROR}: {v!r}")
    if v.distribute_strategy.extended is not extended:
        raise ValueError(f"{_COLOCATE_ERROR} {v}")


def read_var(v: Any) -> Any:
    """``extended.read_var``: the cross-replica value of a variable, as TF's
    ``MirroredExtended.read_var`` gives it: a sync-on-read variable's ``_get_cross_replica``
    (its agreed aggregated read, or the first component for ONLY_FIRST_REPLICA and one-replica
    MEAN, as TF's), any other variable's value as a fresh array.
    """
    if isinstance(v, SyncOnReadVariable):
        return v._get_cross_replica()
    if isinstance(v, Variable):
        return v.read_value()
    return v

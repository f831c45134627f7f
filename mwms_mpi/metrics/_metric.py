"""The metric base: Keras 3's ``Metric`` state as sync-on-read variables of the current strategy.

Keras 3 (TF backend) makes every metric variable with ``synchronization=ON_READ`` and
``aggregation=SUM`` in whatever strategy scope is current, and so does this base: under a
strategy, ``update_state`` in replica context (inside ``strategy.run``) adds to the replica's
own component, and reading a variable in cross-replica context (``result()``) sums every
replica of every worker. That read is the variables' own collective, agreed under the purpose
"SyncOnRead read of `<metric>/<variable>`" like any other sync-on-read read, so ranks that
read different metrics (or read on one rank and reduce on another) raise instead of mixing
numbers. Outside a strategy the variables are plain ones.

Updates are Keras 3's ``assign_add``, ``assign(read + delta)`` (:meth:`Metric.add_to`): in
cross-replica context (``update_state`` outside ``strategy.run``) that reads the global value,
a collective, and spreads the new sum over the replicas, as Keras does.

Checkpoints: a metric is a trackable object of ``mwms_mpi.train.Checkpoint`` with one child per
variable (``total``, ``count``); restoring a sum-aggregated sync-on-read variable gives each
replica the saved value over ``num_replicas_in_sync`` (TF's restore rule), so the global value
is what was saved and a resumed epoch prints what an uninterrupted one does. (A Keras 3 metric
is no ``Trackable``: under TF one checkpoints ``metric.variables`` instead.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mwms_mpi import _arrays
from mwms_mpi._naming import auto_name
from mwms_mpi.metrics import _ops
from mwms_mpi.types import VariableAggregation, VariableSynchronization
from mwms_mpi.values.variables import Variable

_AGGREGATIONS = {
    "sum": VariableAggregation.SUM,
    "mean": VariableAggregation.MEAN,
    "only_first_replica": VariableAggregation.ONLY_FIRST_REPLICA,
    "none": VariableAggregation.NONE,
}
_INITIALIZERS: dict[str, Callable[..., np.ndarray]] = {
    "zeros": np.zeros,
    "ones": np.ones,
}


def initial_value(initializer: Any, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A variable's first value from a Keras initializer identifier: ``"zeros"``/``"ones"``
    (any case), a callable ``initializer(shape, dtype)``, or the value itself (an array or a
    number of that shape).

    Raises:
      ValueError: for an initializer named otherwise, ``None``, or a value of another shape.
    """
    if isinstance(initializer, str):
        make = _INITIALIZERS.get(initializer.lower())
        if make is None:
            raise ValueError(
                f"Could not interpret initializer identifier: {initializer!r} "
                f"(known here: {sorted(_INITIALIZERS)})"
            )
        return make(shape, dtype)
    if initializer is None:
        raise ValueError("Could not interpret initializer identifier: None")
    if callable(initializer):
        value = np.asarray(_arrays.to_host(initializer(shape, dtype=dtype)))
    else:
        value = np.asarray(_arrays.to_host(initializer))
    if value.shape != shape:
        raise ValueError(f"Initializer value of shape {value.shape} for a variable of {shape}")
    return value.astype(dtype)


# What a Keras dtype policy can compute in here: floats and integers (bfloat16 has no numpy
# dtype; a "mixed_" policy computes in its second half).
_KINDS = "fiu"


def compute_dtype(dtype: Any) -> np.dtype[Any]:
    """The metric's dtype from ``dtype`` as Keras's ``dtype_policies.get(dtype or floatx())``.

    Raises:
      ValueError: for a dtype no Keras policy computes in here (bfloat16 has no numpy dtype).
    """
    name = "float32" if dtype is None else getattr(dtype, "name", dtype)
    if isinstance(name, str) and name.startswith("mixed_"):
        name = name[len("mixed_") :]
    try:
        found = np.dtype(name)
    except TypeError:
        found = None
    if found is None or found.kind not in _KINDS or found.itemsize > 8:
        raise ValueError(
            f"Invalid dtype argument: {dtype!r}; a metric's dtype must be a float or integer "
            "dtype (or a Keras policy name such as 'mixed_float16')."
        )
    return found


class Metric:
    """Encapsulates metric logic and state (``keras.metrics.Metric``).

    Subclasses make their state in ``__init__`` with :meth:`add_variable` and define
    ``update_state`` (updating the variables with :meth:`add_to` or ``assign``) and ``result``
    (reading them with :meth:`read`), as Keras's do.

    Args:
      dtype: the dtype of the metric's computations and result; ``None`` means float32.
      name: the metric's name (Keras's automatic one by default); its variables are named
        ``<name>/<variable>``, which is what their reads are agreed as.
    """

    def __init__(self, dtype: Any = None, name: str | None = None) -> None:
        self.name = name or auto_name(type(self).__name__)
        self._dtype = compute_dtype(dtype)
        self._variables: list[Any] = []
        self._names: list[str] = []

    @property
    def dtype(self) -> str:
        """The name of the metric's dtype (``"float32"``), as Keras gives it."""
        return self._dtype.name

    @property
    def variables(self) -> list[Any]:
        """The metric's state variables, in creation order."""
        return list(self._variables)

    def add_variable(
        self,
        shape: Any,
        initializer: Any,
        dtype: Any = None,
        aggregation: str = "sum",
        name: str | None = None,
    ) -> Any:
        """Makes a state variable, sync-on-read, in the current strategy's scope (Keras's
        ``Metric.add_variable``).

        Creating it under a multi-worker strategy is a collective (its initial value is
        agreed), so every worker creates its metrics in the same order.

        Args:
          shape: the variable's shape (``()`` for a scalar).
          initializer: ``"zeros"``, ``"ones"``, a callable ``(shape, dtype)`` or a value.
          dtype: the variable's dtype; float32 by default, as in Keras (not the metric's).
          aggregation: ``"sum"`` (the default), ``"mean"``, ``"only_first_replica"`` or
            ``"none"``: how a cross-replica read combines the replicas.
          name: the variable's name inside the metric.

        Returns:
          The variable (a ``SyncOnReadVariable`` under a strategy, else a plain one).

        Raises:
          ValueError: for an unknown aggregation or initializer.
        """
        if aggregation not in _AGGREGATIONS:
            raise ValueError(
                f"Invalid value for argument `aggregation`: {aggregation!r}; expected one of "
                f"{sorted(_AGGREGATIONS)}"
            )
        name = name or auto_name("variable")
        dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
        value = initial_value(
            initializer, tuple(int(d) for d in dims), np.dtype(dtype or "float32")
        )
        variable = Variable(
            value,
            trainable=False,
            name=f"{self.name}/{name}",
            synchronization=VariableSynchronization.ON_READ,
            aggregation=_AGGREGATIONS[aggregation],
        )
        self._variables.append(variable)
        self._names.append(name)
        return variable

    def add_weight(
        self, shape: Any = (), initializer: Any = None, dtype: Any = None, name: str | None = None
    ) -> Any:
        """``add_variable`` with Keras's ``add_weight`` defaults (a scalar)."""
        return self.add_variable(shape=shape, initializer=initializer, dtype=dtype, name=name)

    def _trackable_children(self) -> dict[str, Any]:
        """What ``mwms_mpi.train.Checkpoint`` saves: each variable under its own name."""
        return dict(zip(self._names, self._variables, strict=True))

    def read(self, variable: Any) -> np.ndarray:
        """A variable's value (a fresh host array of its dtype): the replica's own in replica
        context, the aggregate over every replica of every worker in cross-replica context
        (a collective, agreed as "SyncOnRead read of `<metric>/<variable>`")."""
        return np.array(_arrays.to_host(variable.read_value()), dtype=variable.dtype)

    def add_to(self, variable: Any, delta: Any) -> None:
        """Keras 3's ``variable.assign_add(delta)``, which is ``assign(variable + delta)``.

        The sum is in Keras's ``result_type`` of the two (an integer total plus a float32
        mean is a float32 sum) and only then cast to the variable's dtype, so a fraction
        carries over as Keras's does (``-3 + 0.5`` stores ``-2``); a Python number takes the
        variable's dtype. In replica context that adds to the replica's own component. In
        cross-replica context it reads the global value (a collective), adds ``delta`` and
        assigns the sum, which a sum-aggregated sync-on-read variable spreads over the
        replicas: so ``update_state`` outside ``strategy.run`` works as under Keras, where TF's
        own ``SyncOnReadVariable.assign_add`` would refuse.
        """
        dtype = np.dtype(variable.dtype)
        if isinstance(delta, bool | int | float):
            # a weak Python number: the variable's dtype, or float32 for a float and an integer
            weak = _ops.FLOAT32 if isinstance(delta, float) and dtype.kind != "f" else dtype
            delta = np.asarray(delta, weak)
        delta = np.asarray(_arrays.to_host(delta))
        wide = _ops.result_type(dtype, delta.dtype)
        # float16 adds in float32, rounded once, as TF's kernel (Eigen's half) does: the same
        # value, but the first operand's NaN where both are NaN (numpy's keeps the second's)
        add = _ops.FLOAT32 if wide == np.float16 else wide
        total = self.read(variable).astype(add, copy=False) + delta.astype(add, copy=False)
        new = np.asarray(total).astype(wide, copy=False).astype(dtype, copy=False)
        variable.assign(new, read_value=False)

    def reset_state(self) -> None:
        """Sets every state variable to zero (each component, in cross-replica context)."""
        for variable in self._variables:
            variable.assign(np.zeros(variable.shape, variable.dtype), read_value=False)

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        """Accumulates statistics for the metric."""
        raise NotImplementedError

    def result(self) -> np.ndarray:
        """The metric's value, a 0-d array."""
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """``update_state`` then ``result``, as Keras's ``Metric.__call__``."""
        self.update_state(*args, **kwargs)
        return self.result()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}>"

"""The optimizer base: Keras's pattern under a strategy, built only on the public strategy API.

``apply_gradients`` in replica context does what Keras does under ``tf.distribute``: one
``merge_call``; in it, the gradients are summed over every replica of every worker with one
``extended.batch_reduce_to`` (packed collectives), then ``extended.update`` applies the same
update to every copy of each variable, so mirrored variables stay bitwise equal. Slot variables
(momentum, moments) are made in the strategy's scope on first use, so they are mirrored too.

Keras calls ``extended.update`` once per variable. Where no update can fail half way (dense
gradients of their variables' shapes and dtypes) one ``extended.update`` applies them all, each
device's copies in one call: the same arithmetic in the same order on each copy, so the same
bits, at about half the cost of the per-variable machinery (``docs/benchmarks.md``).

As Keras, the first ``apply_gradients`` (or ``build``) fixes the variables: it makes the slots
of every variable it is given, a ``None`` gradient's too, in that order; a later call with
another variable raises.

Checkpoints: the learning rate, the step counter and the slots are saved as ``learning_rate``,
``iterations`` and ``slots/<i>`` (in creation order, as Keras saves ``_learning_rate``,
``_iterations`` and ``_variables/<i>``). A checkpoint restored before they exist (the usual
order: build the model, restore, train) keeps their values, and the optimizer hands its new
variables over as soon as it has made them, before any of them is used (restore-on-create, as
TF's deferred restoration), so a resumed run continues exactly, at the learning rate it had.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _context
from mwms_mpi._arrays import array_module, as_dtype
from mwms_mpi.train import _deferred
from mwms_mpi.types import ReduceOp, VariableAggregation
from mwms_mpi.values import IndexedSlices, PerReplica
from mwms_mpi.values.distributed_variable import DistributedVariable
from mwms_mpi.values.indexed_slices import to_dense
from mwms_mpi.values.variables import Variable

_ONE_STEP = np.ones((), np.int64)  # what a step adds to the counter: an operand, never written
_ONE_STEP.flags.writeable = False


def dense_grad(grad: Any, dtype: Any) -> Any:
    """A gradient as a dense array of ``dtype``, of its own kind (sparse slices scattered)."""
    if isinstance(grad, IndexedSlices):
        grad = to_dense(grad)
    return as_dtype(grad, dtype)


def _updatable_together(
    strategy: Any, variables: Sequence[Any], reduced: Sequence[Any], counter: Any
) -> bool:
    """Whether one ``extended.update`` can apply every gradient, and count the step, at once.

    Yes when the variables and the step counter are distributed variables of ``strategy``
    (mirrored on its devices) and every summed gradient is dense, of its variable's shape and
    dtype: then no update can fail half way. Anything else goes one variable at a time, as
    Keras does, so that an error is raised where it always was, before any copy of a later
    variable changed, never between two copies of one variable.
    """
    if not variables:
        return False
    for var in (counter, *variables):
        if not isinstance(var, DistributedVariable) or var.distribute_strategy is not strategy:
            return False
    for var, grad in zip(variables, reduced, strict=True):
        first = strategy.experimental_local_results(grad)[0]
        if isinstance(first, IndexedSlices) or not (
            getattr(first, "dtype", None) == var.dtype
            and tuple(getattr(first, "shape", ())) == tuple(var.shape)
        ):
            return False
    return True


def _require_scope(strategy: Any, variables: Sequence[Any]) -> None:
    """Refuses distributed variables of a strategy other than the current one, as TF does.

    Raises:
      RuntimeError: TF 2.21 + Keras 3's error. Updating under another strategy (the default
        one, outside the scope) changed only the first replica's copy; building there made
        plain, unmirrored slots.
    """
    for var in variables:
        owner = getattr(var, "distribute_strategy", None)
        if isinstance(var, DistributedVariable) and owner is not strategy:
            raise RuntimeError(f'Need to be inside "with strategy.scope()" for {owner!r}')


class _LearningRate:
    """The learning rate as a checkpoint value (Keras saves its ``learning_rate`` variable):
    float64, so that a restored rate is the very float the run had."""

    shape = ()
    dtype = np.dtype(np.float64)

    def __init__(self, optimizer: Optimizer) -> None:
        self._optimizer = optimizer

    def numpy(self) -> np.ndarray:
        return np.asarray(self._optimizer.learning_rate, np.float64)

    def assign(self, value: Any) -> None:
        self._optimizer.learning_rate = float(np.asarray(value))


def _with_gradients(pairs: Sequence[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The pairs that have a gradient, as Keras's ``_filter_empty_gradients``.

    Raises:
      ValueError: no pair has one (Keras's message).
    """
    kept = [(g, v) for g, v in pairs if g is not None]
    if not kept:
        raise ValueError("No gradients provided for any variable.")
    if len(kept) < len(pairs):
        missing = [v.name for g, v in pairs if g is None]
        warnings.warn(
            f"Gradients do not exist for variables {missing} when minimizing the loss. If "
            "using `model.compile()`, did you forget to provide a `loss` argument?",
            stacklevel=4,
        )
    return kept


class Optimizer:
    """Applies gradients to variables; subclasses define the slots and the per-copy update.

    Args:
      learning_rate: a float.
      name: a name for the optimizer's variables.
    """

    _slot_names: tuple[str, ...] = ()

    def __init__(self, learning_rate: float, name: str) -> None:
        self.learning_rate = float(learning_rate)
        self.name = name
        self._iterations: Any = None
        self._slots: dict[int, list[Any]] = {}
        self._built: list[Any] = []  # the variables slots were made for, in creation order
        self._is_built = False  # Keras's `built`: set once every slot of the first call exists
        self._saved_learning_rate = _LearningRate(self)  # one object: state copies know it

    @property
    def iterations(self) -> Any:
        """The number of steps applied so far (a variable, made with the first step)."""
        return self._iterations

    def variables(self) -> list[Any]:
        """The optimizer's own variables, for checkpoints: the step counter and every slot."""
        found = [] if self._iterations is None else [self._iterations]
        for var in self._built:
            found.extend(self._slots[id(var)])
        return found

    def _trackable_children(self) -> dict[str, Any]:
        """What ``mwms_mpi.train.Checkpoint`` saves: the learning rate, the step counter and
        the slots, in order.

        The step counter and the slots only once the optimizer is built; a restore before that
        keeps their values and assigns them when they are made (restore-on-create).
        """
        children: dict[str, Any] = {"learning_rate": self._saved_learning_rate}
        if self._iterations is not None:
            children.update(iterations=self._iterations, slots=self.variables()[1:])
        return children

    def build(self, var_list: Sequence[Any]) -> None:
        """Makes the step counter and the slots of ``var_list`` now, as Keras's ``build`` does;
        on a built optimizer it does nothing (Keras).

        Optional: otherwise they are made by the first ``apply_gradients``. A checkpoint
        restored before either gives them their saved values when they are made.

        Raises:
          RuntimeError: for a variable of a strategy whose scope is not entered (TF's error).
        """
        strategy, variables = _context.current().strategy, list(var_list)
        _require_scope(strategy, variables)
        self._build(strategy, variables)

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> Any:
        """Sums the gradients over all replicas and applies them to every copy of each variable.

        Args:
          grads_and_vars: ``(gradient, variable)`` pairs; pairs with a ``None`` gradient are
            skipped with a warning, as Keras does (their variables' slots are made all the
            same on the first call).

        Returns:
          The step counter variable.

        Raises:
          ValueError: every gradient is ``None``, or a variable is not one of those the
            optimizer was built with (Keras's messages).
        """
        pairs = list(grads_and_vars)
        # The current entry straight from the low-level stack: importing mwms_mpi.distribute for
        # its get_replica_context/get_strategy would load every strategy (and tie the layers).
        entry = _context.current()
        if entry.replica_context is not None:
            return entry.replica_context.merge_call(self._distributed_apply, args=(pairs,))
        return self._distributed_apply(entry.strategy, pairs)

    def _distributed_apply(self, strategy: Any, pairs: Sequence[tuple[Any, Any]]) -> Any:
        given = [v for _, v in pairs]
        _require_scope(strategy, given)
        self._build(strategy, given)
        for var in given:
            if id(var) not in self._slots:
                raise ValueError(
                    f"Unknown variable: {var!r}. This optimizer can only be called for the "
                    "variables it was originally built with. When working with a new set of "
                    "variables, you should recreate a new optimizer instance."
                )
        pairs = _with_gradients(pairs)
        variables = [v for _, v in pairs]
        reduced = strategy.extended.batch_reduce_to(ReduceOp.SUM, list(pairs))
        step = int(np.asarray(self._iterations.numpy())) + 1
        if _updatable_together(strategy, variables, reduced, self._iterations):
            self._update_together(strategy, variables, reduced, step)
            return self._iterations
        for grad, var in zip(reduced, variables, strict=True):
            strategy.extended.update(
                var,
                self._update_step,
                args=(grad, *self._slots[id(var)]),
                kwargs={"step": step},
                group=False,
            )
        self._iterations.assign_add(np.int64(1), read_value=False)
        return self._iterations

    def _update_together(
        self, strategy: Any, variables: Sequence[Any], reduced: Sequence[Any], step: int
    ) -> None:
        """Every variable's update and the step count in one ``extended.update``: the same
        arithmetic on the same copies as one update per variable, with one update context per
        device for all of them (a variable's copies are all on its strategy's devices).

        Each device's call gets that device's copies themselves (what ``update`` hands ``fn``
        for its own variable) in one ``PerReplica`` argument, so that selecting them for a
        device is one lookup, not a walk through a nest of every variable and slot.
        """
        local = strategy.experimental_local_results
        columns = [
            (local(var), local(grad), [local(slot) for slot in self._slots[id(var)]])
            for var, grad in zip(variables, reduced, strict=True)
        ]
        counter = local(self._iterations)
        # A sum that is one array for every device (not a Mirrored) is that array on each.
        per_device = tuple(
            (
                counter[i],
                [
                    (copies[i], grads[i if len(grads) > 1 else 0], [slot[i] for slot in slots])
                    for copies, grads, slots in columns
                ],
            )
            for i in range(len(counter))
        )
        strategy.extended.update(
            variables[0], self._update_copies, args=(PerReplica(per_device), step), group=False
        )

    def _update_copies(self, _first: Any, device: Any, step: int) -> None:
        """One device's copies: every variable's ``_update_step`` in order, then the count."""
        counter, updates = device
        for var, grad, slots in updates:
            self._update_step(var, grad, *slots, step=step)
        counter._update_with(np.add, _ONE_STEP, "AssignAddVariableOp")

    def _build(self, strategy: Any, variables: Sequence[Any]) -> None:
        """Makes the step counter and the slots of ``variables``, in the strategy's scope, once:
        a built optimizer keeps the variables it was built with (Keras).

        Raises:
          ValueError: for a variable not created in ``strategy``'s scope (TF's message).
        """
        if self._is_built:
            return
        new = [v for v in {id(v): v for v in variables}.values() if id(v) not in self._slots]
        with strategy.scope():
            if self._iterations is None:
                self._iterations = Variable(
                    np.int64(0),
                    trainable=False,
                    name=f"{self.name}/iteration",
                    aggregation=VariableAggregation.ONLY_FIRST_REPLICA,
                )
            for var in new:
                shape, dtype = tuple(var.shape), np.dtype(var.dtype)
                xp = array_module(var.value())  # slots live where their variable lives
                base = var.name.split(":")[0]
                # As Keras: slots are made colocated with their variable, which refuses (TF's
                # ValueError) a variable not created in this strategy's scope: its copies on
                # other workers would never be updated alike.
                with strategy.extended.colocate_vars_with(var):
                    self._slots[id(var)] = [
                        Variable(
                            self._slot_initial_value(slot, xp.zeros(shape, dtype)),
                            trainable=False,
                            name=f"{base}/{slot}",
                        )
                        for slot in self._slot_names
                    ]
                self._built.append(var)
        self._is_built = True
        # Restore-on-create: a restore that found no step counter or slots here kept their
        # values; they are assigned now, before anything reads them.
        _deferred.notify(self)

    def _slot_initial_value(self, slot: str, zeros: Any) -> Any:
        """The value slot ``slot`` starts from, given ``zeros`` of its shape, dtype and kind.

        Zeros, as Keras's ``add_variable_from_reference``; a subclass whose Keras counterpart
        passes another initializer (Adagrad's accumulator) overrides this.
        """
        return zeros

    def _update_step(self, var: Any, grad: Any, *slots: Any, step: int) -> Any:
        """Updates one copy of ``var`` (and its slots' copies) with the summed ``grad``."""
        raise NotImplementedError

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

Checkpoints: a float learning rate, the step counter and the slots are saved as
``learning_rate``, ``iterations`` and ``slots/<i>`` (in creation order, as Keras saves
``_learning_rate``, ``_iterations`` and ``_variables/<i>``; Keras saves no schedule). A
checkpoint restored before they exist (the usual order: build the model, restore, train) keeps
their values, and the optimizer hands its new variables over as soon as it has made them,
before any of them is used (restore-on-create, as TF's deferred restoration), so a resumed run
continues exactly, at the learning rate it had.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mwms_mpi import _context, _naming
from mwms_mpi._arrays import array_module, as_dtype
from mwms_mpi.optimizers import _arguments, _clipping, _learning_rate
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
      learning_rate: a float, a schedule (``optimizers.schedules``, called with the step
        count) or a callable of no arguments, as Keras takes it.
      name: prefixes the step counter's name; by default Keras's: the class name in snake
        case, numbered from the second one on (``sgd``, ``sgd_1``: ``mwms_mpi/_naming.py``).
      weight_decay: Keras's decoupled weight decay: before each update, every variable (but
        those excluded by ``exclude_from_weight_decay``) loses ``variable * weight_decay *
        learning_rate``.
      clipnorm: clips each replica's gradient of each variable to this norm, before the
        all-reduce (Keras under ``tf.distribute``).
      clipvalue: clips each replica's gradients elementwise to ``[-clipvalue, clipvalue]``.
      global_clipnorm: clips each replica's gradients together to this global norm.
      use_ema, ema_momentum, ema_overwrite_frequency: Keras's moving average of the
        variables; checked as Keras checks them, but ``use_ema=True`` is not implemented.
      loss_scale_factor: each replica's gradients are divided by it first.
      gradient_accumulation_steps: checked as Keras checks it, but not implemented.
      **kwargs: only ``decay``, which Keras ignores with a warning.

    Raises:
      ValueError: Keras's errors: more than one clipping argument, an unknown keyword, or an
        EMA or accumulation setting out of range.
      NotImplementedError: for ``use_ema=True`` or ``gradient_accumulation_steps``, rather
        than training without them.
    """

    _slot_names: tuple[str, ...] = ()

    def __init__(
        self,
        learning_rate: float,
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        use_ema: bool = False,
        ema_momentum: float = 0.99,
        ema_overwrite_frequency: int | None = None,
        loss_scale_factor: float | None = None,
        gradient_accumulation_steps: int | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.pop("decay", None) is not None:
            warnings.warn(
                "Argument `decay` is no longer supported and will be ignored.", stacklevel=3
            )
        if kwargs:
            raise ValueError(f"Argument(s) not recognized: {kwargs}")
        _arguments.check_keras_ranges(
            use_ema, ema_momentum, ema_overwrite_frequency, gradient_accumulation_steps
        )
        if sum(a is not None for a in (clipnorm, clipvalue, global_clipnorm)) > 1:
            raise ValueError(
                "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. "
                f"Received: clipnorm={clipnorm}, clipvalue={clipvalue}, "
                f"global_clipnorm={global_clipnorm}"
            )
        if use_ema or gradient_accumulation_steps:
            raise NotImplementedError(
                f"{type(self).__name__}: use_ema={use_ema!r}, gradient_accumulation_steps="
                f"{gradient_accumulation_steps!r}: mwms_mpi's optimizers implement neither "
                "Keras's moving average of the variables nor gradient accumulation; leave "
                "them at their defaults (use_ema=False, gradient_accumulation_steps=None)."
            )
        self.weight_decay, self.loss_scale_factor = weight_decay, loss_scale_factor
        self.clipnorm, self.clipvalue, self.global_clipnorm = clipnorm, clipvalue, global_clipnorm
        self.use_ema, self.ema_momentum = use_ema, ema_momentum
        self.ema_overwrite_frequency = ema_overwrite_frequency
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self._exclude_ids: set[int] = set()
        self._exclude_pattern: re.Pattern[str] | None = None
        self._learning_rate = _learning_rate.checked(learning_rate)
        self.name = _naming.auto_name(type(self).__name__) if name is None else name
        self._iterations: Any = None
        self._slots: dict[int, list[Any]] = {}
        self._built: list[Any] = []  # the variables slots were made for, in creation order
        self._is_built = False  # Keras's `built`: set once every slot of the first call exists
        self._saved_learning_rate = _learning_rate.SavedLearningRate(self)  # one, for copies

    @property
    def learning_rate(self) -> Any:
        """The learning rate as Keras gives it: the float, a schedule's value at the step count,
        or a callable's value; setting it follows Keras (``_learning_rate.replaced``)."""
        return _learning_rate.current(self._learning_rate, self._iterations)

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._learning_rate = _learning_rate.replaced(self._learning_rate, value)

    @property
    def iterations(self) -> Any:
        """The number of steps applied so far (a variable, made with the first step)."""
        return self._iterations

    @property
    def variables(self) -> list[Any]:
        """The optimizer's own variables: the step counter and every slot (a property, as in
        Keras 3; Keras also lists its learning-rate variable, which ours is not)."""
        found = [] if self._iterations is None else [self._iterations]
        for var in self._built:
            found.extend(self._slots[id(var)])
        return found

    def _trackable_children(self) -> dict[str, Any]:
        """What ``mwms_mpi.train.Checkpoint`` saves: the learning rate (a float one: Keras
        saves no schedule), the step counter and the slots, in order.

        The step counter and the slots only once the optimizer is built; a restore before that
        keeps their values and assigns them when they are made (restore-on-create).
        """
        children: dict[str, Any] = {}
        if isinstance(self._learning_rate, float):
            children["learning_rate"] = self._saved_learning_rate
        if self._iterations is not None:
            children.update(iterations=self._iterations, slots=self.variables[1:])
        return children

    def build(self, variables: Sequence[Any]) -> None:
        """Makes the step counter and the slots of ``variables`` now, as Keras's ``build`` does;
        on a built optimizer it does nothing (Keras).

        Optional: otherwise they are made by the first ``apply_gradients``. A checkpoint
        restored before either gives them their saved values when they are made.

        Raises:
          RuntimeError: for a variable of a strategy whose scope is not entered (TF's error).
        """
        strategy, variables = _context.current().strategy, list(variables)
        _require_scope(strategy, variables)
        self._build(strategy, variables)

    def exclude_from_weight_decay(
        self, var_list: Sequence[Any] | None = None, var_names: Sequence[str] | None = None
    ) -> None:
        """Excludes variables from weight decay: those in ``var_list``, and those whose name
        contains a match of any of ``var_names`` (regular expressions, ``re.search``).

        Each call replaces the last one's choice. Keras documents it as "before the
        optimizer is built", but Keras 3 checks an attribute it never sets, so a call after
        building takes effect from the next step; so it does here.
        """
        self._exclude_ids = {id(v) for v in var_list} if var_list else set()
        self._exclude_pattern = re.compile("|".join(set(var_names))) if var_names else None

    def _uses_weight_decay(self, var: Any) -> bool:
        """Keras's ``_use_weight_decay``: a weight decay is set, and ``var`` is not excluded
        by identity or by name."""
        if self.weight_decay is None or id(var) in self._exclude_ids:
            return False
        return self._exclude_pattern is None or self._exclude_pattern.search(var.name) is None

    def _decay(self, var: Any, learning_rate: np.ndarray) -> None:
        """Keras's (TF backend) weight decay of one copy: ``var -= var * wd * lr``, with the
        step's learning rate and the decay (a Python float cast through float32 by
        ``tf.cast``) in the variable's dtype."""
        cast = np.dtype(var.dtype).type
        wd, lr = cast(np.float32(self.weight_decay)), cast(learning_rate)
        value = var._dense()
        var._update_with(array_module(value).subtract, value * wd * lr, "AssignSubVariableOp")

    def _transforms_gradients(self) -> bool:
        """Whether ``apply_gradients`` divides or clips each replica's gradients first."""
        return self.loss_scale_factor is not None or any(
            a is not None for a in (self.clipnorm, self.global_clipnorm, self.clipvalue)
        )

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
        if self._transforms_gradients():  # Keras: each replica's own, before the all-reduce
            pairs = _clipping.transformed_pairs(
                entry.strategy,
                entry.replica_context is not None,
                pairs,
                self.loss_scale_factor,
                self.clipnorm,
                self.global_clipnorm,
                self.clipvalue,
            )
        if entry.replica_context is not None:
            return entry.replica_context.merge_call(self._distributed_apply, args=(pairs,))
        return self._distributed_apply(entry.strategy, pairs)

    def apply(self, grads: Sequence[Any], trainable_variables: Any = None) -> None:
        """Keras 3's ``apply``: ``apply_gradients(zip(grads, trainable_variables))``, or, with
        only ``grads``, pairs them with the variables the optimizer was built with, in order.
        No gradients: nothing happens (the step counter stays).

        Raises:
          ValueError: only ``grads`` for an optimizer not built, or not one per variable it
            was built with (Keras's messages).
        """
        grads = list(grads)
        if not grads:
            return
        if trainable_variables is None:
            if not self._is_built:
                raise ValueError(
                    "When passing `grads` without `variables`, the optimizer must already be "
                    "built on a list of variables. Call `optimizer.build(trainable_variables)` "
                    "first. "
                )
            if len(grads) != len(self._built):
                raise ValueError(
                    "When passing `grads` as a list of gradient tensors, the gradients must "
                    "match `optimizer.variables` one-to-on. Received a list of "
                    f"{len(grads)} gradients, but the optimizer is tracking "
                    f"{len(self._built)} trainable variables."
                )
            trainable_variables = self._built
        self.apply_gradients(zip(grads, trainable_variables, strict=False))

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
        # Keras reads the rate once per step, with the counter before the step
        rate = _learning_rate.for_step(self._learning_rate, self._iterations)
        step = int(np.asarray(self._iterations.numpy())) + 1
        if _updatable_together(strategy, variables, reduced, self._iterations):
            self._update_together(strategy, variables, reduced, step, rate)
            return self._iterations
        for var in variables:  # Keras decays every variable, then updates each
            if self._uses_weight_decay(var):
                strategy.extended.update(var, self._decay, args=(rate,), group=False)
        for grad, var in zip(reduced, variables, strict=True):
            strategy.extended.update(
                var,
                self._update_step,
                args=(grad, *self._slots[id(var)]),
                kwargs={"step": step, "learning_rate": rate},
                group=False,
            )
        self._iterations.assign_add(np.int64(1), read_value=False)
        return self._iterations

    def _update_together(
        self,
        strategy: Any,
        variables: Sequence[Any],
        reduced: Sequence[Any],
        step: int,
        rate: np.ndarray,
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
            (
                local(var),
                local(grad),
                [local(slot) for slot in self._slots[id(var)]],
                self._uses_weight_decay(var),
            )
            for var, grad in zip(variables, reduced, strict=True)
        ]
        counter = local(self._iterations)
        # A sum that is one array for every device (not a Mirrored) is that array on each.
        per_device = tuple(
            (
                counter[i],
                [
                    (
                        copies[i],
                        grads[i if len(grads) > 1 else 0],
                        [slot[i] for slot in slots],
                        decays,
                    )
                    for copies, grads, slots, decays in columns
                ],
            )
            for i in range(len(counter))
        )
        strategy.extended.update(
            variables[0],
            self._update_copies,
            args=(PerReplica(per_device), step, rate),
            group=False,
        )

    def _update_copies(self, _first: Any, device: Any, step: int, rate: np.ndarray) -> None:
        """One device's copies: every variable's weight decay and ``_update_step`` in order,
        then the count (decaying a variable just before its own step is Keras's arithmetic:
        no step reads another variable)."""
        counter, updates = device
        for var, grad, slots, decays in updates:
            if decays:
                self._decay(var, rate)
            self._update_step(var, grad, *slots, step=step, learning_rate=rate)
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
                            name=f"{base}/{slot}/",  # absolute: base has the scope
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

    def _update_step(
        self, var: Any, grad: Any, *slots: Any, step: int, learning_rate: np.ndarray
    ) -> Any:
        """Updates one copy of ``var`` (and its slots' copies) with the summed ``grad``, at the
        step's ``learning_rate`` (a 0-d array: cast it to the variable's dtype, as Keras's
        ``ops.cast(learning_rate, variable.dtype)``)."""
        raise NotImplementedError

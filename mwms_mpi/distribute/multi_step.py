"""``extended.experimental_run_steps_on_iterator`` and its ``MultiStepContext``, as TF 2.21
runs them eagerly.

A TF 1.x method ("DEPRECATED: please use `run` instead") that TF's Mirrored and
MultiWorkerMirrored extended objects still inherit (``StrategyExtendedV1``; its
``MirroredExtended._experimental_run_steps_on_iterator`` and ``input_lib.MultiStepContext``).
Eagerly, TF's ``while_loop`` is a Python loop, and this module is that loop:

* ``fn(ctx, iterator.get_next())`` runs ``iterations`` times, in the strategy's scope;
* after each step every last-step output becomes its tuple of local results, and the loop's
  values (a counter, then those tuples flattened in ``nest`` order) must have the structure of
  the loop's initial values (the counter, then ``nest.flatten(initial_loop_values)``), checked
  by ``nest.assert_same_structure``: a ``ValueError`` where TF raises one, which is the case of
  a ``fn`` that sets last-step outputs without ``initial_loop_values`` of their structure;
* at the end an output set with a ``reduce_op`` is its reduced value, one set without is
  regrouped (a ``PerReplica`` of the local results); ``non_tensor_outputs`` hold what
  ``set_non_tensor_output`` was given (in replica context: its local results); ``run_op`` is
  ``None`` (``control_flow_ops.group`` eagerly).

docs/architecture.md, "Older names", lists it with the other TF 1.x names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mwms_mpi import _context, nest
from mwms_mpi.values import regroup
from mwms_mpi.values.convert import as_array

if TYPE_CHECKING:
    from mwms_mpi.types import ReduceOp


class MultiStepContext:
    """What a step function of ``experimental_run_steps_on_iterator`` reports (TF's
    ``input_lib.MultiStepContext``): outputs of the last step, and non-tensor outputs."""

    def __init__(self) -> None:
        self._last_step_outputs: dict[str, Any] = {}
        self._last_step_outputs_reduce_ops: dict[str, ReduceOp | None] = {}
        self._non_tensor_outputs: dict[str, Any] = {}
        self.run_op: Any = None

    @property
    def last_step_outputs(self) -> dict[str, Any]:
        """The outputs captured on the last step, by name (reduced where a ``reduce_op`` was
        given)."""
        return self._last_step_outputs

    def _set_last_step_outputs(self, outputs: Any) -> None:
        """Replaces the whole dictionary of last step outputs."""
        if not isinstance(outputs, dict):
            raise ValueError("Need a dictionary to set last_step_outputs.")
        self._last_step_outputs = outputs

    def set_last_step_output(
        self, name: str, output: Any, reduce_op: ReduceOp | None = None
    ) -> None:
        """Sets ``output`` as ``name``'s value of the last step; in replica context a
        ``reduce_op`` is required and the replicas' outputs are reduced with it
        (``strategy.reduce(reduce_op, output, axis=None)``, in a ``merge_call``)."""
        if _context.in_cross_replica_context():
            self._last_step_outputs_reduce_ops[name] = reduce_op
            if reduce_op is None:
                self._last_step_outputs[name] = output
            else:
                strategy = _context.current().strategy
                assert strategy is not None  # in cross-replica context: a strategy's scope
                self._last_step_outputs[name] = strategy.reduce(reduce_op, output, axis=None)
            return
        assert reduce_op is not None  # TF's check, as TF makes it

        def merge_fn(distribution: Any, value: Any) -> None:
            self._last_step_outputs[name] = distribution.reduce(reduce_op, value, axis=None)
            self._last_step_outputs_reduce_ops[name] = reduce_op

        _replica_context().merge_call(merge_fn, args=(output,))

    @property
    def non_tensor_outputs(self) -> dict[str, Any]:
        """The non-tensor outputs captured, by name."""
        return self._non_tensor_outputs

    def set_non_tensor_output(self, name: str, output: Any) -> None:
        """Captures ``output`` as ``name``; in replica context, the replicas' values as the
        strategy's local results (no reduction: they need not be tensors)."""
        if _context.in_cross_replica_context():
            self._non_tensor_outputs[name] = output
            return

        def merge_fn(distribution: Any, value: Any) -> None:
            self._non_tensor_outputs[name] = distribution.experimental_local_results(value)

        _replica_context().merge_call(merge_fn, args=(output,))


def _replica_context() -> Any:
    replica = _context.current().replica_context
    assert replica is not None, "a replica context: in_cross_replica_context() said so"
    return replica


def run_steps_on_iterator(
    local_results: Callable[[Any], tuple[Any, ...]],
    fn: Callable[[MultiStepContext, Any], Any],
    iterator: Any,
    iterations: int,
    initial_loop_values: Any,
) -> MultiStepContext:
    """The loop of ``MirroredExtended._experimental_run_steps_on_iterator``, eagerly (see the
    module docstring); the caller entered the strategy's scope.

    Args:
      local_results: the strategy's ``_local_results`` (a value's per-replica parts).

    Raises:
      ValueError: the loop's values after a step are not structured as its initial values.
    """
    initial = nest.flatten({} if initial_loop_values is None else initial_loop_values)
    ctx = MultiStepContext()
    structure = [0, *initial]  # TF compares structures only: what the leaves are is not checked
    loop_values: list[Any] = list(structure)
    while loop_values[0] < iterations:
        fn(ctx, iterator.get_next())
        for name, output in ctx.last_step_outputs.items():
            ctx.last_step_outputs[name] = local_results(output)
        loop_values = [loop_values[0] + 1, *nest.flatten(ctx.last_step_outputs)]
        nest.assert_same_structure(structure, loop_values)
    outputs = nest.pack_sequence_as(ctx.last_step_outputs, [as_array(v) for v in loop_values[1:]])
    for name, reduce_op in ctx._last_step_outputs_reduce_ops.items():
        output = outputs[name]
        if reduce_op is None:  # not reduced: the replicas' values, regrouped
            outputs[name] = regroup(output)
        else:
            assert len(output) == 1
            outputs[name] = output[0]
    ctx._set_last_step_outputs(outputs)
    return ctx

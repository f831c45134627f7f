"""Ported from TF 2.21's ``tensorflow/python/distribute/custom_training_loop_input_test.py``.

Each scenario is keyed by the TF test method it comes from and runs the eager program of that
method (a ``tf.function`` wrapper in TF's test is dropped: eager semantics are what is ported);
TF's outcomes are pinned in ``pins/test_custom_training_loop_input.json`` (``_parity.py`` has
the command). Methods left out are listed in README.md with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.support.differential import Backend, Outcomes, Scenarios
from tests.tf_parity import _ops
from tests.tf_parity._parity import parity_tests

DATA = [5.0, 6.0, 7.0, 8.0]


def _squares(b: Backend, s: Any, dist_dataset: Any) -> list[Any]:
    """Every step's local results of ``square`` over a distributed dataset (a ``for`` loop)."""
    return [_ops.local(b, s, s.run(lambda x: _ops.square(b, x), args=(x,))) for x in dist_dataset]


def _dist(b: Backend, s: Any, data: list[Any], batch: int, **kw: Any) -> Any:
    dataset = b.data.Dataset.from_tensor_slices(data).batch(batch, **kw)
    return s.experimental_distribute_dataset(dataset)


def constant_numpy_input(b: Backend, s: Any) -> Outcomes:
    """testConstantNumpyInput: a Python float through ``run`` into ``square``."""
    return {
        "local": b.outcome(lambda: _ops.local(b, s, s.run(lambda x: _ops.square(b, x), (2.0,))))
    }


def stateful_run_always_execute(b: Backend, s: Any) -> Outcomes:
    """testStatefulExperimentalRunAlwaysExecute: a MEAN variable's assign_add in ``run``."""
    with s.scope():
        v = b.Variable(0.0, aggregation=b.VariableAggregation.MEAN)

    def assign_add() -> None:
        v.assign_add(1.0)

    return {"run": b.outcome(lambda: s.run(assign_add)), "v": b.outcome(v.read_value)}


def full_eager(b: Backend, s: Any) -> Outcomes:
    """testFullEager (and the same eager program of testStepInFunction, testRunInFunction,
    testRunInFunctionAutoGraphApplication, testIterationInsideFunction,
    testIterationOutsideFunction)."""
    return {"results": b.outcome(lambda: _squares(b, s, _dist(b, s, DATA, 2)))}


def iteration_by_next(b: Backend, s: Any) -> Outcomes:
    """testIterationInsideFunction / testIterationOutsideFunction: two ``next`` calls."""
    iterator = iter(_dist(b, s, DATA, 2))
    out = []
    for _ in range(2):
        out.append(_ops.local(b, s, s.run(lambda x: _ops.square(b, x), args=(next(iterator),))))
    return {"results": b.describe(out)}


def get_next_as_optional(b: Backend, s: Any) -> Outcomes:
    """testGetNextAsOptional: ``get_next_as_optional().get_value()`` fed to ``run``."""
    iterator = iter(_dist(b, s, DATA, 2))

    def step() -> Any:
        value = iterator.get_next_as_optional().get_value()
        return _ops.local(b, s, s.run(lambda x: _ops.square(b, x), args=(value,)))

    return {"results": b.outcome(step)}


def get_next_as_optional_example(b: Backend, s: Any) -> Outcomes:
    """testGetNextAsOptionalExampleUsage: up to 6 steps over range(8).batch(2), stopping when
    the optional is empty."""
    dataset = b.data.Dataset.range(8, output_type="int32").batch(2)
    iterator = iter(s.experimental_distribute_dataset(dataset))
    steps, seen = 0, []
    for _ in range(6):
        optional = iterator.get_next_as_optional()
        if not bool(optional.has_value()):
            break
        seen.append(_ops.local(b, s, s.run(lambda x: x, args=(optional.get_value(),))))
        steps += 1
    return {"steps": steps, "seen": b.describe(seen)}


def nested_output(b: Backend, s: Any) -> Outcomes:
    """testNestedOutput: a list of a dict out of ``run``, each leaf's local results."""
    iterator = iter(_dist(b, s, [0, 1, 2, 3], 2))

    def computation(x: Any) -> Any:
        return [{"a": x - 1, "b": x + 1}]

    outputs = s.run(computation, args=(next(iterator),))
    return {
        "a": b.describe(_ops.local(b, s, outputs[0]["a"])),
        "b": b.describe(_ops.local(b, s, outputs[0]["b"])),
    }


def dataset_iteration(b: Backend, s: Any) -> Outcomes:
    """testDatasetIterationInFunction: two loops over one distributed dataset; the first
    multiplies MEAN reductions, the second adds 1 to an ONLY_FIRST_REPLICA variable."""
    with s.scope():
        a = b.Variable(1.0, aggregation=b.VariableAggregation.ONLY_FIRST_REPLICA)
    dist = _dist(b, s, DATA, 2)
    steps, product = 0, 2.0
    for x in dist:
        steps += 1
        product *= float(s.reduce("MEAN", x, axis=0))

    def train_step(_: Any) -> None:
        a.assign_add(1.0)

    for y in dist:
        s.run(train_step, args=(y,))
    return {"steps": steps, "product": round(product, 3), "a": b.outcome(a.read_value)}


def assert_with_dynamic_batch(b: Backend, s: Any) -> Outcomes:
    """testDatasetAssertWithDynamicBatch: [5, 6, 7] in batches of 2, two steps of square."""
    iterator = iter(_dist(b, s, [5.0, 6.0, 7.0], 2))
    out = [
        _ops.local(b, s, s.run(lambda x: _ops.square(b, x), args=(next(iterator),)))
        for _ in range(2)
    ]
    return {"results": b.describe(out)}


def _unbatched_from_function(b: Backend, s: Any) -> Any:
    return iter(
        s.distribute_datasets_from_function(lambda _: b.data.Dataset.from_tensor_slices(DATA))
    )


def iterator_without_function(b: Backend, s: Any) -> Outcomes:
    """testDistributeDatasetIteratorWithoutFunction: an unbatched dataset from a function."""
    return {"local": b.outcome(lambda: _ops.local(b, s, _unbatched_from_function(b, s).get_next()))}


def iterator_with_function(b: Backend, s: Any) -> Outcomes:
    """testDistributeDatasetIteratorWithFunction: the values (TF's ``backing_device`` check
    has no counterpart: mwms_mpi's tensors are numpy arrays, README.md)."""
    results = _ops.local(b, s, _unbatched_from_function(b, s).get_next())
    return {"local": b.describe(results)}


def dataset_prefetch(b: Backend, s: Any) -> Outcomes:
    """testDistributeDatasetPrefetch: each replica's batch (its ``backing_device``: no
    counterpart, README.md)."""
    results = _ops.local(b, s, next(iter(_dist(b, s, DATA, 2))))
    return {"local": b.describe(results)}


def dataset_function_prefetch(b: Backend, s: Any) -> Outcomes:
    """testDistributeDatasetFunctionPrefetch: the same from a dataset function."""
    results = _ops.local(b, s, _unbatched_from_function(b, s).get_next())
    return {"local": b.describe(results)}


def _mean_of_first(b: Backend, s: Any, options: Any = None) -> Any:
    iterator = iter(_dist(b, s, [5.0, 6.0, 7.0], 4))
    inputs = next(iterator)
    kw = {} if options is None else {"options": options}
    return _ops.local(b, s, s.run(lambda x: _ops.reduce_mean(b, x), args=(inputs,), **kw))


def dynamic_shapes(b: Backend, s: Any) -> Outcomes:
    """testDynamicShapes (and testDynamicShapesWithGetNextOutsideFunction, the same eager
    program): reduce_mean of each replica's part of a batch of 3."""
    return {"local": b.outcome(lambda: _mean_of_first(b, s))}


def dynamic_shapes_run_options(b: Backend, s: Any) -> Outcomes:
    """testDynamicShapesWithRunOptionsBucketizing: the same with bucketizing RunOptions (TF
    runs it on TPUs only; the eager program runs on any strategy)."""
    options = b.ds.RunOptions(experimental_bucketizing_dynamic_shape=True)
    return {"local": b.outcome(lambda: _mean_of_first(b, s, options))}


def dynamic_outputs_x64(b: Backend, s: Any) -> Outcomes:
    """testDynamicOutputsWithX64: ``[5]`` cast to int64 in a map, batched by 2; ``x + x``."""
    dataset = b.data.Dataset.from_tensor_slices([5]).map(lambda x: _ops.cast(b, x, "int64"))
    inputs = next(iter(s.experimental_distribute_dataset(dataset.batch(2))))
    return {
        "local": b.outcome(lambda: _ops.local(b, s, s.run(lambda x: _ops.add(b, x, x), (inputs,))))
    }


def _zeros_from_function(b: Backend, s: Any, shape: tuple[int, ...]) -> Any:
    """The first element of ``distribute_datasets_from_function`` over int32 zeros of
    ``shape``, batched by 3."""

    def dataset_fn(_: Any) -> Any:
        return b.data.Dataset.from_tensor_slices(np.zeros(shape, dtype=np.int32)).batch(3)

    return next(iter(s.distribute_datasets_from_function(dataset_fn)))


def segment_sum_dynamic(b: Backend, s: Any) -> Outcomes:
    """testSegmentSumWithDynamicNumberOfSegments: as many segments as the replica's rows."""
    example = _zeros_from_function(b, s, (5,))
    outputs = _ops.local(b, s, s.run(lambda x: _ops.segment_sum_to_zero(b, x), (example,)))
    return {"shapes": [_ops.shape(x) for x in outputs], "local": b.describe(outputs)}


def reshape_dynamic(b: Backend, s: Any) -> Outcomes:
    """testReshapeWithDynamicInputs: tile and reshapes by the replica's row count."""
    example = _zeros_from_function(b, s, (5, 1, 2))
    outputs = _ops.local(b, s, s.run(lambda x: _ops.reshapes(b, x), (example,)))
    return {"shapes": [[_ops.shape(t) for t in replica] for replica in outputs]}


def reduce_dynamic_shapes(b: Backend, s: Any) -> Outcomes:
    """testStrategyReduceWithDynamicShapes: MEAN over axis 0 of a partial batch."""
    inputs = next(iter(_dist(b, s, [5.0, 6.0, 7.0], 4)))
    return {"mean": b.outcome(lambda: s.reduce("MEAN", inputs, axis=0))}


def reduce_dynamic_shapes_rank2(b: Backend, s: Any) -> Outcomes:
    """testStrategyReduceWithDynamicShapesRank2: the same for rank-2 elements."""
    inputs = next(iter(_dist(b, s, [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]], 4)))
    return {"mean": b.outcome(lambda: s.reduce("MEAN", inputs, axis=0))}


def dynamic_shapes_size(b: Backend, s: Any) -> Outcomes:
    """testDynamicShapesWithSizeOp: ``tf.size`` of each replica's part."""
    inputs = next(iter(_dist(b, s, [5.0, 6.0, 7.0], 4)))
    return {
        "local": b.outcome(lambda: _ops.local(b, s, s.run(lambda x: _ops.size(b, x), (inputs,))))
    }


def first_replica_not_maximum_shape(b: Backend, s: Any) -> Outcomes:
    """testDynamicShapesWithFirstReplicaNotMaximumShape: a concatenation of datasets with
    different element shapes, from a dataset function."""

    def dataset_fn(_: Any) -> Any:
        d1 = b.data.Dataset.from_tensor_slices([[1.0, 2.0], [1.0, 2.0]])
        d2 = b.data.Dataset.from_tensor_slices([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
        return d1.concatenate(d2).batch(2, drop_remainder=True)

    def step() -> Any:
        inputs = next(iter(s.distribute_datasets_from_function(dataset_fn)))
        return _ops.local(b, s, s.run(lambda x: _ops.reduce_mean(b, x), args=(inputs,)))

    return {"local": b.outcome(step)}


def _first_local(b: Backend, s: Any, data: list[float], batch: int, drop: bool) -> Any:
    iterator = iter(_dist(b, s, data, batch, drop_remainder=drop))
    return b.outcome(lambda: _ops.local(b, s, next(iterator)))


def evenly_divisible_drop(b: Backend, s: Any) -> Outcomes:
    """testDatasetDistributeEvenlyDivisibleDrop."""
    return {"local": _first_local(b, s, [5.0, 6.0], 2, True)}


def not_divisible_drop(b: Backend, s: Any) -> Outcomes:
    """testDatasetDistributeNotDivisibleDrop."""
    return {"local": _first_local(b, s, [5.0, 6.0], 1, True)}


def evenly_divisible_no_drop(b: Backend, s: Any) -> Outcomes:
    """testDatasetDistributeEvenlyDivisibleNoDrop."""
    return {"local": _first_local(b, s, [5.0, 6.0], 2, False)}


def partial_batch_mixed_outputs(b: Backend, s: Any) -> Outcomes:
    """testDatasetPartialBatchWithMixedOutputs: a fixed-size and a data-sized output of one
    partial batch."""
    inputs = next(iter(_dist(b, s, [5.0], 2)))
    results = s.run(lambda x: (_ops.zeros(b, [3]), _ops.square(b, x)), args=(inputs,))
    return {
        "fixed": b.describe(_ops.local(b, s, results[0])),
        "dynamic": b.describe(_ops.local(b, s, results[1])),
    }


def multi_device_data_captured(b: Backend, s: Any) -> Outcomes:
    """testMultiDeviceDataCapturedFunction: square + variable over an unbatched, repeated
    dataset from a function; the MEAN of two steps."""

    def step() -> Any:
        inputs = b.constant([2.0, 3.0])
        iterator = iter(
            s.distribute_datasets_from_function(
                lambda _: b.data.Dataset.from_tensor_slices(inputs).repeat(5)
            )
        )
        with s.scope():
            var = b.Variable(1.0)

        def func(x: Any) -> Any:
            return _ops.add(b, _ops.square(b, x), var)

        mean = None
        for _ in range(2):
            mean = s.reduce("MEAN", s.run(func, (next(iterator),)), axis=None)
        return mean

    return {"mean": b.outcome(step)}


def dataset_out_of_range(b: Backend, s: Any) -> Outcomes:
    """testDatasetOutOfRange: ``next`` until the end; a SUM variable accumulates the data."""
    with s.scope():
        a = b.Variable(0.0, aggregation=b.VariableAggregation.SUM)

    def train_step(val: Any) -> None:
        a.assign_add(_ops.reduce_sum(b, val))

    iterator = iter(_dist(b, s, DATA, 2))

    def loop() -> int:
        steps = 0
        for _ in range(100):
            s.run(train_step, args=(iterator.get_next(),))
            steps += 1
        return steps

    return {"loop": b.outcome(loop), "a": b.outcome(a.read_value)}


SCENARIOS: Scenarios = {
    "InputIterationTest.testConstantNumpyInput": constant_numpy_input,
    "InputIterationTest.testStatefulExperimentalRunAlwaysExecute": stateful_run_always_execute,
    "InputIterationTest.testFullEager": full_eager,
    "InputIterationTest.testGetNextAsOptional": get_next_as_optional,
    "InputIterationTest.testGetNextAsOptionalExampleUsage": get_next_as_optional_example,
    "InputIterationTest.testStepInFunction": full_eager,
    "InputIterationTest.testRunInFunction": full_eager,
    "InputIterationTest.testNestedOutput": nested_output,
    "InputIterationTest.testRunInFunctionAutoGraphApplication": full_eager,
    "InputIterationTest.testDatasetIterationInFunction": dataset_iteration,
    "InputIterationTest.testDatasetAssertWithDynamicBatch": assert_with_dynamic_batch,
    "InputIterationTest.testDistributeDatasetIteratorWithoutFunction": iterator_without_function,
    "InputIterationTest.testDistributeDatasetIteratorWithFunction": iterator_with_function,
    "InputIterationTest.testDistributeDatasetPrefetch": dataset_prefetch,
    "InputIterationTest.testDistributeDatasetFunctionPrefetch": dataset_function_prefetch,
    "InputIterationTest.testDynamicShapes": dynamic_shapes,
    "InputIterationTest.testDynamicShapesWithRunOptionsBucketizing": dynamic_shapes_run_options,
    "InputIterationTest.testDynamicOutputsWithX64": dynamic_outputs_x64,
    "InputIterationTest.testSegmentSumWithDynamicNumberOfSegments": segment_sum_dynamic,
    "InputIterationTest.testReshapeWithDynamicInputs": reshape_dynamic,
    "InputIterationTest.testDynamicShapesWithGetNextOutsideFunction": dynamic_shapes,
    "InputIterationTest.testStrategyReduceWithDynamicShapes": reduce_dynamic_shapes,
    "InputIterationTest.testStrategyReduceWithDynamicShapesRank2": reduce_dynamic_shapes_rank2,
    "InputIterationTest.testDynamicShapesWithSizeOp": dynamic_shapes_size,
    "InputIterationTest.testDynamicShapesWithFirstReplicaNotMaximumShape": (
        first_replica_not_maximum_shape
    ),
    "InputIterationTest.testDatasetDistributeEvenlyDivisibleDrop": evenly_divisible_drop,
    "InputIterationTest.testDatasetDistributeNotDivisibleDrop": not_divisible_drop,
    "InputIterationTest.testDatasetDistributeEvenlyDivisibleNoDrop": evenly_divisible_no_drop,
    "InputIterationTest.testDatasetPartialBatchWithMixedOutputs": partial_batch_mixed_outputs,
    "InputIterationTest.testIterationInsideFunction": iteration_by_next,
    "InputIterationTest.testIterationOutsideFunction": iteration_by_next,
    "InputIterationTest.testMultiDeviceDataCapturedFunction": multi_device_data_captured,
    "InputIterationTest.testDatasetOutOfRange": dataset_out_of_range,
}

FAILING: dict[str, str] = {}

test_m2, test_mwms = parity_tests(SCENARIOS, __file__, FAILING)

"""``mwms_mpi.metrics`` to the last bit of Keras 3.15.1 under TF 2.21.0, and TF's errors.

Every literal here is what Keras 3.15.1 printed under TF 2.21.0 (CPU) for the same program:
``np.asarray(result).tobytes().hex()`` with its dtype and shape, or the error's type and
message; the two-replica cases ran under TF's MirroredStrategy on two logical CPUs. They pin
what a differential fuzz of the metrics against Keras found: sums in TF's addition order
(numpy's pairwise order differed in the last bit), an empty mean's NaN (TF's is positive),
Keras's ``assign_add`` (the sum is cast, not the addend), TF's ``Mul`` refusing two dtypes,
TF's ``argmax`` never picking NaN, TF's errors for an empty ``argmax`` axis and for bool and
0-d ``mean_squared_error``, and TF's (and Keras's) messages for shapes that do not fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
import mwms_mpi.metrics as metrics
from mwms_mpi import errors

NAN, INF = np.nan, np.inf
F16 = np.array([1.263671875, 1.2978515625, 0.01323699951171875, 1.8916015625], np.float16)
_K = np.arange(6 * 37, dtype=np.float64)
ROWS = ((((_K * 7919) % 1009) / 97 - 5).astype(np.float32) ** 3).reshape(6, 37)
BOOL = np.array([[[False], [True]]])
MUL_FLOAT_INT = (
    "cannot compute Mul as input #1(zero-based) was expected to be a float tensor but is a "
    "{} tensor [Op:Mul] name: "
)
CPU = "{{{{function_node __wrapped__{}_device_/job:localhost/replica:0/task:0/device:CPU:0}}}} "
MEAN_AXIS = (
    "{{function_node __wrapped__Mean_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
    "Invalid reduction dimension (-1 for input with 0 dimension(s) [Op:Mean] name: "
)
SUB_BOOL = (
    "Value for attr 'T' of bool is not in the list of allowed values: bfloat16, half, float, "
    "double, uint8, int8, uint16, int16, int32, int64, complex64, complex128, uint32, uint64\n\t"
    "; NodeDef: {{node Sub}}; Op<name=Sub; signature=x:T, y:T -> z:T; attr=T:type,allowed="
    "[DT_BFLOAT16, DT_HALF, DT_FLOAT, DT_DOUBLE, DT_UINT8, DT_INT8, DT_UINT16, DT_INT16, "
    "DT_INT32, DT_INT64, DT_COMPLEX64, DT_COMPLEX128, DT_UINT32, DT_UINT64]> [Op:Sub] name: "
)


def _bits(value: Any) -> tuple[str, tuple[int, ...], str]:
    array = np.asarray(value)
    return array.dtype.name, array.shape, array.tobytes().hex()


def _run(metric: Any, *updates: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
    for args, kwargs in updates:
        metric.update_state(*args, **kwargs)
    return metric.result()


# name -> (program, Keras's (dtype, shape, bytes))
LOCAL: dict[str, tuple[Any, tuple[str, tuple[int, ...], str]]] = {
    # numpy's float sums differed in the last bit (its pairwise order, float16 rounding)
    "sum_float16": (
        lambda: _run(metrics.Sum(dtype="float16"), ((F16,), {})),
        ("float16", (), "7844"),
    ),
    "mean_rows": (lambda: _run(metrics.Mean(), ((ROWS,), {})), ("float32", (), "be22a940")),
    "sum_37": (lambda: _run(metrics.Sum(), ((ROWS[0],), {})), ("float32", (), "be3f7143")),
    "mse_rows": (
        lambda: metrics.mean_squared_error(ROWS, np.zeros_like(ROWS)),
        ("float32", (6,), "6b6d4945192641450bb2244509414045e3e026456e193645"),
    ),
    # float16 adds keep TF's NaN where NaNs of both signs meet (numpy's keeps the other)
    "float16_nans": (
        lambda: _run(
            metrics.Sum(dtype="float16"),
            ((np.array([NAN], np.float16),), {}),
            ((np.array([-NAN], np.float16),), {}),
        ),
        ("float16", (), "007e"),
    ),
    "float16_nans_in_a_sum": (
        lambda: _run(metrics.Sum(dtype="float16"), ((np.array([NAN] + [1] * 7 + [-NAN]),), {})),
        ("float16", (), "00fe"),
    ),
    # an empty mean is TF's positive NaN (numpy's 0/0 has the sign bit)
    "empty_mean": (
        lambda: _run(metrics.Mean(), ((np.zeros((3, 0), np.float32),), {})),
        ("float32", (), "0000c07f"),
    ),
    "empty_mean_then": (
        lambda: _run(
            metrics.Mean(),
            ((np.zeros((3, 0), np.float32),), {}),
            ((np.ones(2, np.float32),), {}),
        ),
        ("float32", (), "0000c07f"),
    ),
    "mse_empty": (
        lambda: metrics.mean_squared_error(np.zeros((2, 0)), np.zeros((2, 0))),
        ("float64", (2,), "000000000000f87f000000000000f87f"),
    ),
    # an integer total adds a float32 mean in float32 and truncates the sum (-3 + 0.5 -> -2)
    "int_total_carries": (
        lambda: _run(
            metrics.Mean(dtype="int32"),
            ((np.array([[-3], [3], [-3]], np.int32),), {}),
            ((BOOL,), {}),
            ((BOOL,), {}),
        ),
        ("float32", (), "cdcc4cbe"),
    ),
    "int_same_rank_weights": (
        lambda: _run(
            metrics.Accuracy(dtype="int64"),
            (
                (np.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 5]])),
                {"sample_weight": np.ones((2, 2), int)},
            ),
        ),
        ("float32", (), "0000003f"),
    ),
    # TF's argmax never picks NaN, nor the lowest value after index 0
    "sparse_nan": (
        lambda: metrics.sparse_categorical_accuracy(
            np.array([1, 0, 1, 0]),
            np.array([[NAN, 1.0], [-INF, -INF], [1.0, NAN], [NAN, NAN]], np.float32),
        ),
        ("float32", (4,), "0000803f0000803f000000000000803f"),
    ),
    "categorical_nan": (
        lambda: metrics.categorical_accuracy(
            np.array([[NAN, 1.0], [0.0, 1.0]], np.float32),
            np.array([[0.0, 1.0], [NAN, 1.0]], np.float32),
        ),
        ("float32", (2,), "0000803f0000803f"),
    ),
    "sparse_lowest": (
        lambda: metrics.sparse_categorical_accuracy(
            np.array([1]), np.array([[-INF, np.finfo(np.float32).min]], np.float32)
        ),
        ("float32", (1,), "00000000"),
    ),
}


@pytest.mark.parametrize("case", sorted(LOCAL))
def test_result_bits_are_kerass(case: str) -> None:
    program, expected = LOCAL[case]
    assert _bits(program()) == expected


# name -> (program, Keras's error type, message)
ERRORS: dict[str, tuple[Any, type[Exception], str]] = {
    # the weights are lower rank, so the values were averaged to float32: TF's Mul refuses
    "int_mean_weighted": (
        lambda: metrics.Mean(dtype="int32").update_state([[1, 2], [3, 4]], sample_weight=[1, 0]),
        errors.InvalidArgumentError,
        MUL_FLOAT_INT.format("int32"),
    ),
    "int_accuracy_weighted": (
        lambda: metrics.Accuracy(dtype="int64").update_state(
            np.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 5]]), sample_weight=np.array([1, 1])
        ),
        errors.InvalidArgumentError,
        MUL_FLOAT_INT.format("int64"),
    ),
    "argmax_empty_axis": (
        lambda: metrics.sparse_categorical_accuracy(np.zeros(2), np.zeros((2, 0), np.float16)),
        errors.InvalidArgumentError,
        "{{function_node __wrapped__ArgMax_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
        "Reduction axis -1 is empty in shape [2,0] [Op:ArgMax]",
    ),
    "argmax_empty_batch": (
        lambda: metrics.SparseCategoricalAccuracy().update_state(np.array([], np.int64), []),
        errors.InvalidArgumentError,
        "{{function_node __wrapped__ArgMax_device_/job:localhost/replica:0/task:0/device:CPU:0}} "
        "Reduction axis -1 is empty in shape [0] [Op:ArgMax]",
    ),
    # TF's kernel messages for shapes that do not broadcast, Keras's for a squeeze
    "equal_shapes": (
        lambda: metrics.Accuracy().update_state(np.zeros((2, 3)), np.zeros((2,))),
        errors.InvalidArgumentError,
        CPU.format("Equal") + "Incompatible shapes: [2,3] vs. [2] [Op:Equal] name: ",
    ),
    "sub_shapes": (
        lambda: metrics.mean_squared_error(np.zeros((1, 2, 3)), np.zeros((1, 2))),
        errors.InvalidArgumentError,
        CPU.format("Sub") + "Incompatible shapes: [1,2,3] vs. [1,2] [Op:Sub] name: ",
    ),
    "weights_rank": (
        lambda: metrics.Sum().update_state(np.float32(1), sample_weight=np.ones(2)),
        errors.InvalidArgumentError,
        CPU.format("BroadcastTo")
        + "Rank of input (1) must be no greater than rank of output shape (0). [Op:BroadcastTo]",
    ),
    "weights_incompatible": (
        lambda: metrics.Mean().update_state(np.ones((2, 3)), sample_weight=np.ones((2, 2))),
        errors.InvalidArgumentError,
        CPU.format("BroadcastTo") + "Incompatible shapes: [2,2] vs. [2,3] [Op:BroadcastTo]",
    ),
    "weights_unable": (
        lambda: metrics.Mean().update_state(np.ones((3, 1)), sample_weight=np.ones((3, 0))),
        errors.InvalidArgumentError,
        CPU.format("BroadcastTo")
        + "Unable to broadcast tensor of shape [3,0] to tensor of shape [3,1] [Op:BroadcastTo]",
    ),
    "squeeze": (
        lambda: metrics.categorical_accuracy(np.zeros((0, 7), np.float16), []),
        ValueError,
        "Cannot squeeze axis=-1, because the dimension is not 1.",
    ),
    "mse_bool": (
        lambda: metrics.mean_squared_error(np.array([True]), np.array([False])),
        errors.InvalidArgumentError,
        SUB_BOOL,
    ),
    "mse_0d": (
        lambda: metrics.mean_squared_error(np.float32(1), np.float32(2)),
        errors.InvalidArgumentError,
        MEAN_AXIS,
    ),
    "mse_metric_0d": (
        lambda: metrics.MeanSquaredError().update_state(np.float32(1), np.float32(2)),
        errors.InvalidArgumentError,
        MEAN_AXIS,
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_are_tfs(case: str) -> None:
    program, kind, message = ERRORS[case]
    with pytest.raises(kind) as raised:
        program()
    assert type(raised.value) is kind
    assert getattr(raised.value, "message", str(raised.value)) == message


def test_two_replicas_give_kerass_bits() -> None:
    """MirroredStrategy on two CPU replicas, each replica its own batch; results read in
    cross-replica context."""
    strategy = ds.MirroredStrategy(["/cpu:0", "/cpu:1"])

    def per_replica(a: Any, b: Any) -> Any:
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: (a, b)[ctx.replica_id_in_sync_group]
        )

    with strategy.scope():
        integer, rows, empty = metrics.Mean(dtype="int32"), metrics.Mean(), metrics.Mean()
    first = per_replica(
        np.array([[-3], [3], [-3]], np.int32), np.array([[-3], [-3], [3]], np.int32)
    )
    strategy.run(integer.update_state, args=(first,))
    strategy.run(integer.update_state, args=(per_replica(BOOL, BOOL),))
    strategy.run(integer.update_state, args=(per_replica(BOOL, BOOL),))
    strategy.run(rows.update_state, args=(per_replica(ROWS[:3], ROWS[3:]),))
    zeros = per_replica(np.zeros((2, 0), np.float32), np.zeros((1, 0), np.float32))
    strategy.run(empty.update_state, args=(zeros,))
    assert _bits(integer.result()) == ("float32", (), "cdcc4cbe")
    assert _bits(rows.result()) == ("float32", (), "bf22a940")
    assert _bits(empty.result()) == ("float32", (), "0000c07f")

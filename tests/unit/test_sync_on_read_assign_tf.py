"""A SyncOnRead SUM variable's cross-replica ``assign``, pinned from TF 2.21 (``/tmp/tfvenv``,
``MirroredStrategy(["/cpu:0", "/cpu:1"])`` over two logical CPUs).

TF's ``values_util.on_read_assign_cross_replica`` computes ``math_ops.cast(value /
num_replicas_in_sync, var.dtype)``: the division is Python's own for a Python number (a float,
then ``tf.constant``'s float32 before the cast, even for a float64 or int variable), Python's
``TypeError`` for a list, and the tensor's for an array. Each row: the variable's dtype, the
value, and the bytes TF 2.21 left in each of the two components (or its error).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds

S = mwms_mpi.VariableSynchronization
A = mwms_mpi.VariableAggregation

# TF 2.21: (dtype, value, hex bytes of each component after v.assign(value, read_value=False))
PINS: list[tuple[str, Any, str]] = [
    ("float64", 0.1, "000000a09999a93f"),  # 0.05 through float32
    ("float64", 1 / 3, "000000605555c53f"),
    ("float32", 0.1, "cdcc4c3d"),
    ("float32", 1 / 3, "abaa2a3e"),
    ("float16", 0.1, "662a"),
    ("float16", 1 / 3, "5531"),
    ("int32", 1.5, "00000000"),  # 0.75 cast: no conversion error for a float
    ("int32", 3, "01000000"),
    ("int32", True, "00000000"),
    ("int32", 7.9, "03000000"),
    ("int32", -7.9, "fdffffff"),
    ("int64", 5, "0200000000000000"),
    ("bool", True, "01"),
    ("bool", 1, "01"),
    ("bool", 0.3, "01"),
    ("float64", np.float64(0.1), "9a9999999999a93f"),
    ("float32", np.float64(1 / 3), "abaa2a3e"),
    ("int32", np.float64(7.9), "03000000"),
    ("float32", 3e38, "e6b1e17e"),
    ("int32", 2**40, "00000080"),  # 2**39 as float32, cast to int32
    ("float16", 1e5, "1a7a"),  # 5e4 as float32, then float16: finite
    ("float64", np.float32(0.1), "000000a09999a93f"),
]


@pytest.fixture(scope="module")
def strategy() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _on_read_sum(strategy: Any, dtype: str, shape: tuple[int, ...] = ()) -> Any:
    with strategy.scope():
        return mwms_mpi.Variable(
            np.zeros(shape, dtype), synchronization=S.ON_READ, aggregation=A.SUM
        )


@pytest.mark.parametrize(("dtype", "value", "expected"), PINS)
def test_sum_assign_divides_as_tf(strategy: Any, dtype: str, value: Any, expected: str) -> None:
    v = _on_read_sum(strategy, dtype)
    assert v.assign(value, read_value=False) is None
    components = [np.asarray(c.numpy()) for c in strategy.experimental_local_results(v)]
    assert [c.tobytes().hex() for c in components] == [expected, expected]
    assert all(c.dtype == np.dtype(dtype) for c in components)


@pytest.mark.parametrize("value", [[1.0], (1.0,)])
def test_sum_assign_of_a_sequence_is_python_s_error(strategy: Any, value: Any) -> None:
    # TF: v.assign([1.0]) RAISES TypeError unsupported operand type(s) for /: 'list' and 'int'
    v = _on_read_sum(strategy, "float32", (1,))
    kind = type(value).__name__
    with pytest.raises(TypeError, match=f"unsupported operand type\\(s\\) for /: '{kind}' and"):
        v.assign(value)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sum_assign_out_of_float32_range(strategy: Any, dtype: str) -> None:
    # TF: float32 var assign(1e39) and float64 var assign(1e300) RAISE ValueError Can't convert
    # Python sequence with a value out of range for a double-precision float.
    v = _on_read_sum(strategy, dtype)
    with pytest.raises(ValueError, match="out of range for a double-precision float"):
        v.assign(1e39 if dtype == "float32" else 1e300)

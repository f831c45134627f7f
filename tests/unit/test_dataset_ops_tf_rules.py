"""``enumerate``, ``padded_batch``, ``flat_map``, ``interleave``, ``reduce``, ``take_while``,
``apply``, ``get_single_element``, ``unique`` and ``scan``, pinned to literal TF 2.21 outputs.

Every expectation was printed by ``/tmp/tfvenv/bin/python`` (tensorflow-cpu 2.21.0, eager) running
the expression in the comment above it, with ``D = tf.data.Dataset``, ``R = D.range`` and
``V = R(1, 6).map(lambda x: tf.fill([x], x))`` (rows ``[1]``, ``[2, 2]``, ... ``[5, 5, 5, 5, 5]``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mwms_mpi.data import Dataset, TensorSpec

D = Dataset
R = Dataset.range
I64 = TensorSpec((), np.int64)


def V() -> Dataset:
    return R(1, 6).map(lambda x: np.full((int(x),), x))


def card(ds: Dataset) -> int:
    return int(ds.cardinality())


def items(ds: Dataset) -> list[Any]:
    """Elements as nested lists, each leaf ``(dtype name, value list)``."""

    def one(x: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(one(v) for v in x)
        if isinstance(x, dict):
            return {k: one(v) for k, v in x.items()}
        assert isinstance(x, np.ndarray)
        return (x.dtype.name, x.tolist())

    return [one(x) for x in ds]


# --- enumerate ---------------------------------------------------------------------------------


def test_enumerate_pairs_an_int64_counter_from_start() -> None:
    # R(5).enumerate(3): (3, 0) ... (7, 4); spec (TensorSpec((), int64),) * 2; cardinality 5
    ds = R(5).enumerate(3)
    assert items(ds) == [(("int64", 3 + i), ("int64", i)) for i in range(5)]
    assert ds.element_spec == (I64, I64) and card(ds) == 5
    # D.from_tensor_slices(([1, 2], [3., 4.])).enumerate(): (0, (1, 3.0)), (1, (2, 4.0))
    ds = D.from_tensor_slices(([1, 2], [3.0, 4.0])).enumerate()
    assert items(ds) == [
        (("int64", 0), (("int32", 1), ("float32", 3.0))),
        (("int64", 1), (("int32", 2), ("float32", 4.0))),
    ]
    assert ds.element_spec == (I64, (TensorSpec((), np.int32), TensorSpec((), np.float32)))
    # R(3).enumerate(np.uint8(3)) -> counters 3, 4, 5; R(3).enumerate(True) -> 1, 2, 3
    assert [int(i) for i, _ in R(3).enumerate(np.uint8(3))] == [3, 4, 5]
    assert [int(i) for i, _ in R(3).enumerate(True)] == [1, 2, 3]


def test_enumerate_counter_ends_at_the_int64_maximum_cardinality_stays_the_inputs() -> None:
    # R(3).enumerate(2**63-2): one element (9223372036854775806, 0), cardinality 3
    ds = R(3).enumerate(2**63 - 2)
    assert items(ds) == [(("int64", 2**63 - 2), ("int64", 0))] and card(ds) == 3
    # R(3).enumerate(2**63-1): no element, cardinality 3
    assert items(R(3).enumerate(2**63 - 1)) == [] and card(R(3).enumerate(2**63 - 1)) == 3
    # R(3).repeat().enumerate().cardinality() -> -1; D.range(0, 2**63-1).cardinality() -> -1;
    # D.range(0, 2**63-2).cardinality() -> 9223372036854775806
    assert card(R(3).repeat().enumerate()) == -1
    assert card(R(0, 2**63 - 1)) == -1 and card(R(5, 2**63 - 1, 3)) == -1
    assert card(R(0, 2**63 - 2)) == 2**63 - 2


def test_enumerate_argument_errors() -> None:
    # R(3).enumerate(2.5): TypeError 'Cannot convert 2.5 to EagerTensor of dtype int64'
    with pytest.raises(TypeError, match=r"Cannot convert 2\.5 to EagerTensor of dtype int64"):
        R(3).enumerate(2.5)
    # R(3).enumerate(None): ValueError 'Attempt to convert a value (None) ...'
    with pytest.raises(ValueError, match=r"Attempt to convert a value \(None\)"):
        R(3).enumerate(None)
    # R(3).enumerate(2**63), D.range(2**63): ValueError "Can't convert Python sequence with
    # out-of-range integer to Tensor."
    for make in (lambda: R(3).enumerate(2**63), lambda: R(2**63), lambda: R(1, 2**63)):
        with pytest.raises(ValueError, match="out-of-range integer to Tensor"):
            make()

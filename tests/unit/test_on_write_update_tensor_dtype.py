"""A MirroredVariable's replica-context update assigns what TF's aggregation made a tensor
without a cast, pinned from TF 2.21 (``/tmp/tfvenv``, ``MirroredStrategy(["/cpu:0",
"/cpu:1"])`` over two logical CPUs).

TF's ``_on_write_update_replica`` aggregates in a ``merge_call`` (ONLY_FIRST_REPLICA:
``broadcast_to`` the first replica's value, which passes Python numbers through; SUM/MEAN:
``reduce_to``), then ``assign``s the result. A numpy array given to ``assign`` directly is cast
(TF casts numpy input), but one TF's broadcast or reduction has made a tensor is not: another
dtype raises ``ValueError``. MultiWorkerMirroredStrategy's one-replica SUM is in
``tests/mpi/test_on_write_update_tensor_dtype.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds

A = mwms_mpi.VariableAggregation


@pytest.fixture(scope="module")
def strategy() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _run(strategy: Any, dtype: str, shape: tuple[int, ...], aggregation: Any, fn: Any) -> Any:
    with strategy.scope():
        v = mwms_mpi.Variable(np.zeros(shape, dtype), aggregation=aggregation)
    strategy.run(lambda: fn(v))
    return [np.asarray(c.numpy()).tobytes().hex() for c in strategy.experimental_local_results(v)]


def _replica_float32() -> np.float32:
    """A value each replica makes anew (so the replicas' values are not one object)."""
    ctx = ds.get_replica_context()
    assert ctx is not None
    return np.float32(1.5)


REFUSED: list[tuple[str, tuple[int, ...], Any, Callable[[Any], Any], str]] = [
    (
        "float32",
        (2,),
        A.ONLY_FIRST_REPLICA,
        lambda v: v.assign(np.array([1.5, 2.5])),
        "Tensor conversion requested dtype float32 for Tensor with dtype float64: <tf.Tensor: "
        "shape=(2,), dtype=float64, numpy=array([1.5, 2.5])>",
    ),
    (
        "float64",
        (),
        A.ONLY_FIRST_REPLICA,
        lambda v: v.assign_add(np.int32(3)),
        "Tensor conversion requested dtype float64 for Tensor with dtype int32: <tf.Tensor: "
        "shape=(), dtype=int32, numpy=3>",
    ),
    (
        "int32",
        (2, 3),
        A.ONLY_FIRST_REPLICA,
        lambda v: v.assign(np.ones((2, 3), np.int64)),
        "Tensor conversion requested dtype int32 for Tensor with dtype int64: <tf.Tensor: "
        "shape=(2, 3), dtype=int64, numpy=\narray([[1, 1, 1],\n       [1, 1, 1]])>",
    ),
    (
        "float64",
        (),
        A.MEAN,
        lambda v: v.assign(_replica_float32()),
        "Tensor conversion requested dtype float64 for Tensor with dtype float32: <tf.Tensor: "
        "shape=(), dtype=float32, numpy=1.5>",
    ),
]


@pytest.mark.parametrize(("dtype", "shape", "aggregation", "fn", "message"), REFUSED)
def test_aggregated_value_of_another_dtype_is_refused(
    strategy: Any, dtype: str, shape: tuple[int, ...], aggregation: Any, fn: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _run(strategy, dtype, shape, aggregation, fn)


def test_python_numbers_and_shared_values_are_still_cast(strategy: Any) -> None:
    # TF: ONLY_FIRST_REPLICA float64 assign_add(np.float64(1.5)) -> 1.5 (a float subclass: the
    # broadcast's fast path); assign_add(2) -> 2.0; MEAN float64 assign_add(1) -> 1.0 (one value
    # for both replicas: returned as it is, then converted to the variable's dtype)
    only_first = A.ONLY_FIRST_REPLICA
    assert (
        _run(strategy, "float64", (), only_first, lambda v: v.assign_add(np.float64(1.5)))
        == ["000000000000f83f"] * 2
    )
    assert (
        _run(strategy, "float64", (), only_first, lambda v: v.assign_add(2))
        == ["0000000000000040"] * 2
    )
    assert (
        _run(strategy, "float64", (), A.MEAN, lambda v: v.assign_add(1)) == ["000000000000f03f"] * 2
    )

"""MultiWorkerMirroredStrategy (one replica per worker): a MirroredVariable's replica-context
SUM update assigns the reduced tensor without a cast.

TF 2.21, one worker (``MultiWorkerMirroredStrategy()`` without TF_CONFIG): ``reduce_to(SUM,
value)`` of a value that is no ``DistributedValues`` broadcasts it as a tensor
(``reduce_non_distributed_value``'s one-replica branch), so ``step.assign_add(1)`` on an int64
variable raises; with several workers the value goes through the collective (TF's
``_make_tensor_into_per_replica`` converts it first), the same tensor. ONLY_FIRST_REPLICA
passes a Python number through (TF's ``_broadcast_to`` fast path) but not a list.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import mwms_mpi

pytestmark = pytest.mark.mpi

A = mwms_mpi.VariableAggregation


def _variable(strategy: Any, dtype: str, shape: tuple[int, ...], aggregation: Any) -> Any:
    with strategy.scope():
        return mwms_mpi.Variable(np.zeros(shape, dtype), aggregation=aggregation)


def test_reduced_python_values_keep_their_own_dtype(strategy: Any) -> None:
    if len(strategy.extended.worker_devices) != 1:
        pytest.skip("one replica per worker: with k=2 the value is refused before (SUM of one)")
    # TF: int64 SUM, assign_add(1) RAISES ValueError Tensor conversion requested dtype int64
    # for Tensor with dtype int32: <tf.Tensor: shape=(), dtype=int32, numpy=1>
    v = _variable(strategy, "int64", (), A.SUM)
    message = "Tensor conversion requested dtype int64 for Tensor with dtype int32: <tf.Tensor: "
    with pytest.raises(ValueError, match=re.escape(message)):
        strategy.run(lambda: v.assign_add(1))
    # TF: float64 SUM, assign([1.5, 2.5]) RAISES ValueError Tensor conversion requested dtype
    # float64 for Tensor with dtype float32: <tf.Tensor: shape=(2,), dtype=float32, ...
    w = _variable(strategy, "float64", (2,), A.SUM)
    with pytest.raises(ValueError, match=re.escape("dtype float64 for Tensor with dtype float32")):
        strategy.run(lambda: w.assign([1.5, 2.5]))
    # TF (one worker): float16 SUM, assign(True) RAISES ValueError ... dtype float16 for Tensor
    # with dtype bool: <tf.Tensor: shape=(), dtype=bool, numpy=True> (across workers the bool
    # meets TF's collective dtype check first: InvalidArgumentError)
    if strategy.extended.communicator is None:
        h = _variable(strategy, "float16", (), A.SUM)
        with pytest.raises(ValueError, match=re.escape("dtype bool: <tf.Tensor: shape=()")):
            strategy.run(lambda: h.assign(True))


def test_only_first_replica_passes_python_numbers_through(strategy: Any) -> None:
    if len(strategy.extended.worker_devices) != 1:
        pytest.skip("one replica per worker (the configuration TF's output was taken in)")
    # TF (one worker): float64 ONLY_FIRST_REPLICA assign_add(2) -> 2.0; assign([1.5, 2.5]) on a
    # float16 variable RAISES ValueError ... dtype float16 for Tensor with dtype float32
    v = _variable(strategy, "float64", (), A.ONLY_FIRST_REPLICA)
    strategy.run(lambda: v.assign_add(2))
    assert [float(c.numpy()) for c in strategy.experimental_local_results(v)] == [2.0]
    w = _variable(strategy, "float16", (2,), A.ONLY_FIRST_REPLICA)
    with pytest.raises(ValueError, match=re.escape("dtype float16 for Tensor with dtype float32")):
        strategy.run(lambda: w.assign([1.5, 2.5]))

"""MultiWorkerMirroredStrategy with one worker and one replica: TF's ``batch_reduce`` shortcut
(``CrossDeviceOps.batch_reduce``: one worker, one value per pair) regroups the values
themselves, so a distributed variable comes back as itself (TF 2.21,
``MultiWorkerMirroredStrategy()`` without TF_CONFIG).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi

pytestmark = pytest.mark.mpi

A = mwms_mpi.VariableAggregation


def test_one_worker_batch_reduce_to_returns_the_variables(strategy: Any) -> None:
    if strategy.extended.communicator is not None or len(strategy.extended.worker_devices) != 1:
        pytest.skip("TF's batch_reduce shortcut: one worker with one replica")
    # TF (one worker): batch_reduce_to("SUM", [(m, m), (s, s)]) with m a MirroredVariable and
    # s a SyncOnReadVariable -> [m, s] themselves (regroup of each one-replica value's
    # components); MEAN alike; reduce_to(SUM, s, s) -> a tensor (TF's reduce shortcut reads
    # with identity)
    with strategy.scope():
        m = mwms_mpi.Variable([1.0, 2.0], aggregation=A.SUM)
        s = mwms_mpi.Variable(
            3.0, synchronization=mwms_mpi.VariableSynchronization.ON_READ, aggregation=A.SUM
        )
    result = strategy.extended.batch_reduce_to("SUM", [(m, m), (s, s)])
    assert result[0] is m and result[1] is s
    assert strategy.extended.batch_reduce_to("MEAN", [(m, m)])[0] is m
    assert isinstance(strategy.extended.reduce_to("SUM", s, s), np.ndarray)

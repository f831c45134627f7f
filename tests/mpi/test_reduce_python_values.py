"""Python numbers in MultiWorkerMirroredStrategy's reductions, as TF 2.21 (a differential
fuzz's finding): they are no destinations, and ``ReplicaContext.all_reduce`` hands them over
unconverted (TF's ``_batch_reduce_destination`` is the value itself), so TF refuses them.

TF 2.21 with one worker (no ``TF_CONFIG``) raises the ValueError below for each program; we
reduced them (``all_reduce("SUM", 1.5)`` gave float32 1.5 at world size 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds

pytestmark = pytest.mark.mpi

_NOT_A_DESTINATION = (
    "destinations must be one of a `DistributedValues` object, a tf.Variable object, or a device "
    "string."
)


@pytest.mark.parametrize("leaf", [1.5, 2, [1.0, 2]])
@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_all_reduce_of_a_python_number_is_refused(strategy: Any, op: str, leaf: Any) -> None:
    with pytest.raises(ValueError) as info:
        strategy.run(lambda: ds.get_replica_context().all_reduce(op, leaf))
    assert str(info.value) == _NOT_A_DESTINATION


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_a_python_number_is_no_destination(strategy: Any, op: str) -> None:
    one = np.array(1.5, np.float32)
    for call in (
        lambda: strategy.extended.batch_reduce_to(op, [(one, 1.5)]),
        lambda: strategy.extended.batch_reduce_to(op, [(1.5, 1.5)]),
        lambda: strategy.extended.broadcast_to(one, 1.5),
    ):
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == _NOT_A_DESTINATION


@pytest.mark.parametrize("leaf", [1.5, 3, [1.0, 2]])
def test_all_gather_of_a_python_number_is_refused(strategy: Any, leaf: Any) -> None:
    # TF 2.21 (one worker): the number is its own destination, which TF's gather refuses
    with pytest.raises(ValueError) as info:
        strategy.run(lambda: ds.get_replica_context().all_gather(leaf, 0))
    assert str(info.value) == _NOT_A_DESTINATION

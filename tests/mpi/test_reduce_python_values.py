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


# One replica in all (one worker, k = 1): TF 2.21 with no TF_CONFIG. Python strings convert
# as tf.constant does (tf.string), and destination strings are parsed as TF parses devices.


def _one_replica(strategy: Any) -> None:
    if strategy.num_replicas_in_sync != 1:
        pytest.skip("TF 2.21's outputs pinned for one replica in all")


@pytest.mark.parametrize(("value", "expected"), [("", b""), ("ab", b"ab"), (b"x", b"x")])
def test_a_python_string_sums_to_a_string_on_one_replica(
    strategy: Any, value: Any, expected: bytes
) -> None:
    _one_replica(strategy)
    got = strategy.reduce("SUM", value, None)  # we raised ValueError (no tensor)
    assert isinstance(got, np.ndarray) and got.shape == () and got.item() == expected
    assert strategy.reduce("MEAN", value, None) == value  # TF returns the value itself


def test_a_string_leaf_of_all_reduce_is_its_own_destination(strategy: Any) -> None:
    _one_replica(strategy)
    with pytest.raises(ValueError) as info:
        strategy.run(lambda: ds.get_replica_context().all_reduce("SUM", "a"))
    assert str(info.value) == (
        "Unknown attribute 'a' is encountered while parsing the device spec: 'a'."
    )
    got = strategy.run(lambda: ds.get_replica_context().all_reduce("SUM", "/cpu:0"))
    assert isinstance(got, np.ndarray) and got.item() == b"/cpu:0"


def test_destinations_are_read_as_tf_reads_them(strategy: Any) -> None:
    _one_replica(strategy)
    ints = strategy.experimental_distribute_values_from_function(lambda c: 1)
    with pytest.raises(ValueError) as info:
        strategy.extended.reduce_to("SUM", 1.0, "gpu:0/cpu:0")  # we returned 1.0
    assert str(info.value) == (
        "Multiple device types are not allowed while parsing the device spec: gpu:0/cpu:0."
    )
    for call in (  # we reduced these
        lambda: strategy.extended.reduce_to("SUM", ints, ints),
        lambda: strategy.extended.batch_reduce_to("SUM", [(ints, "/cpu:0")]),
        lambda: strategy.extended.batch_reduce_to(
            "MEAN", [(np.float32(1), "/cpu:0"), (ints, "/cpu:0")]
        ),
    ):
        with pytest.raises(AttributeError) as err:
            call()
        assert str(err.value) == "'int' object has no attribute 'device'"
    assert strategy.extended.reduce_to("MEAN", ints, ints) == 1  # TF: the value, unread

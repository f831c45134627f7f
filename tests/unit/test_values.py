"""DistributedValues, regroup/select_replica and IndexedSlices: TF's structure rules."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from mwms_mpi.values import (
    IndexedSlices,
    Mirrored,
    PerReplica,
    is_mirrored,
    regroup,
    select_replica,
    select_replica_mirrored,
)
from mwms_mpi.values.indexed_slices import to_dense


def test_values_and_str_like_tf() -> None:
    pr = PerReplica((1, 2))
    assert pr.values == (1, 2) and pr._primary == 1
    assert str(pr) == "PerReplica:{\n  0: 1,\n  1: 2\n}"
    assert is_mirrored(Mirrored((1,))) and not is_mirrored(pr)


def test_mirrored_delegates_attributes_to_the_primary() -> None:
    m = Mirrored((np.zeros((2, 3)), np.zeros((2, 3))))
    assert m.shape == (2, 3) and m.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(m), np.zeros((2, 3)))


def test_regroup_nests_and_unwraps_identical_leaves() -> None:
    a, b = object(), object()
    same = object()
    out = regroup(({"x": [a], "y": (same,)}, {"x": [b], "y": (same,)}))
    assert isinstance(out["x"], list) and isinstance(out["x"][0], PerReplica)
    assert out["x"][0].values == (a, b)
    assert out["y"] == (same,)
    assert isinstance(regroup((same, same), always_wrap=True), PerReplica)
    assert regroup((a,)) is a


def test_regroup_keeps_namedtuples_and_wrap_class() -> None:
    Point = collections.namedtuple("Point", "x y")
    out = regroup((Point(1, 2), Point(3, 4)), Mirrored)
    assert isinstance(out, Point) and isinstance(out.x, Mirrored) and out.y.values == (2, 4)


def test_regroup_rejects_different_structures() -> None:
    # TF's regroup asserts (MirroredTwoDeviceDistributionTest.testRunRegroupError)
    with pytest.raises(AssertionError, match="different structures"):
        regroup(([1, 2], [1]))
    with pytest.raises(AssertionError, match="different structures"):
        regroup(({"a": 1}, {"b": 1}))


def test_select_replica() -> None:
    nest = {"a": PerReplica((1, 2)), "b": [Mirrored((3, 4)), 5]}
    assert select_replica(1, nest) == {"a": 2, "b": [4, 5]}
    assert select_replica(0, PerReplica((7, 8))) == 7
    assert select_replica_mirrored(1, [Mirrored((3, 4))]) == [4]
    with pytest.raises(TypeError, match="mirrored"):
        select_replica_mirrored(0, [PerReplica((1, 2))])


def test_indexed_slices_attributes_and_dense() -> None:
    s = IndexedSlices(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([2, 2]), np.array([3, 2]))
    assert s.dtype == np.float64 and s.shape == (3, 2)
    np.testing.assert_array_equal(to_dense(s), [[0, 0], [0, 0], [4, 6]])
    np.testing.assert_array_equal(np.asarray(s), to_dense(s))
    assert (-s).values[0, 0] == -1.0
    assert repr(s).startswith("IndexedSlices(indices=[2 2], values=")
    assert IndexedSlices(s.values, s.indices).shape is None
    with pytest.raises(ValueError):
        to_dense(IndexedSlices(s.values, s.indices))

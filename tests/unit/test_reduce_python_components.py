"""MirroredStrategy's ``reduce`` of per-replica values whose components are Python values, as
TF 2.21 (a differential fuzz's finding).

TF's ``MirroredExtended._reduce_to`` first asks where each ``DistributedValues`` lives
(``cross_device_ops._devices_match`` reads every component's ``.device``): a Python number,
string, ``None`` or list has none, so TF 2.21 (two logical CPUs) raises the ``AttributeError``
pinned below for each program. We reduced them (``reduce("SUM", ...)`` of ``1 + replica_id``
gave int32 3) or raised another error (``ValueError``, ``InvalidArgumentError``).
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi.values import PerReplica

_NT = collections.namedtuple("_NT", "a b")


@pytest.fixture(scope="module")
def m2() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.mark.parametrize(
    ("component", "kind"),
    [
        (lambda c: 1 + c.replica_id_in_sync_group, "int"),
        (lambda c: 0, "int"),  # no all-zeros shortcut for a DistributedValues
        (lambda c: 1.5, "float"),
        (lambda c: True, "bool"),
        (lambda c: "a", "str"),
        (lambda c: b"x", "bytes"),
        (lambda c: None, "NoneType"),
        (lambda c: 1j, "complex"),
        (lambda c: [1, 2], "int"),  # regrouped: a list of PerReplica of ints
        (lambda c: (np.float32(1), 2), "int"),  # the array's PerReplica is fine, the int's not
        (lambda c: _NT(1.5, 2), "float"),
        (lambda c: {"a": 1}, "int"),
        # one replica's Python value is enough, whichever replica it is
        (lambda c: 1 if c.replica_id_in_sync_group == 0 else np.int32(2), "int"),
        (lambda c: np.int32(2) if c.replica_id_in_sync_group == 0 else 1, "int"),
    ],
)
@pytest.mark.parametrize("op", ["SUM", "MEAN"])
@pytest.mark.parametrize("wrap", [lambda v: v, lambda v: [v], lambda v: {"k": (v,)}])
def test_a_python_component_has_no_device(
    m2: ds.MirroredStrategy, op: str, wrap: Any, component: Any, kind: str
) -> None:
    value = m2.experimental_distribute_values_from_function(component)
    with pytest.raises(AttributeError) as info:
        m2.reduce(op, wrap(value), None)
    assert str(info.value) == f"'{kind}' object has no attribute 'device'"


def test_reduce_to_reads_the_devices_too(m2: ds.MirroredStrategy) -> None:
    value = m2.experimental_distribute_values_from_function(lambda c: 2.5)
    with pytest.raises(AttributeError) as info:
        m2.extended.reduce_to("SUM", value, "/cpu:0")
    assert str(info.value) == "'float' object has no attribute 'device'"


def test_a_list_component_is_named(m2: ds.MirroredStrategy) -> None:
    # a PerReplica built directly (no regroup) holds the lists themselves
    with pytest.raises(AttributeError) as info:
        m2.reduce("SUM", PerReplica(([1], [2])), None)
    assert str(info.value) == "'list' object has no attribute 'device'"


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_array_components_still_reduce(m2: ds.MirroredStrategy, op: str) -> None:
    # TF 2.21: numpy arrays and scalars have a .device (numpy 2): these reduce as before
    value = m2.experimental_distribute_values_from_function(
        lambda c: (np.float32(1.5), np.array([1, 2], np.int64))
    )
    got = m2.reduce(op, value, None)
    assert got[0].dtype == np.float32 and got[0].tobytes().hex() == (
        "00004040" if op == "SUM" else "0000c03f"
    )
    assert got[1].dtype == (np.int64 if op == "SUM" else np.float64)
    assert got[1].tobytes().hex() == (
        "02000000000000000400000000000000" if op == "SUM" else "000000000000f03f0000000000000040"
    )

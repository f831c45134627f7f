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
from mwms_mpi import errors
from mwms_mpi.distribute.cross_device_ops import reduce_non_distributed_value
from mwms_mpi.types import ReduceOp
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


_ADD_N = (
    "Value for attr 'T' of {} is not in the list of allowed values: float, double, int32, "
    "uint8, int16, int8, complex64, int64, qint8, quint8, qint32, bfloat16, qint16, quint16, "
    "uint16, complex128, half, uint32, uint64, variant\n\t; NodeDef: {{{{node AddN}}}}; "
    "Op<name=AddN; signature=inputs:N*T -> sum:T; attr=N:int,min=1; attr=T:type,allowed=["
    "DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8, DT_COMPLEX64, DT_INT64, "
    "DT_QINT8, DT_QUINT8, DT_QINT32, DT_BFLOAT16, DT_QINT16, DT_QUINT16, DT_UINT16, "
    "DT_COMPLEX128, DT_HALF, DT_UINT32, DT_UINT64, DT_VARIANT]; is_commutative=true; "
    "is_aggregate=true> [Op:AddN] name: "
)


@pytest.mark.parametrize(
    ("component", "name"),
    [
        (np.array(b"s"), "string"),  # we returned b's' (one replica's string)
        (np.array([b"a", b"b"]), "string"),
        (np.array(True), "bool"),  # the message was ours ("bool values cannot be summed")
    ],
)
@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_add_n_refuses_strings_and_bools(
    m2: ds.MirroredStrategy, op: str, component: Any, name: str
) -> None:
    # TF 2.21: M2's in-process sum is AddN, which has no string or bool kernel (MEAN too)
    value = m2.experimental_distribute_values_from_function(lambda c: component)
    with pytest.raises(errors.InvalidArgumentError) as info:
        m2.reduce(op, value, None)
    assert str(info.value) == _ADD_N.format(name)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", b""), ("ab", b"ab"), (b"x", b"x"), ("\u00e9", b"\xc3\xa9")],
)
def test_a_python_string_is_tf_string_when_summed_on_one_replica(value: Any, expected: Any) -> None:
    # TF 2.21: cross_device_ops.reduce_non_distributed_value(SUM, "", "/cpu:0", 1) is a
    # tf.string tensor b""; we raised ValueError (the string was no tensor); MEAN returns the
    # value itself (TF too)
    got = reduce_non_distributed_value(ReduceOp.SUM, value, "/cpu:0", 1)
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype.kind == "S"
    assert got.item() == expected
    assert reduce_non_distributed_value(ReduceOp.MEAN, value, "/cpu:0", 1) is value


# TF's get_devices_from: where TF canonicalizes destinations (and the values beside them), a
# Python component or a string that is no device spec fails. TF 2.21's outputs; before, we
# reduced these (or raised another error)


def _ints(strategy: Any) -> Any:
    return strategy.experimental_distribute_values_from_function(lambda c: 1)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (  # M2 batch_reduce_to of a Python component: TF reads its dtype first
            lambda s: s.extended.batch_reduce_to("SUM", [(_ints(s), "/cpu:0")]),
            AttributeError,
            "'int' object has no attribute 'dtype'",
        ),
        (  # a tuple has no dtype either (we converted it)
            lambda s: s.extended.batch_reduce_to("MEAN", [(("", "c"), "/cpu:0")]),
            AttributeError,
            "'tuple' object has no attribute 'dtype'",
        ),
        (
            lambda s: s.extended.batch_reduce_to("SUM", [({"a": np.float32(1)}, "/cpu:0")]),
            AttributeError,
            "'dict' object has no attribute 'dtype'",
        ),
        (  # int32: reduced to one device, whose destinations are read (we returned [2, 2])
            lambda s: s.extended.batch_reduce_to(
                "SUM",
                [(s.experimental_distribute_values_from_function(lambda c: np.int32(1)), _ints(s))],
            ),
            AttributeError,
            "'int' object has no attribute 'device'",
        ),
        (  # one value on one worker: TF's shortcut parses the destination string
            lambda s: s.extended.batch_reduce_to("SUM", [(np.float32(1), "a")]),
            ValueError,
            "Unknown attribute 'a' is encountered while parsing the device spec: 'a'.",
        ),
        (
            lambda s: s.extended.reduce_to("MEAN", _ints(s), _ints(s)),
            AttributeError,
            "'int' object has no attribute 'device'",
        ),
    ],
)
def test_m2_reads_the_devices_as_tf(
    m2: ds.MirroredStrategy, call: Any, error: Any, message: str
) -> None:
    with pytest.raises(error) as info:
        call(m2)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("destinations", "message"),
    [
        ("a", "Unknown attribute 'a' is encountered while parsing the device spec: 'a'."),
        (
            "gpu:0/cpu:0",
            "Multiple device types are not allowed while parsing the device spec: gpu:0/cpu:0.",
        ),
        (
            "xla_cpu:0",
            "Unknown attribute 'xla_cpu' is encountered while parsing the device spec: "
            "'xla_cpu:0'.",
        ),
        ("/device:CPU:x", "invalid literal for int() with base 10: 'x'"),
    ],
)
def test_one_replica_sum_parses_its_destination(destinations: str, message: str) -> None:
    # TF 2.21, MultiWorkerMirroredStrategy at one worker: reduce_to("SUM", 1.0, "a") raises
    # this (reduce_non_distributed_value broadcasts to the destinations' devices); we
    # returned 1.0. A MEAN returns the value, destinations unread (TF too).
    with pytest.raises(ValueError) as info:
        reduce_non_distributed_value(ReduceOp.SUM, 1.0, destinations, 1)
    assert str(info.value) == message
    assert reduce_non_distributed_value(ReduceOp.MEAN, 1.0, destinations, 1) == 1.0


@pytest.mark.parametrize(
    "destinations", ["/cpu:0", "cpu:*", "/job:localhost/replica:0/task:0/device:CPU:0", "/gpu:1"]
)
def test_device_strings_still_parse(destinations: str) -> None:
    got = reduce_non_distributed_value(ReduceOp.SUM, 1.5, destinations, 1)
    assert got.dtype == np.float32 and got.tobytes().hex() == "0000c03f"


def test_one_replica_sum_reads_a_per_replica_destination() -> None:
    # TF 2.21 (one worker): reduce_to("SUM", tf.constant(1.0), PerReplica of Python ints)
    with pytest.raises(AttributeError) as info:
        reduce_non_distributed_value(ReduceOp.SUM, np.float32(1), PerReplica((1,)), 1)
    assert str(info.value) == "'int' object has no attribute 'device'"


_STRING_SUM = (
    "Value passed to parameter 'input' has DataType string not in list of allowed values: "
    "float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, "
    "bfloat16, qint16, quint16, uint16, complex128, float16, uint32, uint64"
)


@pytest.mark.parametrize(
    ("op", "value", "axis"),
    [
        ("SUM", "", -1),  # we raised ValueError "Invalid reduction dimension -1 ..."
        ("MEAN", "", 0),
        ("SUM", np.array(b"s"), -1),
        ("SUM", "ab", (0,)),
        ("MEAN", np.array([b"a", b"b"]), 0),
    ],
)
def test_reduce_along_an_axis_refuses_strings_first(
    m2: ds.MirroredStrategy, op: str, value: Any, axis: Any
) -> None:
    # TF 2.21 (M2, MWMS at one worker, the default strategy alike): the reduce_sum in TF's
    # tf.function refuses the dtype before it reads the axis; TF's message is wrapped in
    # "in user code:" (its tf.function), ours is the inner message
    for strategy in (m2, ds.get_strategy()):
        with pytest.raises(TypeError) as info:
            strategy.reduce(op, value, axis)
        assert str(info.value) == _STRING_SUM


@pytest.mark.parametrize("value", [np.float32(1.5), 1.0, "ab", np.array([1, 2], np.int32)])
def test_the_default_strategy_does_not_broadcast(value: Any) -> None:
    # TF 2.21: _DefaultDistributionExtended._broadcast_to raises NotImplementedError("TODO")
    # for any destinations that broadcast_to lets through; we returned the value
    with pytest.raises(NotImplementedError) as info:
        ds.get_strategy().extended.broadcast_to(value, "/cpu:0")
    assert str(info.value).startswith("TODO: ")  # TF's "TODO", explained

"""Reductions and loss helpers against TF 2.21, bit for bit (a differential fuzz's findings).

Every expected value below is TF 2.21's output for the same program, pinned as bytes.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import pytest

import mwms_mpi.distribute as ds
from mwms_mpi import IndexedSlices, VariableAggregation, errors, nn


def test_scale_regularization_loss_adds_in_tfs_order() -> None:
    # tf.nn.scale_regularization_loss(tf.constant(x)) outside a strategy: TF's reduce_sum
    # order gives 0x401e8999d68e1e50; numpy's pairwise sum gave one ulp more (...1e51).
    x = np.frombuffer(
        bytes.fromhex("aa769c32847b1bc081e8384861ff02c04f14559f5e0d2a403ac139dd22d40e40"),
        np.float64,
    ).reshape(2, 2)
    got = nn.scale_regularization_loss(x)
    assert got.dtype == np.float64 and got.shape == ()
    assert got.tobytes().hex() == "501e8ed699891e40"


def _m2() -> Any:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def _range_error(start: int, end: int) -> str:
    """TF's message when its all_gather permutation ``range(axis)`` / ``range(axis + 1, rank)``
    fails (the second range's node reads the rank)."""
    node, limit = (
        ("allgather/range", "allgather/range/limit")
        if start == 0
        else ("allgather/range_1", "allgather/Rank")
    )
    return (
        f"Requires start <= limit when delta > 0: {start}/{end} for '{{{{node {node}}}}} = "
        f"Range[Tidx=DT_INT32]({node}/start, {limit}, {node}/delta)' with input shapes: [], [], "
        f"[] and with computed input tensors: input[0] = <{start}>, input[1] = <{end}>, "
        "input[2] = <1>."
    )


@pytest.mark.parametrize(
    ("value", "axis", "bounds"),
    [
        (np.ones((2, 2), np.float32), -1, (0, -1)),  # TF raises; we gathered along the last axis
        (np.ones((2, 2), np.float32), 2, (3, 2)),
        (np.float32(1), 0, (1, 0)),
        (np.int16(1), 0, (1, 0)),  # the permutation fails before the dtype check
        (np.ones(1, np.int16), -1, (0, -1)),
    ],
)
def test_gather_axis_is_checked_as_tfs_permutation(value: Any, axis: int, bounds: Any) -> None:
    # TF 2.21 at MirroredStrategy over two CPUs: ValueError from the Range op building the
    # permutation that moves `axis` to the front, for Strategy.gather and all_gather alike.
    s = _m2()
    pr = s.experimental_distribute_values_from_function(lambda _: np.array(value))
    with pytest.raises(ValueError) as info:
        s.gather(pr, axis=axis)
    assert str(info.value) == _range_error(*bounds)
    with pytest.raises(ValueError) as info:
        s.run(lambda: ds.get_replica_context().all_gather(np.array(value), axis))
    assert str(info.value) == _range_error(*bounds)


def test_gather_in_range_still_concatenates() -> None:
    s = _m2()
    got = s.experimental_local_results(
        s.run(lambda: ds.get_replica_context().all_gather(np.array([1.0, 2.0], np.float32), 0))
    )
    assert [g.tolist() for g in got] == [[1.0, 2.0, 1.0, 2.0]] * 2  # TF 2.21


NT = collections.namedtuple("NT", ["a", "b"])


@pytest.mark.parametrize("config", ["M2", "default"])
@pytest.mark.parametrize(
    ("value", "name"),
    [
        (lambda: [1.0, 2.0], "list"),
        (lambda: [], "list"),
        (lambda: [[1, 2], [3, 4]], "list"),
        (lambda: (np.ones(2, np.float32), np.ones(2, np.float32)), "tuple"),
        (lambda: NT(np.ones(2, np.float32), np.ones(2, np.float32)), "NT"),
    ],
)
def test_reduce_mean_with_axis_of_a_python_value_raises_as_tf(
    config: str, value: Any, name: str
) -> None:
    # TF 2.21: its mean helper reads ``v.shape`` after the reduce_sum, so a Python list, tuple
    # or namedtuple raises AttributeError (at M2 and under the default strategy); SUM of the
    # same values succeeds. We averaged the packed value.
    s = _m2() if config == "M2" else ds.get_strategy()
    for axis in (0, -1):
        with pytest.raises(AttributeError, match=f"^'{name}' object has no attribute 'shape'$"):
            s.reduce("MEAN", value(), axis=axis)
    got = s.reduce("SUM", [[1, 2], [3, 4]], axis=0)
    assert got.dtype == np.int32 and got.tolist() == ([8, 12] if config == "M2" else [4, 6])


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_reduce_with_a_list_axis_raises_as_tf(op: str) -> None:
    # TF 2.21 looks the axis up in its per-axis function cache (a dict) first: TypeError
    # "unhashable type: 'list'" for a list, even for an array; we reduced along it.
    for s, expected in (
        (_m2(), {"SUM": 6.0, "MEAN": 1.5}),
        (ds.get_strategy(), {"SUM": 3.0, "MEAN": 1.5}),
    ):
        pr = s.experimental_distribute_values_from_function(
            lambda _: np.array([1.0, 2.0], np.float32)
        )
        with pytest.raises(TypeError, match=r"^unhashable type: 'list'$"):
            s.reduce(op, pr, axis=[0])
        got = s.reduce(op, pr, axis=(0,))  # a tuple is hashable: TF reduces
        assert got.dtype == np.float32 and got.shape == () and float(got) == expected[op]


@pytest.mark.parametrize("config", ["M2", "default"])
def test_reduce_to_asserts_destinations_before_the_op_as_tf(config: str) -> None:
    # TF 2.21 (M2 and the default strategy): `assert not isinstance(destinations, (list,
    # tuple))` then `assert not isinstance(reduce_op, VariableAggregation)`, before the op is
    # parsed: AssertionError each time. We raised ValueError (and parsed the op first).
    s = _m2() if config == "M2" else ds.get_strategy()
    pr = s.experimental_distribute_values_from_function(lambda _: np.ones(2, np.float32))
    for op, dest in (
        ("SUM", [pr]),
        ("SUM", (pr,)),
        (VariableAggregation.SUM, pr),
        (VariableAggregation.SUM, [pr]),
        ("XX", [pr]),
    ):
        with pytest.raises(AssertionError):
            s.extended.reduce_to(op, pr, dest)
    # the default strategy's batch_reduce_to is reduce_to per pair: TF asserts there too
    if config == "default":
        with pytest.raises(AssertionError):
            s.extended.batch_reduce_to("SUM", [(pr, [pr])])


def _concat_error(tail: str) -> str:
    return f"ConcatOp : {tail} [Op:ConcatV2] name: concat"


@pytest.mark.parametrize(
    ("value", "axis", "expected"),
    [
        ([[1, 2], [3, 4]], -1, [[1, 2, 1, 2], [3, 4, 3, 4]]),
        ([[1, 2], [3, 4]], -2, [[1, 2], [3, 4], [1, 2], [3, 4]]),
        (
            [[1, 2], [3, 4]],
            -3,
            "Expected concatenating dimensions in the range [-2, 2), but got -3",
        ),
        ([[1, 2], [3, 4]], 2, "Expected concatenating dimensions in the range [-2, 2), but got 2"),
        (5, 0, "Can't concatenate scalars (use tf.stack instead)"),
        ([1, 2], 1, "Expected concatenating dimensions in the range [-1, 1), but got 1"),
    ],
)
def test_int32_gather_at_m2_is_tfs_in_process_concat(value: Any, axis: int, expected: Any) -> None:
    # TF 2.21's MirroredStrategy gathers int32 values in-process (array_ops.concat, not the
    # collective): a negative axis counts from the end, a bad one is ConcatV2's
    # InvalidArgumentError. (The collective's Range check must not apply here.)
    s = _m2()
    pr = s.experimental_distribute_values_from_function(lambda _: np.array(value, np.int32))

    def all_gather() -> Any:
        return s.run(lambda: ds.get_replica_context().all_gather(np.array(value, np.int32), axis))

    if isinstance(expected, str):
        for call in (lambda: s.gather(pr, axis=axis), all_gather):
            with pytest.raises(errors.InvalidArgumentError) as info:
                call()
            assert str(info.value) == _concat_error(expected)
        return
    got = s.gather(pr, axis=axis)
    assert got.dtype == np.int32 and got.tolist() == expected
    for g in s.experimental_local_results(all_gather()):
        assert g.dtype == np.int32 and g.tolist() == expected


_NOT_A_DESTINATION = (
    "destinations must be one of a `DistributedValues` object, a tf.Variable object, or a device "
    "string."
)


@pytest.mark.parametrize(
    ("leaf", "name"), [(1.5, "float"), (2, "int"), ([1.0, 2], "float"), (None, "NoneType")]
)
def test_all_reduce_of_python_values_at_m2_reads_their_dtype_as_tf(leaf: Any, name: str) -> None:
    # TF 2.21: ReplicaContext.all_reduce hands Python leaves to batch_reduce_to unconverted and
    # MirroredStrategy reads their dtype: AttributeError. We converted and reduced them
    # (1.5 -> SUM 3.0), or raised a conversion ValueError for None.
    s = _m2()
    for op in ("SUM", "MEAN"):
        with pytest.raises(AttributeError, match=f"^'{name}' object has no attribute 'dtype'$"):
            s.run(lambda op=op: ds.get_replica_context().all_reduce(op, leaf))


def test_all_reduce_of_python_values_under_the_default_strategy_converts_as_tf() -> None:
    # TF 2.21: the default strategy returns each value, which TF's gradient wrapper makes a
    # tensor: float32 1.5, int32 2; with an IndexedSlices in the nest (no wrapper) the Python
    # number comes back as it is.
    s = ds.get_strategy()
    got = s.run(lambda: ds.get_replica_context().all_reduce("SUM", (1.5, 2)))
    assert [(g.dtype, g.tolist()) for g in got] == [(np.float32, 1.5), (np.int32, 2)]
    isl = IndexedSlices(np.ones((1, 2), np.float32), np.array([0]), np.array([2, 2]))
    got = s.run(lambda: ds.get_replica_context().all_reduce("SUM", (1.5, isl)))
    assert type(got[0]) is float and got[0] == 1.5


@pytest.mark.parametrize("op", ["SUM", "MEAN"])
def test_a_python_number_is_no_destination_as_in_tf(op: str) -> None:
    # TF 2.21 (MirroredStrategy over two CPUs): validate_destinations refuses a Python number;
    # we took it as a destination.
    s = _m2()
    one = np.array(1.5, np.float32)
    with pytest.raises(ValueError) as info:
        s.extended.batch_reduce_to(op, [(one, 1.5)])
    assert str(info.value) == _NOT_A_DESTINATION
    with pytest.raises(ValueError) as info:
        s.extended.broadcast_to(one, 1.5)
    assert str(info.value) == _NOT_A_DESTINATION
    with pytest.raises(AttributeError, match=r"^'float' object has no attribute 'dtype'$"):
        s.extended.batch_reduce_to(op, [(1.5, 1.5)])  # the value's dtype is read first


@pytest.mark.parametrize(
    ("batch", "error", "message"),
    [
        (8.0, TypeError, "float32"),
        (np.float64(8), TypeError, "float64"),
        (np.array(8, np.float16), TypeError, "float16"),
        (True, TypeError, "bool"),
        (np.array([8]), ValueError, None),
    ],
)
def test_global_batch_size_errors_say_what_tf_says(batch: Any, error: Any, message: Any) -> None:
    # TF 2.21's assert_integer / assert_scalar messages (ours were shorter)
    if message is None:
        expected = "global_batch_size must be scalar..  Expected scalar shape, saw shape: (1,)."
    else:
        expected = (
            'global_batch_size must be an integer..  Expected "x" to be integer type.  Found: '
            f"tensor of dtype <dtype: '{message}'>"
        )
    with pytest.raises(error) as info:
        nn.compute_average_loss(np.array([1.0, 2.0], np.float32), global_batch_size=batch)
    assert str(info.value) == expected


def test_reduce_with_axis_of_bools_names_tfs_allowed_dtypes() -> None:
    # TF 2.21: the TypeError of reduce_sum's op definition, before any axis check
    allowed = (
        "float32, float64, int32, uint8, int16, int8, complex64, int64, qint8, quint8, qint32, "
        "bfloat16, qint16, quint16, uint16, complex128, float16, uint32, uint64"
    )
    for axis in (0, 5):
        with pytest.raises(TypeError) as info:
            ds.get_strategy().reduce("SUM", np.array([True]), axis=axis)
        assert str(info.value) == (
            f"Value passed to parameter 'input' has DataType bool not in list of allowed "
            f"values: {allowed}"
        )


def test_all_gather_of_python_numbers_as_tf() -> None:
    # TF 2.21 at M2: a Python number every replica passes is one object, which TF's regroup
    # keeps unwrapped and its gather returns (a float32 tensor after its gradient wrapper);
    # numbers that differ per replica become a PerReplica whose dtype MirroredStrategy reads:
    # AttributeError. The default strategy converts them. We gathered 0-d arrays (TF's Range
    # error) instead.
    s = _m2()
    got = s.experimental_local_results(
        s.run(lambda: ds.get_replica_context().all_gather([1.5, 3], 0))
    )
    assert [[(x.dtype, x.tolist()) for x in g] for g in got] == [
        [(np.float32, 1.5), (np.int32, 3)]
    ] * 2

    def per_replica() -> Any:
        ctx = ds.get_replica_context()
        return ctx.all_gather(float(ctx.replica_id_in_sync_group), 0)

    with pytest.raises(AttributeError, match=r"^'float' object has no attribute 'dtype'$"):
        s.run(per_replica)
    got = ds.get_strategy().run(lambda: ds.get_replica_context().all_gather(1.5, 0))
    assert got.dtype == np.float32 and got.tolist() == 1.5


@pytest.mark.parametrize(
    ("shapes", "dtypes", "message"),
    [
        (
            [(1, 1), (1,)],
            [np.int32, np.int32],
            "ConcatOp : Ranks of all input tensors should match: shape[0] = [1,1] vs. "
            "shape[1] = [1]",
        ),
        (
            [(1, 2), (1, 3)],
            [np.int32, np.int32],
            "ConcatOp : Dimension 1 in both shapes must be equal: shape[0] = [1,2] vs. "
            "shape[1] = [1,3]",
        ),
        (
            [(1, 2), (1, 2)],
            [np.int32, np.int64],
            "cannot compute ConcatV2 as input #1(zero-based) was expected to be a int32 tensor "
            "but is a int64 tensor",
        ),
    ],
)
def test_sparse_int32_all_reduce_at_m2_fails_as_tfs_concat(
    shapes: Any, dtypes: Any, message: str
) -> None:
    # TF 2.21 (M2): MirroredStrategy concatenates int32 IndexedSlices in-process; replicas'
    # slices that do not concatenate raise ConcatV2's InvalidArgumentError. Ours raised numpy's
    # ValueError (ranks, dimensions) or promoted the dtype.
    s = _m2()

    def fn() -> Any:
        ctx = ds.get_replica_context()
        r = int(ctx.replica_id_in_sync_group)
        values = np.ones(shapes[r], dtypes[r])
        isl = IndexedSlices(values, np.arange(1), np.array([4, *shapes[r][1:]]))
        return ctx.all_reduce("SUM", isl)

    with pytest.raises(errors.InvalidArgumentError) as info:
        s.run(fn)
    assert str(info.value) == f"{message} [Op:ConcatV2] name: concat"

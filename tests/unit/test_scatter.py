"""``scatter_*`` and ``batch_scatter_update`` on variables, against what TF 2.21 did.

Every expected value, type and message below is a literal recorded from TF 2.21.0 (CPU) running
the same program (``tf.constant(x)`` where these tests pass a numpy array): a plain
``tf.Variable`` in eager mode, and ``MirroredStrategy`` on two logical CPUs ("M2") in cross-
replica and replica context. TF wraps kernel messages as ``{{function_node ...}} <message>
[Op:<op>] name: ``; the ``<message>`` and ``<op>`` are what is pinned.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import mwms_mpi
import mwms_mpi.distribute as ds
from mwms_mpi import errors
from mwms_mpi.types import VariableAggregation as A
from mwms_mpi.types import VariableSynchronization
from mwms_mpi.values.variables import UnreadVariable

S = mwms_mpi.IndexedSlices
OPS = ["add", "sub", "mul", "div", "min", "max", "update"]


def f32(x: Any) -> np.ndarray:
    return np.array(x, dtype=np.float32)


def i32(x: Any) -> np.ndarray:
    return np.array(x, dtype=np.int32)


# (op, initial value, values, indices) -> the variable after, as TF 2.21 printed it.
V4 = [1.0, 2.0, 3.0, 4.0]
M32 = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
PLAIN = {
    "1d": (V4, [5.0, -1.0], [3, 0]),
    "dup": (V4, [2.0, 3.0], [1, 1]),
    "2d": (M32, [[2.0, 0.5]], [2]),
    "2d_scalar_values": (M32, 2.0, [2, 0]),
    "2d_index": (M32, [[[1.0, 2.0]]], [[1]]),
}
TF_PLAIN = {
    ("add", "1d"): [0.0, 2.0, 3.0, 9.0],
    ("add", "dup"): [1.0, 7.0, 3.0, 4.0],
    ("add", "2d"): [[1.0, 2.0], [3.0, 4.0], [7.0, 6.5]],
    ("add", "2d_scalar_values"): [[3.0, 4.0], [3.0, 4.0], [7.0, 8.0]],
    ("add", "2d_index"): [[1.0, 2.0], [4.0, 6.0], [5.0, 6.0]],
    ("sub", "1d"): [2.0, 2.0, 3.0, -1.0],
    ("sub", "dup"): [1.0, -3.0, 3.0, 4.0],
    ("sub", "2d"): [[1.0, 2.0], [3.0, 4.0], [3.0, 5.5]],
    ("sub", "2d_scalar_values"): [[-1.0, 0.0], [3.0, 4.0], [3.0, 4.0]],
    ("sub", "2d_index"): [[1.0, 2.0], [2.0, 2.0], [5.0, 6.0]],
    ("mul", "1d"): [-1.0, 2.0, 3.0, 20.0],
    ("mul", "dup"): [1.0, 12.0, 3.0, 4.0],
    ("mul", "2d"): [[1.0, 2.0], [3.0, 4.0], [10.0, 3.0]],
    ("mul", "2d_scalar_values"): [[2.0, 4.0], [3.0, 4.0], [10.0, 12.0]],
    ("mul", "2d_index"): [[1.0, 2.0], [3.0, 8.0], [5.0, 6.0]],
    ("div", "1d"): [-1.0, 2.0, 3.0, 0.800000011920929],
    ("div", "dup"): [1.0, 0.3333333432674408, 3.0, 4.0],
    ("div", "2d"): [[1.0, 2.0], [3.0, 4.0], [2.5, 12.0]],
    ("div", "2d_scalar_values"): [[0.5, 1.0], [3.0, 4.0], [2.5, 3.0]],
    ("div", "2d_index"): [[1.0, 2.0], [3.0, 2.0], [5.0, 6.0]],
    ("min", "1d"): [-1.0, 2.0, 3.0, 4.0],
    ("min", "dup"): [1.0, 2.0, 3.0, 4.0],
    ("min", "2d"): [[1.0, 2.0], [3.0, 4.0], [2.0, 0.5]],
    ("min", "2d_scalar_values"): [[1.0, 2.0], [3.0, 4.0], [2.0, 2.0]],
    ("min", "2d_index"): [[1.0, 2.0], [1.0, 2.0], [5.0, 6.0]],
    ("max", "1d"): [1.0, 2.0, 3.0, 5.0],
    ("max", "dup"): [1.0, 3.0, 3.0, 4.0],
    ("max", "2d"): [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
    ("max", "2d_scalar_values"): [[2.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
    ("max", "2d_index"): [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
    ("update", "1d"): [-1.0, 2.0, 3.0, 5.0],
    ("update", "dup"): [1.0, 3.0, 3.0, 4.0],
    ("update", "2d"): [[1.0, 2.0], [3.0, 4.0], [2.0, 0.5]],
    ("update", "2d_scalar_values"): [[2.0, 2.0], [3.0, 4.0], [2.0, 2.0]],
    ("update", "2d_index"): [[1.0, 2.0], [1.0, 2.0], [5.0, 6.0]],
}
# int32 variable [7, -7, 9, 1], values [2, 2, 4] at [0, 1, 2]; division truncates toward zero.
TF_INT = {
    "add": [9, -5, 13, 1],
    "sub": [5, -9, 5, 1],
    "mul": [14, -14, 36, 1],
    "div": [3, -3, 2, 1],
    "min": [2, -7, 4, 1],
    "max": [7, 2, 9, 1],
    "update": [2, 2, 4, 1],
}
# (variable after a failed op with values [5.0, 1.0] at [1, 7] on [1, 2, 3, 4]: rows before the
# bad index are applied, as TF's serial CPU kernel does).
TF_AFTER_OUT_OF_RANGE = {
    "add": [1.0, 7.0, 3.0, 4.0],
    "sub": [1.0, -3.0, 3.0, 4.0],
    "mul": [1.0, 10.0, 3.0, 4.0],
    "div": [1.0, 0.4000000059604645, 3.0, 4.0],
    "min": [1.0, 2.0, 3.0, 4.0],
    "max": [1.0, 5.0, 3.0, 4.0],
    "update": [1.0, 5.0, 3.0, 4.0],
}
OP_NAMES = {k: f"ResourceScatter{k.capitalize()}" for k in OPS}


def slices(values: Any, indices: Any) -> mwms_mpi.IndexedSlices:
    return S(f32(values), i32(indices))


@pytest.mark.parametrize("case", sorted(PLAIN))
@pytest.mark.parametrize("op", OPS)
def test_plain_variable_scatter_matches_tf(op: str, case: str) -> None:
    initial, values, indices = PLAIN[case]
    v = mwms_mpi.Variable(initial)
    result = getattr(v, f"scatter_{op}")(slices(values, indices))
    assert type(result) is UnreadVariable
    assert result.dtype == np.float32
    np.testing.assert_array_equal(v.numpy(), f32(TF_PLAIN[(op, case)]))
    np.testing.assert_array_equal(result.numpy(), f32(TF_PLAIN[(op, case)]))


@pytest.mark.parametrize("op", OPS)
def test_integer_variable_scatter_matches_tf(op: str) -> None:
    v = mwms_mpi.Variable([7, -7, 9, 1])
    getattr(v, f"scatter_{op}")(S(i32([2, 2, 4]), i32([0, 1, 2])), use_locking=True, name="x")
    assert v.dtype == np.int32
    np.testing.assert_array_equal(v.numpy(), i32(TF_INT[op]))


def test_integer_division_truncates_toward_zero_as_tf() -> None:
    v = mwms_mpi.Variable([7, -7, 9, 1])
    v.scatter_div(S(i32([2, 2, -4]), i32([0, 1, 2])))
    np.testing.assert_array_equal(v.numpy(), i32([3, -3, -2, 1]))


@pytest.mark.parametrize("op", OPS)
def test_out_of_range_index_matches_tf(op: str) -> None:
    v = mwms_mpi.Variable(V4)
    with pytest.raises(errors.InvalidArgumentError) as info:
        getattr(v, f"scatter_{op}")(slices([5.0, 1.0], [1, 7]))
    assert info.value.message == "indices[1] = 7 is not in [0, 4)"
    assert info.value.op == OP_NAMES[op]
    np.testing.assert_array_equal(v.numpy(), f32(TF_AFTER_OUT_OF_RANGE[op]))
    with pytest.raises(
        errors.InvalidArgumentError, match=r"^indices\[0\] = -1 is not in \[0, 4\)$"
    ):
        getattr(v, f"scatter_{op}")(slices([5.0], [-1]))


def test_out_of_range_first_leaves_the_variable_and_names_multi_dim_positions() -> None:
    v = mwms_mpi.Variable(V4)
    with pytest.raises(errors.InvalidArgumentError):
        v.scatter_add(slices([5.0, 1.0], [7, 1]))
    np.testing.assert_array_equal(v.numpy(), f32(V4))
    with pytest.raises(errors.InvalidArgumentError, match=r"^indices\[1,0\] = 7 is not in"):
        v.scatter_add(slices([[1.0, 2.0], [1.0, 1.0]], [[0, 1], [7, 1]]))
    with pytest.raises(errors.InvalidArgumentError, match=r"^indices = 9 is not in \[0, 4\)$"):
        v.scatter_add(S(f32(1.0), i32(9)))
    np.testing.assert_array_equal(
        v.scatter_add(S(f32(1.0), i32(2))).numpy(), f32([2.0, 4.0, 4.0, 4.0])
    )


@pytest.mark.parametrize("op", OPS)
def test_shape_errors_match_tf(op: str) -> None:
    method = f"scatter_{op}"
    v = mwms_mpi.Variable(V4)
    with pytest.raises(errors.InvalidArgumentError) as info:
        getattr(v, method)(slices([1.0, 2.0], [1]))
    assert info.value.message == (
        "The shape of indices ([1]) must be a prefix of the shape of updates ([2])"
    )
    m = mwms_mpi.Variable(M32)
    with pytest.raises(errors.InvalidArgumentError) as info:
        getattr(m, method)(slices([1.0, 2.0], [1, 2]))
    assert info.value.message == (
        "Must have updates.shape = indices.shape + params.shape[1:] or updates.shape = [], "
        "got updates.shape [2], indices.shape [2], params.shape [3,2]"
    )
    with pytest.raises(errors.InvalidArgumentError) as info:
        getattr(mwms_mpi.Variable(1.0), method)(slices([1.0], [0]))
    assert info.value.message.endswith("got updates.shape [1], indices.shape [1], params.shape []")
    with pytest.raises(errors.InvalidArgumentError) as info:
        getattr(v, method)(slices([1.0, 2.0], [[0, 1]]))
    assert info.value.message.endswith(
        "got updates.shape [2], indices.shape [1,2], params.shape [4]"
    )


@pytest.mark.parametrize("op", OPS)
def test_argument_errors_match_tf(op: str) -> None:
    method = f"scatter_{op}"
    v = mwms_mpi.Variable(V4)
    with pytest.raises(TypeError) as info:
        getattr(v, method)(f32(V4))
    assert str(info.value) == (
        "Argument `sparse_delta` must be a `tf.IndexedSlices`. Received arg: [1. 2. 3. 4.]"
    )
    with pytest.raises(errors.InvalidArgumentError) as info:
        getattr(v, method)(S(f32([1.0]), f32([0.0])))
    assert info.value.message.startswith(
        "Value for attr 'Tindices' of float is not in the list of allowed values: int32, int64"
    )
    # int64 indices, empty slices, numpy float64 values (cast, as TF casts numpy input) work.
    getattr(v, method)(S(f32([2.0]), np.array([0], dtype=np.int64)))
    getattr(v, method)(S(np.zeros([0], np.float32), np.zeros([0], np.int32)))
    assert getattr(v, method)(S(np.array([5.5]), np.array([1]))).dtype == np.float32


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "min", "max"])
def test_bool_variable_only_updates_as_tf(op: str) -> None:
    v = mwms_mpi.Variable([True, False])
    with pytest.raises(errors.InvalidArgumentError) as info:
        getattr(v, f"scatter_{op}")(S(np.array([True]), i32([1])))
    assert info.value.message.startswith(
        "Value for attr 'dtype' of bool is not in the list of allowed values: float, double, "
        "int32, uint8, int16, int8, complex64, int64,"
    )
    np.testing.assert_array_equal(
        v.scatter_update(S(np.array([True]), i32([1]))).numpy(), [True, True]
    )


def test_complex_variable_as_tf() -> None:
    expected = {"add": 4 + 0j, "sub": 0j, "mul": 4 + 0j, "div": 1 + 0j, "update": 2 + 0j}
    for op, value in expected.items():
        v = mwms_mpi.Variable(np.array([1 + 1j, 2.0]))
        getattr(v, f"scatter_{op}")(S(np.array([2 + 0j]), i32([1])))
        assert v.numpy().tolist() == [1 + 1j, value]
    for op in ("min", "max"):
        v = mwms_mpi.Variable(np.array([1 + 1j, 2.0]))
        with pytest.raises(errors.InvalidArgumentError) as info:
            getattr(v, f"scatter_{op}")(S(np.array([2 + 0j]), i32([1])))
        assert info.value.message.startswith(
            f"No OpKernel was registered to support Op 'ResourceScatter{op.capitalize()}'"
        )


def test_scalar_variable_takes_scalar_updates_as_tf() -> None:
    for indices in (i32(0), i32([0])):
        v = mwms_mpi.Variable(1.0)
        assert v.scatter_add(S(f32(2.0), indices)).numpy() == 3.0


def test_division_by_zero_is_refused_before_any_row_as_tf() -> None:
    v = mwms_mpi.Variable(V4)
    with pytest.raises(errors.InvalidArgumentError) as info:
        v.scatter_div(slices([5.0, 0.0], [1, 2]))
    assert (info.value.message, info.value.op) == (
        "updates must not contain 0",
        "ResourceScatterDiv",
    )
    np.testing.assert_array_equal(v.numpy(), f32(V4))


def test_result_is_the_variable_read_when_used_as_tf() -> None:
    v = mwms_mpi.Variable(V4)
    r = v.scatter_add(slices([1.0], [0]))
    v.assign([9.0, 9.0, 9.0, 9.0])
    np.testing.assert_array_equal(r.numpy(), f32([9.0, 9.0, 9.0, 9.0]))
    assert r.name == "UnreadVariable"
    r.scatter_add(slices([1.0], [0]))  # TF: an update of the read writes the variable
    np.testing.assert_array_equal(v.numpy(), f32([10.0, 9.0, 9.0, 9.0]))


# -- batch_scatter_update -----------------------------------------------------------------------

B23 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
TF_BATCH = [
    (B23, [[10.0, 20.0], [30.0, 40.0]], [[0, 2], [1, 0]], [[10.0, 2.0, 20.0], [40.0, 30.0, 6.0]]),
    (B23, [[10.0, 20.0, 30.0]], [1], [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]),
    ([1.0, 2.0, 3.0], [10.0, 20.0], [2, 0], [20.0, 2.0, 10.0]),
    (B23, [[10.0, 11.0], [1.0, 2.0]], [[0, 0], [1, 1]], [[11.0, 2.0, 3.0], [4.0, 2.0, 6.0]]),
    (M32, [[9.0]], [[1]], [[1.0, 9.0], [3.0, 4.0], [5.0, 6.0]]),
]


@pytest.mark.parametrize("case", range(len(TF_BATCH)))
def test_batch_scatter_update_matches_tf(case: int) -> None:
    initial, values, indices, expected = TF_BATCH[case]
    v = mwms_mpi.Variable(initial)
    result = v.batch_scatter_update(slices(values, indices))
    assert type(result) is UnreadVariable
    np.testing.assert_array_equal(v.numpy(), f32(expected))


def test_batch_scatter_update_3d_float64_matches_tf() -> None:
    v = mwms_mpi.Variable(np.arange(12.0).reshape(2, 3, 2))
    v.batch_scatter_update(S(np.array([[[1.0, 1.0]], [[2.0, 2.0]]]), i32([[2], [0]])))
    expected = [[[0.0, 1.0], [2.0, 3.0], [1.0, 1.0]], [[2.0, 2.0], [8.0, 9.0], [10.0, 11.0]]]
    assert v.numpy().tolist() == expected


BATCH_ERRORS = [
    ([[10.0], [30.0]], [[0], [3]], "indices[1,0] = [1, 3] does not index into shape [2,3]"),
    ([[10.0, 1.0, 1.0]], [2], "indices[0] = [2] does not index into shape [2,3]"),
    ([[10.0], [30.0]], [[0], [-1]], "indices[1,0] = [1, -1] does not index into shape [2,3]"),
    (
        [[10.0, 1.0]],
        [[0], [1]],
        "Dimensions [0,1) of indices[shape=[2,1,2]] = 2 must match dimensions [0,1) of "
        "updates[shape=[1,2]] = 1",
    ),
    (
        [[10.0], [1.0], [2.0]],
        [[0], [1], [1]],
        "indices[2,0] = [2, 1] does not index into shape [2,3]",
    ),
    (
        [10.0, 1.0, 2.0],
        1,
        "Dimensions [0,1) of indices[shape=[1]] = 1 must match dimensions [0,1) of "
        "updates[shape=[3]] = 3",
    ),
]


@pytest.mark.parametrize("case", range(len(BATCH_ERRORS)))
def test_batch_scatter_update_errors_match_tf(case: int) -> None:
    values, indices, message = BATCH_ERRORS[case]
    v = mwms_mpi.Variable(B23)
    with pytest.raises(errors.InvalidArgumentError) as info:
        v.batch_scatter_update(slices(values, indices))
    assert (info.value.message, info.value.op) == (message, "ResourceScatterNdUpdate")


def test_batch_scatter_update_partial_writes_and_other_errors_as_tf() -> None:
    v = mwms_mpi.Variable(B23)
    with pytest.raises(errors.InvalidArgumentError):
        v.batch_scatter_update(slices([[10.0], [30.0]], [[0], [3]]))
    np.testing.assert_array_equal(v.numpy(), f32([[10.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    v = mwms_mpi.Variable(B23)
    with pytest.raises(errors.InvalidArgumentError, match=r"^indices\[0,0\] = \[0, 3\] does"):
        v.batch_scatter_update(slices([[10.0], [30.0]], [[3], [0]]))
    np.testing.assert_array_equal(v.numpy(), f32([[1.0, 2.0, 3.0], [30.0, 5.0, 6.0]]))
    with pytest.raises(errors.InvalidArgumentError) as info:
        mwms_mpi.Variable(1.0).batch_scatter_update(slices([1.0], [0]))
    assert info.value.message == "Output must be at least 1-D, got shape: []"
    with pytest.raises(errors.InvalidArgumentError) as info:
        v.batch_scatter_update(S(f32([[10.0], [30.0]]), f32([[0.0], [1.0]])))
    assert info.value.message.startswith(
        "Value for attr 'Tindices' of float is not in the list of allowed values: int32, int64"
    )
    assert info.value.op == "ResourceScatterNdUpdate"
    with pytest.raises(TypeError, match=r"^Argument `sparse_delta` must be a `tf.IndexedSlices`"):
        v.batch_scatter_update(f32([1.0]))
    r = v.batch_scatter_update(slices([[0.5], [0.25]], [[0], [1]]))
    v.assign(np.zeros([2, 3], np.float32))
    np.testing.assert_array_equal(r.numpy(), np.zeros([2, 3], np.float32))


# -- distributed variables under MirroredStrategy on two CPUs (TF's "M2") ----------------------

M2_CROSS = {  # values [5, 2] at [3, 0] on [1, 2, 3, 4], in cross-replica context: every copy
    "add": [3.0, 2.0, 3.0, 9.0],
    "sub": [-1.0, 2.0, 3.0, -1.0],
    "mul": [2.0, 2.0, 3.0, 20.0],
    "div": [0.5, 2.0, 3.0, 0.800000011920929],
    "min": [1.0, 2.0, 3.0, 4.0],
    "max": [2.0, 2.0, 3.0, 5.0],
    "update": [2.0, 2.0, 3.0, 5.0],
}
# replica r passes values [2 + r, 3 + r] at [r, 3]: NONE updates each copy with its own; SUM and
# MEAN concatenate the replicas' slices (MEAN halves the values); ONLY_FIRST_REPLICA uses r = 0.
M2_REPLICA = {
    ("NONE", "add"): [[3.0, 2.0, 3.0, 7.0], [1.0, 5.0, 3.0, 8.0]],
    ("NONE", "sub"): [[-1.0, 2.0, 3.0, 1.0], [1.0, -1.0, 3.0, 0.0]],
    ("NONE", "mul"): [[2.0, 2.0, 3.0, 12.0], [1.0, 6.0, 3.0, 16.0]],
    ("NONE", "div"): [[0.5, 2.0, 3.0, 1.3333333730697632], [1.0, 0.6666666865348816, 3.0, 1.0]],
    ("NONE", "min"): [[1.0, 2.0, 3.0, 3.0], [1.0, 2.0, 3.0, 4.0]],
    ("NONE", "max"): [[2.0, 2.0, 3.0, 4.0], [1.0, 3.0, 3.0, 4.0]],
    ("NONE", "update"): [[2.0, 2.0, 3.0, 3.0], [1.0, 3.0, 3.0, 4.0]],
    ("SUM", "add"): [3.0, 5.0, 3.0, 11.0],
    ("SUM", "sub"): [-1.0, -1.0, 3.0, -3.0],
    ("SUM", "mul"): [2.0, 6.0, 3.0, 48.0],
    ("SUM", "div"): [0.5, 0.6666666865348816, 3.0, 0.3333333432674408],
    ("MEAN", "add"): [2.0, 3.5, 3.0, 7.5],
    ("MEAN", "sub"): [0.0, 0.5, 3.0, 0.5],
    ("MEAN", "mul"): [1.0, 3.0, 3.0, 12.0],
    ("MEAN", "div"): [1.0, 1.3333333730697632, 3.0, 1.3333333730697632],
    ("ONLY_FIRST_REPLICA", "add"): [3.0, 2.0, 3.0, 7.0],
    ("ONLY_FIRST_REPLICA", "sub"): [-1.0, 2.0, 3.0, 1.0],
    ("ONLY_FIRST_REPLICA", "mul"): [2.0, 2.0, 3.0, 12.0],
    ("ONLY_FIRST_REPLICA", "div"): [0.5, 2.0, 3.0, 1.3333333730697632],
    ("ONLY_FIRST_REPLICA", "min"): [1.0, 2.0, 3.0, 3.0],
    ("ONLY_FIRST_REPLICA", "max"): [2.0, 2.0, 3.0, 4.0],
    ("ONLY_FIRST_REPLICA", "update"): [2.0, 2.0, 3.0, 3.0],
}
AGGREGATIONS = ["NONE", "SUM", "MEAN", "ONLY_FIRST_REPLICA"]


def scatter_error(op: str, aggregation: str) -> str:
    return (
        f"scatter_{op} is only supported for mirrored variable (variable created within certain "
        "`tf.distribute.Strategy` scope) with NONE or `ONLY_FIRST_REPLICA` aggregation, got: "
        f"VariableAggregationV2.{aggregation}."
    )


@pytest.fixture(scope="module")
def m2() -> ds.MirroredStrategy:
    return ds.MirroredStrategy(["/cpu:0", "/cpu:1"])


def components(strategy: Any, v: Any) -> list[list[float]]:
    return [c.numpy().tolist() for c in strategy.experimental_local_results(v)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_mirrored_cross_replica_scatter_matches_tf(m2: Any, aggregation: str, op: str) -> None:
    with m2.scope():
        v = mwms_mpi.Variable(V4, aggregation=A[aggregation])
    call = lambda: getattr(v, f"scatter_{op}")(slices([5.0, 2.0], [3, 0]))  # noqa: E731
    if op in ("min", "max", "update") and aggregation in ("SUM", "MEAN"):
        with pytest.raises(NotImplementedError) as info:
            call()
        assert str(info.value) == scatter_error(op, aggregation)
        assert components(m2, v) == [V4, V4]
        return
    result = call()
    assert type(result).__name__ == "Mirrored"
    assert [r.tolist() for r in result.values] == [M2_CROSS[op]] * 2
    assert components(m2, v) == [M2_CROSS[op]] * 2


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_mirrored_replica_scatter_matches_tf(m2: Any, aggregation: str, op: str) -> None:
    with m2.scope():
        v = mwms_mpi.Variable(V4, aggregation=A[aggregation])

    def fn() -> Any:
        r = float(ds.get_replica_context().replica_id_in_sync_group)
        return getattr(v, f"scatter_{op}")(slices([2.0 + r, 3.0 + r], [int(r), 3]))

    expected = M2_REPLICA.get((aggregation, op))
    if expected is None:
        with pytest.raises(NotImplementedError) as info:
            m2.run(fn)
        assert str(info.value) == scatter_error(op, aggregation)
        return
    result = m2.run(fn)
    assert type(result).__name__ == "PerReplica"
    if aggregation == "NONE":
        assert [type(r) for r in result.values] == [UnreadVariable] * 2
        assert [r.numpy().tolist() for r in result.values] == expected
        assert components(m2, v) == expected
    else:
        assert [r.tolist() for r in result.values] == [expected] * 2
        assert components(m2, v) == [expected] * 2


def test_mirrored_replica_scatter_of_dense_value_reduces_then_raises_as_tf(m2: Any) -> None:
    with m2.scope():
        v = mwms_mpi.Variable(V4, aggregation=A.SUM)
    with pytest.raises(TypeError) as info:
        m2.run(lambda: v.scatter_add(f32([1.0, 1.0, 1.0, 1.0])))
    assert str(info.value).endswith("Received arg: [2. 2. 2. 2.]")


@pytest.mark.parametrize("sync", ["ON_WRITE", "ON_READ"])
def test_distributed_batch_scatter_update_is_not_implemented_as_tf(m2: Any, sync: str) -> None:
    with m2.scope():
        v = mwms_mpi.Variable(V4, synchronization=VariableSynchronization[sync], aggregation=A.NONE)
    with pytest.raises(NotImplementedError) as info:
        v.batch_scatter_update(slices([1.0], [0]))
    assert str(info.value) == ""
    with pytest.raises(NotImplementedError) as info:
        m2.run(lambda: v.batch_scatter_update(slices([1.0], [0])))
    assert str(info.value) == ""


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_sync_on_read_scatter_raises_as_tf(m2: Any, aggregation: str, op: str) -> None:
    with m2.scope():
        v = mwms_mpi.Variable(
            V4, synchronization=VariableSynchronization.ON_READ, aggregation=A[aggregation]
        )
    message = f"Variables with `synchronization=ON_READ` doesn't support `scatter_{op}`"
    with pytest.raises(NotImplementedError) as info:
        getattr(v, f"scatter_{op}")(slices([5.0, 2.0], [3, 0]))
    assert str(info.value) == message
    with pytest.raises(NotImplementedError) as info:
        m2.run(lambda: getattr(v, f"scatter_{op}")(slices([5.0, 2.0], [3, 0])))
    assert str(info.value) == message
    assert components(m2, v) == [V4, V4]


def test_one_replica_returns_unread_variable_as_tf() -> None:
    strategy = ds.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        v = mwms_mpi.Variable(V4, aggregation=A.SUM)
    result = v.scatter_add(slices([5.0, 2.0], [3, 0]))
    assert type(result) is UnreadVariable
    assert result.numpy().tolist() == [3.0, 2.0, 3.0, 9.0]
    result = strategy.run(lambda: v.scatter_sub(slices([2.0, 3.0], [0, 3])))
    assert type(result) is UnreadVariable
    assert result.numpy().tolist() == [1.0, 2.0, 3.0, 6.0]
    inside = strategy.extended.update(v, lambda c, d: c.scatter_add(d), args=(slices([1.0], [0]),))
    assert type(inside) is UnreadVariable and inside.numpy().tolist() == [2.0, 2.0, 3.0, 6.0]
